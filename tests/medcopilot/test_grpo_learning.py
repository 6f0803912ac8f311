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

from _learning import SFT_STEPS, mean_reward, warm_start

from medcopilot.rewards_adapter import EpisodeReward

GRPO_STEPS, GROUP, GRPO_LR = 20, 16, 1e-3
EVAL_REPS = 12  # episodes per question for each reward measurement
MIN_GAIN = 0.2


def test_grpo_raises_reward_of_an_sft_warmed_tiny_model(tiny_model_dir, tmp_path, quiet_training_env):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    import sandbox

    started = time.monotonic()
    warm = warm_start(tiny_model_dir, tmp_path)
    pool = sandbox.make_pool("local", workers=GROUP, allow_unisolated=True)  # submit-only: no code runs
    try:
        rollout = warm.rollout(pool, concurrency=GROUP)
        before = mean_reward(rollout, warm.model, warm.prompts, EVAL_REPS)

        # ---- GRPO through TRL with our hook
        args = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=GRPO_STEPS, per_device_train_batch_size=GROUP,
                          num_generations=GROUP, learning_rate=GRPO_LR, lr_scheduler_type="constant", beta=0.0,
                          loss_type="dapo", top_p=1.0, top_k=0, use_cpu=True, bf16=False,
                          activation_checkpointing=False, logging_steps=1, report_to=[], save_strategy="no",
                          disable_tqdm=True, seed=0, max_completion_length=64)
        trainer = GRPOTrainer(model=warm.model, reward_funcs=[EpisodeReward("correctness", group_size=GROUP)],
                              args=args, train_dataset=Dataset.from_list(warm.index.rows),
                              processing_class=warm.tokenizer, rollout_func=rollout)
        trainer.train()
        after = mean_reward(rollout, trainer.model, warm.prompts, EVAL_REPS)
    finally:
        pool.close()

    train_rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    print(f"\n[grpo-learning] SFT warm-up {SFT_STEPS} steps (last loss {warm.sft_loss:.3f}); sampled reward before "
          f"GRPO {before:.3f}, after {GRPO_STEPS} GRPO steps {after:.3f}; per-step training reward "
          f"{[round(r, 2) for r in train_rewards]}; {time.monotonic() - started:.0f} s")
    assert 0.05 <= before <= 0.8, f"the warm start should be partly right (got {before:.3f}); retune SFT_STEPS"
    assert after >= before + MIN_GAIN, f"GRPO did not raise the reward: {before:.3f} -> {after:.3f}"
