"""Learning that uses the environment: the tiny model reads a value out of a tool observation, and RL raises how
often it does, on records it never trained on (``toy_lookup``: run SQL, submit the value it returned).

- The control is sound (deterministic, fast): :func:`medagentgym.medcopilot.learning.decoy_observations` makes every
  observed value of the held-out records wrong and changes nothing else, so a policy that submits what the
  observation says is right on every real record and on no decoy.
- The warm start copies (fast guard): after the clean phase of the warm start (supervised steps on the exact
  demonstrator, :func:`medagentgym.medcopilot.learning.warm_up`), sampled episodes on held-out records submit the observed value
  far above chance, and the same model scored with wrong observations falls to chance or below. This is the
  ability the RL proof builds on (docs/benchmarks.md, "Learning": seeds 0-9).
- The proof (slow): from the full warm start (the clean phase, then a demonstrator right one time in four, so
  held-out success starts near 0.25 against a chance of 0.11), GRPO and PPO each raise held-out success on at
  least 4 of 5 seeds with a median gain of at least 0.15 and no collapse, and the trained policies score no
  better than chance when the observations are wrong: the gain needs the observation.
"""

from __future__ import annotations

import re
import statistics

import pytest

from medagentgym.medcopilot.learning import (
    OBSERVATION,
    WARM_DEFAULTS,
    Playground,
    copy_check,
    decoy_observations,
    learning_run,
    warm_up,
    wilson,
)

pytestmark = pytest.mark.timeout(1800)

CHANCE = 1 / 9
#: The warm-up phases on the exact demonstrator (WARM_DEFAULTS' ``last_turn`` and ``clean``): the fast guard's run.
COPY = {**WARM_DEFAULTS[OBSERVATION],
        "steps": WARM_DEFAULTS[OBSERVATION]["last_turn"] + WARM_DEFAULTS[OBSERVATION]["clean"]}
#: Held-out success the guard asks of the copying model (sampled episodes), and the most its control may reach.
MIN_COPY, MAX_CONTROL = 0.5, 0.3


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from medagentgym import tasks

    root = tmp_path_factory.mktemp("tasks")
    tasks.make(OBSERVATION, root=root).build(root, size="tiny", seed=0)
    return root


def _observed_value(text: str) -> str:
    """What the SQL observation says (``value\\n-----\\n<v>``); "0" when it says nothing."""
    seen = re.search(r"value\n-+\n(\d)", text)
    return seen.group(1) if seen else "0"


def _copy_policy_success(root, tok, make_test_pool) -> tuple[float, int]:
    """Run the reference query, then submit what the observation says, on every test record of ``root``."""
    from medagentgym.env_client import Env
    from medagentgym.env_client.policies import render_action
    from medagentgym import tasks

    family = tasks.make(OBSERVATION, root=root)
    pool = make_test_pool(2)
    try:
        play = Playground(root, family, None, tok, pool, 3, 40, 160)
        wins = []
        for inst in family.instances("test"):
            env = Env(pool, tasks_root=root, config=play.env_config)
            try:
                env.reset(inst)
                query = env.step(render_action("code_execution", {"lang": "sql", "code": "SELECT value FROM reading"}))
                result = env.step(render_action("submit_answer", {"answer": _observed_value(query.observation.text)}))
                wins.append(result.reward)
            finally:
                env.close()
    finally:
        pool.close()
    return statistics.fmean(wins), len(wins)


def test_the_control_replaces_what_the_observation_says_and_nothing_else(built, tmp_path, tiny_model_dir,
                                                                         make_test_pool):
    import sqlite3

    from transformers import AutoTokenizer

    from medagentgym.env_client.prompts import initial_messages
    from medagentgym import tasks

    decoy = decoy_observations(built, tmp_path / "decoy", seed=3)
    real, fake = (tasks.make(OBSERVATION, root=r) for r in (built, decoy))

    def value(root, inst) -> int:
        con = sqlite3.connect(root / OBSERVATION / inst.metadata["sql_database"])
        try:
            return con.execute("SELECT value FROM reading").fetchone()[0]
        finally:
            con.close()

    for split in ("train", "test"):
        pairs = list(zip(real.instances(split), fake.instances(split)))
        assert [a.answer for a, _ in pairs] == [b.answer for _, b in pairs]
        assert all(initial_messages(a, real.actions) == initial_messages(b, fake.actions) for a, b in pairs)
        assert all(value(built, a) == a.answer for a, _ in pairs)  # the real records hold the answers
        same = [value(decoy, b) == b.answer for _, b in pairs]
        assert all(same) if split == "train" else not any(same)  # training records untouched, test ones all wrong
        assert all(1 <= value(decoy, b) <= 9 for _, b in pairs)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert _copy_policy_success(built, tok, make_test_pool) == (1.0, 16)  # reading the observation: every record
    assert _copy_policy_success(decoy, tok, make_test_pool) == (0.0, 16)  # the same reader on the decoys: none


def _copies(seed: int, model_dir, tmp_path) -> None:
    """Warm the tiny model up on the exact demonstrator; assert it copies on held-out records, and only there."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    held, control = copy_check(model, tok, tmp_path, COPY, seed=seed)
    print(f"\n[observation] seed {seed}, {COPY['steps']} warm-up steps on the exact demonstrator: held-out success "
          f"{held.success:.3f} ({held.episodes} episodes), with wrong observed values {control.success:.3f}")
    assert held.success >= MIN_COPY, f"seed {seed}: the warm start does not copy the observed value ({held.success:.3f})"
    assert control.success <= MAX_CONTROL, f"seed {seed}: success without the observation: {control.success:.3f}"


@pytest.mark.slow  # issue #29: ~27-37 CPU-s; make test keeps the control's mechanics (the test above)
def test_the_warm_start_copies_the_observed_value_on_held_out_records(tiny_model_dir, tmp_path, quiet_training_env):
    """The seed-0 guard of the observation proof (``make test-slow``, with seeds 1-9)."""
    _copies(0, tiny_model_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 10))
def test_the_warm_start_copies_on_other_seeds(seed, tiny_model_dir, tmp_path, quiet_training_env):
    _copies(seed, tiny_model_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_rl_raises_held_out_success_and_the_gain_needs_the_observation(method, tiny_model_dir, tmp_path,
                                                                       quiet_training_env):
    runs = []
    for seed in range(5):
        run = learning_run(method, OBSERVATION, tiny_model_dir, tmp_path / f"seed{seed}", seed=seed)
        print(f"\n[observation] {method} seed {seed}: held-out success {run.before:.3f} -> {run.after:.3f}; "
              f"observed values wrong {run.control_before:.3f} -> {run.control_after:.3f}; {run.cpu_s:.0f} s CPU")
        runs.append(run)
    gains = [r.gain for r in runs]
    assert all(r.before <= 0.45 for r in runs), [r.before for r in runs]  # at most modestly above chance
    assert sum(g > 0 for g in gains) >= 4 and statistics.median(gains) >= 0.15, gains
    assert not [r for r in runs if r.after < max(0.05, r.before / 2)], gains  # none collapsed
    for r in runs:  # with wrong observations no seed is above chance (1/9 at or above its 95 % interval's low end)
        low, _ = wilson(r.control_after * r.settings["eval_episodes"], r.settings["eval_episodes"])
        assert low <= CHANCE, (r.seed, r.control_after)


@pytest.mark.parametrize("phases", [{"last_turn": 300, "clean": 200}, {"last_turn": -1}, {"short": 601}])
def test_warm_up_refuses_phases_that_do_not_fit_its_steps(phases):
    """Phases longer than ``steps`` (or negative) are an error before any training, not a silent cut."""
    from types import SimpleNamespace

    import torch

    settings = {"steps": 400, "batch": 8, "lr": 3e-3, "per_task": 4, "right_share": 0.25, **phases}
    play = SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=0))  # never reached: the check comes first
    with pytest.raises(ValueError, match="warm-up phases"):
        warm_up(torch.nn.Linear(2, 2), play, settings, seed=0)
