"""rewards/: every term on hand-built trajectories, the None (missing) path, and RewardSpec combination."""

from __future__ import annotations

import math
import subprocess
import sys
from types import SimpleNamespace as NS

import pytest

from medagentgym.rewards import (
    REWARD_FUNCS,
    RewardError,
    RewardSpec,
    correctness,
    format_penalty,
    infra_failure,
    length_cost,
    loop_penalty,
    turn_cost,
    verifier_score,
)
from medagentgym.tasks import Verdict


def step(status="ok", loop=False, n_tokens=10):
    return NS(status=status, loop=loop, n_tokens=n_tokens)


def traj(*steps, reason="submitted", total_tokens=None, config=None):
    total = sum(s.n_tokens or 0 for s in steps) if total_tokens is None else total_tokens
    return NS(steps=list(steps), final=NS(reason=reason, total_tokens=total),
              header=NS(config=config or {"max_turns": 8}))


def test_correctness_binary_partial_and_grader_error():
    assert correctness(verdict=Verdict(correct=True, score=1.0)) == 1.0
    assert correctness(verdict=Verdict(correct=False, score=0.4), trajectory=None, other=1) == 0.4
    assert correctness(verdict={"correct": False, "score": 0.0}) == 0.0
    assert correctness(verdict=None) == 0.0  # no submission: a real 0
    # A grading failure the submission caused is a wrong answer (a crash must not be a free pass) ...
    assert correctness(verdict=Verdict(correct=False, score=0.0, error="forged result line")) == 0.0
    # ... one of the infrastructure is missing (dropped or retried, never trained on as 0).
    assert correctness(verdict=Verdict(correct=False, score=0.0, error="WorkerLost", infra=True)) is None
    assert correctness(verdict={"correct": False, "score": 0.0, "error": "x", "infra": True}) is None
    # A verdict stored before `infra` existed reads as infra=False.
    assert correctness(verdict={"correct": False, "score": 0.0, "error": "boom"}) == 0.0
    assert infra_failure({"correct": False, "score": 0.0, "error": "x", "infra": True})
    assert not infra_failure({"correct": False, "score": 0.0, "error": "x"}) and not infra_failure(None)


def test_format_penalty_counts_parse_errors_and_forbidden():
    t = traj(step("parse_error"), step("forbidden"), step("ok"), step("submitted"))
    assert format_penalty(trajectory=t) == -0.5
    assert format_penalty(trajectory=traj(step("ok"))) == 0.0
    assert format_penalty(trajectory=traj()) == 0.0
    as_dict = {"steps": [{"status": "parse_error"}, {"status": "ok"}], "final": {"reason": "closed"}}
    assert format_penalty(trajectory=as_dict) == -0.5
    with pytest.raises(RewardError, match="trajectory"):
        format_penalty(trajectory=None)


def test_loop_penalty_share_and_loop_ending():
    assert loop_penalty(trajectory=traj(step(), step(loop=True), step(), step(loop=True))) == -0.5
    assert loop_penalty(trajectory=traj(step(), step(loop=True), reason="loop")) == -1.0
    assert loop_penalty(trajectory=traj(step())) == 0.0


def test_turn_cost_uses_budget_from_kwarg_or_config():
    t = traj(step(), step(), step(), step())
    assert turn_cost(trajectory=t) == -0.5  # config max_turns 8
    assert turn_cost(trajectory=t, max_turns=2) == -1.0  # clipped
    with pytest.raises(RewardError, match="max_turns"):
        turn_cost(trajectory=traj(step(), config={"x": 1}))


def test_length_cost_tokens_and_missing_counts():
    t = traj(step(n_tokens=100), step(n_tokens=300))
    assert length_cost(trajectory=t, max_tokens=1000) == pytest.approx(-0.4)
    assert length_cost(trajectory=traj(step(n_tokens=None), step(n_tokens=None)), max_tokens=10) is None
    assert length_cost(trajectory=traj(step(), config={"max_total_tokens": 20})) == -0.5
    with pytest.raises(RewardError, match="max_tokens"):
        length_cost(trajectory=t)


def test_verifier_score_passthrough_none_and_range():
    assert verifier_score(verifier_score=0.75, trajectory=None) == 0.75
    assert verifier_score() is None  # a failed verifier call: missing, not 0
    for bad in (1.5, -0.1, float("nan"), True):
        with pytest.raises(RewardError, match="verifier score"):
            verifier_score(verifier_score=bad)


def test_spec_total_components_and_weight_zero_logs_only():
    spec = RewardSpec.from_weights({"correctness": 1.0, "format_penalty": 0.1, "turn_cost": 0.0})
    t = traj(step("parse_error"), step(), step(), step("submitted"))
    r = spec(verdict=Verdict(correct=True, score=1.0), trajectory=t)
    assert r.components == {"correctness": 1.0, "format_penalty": -0.25, "turn_cost": -0.5}
    assert r.total == pytest.approx(1.0 - 0.025)
    assert r.missing == ()
    assert r.log_dict()["reward/total"] == pytest.approx(0.975)


def test_spec_missing_none_makes_total_none_and_skip_drops_term():
    weights = {"correctness": 1.0, "verifier_score": 0.5}
    kw = {"verdict": Verdict(correct=True, score=1.0), "trajectory": traj(step("submitted")), "verifier_score": None}
    r = RewardSpec.from_weights(weights)(**kw)
    assert r.total is None and r.missing == ("verifier_score",) and r.components["verifier_score"] is None
    r = RewardSpec.from_weights(weights, missing="skip")(**kw)
    assert r.total == 1.0 and r.missing == ("verifier_score",)
    r = RewardSpec.from_weights({"verifier_score": 1.0}, missing="skip")(**kw)
    assert r.total is None  # nothing present to sum
    r = RewardSpec.from_weights({"correctness": 1.0, "verifier_score": 0.0})(**kw)
    assert r.total == 1.0  # a weight-0 term never affects the total, even when missing
    infra_error = {**kw, "verdict": Verdict(correct=False, score=0.0, error="sandbox gone", infra=True)}
    assert RewardSpec.from_weights({"correctness": 1.0})(**infra_error).total is None
    agent_error = {**kw, "verdict": Verdict(correct=False, score=0.0, error="grader crashed on the submission")}
    assert RewardSpec.from_weights({"correctness": 1.0})(**agent_error).total == 0.0


def test_spec_combine_takes_values_computed_elsewhere():
    spec = RewardSpec.from_weights({"correctness": 1.0, "verifier_score": 0.5, "turn_cost": 0.0})
    r = spec.combine({"correctness": 1.0, "verifier_score": 0.4, "turn_cost": -0.2})
    assert r.total == pytest.approx(1.2) and r.components["turn_cost"] == -0.2 and r.missing == ()
    assert spec.combine({"correctness": 1.0, "verifier_score": None, "turn_cost": None}).total is None
    with pytest.raises(RewardError, match="no value for reward 'turn_cost'"):
        spec.combine({"correctness": 1.0, "verifier_score": 0.4})
    with pytest.raises(RewardError, match="returned nan"):
        spec.combine({"correctness": float("nan"), "verifier_score": 0.4, "turn_cost": 0.0})


def test_spec_errors_are_one_line_and_name_the_fix():
    with pytest.raises(RewardError, match="did you mean 'format_penalty'") as exc:
        RewardSpec.from_weights({"format_penalti": 0.1})
    assert "\n" not in str(exc.value)
    with pytest.raises(RewardError, match="not a finite number"):
        RewardSpec.from_weights({"correctness": math.inf})
    with pytest.raises(RewardError, match="missing="):
        RewardSpec.from_weights({"correctness": 1.0}, missing="zero")
    with pytest.raises(RewardError, match="empty"):
        RewardSpec.from_weights({})
    with pytest.raises(RewardError, match="both"):
        RewardSpec({"correctness": correctness}, {"correctness": 1.0, "turn_cost": 1.0})


def test_spec_custom_function_bad_value_and_crash_propagate():
    def boom(**_):
        raise ZeroDivisionError("crash")

    spec = RewardSpec({"c": correctness, "bad": lambda **_: float("nan")}, {"c": 1.0, "bad": 1.0})
    with pytest.raises(RewardError, match="'bad' returned nan"):
        spec(verdict=None)
    with pytest.raises(ZeroDivisionError):
        RewardSpec({"boom": boom}, {"boom": 1.0})()
    extra = RewardSpec.from_weights({"bonus": 2.0}, extra={"bonus": lambda **_: 0.25})
    assert extra().total == 0.5


def test_registry_names_are_the_documented_terms():
    assert set(REWARD_FUNCS) == {"correctness", "format_penalty", "loop_penalty", "turn_cost", "length_cost",
                                 "verifier_score"}


def test_rewards_imports_no_env_client_torch_or_medcopilot():
    code = ("import sys, medagentgym.rewards as rewards; bad = [m for m in ('medagentgym.env_client', 'medagentgym.medcopilot', 'torch', 'transformers', 'trl') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_zero_penalties_are_positive_zero():
    t = traj(step(n_tokens=0), total_tokens=0)
    for value in (format_penalty(trajectory=t), loop_penalty(trajectory=t), length_cost(trajectory=t, max_tokens=9)):
        assert value == 0.0 and math.copysign(1.0, value) == 1.0  # logs show 0.0, not -0.0
