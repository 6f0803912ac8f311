"""The ``medcalc-bench`` convention: where MedCalc-Bench's reference code departs from the published rules.

MedCalc-Bench's gold answers were produced by its own calculator code. For a few calculators that code
departs from the published criteria (some departures are choices, some are plain bugs). To compare our
calculators with the benchmark's public rows (``tasks.medcalcbench.check_rows``) we reproduce those departures
here, one function per calculator, each listing exactly what differs. Synthetic instances never use this
module: their gold follows the published rules (``convention="published"``, the default).

Departures reproduced (read from the benchmark's public ``calculator_implementations``):

* 13 Estimated Due Date: a cycle shorter than 28 days ADDS ``28 - cycle`` days (published: subtracts).
* 15 Child-Pugh: bilirubin of exactly 2 mg/dL scores 0 and 3 mg/dL scores 3; albumin of 2.8 g/dL scores 3.
* 18 HEART: known atherosclerotic disease is counted as one more risk factor (published: scores 2 on its own);
  TIA history is not used.
* 23 MELD Na: MELD(i) is rounded to an integer (published: to the tenth) before × 10; the answer is an integer.
* 27 Glasgow-Blatchford: hemoglobin 13 g/dL in men scores 1, 12 g/dL in men and 10 g/dL in women score 0, BUN of
  exactly 70 mg/dL scores 0.
* 28 APACHE II: GCS is added as is (published: 15 − GCS); low MAP, HR, RR, pH, Na, K and Hct score 0; high
  creatinine scores only with acute or chronic renal failure; chronic health gives 2 (elective) or 5
  (emergency) and 0 otherwise; age 45 and 75 score 0; the WBC count per mm³ is compared with the ×10³ limits.
* 36 Caprini: BMI > 25 gives 2 points (published: 1); previous DVT and previous PE give 3 points each.
* 43 SOFA: PaO2/FiO2 uses FiO2 in percent; the cardiovascular item gives 2 points by default; creatinine and
  urine output are ignored when both are given.
* 51 SIRS: the heart-rate criterion always counts; the WBC count is first converted to cells per m³.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

from tasks.medcalc import scores_icu
from tasks.medcalc.dates import _lmp, format_date
from tasks.medcalc.equations import mean_arterial_pressure
from tasks.medcalc.scores import _choice, band
from tasks.medcalc.units import Entities

__all__ = ["BENCH_VARIANTS"]


def due_date(e: Entities) -> str:
    """LMP + 280 days + |cycle length − 28| days (the benchmark adds the gap for short cycles too)."""
    cycle = round(e.num("cycle length"))
    return format_date(_lmp(e) + dt.timedelta(days=280 + abs(cycle - 28)))


def heart(e: Entities) -> int:
    """HEART with atherosclerotic disease counted as one of seven risk factors (0 → 0, 1–2 → 1, ≥ 3 → 2)."""
    score = _choice(e, "Suspicion History", {"slightly suspicious": 0, "moderately suspicious": 1,
                                             "highly suspicious": 2}, "slightly suspicious")
    score += _choice(e, "Electrocardiogram Test", {"normal": 0, "non-specific repolarization disturbance": 1,
                                                   "significant st deviation": 2}, "normal")
    age = e.num("age", "years")
    score += 2 if age >= 65 else 1 if age >= 45 else 0
    factors = sum(e.flag(k) for k in (
        "Hypertension history", "hypercholesterolemia", "Diabetes mellitus criteria for CCI rule", "obesity",
        "smoking", "parent or sibling with Cardiovascular disease before age 65", "atherosclerotic disease"))
    score += 2 if factors >= 3 else 1 if factors >= 1 else 0
    score += _choice(e, "Initial troponin", {
        "less than or equal to normal limit": 0,
        "between the normal limit or up to three times the normal limit": 1,
        "greater than three times normal limit": 2}, "less than or equal to normal limit")
    return score


def meld_na(e: Entities) -> int:
    """MELD Na with MELD(i) rounded to an integer before × 10, capped at 40, answer rounded."""
    creat = e.num("creatinine", "mg/dL")
    if creat < 1.0:
        creat = 1.0
    elif creat > 4.0 or e.flag("Dialysis at least twice in the past week",
                               "Continuous veno-venous hemodialysis for ≥24 hours in the past week"):
        creat = 4.0
    bili = max(e.num("Bilirubin", "mg/dL"), 1.0)
    inr = max(e.num("international normalized ratio"), 1.0)
    sodium = min(max(e.num("Sodium", "mmol/L"), 125.0), 137.0)
    meld_i = 0.957 * math.log(creat) + 0.378 * math.log(bili) + 1.120 * math.log(inr) + 0.643
    meld_10 = round(round(meld_i) * 10)
    if meld_10 <= 11:
        return meld_10
    return min(round(meld_10 + 1.32 * (137 - sodium) - 0.033 * meld_10 * (137 - sodium)), 40)


def _apache_creatinine(creat: float, acute: bool, chronic: bool) -> int:
    if creat >= 3.5 and acute:
        return 8
    if 2.0 <= creat < 3.5 and acute:
        return 6
    if creat >= 3.5 and chronic:
        return 4
    if 2.0 <= creat < 3.5 and chronic:
        return 3
    if 1.5 <= creat < 2.0 and acute:
        return 4
    if 1.5 <= creat < 2.0 and chronic:
        return 2
    return 2 if creat < 0.6 else 0


def _apache_age(age: float) -> int:
    if 45 < age <= 54:
        return 2
    if 55 <= age <= 64:
        return 3
    if 65 <= age <= 74:
        return 5
    return 6 if age > 75 else 0


def _apache_oxygen(e: Entities) -> int:
    if e.num("FiO₂", "%") >= 50:
        grad = e.num("A-a gradient")
        return 4 if grad > 499 else 3 if grad >= 350 else 2 if grad >= 200 else 0
    pao2 = e.num("Partial pressure of oxygen (PaO₂) for Apache II", "mmHg")
    return 0 if pao2 > 70 else 1 if 61 <= pao2 <= 70 else 3 if 55 <= pao2 <= 60 else 4 if pao2 < 55 else 0


def apache_ii(e: Entities) -> int:
    """APACHE II as computed by the benchmark's code (see the module docstring)."""
    score = 0
    if e.flag("History of severe organ failure or immunocompromise"):
        score += {"elective": 2, "emergency": 5}.get(e.text("Surgery Type", "none"), 0)
    score += _apache_age(e.num("age", "years")) + _apache_oxygen(e)
    score += band(e.num("Temperature", "C"), [(41, 4), (39, 3), (38.5, 1), (36, 0), (34, 1), (32, 2), (30, 3)], 4)
    map_value = mean_arterial_pressure(e)
    score += 4 if map_value > 159 else 3 if map_value > 129 else 2 if map_value > 109 else 0
    score += band(e.num("Heart Rate or Pulse", "bpm"), [(180, 4), (140, 3), (110, 2)], 0)
    score += band(e.num("respiratory rate", "bpm"), [(50, 4), (35, 3), (25, 1)], 0)
    score += band(e.num("pH"), [(7.7, 4), (7.6, 3), (7.5, 1)], 0)
    score += band(e.num("Sodium", "mmol/L"), [(180, 4), (160, 3), (155, 2), (150, 1)], 0)
    score += band(e.num("Potassium", "mmol/L"), [(7, 4), (6, 3), (5.5, 1)], 0)
    # The benchmark reads the raw value, so a string such as 'Not mentinoed' counts as chronic renal failure.
    score += _apache_creatinine(e.num("creatinine", "mg/dL"), e.flag("Acute renal failure"),
                                bool(e.get("Chronic Renal Failure", False)))
    score += band(e.num("Hematocrit", "%"), [(60, 4), (50, 2), (46, 1)], 0)
    score += band(e.num("White blood cell count", "uL"), [(40, 4), (20, 2), (15, 1)], 0)
    return score + round(e.num("Glasgow Coma Score"))


def caprini(e: Entities) -> int:
    """Caprini with BMI > 25 worth 2 and previous DVT and previous PE worth 3 each."""
    score = scores_icu.caprini(e)
    bmi = e.opt_num("Body Mass Index (BMI)", "kg/m2")
    score += 1 if bmi is not None and bmi > 25 else 0
    both = e.flag("Previously documented Deep Vein Thrombosis") and e.flag("Previously Documented Pulmonary Embolism")
    return score + (3 if both else 0)


def _sofa_respiration(e: Entities) -> int:
    ratio = e.num("Partial pressure of oxygen (PaO₂) for Apache II", "mmHg") / e.num("FiO₂", "%")
    vent, cpap = e.flag("On mechanical ventilation"), e.flag("Continous positive airway pressure")
    if 300 <= ratio < 400:
        return 1
    if 200 <= ratio < 300 or (ratio <= 199 and not vent and not cpap):
        return 2
    if 100 <= ratio < 199 and (vent or cpap):
        return 3
    return 4 if ratio < 100 and vent else 0


def _sofa_cardiovascular(e: Entities) -> int:
    dop, dob, epi, norepi = (e.opt_num(k, "ug/kg/min") or 0.0
                             for k in ("DOPamine", "DOBUTamine", "EPINEPHrine", "norEPINEPHrine"))
    if (e.has("Systolic Blood Pressure") and e.has("Diastolic Blood Pressure") and mean_arterial_pressure(e) < 70
            and not (dob or epi or norepi)):
        return 1
    if dop <= 5 or dob:
        return 2
    return 3  # dopamine > 5: epinephrine/norepinephrine default to 0 <= 0.1, so the 4-point branch is never reached


def sofa(e: Entities) -> int:
    """SOFA as computed by the benchmark's code (see the module docstring)."""
    score = _sofa_respiration(e) + _sofa_cardiovascular(e)
    gcs = e.num("Glasgow Coma Score") if e.has("Glasgow Coma Score") else 15
    score += band(gcs, [(15, 0), (13, 1), (10, 2), (6, 3)], 4)
    score += band(e.num("Bilirubin", "mg/dL"), [(12, 4), (6, 3), (2, 2), (1.2, 1)], 0)
    score += band(e.num("Platelet count", "uL"), [(150000, 0), (100000, 1), (50000, 2), (20000, 3)], 4)
    has_creat, has_urine = e.has("creatinine"), e.has("Urine Output")
    if not has_creat and has_urine:
        score += 3 if e.num("Urine Output", "mL/day") < 500 else 0
    elif has_creat and not has_urine:
        score += band(e.num("creatinine", "mg/dL"), [(5, 4), (3.5, 3), (2, 2), (1.2, 1)], 0)
    return score


def sirs(e: Entities) -> int:
    """SIRS as computed by the benchmark's code: HR always counts; WBC compared as cells per m³."""
    temp = e.num("Temperature", "C")
    score = (temp > 38 or temp < 36) + 1
    wbc = e.num("White blood cell count", "m3")
    score += wbc > 12000 or wbc < 4000
    paco2 = e.opt_num("PaCO₂", "mmHg")
    rr = e.opt_num("respiratory rate", "bpm")
    return int(score + ((rr is not None and rr > 20) or (paco2 is not None and paco2 < 32)))


def child_pugh(e: Entities) -> int:
    """Child-Pugh with the benchmark's edges: bilirubin exactly 2 scores 0 and ≥ 3 scores 3; albumin ≤ 2.8 scores 3."""
    bili = e.num("Bilirubin", "mg/dL")
    score = 1 if bili < 2 else 2 if 2 < bili < 3 else 3 if bili >= 3 else 0
    alb = e.num("Albumin", "g/dL")
    score += 1 if alb > 3.5 else 2 if alb > 2.8 else 3
    inr = e.num("international normalized ratio")
    score += 1 if inr < 1.7 else 2 if inr <= 2.3 else 3
    score += _choice(e, "Ascites", {"absent": 1, "none": 1, "slight": 2, "mild": 2, "moderate": 3, "severe": 3},
                     "absent")
    score += _choice(e, "Encephalopathy", {"no encephalopathy": 1, "grade 0": 1, "none": 1, "grade 1-2": 2,
                                           "grade 3-4": 3}, "no encephalopathy")
    return score


def glasgow_blatchford(e: Entities) -> int:
    """GBS with the benchmark's edges: men 12 < Hgb ≤ 13 → 1 and Hgb = 12 → 0; women Hgb = 10 → 0; BUN = 70 → 0."""
    bun = e.num("Blood Urea Nitrogen (BUN)", "mg/dL")
    score = 2 if 18.2 <= bun < 22.4 else 3 if 22.4 <= bun < 28 else 4 if 28 <= bun < 70 else 6 if bun > 70 else 0
    hgb = e.num("Hemoglobin", "g/dL")
    if e.text("sex") == "male":
        score += 1 if 12 < hgb <= 13 else 3 if 10 <= hgb < 12 else 6 if hgb < 10 else 0
    else:
        score += 1 if 10 < hgb <= 12 else 6 if hgb < 10 else 0
    score += band(e.num("Systolic Blood Pressure", "mmHg"), [(110, 0), (100, 1), (90, 2)], 3)
    score += e.num("Heart Rate or Pulse", "bpm") >= 100
    score += e.flag("Melena present") + 2 * e.flag("Recent syncope")
    return int(score + 2 * e.flag("Hepatic disease history") + 2 * e.flag("Cardiac failure present"))


#: Calculator id -> the benchmark-convention function (others are identical in both conventions).
BENCH_VARIANTS: dict[int, Callable[[Entities], Any]] = {
    13: due_date, 15: child_pugh, 18: heart, 23: meld_na, 27: glasgow_blatchford, 28: apache_ii, 36: caprini,
    43: sofa, 51: sirs,
}
