"""PPO learns: on every seed, the in-house PPO loop raises the success of a warm-started tiny model (one turn).

One run is :func:`medcopilot.learning.learning_run` (``"ppo"``, ``say_number``): the tiny model imitates a noisy
demonstrator (well-formed submits, the right number one time in three) through the real environment, then
:class:`medcopilot.trainers.ppo.PPOTrainer` (our ``EnvRolloutFunc``, the oracle grader's reward, a value head,
GAE and the clipped losses, a k3 KL penalty against the frozen warm model) trains it for ``PPO_DEFAULTS`` steps
of 16 episodes, one optimizer step each. Success is measured before and after on a fixed evaluation of 96
episodes whose sampling seeds depend only on the run's seed and the episode's row.

The settings and ``MIN_GAIN`` come from the sweep recorded in docs/benchmarks.md ("Learning"): every one of its
seeds gained well above ``MIN_GAIN`` without collapsing (four optimizer steps per PPO step, or a learning rate of
1e-3, made some seeds blow up). ``make test`` runs seed 0; ``make test-slow`` runs the others too.
"""

from __future__ import annotations

import pytest

from medcopilot.learning import PPO_DEFAULTS, learning_run

#: CPU-bound for 1-2 minutes; on a loaded shared machine the wall time can be many times that.
pytestmark = pytest.mark.timeout(1800)

#: Smallest gain asserted (success after minus before); the sweep's smallest gain was well above it.
MIN_GAIN = 0.1
SLOW_SEEDS = (1, 2, 3, 4)


def _learns(seed: int, tiny_model_dir, tmp_path) -> None:
    run = learning_run("ppo", "say_number", tiny_model_dir, tmp_path, seed=seed)
    print(f"\n[ppo-learning] seed {seed}: success {run.before:.3f} -> {run.after:.3f} after {PPO_DEFAULTS['steps']} "
          f"steps (training reward {run.train_rewards}); {run.cpu_s:.0f} s CPU, {run.wall_s:.0f} s wall")
    assert 0.05 <= run.before <= 0.7, f"the warm start should be partly right (got {run.before:.3f})"
    assert run.after >= run.before + MIN_GAIN, f"PPO did not raise success: {run.before:.3f} -> {run.after:.3f}"


def test_ppo_raises_success_of_a_warm_started_tiny_model(tiny_model_dir, tmp_path, quiet_training_env):
    _learns(0, tiny_model_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_ppo_learning_holds_on_other_seeds(seed, tiny_model_dir, tmp_path, quiet_training_env):
    _learns(seed, tiny_model_dir, tmp_path)
