"""The oracle reward: the family grader's verdict on the one submitted answer, as a scalar.

``rewards`` imports neither ``env_client`` nor ``medcopilot``; a verdict is accepted as the ``tasks.Verdict``
model or its dict form (what a trajectory stores).

Example:
    >>> oracle_reward(Verdict(correct=True, score=1.0))
    1.0
    >>> oracle_reward({"correct": False, "score": 0.0, "error": "gold is NaN"}) is None
    True
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["correctness", "oracle_reward"]


def _field(verdict: Any, name: str) -> Any:
    return verdict.get(name) if isinstance(verdict, dict) else getattr(verdict, name, None)


def oracle_reward(verdict: Any) -> float | None:
    """The verdict's score in [0, 1], or None when there is no usable verdict.

    Args:
        verdict: A ``tasks.Verdict`` or its dict; None when the episode ended without a graded submit.

    Returns:
        ``verdict.score``; ``0.0`` for an episode that ended without a submission (``verdict is None``);
        ``None`` when the grader itself failed (``verdict.error`` set), so a broken grader is never a silent 0.

    Raises:
        ValueError: A score outside [0, 1] or not a number (a broken family).
    """
    if verdict is None:
        return 0.0
    if _field(verdict, "error"):
        return None
    score = _field(verdict, "score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or math.isnan(score) or not 0 <= score <= 1:
        raise ValueError(f"verdict score {score!r} is not a number in [0, 1]; the family's grader is broken")
    return float(score)


def correctness(*, verdict: Any = None, **_: Any) -> float | None:
    """Reward function form of :func:`oracle_reward` (keyword arguments; extra ones ignored)."""
    return oracle_reward(verdict)
