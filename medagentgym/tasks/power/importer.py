"""N-PowerAI records (the original JSONL) -> npowerai instances whose answers are RECOMPUTED from the question.

A record is ``{"task_type", "task_id", "estimate_target" ("size" | "power"), "question", "answer"}``. The public
questions state raw quantities, not standardised effects: means and a standard deviation (one-sample), a mean
change with its SD and a correlation (paired), a mean difference with two SDs (two-sample), four group means and a
common SD (ANOVA), two rows of outcome proportions (chi-square), two event probabilities and a hazard ratio (Cox),
plus alpha, the target power or the sample size. :func:`parse_raw` reads them (:func:`parse_params` reads a
stated Cohen's d/f/w instead), the family's reference snippet is EXECUTED on them, and the question gets one
appended sentence fixing what the original leaves open (sidedness where unstated, the power method, rounding,
per group or in total), so the recomputed answer is the only right one. The original answer is kept in metadata
(``original_answer``, ``matches_original``); it is never the gold, because four of the original's twelve groups
are inconsistent or constant (one answer for every item).

Example:
    >>> inst = record_instance({"task_type": "Paired t-test", "task_id": 7, "estimate_target": "size",
    ...     "question": "... reduce cholesterol levels 10.2 units with a standard deviation of 38 ... 80% of power "
    ...                 "to perform a lower one-sided test ... at the significance level of 0.05?", "answer": 88})
    >>> inst.answer, inst.metadata["matches_original"]
    (88, True)
"""

from __future__ import annotations

import re
from typing import Any

from medagentgym.tasks.base import Instance, Split
from medagentgym.tasks.power.scenarios import _METHOD, _cox_method, _sides_text

__all__ = ["TASK_TYPES", "conventions", "parse_params", "parse_raw", "record_instance"]

#: N-PowerAI ``task_type`` -> this family's design (the original's Cox items follow Freedman's formula).
TASK_TYPES = {
    "one-sample t-test": "one_sample_t",
    "paired t-test": "paired_t",
    "two independent samples t-test": "two_sample_t",
    "one-way anova": "anova",
    "chi-square test of independence": "chisq",
    "cox proportional-hazards model": "cox_freedman",
}
REQUIRED = ("task_type", "estimate_target", "question", "answer")
_NUM = r"(-?\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)"
_I = re.IGNORECASE


#: How a power item states its sample size (group 1 is the number; Cox states it per group).
_N_TEXT = {
    "one_sample_t": r"recruited\s*" + _NUM,
    "paired_t": r"random sample of\s*" + _NUM,
    "two_sample_t": r"(?:has|have|with)\s*" + _NUM + r"\s*(?:patients|participants|subjects)",
    "anova": r"group of\s*" + _NUM,
    "chisq": r"random sample of\s*" + _NUM,
    "cox_freedman": r"having\s*" + _NUM,
}
#: A recomputed power outside this band is re-instantiated (its stated size changed): at ~1 (or ~0) the
#: constant answer "1" (or "0.05") would be right, and the public file has hundreds of such items.
POWER_BAND = (0.10, 0.98)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _find(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text, _I)
    return _num(m.group(1)) if m else None


def _alpha(text: str) -> float | None:
    return _find(r"(?:significance level|alpha|α)\s*(?:of|=|is|:)?\s*" + _NUM, text)


def _power(text: str) -> float | None:
    value = _find(_NUM + r"\s*%\s*(?:of\s+)?power", text) or _find(r"power\s*(?:of|=|is|:)?\s*" + _NUM + r"\s*%", text)
    return None if value is None else value / 100


def _sides(text: str) -> int | None:
    if re.search(r"two[- ]sided|two[- ]tailed|not equal", text, _I):
        return 2
    if re.search(r"one[- ]sided|one[- ]tailed", text, _I):
        return 1
    return None


def _numbers_list(text: str) -> list[float]:
    return [_num(x) for x in re.findall(_NUM, text)]


def _raw_t(design: str, target: str, text: str) -> dict[str, Any]:
    if design == "one_sample_t":
        return {"mu0": _find(r"in general is\s*" + _NUM, text) or _find(r"difference from\s*" + _NUM, text),
                "mu1": _find(r"sample to be\s*" + _NUM, text), "sd": _find(r"standard deviation of\s*" + _NUM, text),
                **({"n": _find(_N_TEXT[design], text)} if target == "power" else {})}
    if design == "paired_t":
        out = {"mean_diff": _find(r"(?:reduce|lower|increase|improve|change)\w*[^.]*?\s" + _NUM + r"\s*units", text)}
        sd = _find(r"standard deviation of\s*" + _NUM, text)
        rho = _find(r"correlation coefficient of\s*" + _NUM, text)
        # With a correlation the stated SD is that of one measurement; without, that of the differences.
        out.update({"sd": sd, "rho": rho} if rho is not None else {"sd_diff": sd})
        if target == "power":
            out["n"] = _find(_N_TEXT[design], text)
        return out
    sds = re.search(r"standard deviation[^.]*?to be\s*" + _NUM + r"[^.]*?to be\s*" + _NUM, text, _I)
    out = {"mean1": 0.0, "mean2": _find(r"difference[^.]*?will be\s*" + _NUM, text),
           "sd1": _num(sds.group(1)) if sds else None, "sd2": _num(sds.group(2)) if sds else None,
           "report": "per_group"}
    if target == "power":
        out["n"] = _find(_N_TEXT[design], text)
    return out


def parse_raw(design: str, target: str, text: str) -> dict[str, Any] | None:
    """Snippet parameters from the raw quantities an N-PowerAI question states, or None if one is missing.

    Sidedness the question leaves open is fixed as: two-sided (the convention that reproduces the original's
    answers where they are consistent), and stated in :func:`conventions`.

    Example:
        >>> parse_raw("anova", "size", "... means for each group will be 547, 547, 554, and 546, respectively. ... "
        ...           "equal to the national value of 80. ... 80% of power ... significance level of 0.05?")["means"]
        [547.0, 547.0, 554.0, 546.0]
    """
    params: dict[str, Any] = {"alpha": _alpha(text) or (0.05 if target == "power" else None), "scenario": 0}
    if target == "size":
        params["power"] = _power(text)
    if design in ("one_sample_t", "paired_t", "two_sample_t"):
        params["sides"] = _sides(text) or 2
        params.update(_raw_t(design, target, text))
    elif design == "anova":
        means = re.search(r"will be\s*(" + _NUM + r"(?:\s*,\s*" + _NUM + r")*,?\s*and\s*" + _NUM + r")\s*,?\s*respectively",
                          text, _I)
        params.update(means=_numbers_list(means.group(1)) if means else None,
                      sd=_find(r"(?:national value of|common SD of|standard deviation of)\s*" + _NUM, text),
                      report="per_group", f_sd="sample")
        params["k"] = len(params["means"]) if params["means"] else None
        if target == "power":
            params["n"] = _find(_N_TEXT[design], text)
    elif design == "chisq":
        rows = re.findall(r"(" + _NUM + r"(?:\s*,\s*" + _NUM + r")+,?\s*and\s*" + _NUM + r")\s*in\s+(\w+)", text, _I)
        if len(rows) == 2:
            params.update(row_a=_numbers_list(rows[0][0]), row_b=_numbers_list(rows[1][0]))
            params["df"] = len(params["row_a"]) - 1 if len(params["row_a"]) == len(params["row_b"]) else None
        else:
            params.update(row_a=None, row_b=None, df=None)
        if target == "power":
            params["n"] = _find(_N_TEXT[design], text)
    else:
        probs = re.search(r"groups E and C are\s*" + _NUM + r"\s*and\s*" + _NUM, text, _I)
        params.update(sides=_sides(text) or 2, hr=_find(r"hazard ratio[^.]*?(?:is|be)\s*(?:assumed to be\s*)?" + _NUM, text),
                      p_treated=_num(probs.group(1)) if probs else None, p_control=_num(probs.group(2)) if probs else None,
                      report="per_group")
        if target == "power":
            per_group = _find(_N_TEXT[design], text)
            params["n"] = None if per_group is None else 2 * per_group  # the snippet takes the total
    if any(v is None for v in params.values()):
        return None
    for key in ("k", "df", "n"):
        if key in params:
            params[key] = int(params[key])
    return params


#: Stated standardised effects (Cohen's d / f / w), for questions that give them instead of raw quantities.
_STD = {"d": r"(?:cohen'?s\s+d|effect size d)\s*(?:of|=|is|:)?\s*", "f": r"cohen'?s\s+f\s*(?:of|=|is|:)?\s*",
        "w": r"cohen'?s\s+w\s*(?:of|=|is|:)?\s*"}


def parse_params(design: str, target: str, text: str) -> dict[str, Any] | None:
    """Snippet parameters from a stated standardised effect (Cohen's d, f or w), or None.

    Example:
        >>> parse_params("anova", "size", "Cohen's f = 0.25 for 4 groups, alpha 0.05, power of 80%")
        {'alpha': 0.05, 'scenario': 0, 'power': 0.8, 'f': 0.25, 'k': 4, 'report': 'per_group'}
    """
    params: dict[str, Any] = {"alpha": _alpha(text) or (0.05 if target == "power" else None), "scenario": 0}
    if target == "size":
        params["power"] = _power(text) or _find(r"power\s*(?:of|=|is|:)?\s*" + r"(0?\.\d+)", text)
    else:
        params["n"] = _find(_NUM + r"\s+(?:patients|participants|subjects)", text)
    if design in ("one_sample_t", "paired_t", "two_sample_t"):
        params.update(sides=_sides(text) or 2, d=_find(_STD["d"] + _NUM, text))
    elif design == "anova":
        params.update(f=_find(_STD["f"] + _NUM, text), k=_find(_NUM + r"\s+(?:equal(?:ly sized)?\s+)?groups", text))
    elif design == "chisq":
        params.update(w=_find(_STD["w"] + _NUM, text), df=_find(_NUM + r"\s+degrees of freedom", text))
    else:
        return None
    if any(v is None for v in params.values()):
        return None
    for key in ("k", "df", "n"):
        if key in params:
            params[key] = int(params[key])
    if design in ("two_sample_t", "anova"):
        params["report"] = "total" if re.search(r"\bin total\b|\btotal sample size\b", text, _I) else "per_group"
    if design == "chisq":
        params.update(arms=2, levels=params["df"] + 1)
    return params


def conventions(design: str, target: str, params: dict[str, Any]) -> str:
    """The sentence appended to an imported question: every convention its recomputed answer depends on."""
    parts = ["Conventions for the answer:"]
    if "sides" in params and design != "cox_freedman":
        parts.append(f"use {_sides_text(params, 'change')}.")
    else:
        parts.append(f"use significance level alpha = {params['alpha']}.")
    parts.append(_cox_method(design, params, target) if design == "cox_freedman" else _METHOD[design])
    if design == "paired_t" and "rho" in params:
        parts.append("The SD of the within-patient differences is SD x sqrt(2 (1 - correlation)).")
    if design == "anova" and params.get("f_sd") == "sample":
        parts.append("Cohen's f = the sample SD of the group means (divisor k - 1) / the common within-group SD.")
    if design == "chisq" and "row_a" in params:
        parts.append("The two groups are equally sized; compute Cohen's w from the expected joint cell proportions.")
    if target == "power":
        if params.get("report") == "per_group":
            parts.append("The stated size is per group.")
        parts.append("Report the power as a proportion between 0 and 1 (for example 0.83), rounded to 4 decimals.")
    elif design == "cox_freedman":
        parts.append("Do not round the events; divide them by the average event probability for the total number "
                     "of participants and report half of it per group, rounded up to the next integer.")
    else:
        unit = "per group" if params.get("report") == "per_group" else "in total"
        parts.append(f"Report the smallest integer sample size {unit} that reaches the target power "
                     "(round up to the next integer).")
    return " ".join(parts)


def _power_at(design: str, params: dict[str, Any], n: int) -> float:
    from medagentgym.tasks.npowerai import execute_snippet
    from medagentgym.tasks.power.snippets import reference_code

    return float(execute_snippet(reference_code(design, "power", {**params, "n": n})))


def resize(design: str, params: dict[str, Any], text: str, key: str) -> tuple[dict[str, Any], str] | None:
    """Re-instantiate the stated size of a power item whose power is outside :data:`POWER_BAND`.

    A goal power is drawn in [0.3, 0.95] (seeded by ``key``, so answers stay spread), the smallest stated size
    reaching it is found by bisection on the executed power, and the question's number is replaced by it.

    Returns:
        ``(params, text)`` with the new size, or None when no size in [2, 100,000] brings the power into the band.
    """
    import random

    match = re.search(_N_TEXT[design], text, _I)
    if match is None:
        return None
    scale = 2 if design == "cox_freedman" else 1  # Cox states the size per group; the snippet takes the total
    goal = random.Random(key).uniform(0.3, 0.95)
    lo, hi = 2, 100_000
    if _power_at(design, params, lo * scale) >= goal or _power_at(design, params, hi * scale) < goal:
        return None
    while lo < hi:  # smallest stated size whose power reaches the goal
        mid = (lo + hi) // 2
        if _power_at(design, params, mid * scale) >= goal:
            hi = mid
        else:
            lo = mid + 1
    new_text = text[:match.start(1)] + str(lo) + text[match.end(1):]
    return {**params, "n": lo * scale}, new_text


def _matches(target: str, ours: Any, original: Any) -> bool:
    try:
        return abs(float(ours) - float(original)) <= (0.01 if target == "power" else 0.0)
    except (TypeError, ValueError):
        return False


def record_instance(record: dict[str, Any], *, split: Split = "test", key: str = "",
                    resize_saturated: bool = True) -> Instance:
    """One N-PowerAI record -> an instance with a recomputed answer.

    Args:
        record: The record (fields ``task_type``, ``estimate_target``, ``question``, ``answer``; ``task_id``).
        split: The instance's split.
        key: A unique suffix for the id (default ``task_id``; the public files reuse ids within a group).
        resize_saturated: Re-instantiate the stated size of a power item outside :data:`POWER_BAND` (False: keep it).

    Raises:
        ValueError: ``"<reason>: <detail>"`` with reason ``missing_field``, ``unknown_design``, ``bad_target``,
            ``unparsed`` (a quantity the answer needs is not stated), ``degenerate`` (a power item no stated size
            brings inside :data:`POWER_BAND`) or ``snippet_failed``.
    """
    from medagentgym.tasks.npowerai import execute_snippet, grading_for
    from medagentgym.tasks.power.snippets import reference_code

    missing = [f for f in REQUIRED if f not in record]
    if missing:
        raise ValueError(f"missing_field: N-PowerAI record lacks {missing}; expected {list(REQUIRED)}")
    target = str(record["estimate_target"]).strip().lower()
    if target not in ("size", "power"):
        raise ValueError(f"bad_target: estimate_target {record['estimate_target']!r} must be 'size' or 'power'")
    design = TASK_TYPES.get(str(record["task_type"]).strip().lower())
    if design is None:
        raise ValueError(f"unknown_design: task_type {record['task_type']!r} is not one of N-PowerAI's six "
                         "(One-sample t-test, Paired t-test, Two independent samples t-test, One-way ANOVA, "
                         "Chi-square test of independence, Cox proportional-hazards model)")
    text = str(record["question"])
    params = parse_raw(design, target, text) or parse_params(design, target, text)
    if params is None:
        raise ValueError(f"unparsed: the question does not state every quantity a {design} {target} answer needs")
    try:
        answer = execute_snippet(reference_code(design, target, params))
        resized = None
        if resize_saturated and target == "power" and not POWER_BAND[0] <= answer <= POWER_BAND[1]:
            resized = resize(design, params, text, key or str(record.get("task_id")))
            if resized is None:
                raise ValueError(f"degenerate: power {answer} is outside {POWER_BAND} for every sample size")
            old_n = params["n"]
            params, text = resized
            answer = execute_snippet(reference_code(design, target, params))
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported per record
        raise ValueError(f"snippet_failed: {exc}") from None
    code = reference_code(design, target, params)
    answer_type, options = grading_for(target)
    return Instance(
        id=f"npowerai/{split}/imported-{key or record.get('task_id')}", family="npowerai",
        category=f"{design}.{target}", split=split, question=f"{text.strip()} {conventions(design, target, params)}",
        context="Compute the answer with Python (numpy, scipy and statsmodels are available), then submit only the "
                "final number.",
        answer=answer, answer_type=answer_type, solution=code, solution_lang="python",
        metadata={"design": design, "target": target, "params": params, "grading": options,
                  "original_answer": record["answer"], "matches_original": _matches(target, answer, record["answer"]),
                  "task_type": record["task_type"], "source_id": record.get("task_id"),
                  **({"reinstantiated": {"n": [old_n, params["n"]]}} if resized else {})},
    )
