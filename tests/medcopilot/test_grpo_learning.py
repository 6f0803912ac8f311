"""GRPO learns: the tiny model's reward on an easy family rises clearly under GRPO with our rollout hook.

The family (``say_number``), the SFT warm-up and the measurement are shared with the PPO learning test
(``_learning.py``): the tiny model is warmed up on the family's oracle trajectories and stopped early, so it
submits correctly only part of the time when sampling at temperature 1. GRPO (TRL's trainer, our
``EnvRolloutFunc`` running real episodes through ``env_client.Env`` on a sandbox pool, the oracle grader's
reward) must then raise the sampled success rate clearly: the test measures it before and after on the same
prompts with the same number of episodes and asserts a gain of at least ``MIN_GAIN``.
"""

from __future__ import annotations

import time

import torch
from _learning import FAMILY, declare_family, mean_reward, oracle_data, sft_warmup

from env_client import Env, EnvConfig
from medcopilot.rewards_adapter import EpisodeReward
from medcopilot.rollout_func import EnvRolloutFunc, PromptIndex

SFT_STEPS, SFT_BATCH, SFT_LR = 70, 8, 3e-3
GRPO_STEPS, GROUP, GRPO_LR = 20, 16, 1e-3
EVAL_REPS = 12  # episodes per question for each reward measurement
MIN_GAIN = 0.2


def test_grpo_raises_reward_of_an_sft_warmed_tiny_model(tiny_model_dir, tmp_path, quiet_training_env):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import sandbox
    import tasks
    from env_client.prompts import initial_messages

    started = time.monotonic()
    root = declare_family(tmp_path / "tasks")
    family = tasks.make(FAMILY, root=root)
    instances = family.instances("train")
    index = PromptIndex.from_instances(instances, render=lambda inst: initial_messages(inst, family.actions))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)

    # ---- warm-up on oracle trajectories: the reference solution as the model would write it
    prompts, targets = oracle_data(family, index, tok)
    sft_loss = sft_warmup(model, prompts, targets, steps=SFT_STEPS, batch=SFT_BATCH, lr=SFT_LR,
                           pad_id=tok.pad_token_id)

    pool = sandbox.make_pool("local", workers=GROUP, allow_unisolated=True)  # submit-only: no code runs
    try:
        rollout = EnvRolloutFunc(
            make_env=lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=1)), index=index,
            tokenizer=tok, max_new_tokens=32, concurrency=GROUP, seed=0, flush_s=30.0)
        dataset_prompts = [row["prompt"] for row in index.rows]
        before = mean_reward(rollout, model, dataset_prompts, EVAL_REPS)

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
        after = mean_reward(rollout, trainer.model, dataset_prompts, EVAL_REPS)
    finally:
        pool.close()

    train_rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    print(f"\n[grpo-learning] SFT warm-up {SFT_STEPS} steps (last loss {sft_loss:.3f}); sampled reward before GRPO "
          f"{before:.3f}, after {GRPO_STEPS} GRPO steps {after:.3f}; per-step training reward "
          f"{[round(r, 2) for r in train_rewards]}; {time.monotonic() - started:.0f} s")
    assert 0.05 <= before <= 0.8, f"the warm start should be partly right (got {before:.3f}); retune SFT_STEPS"
    assert after >= before + MIN_GAIN, f"GRPO did not raise the reward: {before:.3f} -> {after:.3f}"
