"""The ``public`` answer convention: imported records keep the benchmark's own gold, graded as its scorer grades.

``medagentgym import --answers public`` (``ImportOptions.answers == "public"``) keeps each record's published
answer as the gold instead of recomputing it (the default ``recompute`` convention), and grades it the way the
benchmark's own scorer does, without the original harness's loopholes:

* EHR SQL records (MedAgentGym's ``mimic_iii``/``eicu``/``treqs`` JSONL, whose ``answer`` is a list of strings):
  answer type ``result`` (``medagentgym.tasks.graders.grade_result``): the distinct values of EHRSQL's / TREQS's
  executed result, in any order; yes/no questions (``count(*) > 0``) as 1/0 or words. The gold SQL is kept as it
  is (post-processed like EHRSQL's evaluator): the answers refer to the credentialed database, so episodes need
  ``--db`` with it; without it the instances can still grade submissions.
* N-PowerAI records: the published number, sizes as exact integers and powers within N-PowerAI's +-1 % of the
  gold (``int(x) == answer``, ``0.99 a < x < 1.01 a``), after checking that the question's stated quantities
  reproduce it (``medagentgym.tasks.power``).

Records whose public gold is defective or nondeterministic are set aside (rejected with a ``gold_*`` reason and
the evidence, counted in the import summary):

=================== ==========================================================================================
reason              what is wrong with the published answer
=================== ==========================================================================================
gold_wall_clock     EHRSQL SQL with ``current_time``/``'now'``: MedAgentGym executed it without EHRSQL's
                    post-processing, so SQLite read the time of day as 2000-01-01 (every "this year" answer is
                    empty or "no", "-354" days in hospital); EHRSQL's scorer fixes 2105-12-31 23:59:00
gold_day_of_year    ``strftime('%j')`` (day of the year) where EHRSQL's evaluator computes ``'%J'`` (Julian day):
                    a stay across a year end gets a wrong (negative) length
gold_first_row      TREQS: a non-aggregate query whose result can hold several rows; MedAgentGym kept the first
                    row only, TREQS's scorer compares every row
gold_constant       N-PowerAI: every record of the group carries the same answer whatever its inputs
gold_not_reproducible  N-PowerAI: the stated quantities do not give the published answer under the convention
                    that reproduces the rest of its group (with the cause where it is known)
=================== ==========================================================================================
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

__all__ = ["CONVENTIONS", "FAMILIES", "check_public_answers", "ehr_gold_defect", "is_yes_no", "known_wrong",
           "npowerai_constant_groups", "npowerai_defect", "public_renderings", "treqs_single_row"]

#: ``ImportOptions.answers``: recompute answers on the target database / from the question (default), or keep the
#: benchmark's published answer.
CONVENTIONS = ("recompute", "public")
#: Families whose public files carry a gold answer the ``public`` convention can keep.
FAMILIES = ("mimic_iii", "eicu", "treqs", "npowerai")

_YES_NO = re.compile(r"count\s*\(\s*\*\s*\)\s*>\s*0", re.IGNORECASE)
_COMPARISON_QUERY = re.compile(r"\s*select\s*\(.*\)\s*(?:<=|>=|<>|!=|<|>|=)\s*\(", re.IGNORECASE | re.DOTALL)
_CLOCK = re.compile(r"\bcurrent_time\b|'now'", re.IGNORECASE)
_AGGREGATE = re.compile(r"\b(?:count|max|min|avg|sum)\s*\(", re.IGNORECASE)
_COLUMN = re.compile(r"\b(\w+)\s*\.\s*[\"'`]?(\w+)[\"'`]?")
_EQUALITY = re.compile(r"\b(\w+)\s*\.\s*[\"'`]?(\w+)[\"'`]?\s*=\s*(?:'[^']*'|\"[^\"]*\"|\d+)")

#: TREQS (MIMICSQL) columns that one value of a key column determines (one row's worth of values):
#: per patient (DEMOGRAPHIC has one row per admission, so admission columns are NOT determined by the patient),
#: per admission, and the ICD-9 dictionary titles.
_PATIENT_COLUMNS = frozenset({"subject_id", "name", "gender", "dob", "dod", "dob_year", "dod_year", "expire_flag"})
_TREQS_KEYS: dict[tuple[str, str], frozenset[str]] = {
    ("demographic", "subject_id"): _PATIENT_COLUMNS,
    ("demographic", "name"): _PATIENT_COLUMNS,
    ("demographic", "hadm_id"): frozenset({"*"}),
    ("diagnoses", "icd9_code"): frozenset({"icd9_code", "short_title", "long_title"}),
    ("diagnoses", "long_title"): frozenset({"icd9_code", "short_title", "long_title"}),
    ("procedures", "icd9_code"): frozenset({"icd9_code", "short_title", "long_title"}),
    ("procedures", "long_title"): frozenset({"icd9_code", "short_title", "long_title"}),
}


def is_yes_no(sql: str) -> bool:
    """EHRSQL's yes/no questions: ``count(*) > 0``, or a comparison of two subqueries (SQLite answers 1/0)."""
    return bool(_YES_NO.search(sql) or _COMPARISON_QUERY.match(sql))


def treqs_single_row(sql: str) -> bool:
    """Whether a MIMICSQL query returns one row's worth of values whatever the data: an aggregate, or columns that
    the query's equality conditions determine (a patient's gender by ``subject_id``, a title by ``icd9_code``).

    Example:
        >>> treqs_single_row("select demographic.'gender' from demographic where demographic.'subject_id' = '10'")
        True
        >>> treqs_single_row("select demographic.'admittime' from demographic where demographic.'name' = 'ann'")
        False
    """
    low = sql.lower()
    head, _, rest = low.partition(" from ")
    if _AGGREGATE.search(head):
        return True
    where = rest.partition(" where ")[2]
    determined: set[tuple[str, str]] = set()
    for table, column in _EQUALITY.findall(where):
        for col in _TREQS_KEYS.get((table, column), ()):
            determined.add((table, col))
    selected = _COLUMN.findall(head)
    if not selected:
        return False
    return all((t, c) in determined or (t, "*") in determined or
               (c in _PATIENT_COLUMNS and ("demographic", c) in determined and t == "demographic")
               for t, c in selected)


def ehr_gold_defect(family: str, raw_sql: str) -> tuple[str, str] | None:
    """``(reason, detail)`` when a MedAgentGym EHR record's published answer cannot be the benchmark's gold.

    Args:
        family: ``mimic_iii``, ``eicu``, ``ehr_seqsql`` (EHRSQL SQL) or ``treqs`` (MIMICSQL SQL).
        raw_sql: The record's gold SQL as published (before EHRSQL's post-processing).
    """
    if family == "treqs":
        if not treqs_single_row(raw_sql):
            return ("gold_first_row", ("the query can return several rows; MedAgentGym kept only the first, "
                                       "TREQS's scorer compares every row"))
        return None
    if _CLOCK.search(raw_sql):
        return ("gold_wall_clock", ("the SQL uses current_time; MedAgentGym's answer was computed with SQLite's "
                                    "time of day (read as 2000-01-01), not EHRSQL's fixed 2105-12-31 23:59:00"))
    if "%j" in raw_sql:
        return ("gold_day_of_year", ("strftime('%j') is the day of the year; EHRSQL's evaluator computes '%J' "
                                     "(Julian day), so a stay across a year end has a wrong length"))
    return None


def _constant_groups(records: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(task_type, target) groups of N-PowerAI records whose answers are all equal while their questions differ."""
    answers: dict[tuple[str, str], Counter] = {}
    questions: dict[tuple[str, str], set[str]] = {}
    for rec in records:
        key = (str(rec.get("task_type", "")).strip().lower(), str(rec.get("estimate_target", "")).strip().lower())
        answers.setdefault(key, Counter())[repr(rec.get("answer"))] += 1
        questions.setdefault(key, set()).add(str(rec.get("question", "")))
    return {k for k, c in answers.items() if len(c) == 1 and len(questions[k]) >= 5}


def npowerai_constant_groups(records: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Groups set aside as ``gold_constant`` (see :func:`_constant_groups`); needs every record of the import."""
    return _constant_groups(records)


def npowerai_defect(design: str, target: str, params: dict[str, Any], ours: Any, published: Any) -> tuple[str, str] | None:
    """``(reason, detail)`` when the published N-PowerAI answer is not what the stated quantities give.

    Args:
        design, target: The record's design and target (``paired_t``, ``power``).
        params: The parameters read from the question (``medagentgym.tasks.power.importer.parse_raw``).
        ours: The answer recomputed under the group's convention.
        published: The record's answer.
    """
    detail = f"published {published!r}, the stated quantities give {ours!r}"
    cause = _known_cause(design, target, params, published)
    if cause:  # a generator defect reproduces it, even where it falls within 1 % of the right value by chance
        return "gold_not_reproducible", f"{detail}; {cause}"
    if _scorer_accepts(target, ours, published):
        return None
    return "gold_not_reproducible", detail


def _scorer_accepts(target: str, submitted: Any, gold: Any) -> bool:
    """N-PowerAI's scorer: sizes ``int(x) == gold``, powers strictly within 1 % of the gold."""
    try:
        if target == "power":
            return float(gold) * 0.99 < float(submitted) < float(gold) * 1.01
        return int(submitted) == int(gold) and float(submitted) == int(submitted)
    except (TypeError, ValueError, OverflowError):
        return False


#: A published power this close to a defect's formula is that defect (the published values agree with the formulas
#: to ~1e-5; the nearest correct values are 1e-3 or more away).
_SAME = 1e-4


def _known_cause(design: str, target: str, params: dict[str, Any], published: Any) -> str:
    """The generator defect that reproduces a published answer, where one is known."""
    from medagentgym.tasks.npowerai import execute_snippet
    from medagentgym.tasks.power.snippets import reference_code

    if design == "paired_t" and target == "power" and "n" in params:
        # The published paired powers are the exact one-sided power at n = 42 (df 41), whatever n the question
        # states: 42 is also the answer every two-sample size record carries (a stale sample size).
        at_42 = execute_snippet(reference_code(design, target, {**params, "sides": 1, "n": 42}).replace(
            "answer = round(float(power_at(n)), 4)", "answer = float(power_at(n))"))
        if params["n"] != 42 and abs(at_42 - float(published)) < _SAME:
            return (f"it is the one-sided power at n = 42 (df 41), not at the stated n = {params['n']}: "
                    "a stale sample size in the generator")
    if design == "anova" and target == "power" and "means" in params:
        from scipy.stats import f as f_dist
        from scipy.stats import ncf

        k, n = params["k"], params["n"]
        grand = sum(params["means"]) / k
        effect = (sum((m - grand) ** 2 for m in params["means"]) / (k - 1)) ** 0.5 / params["sd"]
        df1, df2 = k - 1, k * n - k
        quirk = float(ncf.sf(f_dist.ppf(1 - params["alpha"], df1, df2), df1, df2, effect ** 2 * 10 * n))
        if abs(quirk - float(published)) < _SAME:
            return (f"it is the power at noncentrality f^2 x 10n (10 x {n}), not f^2 x {k}n for the stated {k} groups "
                    f"of {n}: a generator quirk")
    return ""


# ---------------------------------------------------------------------------------------------------------------
# Checking the convention on imported records: the published answers in their published formats must grade right,
# known-wrong answers (other answers, perturbations, hedges) must grade wrong.

_SHOTGUN = " ".join(str(i) for i in range(200)) + " yes no true false None []"


def public_renderings(inst: Any) -> dict[str, str]:
    """The instance's published gold written the ways the benchmark and its users write it.

    EHR (answer type ``result``): the file's JSON list, Python's ``repr`` of it, ``sqlite3``'s rows, and the bare
    value when there is one; N-PowerAI: the number as published and as ``int`` / ``float`` print it.
    """
    import json

    gold = inst.answer
    if inst.answer_type != "result":
        return {"published": str(gold), "printed": repr(float(gold)) if inst.answer_type == "number" else str(int(gold))}
    values = [None if v is None or str(v).strip().lower() == "none" else v for v in gold]
    out = {"file": json.dumps(gold), "python": repr(list(gold)), "rows": repr([(v,) for v in values])}
    if len({str(v) for v in gold}) == 1:
        out["bare"] = "None" if values[0] is None else str(values[0])
    if len(values) > 1 and inst.family == "treqs":
        out["rows"] = repr([tuple(values)])  # TREQS: the first row of several columns
    return out


def _perturb(value: Any) -> list[str]:
    import datetime as dt

    text = str(value)
    try:
        when = dt.datetime.fromisoformat(text)
        return [str(when + dt.timedelta(days=1)), str(when - dt.timedelta(minutes=1))]
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return [text + "x", "None"] if text.lower() != "none" else ["0"]
    if number.is_integer() and "." not in text:
        return [str(int(number) + 1), str(int(number) - 1)]
    return [repr(number * 1.011 + 0.001), repr(number * 0.989 - 0.001)]


def known_wrong(inst: Any, others: list[Any]) -> list[str]:
    """Submissions that must grade wrong for ``inst``: perturbed values, another instance's answer, a missing or an
    extra value, and hedges (two candidates, the gold plus a wrong value, a shotgun of numbers and words).

    Args:
        inst: An imported instance under the ``public`` convention.
        others: Other instances of the same import (their answers are realistic wrong answers).
    """
    import json

    gold = inst.answer
    out = [_SHOTGUN]
    if inst.answer_type != "result":  # N-PowerAI
        out += _perturb(gold) + [f"{gold} or {_perturb(gold)[0]}", f"{gold} {_perturb(gold)[0]}"]
        other = next((o.answer for o in others if o is not inst and o.metadata.get("target") == inst.metadata.get("target")
                      and not _scorer_accepts(inst.metadata.get("target", "size"), o.answer, gold)), None)
        return out + ([str(other)] if other is not None else [])
    yes_no = inst.metadata.get("grading", {}).get("yes_no", False)
    distinct = list(dict.fromkeys(str(v) for v in gold))
    if yes_no:
        flip = "0" if distinct == ["1"] else "1"
        return out + [flip, "no" if flip == "0" else "yes", f"[{flip}]", "1 or 0", "yes, no", "[1, 0]"]
    wrong_value = _perturb(distinct[0])[0]
    out += [json.dumps([wrong_value]), json.dumps(distinct + [wrong_value]), f"{distinct[0]} or {wrong_value}"]
    if len(distinct) > 1:
        out.append(json.dumps(distinct[:-1]))
    else:
        out.append(wrong_value)
    from medagentgym.tasks.graders import grade

    for other in others:
        if other is inst or other.answer_type != "result" or other.metadata.get("grading", {}).get("yes_no"):
            continue
        candidate = json.dumps(list(other.answer))
        if not grade("result", gold, candidate).correct:
            out.append(candidate)
            break
    return out


def check_public_answers(family: Any, instances: list[Any]) -> dict[str, Any]:
    """Grade every instance's published answer in each published format, and its known-wrong answers.

    Returns:
        ``{"instances", "correct" (all formats right), "correct_pct", "by_format": {format: right},
        "wrong_submissions", "graded_wrong", "graded_wrong_pct", "failures": [first few (id, format or
        submission, reason)]}``.
    """
    by_format: Counter = Counter()
    correct, wrong_total, wrong_ok = 0, 0, 0
    failures: list[tuple[str, str, str]] = []
    for k, inst in enumerate(instances):
        renders = public_renderings(inst)
        ok_all = True
        for name, text in renders.items():
            verdict = family.grade(inst, text)
            by_format[name] += verdict.correct
            if not verdict.correct:
                ok_all = False
                if len(failures) < 20:
                    failures.append((inst.id, f"{name}: {text[:80]}", verdict.reason))
        correct += ok_all
        neighbours = instances[k + 1:k + 40] + instances[max(0, k - 40):k]
        for text in known_wrong(inst, neighbours):
            wrong_total += 1
            verdict = family.grade(inst, text)
            wrong_ok += not verdict.correct
            if verdict.correct and len(failures) < 20:
                failures.append((inst.id, f"wrong answer accepted: {text[:80]}", verdict.reason))
    n = len(instances)
    return {"instances": n, "correct": correct, "correct_pct": round(100.0 * correct / n, 2) if n else 0.0,
            "by_format": dict(by_format), "wrong_submissions": wrong_total, "graded_wrong": wrong_ok,
            "graded_wrong_pct": round(100.0 * wrong_ok / wrong_total, 2) if wrong_total else 0.0,
            "failures": failures}
