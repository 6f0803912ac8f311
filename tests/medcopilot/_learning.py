"""Shared pieces of the CPU learning tests (GRPO and PPO): an easy declared family and an SFT warm-up.

A random tiny model never emits a valid tool call, so the learning tests first warm it up by supervised steps
on the family's oracle trajectories (its ``reference_solution`` rendered as a ``<tool_call>``), stopped early on
purpose: the warm model submits correctly only part of the time when sampling at temperature 1. The RL method
must then raise the sampled success rate clearly, measured before and after with :func:`mean_reward` on the same
prompts and the same number of episodes.

The family ``say_number`` is declared in the test's tmp dir (``family.yaml`` + ``tasks.jsonl``): every question
shows the number to submit, and the only action is ``submit_answer`` (one turn, no code runs). The warm-up encodes
the shared system prompt (about 850 tokens with the tiny tokenizer, the same for every task) once per step without
gradient and trains on the short rest (question, generation prompt and the oracle's reply) with that prefix
cached; the forward computation is the one generation runs, only the gradient through the shared prefix is left
out. That keeps the warm-up to seconds on two CPU cores.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: Warm-up steps, batch and learning rate: enough for a partly right start (reward ~0.25), not more.
SFT_STEPS, SFT_BATCH, SFT_LR = 70, 8, 3e-3
FAMILY = "say_number"
QUESTIONS = ["Submit the number 7.", "Please submit 7 as the answer.", "The answer is 7; submit it.",
             "Reply with the number 7."]


def declare_family(root: Path, name: str = FAMILY, questions: list[str] = QUESTIONS) -> Path:
    """Write a submit-7 family (``say_number`` by default) under ``root`` and return ``root`` (the tasks root)."""
    fam = root / name
    fam.mkdir(parents=True)
    (fam / "family.yaml").write_text(f"name: {name}\nanswer_type: integer\nactions: [submit_answer]\n"
                                     "max_turns: 1\nsplits: [train, test]\n", encoding="utf-8")
    lines = [{"question": q, "answer": 7, "split": "train"} for q in questions]
    (fam / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return root


def oracle_data(family: Any, index: Any, tokenizer: Any) -> tuple[list[list[int]], list[list[int]]]:
    """Prompt ids (the episode's rendered opening) and oracle reply ids (``<|im_end|>`` included), per row."""
    from env_client import tool_schemas
    from env_client.policies import render_action
    from env_client.tokens import render_prompt

    tools = tool_schemas(family.actions)
    prompts = [render_prompt(tokenizer, row["prompt"], tools) for row in index.rows]
    targets = []
    for row in index.rows:
        (step,) = family.reference_solution(index.instances[row["instance_id"]])
        targets.append(tokenizer(render_action(step["action"], step["params"]), add_special_tokens=False)["input_ids"]
                       + [tokenizer.eos_token_id])
    return prompts, targets


def sft_warmup(model: Any, prompts: list[list[int]], targets: list[list[int]], *, steps: int, batch: int, lr: float,
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


def mean_reward(rollout: Any, model: Any, prompts: list, reps: int) -> float:
    """Mean correctness of ``reps`` sampled episodes (temperature 1) per prompt with ``model``."""
    model.eval()
    out = rollout.run([p for p in prompts for _ in range(reps)], rollout.hf_generator(model, temperature=1.0))
    return statistics.fmean(r for r in out["reward_correctness"] if r is not None)


@dataclass
class WarmStart:
    """What both learning tests start from: the declared family, its prompt index, and the warmed tiny model."""

    root: Path
    family: Any
    index: Any
    tokenizer: Any
    model: Any
    sft_loss: float

    @property
    def prompts(self) -> list:
        """The dataset prompts (one per task), as TRL passes them to the rollout hook."""
        return [row["prompt"] for row in self.index.rows]

    def rollout(self, pool: Any, concurrency: int, **kwargs: Any) -> Any:
        """An ``EnvRolloutFunc`` playing one-turn episodes of the family on ``pool``."""
        from env_client import Env, EnvConfig
        from medcopilot.rollout_func import EnvRolloutFunc

        return EnvRolloutFunc(
            make_env=lambda: Env(pool, tasks_root=self.root, config=EnvConfig(max_turns=1)), index=self.index,
            tokenizer=self.tokenizer, max_new_tokens=32, concurrency=concurrency, seed=0, flush_s=30.0, **kwargs)


def warm_start(tiny_model_dir: Path, tmp_path: Path) -> WarmStart:
    """Declare the family under ``tmp_path``, load the tiny model and warm it up (seeded: the same every run)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tasks
    from env_client.prompts import initial_messages
    from medcopilot.rollout_func import PromptIndex

    root = declare_family(tmp_path / "tasks")
    family = tasks.make(FAMILY, root=root)
    index = PromptIndex.from_instances(family.instances("train"),
                                       render=lambda inst: initial_messages(inst, family.actions))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    prompts, targets = oracle_data(family, index, tok)
    loss = sft_warmup(model, prompts, targets, steps=SFT_STEPS, batch=SFT_BATCH, lr=SFT_LR, pad_id=tok.pad_token_id)
    return WarmStart(root, family, index, tok, model, loss)
