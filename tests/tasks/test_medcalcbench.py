"""The medcalcbench family: build, reference solutions, strict grading audits, importer and row checker."""

from __future__ import annotations

import csv
import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from medagentgym.tasks.base import Instance
from medagentgym.tasks.medcalc import CALCULATORS
from medagentgym.tasks.medcalc.notes import _fmt, note_style, render_case, render_note
from medagentgym.tasks.medcalc.specs import sample_entities
from medagentgym.tasks.medcalcbench import (
    MedCalcBench,
    check_rows,
    grade_answer,
    import_rows,
    load_rows,
    render_gold,
    run_snippet,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "medcalc" / "rows.jsonl"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks")
    fam = MedCalcBench(out / "medcalcbench")
    manifest = fam.build(out, size="tiny", seed=0)
    return fam, manifest, out


@pytest.fixture(scope="module")
def all_instances(built):
    fam = built[0]
    return fam.instances("train") + fam.instances("test")


def _label(inst: Instance) -> str:
    return json.dumps(inst.answer) if not isinstance(inst.answer, float) else repr(float(inst.answer))


def _score(fam, instances, submission) -> float:
    return sum(fam.grade(i, submission).correct for i in instances) / len(instances)


def test_build_counts_and_categories(built, all_instances):
    fam, manifest, _ = built
    assert manifest["counts"] == {"train": 110, "test": 55}
    assert fam.counts("tiny") == {"categories": 55, "instances": 165}
    assert fam.counts("default")["instances"] >= 20_000
    for split in ("train", "test"):
        assert {i.category for i in fam.instances(split)} == set(fam.categories)
    assert len(fam.categories) == 55
    assert len({i.id for i in all_instances}) == len(all_instances)


def test_build_is_byte_identical_per_seed(built, tmp_path):
    _, manifest, _ = built
    again = MedCalcBench(tmp_path / "medcalcbench").build(tmp_path, size="tiny", seed=0)
    assert again["files"] == manifest["files"]
    other = MedCalcBench(tmp_path / "x" / "medcalcbench").build(tmp_path / "x", size="tiny", seed=1)
    assert other["files"]["test.jsonl"] != manifest["files"]["test.jsonl"]


def test_reference_solution_is_correct_everywhere(built, all_instances):
    fam = built[0]
    for inst in all_instances:
        actions = fam.reference_solution(inst)
        # the snippet imports our calculators, which the jail lacks: the reference submits the answer alone
        assert [a["action"] for a in actions] == ["submit_answer"]
        verdict = fam.grade(inst, actions[-1]["params"]["answer"])
        assert verdict.correct, (inst.id, inst.answer, verdict.reason)
        # the gold is what the snippet computes (tuples are stored as [weeks, days])
        got = run_snippet(inst.solution)
        assert (list(got) if isinstance(got, tuple) else got) == inst.answer, inst.id


def test_instances_show_the_note_and_question_but_not_the_method(all_instances):
    # Neither original harness shows the method (MedCalc-Bench's prompts; MedAgentGym builds it and never sends it).
    for inst in all_instances:
        calc = CALCULATORS[inst.metadata["calculator_id"]]
        assert inst.context.startswith("Patient note:\n") and calc.method not in inst.context
        assert "Method:" not in inst.context and inst.metadata["method"] == calc.method
        if calc.id == 24:  # the benchmark names both drugs in the question; the note gives the dose
            steroid, target = inst.metadata["entities"]["input steroid"][0], inst.metadata["entities"]["target steroid"]
            assert inst.question.startswith(f"Based on the patient's dose of {steroid}, what is the equivalent "
                                            f"dosage in mg of {target}?")
        else:
            assert inst.question.startswith(calc.question)
        assert inst.metadata["note_source"] == "synthetic" and inst.answer_type in {"number", "integer", "date", "list"}


def test_case_notes_have_the_length_of_the_public_rows_per_style():
    # Public MedCalc-Bench test rows (1,047): template notes 74 characters on average, vignettes 972, case
    # reports 3,331 (all rows 2,196). Version 1's notes were 279 on average, whatever the calculator.
    rng = random.Random(11)
    lengths: dict[str, list[int]] = {"template": [], "vignette": [], "report": []}
    for calc_id in CALCULATORS:
        for _ in range(12):
            lengths[note_style(calc_id)].append(len(render_case(sample_entities(calc_id, rng), rng, calc_id)))
    means = {style: sum(v) / len(v) for style, v in lengths.items()}
    assert 50 <= means["template"] <= 100 and 750 <= means["vignette"] <= 1300 and 2400 <= means["report"] <= 4200
    assert max(lengths["report"]) > 4500 and min(lengths["report"]) < 1600  # a spread, not one length
    overall = sum(map(sum, lengths.values())) / sum(map(len, lengths.values()))
    assert 1600 <= overall <= 2800, overall


def test_case_notes_state_every_entity_among_distractors_it_cannot_use():
    rng = random.Random(5)
    for calc_id in CALCULATORS:
        for _ in range(8):
            ents = sample_entities(calc_id, rng)
            note = render_case(ents, rng, calc_id)
            for key, value in ents.items():
                if isinstance(value, list) and len(value) == 2 and key != "age" and value[1] not in {"µL", "L"}:
                    assert _fmt(value[0]) in note, (calc_id, key, value, note)
                elif isinstance(value, str) and key not in {"sex", "Race", "target steroid"}:  # the question names it
                    assert value.strip().lower() in note.lower(), (calc_id, key, value)
            if note_style(calc_id) == "template":
                continue
            # A value of an analyte the calculator reads appears once: no distractor restates it.
            for key, pattern in (("creatinine", r"\b(serum creatinine|Cr)\b"), ("Sodium", r"(?<!urine )\b(sodium|Na)\b"),
                                 ("Heart Rate or Pulse", r"\b(heart rate|HR)\b"), ("Albumin", r"\b(albumin|Alb)\b"),
                                 ("Systolic Blood Pressure", r"(?:systolic blood pressure|\bBP) \d")):
                if key in ents:
                    found = re.findall(pattern, note, flags=re.IGNORECASE)
                    assert len(found) == 1, (calc_id, key, found, note)


@pytest.mark.slow  # ~13 s; make test holds the default per-template floor to its bound (tests/docs/test_family_pages.py)
def test_answers_spread_so_one_constant_per_calculator_earns_little():
    # One constant per calculator, chosen on train, scored on test: 15.2 % of test at default size in version 1
    # (answers clustered: serum osmolality 59 %, FeverPAIN 39 %); the rarest-answer-of-24-candidates rule keeps
    # it under the 10 % bound (default build 8.4 %; this smaller draw about 8.5-9 %).
    from medagentgym.tasks import medcalcbench as mb
    from medagentgym.tasks.floors import template_floor

    train, test = [], []
    for calc in CALCULATORS.values():
        rng, seen = random.Random(f"spread:{calc.id}"), set()
        for split, n, out in (("test", 30, test), ("train", 60, train)):
            tally: dict = {}
            out += [mb._synthetic(calc, rng, split, len(out), seen, tally) for _ in range(n)]
    floor = template_floor(MedCalcBench(Path("unused")), train, test)
    assert floor["templates"] == 55 and floor["floor"] <= 0.10, (floor["floor"], floor["top"])


def test_constant_answers_do_not_beat_the_label_base_rate(built, all_instances):
    fam = built[0]
    base_rate = max(Counter(_label(i) for i in all_instances).values()) / len(all_instances)
    constants = ["0", "1", "2", "3", "4", "5", "10", "100", "-1", "01/01/2024", "(20, 0)", "(0, 0)"]
    constants += [render_gold(i.metadata["output_type"], i.answer) for i in all_instances[::7]]
    best = max(_score(fam, all_instances, c) for c in constants)
    assert best <= base_rate + 0.02, (best, base_rate)  # +2 points: one decimal band can cover a near label
    assert base_rate < 0.15 and best < 0.15


@pytest.mark.parametrize("submission", [
    " ".join(str(n) for n in range(400)),
    ", ".join(f"{n / 4:g}" for n in range(-40, 800)),
    "10/08/2023 10/09/2023 10/10/2023",
    "(8, 3) or (8, 4)",
    "Traceback (most recent call last):\n  File \"answer.py\", line 3, in <module>\nNameError: name 'x' is not defined",
    "ZeroDivisionError: division by zero",
    "", "   ", None,
])
def test_shotgun_traceback_and_empty_score_zero(built, all_instances, submission):
    assert _score(built[0], all_instances, submission) == 0.0


def test_decimal_band_is_inclusive_and_strict():
    # gold 100 -> [95, 105]
    assert grade_answer("decimal", 100.0, 95.0, 105.0, "95").correct
    assert grade_answer("decimal", 100.0, 95.0, 105.0, "105.0 mL/min").correct
    assert not grade_answer("decimal", 100.0, 95.0, 105.0, "105.01").correct
    assert not grade_answer("decimal", 100.0, 95.0, 105.0, "94.99").correct
    assert grade_answer("decimal", 85.0, 80.75, 89.25, "85 mL/min/1.73 m²").correct  # unit digits ignored
    assert grade_answer("decimal", 22.9, 21.755, 24.045, "22.9 kg/m^2").correct
    # negative answers: limits are swapped; a positive number is wrong (the original's OR bug accepted it)
    assert grade_answer("decimal", -2.0, -2.1, -1.9, "-2.05").correct
    assert not grade_answer("decimal", -2.0, -2.1, -1.9, "2.0").correct
    # zero answer: [0, 0]
    assert grade_answer("decimal", 0.0, 0.0, 0.0, "0").correct
    assert not grade_answer("decimal", 0.0, 0.0, 0.0, "0.01").correct
    assert not grade_answer("decimal", 100.0, 95.0, 105.0, "100 or 101").correct


def test_integer_date_and_tuple_classes():
    assert grade_answer("integer", 4, 4, 4, "4").correct
    assert grade_answer("integer", 4, 4, 4, "The score is 4.0").correct
    assert not grade_answer("integer", 4, 4, 4, "4.5").correct
    assert not grade_answer("integer", 4, 4, 4, "5").correct
    assert not grade_answer("integer", 4, 4, 4, "3 or 4").correct
    assert grade_answer("date", "10/08/2023", None, None, "10/08/2023").correct
    assert grade_answer("date", "10/08/2023", None, None, "2023-10-08").correct
    assert not grade_answer("date", "10/08/2023", None, None, "10/09/2023").correct
    for text in ["(8, 3)", "('8 weeks', '3 days')", "8 weeks and 3 days", "[8, 3]"]:
        assert grade_answer("weeks_days", [8, 3], None, None, text).correct, text
    for text in ["(3, 8)", "8 weeks", "(8, 3, 1)", "59 days"]:
        assert not grade_answer("weeks_days", [8, 3], None, None, text).correct, text


def test_notes_state_the_entities_in_mixed_units():
    rng = random.Random(7)
    units = Counter()
    for calc_id in CALCULATORS:
        for _ in range(12):
            ents = sample_entities(calc_id, rng)
            note = render_note(ents, random.Random(1))
            for key, value in ents.items():
                if isinstance(value, list) and len(value) == 2 and key != "age" and value[1] not in {"µL", "L"}:
                    assert _fmt(value[0]) in note, (key, value, note)
                elif isinstance(value, str) and key not in {"sex", "Race"}:
                    assert value.strip().lower() in note.lower(), (key, value, note)
            if "weight" in ents:
                units[ents["weight"][1]] += 1
    assert units["kg"] > 10 and units["lbs"] > 10
    creat = {sample_entities(3, rng)["creatinine"][1] for _ in range(60)}
    assert creat == {"mg/dL", "µmol/L"}


def test_notes_negate_false_criteria_and_omit_absent_ones():
    ents = {"sex": "Female", "age": [70, "years"], "Hypertension history": True, "Diabetes history": False}
    note = render_note(ents, random.Random(3))
    assert "70-year-old woman" in note and "hypertension" in note
    assert "diabetes" in note.lower() and any(w in note for w in ("no diabetes", "Negative for diabetes"))
    assert "stroke" not in note.lower()


def test_importer_round_trip_keeps_note_gold_and_bounds():
    rows = load_rows(FIXTURE)
    assert len(rows) == 12
    instances = import_rows(rows)
    fam = MedCalcBench(Path("unused"))
    for row, inst in zip(rows, instances):
        assert inst.metadata["calculator_id"] == row["Calculator ID"]
        assert row["Patient Note"] in inst.context
        assert inst.metadata["benchmark_row"]["Note ID"] == row["Note ID"]
        if inst.metadata["output_type"] == "decimal":
            assert (inst.metadata["lower"], inst.metadata["upper"]) == (float(row["Lower Limit"]),
                                                                        float(row["Upper Limit"]))
            assert inst.metadata["lower"] <= inst.metadata["upper"]
        assert fam.grade(inst, row["Ground Truth Answer"]).correct, (row["Row Number"], row["Ground Truth Answer"])
        assert fam.reference_solution(inst) == [{"action": "submit_answer",
                                                 "params": {"answer": render_gold(inst.metadata["output_type"],
                                                                                  inst.answer)}}]
    assert instances[-1].answer == [8, 3]  # "('8 weeks', '3 days')"


def test_importer_reads_csv_too(tmp_path):
    rows = load_rows(FIXTURE)
    path = tmp_path / "rows.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    again = load_rows(path)
    assert [i.answer for i in import_rows(again)] == [i.answer for i in import_rows(rows)]
    assert check_rows(again, convention="published")["share"] == 1.0


def test_check_rows_reports_share_mismatches_and_errors():
    rows = load_rows(FIXTURE)
    report = check_rows(rows, convention="published")  # the fixture golds follow the published rules
    assert report["within"] == report["rows"] == 12 and report["share"] == 1.0 and not report["errors"]
    # the benchmark's 2024 code scores two fixture patients differently (medagentgym/tasks/medcalc/bench.py): Child-Pugh gives
    # 'moderate' ascites 0 (case-sensitive), albumin 2.8 g/dL 3, bilirubin 51.3 µmol/L 2.8 mg/dL -> 10, not 12; the
    # 45-point APACHE II patient gets 38 (39.5 'degrees celsisus' is 4.2 °C -> 4, GCS added as is, ...)
    bench = check_rows(rows)
    assert bench["convention"] == "medcalc-bench" and bench["within"] == 10
    assert bench["mismatches"] == [
        {"row": 6, "calculator_id": 15, "ours": 10, "gold": 12, "lower": 12, "upper": 12},
        {"row": 8, "calculator_id": 28, "ours": 38, "gold": 45, "lower": 45, "upper": 45}]
    bad = [dict(r) for r in rows]
    bad[0].update({"Ground Truth Answer": "60.0", "Lower Limit": "57.0", "Upper Limit": "63.0"})
    bad[1]["Ground Truth Answer"] = "5"
    bad[2]["Relevant Entities"] = "{'Systolic Blood Pressure': [120.0, 'mm hg']}"
    report = check_rows(bad, convention="published")
    assert report["within"] == 9 and report["share"] == pytest.approx(0.75)
    assert [m["row"] for m in report["mismatches"]] == [1, 2]
    assert report["errors"][0]["row"] == 3 and "Diastolic Blood Pressure" in report["errors"][0]["error"]
    assert report["per_calculator"][5] == {"rows": 1, "within": 0}  # a row that errs still counts as a row


def test_importer_errors_are_one_line():
    with pytest.raises(ValueError, match=r"row 7: row lacks column\(s\) \['Relevant Entities'\]"):
        import_rows([{"Row Number": 7, "Calculator ID": 2, "Patient Note": "x", "Ground Truth Answer": "1"}])
    with pytest.raises(ValueError, match=r"row 1: unknown calculator id 99; valid ids are 2-69 except \[12, "):
        import_rows([{"Row Number": 1, "Calculator ID": 99, "Patient Note": "x", "Relevant Entities": "{}",
                      "Ground Truth Answer": "1"}])


def test_importing_the_family_pulls_no_training_stack():
    code = "import sys, medagentgym.tasks.medcalcbench; bad = {'torch', 'transformers', 'trl'} & set(sys.modules); print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "set()"
