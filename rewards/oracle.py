"""The oracle reward: the family grader's verdict on the one submitted answer, as a scalar.

``rewards`` imports neither ``env_client`` nor ``medcopilot``; a verdict is accepted as the ``tasks.Verdict``
model or its dict form (what a trajectory stores).

Grading semantics (who failed decides the reward):

* A graded submission: ``verdict.score`` (in [0, 1]).
* No submission (the episode ended on a budget): ``0.0``.
* Grading failed because of the submission (``verdict.error`` set, ``verdict.infra`` False): ``0.0``. An RL
  policy can make a grader raise on purpose (a forged result tag, an id like ``1e999``, a malformed POST
  body); if that were "no reward" (None: zero advantage in GRPO, dropped by PPO) a crash would be a free pass
  for a wrong answer. The error string is kept in the verdict for the logs.
* Grading failed because of the infrastructure (``verdict.infra`` True: the sandbox died or is unavailable,
  the grader's own deadline passed, a server is down, our gold is broken): ``None``. The episode says
  nothing about the policy, so it must be dropped or retried, never trained on as a 0.

A stored verdict without an ``infra`` field (written before it existed) reads as ``infra=False``.

Example:
    >>> oracle_reward(Verdict(correct=True, score=1.0))
    1.0
    >>> oracle_reward({"correct": False, "score": 0.0, "error": "forged result tag"})
    0.0
    >>> oracle_reward({"correct": False, "score": 0.0, "error": "WorkerLost", "infra": True}) is None
    True
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["correctness", "infra_failure", "oracle_reward"]


def _field(verdict: Any, name: str) -> Any:
    return verdict.get(name) if isinstance(verdict, dict) else getattr(verdict, name, None)


def infra_failure(verdict: Any) -> bool:
    """True when ``verdict`` records a grading failure of the infrastructure (its reward is None).

    Args:
        verdict: A ``tasks.Verdict``, its dict, or None.

    Example:
        >>> infra_failure({"correct": False, "score": 0.0, "error": "sandbox gone", "infra": True})
        True
    """
    return verdict is not None and bool(_field(verdict, "error")) and bool(_field(verdict, "infra"))


def oracle_reward(verdict: Any) -> float | None:
    """The verdict's score in [0, 1], or None when grading failed for infrastructure reasons.

    Args:
        verdict: A ``tasks.Verdict`` or its dict; None when the episode ended without a graded submit.

    Returns:
        ``verdict.score``; ``0.0`` for an episode that ended without a submission (``verdict is None``) and
        for a grading failure the submission caused (``error`` set, ``infra`` False); ``None`` when the
        infrastructure failed (``error`` set, ``infra`` True), so such an episode is never a silent 0.

    Raises:
        ValueError: A score outside [0, 1] or not a number (a broken family).
    """
    if verdict is None:
        return 0.0
    if _field(verdict, "error"):
        return None if _field(verdict, "infra") else 0.0
    score = _field(verdict, "score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or math.isnan(score) or not 0 <= score <= 1:
        raise ValueError(f"verdict score {score!r} is not a number in [0, 1]; the family's grader is broken")
    return float(score)


def correctness(*, verdict: Any = None, **_: Any) -> float | None:
    """Reward function form of :func:`oracle_reward` (keyword arguments; extra ones ignored)."""
    return oracle_reward(verdict)
