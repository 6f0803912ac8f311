"""PPO learns: the tiny model's reward on an easy family rises clearly under our in-house PPO loop.

Same family (``say_number``), SFT warm-up and measurement as the GRPO learning test (``_learning.py``): the tiny
model is warmed up on the family's oracle trajectories and stopped early, so it submits correctly only part of
the time when sampling at temperature 1. :class:`medcopilot.trainers.ppo.PPOTrainer` (our ``EnvRolloutFunc``
running real episodes through ``env_client.Env`` on a sandbox pool, the oracle grader's reward, a value head,
GAE and the clipped losses, a KL penalty against the frozen warm model) must then raise the sampled success rate
by at least ``MIN_GAIN``, measured before and after on the same prompts with the same number of episodes.
"""

from __future__ import annotations

import copy
import time

from _learning import SFT_STEPS, mean_reward, warm_start

from medcopilot.ppo import PPOArgs
from medcopilot.trainers.ppo import PPOTrainer

PPO_STEPS, BATCH, GROUP = 12, 16, 4  # 16 episodes per step: 4 tasks x 4
PPO_ARGS = {"mini_batch_size": 8, "micro_batch_size": 8, "ppo_epochs": 2, "learning_rate": 1e-3,
            "value_head_learning_rate": 1e-2, "gamma": 1.0, "lam": 1.0, "kl_coef": 0.01, "kl_estimator": "k3",
            "vf_coef": 0.1, "max_completion_length": 64}
EVAL_REPS = 12  # episodes per question for each reward measurement
MIN_GAIN = 0.2


def test_ppo_raises_reward_of_an_sft_warmed_tiny_model(tiny_model_dir, tmp_path, quiet_training_env):
    import sandbox

    started = time.monotonic()
    warm = warm_start(tiny_model_dir, tmp_path)
    reference = copy.deepcopy(warm.model)  # the KL anchor: the warm model, frozen
    pool = sandbox.make_pool("local", workers=BATCH, allow_unisolated=True)  # submit-only: no code runs
    try:
        rollout = warm.rollout(pool, concurrency=BATCH, max_completion_tokens=64)
        before = mean_reward(rollout, warm.model, warm.prompts, EVAL_REPS)
        args = PPOArgs(max_steps=PPO_STEPS, rollout_batch_size=BATCH, seed=0, **PPO_ARGS)
        trainer = PPOTrainer(model=warm.model, tokenizer=warm.tokenizer, rollout=rollout, prompts=warm.prompts,
                             args=args, output_dir=tmp_path / "ppo", reward_weights={"correctness": 1.0},
                             group_size=GROUP, ref_model=reference)
        trainer.train()
        after = mean_reward(rollout, trainer.accelerator.unwrap_model(trainer.model).policy, warm.prompts,
                            EVAL_REPS)
    finally:
        pool.close()

    history = trainer.state.log_history
    print(f"\n[ppo-learning] SFT warm-up {SFT_STEPS} steps (last loss {warm.sft_loss:.3f}); sampled reward before "
          f"PPO {before:.3f}, after {PPO_STEPS} PPO steps {after:.3f}; per-step training reward "
          f"{[round(r['reward'], 2) for r in history]}; kl {[round(r['kl'], 3) for r in history]}; "
          f"{time.monotonic() - started:.0f} s")
    assert 0.05 <= before <= 0.8, f"the warm start should be partly right (got {before:.3f}); retune SFT_STEPS"
    assert after >= before + MIN_GAIN, f"PPO did not raise the reward: {before:.3f} -> {after:.3f}"
    assert all(row["value_loss"] is not None and row["clipfrac"] is not None for row in history)
    assert history[-1]["kl"] > 0  # the policy moved away from the reference, and the penalty saw it
