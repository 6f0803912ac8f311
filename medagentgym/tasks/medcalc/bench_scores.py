"""Rule-based scores as MedCalc-Bench's 2024 code computed them (the ``medcalc-bench`` convention).

One function per score whose 2024 logic differs from the published rule; each docstring says how. The table of
all departures, with the public rows that show them, is ``medagentgym.tasks.medcalc.bench.QUIRKS``. Categorical values are
compared exactly as given (the 2024 code was case-sensitive), vitals are read as bare numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from medagentgym.tasks.medcalc import scores as sc
from medagentgym.tasks.medcalc import scores_icu as icu
from medagentgym.tasks.medcalc.bench_units import BenchEntities, round_2024

__all__ = ["BENCH_SCORE_VARIANTS"]


def _between(value: float, bands: list[tuple[float, float, int]]) -> int:
    """Points of the first ``(low, high, points)`` band with ``low <= value < high`` (0 when none matches)."""
    for low, high, points in bands:
        if low <= value < high:
            return points
    return 0


def _exact(e: BenchEntities, key: str, points: dict[str, int], default: str | None = None) -> int:
    """Points of the value given for ``key``, matched exactly as the 2024 code did (a one-line error otherwise)."""
    value = e.raw_value(key, default) if default is not None else e.require(key)
    if value not in points:
        raise ValueError(f"entity {key!r} has value {value!r}, which the 2024 code did not know; use one of "
                         f"{', '.join(map(repr, points))}")
    return points[value]


def child_pugh(e: BenchEntities) -> int:
    """Child-Pugh with case-sensitive ascites/encephalopathy matching: a given value that is not exactly
    'Absent'/'Slight'/'Moderate' (the rows say 'absent', 'slight', 'moderate') scores 0, a missing one 1; 'Grade 0'
    encephalopathy scores 0. Bilirubin of exactly 2 mg/dL scores 0, albumin of exactly 2.8 g/dL scores 3."""
    inr = e.num("international normalized ratio")
    score = 1 if inr < 1.7 else 2 if inr <= 2.3 else 3
    bili = e.num("Bilirubin", "mg/dL")
    score += 1 if bili < 2 else 2 if 2 < bili < 3 else 3 if bili >= 3 else 0
    alb = e.num("Albumin", "g/dL")
    score += 1 if alb > 3.5 else 2 if alb > 2.8 else 3
    ascites, enceph = e.raw_value("Ascites"), e.raw_value("Encephalopathy")
    score += 1 if ascites is None else {"Absent": 1, "Slight": 2, "Moderate": 3}.get(ascites, 0)
    return score + (1 if enceph is None else {"No Encephalopathy": 1, "Grade 1-2": 2, "Grade 3-4": 3}.get(enceph, 0))


def rcri(e: BenchEntities) -> int:
    """RCRI without the cerebrovascular-disease criterion (the 2024 code read a key the rows never fill)."""
    score = sum(e.flag(k) for k in ("Elevated-risk surgery", "History of ischemic heart disease",
                                     "Congestive Heart Failure criteria for the Cardiac Risk Index rule",
                                     "Pre-operative treatment with insulin"))
    creat = e.opt_num("Pre-operative creatinine", "mg/dL")
    return int(score + (creat is not None and creat > 2))


def heart(e: BenchEntities) -> int:
    """HEART with atherosclerotic disease as one of seven risk factors (0 -> 0, 1-2 -> 1, >= 3 -> 2; published: 2
    on its own) and TIA history unused."""
    history = {"Slightly suspicious": 0, "Moderately suspicious": 1, "Highly suspicious": 2}
    ecg = {"Normal": 0, "Non-specific repolarization disturbance": 1, "Significant ST deviation": 2}
    troponin = {"less than or equal to normal limit": 0,
                "between the normal limit or up to three times the normal limit": 1,
                "greater than three times normal limit": 2}
    score = _exact(e, "Suspicion History", history, "Slightly suspicious")
    score += _exact(e, "Electrocardiogram Test", ecg, "Normal")
    score += _exact(e, "Initial troponin", troponin, "less than or equal to normal limit")
    age = e.num("age", "years")
    score += 0 if age < 45 else 1 if age < 65 else 2
    factors = sum(e.flag(k) for k in (
        "Hypertension history", "hypercholesterolemia", "Diabetes mellitus criteria for CCI rule", "obesity",
        "smoking", "parent or sibling with Cardiovascular disease before age 65", "atherosclerotic disease"))
    return score + (0 if factors == 0 else 1 if factors <= 2 else 2)


def centor(e: BenchEntities) -> int:
    """McIsaac with whole-year ages: 3-14 -> +1, >= 45 -> -1 (an age of 14.5 scores 0)."""
    age = e.num("age", "years")
    score = 1 if 3 <= age <= 14 else -1 if age >= 45 else 0
    score += e.num("Temperature", "C") > 38
    return int(score + sum(e.flag(k) for k in ("Cough Absent", "Tender/swollen anterior cervical lymph nodes",
                                                 "Exudate or swelling on tonsils")))


def glasgow_coma(e: BenchEntities) -> int:
    """Eye + verbal + verbal + motor: the verbal response is added twice (totals run 4-20)."""
    verbal = _exact(e, "Best verbal response", sc.GCS_VERBAL)
    return _exact(e, "Best eye response", sc.GCS_EYE) + 2 * verbal + _exact(e, "Best motor response", sc.GCS_MOTOR)


def glasgow_blatchford(e: BenchEntities) -> int:
    """GBS with hemoglobin bands closed at the top: men 12 < Hgb <= 13 -> 1 (13 -> 1, 12 -> 0; published 13 -> 0,
    12 -> 1), women 10 < Hgb <= 12 -> 1 (12 -> 1, 10 -> 0); BUN of exactly 70 -> 0; BUN converted with 28.08 g/mol."""
    bun = e.num("Blood Urea Nitrogen (BUN)", "mg/dL")
    score = _between(bun, [(18.2, 22.4, 2), (22.4, 28, 3), (28, 70, 4)]) + (6 if bun > 70 else 0)
    hgb = e.num("Hemoglobin", "g/dL")
    if e.raw_value("sex") == "Male":
        score += 1 if 12 < hgb <= 13 else 3 if 10 <= hgb < 12 else 6 if hgb < 10 else 0
    else:
        score += 1 if 10 < hgb <= 12 else 6 if hgb < 10 else 0
    sbp = e.first("Systolic Blood Pressure")
    score += _between(sbp, [(100, 110, 1), (90, 100, 2)]) + (3 if sbp < 90 else 0)
    score += e.first("Heart Rate or Pulse") >= 100
    score += e.flag("Melena present") + 2 * e.flag("Recent syncope")
    return int(score + 2 * e.flag("Hepatic disease history") + 2 * e.flag("Cardiac failure present"))


def charlson(e: BenchEntities) -> int:
    """CCI with case-sensitive grades: only 'localized'/'metastatic' tumours, 'mild'/'moderate to severe' liver
    disease and 'uncomplicated'/'end-organ damage' diabetes get their weights; any other truthy value (the rows'
    'Localized', 'Mild', 'Severe', 'None or Diet-controlled', True) counts 1."""
    age = e.num("age", "years")
    score = 0 if age < 50 else 1 if age < 60 else 2 if age < 70 else 3 if age < 80 else 4
    graded = {"Solid tumor": {"none": 0, "localized": 2, "metastatic": 6},
              "Liver disease severity": {"none": 0, "mild": 1, "moderate to severe": 3},
              "Diabetes mellitus criteria for CCI rule": {"none or diet-controlled": 0, "uncomplicated": 1,
                                                          "end-organ damage": 2}}
    for key, grades in graded.items():
        value = e.raw_value(key)
        score += grades[value] if isinstance(value, str) and value in grades else bool(value)
    score += bool(e.raw_value("Cerebrovascular Accident") or e.raw_value("Transient Ischemic Attacks History"))
    weights = {"Myocardial infarction": 1, "Congestive Heart Faliure": 1, "Peripheral vascular disease": 1,
               "Connective tissue disease": 1, "Dementia": 1, "Chronic Obstructive Pulmonary Disease": 1,
               "Peptic ulcer disease": 1, "Hemiplegia": 2, "Moderate to severe Chronic Kidney Disease": 2,
               "Leukemia": 2, "Lymphoma": 2, "AIDS": 6}
    return int(score + sum(points for key, points in weights.items() if e.raw_value(key)))


def caprini(e: BenchEntities) -> int:
    """Caprini counting only age, surgery type and mobility: the code narrated the yes/no risk factors but never
    added their points, and never reached the BMI item. Ages 40.5, 60.5 and 74.5 fall between bands (0)."""
    age = e.num("age", "years")
    score = 0 if age <= 40 else 1 if 41 <= age <= 60 else 2 if 61 <= age <= 74 else 3 if age >= 75 else 0
    surgery = icu.CAPRINI_SURGERY.get(e.raw_value("Surgery Type"), 0)  # exact case: the tables use 2024 spellings
    return score + surgery + icu.CAPRINI_MOBILITY.get(e.raw_value("Mobility"), 0)


def curb65(e: BenchEntities) -> int:
    """CURB-65 with respiratory rate and blood pressures truncated to integers before the comparisons."""
    score = e.flag("Confusion") + (e.num("Blood Urea Nitrogen (BUN)", "mg/dL") > 19)
    score += int(e.first("respiratory rate")) >= 30
    score += int(e.first("Systolic Blood Pressure")) < 90 or int(e.first("Diastolic Blood Pressure")) <= 60
    return int(score + (e.num("age", "years") >= 65))


def _apache_creatinine(creat: float, acute: bool, chronic: bool) -> int:
    if acute and creat >= 2.0:
        return 8 if creat >= 3.5 else 6
    if chronic and creat >= 2.0:
        return 4 if creat >= 3.5 else 3
    if 1.5 <= creat < 2.0 and (acute or chronic):
        return 4 if acute else 2
    return 2 if creat < 0.6 else 0


def _apache_oxygen(e: BenchEntities) -> int:
    if e.first("FiO₂") >= 50:
        grad = e.num("A-a gradient")
        return 4 if grad > 499 else 3 if 350 <= grad <= 499 else 2 if 200 <= grad <= 349 else 0
    pao2 = e.first("Partial pressure of oxygen (PaO₂) for Apache II")
    return 0 if pao2 > 70 else 1 if 61 <= pao2 <= 70 else 3 if 55 <= pao2 <= 60 else 4 if pao2 < 55 else 0


def apache_ii(e: BenchEntities) -> int:
    """APACHE II as the 2024 code scored it: GCS added as is (published 15 - GCS); low MAP, HR, RR, pH, Na, K and
    Hct score 0; creatinine scores only with acute or chronic renal failure (a 'Not mentinoed' string counts as
    chronic); chronic health gives 2 for 'Elective', 5 for 'Emergency', 0 for anything else; ages 45 and 75 score
    0; the WBC count per µL is compared with the x10³ limits; 'degrees celsisus' is Fahrenheit."""
    score = 0
    if e.flag("History of severe organ failure or immunocompromise"):
        score += {"Elective": 2, "Emergency": 5}.get(e.raw_value("Surgery Type"), 0)
    age = e.num("age", "years")
    score += 2 if 45 < age <= 54 else 3 if 55 <= age <= 64 else 5 if 65 <= age <= 74 else 6 if age > 75 else 0
    score += _apache_oxygen(e)
    temp = e.num("Temperature", "C")
    score += 4 if temp >= 41 or temp < 30 else _between(temp, [(39, 41, 3), (38.5, 39, 1), (34, 36, 1),
                                                                (32, 34, 2), (30, 32, 3)])
    mean_ap = round_2024(2 * e.first("Diastolic Blood Pressure") / 3 + e.first("Systolic Blood Pressure") / 3)
    score += 4 if mean_ap > 159 else 3 if mean_ap > 129 else 2 if mean_ap > 109 else 0
    for value, bands in (
        (e.first("Heart Rate or Pulse"), [(180, 1e9, 4), (140, 180, 3), (110, 140, 2)]),
        (e.first("respiratory rate"), [(50, 1e9, 4), (35, 50, 3), (25, 35, 1)]),
        (e.num("pH"), [(7.7, 1e9, 4), (7.6, 7.7, 3), (7.5, 7.6, 1)]),
        (e.num("Sodium", "mmol/L"), [(180, 1e9, 4), (160, 180, 3), (155, 160, 2), (150, 155, 1)]),
        (e.num("Potassium", "mmol/L"), [(7, 1e9, 4), (6, 7, 3), (5.5, 6, 1)]),
        (e.first("Hematocrit"), [(60, 1e9, 4), (50, 60, 2), (46, 50, 1)]),
        (e.cells("White blood cell count", "mm^3"), [(40, 1e9, 4), (20, 40, 2), (15, 20, 1)]),
    ):
        score += _between(value, bands)
    score += _apache_creatinine(e.num("creatinine", "mg/dL"), e.flag("Acute renal failure"),
                                bool(e.raw_value("Chronic Renal Failure", False)))
    return round(score + e.num("Glasgow Coma Score"))


def psi(e: BenchEntities) -> int:
    """PSI with 'degrees celsisus' read as Fahrenheit, fever meaning > 39.9 °C, and PaO2 scored only when its unit
    is exactly 'mm Hg' (< 60) or 'kPa' (< 8)."""
    score = e.num("age", "years") - (10 if e.raw_value("sex") == "Female" else 0)
    weights = {"Nursing home resident": 10, "Neoplastic disease": 30, "Liver disease severity": 20,
               "Congestive Heart Faliure": 10, "Cerebrovascular disease history": 10, "Renal disease": 10,
               "Altered mental status": 20, "Pleural effusion on x-ray": 10}
    score += sum(points for key, points in weights.items() if e.raw_value(key))
    temp = e.num("Temperature", "C")
    score += 10 * (e.first("Heart Rate or Pulse") >= 125) + 15 * (temp < 35 or temp > 39.9)
    score += 30 * (e.num("pH") < 7.35) + 20 * (e.first("respiratory rate") >= 30)
    score += 20 * (e.first("Systolic Blood Pressure") < 90) + 20 * (e.num("Blood Urea Nitrogen (BUN)", "mg/dL") >= 30)
    score += 20 * (e.num("Sodium", "mmol/L") < 130) + 10 * (e.num("Glucose", "mg/dL") >= 250)
    score += 10 * (e.first("Hematocrit") < 30)
    pao2, unit = e.require("Partial pressure of oxygen (PaO₂) for Apache II")
    score += 10 * ((unit == "mm Hg" and pao2 < 60) or (unit == "kPa" and pao2 < 8))
    return round(score)


def _sofa_respiration(e: BenchEntities) -> int:
    ratio = round_2024(e.first("Partial pressure of oxygen (PaO₂) for Apache II") / e.first("FiO₂"))
    vent, cpap = e.flag("On mechanical ventilation"), e.flag("Continous positive airway pressure")
    if 300 <= ratio < 400:
        return 1
    if 200 <= ratio < 300 or (ratio <= 199 and not vent and not cpap):
        return 2
    if 100 <= ratio < 199 and (vent or cpap):
        return 3
    return 4 if ratio < 100 and vent else 0


def _sofa_cardiovascular(e: BenchEntities) -> int:
    dop, dob, epi, norepi = (e.first(k) if e.has(k) else 0.0
                             for k in ("DOPamine", "DOBUTamine", "EPINEPHrine", "norEPINEPHrine"))
    pressures = e.has("Systolic Blood Pressure") and e.has("Diastolic Blood Pressure")
    if pressures and not (dob or epi or norepi) and (
            e.first("Systolic Blood Pressure") / 3 + 2 * e.first("Diastolic Blood Pressure") / 3 < 70):
        return 1
    if dop <= 5 or dob:
        return 2
    return 3  # dopamine > 5: the missing epinephrine/norepinephrine default to 0 <= 0.1, so 4 is never reached


def sofa(e: BenchEntities) -> int:
    """SOFA as the 2024 code scored it: PaO2/FiO2 with FiO2 in percent (so the ratio is 100x too small); the
    cardiovascular item gives 2 by default; urine output < 200 never reaches 4; creatinine and urine output are
    ignored when both are given."""
    score = _sofa_respiration(e) + _sofa_cardiovascular(e)
    gcs = e.num("Glasgow Coma Score") if e.has("Glasgow Coma Score") else 15
    score += 4 if gcs < 6 else 3 if gcs <= 9 else 2 if gcs <= 12 else 1 if gcs <= 14 else 0
    bili = e.num("Bilirubin", "mg/dL")
    score += _between(bili, [(1.2, 2, 1), (2, 6, 2), (6, 12, 3)]) + (4 if bili >= 12 else 0)
    platelets = e.cells("Platelet count", "µL")
    score += _between(platelets, [(100000, 150000, 1), (50000, 100000, 2), (20000, 50000, 3)])
    score += 4 if platelets < 20000 else 0
    has_creat, has_urine = e.has("creatinine"), e.has("Urine Output")
    if not has_creat and has_urine:
        score += 3 if e.first("Urine Output") < 500 else 0
    elif has_creat and not has_urine:
        creat = e.num("creatinine", "mg/dL")
        score += _between(creat, [(1.2, 2, 1), (2, 3.5, 2), (3.5, 5, 3)]) + (4 if creat >= 5 else 0)
    return score


def sirs(e: BenchEntities) -> int:
    """SIRS as the 2024 code counted: the heart-rate criterion always counts (both branches add 1); the WBC count
    is scaled to cells per m³ (always > 12,000)."""
    temp = e.num("Temperature", "C")
    score = (temp > 38 or temp < 36) + 1
    wbc = e.cells("White blood cell count", "m^3")
    score += wbc > 12000 or wbc < 4000
    rr = e.first("respiratory rate") if e.has("respiratory rate") else None
    paco2 = e.first("PaCO₂") if e.has("PaCO₂") else None
    return int(score + ((rr is not None and rr > 20) or (paco2 is not None and paco2 < 32)))


#: Calculator id -> 2024 score function.
BENCH_SCORE_VARIANTS: dict[int, Callable[[BenchEntities], Any]] = {
    15: child_pugh, 17: rcri, 18: heart, 20: centor, 21: glasgow_coma, 27: glasgow_blatchford, 28: apache_ii,
    29: psi, 32: charlson, 36: caprini, 43: sofa, 45: curb65, 51: sirs,
}
