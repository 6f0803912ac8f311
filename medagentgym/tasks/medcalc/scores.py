"""Rule-based MedCalc-Bench scores (integer answers, graded exactly; Wells' PE moves in 0.5 steps).

A criterion whose entity key is missing counts as absent, as in the benchmark. Thresholds are the published
ones (MDCalc wording); where a criterion has two keys (e.g. bedridden OR major surgery in Wells' DVT) it is
counted once.
"""

from __future__ import annotations

from collections.abc import Sequence

from medagentgym.tasks.medcalc.units import Entities


def band(value: float, table: Sequence[tuple[float, int]], below: int) -> int:
    """Points of the first ``(threshold, points)`` row with ``value >= threshold`` (rows descending), else ``below``."""
    for threshold, points in table:
        if value >= threshold:
            return points
    return below


def _male(e: Entities) -> bool:
    sex = e.text("sex")
    if sex not in {"male", "female"}:
        raise ValueError(f"entity 'sex' must be 'Male' or 'Female', got {e.get('sex')!r}")
    return sex == "male"


def _choice(e: Entities, key: str, points: dict[str, int], default: str | None = None) -> int:
    value = e.text(key, default)
    if value not in points:
        raise ValueError(f"entity {key!r} has unknown value {e.get(key)!r}; use one of {', '.join(points)}")
    return points[value]


def cha2ds2_vasc(e: Entities) -> int:
    """CHF 1, hypertension 1, age ≥ 75 2 / 65–74 1, diabetes 1, stroke/TIA/thromboembolism 2, vascular 1, female 1."""
    age = e.num("age", "years")
    score = 2 if age >= 75 else 1 if age >= 65 else 0
    score += 0 if _male(e) else 1
    score += e.flag("Congestive Heart Faliure") + e.flag("Hypertension history") + e.flag("Diabetes history")
    score += e.flag("Vascular disease history")
    score += 2 * e.flag("Stroke", "Transient Ischemic Attacks History", "Thromboembolism history")
    return score


def wells_pe(e: Entities) -> float:
    """Wells' criteria for PE: DVT signs 3, PE most likely 3, HR > 100 1.5, immobilisation/surgery 1.5,
    previous PE/DVT 1.5, hemoptysis 1, malignancy 1."""
    score = 3.0 * e.flag("Clinical signs and symptoms of Deep Vein Thrombosis")
    score += 3.0 * e.flag("Pulmonary Embolism is #1 diagnosis OR equally likely")
    score += 1.5 * (e.num("Heart Rate or Pulse", "bpm") > 100)
    score += 1.5 * e.flag("Immobilization for at least 3 days", "Surgery in the previous 4 weeks")
    score += 1.5 * e.flag("Previously Documented Pulmonary Embolism", "Previously documented Deep Vein Thrombosis")
    score += 1.0 * e.flag("Hemoptysis") + 1.0 * e.flag("Malignancy with treatment within 6 months or palliative")
    return score


def child_pugh(e: Entities) -> int:
    """Bilirubin, albumin, INR, ascites and encephalopathy, 1–3 points each (total 5–15)."""
    bili = e.num("Bilirubin", "mg/dL")
    score = 1 if bili < 2 else 2 if bili <= 3 else 3
    alb = e.num("Albumin", "g/dL")
    score += 1 if alb > 3.5 else 2 if alb >= 2.8 else 3
    inr = e.num("international normalized ratio")
    score += 1 if inr < 1.7 else 2 if inr <= 2.3 else 3
    score += _choice(e, "Ascites", {"absent": 1, "none": 1, "slight": 2, "mild": 2, "moderate": 3, "severe": 3},
                     "absent")
    score += _choice(e, "Encephalopathy", {"no encephalopathy": 1, "grade 0": 1, "none": 1, "grade 1-2": 2,
                                           "grade 3-4": 3}, "no encephalopathy")
    return score


def wells_dvt(e: Entities) -> int:
    """Nine criteria worth 1 each, −2 when an alternative diagnosis is at least as likely."""
    score = e.flag("Active cancer")
    score += e.flag("Bedridden recently >3 days or major surgery within 12 weeks", "Major surgery within 12 weeks")
    for key in (
        "Calf swelling >3 centimeters compared to the other leg",
        "Collateral (nonvaricose) superficial veins present",
        "Entire Leg Swollen",
        "Localized tenderness along the deep venous system",
        "Pitting edema, confined to symptomatic leg",
        "Paralysis, paresis, or recent plaster immobilization of the lower extremity",
        "Previously documented Deep Vein Thrombosis",
    ):
        score += e.flag(key)
    return int(score) - 2 * e.flag("Alternative diagnosis to Deep Vein Thrombosis as likely or more likely")


def rcri(e: Entities) -> int:
    """One point each: elevated-risk surgery, ischemic heart disease, CHF, cerebrovascular disease, insulin,
    pre-operative creatinine > 2 mg/dL."""
    score = e.flag("Elevated-risk surgery") + e.flag("History of ischemic heart disease")
    score += e.flag("Congestive Heart Failure criteria for the Cardiac Risk Index rule")
    score += e.flag("History of cerebrovascular disease", "Cerebrovascular disease history")
    score += e.flag("Pre-operative treatment with insulin")
    creat = e.opt_num("Pre-operative creatinine", "mg/dL")
    return int(score) + (creat is not None and creat > 2.0)


def heart_score(e: Entities) -> int:
    """History, ECG, age, risk factors, troponin: 0–2 points each."""
    score = _choice(e, "Suspicion History", {"slightly suspicious": 0, "moderately suspicious": 1,
                                             "highly suspicious": 2}, "slightly suspicious")
    score += _choice(e, "Electrocardiogram Test", {"normal": 0, "non-specific repolarization disturbance": 1,
                                                   "significant st deviation": 2}, "normal")
    age = e.num("age", "years")
    score += 2 if age >= 65 else 1 if age >= 45 else 0
    factors = sum(e.flag(k) for k in (
        "Hypertension history", "hypercholesterolemia", "Diabetes mellitus criteria for CCI rule", "obesity",
        "smoking", "parent or sibling with Cardiovascular disease before age 65"))
    # Known atherosclerotic disease (prior MI, revascularisation, CVA/TIA, PAD) scores 2 on its own.
    if e.flag("atherosclerotic disease", "Transient Ischemic Attacks History") or factors >= 3:
        score += 2
    elif factors >= 1:
        score += 1
    score += _choice(e, "Initial troponin", {
        "less than or equal to normal limit": 0,
        "between the normal limit or up to three times the normal limit": 1,
        "greater than three times normal limit": 2}, "less than or equal to normal limit")
    return score


def centor_mcisaac(e: Entities) -> int:
    """Age 3–14 +1, 15–44 0, ≥ 45 −1; exudate/swelling +1; tender nodes +1; temperature > 38 °C +1; no cough +1."""
    age = e.num("age", "years")
    score = 1 if 3 <= age < 15 else -1 if age >= 45 else 0
    score += e.flag("Exudate or swelling on tonsils") + e.flag("Tender/swollen anterior cervical lymph nodes")
    score += e.num("Temperature", "C") > 38.0
    return int(score + e.flag("Cough Absent"))


# 'not testable' has no published points; like MedCalc-Bench we assume the response is intact (eye 4, verbal 4 as
# the benchmark scores it, motor 6).
GCS_EYE = {"eyes open spontaneously": 4, "eye opening to verbal command": 3, "eye opening to pain": 2,
           "no eye opening": 1, "not testable": 4}
GCS_VERBAL = {"oriented": 5, "confused": 4, "inappropriate words": 3, "incomprehensible sounds": 2,
              "no verbal response": 1, "not testable": 4}
GCS_MOTOR = {"obeys commands": 6, "localizes pain": 5, "withdrawal from pain": 4, "flexion to pain": 3,
             "extension to pain": 2, "no motor response": 1, "not testable": 6}


def glasgow_coma_scale(e: Entities) -> int:
    """Eye (1–4) + verbal (1–5) + motor (1–6); 'not testable' is scored as in MedCalc-Bench (eye 4, verbal 4)."""
    return (_choice(e, "Best eye response", GCS_EYE) + _choice(e, "Best verbal response", GCS_VERBAL)
            + _choice(e, "Best motor response", GCS_MOTOR))


def has_bled(e: Entities) -> int:
    """One point each: hypertension, renal disease, liver disease, stroke, bleeding, labile INR, age > 65,
    bleeding-prone medication, alcohol ≥ 8 drinks/week."""
    score = sum(e.flag(k) for k in (
        "Hypertension history", "Renal disease criteria for the HAS-BLED rule",
        "Liver disease criteria for the HAS-BLED rule", "Stroke", "Prior major bleeding or predisposition to bleeding",
        "Labile international normalized ratio", "Medication usage predisposing to bleeding"))
    score += e.num("age", "years") > 65
    drinks = e.opt_num("Number of Alcoholic Drinks Per Week")
    return int(score + (drinks is not None and drinks >= 8))


def glasgow_blatchford(e: Entities) -> int:
    """BUN, hemoglobin (sex-specific), systolic BP, pulse ≥ 100, melena, syncope, hepatic disease, cardiac failure."""
    score = band(e.num("Blood Urea Nitrogen (BUN)", "mg/dL"), [(70, 6), (28, 4), (22.4, 3), (18.2, 2)], 0)
    hgb = e.num("Hemoglobin", "g/dL")
    if _male(e):
        score += band(hgb, [(13, 0), (12, 1), (10, 3)], 6)
    else:
        score += band(hgb, [(12, 0), (10, 1)], 6)
    score += band(e.num("Systolic Blood Pressure", "mmHg"), [(110, 0), (100, 1), (90, 2)], 3)
    score += e.num("Heart Rate or Pulse", "bpm") >= 100
    score += e.flag("Melena present") + 2 * e.flag("Recent syncope")
    return int(score + 2 * e.flag("Hepatic disease history") + 2 * e.flag("Cardiac failure present"))


def charlson(e: Entities) -> int:
    """Charlson Comorbidity Index (MDCalc weights, age 50–59 +1 up to ≥ 80 +4)."""
    score = band(e.num("age", "years"), [(80, 4), (70, 3), (60, 2), (50, 1)], 0)
    for key in ("Myocardial infarction", "Congestive Heart Faliure", "Peripheral vascular disease", "Dementia",
                "Chronic Obstructive Pulmonary Disease", "Connective tissue disease", "Peptic ulcer disease"):
        score += e.flag(key)
    score += e.flag("Cerebrovascular Accident", "Transient Ischemic Attacks History")
    liver = e.get("Liver disease severity")
    if isinstance(liver, str):
        score += _choice(e, "Liver disease severity", {"none": 0, "mild": 1, "moderate": 3,
                                                        "moderate to severe": 3, "severe": 3})
    diabetes = e.get("Diabetes mellitus criteria for CCI rule")
    if isinstance(diabetes, str):
        score += _choice(e, "Diabetes mellitus criteria for CCI rule", {
            "none or diet-controlled": 0, "uncomplicated": 1, "end-organ damage": 2})
    else:
        score += bool(diabetes)
    score += 2 * e.flag("Hemiplegia") + 2 * e.flag("Moderate to severe Chronic Kidney Disease")
    tumor = e.get("Solid tumor")
    if isinstance(tumor, str) and tumor.strip().lower() == "metastatic":
        score += 6
    elif e.flag("Solid tumor"):
        score += 2
    return int(score + 2 * e.flag("Leukemia") + 2 * e.flag("Lymphoma") + 6 * e.flag("AIDS"))


def feverpain(e: Entities) -> int:
    """Fever, purulence, attend rapidly (≤ 3 days), severely inflamed tonsils, no cough or coryza: 1 each."""
    return int(sum(e.flag(k) for k in (
        "Fever in past 24 hours", "Purulent tonsils", "Symptom onset ≤3 days", "Severe tonsil inflammation",
        "Absence of cough or coryza")))


def curb65(e: Entities) -> int:
    """Confusion, BUN > 19 mg/dL, RR ≥ 30, SBP < 90 or DBP ≤ 60, age ≥ 65: 1 each."""
    score = e.flag("Confusion") + (e.num("Blood Urea Nitrogen (BUN)", "mg/dL") > 19)
    score += e.num("respiratory rate", "bpm") >= 30
    score += (e.num("Systolic Blood Pressure", "mmHg") < 90) or (e.num("Diastolic Blood Pressure", "mmHg") <= 60)
    return int(score + (e.num("age", "years") >= 65))


def perc(e: Entities) -> int:
    """Number of PERC criteria met: age ≥ 50, HR ≥ 100, SaO2 < 95 %, leg swelling, hemoptysis, recent
    surgery/trauma, prior PE/DVT, hormone use."""
    score = (e.num("age", "years") >= 50) + (e.num("Heart Rate or Pulse", "bpm") >= 100)
    score += e.num("O₂ saturation percentage", "%") < 95
    score += e.flag("Unilateral Leg Swelling") + e.flag("Hemoptysis") + e.flag("Recent surgery or trauma")
    score += e.flag("Previously Documented Pulmonary Embolism", "Previously documented Deep Vein Thrombosis")
    return int(score + e.flag("Hormone use"))


def sirs(e: Entities) -> int:
    """Number of SIRS criteria met: temperature > 38 or < 36 °C, HR > 90, RR > 20 or PaCO2 < 32 mmHg,
    WBC > 12,000 or < 4,000 /µL."""
    temp = e.num("Temperature", "C")
    score = (temp > 38.0 or temp < 36.0) + (e.num("Heart Rate or Pulse", "bpm") > 90)
    paco2 = e.opt_num("PaCO₂", "mmHg")
    score += e.num("respiratory rate", "bpm") > 20 or (paco2 is not None and paco2 < 32)
    wbc = e.num("White blood cell count", "uL")
    return int(score + (wbc > 12000 or wbc < 4000))
