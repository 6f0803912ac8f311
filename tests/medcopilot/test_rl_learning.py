"""GRPO and PPO learn: on every seed, each raises the success of a warm-started tiny model on a one-turn family.

One run is :func:`medagentgym.medcopilot.learning.learning_run` (``say_number``): the tiny model imitates a noisy demonstrator
(well-formed submits, the right number one time in three) through the real environment, then trains on the oracle
grader's reward with

- ``grpo``: TRL's ``GRPOTrainer`` with our ``EnvRolloutFunc`` for ``GRPO_DEFAULTS`` steps (learning rate warmed up
  over the first 5: at full rate from the start one seed in five collapsed);
- ``ppo``: :class:`medagentgym.medcopilot.trainers.ppo.PPOTrainer` (a value head, GAE and the clipped losses, a k1 KL
  penalty against the frozen warm model) for ``PPO_DEFAULTS`` steps of 16 episodes, one optimizer step each
  (four per step, or a learning rate of 1e-3, made some seeds blow up).

Success is measured before and after on a fixed evaluation of 96 episodes whose sampling seeds depend only on the
run's seed and the episode's row, so before and after see the same random draws. The settings and ``MIN_GAIN``
come from the sweeps recorded in docs/benchmarks.md ("Learning"): every seed gained well above ``MIN_GAIN``
without collapsing. Seeds stand in for other CPUs' floating-point paths. Every run here is in ``make test-slow``
(issue #29: GRPO's seed 0 alone was ~35-50 CPU-s of ``make test``'s 8 minutes); ``make test`` guards the same code
deterministically (tests/medcopilot/test_learning_mechanics.py: rewards aligned with TRL's rows, one GRPO and one
PPO update raising the right answer for every prompt) and trains through it in the chaos, distributed and train.py
runs.
"""

from __future__ import annotations

import pytest

from medagentgym.medcopilot.learning import GRPO_DEFAULTS, PPO_DEFAULTS, learning_run

#: CPU-bound for 1-2 minutes per run; on a loaded shared machine the wall time can be many times that.
pytestmark = pytest.mark.timeout(1800)

#: Smallest gain asserted (success after minus before); the sweeps' smallest gains were well above it.
MIN_GAIN = 0.10
SLOW_SEEDS = (1, 2, 3, 4)
STEPS = {"grpo": GRPO_DEFAULTS["steps"], "ppo": PPO_DEFAULTS["steps"]}


def _learns(method: str, seed: int, tiny_model_dir, tmp_path) -> None:
    run = learning_run(method, "say_number", tiny_model_dir, tmp_path, seed=seed)
    print(f"\n[{method}-learning] seed {seed}: success {run.before:.3f} -> {run.after:.3f} after {STEPS[method]} "
          f"steps (training reward {run.train_rewards}); {run.cpu_s:.0f} s CPU, {run.wall_s:.0f} s wall")
    assert 0.05 <= run.before <= 0.7, f"the warm start should be partly right (got {run.before:.3f})"
    assert run.after >= run.before + MIN_GAIN, \
        f"{method} did not raise success: {run.before:.3f} -> {run.after:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_rl_raises_success_of_a_warm_started_tiny_model(method, tiny_model_dir, tmp_path, quiet_training_env):
    _learns(method, 0, tiny_model_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_rl_learning_holds_on_other_seeds(method, seed, tiny_model_dir, tmp_path, quiet_training_env):
    _learns(method, seed, tiny_model_dir, tmp_path)
