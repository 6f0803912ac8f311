"""medcalcbench: compute a medical calculator's value from a patient note (55 MedCalc-Bench calculators).

Description:
    Each instance is a patient note plus one fixed question per calculator (CHA2DS2-VASc, Cockcroft-Gault,
    APACHE II, QTc, due dates, ...; the 55 calculators of MedCalc-Bench). Notes are rendered from sampled
    "Relevant Entities" (clinically plausible ranges, optional criteria sometimes unmentioned, mixed units such as
    lbs/kg, µmol/L/mg/dL, °F/°C) in the shape the public rows of that calculator have
    (``medagentgym.tasks.medcalc.notes.render_case``): one formulaic sentence for the 11 template-generated
    calculators (QTc, dates, steroid conversion, MME, target weight; ~70 characters), a clinician vignette for
    10 score calculators (~1,000), a case report for the other 34 (~3,000; lengths drawn from the lognormals
    measured on the public rows). Vignettes and reports hide the relevant facts among distractors no formula of
    that calculator reads: complaint and history of present illness, unrelated history, medications, social and
    family history, normal-range vitals and labs it does not use (shorthand such as BP, HR, Cr, Hct), imaging and
    a hospital course. As in the original harnesses (MedCalc-Bench's prompts, and MedAgentGym's, which builds
    a method paragraph but never sends it), the agent sees the note and the question, not the calculator's
    method (it is kept in ``metadata["method"]``). Each synthetic instance keeps, of 24 candidate entity sets,
    the one whose answer is rarest so far in its calculator and split, so one constant per calculator learned
    on train earns little on test. The gold answer is obtained by EXECUTING the instance's reference snippet
    (``calculate(<id>, <entities>)``, medagentgym/tasks/medcalc) on the sampled entities. Real MedCalc-Bench
    rows can be imported (:func:`import_rows`) and checked against these calculators (:func:`check_rows`, or
    ``python -m medagentgym.tasks.medcalcbench ROWS.jsonl``, which prints per-calculator within-bounds rates under
    both conventions); the check defaults to the ``medcalc-bench`` convention, which reproduces the benchmark's
    2024 gold-generating code, every departure from the published rules listed in
    ``medagentgym.tasks.medcalc.bench.QUIRKS`` (all 1,047 public test rows within bounds). Synthetic gold always
    follows the published rules.

Example instance:
    question: "What is the patient's CHA2DS2-VASc Score? Submit exactly one integer."
    context:  "Patient note: A 72-year-old woman was referred to our clinic with fatigue. ... History is notable
               for hypertension. ... Initial labs: Plt 292 × 10^3/µL; lipase 50 U/L; ..."
    answer:   4            answer_type: "integer"        category: "c04_cha2ds2_vasc"
    solution: "from medagentgym.tasks.medcalcbench import calculate\\nentities = {...}\\nanswer = calculate(4, entities)"

Allowed actions:
    code_execution (python), terminal, debugging, submit_answer (the original's set). There is no database, so
    no request_info.

Grading:
    One ``submit_answer`` per episode, with MedCalc-Bench's official answer classes: integer scores exact
    (one integral number); decimals inside the instance's inclusive [Lower, Upper] band (±5 % of the gold,
    swapped for negative answers; zero gives [0, 0]); dates exact by day (one date); gestational age exact
    (weeks, days). A submission with several numbers (shotgun), a traceback, or nothing is wrong. Unit words after
    the number are allowed ("72.5 mL/hr", "85 mL/min/1.73 m²").

Episode end:
    The graded submit (terminated), or a budget (turns, tokens, wall time: truncated). Default 8 turns.

Arguments:
    ``tasks.make("medcalcbench", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/medcalcbench/{train.jsonl, test.jsonl, calculators.json, manifest.json}``, byte-identical per
    seed. tiny: 2 train + 1 test per calculator (165); default: 320 train + 80 test per calculator (22,000).

Version history:
    1: first version (55 calculators, synthetic notes, official answer classes, importer and row checker).
    2: notes shaped like the public rows (template sentences, vignettes, case reports: mean 279 -> ~2,000
       characters against the public 2,196) with distractors no formula reads; the method is no longer shown
       (neither original harness shows it); answers spread per calculator (24 candidates, the rarest answer
       kept): one constant per calculator learned on train scored 15.2 % of test, now under 10 %.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import random
import re
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import (
    GradeContext,
    Instance,
    Size,
    Split,
    TaskError,
    Verdict,
    load_instances,
    write_bytes_atomic,
    write_instances,
    write_manifest,
)
from medagentgym.tasks.graders import grade as strict_grade
from medagentgym.tasks.graders import looks_like_error
from medagentgym.tasks.medcalc import CALCULATORS, Calculator, bounds, calculate, get_calculator
from medagentgym.tasks.medcalc.notes import render_case
from medagentgym.tasks.medcalc.registry import CONVENTIONS, DATE, DECIMAL, INTEGER, WEEKS_DAYS
from medagentgym.tasks.medcalc.specs import sample_entities

__all__ = ["MedCalcBench", "calculate", "check_rows", "fidelity_table", "import_rows", "load_rows", "parse_gold"]

_SIZES: dict[str, dict[str, int]] = {"tiny": {"train": 2, "test": 1}, "default": {"train": 320, "test": 80}}
_ANSWER_TYPE = {DECIMAL: "number", INTEGER: "integer", DATE: "date", WEEKS_DAYS: "list"}
_FORMAT_HINT = {
    DECIMAL: "Submit exactly one number (units optional).",
    INTEGER: "Submit exactly one integer.",
    DATE: "Submit exactly one date as MM/DD/YYYY.",
    WEEKS_DAYS: "Submit exactly one (weeks, days) pair, e.g. (4, 3).",
}
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\.?\d)"
                     r"|(?<![\w.])[-+]?\.\d+(?!\.?\d)")
# Unit text that carries digits but is not a second answer: "/1.73 m²", "kg/m^2", "m²".
_UNIT_DIGITS = re.compile(r"/\s*1\.73\s*m(?:\^2|²|2)?|(?<=[A-Za-zµ])\s*(?:\^|\*\*)\s*[23]\b|[²³]")
_MAX_CHARS = 300
SNIPPET = "from medagentgym.tasks.medcalcbench import calculate\nentities = {entities!r}\nanswer = calculate({cid}, entities)\n" \
          "print(answer)\n"


def _wrong(reason: str) -> Verdict:
    return Verdict(correct=False, score=0.0, reason=reason)


def _ok(reason: str) -> Verdict:
    return Verdict(correct=True, score=1.0, reason=reason)


def _precheck(submission: Any) -> tuple[str | None, Verdict | None]:
    text = "" if submission is None else str(submission).strip()
    if not text:
        return None, _wrong("empty submission")
    if looks_like_error(text):
        return None, _wrong("submission is an error message or traceback, not an answer")
    if len(text) > _MAX_CHARS:
        return None, _wrong(f"submission is {len(text)} chars; one answer is expected (<= {_MAX_CHARS})")
    return text, None


def parse_one_number(text: str) -> tuple[float | None, str]:
    """The single number in ``text`` (unit digits such as ``m²`` ignored), or (None, why)."""
    tokens = _NUMBER.findall(_UNIT_DIGITS.sub(" ", text))
    if not tokens:
        return None, "no number in the submission"
    if len(tokens) > 1:
        return None, f"shotgun: {len(tokens)} numbers in one submission; submit exactly one"
    return float(tokens[0].replace(",", "")), ""


def parse_weeks_days(text: str) -> tuple[tuple[int, int] | None, str]:
    """``(weeks, days)`` from "(4, 3)", "('4 weeks', '3 days')" or "4 weeks and 3 days"; (None, why) otherwise."""
    weeks = re.findall(r"(\d+)\s*(?:weeks?|wks?)\b", text, re.IGNORECASE)
    days = re.findall(r"(\d+)\s*(?:days?|d)\b", text, re.IGNORECASE)
    numbers = re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])|\d+(?=\s*[A-Za-z])", text)
    if len(numbers) != 2:
        return None, f"expected exactly two numbers (weeks, days), found {len(numbers)}"
    if len(weeks) == 1 and len(days) == 1:
        return (int(weeks[0]), int(days[0])), ""
    if any("." in n or n.startswith("-") for n in numbers):
        return None, "weeks and days must be non-negative integers"
    return (int(numbers[0]), int(numbers[1])), ""


def parse_gold(kind: str, text: Any) -> Any:
    """A ``Ground Truth Answer`` string in the instance's answer form (float, int, date string, [weeks, days])."""
    if kind == DECIMAL:
        return float(text)
    if kind == INTEGER:
        return round(float(text))
    if kind == DATE:
        return str(text).strip()
    pair, why = parse_weeks_days(str(text))
    if pair is None:
        raise ValueError(f"gestational-age answer {text!r}: {why}")
    return list(pair)


def grade_answer(kind: str, gold: Any, lower: float | None, upper: float | None, submission: Any) -> Verdict:
    """Grade one submission with MedCalc-Bench's answer class ``kind`` (see the module docstring)."""
    if kind == INTEGER:
        return strict_grade("integer", gold, "" if submission is None else str(submission))
    if kind == DATE:
        return strict_grade("date", gold, "" if submission is None else str(submission))
    text, bad = _precheck(submission)
    if bad:
        return bad
    if kind == WEEKS_DAYS:
        pair, why = parse_weeks_days(text)
        if pair is None:
            return _wrong(why)
        return _ok("(weeks, days) match") if list(pair) == list(gold) else _wrong(f"{pair} != {tuple(gold)}")
    value, why = parse_one_number(text)
    if value is None:
        return _wrong(why)
    lo, hi = (lower, upper) if lower is not None else bounds(DECIMAL, float(gold))
    slack = 1e-9 * max(1.0, abs(lo), abs(hi))  # float noise only; the band itself is inclusive
    if lo - slack <= value <= hi + slack:
        return _ok(f"{value:g} within [{lo:g}, {hi:g}]")
    return _wrong(f"{value:g} outside [{lo:g}, {hi:g}]")


def render_gold(kind: str, gold: Any) -> str:
    """The canonical submission for ``gold`` (what the reference solution submits)."""
    if kind == WEEKS_DAYS:
        return f"({gold[0]}, {gold[1]})"
    if kind == DECIMAL:
        return f"{gold:.3f}".rstrip("0").rstrip(".") if not float(gold).is_integer() else str(int(gold))
    return str(gold)


def run_snippet(code: str) -> Any:
    """Execute a reference snippet in a fresh namespace and return its ``answer`` (the gold)."""
    namespace: dict[str, Any] = {"__name__": "medcalcbench_reference", "print": lambda *a, **k: None}
    exec(compile(code, "<medcalcbench reference>", "exec"), namespace)  # noqa: S102 - our own generated snippet
    if "answer" not in namespace:
        raise TaskError("reference snippet did not set `answer`")
    return namespace["answer"]


def _context(note: str) -> str:
    """What the agent reads beside the question: the patient note only. Neither MedCalc-Bench's own prompts nor
    MedAgentGym's show the calculator's method (MedAgentGym builds a method paragraph and never sends it)."""
    return f"Patient note:\n{note}"


def _entity_key(entities: dict[str, Any]) -> str:
    return json.dumps(entities, sort_keys=True, ensure_ascii=False)


def _instance(calc: Calculator, *, iid: str, split: Split, note: str, entities: dict[str, Any], answer: Any,
              lower: Any, upper: Any, solution: str | None, source: str, extra: dict[str, Any] | None = None
              ) -> Instance:
    question = calc.question
    if calc.id == 24 and "input steroid" in entities and "target steroid" in entities:  # the benchmark's wording
        question = (f"Based on the patient's dose of {entities['input steroid'][0]}, what is the equivalent dosage "
                    f"in mg of {entities['target steroid']}?")
    return Instance(
        id=iid, family=MedCalcBench.name, category=calc.slug, split=split,
        question=f"{question} {_FORMAT_HINT[calc.kind]}", context=_context(note),
        answer=list(answer) if isinstance(answer, tuple) else answer, answer_type=_ANSWER_TYPE[calc.kind],
        solution=solution, solution_lang="python" if solution else None,
        metadata={"calculator_id": calc.id, "calculator_name": calc.name, "output_type": calc.kind,
                  "benchmark_category": calc.category, "lower": lower, "upper": upper, "entities": entities,
                  "method": calc.method,
                  "note_source": source, **(extra or {})},
    )


#: Candidate entity sets drawn per synthetic instance; the one whose answer is rarest so far is kept (see
#: :func:`_answer_bin`), so no single answer dominates a calculator and one constant per calculator, learned on
#: train, stays a small share of test (the per-template reward floor).
CANDIDATES = 24


def _answer_bin(kind: str, answer: Any) -> Any:
    """The answers one constant could match together: the exact value for scores, dates and (weeks, days); for
    decimals a log-width-0.1 bin (about the ±5 % band a constant covers), signed."""
    if kind != DECIMAL:
        return str(answer)
    if answer == 0:
        return "0"
    return (answer > 0, math.floor(math.log(abs(answer)) / 0.1))


def _synthetic(calc: Calculator, rng: random.Random, split: Split, index: int, seen: set[str],
               tally: dict[Any, int]) -> Instance:
    best: tuple[dict[str, Any], Any] | None = None
    for _ in range(CANDIDATES):  # prefer entity sets not already used (test first, so train avoids test's)
        entities = sample_entities(calc.id, rng)
        if _entity_key(entities) in seen:
            continue
        key = _answer_bin(calc.kind, calculate(calc.id, entities))
        if best is None or tally.get(key, 0) < tally.get(best[1], 0):
            best = (entities, key)
        if tally.get(key, 0) == 0:
            break
    entities, key = best if best is not None else (sample_entities(calc.id, rng), None)
    tally[key] = tally.get(key, 0) + 1
    seen.add(_entity_key(entities))
    code = SNIPPET.format(entities=entities, cid=calc.id)
    answer = run_snippet(code)
    lower, upper = bounds(calc.kind, answer)
    return _instance(calc, iid=f"medcalcbench/{split}/{index:05d}", split=split, note=render_case(entities, rng, calc.id),
                     entities=entities, answer=answer, lower=lower, upper=upper, solution=code, source="synthetic")


class MedCalcBench:
    """The medcalcbench family (see the module docstring for the spec card)."""

    name = "medcalcbench"
    version = 2
    actions = frozenset({"code_execution", "terminal", "debugging", "submit_answer"})

    def __init__(self, root: Path | str) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/medcalcbench``)."""
        self.root = Path(root)

    @property
    def categories(self) -> list[str]:
        """One category per calculator (``c04_cha2ds2_vasc`` ...), in calculator-id order."""
        return [calc.slug for calc in CALCULATORS.values()]

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Instance counts for ``size`` without building."""
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        return {"categories": len(CALCULATORS), "instances": len(CALCULATORS) * sum(_SIZES[size].values())}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write ``<out_dir>/medcalcbench/``: train/test instances, the calculator list and a manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` (tests) or ``"default"``.
            seed: Seeds entity sampling and note phrasing; the same seed gives byte-identical files.

        Returns:
            The manifest (counts per split and category, seed, size, version, sha256 per file).
        """
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        family_dir = Path(out_dir) / self.name
        splits: dict[str, list[Instance]] = {"train": [], "test": []}
        for calc in CALCULATORS.values():
            rng = random.Random(f"medcalcbench:{seed}:{calc.id}")
            seen: set[str] = set()
            for split in ("test", "train"):
                tally: dict[Any, int] = {}  # each split's answers spread on their own
                for _ in range(_SIZES[size][split]):
                    splits[split].append(_synthetic(calc, rng, split, len(splits[split]), seen, tally))
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        table = [{"id": c.id, "name": c.name, "category": c.slug, "output_type": c.kind, "unit": c.unit,
                  "question": c.question, "method": c.method} for c in CALCULATORS.values()]
        write_bytes_atomic(family_dir / "calculators.json",
                           (json.dumps(table, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
        return write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed,
            counts={split: len(items) for split, items in splits.items()},
            categories={c.slug: sum(_SIZES[size].values()) for c in CALCULATORS.values()},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the reference snippet (synthetic instances), then submit the gold answer."""
        answer = render_gold(instance.metadata["output_type"], instance.answer)
        # The snippet imports this package's calculators, which the jail does not hold: it computed the answer at
        # build time on the host and cannot run where the agent's code runs (check_family runs reference programs
        # in the sandbox), so the reference submits the answer alone.
        return [{"action": "submit_answer", "params": {"answer": answer}}]

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """MedCalc-Bench's official answer classes, strictly: one answer, inclusive band for decimals."""
        meta = instance.metadata
        return grade_answer(meta["output_type"], instance.answer, meta.get("lower"), meta.get("upper"), submission)


# ------------------------------------------------------------------------------------------ benchmark rows

_REQUIRED_COLUMNS = ("Calculator ID", "Patient Note", "Relevant Entities", "Ground Truth Answer")


def load_rows(path: Path | str) -> list[dict[str, Any]]:
    """Read MedCalc-Bench rows from a ``.jsonl`` or ``.csv`` file (column names as in the benchmark)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no MedCalc-Bench rows at {path}; pass a .jsonl or .csv file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".csv":
        return list(csv.DictReader(text.splitlines()))
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not a JSON object ({exc.msg})") from None
    return rows


def _row_entities(row: dict[str, Any]) -> dict[str, Any]:
    raw = row["Relevant Entities"]
    if isinstance(raw, dict):
        return raw
    try:
        value = ast.literal_eval(str(raw))
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"'Relevant Entities' is not a Python dict literal ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise ValueError("'Relevant Entities' is not a dict")  # noqa: TRY004 - callers report ValueError per row
    return value


def _row_parts(row: dict[str, Any]) -> tuple[Calculator, dict[str, Any], Any, Any, Any]:
    missing = [c for c in _REQUIRED_COLUMNS if c not in row]
    if missing:
        raise ValueError(f"row lacks column(s) {missing}; expected MedCalc-Bench columns {list(_REQUIRED_COLUMNS)}")
    calc = get_calculator(row["Calculator ID"])
    gold = parse_gold(calc.kind, row["Ground Truth Answer"])
    if calc.kind == DECIMAL and str(row.get("Lower Limit", "")).strip() not in {"", "None", "nan"}:
        lower, upper = float(row["Lower Limit"]), float(row["Upper Limit"])
    else:
        lower, upper = bounds(calc.kind, gold)
    return calc, _row_entities(row), gold, lower, upper


def import_rows(rows: list[dict[str, Any]], split: Split = "test") -> list[Instance]:
    """Turn MedCalc-Bench rows into instances: the row's note as context, its gold and [Lower, Upper] kept.

    Args:
        rows: Dicts with the benchmark's columns (``Row Number``, ``Calculator ID``, ``Patient Note``,
            ``Question``, ``Relevant Entities``, ``Ground Truth Answer``, ``Lower Limit``, ``Upper Limit``; the
            optional ``Note ID``, ``Note Type``, ``Category``, ``Ground Truth Explanation`` go to metadata).
        split: The split the instances belong to.

    Returns:
        One instance per row, in row order (ids ``medcalcbench/<split>/row-<Row Number>``).

    Raises:
        ValueError: A row without the required columns or with an unparsable gold answer (names the row).
    """
    out = []
    for position, row in enumerate(rows):
        number = row.get("Row Number", position + 1)
        try:
            calc, entities, gold, lower, upper = _row_parts(row)
        except ValueError as exc:
            raise ValueError(f"row {number}: {exc}") from None
        extra = {k: row[k] for k in ("Row Number", "Note ID", "Note Type", "Ground Truth Explanation") if k in row}
        inst = _instance(calc, iid=f"medcalcbench/{split}/row-{number}", split=split, note=str(row["Patient Note"]),
                         entities=entities, answer=gold, lower=lower, upper=upper, solution=None,
                         source="medcalc-bench", extra={"benchmark_row": extra})
        if row.get("Question"):
            inst = inst.model_copy(update={"question": f"{row['Question']} {_FORMAT_HINT[calc.kind]}"})
        out.append(inst)
    return out


def _within(kind: str, ours: Any, gold: Any, lower: float, upper: float) -> bool:
    if kind == DECIMAL:
        slack = 1e-9 * max(1.0, abs(lower), abs(upper))
        return isinstance(ours, float) and math.isfinite(ours) and lower - slack <= ours <= upper + slack
    if kind == WEEKS_DAYS:
        return list(ours) == list(gold)
    return ours == gold


def _calculator_key(row: dict[str, Any]) -> int | str:
    try:
        return get_calculator(row.get("Calculator ID", "")).id
    except ValueError:
        return str(row.get("Calculator ID", "?"))


def check_rows(rows: list[dict[str, Any]], *, convention: str = "medcalc-bench") -> dict[str, Any]:
    """Run each row's Relevant Entities through our calculators and compare with its gold / [Lower, Upper].

    Args:
        rows: MedCalc-Bench rows (see :func:`import_rows`).
        convention: ``"medcalc-bench"`` (default: the benchmark's 2024 gold-generating code, every departure from
            the published rules reproduced, see ``medagentgym.tasks.medcalc.bench.QUIRKS``) or ``"published"``.

    Returns:
        ``{"rows", "within", "share", "convention", "errors", "per_calculator": {id: {"rows", "within"}},
        "mismatches"}``; ``mismatches`` lists ``{"row", "calculator_id", "ours", "gold", "lower", "upper"}`` and
        ``errors`` lists ``{"row", "error"}`` for rows our calculators could not use (counted as outside).

    Example:
        >>> check_rows(load_rows("test_data.csv"))["share"]  # doctest: +SKIP
        1.0
    """
    report: dict[str, Any] = {"rows": len(rows), "within": 0, "convention": convention, "errors": [],
                              "mismatches": [], "per_calculator": {}}
    for position, row in enumerate(rows):
        number = row.get("Row Number", position + 1)
        tally = report["per_calculator"].setdefault(_calculator_key(row), {"rows": 0, "within": 0})
        tally["rows"] += 1
        try:
            calc, entities, gold, lower, upper = _row_parts(row)
            ours = calculate(calc.id, entities, convention=convention)
        except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
            report["errors"].append({"row": number, "error": f"{type(exc).__name__}: {exc}"})
            continue
        if _within(calc.kind, ours, gold, lower, upper):
            tally["within"] += 1
            report["within"] += 1
        else:
            report["mismatches"].append({"row": number, "calculator_id": calc.id, "ours": ours, "gold": gold,
                                         "lower": lower, "upper": upper})
    report["share"] = report["within"] / len(rows) if rows else 0.0
    return report


def fidelity_table(reports: list[dict[str, Any]]) -> str:
    """Per-calculator within-bounds counts of several :func:`check_rows` reports side by side, then the totals.

    Example:
        >>> rows = load_rows("test_data.csv")  # doctest: +SKIP
        >>> print(fidelity_table([check_rows(rows, convention=c) for c in CONVENTIONS]))  # doctest: +SKIP
    """
    def cell(tally: dict[str, int]) -> str:
        share = tally["within"] / tally["rows"] if tally["rows"] else 0.0
        return f"{tally['within']:>4}/{tally['rows']:<4} {share:>6.1%}"

    ids = sorted({key for r in reports for key in r["per_calculator"]}, key=lambda k: (isinstance(k, str), k))
    lines = [f"{'id':>3}  {'calculator':<52}" + "".join(f"  {r['convention']:>17}" for r in reports)]
    for key in ids:
        name = CALCULATORS[key].name if key in CALCULATORS else "(unknown calculator)"
        lines.append(f"{key!s:>3}  {name[:52]:<52}" + "".join(
            f"  {cell(r['per_calculator'].get(key, {'rows': 0, 'within': 0})):>17}" for r in reports))
    lines.append(f"{'':>3}  {'all rows':<52}" + "".join(f"  {cell(r):>17}" for r in reports))
    full = [f"{sum(t['within'] == t['rows'] for t in r['per_calculator'].values())}/{len(r['per_calculator'])}"
            for r in reports]
    lines.append(f"{'':>3}  {'calculators fully within':<52}" + "".join(f"  {n:>17}" for n in full))
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Check MedCalc-Bench rows against medagentgym.tasks.medcalc's calculators: "
                                                 "per-calculator within-bounds rates under each convention.")
    parser.add_argument("rows", help="a MedCalc-Bench .jsonl or .csv file (e.g. test_data.csv, test_tasks.jsonl)")
    parser.add_argument("--show", type=int, default=10, help="how many mismatches/errors to print (default 10)")
    parser.add_argument("--convention", default="both", choices=["both", *CONVENTIONS],
                        help="both conventions side by side (default), or only one")
    args = parser.parse_args()
    try:
        loaded = load_rows(args.rows)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    chosen = list(CONVENTIONS) if args.convention == "both" else [args.convention]
    results = [check_rows(loaded, convention=c) for c in chosen]
    print(fidelity_table(results))
    last = results[-1]
    print(f"{last['convention']}: {last['within']}/{last['rows']} rows within [Lower, Upper] ({last['share']:.1%}); "
          f"{len(last['errors'])} errors")
    for item in (last["mismatches"] + last["errors"])[: args.show]:
        print(json.dumps(item, ensure_ascii=False, default=str))
