"""The ``medcalc-bench`` convention: MedCalc-Bench's 2024 gold-generating code, quirk by quirk.

The fixture ``bench_rows.jsonl`` holds hand-worked rows in the benchmark's own format, one or more per quirk of
``medagentgym.tasks.medcalc.bench.QUIRKS`` (column ``Quirks``). Each row's gold was worked out from the quirk's description (the
arithmetic is in its ``Ground Truth Explanation``), and ``Published Answer`` is what the published rule gives.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym.tasks.medcalc import CALCULATORS, calculate
from medagentgym.tasks.medcalc.bench import BENCH_MASSES, BENCH_VARIANTS, QUIRKS
from medagentgym.tasks.medcalc.bench_units import BenchEntities, bench_concentration, round_2024
from medagentgym.tasks.medcalc.registry import DECIMAL
from medagentgym.tasks.medcalcbench import _row_parts, check_rows, fidelity_table, load_rows

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "medcalc" / "bench_rows.jsonl"
ROWS = load_rows(FIXTURE)


def _same(ours, expected: str, kind: str) -> bool:
    if kind == DECIMAL:
        return ours == pytest.approx(float(expected), abs=1e-3)
    return str(list(ours) if isinstance(ours, tuple) else ours) == expected


def test_fixture_rows_are_within_bounds_under_the_bench_convention():
    report = check_rows(ROWS)
    assert report["convention"] == "medcalc-bench"
    assert report["errors"] == [] and report["mismatches"] == [] and report["share"] == 1.0


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['Row Number']}-{r['Quirks'][0]}" for r in ROWS])
def test_each_quirk_row_matches_its_hand_worked_answers(row):
    calc, entities, _gold, _lower, _upper = _row_parts(row)
    assert _same(calculate(calc.id, entities, convention="medcalc-bench"), row["Ground Truth Answer"], calc.kind)
    assert _same(calculate(calc.id, entities), row["Published Answer"], calc.kind)


def _published_within(row) -> bool:
    calc, _entities, _gold, lower, upper = _row_parts(row)
    if calc.kind == DECIMAL:
        return lower <= float(row["Published Answer"]) <= upper
    return row["Published Answer"] == row["Ground Truth Answer"]


def test_published_convention_misses_exactly_the_rows_whose_published_answer_is_outside():
    outside = {row["Row Number"] for row in ROWS if not _published_within(row)}
    report = check_rows(ROWS, convention="published")
    assert {m["row"] for m in report["mismatches"]} == outside
    assert len(outside) >= len(ROWS) - 6  # nearly every fixture row tells the two conventions apart


def test_every_quirk_is_shown_by_a_fixture_row():
    shown = {name for row in ROWS for name in row["Quirks"]}
    names = [q.name for q in QUIRKS]
    assert len(names) == len(set(names))
    assert set(names) == shown, f"quirks without a fixture row: {set(names) - shown}; unknown: {shown - set(names)}"


def test_quirk_table_is_well_formed_and_covers_every_variant():
    for quirk in QUIRKS:
        assert quirk.convention in {"medcalc-bench", "both"}
        assert set(quirk.calculators) <= set(CALCULATORS), quirk.name
        assert list(quirk.rows) == sorted(set(quirk.rows)) and all(1 <= r <= 1047 for r in quirk.rows), quirk.name
        assert len(quirk.behaviour) > 30, quirk.name
    named = {cid for quirk in QUIRKS for cid in quirk.calculators}
    assert set(BENCH_VARIANTS) | set(BENCH_MASSES) <= named
    assert any(not q.calculators for q in QUIRKS)  # the shared unit converter


@pytest.mark.parametrize("value, expected", [
    (123.45678, 123.457), (0.0012, 0.001), (0.00015, 0.00015), (0.000123456, 0.000123), (0, 0),
    (-0.0123456, -0.0123), (-4.56789, -4.57),
])
def test_round_2024(value, expected):
    assert round_2024(value) == pytest.approx(expected, rel=1e-12, abs=0)


@pytest.mark.parametrize("value, src, dst, mass, valence, expected", [
    (80.4, "µmol/L", "mg/dL", 113.12, None, 0.9),      # 8.04e-05 mol -> 0.009 g -> 9 mg/L -> 0.9 mg/dL
    (40.2, "µmol/L", "mg/dL", 548.66, None, 2.2),      # bilirubin with Child-Pugh's molar mass
    (6.4, "mmol/L", "mg/dL", 180.16, None, 108.1),     # 0.006 mol -> 1.081 g -> 108.1 mg/dL (exact: 115.3)
    (2.26, "mmol/L", "mg/dL", 40.08, 2, 8.0),          # 0.002 mol calcium -> 0.08 g -> 8.0 mg/dL
    (1.2, "mg/dL", "µmol/L", 113.12, None, 88.4),      # 0.0012 g -> 0.001 g -> 8.84e-06 mol -> 88.4 µmol/L
    (139.0, "mEq/L", "mmol/L", 22.99, 1, 139.0),
    (5.0, "mmol/L", "mEq/L", 40.08, 2, 10.0),
    (28.0, "g/L", "g/dL", None, None, 2.8),
    (4.0, "mEq/L", "mg/dL", 40.08, 2, 8.0),            # 2 mmol -> 0.002 mol -> 0.08 g -> 8.0 mg/dL
    (8.0, "mg/dL", "mEq/L", 40.08, 2, 4.0),            # 0.08 g -> 0.002 mol -> 2 mmol -> 4 mEq
    (142.0, "mmol/L", "mmol/L", None, None, 142.0),
])
def test_bench_concentration_follows_the_2024_rounding_chain(value, src, dst, mass, valence, expected):
    assert bench_concentration(value, src, dst, mass, valence) == pytest.approx(expected, abs=1e-9)


def test_bench_concentration_refuses_a_conversion_without_molar_mass():
    with pytest.raises(ValueError, match="without a molar mass or valence"):
        bench_concentration(1.0, "mg/dL", "mmol/L")


def test_bench_entities_reproduce_the_2024_readings():
    e = BenchEntities({"Temperature": [38.3, "degrees celsisus"], "age": [35, "months"],
                       "weight": [150, "lbs"], "height": [163.26, "cm"], "White blood cell count": [8000, "µL"],
                       "Surgery Type": "Nonoperative ", "Heart Rate or Pulse": [88, "bpm"]})
    assert e.num("Temperature", "C") == 3.5  # anything but 'degrees celsius' is Fahrenheit
    assert BenchEntities({"T": [38.3, "degrees celsius"]}).num("T", "C") == 38.3
    assert e.num("age", "years") == 2 and BenchEntities({"age": [65, "years", 6, "months"]}).num("age", "years") == 65
    assert e.num("weight", "kg") == 68.039 and e.num("height", "m") == 1.633 and e.num("height", "in") == 64.276
    assert e.cells("White blood cell count", "m^3") == 8e12 and e.cells("White blood cell count", "mm^3") == 8000
    assert e.raw_value("Surgery Type") == "Nonoperative " and e.first("Heart Rate or Pulse") == 88
    custom = BenchEntities({"Bilirubin": [53.0, "µmol/L"]}, masses={"bilirubin": (548.66, None)})
    assert custom.num("Bilirubin", "mg/dL") == 2.9 and BenchEntities(custom.raw).num("Bilirubin", "mg/dL") == 3.1


def test_conventions_are_reachable_and_published_stays_the_default():
    gcs = {"Best eye response": "eye opening to pain", "Best verbal response": "inappropriate words",
           "Best motor response": "withdrawal from pain"}
    assert calculate(21, gcs) == calculate(21, gcs, convention="published") == 9
    assert calculate("Glasgow Coma Score (GCS)", gcs, convention="medcalc-bench") == 12
    with pytest.raises(ValueError, match="unknown convention 'bench'"):
        calculate(21, gcs, convention="bench")


def test_bench_convention_errors_stay_one_line():
    apache = dict(_row_parts(next(r for r in ROWS if r["Calculator ID"] == 28))[1])
    apache["FiO₂"] = [60, "%"]  # at FiO2 >= 50 % the 2024 code needs the A-a gradient
    apache.pop("A-a gradient", None)
    with pytest.raises(ValueError, match="missing entity 'A-a gradient'"):
        calculate(28, apache, convention="medcalc-bench")


def test_fidelity_table_lines_up_both_conventions_per_calculator():
    reports = [check_rows(ROWS, convention=c) for c in ("published", "medcalc-bench")]
    table = fidelity_table(reports).splitlines()
    assert table[0].split()[-2:] == ["published", "medcalc-bench"]
    gcs = next(line for line in table if "Glasgow Coma Score (GCS)" in line)
    assert gcs.split()[-4:] == ["0/3", "0.0%", "3/3", "100.0%"]
    n = len(ROWS)
    outside = len(reports[0]["mismatches"])
    assert table[-2].split()[-4:] == [f"{n - outside}/{n}", f"{(n - outside) / n:.1%}", f"{n}/{n}", "100.0%"]
    assert table[-1].split()[-1] == f"{len(reports[1]['per_calculator'])}/{len(reports[1]['per_calculator'])}"


def test_cli_prints_the_table_and_the_overall_rate():
    out = subprocess.run([sys.executable, "-m", "medagentgym.tasks.medcalcbench", str(FIXTURE), "--show", "1"],
                         capture_output=True, text=True, check=True).stdout
    assert "APACHE II Score" in out and f"medcalc-bench: {len(ROWS)}/{len(ROWS)} rows within" in out
    bad = subprocess.run([sys.executable, "-m", "medagentgym.tasks.medcalcbench", "missing.jsonl"], capture_output=True,
                         text=True, check=False)
    assert bad.returncode != 0 and bad.stderr.strip().endswith("pass a .jsonl or .csv file")
