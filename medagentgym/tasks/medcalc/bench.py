"""The ``medcalc-bench`` convention: MedCalc-Bench's gold answers as its 2024 code produced them.

MedCalc-Bench's public test rows (1,047; its June 2024 release, also carried by MedAgentGym) were answered by the
benchmark's own calculator code as it stood in 2024, not by the published rules and not by the code the benchmark
ships today. That code departs from the published rules in places (some choices, mostly bugs). To check our
calculators against those rows (``medagentgym.tasks.medcalcbench.check_rows``) this convention reproduces each departure. Our
synthetic instances never use it: their gold follows the published rules (``convention="published"``, the default).

Two layers:

* every calculator reads its entities through :class:`~medagentgym.tasks.medcalc.bench_units.BenchEntities` (the 2024 unit
  converter, rounding after each step, with the molar masses each calculator passed: :data:`BENCH_MASSES`);
* calculators whose logic differs get their own function here (:data:`BENCH_VARIANTS`; the scores live in
  ``medagentgym.tasks.medcalc.bench_scores``). The others run the published function on the 2024 numbers.

:data:`QUIRKS` is the one table of every departure: calculator, what the 2024 code did, which convention carries it
and the public test rows (``Row Number``) whose gold shows it (rows where the published rule falls outside the row's
bounds and the quirk brings it inside). It was built by reading the benchmark's history (``calculator_implementations``
as of June 2024, and the ``Ground Truth Explanation`` of each row, which narrates the code's steps).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from medagentgym.tasks.medcalc import bench_scores as bs
from medagentgym.tasks.medcalc import equations as eq
from medagentgym.tasks.medcalc.bench_units import BenchEntities, round_2024
from medagentgym.tasks.medcalc.dates import _lmp, format_date
from medagentgym.tasks.medcalc.units import Entities, convert

__all__ = ["BENCH_MASSES", "BENCH_VARIANTS", "QUIRKS", "Quirk", "bench_entities"]


@dataclass(frozen=True)
class Quirk:
    """One departure of the 2024 gold-generating code from the published rule.

    Attributes:
        name: Short stable id (``"gcs.verbal_twice"``); the test fixture rows name the quirk they show.
        calculators: Benchmark calculator ids (2-69) it affects; empty for the unit converter all of them share.
        behaviour: What the 2024 code did (and, where useful, what the published rule says).
        convention: ``"medcalc-bench"`` (only the bench convention reproduces it) or ``"both"`` (a gap in the
            published rule that both conventions fill the same way).
        rows: Public test rows (``Row Number``) whose gold shows it; empty when no row's answer depends on it.
    """

    name: str
    calculators: tuple[int, ...]
    behaviour: str
    convention: str
    rows: tuple[int, ...] = ()


_B, _BOTH = "medcalc-bench", "both"

#: Every departure of the 2024 code. Row ids are ``Row Number`` values of the public test set (June 2024 release,
#: 1,047 rows).
QUIRKS: tuple[Quirk, ...] = (
    # ---- the shared unit converter (every calculator)
    Quirk("units.rounding", (),
          "Concentrations convert step by step, rounding after each step (3 decimals above 0.001, else 3 "
          "significant digits): 80.4 µmol/L creatinine -> 8.04e-05 mol -> 0.009 g -> 0.9 mg/dL; 2.26 mmol/L "
          "calcium -> 0.002 mol -> 8.0 mg/dL; 4.75 mmol/L cholesterol -> 0.005 mol -> 193.3 mg/dL",
          _B, (23, 114, 117, 513, 521)),
    Quirk("units.celsisus", (),
          "Any temperature unit other than the exact string 'degrees celsius' is read as Fahrenheit, so the rows' "
          "'degrees celsisus' becomes (T - 32) x 5/9 (38.3 -> 3.5 °C)",
          _B, (829, 831, 868, 869, 870, 871, *range(874, 888))),
    Quirk("units.age", (), "Age in months is floored to whole years (weeks // 52, days 0); a compound age keeps its "
          "first part only", _B),
    Quirk("units.weight_height", (), "Weight in lbs x 0.453592, in g / 1000; heights converted with rounded results "
          "(cm / 100 -> m, cm x 0.393701 -> in, m x 39.3701 -> in)", _B),
    Quirk("units.molar_mass", (15, 27, 44), "Each calculator passes its own molar mass: bilirubin 548.66 g/mol in Child-Pugh "
          "(584.66 elsewhere), BUN 28.08 in Glasgow-Blatchford, cholesterol 386.654 in LDL", _B),
    # ---- equations
    Quirk("cg.weights", (2,), "BMI, IBW and ABW rounded to 3 decimals; 'normal' BMI is 18.5-24.9 inclusive, so a BMI "
          "of 24.95 uses the adjusted weight", _B),
    Quirk("ckd.kappa", (3,), "A man with creatinine <= 0.9 mg/dL is divided by kappa 0.7 (published 0.9)", _B,
          (23, 25)),
    Quirk("qtc.rr", (11, 56, 57, 58), "QTc Bazett, Fridericia, Framingham, Hodges: RR = 60/HR rounded to 3 "
          "decimals first; Hodges recomputes the rate as 60/RR", _B),
    Quirk("due.short_cycle", (13,), "A cycle shorter than 28 days ADDS 28 - cycle days (published: subtracts)", _B,
          (928, 929, 930, 931, 932, 935, 936, 937, 938, 940, 943, 944, 945, 946, 947)),
    Quirk("meld.integer", (23,), "MELD(i) rounded to an integer (published: to the tenth) before x 10; dialysis moves "
          "creatinine to 4 only when it is between 1 and 4 mg/dL", _B, (340, 341, 342, 343)),
    Quirk("steroid.potency", (24,), "Potencies relative to dexamethasone rounded to 2 decimals (33.33, 26.67, 6.67, "
          "5.33) and their ratio to 3 decimals", _B),
    Quirk("framingham.mmol", (46,), "Cholesterol converted to mmol/L and fed to the coefficients made for mg/dL", _B,
          (552, 553, 557, 559, 560, 563, 564, 566)),
    Quirk("framingham.fraction", (46,), "Linear predictor rounded to 1 decimal; the answer is the risk as a fraction "
          "(not %) rounded to 1 decimal, so most rows are 0", _B, tuple(range(552, 568))),
    # ---- scores
    Quirk("cp.case", (15,), "Ascites and encephalopathy matched case-sensitively: the rows' 'absent', 'slight', "
          "'moderate' and 'Grade 0' score 0 (a missing one scores 1)", _B,
          (200, 201, 202, 203, 204, 205, 206, 208, 209, 210, 212, 213, 214, 216, 217, 218)),
    Quirk("cp.edges", (15,), "Bilirubin of exactly 2 mg/dL scores 0; albumin of exactly 2.8 g/dL scores 3", _B,
          (209, 214)),
    Quirk("rcri.cerebrovascular", (17,), "The cerebrovascular-disease criterion is never counted (the code read a key "
          "the rows never fill)", _B, (240, 241, 242, 243, 245, 246, 249, 250, 251, 253, 255, 256, 259)),
    Quirk("heart.atherosclerotic", (18,), "Atherosclerotic disease is one of seven risk factors (published: 2 points "
          "on its own); TIA history unused", _B),
    Quirk("centor.whole_years", (20,), "Ages compared as whole numbers: 3-14 -> +1, >= 45 -> -1, so 14.5 years "
          "scores 0", _B),
    Quirk("gcs.verbal_twice", (21,), "The verbal response is added twice: eye + 2 x verbal + motor", _B,
          tuple(range(848, 868))),
    Quirk("gcs.not_testable", (21,), "'not testable' is scored as intact: eye 4, verbal 4 (the 2024 table) and motor 6 "
          "(the 2024 code had no motor entry and failed)", _BOTH),
    Quirk("gbs.hgb_edges", (27,), "Hemoglobin bands closed at the top: men 12 < Hgb <= 13 -> 1 (13 -> 1, 12 -> 0), "
          "women 10 < Hgb <= 12 -> 1 (12 -> 1, 10 -> 0); BUN of exactly 70 mg/dL scores 0", _B, (389, 390, 399)),
    Quirk("apache.gcs", (28,), "The Glasgow Coma Score is added as is (published: 15 - GCS)", _B,
          tuple(range(868, 888))),
    Quirk("apache.wbc", (28,), "The WBC count per µL is compared with the x10³/µL limits (any count >= 40 scores 4)",
          _B, tuple(range(868, 888))),
    Quirk("apache.low_values", (28,), "Low MAP, heart rate, respiratory rate, pH, sodium, potassium and hematocrit "
          "score 0", _B, (870, 873, 875, 878, 881, 883)),
    Quirk("apache.creatinine", (28,), "Creatinine >= 1.5 scores only with acute or chronic renal failure (a 'Not "
          "mentinoed' string counts as chronic); ARF gives 4/6/8, CRF 2/3/4", _B, (877, 882, 884, 886)),
    Quirk("apache.chronic_health", (28,), "Chronic health: 2 for exactly 'Elective', 5 for exactly 'Emergency', 0 for "
          "anything else ('Nonoperative', missing)", _B, (870, 872, 875, 883, 886)),
    Quirk("apache.edges", (28,), "Values between the 2024 bands score 0: ages of exactly 45 and 75, A-a gradients "
          "between 349 and 350, PaO2 between 60 and 61", _B),
    Quirk("psi.fever_pao2", (29,), "Fever means > 39.9 °C (published >= 40); PaO2 scores only with the exact unit "
          "'mm Hg' (< 60) or 'kPa' (< 8)", _B),
    Quirk("cci.liver", (32,), "Liver disease graded case-sensitively: the rows' 'Mild', 'Moderate to Severe', 'Severe' "
          "count 1", _B, (431, 433, 436, 437, 440, 443, 445, 446)),
    Quirk("cci.tumour", (32,), "Solid tumour graded case-sensitively: 'Localized' and 'Metastatic' count 1, and so "
          "does True (published 2)", _B, (428, 430, 431, 432, 434, 437, 440, 443, 446)),
    Quirk("cci.diabetes", (32,), "Diabetes graded case-sensitively: the rows' 'None or diet-controlled', 'None or "
          "Diet-controlled', 'Uncomplicated' and 'End-organ damage' all count 1 (published 0, 0, 1, 2)", _B,
          (427, 430, 431, 432, 433, 435, 436, 437, 439, 440, 442, 443, 445)),
    Quirk("caprini.flags", (36,), "The yes/no risk factors are narrated but their points never added", _B,
          tuple(range(908, 928))),
    Quirk("caprini.bmi", (36,), "The BMI item is never reached (published: BMI > 25 scores 1)", _B,
          (908, 911, 912, 914, 915, 917, 919, 920, 921, 923, 925, 927)),
    Quirk("caprini.age_gaps", (36,), "Ages of 40.5, 60.5 and 74.5 fall between the bands and score 0", _B),
    Quirk("sofa.fio2", (43,), "PaO2/FiO2 uses FiO2 in percent (a ratio 100x too small)", _B,
          (888, 892, 895, 896, 897, 898, 901, 903, 904, 906, 907)),
    Quirk("sofa.cardiovascular", (43,), "Cardiovascular: 1 only for MAP < 70 without dobutamine, epinephrine or "
          "norepinephrine; otherwise 2 when dopamine <= 5 (no drugs at all gives 2), else 3", _B,
          (888, *range(890, 908))),
    Quirk("sofa.renal", (43,), "Renal item ignored when both creatinine and urine output are given; urine < 200 mL/day "
          "scores 3 (published 4)", _B, (*range(891, 900), *range(901, 908))),
    Quirk("curb.truncation", (45,), "Respiratory rate and blood pressures truncated to integers before the "
          "comparisons (DBP 60.5 -> 60 <= 60)", _B),
    Quirk("sirs.heart_rate", (51,), "The heart-rate criterion always counts (both branches add 1)", _B,
          (592, 593, 596, 598, 599, 606, 607)),
    Quirk("sirs.wbc", (51,), "The WBC count is scaled to cells per m³ (x 10⁹ from per µL), so it always exceeds "
          "12,000", _B, (588, 589, 590, 591, 594, 596, 597, 599, 602)),
)

#: Per-calculator molar masses / valences passed to the 2024 converter where they differ from BENCH_ANALYTES.
BENCH_MASSES: dict[int, dict[str, tuple[float | None, int | None]]] = {
    15: {"bilirubin": (548.66, None)},
    27: {"bun": (28.08, None)},
    44: {"cholesterol": (386.654, None)},
}


def bench_entities(calculator_id: int, raw: dict[str, Any] | Entities) -> BenchEntities:
    """The 2024-converter view of ``raw`` for one calculator (its own molar masses applied)."""
    data = raw.raw if isinstance(raw, Entities) else raw
    return BenchEntities(data, masses=BENCH_MASSES.get(calculator_id))


# ------------------------------------------------------------------------------------------------ equations


def cockcroft_gault(e: BenchEntities) -> float:
    """CrCl with BMI, IBW and ABW rounded to 3 decimals and 'normal' BMI meaning 18.5-24.9 inclusive."""
    weight = e.num("weight", "kg")
    bmi = round_2024(weight / e.num("height", "m") ** 2)
    ibw = round_2024(eq.ideal_body_weight(e))
    if bmi < 18.5:
        used = weight
    elif bmi <= 24.9:
        used = min(ibw, weight)
    else:
        used = round_2024(ibw + 0.4 * (weight - ibw))
    sex_factor = 1 if e.raw_value("sex") == "Male" else 0.85
    return (140 - e.num("age", "years")) * used * sex_factor / (e.num("creatinine", "mg/dL") * 72)


def ckd_epi(e: BenchEntities) -> float:
    """2021 CKD-EPI, but a man with creatinine <= 0.9 mg/dL is divided by 0.7 (published: 0.9)."""
    creat, female = e.num("creatinine", "mg/dL"), e.raw_value("sex") == "Female"
    if female:
        kappa, alpha = 0.7, (-0.241 if creat <= 0.7 else -1.2)
    else:
        kappa, alpha = (0.7, -0.302) if creat <= 0.9 else (0.9, -1.2)
    return 142 * (creat / kappa) ** alpha * 0.9938 ** e.num("age", "years") * (1.012 if female else 1)


def _qtc_rounded_rr(formula: str) -> Callable[[BenchEntities], float]:
    """A QTc calculator that first rounds RR = 60/HR to 3 decimals and takes the rate back as 60/RR (the 2024
    Hodges code did; the other formulas ignore the rate)."""
    def qtc(e: BenchEntities) -> float:
        rr = round_2024(60 / e.first("Heart Rate or Pulse"))
        return eq.QTC_FORMULAS[formula](e.first("QT interval"), 60 / rr, rr)

    qtc.__name__ = f"qtc_{formula}"
    return qtc


def due_date(e: BenchEntities) -> str:
    """LMP + 280 days + |cycle length - 28| days (a short cycle also moves the date later)."""
    cycle = e.num("cycle length")
    return format_date(_lmp(e) + dt.timedelta(weeks=40, days=abs(cycle - 28)))


def meld_na(e: BenchEntities) -> int:
    """MELD Na with MELD(i) rounded to an integer before x 10; dialysis counts only for 1 <= Cr <= 4."""
    creat = e.num("creatinine", "mg/dL")
    if creat < 1.0:
        creat = 1.0
    elif creat > 4.0 or e.flag("Dialysis at least twice in the past week",
                               "Continuous veno-venous hemodialysis for ≥24 hours in the past week"):
        creat = 4.0
    bili = max(e.num("Bilirubin", "mg/dL"), 1.0)
    inr = max(e.num("international normalized ratio"), 1.0)
    sodium = min(max(e.num("Sodium", "mEq/L"), 125.0), 137.0)
    meld_10 = round(round(0.957 * math.log(creat) + 0.378 * math.log(bili) + 1.120 * math.log(inr) + 0.643) * 10)
    if meld_10 <= 11:
        return meld_10
    return min(round(meld_10 + 1.32 * (137 - sodium) - 0.033 * meld_10 * (137 - sodium)), 40)


def framingham(e: BenchEntities) -> float:
    """Hard-CHD Cox model fed cholesterol in mmol/L (the coefficients expect mg/dL); the linear predictor is
    rounded to 1 decimal and the risk, a fraction (not %), rounded to 1 decimal."""
    male = e.raw_value("sex") == "Male"
    lin = eq.framingham_linear(
        male=male, age=e.num("age", "years"), tc=e.num("Total cholesterol", "mmol/L"),
        hdl=e.num("high-density lipoprotein cholesterol", "mmol/L"), sbp=e.first("Systolic Blood Pressure"),
        treated=e.flag("Blood pressure being treated with medicines"), smoker=e.flag("Smoker"))
    return round(1 - eq.FRAMINGHAM_BASELINE[male] ** math.exp(round(lin, 1)), 1)


#: Potency multipliers relative to dexamethasone, as the 2024 steroid converter tabulated them.
_STEROID_POTENCY = {"Betamethasone IV": 1, "Cortisone PO": 33.33, "Dexamethasone IV": 1, "Dexamethasone PO": 1,
                    "Hydrocortisone IV": 26.67, "Hydrocortisone PO": 26.67, "MethylPrednisoLONE IV": 5.33,
                    "MethylPrednisoLONE PO": 5.33, "PrednisoLONE PO": 6.67, "PredniSONE PO": 6.67,
                    "Triamcinolone IV": 5.33}


def steroid_conversion(e: BenchEntities) -> float:
    """Input dose x (target multiplier / input multiplier), the ratio rounded to 3 decimals."""
    drug, dose, unit = e.require("input steroid")
    target = e.require("target steroid")
    for name in (drug, target):
        if name not in _STEROID_POTENCY:
            raise ValueError(f"unknown steroid {name!r}; use one of {', '.join(_STEROID_POTENCY)}")
    dose_mg = float(dose) if unit == "mg" else convert(float(dose), unit, "mg")
    return dose_mg * round_2024(_STEROID_POTENCY[target] / _STEROID_POTENCY[drug])


#: Calculator id -> the benchmark-convention function (the others run their published function on BenchEntities).
BENCH_VARIANTS: dict[int, Callable[[BenchEntities], Any]] = {
    2: cockcroft_gault, 3: ckd_epi, 13: due_date, 23: meld_na, 24: steroid_conversion, 46: framingham,
    11: _qtc_rounded_rr("bazett"), 56: _qtc_rounded_rr("fridericia"), 57: _qtc_rounded_rr("framingham"),
    58: _qtc_rounded_rr("hodges"),
    **bs.BENCH_SCORE_VARIANTS,
}
