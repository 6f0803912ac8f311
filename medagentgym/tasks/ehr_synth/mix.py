"""Question-type and answer mix of EHR SQL questions, and the per-category quotas that make a build match a target.

Features are read from the gold SQL (and, for the answer mix, the gold answer), the same way for the public files
and for our instances, so the two sides of ``scripts/check_public_sql.py``'s table are measured alike:

================== ===================================================================================
feature            the gold SQL ...
================== ===================================================================================
time_window        filters on time: ``strftime(`` or ``datetime(``
top_n              ranks: ``dense_rank``
event_after_event  joins two timed events: a ``t1`` ... ``t2`` sub-query pair
yes_no             asks yes/no: ``count(*) > 0`` or a comparison of two sub-queries (or a boolean answer)
current_visit      asks about the current stay: ``dischtime`` / ``outtime`` / ``unitdischargetime`` /
                   ``hospitaldischargetime is null``
two_attribute      selects two or more columns at its top level (TREQS: "what is the X and Y of ...")
nothing_found      (answer) the answer is empty, zero or NULL, yes/no questions aside; split into
                   ``nothing_zero``, ``nothing_none``, ``nothing_empty``
================== ===================================================================================

:func:`quotas` chooses how many instances each (category, nothing-found or not) cell keeps so that these shares
approach a target (iterative proportional fitting under each cell's availability).

Example:
    >>> sorted(question_features("select count( * ) > 0 from admissions where admissions.dischtime is null"))
    ['current_visit', 'yes_no']
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["ANSWER_FEATURES", "QUESTION_FEATURES", "load_target", "measure", "nothing_kind", "question_features",
           "quotas"]

QUESTION_FEATURES = ("time_window", "top_n", "event_after_event", "yes_no", "current_visit", "two_attribute")
ANSWER_FEATURES = ("nothing_found", "nothing_zero", "nothing_none", "nothing_empty")
_RX = {
    "time_window": re.compile(r"strftime\s*\(|datetime\s*\("),
    "top_n": re.compile(r"dense_rank"),
    "event_after_event": re.compile(r"\bt1\b.*\bt2\b", re.DOTALL),
    "yes_no": re.compile(r"count\s*\(\s*\*\s*\)\s*>\s*0"),
    "current_visit": re.compile(r"\b(?:dischtime|outtime|unitdischargetime|hospitaldischargetime)\s+is\s+null"),
}
_COMPARISON = re.compile(r"\s*select\s*\(.*\)\s*(?:<=|>=|<>|!=|<|>|=)\s*\(", re.DOTALL)


def _top_level_select(sql: str) -> str:
    """The select list of the outermost query (up to its first top-level ``from``)."""
    depth, out = 0, []
    low = sql.lower()
    i = low.find("select")
    i = 0 if i < 0 else i + len("select")
    while i < len(low):
        ch = low[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and low.startswith("from", i) and (i == 0 or not low[i - 1].isalnum()):
            break
        out.append(ch if depth == 0 else " ")
        i += 1
    return "".join(out)


def question_features(sql: str, answer_type: str | None = None) -> set[str]:
    """The question-type features of one gold query (see the module docstring)."""
    low = str(sql).lower()
    out = {name for name, rx in _RX.items() if rx.search(low)}
    if _COMPARISON.match(low) or answer_type == "boolean":
        out.add("yes_no")
    if "," in _top_level_select(low):
        out.add("two_attribute")
    return out


def nothing_kind(answer: Any, answer_type: str | None = None) -> str | None:
    """``zero``, ``none`` or ``empty`` when an answer says "nothing found"; None otherwise (and for yes/no).

    ``answer`` is one of our gold answers (typed by ``answer_type``) or a public answer list of strings (MedAgentGym:
    ``['0']``, ``['None']``, ``[]``; pass ``answer_type=None``).
    """
    if answer_type in ("boolean", "unknown"):
        return None
    if answer_type is None or answer_type == "result":  # a public result list
        values = list(answer) if isinstance(answer, (list, tuple)) else [answer]
        if not values:
            return "empty"
        if all(v is None or str(v).strip().lower() in ("none", "null", "nan") for v in values):
            return "none"
        if len(values) == 1 and re.fullmatch(r"-?0+(?:\.0+)?", str(values[0]).strip()):
            return "zero"
        return None
    if answer is None:
        return "none"
    if isinstance(answer, (list, tuple)):
        return "empty" if not answer else None
    if answer_type in ("integer", "number") and not isinstance(answer, bool):
        try:
            return "zero" if float(answer) == 0 else None
        except (TypeError, ValueError):
            return None
    return None


def features(sql: str, answer: Any, answer_type: str | None = None) -> set[str]:
    """Question features plus ``nothing_found`` / ``nothing_<kind>`` of one (gold SQL, answer)."""
    out = question_features(sql, answer_type)
    kind = None if "yes_no" in out else nothing_kind(answer, answer_type)
    if kind:
        out |= {"nothing_found", f"nothing_{kind}"}
    return out


def measure(items: Iterable[tuple[str, Any, str | None]]) -> dict[str, float]:
    """Shares (%) of every feature over ``(gold SQL, answer, answer_type)`` triples, plus ``n``.

    Question features are shares of all items; answer features of the items whose answer is known (``n_answers``;
    pass ``answer_type="unknown"`` for a record without one, such as EHRSQL's own files).

    Example:
        >>> measure([("select count(*) from t where strftime('%Y', x) = '2105'", 0, "integer")])["nothing_zero"]
        100.0
    """
    counts: dict[str, int] = dict.fromkeys(QUESTION_FEATURES + ANSWER_FEATURES, 0)
    n = answered = 0
    for sql, answer, answer_type in items:
        n += 1
        answered += answer_type != "unknown"
        for f in features(sql, answer, answer_type):
            counts[f] += 1
    out: dict[str, float] = {k: round(100.0 * counts[k] / n, 1) if n else 0.0 for k in QUESTION_FEATURES}
    out.update({k: round(100.0 * counts[k] / answered, 1) if answered else 0.0 for k in ANSWER_FEATURES})
    out["n"], out["n_answers"] = n, answered
    return out


def load_target(path: Path) -> dict[str, float]:
    """Target shares (fractions, 0-1) from a family's ``mix.json`` (``{"target": {feature: share}}``)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    return {k: float(v) for k, v in doc["target"].items()}


def quotas(cells: list[tuple[frozenset[str], int]], target: dict[str, float], *, rounds: int = 300,
           floor: list[int] | None = None) -> list[int]:
    """How many instances each cell keeps so that feature shares approach ``target``.

    Args:
        cells: ``(features of the cell's instances, instances available)``; a cell is one category's instances
            with or without a "nothing found" answer (every instance of a cell shares its features).
        target: Feature -> share (0-1); features no cell has, or with a share outside (0, 1), are left alone.
        rounds: Raking passes (each scales the cells with and without one feature towards its share, then caps
            every cell at what it has).
        floor: The least each cell keeps (e.g. 1 for a category's only cell, so no category vanishes).

    Returns:
        Instances to keep per cell (deterministic: integer rounding of the fitted weights).

    Example:
        >>> quotas([(frozenset({"top_n"}), 10), (frozenset(), 90)], {"top_n": 0.2})
        [10, 40]
    """
    avail = [max(0, a) for _f, a in cells]
    w = [float(a) for a in avail]
    wanted = {k: v for k, v in target.items() if 0.0 < v < 1.0 and any(k in f and a for f, a in cells)}
    for _ in range(rounds):
        for feat, share in wanted.items():
            total = sum(w)
            have = sum(x for x, (f, _a) in zip(w, cells) if feat in f)
            if total <= 0 or have <= 0 or have >= total:
                continue
            up, down = share / (have / total), (1 - share) / (1 - have / total)
            w = [min(x * (up if feat in f else down), a) for x, (f, _a), a in zip(w, cells, avail)]
    out = [round(x) for x in w]
    if floor is not None:
        out = [max(o, min(fl, a)) for o, fl, a in zip(out, floor, avail)]
    return out
