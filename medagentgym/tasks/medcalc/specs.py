"""Entity samplers: clinically plausible MedCalc-Bench "Relevant Entities" dicts for synthetic instances.

Each calculator lists its entity keys (the benchmark's spellings); each key has a spec (:data:`KEY_SPECS`,
overridden per calculator in :data:`OVERRIDES`). A quantity is drawn uniformly in its first unit, then shown in
one of its units (mixed units on purpose: lbs/kg, µmol/L/mg/dL, °F/°C) and rounded to that unit's precision;
the gold answer is computed from the rounded, displayed values, so the note and the answer always agree.
Optional keys are sometimes absent (the benchmark scores a missing criterion as absent).
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Any

from medagentgym.tasks.medcalc.dates import format_date
from medagentgym.tasks.medcalc.equations import MME_FACTORS, STEROID_EQUIVALENT_MG
from medagentgym.tasks.medcalc.units import KEY_ANALYTE, convert

__all__ = ["CALC_KEYS", "sample_entities"]


@dataclass(frozen=True)
class Q:
    """A quantity: uniform in [lo, hi] of the first unit; shown in one of ``units`` = ((unit, decimals), ...)."""

    lo: float
    hi: float
    units: tuple[tuple[str, int], ...]
    present: float = 1.0


@dataclass(frozen=True)
class N:
    """A bare number, uniform in [lo, hi], rounded to ``decimals``."""

    lo: float
    hi: float
    decimals: int = 0
    present: float = 1.0


@dataclass(frozen=True)
class B:
    """A boolean criterion: True with probability ``p`` when present."""

    p: float = 0.35
    present: float = 0.75


@dataclass(frozen=True)
class C:
    """A categorical value, one of ``options`` (weights equal)."""

    options: tuple[Any, ...]
    present: float = 1.0


def q(lo: float, hi: float, *units: tuple[str, int], present: float = 1.0) -> Q:
    return Q(lo, hi, tuple(units), present)


_MGDL_UMOL = lambda dec: (("mg/dL", dec), ("µmol/L", 0))
_MGDL_MMOL = lambda dec, mdec=1: (("mg/dL", dec), ("mmol/L", mdec))
_MEQ = (("mEq/L", 0), ("mmol/L", 0))

KEY_SPECS: dict[str, Any] = {
    "sex": C(("Male", "Female")),
    "age": q(18, 90, ("years", 0)),
    "weight": q(45, 130, ("kg", 1), ("lbs", 0)),
    "height": q(150, 195, ("cm", 0), ("m", 2), ("in", 0)),
    "creatinine": Q(0.5, 4.0, _MGDL_UMOL(2)),
    "Pre-operative creatinine": q(0.6, 3.5, ("mg/dL", 1)),
    "Urine creatinine": q(20, 250, ("mg/dL", 0)),
    "Race": C(("Black", "White"), present=0.7),
    "Systolic Blood Pressure": q(80, 190, ("mm Hg", 0)),
    "Diastolic Blood Pressure": q(40, 110, ("mm Hg", 0)),
    "Heart Rate or Pulse": q(45, 150, ("beats per minute", 0)),
    "respiratory rate": q(10, 40, ("breaths per minute", 0)),
    "Temperature": q(35.0, 40.5, ("degrees celsius", 1), ("degrees fahrenheit", 1)),
    "Calcium": Q(6.5, 11.5, _MGDL_MMOL(1, 2)),
    "Albumin": q(1.5, 5.0, ("g/dL", 1), ("g/L", 0)),
    "Bilirubin": Q(0.3, 12.0, _MGDL_UMOL(1)),
    "international normalized ratio": N(0.9, 3.5, 1),
    "Sodium": Q(125, 155, _MEQ),
    "Urine sodium": Q(5, 120, _MEQ),
    "Chloride": Q(85, 120, _MEQ),
    "Bicarbonate": Q(6, 34, _MEQ),
    "Potassium": q(2.3, 7.2, ("mEq/L", 1), ("mmol/L", 1)),
    "Glucose": Q(70, 600, _MGDL_MMOL(0)),
    "Blood Urea Nitrogen (BUN)": Q(6, 80, _MGDL_MMOL(0)),
    "Hemoglobin": q(6.0, 17.0, ("g/dL", 1)),
    "Hematocrit": q(18, 60, ("%", 0)),
    "White blood cell count": q(800, 45000, ("µL", -2), ("L", -8)),
    "Platelet count": q(15000, 450000, ("µL", -3), ("L", -9)),
    "Alanine aminotransferase": q(10, 300, ("U/L", 0)),
    "Aspartate aminotransferase": q(10, 300, ("U/L", 0)),
    "Total cholesterol": Q(130, 320, _MGDL_MMOL(0, 2)),
    "high-density lipoprotein cholesterol": Q(25, 90, _MGDL_MMOL(0, 2)),
    "Triglycerides": Q(50, 400, _MGDL_MMOL(0, 2)),
    "QT interval": q(340, 520, ("msec", 0)),
    "FiO₂": q(21, 100, ("%", 0)),
    "Partial pressure of oxygen (PaO₂) for Apache II": q(45, 160, ("mm Hg", 0)),
    "PaCO₂": q(25, 50, ("mm hg", 0), present=0.6),
    "pH": N(7.05, 7.65, 2),
    "Glasgow Coma Score": N(3, 15, 0),
    "A-a gradient": N(20, 600, 0, present=0.9),
    "O₂ saturation percentage": q(86, 100, ("%", 0)),
    "Body Mass Index (BMI)": q(17, 45, ("kg/m^2", 1)),
    "Insulin": q(2, 40, ("µIU/mL", 1)),
    "Number of Alcoholic Drinks Per Week": N(0, 20, 0),
    "cycle length": N(24, 35, 0),
    "Urine Output": q(100, 2500, ("mL/day", 0), present=0.5),
    "Ascites": C(("absent", "slight", "moderate"), present=0.85),
    "Encephalopathy": C(("No Encephalopathy", "Grade 1-2", "Grade 3-4"), present=0.85),
    "Suspicion History": C(("Slightly suspicious", "Moderately suspicious", "Highly suspicious")),
    "Electrocardiogram Test": C(("Normal", "Non-specific repolarization disturbance", "Significant ST deviation")),
    "Initial troponin": C(("less than or equal to normal limit",
                           "between the normal limit or up to three times the normal limit",
                           "greater than three times normal limit")),
    "Best eye response": C(("eyes open spontaneously", "eye opening to verbal command", "eye opening to pain",
                            "no eye opening")),
    "Best verbal response": C(("oriented", "confused", "inappropriate words", "incomprehensible sounds",
                               "no verbal response")),
    "Best motor response": C(("obeys commands", "localizes pain", "withdrawal from pain", "flexion to pain",
                              "extension to pain", "no motor response")),
    "Surgery Type": C(("Elective", "Nonoperative", "Emergency"), present=0.9),
    "Mobility": C(("normal", "on bed rest", "confined to bed >72 hours")),
    "target steroid": C(tuple(s for s in ("Betamethasone IV", "Cortisone PO", "Dexamethasone IV", "Dexamethasone PO",
                                          "Hydrocortisone IV", "Hydrocortisone PO", "MethylPrednisoLONE PO",
                                          "PredniSONE PO", "PrednisoLONE PO", "Triamcinolone IV"))),
}

_CAPRINI_BOOLS = [
    "Major Surgery in the last month", "Congestive Heart Failure in the last month", "Sepsis in the last month",
    "Pneumonia in the last month", "Immobilizing plaster cast in the last month",
    "Hip, pelvis, or leg fracture in the last month", "Stroke in the last month", "Multiple trauma in the last month",
    "Acute spinal cord injury causing paralysis in the last month", "Varicose veins", "Current swollen legs",
    "Current central venous access", "Previously documented Deep Vein Thrombosis",
    "Previously Documented Pulmonary Embolism", "Family history of thrombosis", "Positive Factor V Leiden",
    "Positive prothrombin 20210A", "Elevated serum homocysteine", "Positive lupus anticoagulant",
    "Elevated anticardiolipin antibody", "Heparin-induced thrombocytopenia",
    "Other congenital or acquired thrombophilia", "History of inflammatory bowel disease",
    "Acute Myocardial infarction", "Chronic Obstructive Pulmonary Disease", "Present or previous malignancy",
]
_QTC = ["Heart Rate or Pulse", "QT interval"]
_GAP = ["Sodium", "Chloride", "Bicarbonate"]

#: Entity keys per calculator id, in the order the benchmark lists them.
CALC_KEYS: dict[int, list[str]] = {
    2: ["sex", "age", "weight", "height", "creatinine"],
    3: ["sex", "age", "creatinine"],
    4: ["sex", "age", "Congestive Heart Faliure", "Hypertension history", "Stroke",
        "Transient Ischemic Attacks History", "Thromboembolism history", "Vascular disease history", "Diabetes history"],
    5: ["Systolic Blood Pressure", "Diastolic Blood Pressure"],
    6: ["weight", "height"],
    7: ["Calcium", "Albumin"],
    8: ["Heart Rate or Pulse", "Clinical signs and symptoms of Deep Vein Thrombosis",
        "Pulmonary Embolism is #1 diagnosis OR equally likely", "Immobilization for at least 3 days",
        "Surgery in the previous 4 weeks", "Previously Documented Pulmonary Embolism",
        "Previously documented Deep Vein Thrombosis", "Hemoptysis",
        "Malignancy with treatment within 6 months or palliative"],
    9: ["sex", "age", "creatinine", "Race"],
    10: ["sex", "height"],
    11: _QTC,
    13: ["Last menstrual date", "cycle length"],
    15: ["Bilirubin", "Albumin", "international normalized ratio", "Ascites", "Encephalopathy"],
    16: ["Active cancer", "Bedridden recently >3 days or major surgery within 12 weeks", "Major surgery within 12 weeks",
         "Calf swelling >3 centimeters compared to the other leg", "Collateral (nonvaricose) superficial veins present",
         "Entire Leg Swollen", "Localized tenderness along the deep venous system",
         "Pitting edema, confined to symptomatic leg",
         "Paralysis, paresis, or recent plaster immobilization of the lower extremity",
         "Previously documented Deep Vein Thrombosis",
         "Alternative diagnosis to Deep Vein Thrombosis as likely or more likely"],
    17: ["Elevated-risk surgery", "History of ischemic heart disease",
         "Congestive Heart Failure criteria for the Cardiac Risk Index rule", "Cerebrovascular disease history",
         "Pre-operative treatment with insulin", "Pre-operative creatinine"],
    18: ["age", "Suspicion History", "Electrocardiogram Test", "Initial troponin", "Hypertension history",
         "hypercholesterolemia", "Diabetes mellitus criteria for CCI rule", "obesity", "smoking",
         "parent or sibling with Cardiovascular disease before age 65", "atherosclerotic disease",
         "Transient Ischemic Attacks History"],
    19: ["age", "Aspartate aminotransferase", "Alanine aminotransferase", "Platelet count"],
    20: ["age", "Temperature", "Cough Absent", "Tender/swollen anterior cervical lymph nodes",
         "Exudate or swelling on tonsils"],
    21: ["Best eye response", "Best verbal response", "Best motor response"],
    22: ["weight"],
    23: ["creatinine", "Bilirubin", "international normalized ratio", "Sodium",
         "Dialysis at least twice in the past week",
         "Continuous veno-venous hemodialysis for ≥24 hours in the past week"],
    24: ["input steroid", "target steroid"],
    25: ["age", "Hypertension history", "Renal disease criteria for the HAS-BLED rule",
         "Liver disease criteria for the HAS-BLED rule", "Stroke", "Prior major bleeding or predisposition to bleeding",
         "Labile international normalized ratio", "Medication usage predisposing to bleeding",
         "Number of Alcoholic Drinks Per Week"],
    26: ["Sodium", "Glucose"],
    27: ["sex", "Blood Urea Nitrogen (BUN)", "Hemoglobin", "Systolic Blood Pressure", "Heart Rate or Pulse",
         "Melena present", "Recent syncope", "Hepatic disease history", "Cardiac failure present"],
    28: ["age", "Temperature", "Systolic Blood Pressure", "Diastolic Blood Pressure", "Heart Rate or Pulse",
         "respiratory rate", "FiO₂", "A-a gradient", "Partial pressure of oxygen (PaO₂) for Apache II", "pH",
         "Sodium", "Potassium", "creatinine", "Acute renal failure", "Hematocrit", "White blood cell count",
         "Glasgow Coma Score", "History of severe organ failure or immunocompromise", "Surgery Type"],
    29: ["sex", "age", "Nursing home resident", "Neoplastic disease", "Liver disease severity",
         "Congestive Heart Faliure", "Cerebrovascular disease history", "Renal disease", "Altered mental status",
         "respiratory rate", "Systolic Blood Pressure", "Temperature", "Heart Rate or Pulse", "pH",
         "Blood Urea Nitrogen (BUN)", "Sodium", "Glucose", "Hematocrit",
         "Partial pressure of oxygen (PaO₂) for Apache II", "Pleural effusion on x-ray"],
    30: ["Sodium", "Blood Urea Nitrogen (BUN)", "Glucose"],
    31: ["Insulin", "Glucose"],
    32: ["age", "Myocardial infarction", "Congestive Heart Faliure", "Peripheral vascular disease",
         "Cerebrovascular Accident", "Transient Ischemic Attacks History", "Dementia",
         "Chronic Obstructive Pulmonary Disease", "Connective tissue disease", "Peptic ulcer disease",
         "Liver disease severity", "Diabetes mellitus criteria for CCI rule", "Hemiplegia",
         "Moderate to severe Chronic Kidney Disease", "Solid tumor", "Leukemia", "Lymphoma", "AIDS"],
    33: ["Fever in past 24 hours", "Absence of cough or coryza", "Symptom onset ≤3 days", "Purulent tonsils",
         "Severe tonsil inflammation"],
    36: ["sex", "age", "Surgery Type", "Mobility", "Body Mass Index (BMI)"] + _CAPRINI_BOOLS,
    38: ["sex", "age", "weight", "Sodium"],
    39: _GAP,
    40: ["Sodium", "creatinine", "Urine sodium", "Urine creatinine"],
    43: ["Partial pressure of oxygen (PaO₂) for Apache II", "FiO₂", "On mechanical ventilation",
         "Continous positive airway pressure", "Platelet count", "Glasgow Coma Score", "Bilirubin",
         "Systolic Blood Pressure", "Diastolic Blood Pressure", "Hypotension", "DOPamine", "DOBUTamine",
         "EPINEPHrine", "norEPINEPHrine", "creatinine", "Urine Output"],
    44: ["Total cholesterol", "high-density lipoprotein cholesterol", "Triglycerides"],
    45: ["age", "Confusion", "Blood Urea Nitrogen (BUN)", "respiratory rate", "Systolic Blood Pressure",
         "Diastolic Blood Pressure"],
    46: ["sex", "age", "Smoker", "Total cholesterol", "high-density lipoprotein cholesterol",
         "Systolic Blood Pressure", "Blood pressure being treated with medicines"],
    48: ["age", "Heart Rate or Pulse", "O₂ saturation percentage", "Unilateral Leg Swelling", "Hemoptysis",
         "Recent surgery or trauma", "Previously Documented Pulmonary Embolism",
         "Previously documented Deep Vein Thrombosis", "Hormone use"],
    49: [],  # opioid keys are drawn by _sample_mme
    51: ["Temperature", "Heart Rate or Pulse", "respiratory rate", "PaCO₂", "White blood cell count"],
    56: _QTC, 57: _QTC, 58: _QTC, 59: _QTC,
    60: ["weight", "height"],
    61: ["Body Mass Index (BMI)", "height"],
    62: ["sex", "weight", "height"],
    63: _GAP, 64: _GAP,
    65: _GAP + ["Albumin"], 66: _GAP + ["Albumin"], 67: _GAP + ["Albumin"],
    68: ["Last menstrual date", "cycle length"],
    69: ["Last menstrual date", "Current Date"],
}

#: Per-calculator spec changes (calculator id, key) -> spec.
OVERRIDES: dict[tuple[int, str], Any] = {
    (20, "age"): q(3, 70, ("years", 0), ("months", 0)),
    (38, "age"): q(5, 90, ("years", 0)),
    (38, "Sodium"): Q(130, 170, _MEQ),
    (22, "weight"): q(3, 110, ("kg", 1), ("lbs", 0)),
    (26, "Glucose"): Q(150, 900, _MGDL_MMOL(0)),
    # Sodium correction and serum osmolality have narrow answers (a ±5 % band covers a quarter of them); the
    # extremes of case reports (115-165 mmol/L) widen them so that no one constant answers many instances.
    (26, "Sodium"): Q(115, 165, _MEQ),
    (30, "Sodium"): Q(115, 165, _MEQ),
    (30, "Glucose"): Q(70, 900, _MGDL_MMOL(0)),
    (23, "creatinine"): q(0.6, 5.0, ("mg/dL", 2)),
    (23, "Bilirubin"): q(0.5, 20, ("mg/dL", 1)),
    (23, "Sodium"): q(118, 145, ("mEq/L", 0)),
    (23, "Dialysis at least twice in the past week"): B(0.15, 1.0),
    (23, "Continuous veno-venous hemodialysis for ≥24 hours in the past week"): B(0.1, 1.0),
    (28, "Temperature"): q(29.5, 41.5, ("degrees celsius", 1), ("degrees fahrenheit", 1)),
    (28, "Heart Rate or Pulse"): q(35, 185, ("beats per minute", 0)),
    (28, "respiratory rate"): q(5, 52, ("breaths per minute", 0)),
    (28, "Sodium"): Q(108, 182, _MEQ),
    (28, "creatinine"): q(0.4, 5.0, ("mg/dL", 1)),
    (29, "Blood Urea Nitrogen (BUN)"): q(5, 60, ("mg/dL", 0)),
    (29, "Glucose"): Q(70, 400, _MGDL_MMOL(0)),
    (29, "pH"): N(7.2, 7.5, 2),
    (29, "Liver disease severity"): B(),
    (32, "Liver disease severity"): C(("Mild", "Moderate to Severe"), present=0.4),
    (32, "Diabetes mellitus criteria for CCI rule"): C(("None or diet-controlled", "Uncomplicated", "End-organ damage"),
                                                       present=0.8),
    (32, "Solid tumor"): C((False, "Localized", "Metastatic"), present=0.7),
    (36, "Surgery Type"): C(("minor", "major", "laparoscopic", "elective major lower extremity arthroplasty"), 0.85),
    (36, "age"): q(20, 90, ("years", 0)),
    (46, "age"): q(30, 79, ("years", 0)),
    (46, "Total cholesterol"): q(130, 320, ("mg/dL", 0)),
    (46, "high-density lipoprotein cholesterol"): q(25, 90, ("mg/dL", 0)),
    (46, "Systolic Blood Pressure"): q(100, 190, ("mm Hg", 0)),
    (46, "Smoker"): B(0.35, 1.0),
    (19, "Platelet count"): q(40000, 450000, ("µL", -3), ("L", -9)),
    (31, "Glucose"): q(70, 250, ("mg/dL", 0)),
    (43, "Partial pressure of oxygen (PaO₂) for Apache II"): q(45, 200, ("mm Hg", 0)),
    (43, "On mechanical ventilation"): B(0.4, 1.0),
    (43, "Continous positive airway pressure"): B(0.15, 1.0),
    (43, "creatinine"): Q(0.5, 6.0, _MGDL_UMOL(1), present=0.8),
    (43, "Bilirubin"): Q(0.3, 14.0, _MGDL_UMOL(1)),
    (43, "Systolic Blood Pressure"): q(70, 160, ("mm Hg", 0), present=0.7),
    (43, "DOPamine"): q(2, 20, ("mcg/kg/min", 1), present=0.15),
    (43, "DOBUTamine"): q(2, 15, ("mcg/kg/min", 1), present=0.1),
    (43, "EPINEPHrine"): q(0.02, 0.3, ("mcg/kg/min", 2), present=0.1),
    (43, "norEPINEPHrine"): q(0.02, 0.5, ("mcg/kg/min", 2), present=0.2),
    (45, "Blood Urea Nitrogen (BUN)"): Q(5, 60, _MGDL_MMOL(0)),
    (48, "O₂ saturation percentage"): q(88, 100, ("%", 0)),
    (51, "Temperature"): q(35.0, 40.0, ("degrees celsius", 1), ("degrees fahrenheit", 1)),
    (51, "White blood cell count"): q(2000, 25000, ("µL", -2), ("L", -8)),
    (61, "Body Mass Index (BMI)"): q(18.5, 30, ("kg/m^2", 1)),
    (61, "height"): q(150, 195, ("cm", 0), ("in", 0), ("m", 2)),
}


# Long checklists: each item is rarer, so totals stay clinically plausible.
OVERRIDES.update({(36, key): B(0.12, 0.7) for key in _CAPRINI_BOOLS})
OVERRIDES.update({(32, key): B(0.2, 0.75) for key in CALC_KEYS[32] if key not in {"age"} and (32, key) not in OVERRIDES})


def _draw(rng: random.Random, spec: Any, key: str) -> Any:
    if isinstance(spec, B):
        return rng.random() < spec.p
    if isinstance(spec, C):
        return rng.choice(spec.options)
    if isinstance(spec, N):
        value = round(rng.uniform(spec.lo, spec.hi), spec.decimals)
        return int(value) if spec.decimals == 0 else value
    unit, decimals = rng.choice(spec.units)
    base = rng.uniform(spec.lo, spec.hi)
    shown = round(convert(base, spec.units[0][0], unit, KEY_ANALYTE.get(key.lower())), decimals)
    return [int(shown) if decimals <= 0 else shown, unit]


def _spec(calc_id: int, key: str) -> Any:
    return OVERRIDES.get((calc_id, key)) or KEY_SPECS.get(key) or B()


def _sample_dates(rng: random.Random, calc_id: int) -> dict[str, Any]:
    lmp = dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(0, 5 * 365))
    ents: dict[str, Any] = {"Last menstrual date": format_date(lmp)}
    if calc_id == 69:
        ents["Current Date"] = format_date(lmp + dt.timedelta(days=rng.randint(14, 290)))
    else:
        ents["cycle length"] = rng.randint(21, 35)
    return ents


def _sample_steroid(rng: random.Random) -> dict[str, Any]:
    names = {"betamethasone iv": "Betamethasone IV", "cortisone po": "Cortisone PO",
             "dexamethasone iv": "Dexamethasone IV", "dexamethasone po": "Dexamethasone PO",
             "hydrocortisone iv": "Hydrocortisone IV", "hydrocortisone po": "Hydrocortisone PO",
             "methylprednisolone iv": "MethylPrednisoLONE IV", "methylprednisolone po": "MethylPrednisoLONE PO",
             "prednisolone po": "PrednisoLONE PO", "prednisone po": "PredniSONE PO",
             "triamcinolone iv": "Triamcinolone IV"}
    source = rng.choice(sorted(names))
    dose = STEROID_EQUIVALENT_MG[source] * rng.choice((0.5, 1, 1.5, 2, 3, 4, 6, 8, 10))
    target = rng.choice([t for t in KEY_SPECS["target steroid"].options if t.lower() != source])
    return {"input steroid": [names[source], round(dose, 2), "mg"], "target steroid": target}


_MME_DOSES = {"Codeine": (15, 60, 5), "FentaNYL buccal": (100, 800, 100), "FentANYL patch": (12, 100, 12),
              "HYDROcodone": (5, 20, 5), "HYDROmorphone": (1, 8, 1), "Methadone": (5, 40, 5), "Morphine": (10, 60, 5),
              "OxyCODONE": (5, 40, 5), "OxyMORphone": (5, 20, 5), "Tapentadol": (50, 200, 50),
              "TraMADol": (25, 100, 25)}


def _sample_mme(rng: random.Random) -> dict[str, Any]:
    ents: dict[str, Any] = {}
    for drug in rng.sample(sorted(MME_FACTORS), rng.randint(1, 3)):
        lo, hi, step = _MME_DOSES[drug]
        unit = "µg" if drug == "FentaNYL buccal" else "mg"
        ents[f"{drug} Dose"] = [rng.randrange(lo, hi + 1, step), unit]
        ents[f"{drug} Dose Per Day"] = [rng.randint(1, 4), "per day"]
    return ents


def _fix(ents: dict[str, Any], rng: random.Random) -> None:
    """Keep sampled values mutually plausible (diastolic below systolic, LDL positive, no zero denominators)."""
    sbp, dbp = ents.get("Systolic Blood Pressure"), ents.get("Diastolic Blood Pressure")
    if sbp and dbp and dbp[0] > sbp[0] - 20:
        dbp[0] = max(30, sbp[0] - rng.randint(20, 60))
    if "Bicarbonate" in ents and abs(convert(ents["Bicarbonate"][0], ents["Bicarbonate"][1], "mmol/L") - 24) < 1:
        ents["Bicarbonate"][0] += 3
    if "Triglycerides" in ents:
        tc = convert(*ents["Total cholesterol"], "mg/dL", "cholesterol")
        hdl = convert(*ents["high-density lipoprotein cholesterol"], "mg/dL", "cholesterol")
        tg = convert(*ents["Triglycerides"], "mg/dL", "triglycerides")
        if tc - hdl - tg / 5 < 40:
            factor = 38.67 if ents["Total cholesterol"][1] == "mmol/L" else 1.0
            ents["Total cholesterol"][0] = round((hdl + tg / 5 + rng.randint(40, 160)) / factor, 2 if factor > 1 else 0)


def sample_entities(calc_id: int, rng: random.Random) -> dict[str, Any]:
    """Draw one plausible Relevant Entities dict for calculator ``calc_id`` (benchmark key spellings)."""
    if calc_id in (13, 68, 69):
        return _sample_dates(rng, calc_id)
    if calc_id == 24:
        return _sample_steroid(rng)
    if calc_id == 49:
        return _sample_mme(rng)
    ents: dict[str, Any] = {}
    for key in CALC_KEYS[calc_id]:
        spec = _spec(calc_id, key)
        if rng.random() < spec.present:
            ents[key] = _draw(rng, spec, key)
    _fix(ents, rng)
    return ents
