"""Reward floors: the best score ONE constant answer earns over a whole split under a family's own grader.

A policy optimised for reward finds any constant answer that pays (a "do nothing" answer such as ``[-1]``, a
common count such as ``2``, ``yes``). :func:`constant_floor` measures the best such constant per family and
split; ``medagentgym eval`` reports it beside each family's success, and ``tasks.check_family`` refuses a
build whose floor exceeds its bound (:data:`FLOOR_BOUND`, or 50 % for yes/no families).

Example:
    >>> floor = constant_floor(tasks.make("medagentbench", root=root), fam.instances("test"))
    >>> floor["floor"] <= floor["bound"]
    True
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["FLOOR_BOUND", "FLOOR_CANDIDATES", "FLOOR_CONSTANTS", "constant_floor"]


#: Constant answers tried beside a family's most common gold answers: do nothing, yes/no, zero/one, empty list.
FLOOR_CONSTANTS = ("0", "1", "-1", "[-1]", "[]", "yes", "no", "true", "false", "none", "done", "predictions.csv")
#: The most a constant answer may score on a non-binary family; binary families are reported against 50 %.
FLOOR_BOUND = 0.10
#: Most common gold answers scored as constants (bounds the cost: candidates x instances grades).
FLOOR_CANDIDATES = 20


def _floor_context(family: Any, workspace: Path) -> Any:
    from medagentgym.tasks.base import GradeContext

    root = getattr(family, "root", None)
    return GradeContext(family_dir=Path(root) if root is not None else None, workspace=workspace)


def constant_floor(family: Any, instances: list[Any]) -> dict[str, Any]:
    """The best score ONE constant answer earns over ``instances`` (a whole split) under the family's grader.

    Candidates: the :data:`FLOOR_CANDIDATES` most common rendered gold answers and :data:`FLOOR_CONSTANTS`; each
    is submitted to every instance and graded by ``family.grade`` with an empty workspace (a constant answer
    writes no file). Families whose gold answers are programs (the reference code itself, graded by running
    it) are not executed: a program can only pass the instances it is the reference of, so their floor is the
    share of the most common reference program.

    Args:
        family: The family object (``tasks.make``).
        instances: Every instance of the split (not a ``--limit`` subset).

    Returns:
        ``{"floor", "constant", "method", "binary", "bound", "exceeds", "instances", "grader_errors"}``;
        ``binary`` families (every answer a yes/no) have ``bound`` 0.5, the others the family's ``floor_bound``
        attribute when it has one, else :data:`FLOOR_BOUND`.

    Example:
        >>> constant_floor(tasks.make("medagentbench", root=root), fam.instances("test"))["constant"]
        '[-1]'
    """
    import tempfile

    from medagentgym.tasks.graders import render_answer

    items = list(instances)
    binary = bool(items) and all(i.answer_type == "boolean" for i in items)
    # A family whose answers are few by design (a learning check, not a benchmark) states its own bound.
    bound = 0.5 if binary else getattr(family, "floor_bound", None) or FLOOR_BOUND
    out: dict[str, Any] = {"floor": 0.0, "constant": None, "method": "graded", "binary": binary, "bound": bound,
                           "instances": len(items), "grader_errors": 0}
    if not items:
        return {**out, "exceeds": False}
    if all(i.solution_lang == "python" and i.answer == i.solution for i in items):
        counts = Counter(str(i.answer) for i in items)
        top, n = counts.most_common(1)[0]
        return {**out, "floor": round(n / len(items), 6), "constant": top[:60], "method": "shared reference program",
                "exceeds": n / len(items) > bound + 1e-9}
    rendered = Counter(render_answer(i.answer_type, i.answer) for i in items)
    candidates = list(dict.fromkeys([r for r, _ in rendered.most_common(FLOOR_CANDIDATES)] + list(FLOOR_CONSTANTS)))
    best, best_c, errors = -1.0, None, 0
    with tempfile.TemporaryDirectory() as ws:
        ctx = _floor_context(family, Path(ws))
        for constant in candidates:
            total = 0.0
            for inst in items:
                try:
                    total += family.grade(inst, constant, ctx).score
                except Exception:  # noqa: BLE001 - a crashing grader earns nothing here; counted, shown in the report
                    errors += 1
            if total / len(items) > best:
                best, best_c = total / len(items), constant
    return {**out, "floor": round(best, 6), "constant": best_c[:60], "grader_errors": errors,
            "exceeds": best > bound + 1e-9}
