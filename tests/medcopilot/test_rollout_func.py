"""Contract of GRPO's ``rollout_func`` hook: what TRL 1.16 hands it and what it must hand back.

Two levels: the hook run directly on a tiny random model (ids, masks and log-probs checked token by token), and
one real ``GRPOTrainer`` step that calls it exactly as TRL does (prompts repeated ``num_generations`` times).
The task family is declared in the test's tmp dir (``family.yaml`` + ``tasks.jsonl``) with ``code_execution``
and ``submit_answer``; a random model never emits a valid call, so every episode runs all its turns and the
completion interleaves model turns with environment observations.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from medagentgym.env_client import Env, EnvConfig, tool_schemas
from medagentgym.env_client.tokens import render_prompt
from medagentgym.medcopilot.rewards_adapter import EpisodeReward
from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex, prompt_key

MAX_TURNS = 3
GROUP = 4


def _declare_family(root: Path, name: str = "echo_digit") -> Path:
    fam = root / name
    fam.mkdir(parents=True)
    (fam / "family.yaml").write_text(
        f"name: {name}\nanswer_type: integer\nactions: [code_execution, submit_answer]\nmax_turns: {MAX_TURNS}\n"
        "splits: [train, test]\n", encoding="utf-8")
    lines = [{"question": f"Submit the number {n}.", "answer": n, "split": "train"} for n in range(3)]
    lines.append({"question": "Submit the number 0.", "answer": 0, "split": "train"})  # same prompt as item 0
    (fam / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return root


def _qwen_generation_config(tokenizer):
    """Qwen2.5-Instruct's published sampling defaults, which ``generate`` would inherit if we let it."""
    from transformers import GenerationConfig

    return GenerationConfig(do_sample=True, repetition_penalty=1.05, top_k=20, top_p=0.8, temperature=0.7,
                            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


@pytest.fixture(scope="module")
def setup(tiny_model_dir, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym import sandbox
    from medagentgym import tasks
    from medagentgym.env_client.prompts import initial_messages

    root = _declare_family(tmp_path_factory.mktemp("tasks"))
    family = tasks.make("echo_digit", root=root)
    index = PromptIndex.from_instances(family.instances("train"),
                                       render=lambda inst: initial_messages(inst, family.actions))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model.generation_config = _qwen_generation_config(tokenizer)  # what a real checkpoint brings along
    pool = sandbox.make_pool("local", workers=4, allow_unisolated=True)
    rollout = EnvRolloutFunc(
        make_env=lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=MAX_TURNS)), index=index,
        tokenizer=tokenizer, max_new_tokens=12, max_completion_tokens=400, concurrency=4, seed=0)
    yield {"root": root, "index": index, "tokenizer": tokenizer, "model": model, "rollout": rollout,
           "family": family, "pool": pool}
    pool.close()


def test_prompt_index_maps_prompts_back_and_drops_duplicates(setup):
    index = setup["index"]
    assert len(index.rows) == 3 and index.dropped == ["echo_digit/train/0003"]
    for row in index.rows:
        assert index.lookup(row["prompt"]).id == row["instance_id"]
        assert row["prompt"][-1]["role"] == "user"
    with pytest.raises(KeyError, match="not in the PromptIndex"):
        index.lookup([{"role": "user", "content": "something else"}])
    assert prompt_key(index.rows[0]["prompt"]) != prompt_key(index.rows[1]["prompt"])


def test_hook_returns_one_exact_masked_completion_per_row(setup):
    rollout, tok, model = setup["rollout"], setup["tokenizer"], setup["model"]
    prompts = [row["prompt"] for row in setup["index"].rows[:2] for _ in range(GROUP)]  # as TRL repeats them
    out = rollout.run(prompts, rollout.hf_generator(model.eval(), temperature=1.0))

    n = len(prompts)
    for key in ("prompt_ids", "completion_ids", "env_mask", "logprobs", "reward_correctness", "episode_stats"):
        assert len(out[key]) == n, key
    tools = tool_schemas(setup["family"].actions)
    for i, prompt in enumerate(prompts):
        ids, mask, lps = out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        assert len(mask) == len(ids) == len(lps) > 0
        # the prompt ids are the chat template's render of the dataset prompt: what TRL logs is what was seen
        assert out["prompt_ids"][i] == render_prompt(tok, prompt, tools)
        stats = out["episode_stats"][i]
        assert stats["turns"] == MAX_TURNS and stats["truncated"] and not stats["success"]
        assert out["reward_correctness"][i] == 0.0
        # env tokens exist between turns and are masked: each observation turn opens a user/tool message
        env_text = tok.decode([t for t, m in zip(ids, mask) if m == 0])
        assert env_text.count("<|im_start|>user") == MAX_TURNS - 1
        assert stats["model_tokens"] == sum(mask) and stats["env_tokens"] == len(mask) - sum(mask)
        # the completion ends with the model's last turn: its own <|im_end|>, or (cut by max_new_tokens) none,
        # so TRL counts it as truncated
        assert mask[-1] == 1

    # The ids are exactly what the model saw: rescoring prompt+completion reproduces the sampling log-probs of
    # every model token (a re-tokenized history would shift or change them).
    for i in range(n):
        p, c = out["prompt_ids"][i], out["completion_ids"][i]
        with torch.no_grad():
            logits = model(torch.tensor([p + c])).logits[0, len(p) - 1:-1].float()
        rescored = logits.log_softmax(-1).gather(1, torch.tensor(c)[:, None])[:, 0]
        model_pos = [k for k, m in enumerate(out["env_mask"][i]) if m == 1]
        sampled = torch.tensor([out["logprobs"][i][k] for k in model_pos])
        # float32 on CPU; the checkpoint's repetition penalty / top-k / top-p (0.05 apart) are not inherited
        assert torch.allclose(rescored[model_pos], sampled, atol=1e-4), (i, (rescored[model_pos] - sampled).abs().max())


def test_a_row_samples_the_same_alone_or_in_any_batch_and_keeps_no_scores(setup):
    from medagentgym.medcopilot.rollout_func import episode_seed, hf_batch_generate

    tok, model = setup["tokenizer"], setup["model"].eval()
    contexts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("SELECT value", "hello there, how are", "x")]
    seeds = [episode_seed(0, 0, 1, row) for row in range(3)]
    kwargs_seen = []
    generate = model.generate

    def recording_generate(*args, **kwargs):
        kwargs_seen.append(kwargs)
        return generate(*args, **kwargs)

    model.generate = recording_generate
    try:
        together = hf_batch_generate(model, tok, contexts, seeds=seeds, max_new_tokens=10)
        alone = [hf_batch_generate(model, tok, [c], seeds=[s], max_new_tokens=10) for c, s in zip(contexts, seeds)]
        shuffled = hf_batch_generate(model, tok, contexts[::-1], seeds=seeds[::-1], max_new_tokens=10)
    finally:
        del model.generate
    for i in range(3):
        assert together[0][i] == alone[i][0][0] == shuffled[0][2 - i]
        assert together[1][i] == pytest.approx(alone[i][1][0], abs=1e-5)
    assert together[0][0] != hf_batch_generate(model, tok, contexts[:1], seeds=[seeds[0] + 1], max_new_tokens=10)[0][0]
    # only the sampled token's logprob is kept per step: generate never returns (B, T, V) scores or logits
    assert kwargs_seen and not any(k.get("output_scores") or k.get("output_logits") for k in kwargs_seen)
    assert all(k["generation_config"].repetition_penalty == 1.0 for k in kwargs_seen)


def test_episode_seeds_differ_by_rank_call_and_row():
    from medagentgym.medcopilot.rollout_func import episode_seed

    seeds = {episode_seed(0, rank, call, row) for rank in range(2) for call in range(3) for row in range(8)}
    assert len(seeds) == 2 * 3 * 8 and all(0 <= s < 1 << 62 for s in seeds)
    assert episode_seed(5, 1, 2, 3) == episode_seed(5, 1, 2, 3)


def test_one_real_grpo_step_calls_the_hook_as_documented(setup, tmp_path, quiet_training_env):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rollout = setup["rollout"]
    seen: list[list] = []
    returned: list[dict] = []

    def recording_hook(prompts, trainer):
        seen.append(prompts)
        out = rollout(prompts, trainer)
        returned.append(out)
        return out

    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2 * GROUP,
                      num_generations=GROUP, use_cpu=True, bf16=False, activation_checkpointing=False,
                      logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True, learning_rate=1e-3,
                      max_completion_length=400)
    trainer = GRPOTrainer(model=setup["model"], reward_funcs=[EpisodeReward("correctness", group_size=GROUP)],
                          args=args, train_dataset=Dataset.from_list(setup["index"].rows),
                          processing_class=setup["tokenizer"], rollout_func=recording_hook)
    trainer.train()

    assert len(seen) == 1 and len(seen[0]) == 2 * GROUP
    groups = [seen[0][g * GROUP:(g + 1) * GROUP] for g in range(2)]
    assert all(all(p == grp[0] for p in grp) for grp in groups)  # TRL already repeated each prompt
    assert returned[0]["logprobs"] is None  # no vLLM: TRL recomputes them
    assert all(len(m) == len(c) for m, c in zip(returned[0]["env_mask"], returned[0]["completion_ids"]))
    log = trainer.state.log_history[0]
    for key in ("reward", "rewards/correctness/mean", "env/success_rate", "env/turns_mean",
                "env/tool_failure_rate", "env/loop_rate", "env/truncation_rate", "env/zero_adv_frac",
                "env/sandbox_latency_s"):
        assert key in log, key
    assert log["env/turns_mean"] == MAX_TURNS and log["env/truncation_rate"] == 1.0
    assert log["env/zero_adv_frac"] == log["frac_reward_zero_std"] == 1.0  # ours agrees with TRL's count
