"""Shaping terms: penalties and costs computed from a finished trajectory, and the learned verifier's score.

Every term is a plain function of keyword arguments (extra ones ignored). Penalties and costs are returned as
values in ``[-1, 0]`` (0 = nothing to penalise), so recipe weights are positive numbers:
``reward.weights: {correctness: 1.0, format_penalty: 0.1}`` subtracts up to 0.1 for an episode whose every
turn failed to parse.

Trajectories are duck-typed: anything with ``.steps`` (each with ``.status``, ``.loop``, ``.n_tokens``) and
``.final`` (``.reason``, ``.total_tokens``), or the same as dicts (a JSONL record). ``rewards`` imports neither
``env_client`` nor ``medcopilot``.

Example:
    >>> format_penalty(trajectory=traj)     # 1 of 4 turns did not parse
    -0.25
    >>> verifier_score(verifier_score=None) is None   # the verifier failed: missing, not 0
    True
"""

from __future__ import annotations

import math
from typing import Any

from medagentgym.rewards.errors import RewardError

__all__ = ["format_penalty", "length_cost", "loop_penalty", "turn_cost", "verifier_score"]

#: Step statuses that mean the model's reply was not a usable action (did not parse, or not permitted).
INVALID_STATUSES = frozenset({"parse_error", "forbidden"})


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _steps(trajectory: Any) -> list[Any]:
    if trajectory is None:
        raise RewardError("this reward term needs trajectory=...; pass the finished episode's trajectory")
    return list(_get(trajectory, "steps", None) or [])


def _config_value(trajectory: Any, key: str) -> Any:
    return (_get(_get(trajectory, "header"), "config") or {}).get(key)


def format_penalty(*, trajectory: Any, **_: Any) -> float:
    """Minus the share of turns whose reply did not parse or named a forbidden action.

    Args:
        trajectory: The finished episode (``.steps`` with ``.status``).

    Returns:
        A value in ``[-1, 0]``; 0 for an episode with no turns.

    Raises:
        RewardError: ``trajectory`` is None.
    """
    steps = _steps(trajectory)
    if not steps:
        return 0.0
    return 0.0 - sum(_get(s, "status") in INVALID_STATUSES for s in steps) / len(steps)


def loop_penalty(*, trajectory: Any, **_: Any) -> float:
    """Minus the share of turns flagged as a loop (the same action or error repeated); -1 when the episode
    was ended for looping (``final.reason == "loop"``).

    Returns:
        A value in ``[-1, 0]``.
    """
    steps = _steps(trajectory)
    if _get(_get(trajectory, "final"), "reason") == "loop":
        return -1.0
    if not steps:
        return 0.0
    return 0.0 - sum(bool(_get(s, "loop", False)) for s in steps) / len(steps)


def turn_cost(*, trajectory: Any, max_turns: int | None = None, **_: Any) -> float:
    """Minus the turns taken as a fraction of the turn budget.

    Args:
        trajectory: The finished episode.
        max_turns: The budget; default the ``max_turns`` of the episode's config (``header.config``). The episode
            may have run under a lower family cap; pass ``max_turns=`` for the exact budget.

    Returns:
        ``-turns / max_turns``, clipped to ``[-1, 0]``.

    Raises:
        RewardError: No budget is known (pass ``max_turns=``), or it is not a positive number.
    """
    steps = _steps(trajectory)
    budget = max_turns if max_turns is not None else _config_value(trajectory, "max_turns")
    if not isinstance(budget, (int, float)) or isinstance(budget, bool) or budget <= 0:
        raise RewardError(f"turn_cost needs a positive turn budget, got {budget!r}; pass max_turns=N")
    return 0.0 - min(len(steps) / budget, 1.0)


def length_cost(*, trajectory: Any, max_tokens: int | None = None, **_: Any) -> float | None:
    """Minus the completion tokens generated, as a fraction of a token budget.

    Args:
        trajectory: The finished episode (``final.total_tokens``, else the sum of ``steps[i].n_tokens``).
        max_tokens: The budget; default the episode's ``max_total_tokens`` config.

    Returns:
        ``-tokens / max_tokens`` clipped to ``[-1, 0]``; None when no step reported its token count (a policy
        that does not count tokens: missing, not free).

    Raises:
        RewardError: No positive budget is known (pass ``max_tokens=``).
    """
    steps = _steps(trajectory)
    budget = max_tokens if max_tokens is not None else _config_value(trajectory, "max_total_tokens")
    if not isinstance(budget, (int, float)) or isinstance(budget, bool) or budget <= 0:
        raise RewardError(f"length_cost needs a positive token budget, got {budget!r}; pass max_tokens=N")
    counts = [_get(s, "n_tokens") for s in steps]
    final_tokens = _get(_get(trajectory, "final"), "total_tokens")
    if steps and all(c is None for c in counts):
        return None
    tokens = final_tokens if final_tokens is not None else sum(c or 0 for c in counts)
    return 0.0 - min(tokens / budget, 1.0)


def verifier_score(*, verifier_score: float | None = None, **_: Any) -> float | None:
    """The learned verifier's score of the episode, passed through.

    Args:
        verifier_score: The score the verifier gave (in ``[0, 1]``), or None when it was not run or its call
            failed. A failure is missing (None), never a silent 0.

    Returns:
        The score as a float, or None.

    Raises:
        RewardError: A score that is not a finite number in ``[0, 1]``.
    """
    if verifier_score is None:
        return None
    if isinstance(verifier_score, bool) or not isinstance(verifier_score, (int, float)) or \
            math.isnan(verifier_score) or not 0.0 <= verifier_score <= 1.0:
        raise RewardError(f"verifier score {verifier_score!r} is not a number in [0, 1]; check the verifier output")
    return float(verifier_score)
