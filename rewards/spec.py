"""``RewardSpec``: named reward functions and their weights, combined into one scalar plus logged components.

A spec maps names to functions and weights. Calling it with the episode's keyword arguments (``verdict``,
``trajectory``, ``verifier_score``, budgets, ...) calls every function and returns a :class:`RewardResult`:
the weighted total and each component (unweighted) for logging.

- Weight 0 means "log, don't train on it": the term is computed and logged but never enters the total, and a
  None from it never affects the total.
- A weighted term that returns None (an infrastructure failure of grading, a failed verifier call, no token
  counts) is missing. A grading failure the submission caused is not missing: ``correctness`` is 0.0 for it
  (see ``medagentgym.rewards.oracle`` for the two kinds of grading failure).
  With ``missing="none"`` (the default) the total is then None as well, so the caller must drop or retry the
  sample instead of training on a silently wrong number. With ``missing="skip"`` the missing term is left
  out of the sum and the total is the sum of the present weighted terms (None if all are missing).
- A term that raises propagates: a crashed reward is loud, never 0.

Example:
    >>> spec = RewardSpec.from_weights({"correctness": 1.0, "format_penalty": 0.1, "turn_cost": 0.0})
    >>> r = spec(verdict=verdict, trajectory=traj, max_turns=8)
    >>> r.total, r.components   # 0.975, {"correctness": 1.0, "format_penalty": -0.25, "turn_cost": -0.375}
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from medagentgym.rewards.errors import RewardError
from medagentgym.rewards.oracle import correctness
from medagentgym.rewards.shaping import (
    format_penalty,
    length_cost,
    loop_penalty,
    turn_cost,
    verifier_score,
)

__all__ = ["REWARD_FUNCS", "RewardResult", "RewardSpec", "combine"]

RewardFunc = Callable[..., "float | None"]

#: The named terms a recipe's ``reward.weights`` may use.
REWARD_FUNCS: dict[str, RewardFunc] = {
    "correctness": correctness,
    "format_penalty": format_penalty,
    "loop_penalty": loop_penalty,
    "turn_cost": turn_cost,
    "length_cost": length_cost,
    "verifier_score": verifier_score,
}

MISSING_MODES = ("none", "skip")


@dataclass(frozen=True)
class RewardResult:
    """One combined reward.

    Attributes:
        total: The weighted sum, or None when a weighted term was missing under ``missing="none"``.
        components: Every term's unweighted value (None = missing), weight-0 terms included.
        missing: Names of the weighted terms that returned None.
    """

    total: float | None
    components: dict[str, float | None]
    missing: tuple[str, ...] = ()

    def log_dict(self, prefix: str = "reward/") -> dict[str, float]:
        """Flat ``{prefix + name: value}`` of the present values (and ``prefix + "total"``), for a logger."""
        out = {f"{prefix}{k}": v for k, v in self.components.items() if v is not None}
        if self.total is not None:
            out[f"{prefix}total"] = self.total
        return out


@dataclass(frozen=True)
class RewardSpec:
    """Named reward functions and their weights.

    Args:
        funcs: ``name -> function``; each takes keyword arguments and returns a float or None.
        weights: ``name -> weight`` for the same names (0 = log only).
        missing: ``"none"`` (a missing weighted term makes the total None) or ``"skip"`` (leave it out).

    Raises:
        RewardError: Names of ``funcs`` and ``weights`` differ, a weight is not a finite number, or ``missing``
            is not one of ``none``/``skip``.
    """

    funcs: Mapping[str, RewardFunc]
    weights: Mapping[str, float]
    missing: Literal["none", "skip"] = "none"
    _order: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.missing not in MISSING_MODES:
            raise RewardError(f"missing={self.missing!r} is not valid; use 'none' (total None) or 'skip'")
        if set(self.funcs) != set(self.weights):
            diff = sorted(set(self.funcs) ^ set(self.weights))
            raise RewardError(f"reward names without both a function and a weight: {diff}; give each name both")
        for name, w in self.weights.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
                raise RewardError(f"reward weight {name}={w!r} is not a finite number; set e.g. {name}: 0.1")
            if not callable(self.funcs[name]):
                raise RewardError(f"reward {name!r} is not callable; pass a function")
        object.__setattr__(self, "_order", tuple(self.funcs))

    @classmethod
    def from_weights(cls, weights: Mapping[str, float], *, missing: Literal["none", "skip"] = "none",
                     extra: Mapping[str, RewardFunc] | None = None) -> RewardSpec:
        """Build a spec from a recipe's ``reward.weights`` mapping of registered names.

        Args:
            weights: ``{name: weight}``; names from :data:`REWARD_FUNCS` (or ``extra``).
            missing: See the class.
            extra: More named functions allowed besides the registered ones.

        Raises:
            RewardError: An unknown name (the message names the nearest known one), an empty mapping, or a
                bad weight.

        Example:
            >>> RewardSpec.from_weights({"correctness": 1.0, "loop_penalty": 0.2})
        """
        known = {**REWARD_FUNCS, **(extra or {})}
        if not weights:
            raise RewardError("reward.weights is empty; give at least one term, e.g. {correctness: 1.0}")
        for name in weights:
            if name not in known:
                near = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.0)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise RewardError(f"unknown reward {name!r}; {hint}known: {', '.join(sorted(known))}")
        return cls({n: known[n] for n in weights}, dict(weights), missing)

    @property
    def names(self) -> tuple[str, ...]:
        """The term names, in the order given."""
        return self._order

    def __call__(self, **kwargs: Any) -> RewardResult:
        """Compute every term with ``kwargs`` and combine the weighted ones (:meth:`combine`).

        Returns:
            A :class:`RewardResult`. Terms are computed in order; an exception from one propagates.

        Raises:
            RewardError: A term returned something that is neither None nor a finite number.
        """
        return self.combine({name: self.funcs[name](**kwargs) for name in self._order})

    def combine(self, components: Mapping[str, Any]) -> RewardResult:
        """Combine term values computed elsewhere (e.g. per episode by a rollout): :func:`combine` with this
        spec's weights and ``missing`` mode."""
        return combine(components, {name: self.weights[name] for name in self._order}, missing=self.missing)


def combine(components: Mapping[str, Any], weights: Mapping[str, float], *,
            missing: Literal["none", "skip"] = "none") -> RewardResult:
    """The weighted total of term values (``name -> value``, None = missing), by :class:`RewardSpec`'s rules.

    Args:
        components: A value for every name of ``weights``.
        weights: ``name -> weight`` (0 = log only).
        missing: ``"none"`` (a missing weighted term makes the total None) or ``"skip"`` (leave it out).

    Raises:
        RewardError: A term is absent from ``components``, or a value is neither None nor a finite number.
    """
    values: dict[str, float | None] = {}
    total, absent = 0.0, []
    for name, weight in weights.items():
        if name not in components:
            raise RewardError(f"no value for reward {name!r}; pass every term of the spec")
        value = components[name]
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise RewardError(f"reward {name!r} returned {value!r}; a term returns a finite float or None")
            value = float(value)
        values[name] = value
        if weight == 0:
            continue
        if value is None:
            absent.append(name)
        else:
            total += weight * value
    if absent and (missing == "none" or len(absent) == sum(w != 0 for w in weights.values())):
        return RewardResult(None, values, tuple(absent))
    return RewardResult(total, values, tuple(absent))
