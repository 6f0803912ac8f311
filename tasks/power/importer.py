"""Import N-PowerAI records (the original JSONL format) as npowerai instances.

A record is ``{"task_type", "task_id", "estimate_target" ("size" | "power"), "question", "answer"}``. The design
is recognised from ``task_type``; when the question states a standardised effect (Cohen's d, f or w, a hazard
ratio with an event probability), alpha and the power or size, the answer is RECOMPUTED by executing this
family's reference snippet with the question's own conventions (sides, per group/total), and the original answer
is kept in metadata. Otherwise the original answer is kept (``metadata["answer_source"] == "original"``), except
for the groups that are known to be broken in the original (two-sample t size and Cox power carry one constant
answer; paired-t power and ANOVA power follow no single convention): those are dropped unless recomputed.

Example:
    >>> items, report = import_records([{"task_type": "One-sample t-test", "task_id": 1, "estimate_target": "size",
    ...     "question": "Cohen's d = 0.5, two-sided alpha = 0.05, power 80%. How many patients?", "answer": 33}])
    >>> items[0].answer, report["recomputed"]
    (34, 1)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tasks.base import Instance, Split, TaskError

__all__ = ["TASK_TYPES", "import_records", "parse_params", "read_jsonl"]

#: N-PowerAI ``task_type`` -> this family's design (the original's Cox size answers follow Freedman's formula).
TASK_TYPES = {
    "one-sample t-test": "one_sample_t",
    "paired t-test": "paired_t",
    "two independent samples t-test": "two_sample_t",
    "one-way anova": "anova",
    "chi-square test of independence": "chisq",
    "cox proportional-hazards model": "cox_freedman",
}
#: (design, target) groups whose original answers are unusable (constant or inconsistent).
BROKEN = {("two_sample_t", "size"), ("cox_freedman", "power"), ("paired_t", "power"), ("anova", "power")}
_REQUIRED = {"task_type", "task_id", "estimate_target", "question", "answer"}
_NUM = r"(\d+(?:\.\d+)?|\.\d+)"
_PATTERNS = {
    "alpha": re.compile(r"(?:alpha|α|significance level)\s*(?:of|=|is|:)?\s*" + _NUM, re.IGNORECASE),
    "power": re.compile(r"power\s*(?:of|=|is|:)?\s*" + _NUM + r"\s*(%)?", re.IGNORECASE),
    "d": re.compile(r"(?:cohen'?s\s+d|effect size d)\s*(?:of|=|is|:)?\s*" + _NUM, re.IGNORECASE),
    "f": re.compile(r"cohen'?s\s+f\s*(?:of|=|is|:)?\s*" + _NUM, re.IGNORECASE),
    "w": re.compile(r"cohen'?s\s+w\s*(?:of|=|is|:)?\s*" + _NUM, re.IGNORECASE),
    "hr": re.compile(r"hazard ratio\s*(?:of|=|is|:)?\s*" + _NUM, re.IGNORECASE),
    "k": re.compile(r"(\d+)\s+(?:equal(?:ly sized)?\s+)?groups", re.IGNORECASE),
    "df": re.compile(r"(\d+)\s+degrees of freedom", re.IGNORECASE),
    "n": re.compile(r"(\d+)\s+(?:patients|participants|subjects)", re.IGNORECASE),
    "p_control": re.compile(r"event (?:probability|rate)\s*(?:of|=|is)?\s*" + _NUM + r"\s*(%)?\s*(?:in|for) the "
                            r"control", re.IGNORECASE),
    "p_treated": re.compile(r"event (?:probability|rate)\s*(?:of|=|is)?\s*" + _NUM + r"\s*(%)?\s*(?:in|for) the "
                            r"treatment", re.IGNORECASE),
}


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """Read an N-PowerAI JSONL file (one record per line; blank lines skipped).

    Raises:
        TaskError: A line is not JSON (names the file and line).
    """
    records = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path}:{lineno}: not JSON ({exc.msg}); expected one N-PowerAI record per line")
    return records


def _first(name: str, text: str) -> float | None:
    m = _PATTERNS[name].search(text)
    if not m:
        return None
    value = float(m.group(1))
    return value / 100 if len(m.groups()) > 1 and m.group(2) else value


def parse_params(design: str, target: str, text: str) -> dict[str, Any] | None:
    """Parameters for the reference snippet, or None when the question does not state them all.

    Example:
        >>> parse_params("one_sample_t", "size", "Cohen's d = 0.4, alpha = 0.05, one-sided, power of 90%")
        {'alpha': 0.05, 'sides': 1, 'd': 0.4, 'power': 0.9, 'scenario': 0}
    """
    alpha = _first("alpha", text) or (0.05 if target == "power" else None)  # the original omits 0.05 on power
    if alpha is None:
        return None
    params: dict[str, Any] = {"alpha": alpha}
    if design != "anova" and design != "chisq":
        params["sides"] = 1 if re.search(r"one[- ](?:sided|tailed)", text, re.IGNORECASE) else 2
    if design in ("one_sample_t", "paired_t", "two_sample_t"):
        params["d"] = _first("d", text)
    elif design == "anova":
        params.update(f=_first("f", text), k=_first("k", text))
    elif design == "chisq":
        params.update(w=_first("w", text), df=_first("df", text))
    else:
        params.update(hr=_first("hr", text), p_control=_first("p_control", text), p_treated=_first("p_treated", text))
    if target == "power":
        params["n"] = _first("n", text)
    else:
        params["power"] = _first("power", text)
    if any(v is None for v in params.values()):
        return None
    for key in ("k", "df", "n"):
        if key in params:
            params[key] = int(params[key])
    if design in ("two_sample_t", "anova"):
        params["report"] = "total" if re.search(r"\bin total\b|\btotal sample size\b", text, re.IGNORECASE) else "per_group"
    if design == "chisq":
        params.update(arms=2, levels=params["df"] + 1)
    params["scenario"] = 0
    return params


def _check(record: dict[str, Any], where: str) -> tuple[str | None, str]:
    missing = _REQUIRED - set(record)
    if missing:
        raise TaskError(f"{where}: N-PowerAI record lacks {sorted(missing)}; expected keys {sorted(_REQUIRED)}")
    target = str(record["estimate_target"]).strip().lower()
    if target not in ("size", "power"):
        raise TaskError(f"{where}: estimate_target {record['estimate_target']!r} must be 'size' or 'power'")
    return TASK_TYPES.get(str(record["task_type"]).strip().lower()), target


def import_records(records: list[dict[str, Any]] | Path | str, *, split: Split = "test"
                   ) -> tuple[list[Instance], dict[str, int]]:
    """Turn N-PowerAI records into instances; returns ``(instances, report)``.

    Args:
        records: Parsed records, or the path of a JSONL file.
        split: The split the instances are assigned to.

    Returns:
        The instances (ids ``npowerai/imported/<split>/<task_id>``) and counts ``recomputed``, ``kept``,
        ``dropped``, ``changed`` (recomputed answers that differ from the original).

    Raises:
        TaskError: A record misses a field or has an unknown estimate_target (names the record).
    """
    from tasks.npowerai import execute_snippet, grading_for
    from tasks.power.snippets import reference_code

    if not isinstance(records, list):
        records = read_jsonl(records)
    report = {"recomputed": 0, "kept": 0, "dropped": 0, "changed": 0}
    items = []
    for n, record in enumerate(records):
        design, target = _check(record, f"record {n} (task_id {record.get('task_id')!r})")
        params = parse_params(design, target, record["question"]) if design else None
        meta: dict[str, Any] = {"design": design, "target": target, "original_answer": record["answer"],
                                "task_type": record["task_type"]}
        if params is not None:
            answer = execute_snippet(reference_code(design, target, params))
            report["recomputed"] += 1
            report["changed"] += answer != record["answer"]
            meta.update(params=params, answer_source="recomputed")
        elif design is not None and (design, target) in BROKEN:
            report["dropped"] += 1
            continue
        else:
            answer = record["answer"]
            report["kept"] += 1
            meta["answer_source"] = "original"
        answer_type, options = grading_for(target)
        meta["grading"] = options
        items.append(Instance(
            id=f"npowerai/imported/{split}/{record['task_id']}", family="npowerai",
            category=f"{design or 'other'}.{target}", split=split, question=str(record["question"]),
            context="Compute the answer with Python (scipy and statsmodels are available), then submit only the "
                    "final number.",
            answer=answer, answer_type=answer_type, metadata=meta,
        ))
    return items, report
