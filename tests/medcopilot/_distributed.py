"""One process of tests/medcopilot/test_distributed.py, started twice by torchrun (gloo on CPU).

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/medcopilot/_distributed.py MODEL TASKS OUT

Each rank runs one GRPO step in which a single group of 4 episodes is split 2 + 2 across the two processes (the
same prompt on both), then one PPO step in which the ranks roll out different tasks (so their local KL differs)
against a reference that is not the policy (so the KL is not 0). It writes ``OUT/rank<r>.json``: the GRPO
completion ids it sampled, its log history, and every (kl, episodes) pair its PPO KL controller was updated with.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from medagentgym import sandbox
from medagentgym import tasks
from medagentgym.env_client import Env, EnvConfig
from medagentgym.env_client.prompts import initial_messages
from medagentgym.medcopilot.ppo import PPOArgs
from medagentgym.medcopilot.rewards_adapter import EpisodeReward
from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex
from medagentgym.medcopilot.trainers.ppo import PPOTrainer


def main(model_dir: str, root: str, out: str) -> None:
    rank = int(os.environ["RANK"])
    fam = tasks.make("pick", root=root)
    index = PromptIndex.from_instances(fam.instances("train"), render=lambda inst: initial_messages(inst, fam.actions))
    tok = AutoTokenizer.from_pretrained(model_dir)
    pool = sandbox.make_pool("local", workers=2, allow_unisolated=True)
    rollout = EnvRolloutFunc(make_env=lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=1)), index=index,
                             tokenizer=tok, max_new_tokens=8, concurrency=2, seed=0, flush_s=30.0)
    sampled = []

    def hook(prompts, trainer):
        result = rollout(prompts, trainer)
        sampled.extend(result["completion_ids"])
        return result

    args = GRPOConfig(output_dir=str(Path(out) / "grpo"), max_steps=1, per_device_train_batch_size=2,
                      num_generations=4, learning_rate=1e-4, beta=0.0, use_cpu=True, bf16=False,
                      activation_checkpointing=False, logging_steps=1, report_to=[], save_strategy="no",
                      disable_tqdm=True, max_completion_length=16, seed=0)
    grpo = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir),
                       reward_funcs=[EpisodeReward("correctness", group_size=4)], args=args,
                       train_dataset=Dataset.from_list(index.rows[:1]), processing_class=tok, rollout_func=hook)
    grpo.train()

    reference = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():  # a reference the policy is not, so every episode has a non-zero KL
        generator = torch.Generator().manual_seed(1)
        for p in reference.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    ppo_args = PPOArgs(max_steps=1, rollout_batch_size=2, mini_batch_size=2, micro_batch_size=2, ppo_epochs=1,
                       learning_rate=1e-4, kl_coef=0.1, kl_estimator="k3", target_kl=1.0, kl_horizon=4,
                       max_completion_length=16)
    ppo = PPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), tokenizer=tok, rollout=rollout,
                     prompts=[row["prompt"] for row in index.rows], args=ppo_args, output_dir=Path(out) / "ppo",
                     reward_weights={"correctness": 1.0}, group_size=1, ref_model=reference,
                     accelerator=grpo.accelerator)
    updates = []
    update = ppo.kl_ctl.update
    ppo.kl_ctl.update = lambda kl, n: (updates.append([kl, n]), update(kl, n))
    ppo.train()
    pool.close()
    (Path(out) / f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "grpo_completions": sampled, "grpo_log": grpo.state.log_history, "kl_updates": updates,
        "kl_coef": ppo.kl_ctl.value}), encoding="utf-8")


if __name__ == "__main__":
    faulthandler.dump_traceback_later(1200, exit=True)  # a deadlocked collective fails with stacks, not a hang
    main(*sys.argv[1:4])
