"""GRPO learns: the tiny model's reward on an easy family rises clearly under GRPO with our rollout hook.

A random tiny model never emits a valid tool call, so it is first warmed up by supervised steps on the family's
oracle trajectories (its ``reference_solution`` rendered as a ``<tool_call>``), stopped early on purpose: the
warm model submits correctly only part of the time when sampling at temperature 1. GRPO (TRL's trainer, our
``EnvRolloutFunc`` running real episodes through ``env_client.Env`` on a sandbox pool, the oracle grader's
reward) must then raise the sampled success rate clearly: the test measures it before and after on the same
prompts with the same number of episodes and asserts a gain of at least ``MIN_GAIN``.

The family is declared in the test's tmp dir (``family.yaml`` + ``tasks.jsonl``): every question shows the
number to submit. The warm-up encodes the shared system prompt (about 850 tokens with the tiny tokenizer, the
same for every task) once per step without gradient and trains on the short rest (question, generation prompt
and the oracle's reply) with that prefix cached; the forward computation is the one generation runs, only the
gradient through the shared prefix is left out. That keeps the warm-up to seconds on two CPU cores.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from env_client import Env, EnvConfig, tool_schemas
from env_client.policies import render_action
from env_client.tokens import render_prompt
from medcopilot.rewards_adapter import EpisodeReward
from medcopilot.rollout_func import EnvRolloutFunc, PromptIndex

FAMILY = "say_number"
QUESTIONS = ["Submit the number 7.", "Please submit 7 as the answer.", "The answer is 7; submit it.",
             "Reply with the number 7."]
SFT_STEPS, SFT_BATCH, SFT_LR = 70, 8, 3e-3
GRPO_STEPS, GROUP, GRPO_LR = 20, 16, 1e-3
EVAL_REPS = 12  # episodes per question for each reward measurement
MIN_GAIN = 0.2


def _declare_family(root: Path) -> Path:
    fam = root / FAMILY
    fam.mkdir(parents=True)
    (fam / "family.yaml").write_text(f"name: {FAMILY}\nanswer_type: integer\nactions: [submit_answer]\n"
                                     "max_turns: 1\nsplits: [train, test]\n", encoding="utf-8")
    lines = [{"question": q, "answer": 7, "split": "train"} for q in QUESTIONS]
    (fam / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return root


def _sft_warmup(model, prompts: list[list[int]], targets: list[list[int]], *, steps: int, batch: int, lr: float,
                pad_id: int, seed: int = 0) -> float:
    """Teacher-forced steps on ``prompt + target`` (loss on target only), the shared prompt prefix cached.

    Returns the last step's loss.
    """
    shared = 0
    while all(len(p) > shared and p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    prefix = torch.tensor([prompts[0][:shared]])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        with torch.no_grad():
            cache = model(input_ids=prefix, use_cache=True).past_key_values
        cache.batch_repeat_interleave(batch)
        rows = torch.randint(0, len(prompts), (batch,), generator=gen).tolist()
        seqs = [prompts[r][shared:] + targets[r] for r in rows]
        width = max(map(len, seqs))
        ids = torch.full((batch, width), pad_id)
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, shared + width), dtype=torch.long)
        mask[:, :shared] = 1
        for i, (r, seq) in enumerate(zip(rows, seqs)):
            ids[i, :len(seq)] = torch.tensor(seq)
            labels[i, len(seq) - len(targets[r]):len(seq)] = torch.tensor(targets[r])
            mask[i, shared:shared + len(seq)] = 1
        positions = torch.arange(shared, shared + width).expand(batch, width)
        loss = model(input_ids=ids, attention_mask=mask, past_key_values=cache, position_ids=positions,
                     labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item()


def _mean_reward(rollout: EnvRolloutFunc, model, prompts: list, reps: int) -> float:
    model.eval()
    out = rollout.run([p for p in prompts for _ in range(reps)], rollout.hf_generator(model, temperature=1.0))
    return statistics.fmean(r for r in out["reward_correctness"] if r is not None)


def test_grpo_raises_reward_of_an_sft_warmed_tiny_model(tiny_model_dir, tmp_path, quiet_training_env):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import sandbox
    import tasks
    from env_client.prompts import initial_messages

    started = time.monotonic()
    root = _declare_family(tmp_path / "tasks")
    family = tasks.make(FAMILY, root=root)
    instances = family.instances("train")
    index = PromptIndex.from_instances(instances, render=lambda inst: initial_messages(inst, family.actions))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)

    # ---- warm-up on oracle trajectories: the reference solution as the model would write it
    tools = tool_schemas(family.actions)
    prompts = [render_prompt(tok, row["prompt"], tools) for row in index.rows]
    targets = []
    for inst in instances:
        (step,) = family.reference_solution(inst)
        targets.append(tok(render_action(step["action"], step["params"]), add_special_tokens=False)["input_ids"]
                       + [tok.eos_token_id])
    sft_loss = _sft_warmup(model, prompts, targets, steps=SFT_STEPS, batch=SFT_BATCH, lr=SFT_LR,
                           pad_id=tok.pad_token_id)

    pool = sandbox.make_pool("local", workers=GROUP, allow_unisolated=True)  # submit-only: no code runs
    try:
        rollout = EnvRolloutFunc(
            make_env=lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=1)), index=index,
            tokenizer=tok, max_new_tokens=32, concurrency=GROUP, seed=0, flush_s=30.0)
        dataset_prompts = [row["prompt"] for row in index.rows]
        before = _mean_reward(rollout, model, dataset_prompts, EVAL_REPS)

        # ---- GRPO through TRL with our hook
        args = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=GRPO_STEPS, per_device_train_batch_size=GROUP,
                          num_generations=GROUP, learning_rate=GRPO_LR, lr_scheduler_type="constant", beta=0.0,
                          loss_type="dapo", top_p=1.0, top_k=0, use_cpu=True, bf16=False,
                          activation_checkpointing=False, logging_steps=1, report_to=[], save_strategy="no",
                          disable_tqdm=True, seed=0, max_completion_length=64)
        trainer = GRPOTrainer(model=model, reward_funcs=[EpisodeReward("correctness", group_size=GROUP)], args=args,
                              train_dataset=Dataset.from_list(index.rows), processing_class=tok,
                              rollout_func=rollout)
        trainer.train()
        after = _mean_reward(rollout, trainer.model, dataset_prompts, EVAL_REPS)
    finally:
        pool.close()

    train_rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    print(f"\n[grpo-learning] SFT warm-up {SFT_STEPS} steps (last loss {sft_loss:.3f}); sampled reward before GRPO "
          f"{before:.3f}, after {GRPO_STEPS} GRPO steps {after:.3f}; per-step training reward "
          f"{[round(r, 2) for r in train_rewards]}; {time.monotonic() - started:.0f} s")
    assert 0.05 <= before <= 0.8, f"the warm start should be partly right (got {before:.3f}); retune SFT_STEPS"
    assert after >= before + MIN_GAIN, f"GRPO did not raise the reward: {before:.3f} -> {after:.3f}"
