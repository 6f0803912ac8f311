"""Multi-turn RL learns: GRPO and PPO raise the two-turn success of a warm-started tiny model (slow).

One run is :func:`medagentgym.medcopilot.learning.learning_run` on ``clinic_code``: each episode must call
``code_execution`` with SQL in the sandbox (turn 1), then submit the code it read (turn 2); the environment's
tokens are masked out of the loss. The warm start imitates a noisy demonstrator (right one time in two), so the
model starts partly right and RL has to move the second turn's decision. GRPO runs the demo's setting (30 steps
with ``GRPO_DEFAULTS``' warm-up), PPO ``PPO_DEFAULTS``: the runs of ``scripts/bench_learning.py --families
clinic_code --steps 30`` and of ``medagentgym demo --seed K``, whose numbers are in docs/benchmarks.md ("Learning",
multi-turn and demo tables; smallest gain +0.09): ``MIN_GAIN`` sits below them.

Each run is 1-2 CPU minutes, so the whole file belongs to ``make test-slow``. ``toy_lookup`` (the answer exists
only in the observation, scored on held-out records) has its own proof: tests/medcopilot/test_observation_learning.py.
"""

from __future__ import annotations

import pytest

from medagentgym.medcopilot.learning import learning_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

#: Smallest gain asserted (success after minus before, fixed evaluation of 96 episodes).
MIN_GAIN = 0.05


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_rl_raises_two_turn_success(method, seed, tiny_model_dir, tmp_path, quiet_training_env):
    run = learning_run(method, "clinic_code", tiny_model_dir, tmp_path, seed=seed, steps=30, eval_every=10)
    print(f"\n[multiturn-learning] {method} seed {seed}: success {run.before:.3f} -> {run.after:.3f} "
          f"(curve {run.curve}); {run.cpu_s:.0f} s CPU")
    assert 0.05 <= run.before <= 0.8, f"the warm start should be partly right (got {run.before:.3f})"
    assert run.after >= run.before + MIN_GAIN, f"{method} did not raise two-turn success: {run.before:.3f} -> {run.after:.3f}"
