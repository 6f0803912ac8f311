"""The long multi-organ scores: APACHE II, PSI/PORT, Caprini (2005) and SOFA.

Point tables are the published ones (as listed by MDCalc). Each band table is a list of
``(lower threshold, points)`` rows in descending order; see :func:`medagentgym.tasks.medcalc.scores.band`.
"""

from __future__ import annotations

from medagentgym.tasks.medcalc.equations import mean_arterial_pressure
from medagentgym.tasks.medcalc.scores import _choice, _male, band
from medagentgym.tasks.medcalc.units import Entities

_APACHE_TEMP = [(41, 4), (39, 3), (38.5, 1), (36, 0), (34, 1), (32, 2), (30, 3)]
_APACHE_MAP = [(160, 4), (130, 3), (110, 2), (70, 0), (50, 2)]
_APACHE_HR = [(180, 4), (140, 3), (110, 2), (70, 0), (55, 2), (40, 3)]
_APACHE_RR = [(50, 4), (35, 3), (25, 1), (12, 0), (10, 1), (6, 2)]
_APACHE_PH = [(7.7, 4), (7.6, 3), (7.5, 1), (7.33, 0), (7.25, 2), (7.15, 3)]
_APACHE_NA = [(180, 4), (160, 3), (155, 2), (150, 1), (130, 0), (120, 2), (111, 3)]
_APACHE_K = [(7, 4), (6, 3), (5.5, 1), (3.5, 0), (3, 1), (2.5, 2)]
_APACHE_CR = [(3.5, 4), (2, 3), (1.5, 2), (0.6, 0)]
_APACHE_HCT = [(60, 4), (50, 2), (46, 1), (30, 0), (20, 2)]
_APACHE_WBC = [(40, 4), (20, 2), (15, 1), (3, 0), (1, 2)]
_APACHE_AGE = [(75, 6), (65, 5), (55, 3), (45, 2)]


def _apache_oxygenation(e: Entities) -> int:
    """FiO2 ≥ 50 %: points from the A-a gradient; otherwise (or without a gradient) from PaO2."""
    fio2 = e.num("FiO₂", "%")
    gradient = e.opt_num("A-a gradient")
    if fio2 >= 50 and gradient is not None:
        return band(gradient, [(500, 4), (350, 3), (200, 2)], 0)
    pao2 = e.num("Partial pressure of oxygen (PaO₂) for Apache II", "mmHg")
    return 0 if pao2 > 70 else 1 if pao2 >= 61 else 3 if pao2 >= 55 else 4


def apache_ii(e: Entities) -> int:
    """Acute physiology (12 variables) + age points + chronic health points."""
    score = band(e.num("Temperature", "C"), _APACHE_TEMP, 4)
    score += band(mean_arterial_pressure(e), _APACHE_MAP, 4)
    score += band(e.num("Heart Rate or Pulse", "bpm"), _APACHE_HR, 4)
    score += band(e.num("respiratory rate", "bpm"), _APACHE_RR, 4)
    score += _apache_oxygenation(e)
    score += band(e.num("pH"), _APACHE_PH, 4)
    score += band(e.num("Sodium", "mmol/L"), _APACHE_NA, 4)
    score += band(e.num("Potassium", "mmol/L"), _APACHE_K, 4)
    creat_points = band(e.num("creatinine", "mg/dL"), _APACHE_CR, 2)
    score += 2 * creat_points if e.flag("Acute renal failure") else creat_points
    score += band(e.num("Hematocrit", "%"), _APACHE_HCT, 4)
    score += band(e.num("White blood cell count", "uL") / 1000.0, _APACHE_WBC, 4)
    score += 15 - round(e.num("Glasgow Coma Score"))
    score += band(e.num("age", "years"), _APACHE_AGE, 0)
    if e.flag("History of severe organ failure or immunocompromise"):
        surgery = e.text("Surgery Type", "nonoperative")
        score += 2 if surgery == "elective" else 5  # nonoperative or emergency postoperative: 5
    return score


def psi(e: Entities) -> int:
    """Pneumonia Severity Index (PORT): age (−10 for women) plus weighted findings."""
    age = e.num("age", "years")
    score = age if _male(e) else age - 10
    weights = {
        "Nursing home resident": 10, "Neoplastic disease": 30, "Liver disease severity": 20,
        "Congestive Heart Faliure": 10, "Cerebrovascular disease history": 10, "Renal disease": 10,
        "Altered mental status": 20, "Pleural effusion on x-ray": 10,
    }
    score += sum(points for key, points in weights.items() if e.flag(key))
    score += 20 * (e.num("respiratory rate", "bpm") >= 30)
    score += 20 * (e.num("Systolic Blood Pressure", "mmHg") < 90)
    temp = e.num("Temperature", "C")
    score += 15 * (temp < 35 or temp >= 40)
    score += 10 * (e.num("Heart Rate or Pulse", "bpm") >= 125)
    score += 30 * (e.num("pH") < 7.35)
    score += 20 * (e.num("Blood Urea Nitrogen (BUN)", "mg/dL") >= 30)
    score += 20 * (e.num("Sodium", "mmol/L") < 130)
    score += 10 * (e.num("Glucose", "mg/dL") >= 250)
    score += 10 * (e.num("Hematocrit", "%") < 30)
    score += 10 * (e.num("Partial pressure of oxygen (PaO₂) for Apache II", "mmHg") < 60)
    return round(score)


_CAPRINI_FLAGS = {
    "Major Surgery in the last month": 1, "Congestive Heart Failure in the last month": 1,
    "Sepsis in the last month": 1, "Pneumonia in the last month": 1, "Immobilizing plaster cast in the last month": 2,
    "Hip, pelvis, or leg fracture in the last month": 5, "Stroke in the last month": 5,
    "Multiple trauma in the last month": 5, "Acute spinal cord injury causing paralysis in the last month": 5,
    "Varicose veins": 1, "Current swollen legs": 1, "Current central venous access": 2,
    "Family history of thrombosis": 3, "Positive Factor V Leiden": 3, "Positive prothrombin 20210A": 3,
    "Elevated serum homocysteine": 3, "Positive lupus anticoagulant": 3, "Elevated anticardiolipin antibody": 3,
    "Heparin-induced thrombocytopenia": 3, "Other congenital or acquired thrombophilia": 3,
    "History of inflammatory bowel disease": 1, "Acute Myocardial infarction": 1,
    "Chronic Obstructive Pulmonary Disease": 1, "Present or previous malignancy": 2,
}
CAPRINI_SURGERY = {"none": 0, "minor": 1, "major": 2, "laparoscopic": 2, "arthroscopic": 2,
                   "elective major lower extremity arthroplasty": 5}
CAPRINI_MOBILITY = {"normal": 0, "ambulatory": 0, "on bed rest": 1, "confined to bed >72 hours": 2}


def caprini(e: Entities) -> int:
    """Caprini (2005) VTE risk: age, surgery type, recent events, venous disease, thrombophilia, mobility, other."""
    score = band(e.num("age", "years"), [(75, 3), (61, 2), (41, 1)], 0)
    score += _choice(e, "Surgery Type", CAPRINI_SURGERY, "none")
    score += sum(points for key, points in _CAPRINI_FLAGS.items() if e.flag(key))
    score += 3 * e.flag("Previously documented Deep Vein Thrombosis", "Previously Documented Pulmonary Embolism")
    score += _choice(e, "Mobility", CAPRINI_MOBILITY, "normal")
    bmi = e.opt_num("Body Mass Index (BMI)", "kg/m2")
    return int(score + (bmi is not None and bmi > 25))


def _sofa_cardiovascular(e: Entities) -> int:
    dop = e.opt_num("DOPamine", "ug/kg/min") or 0.0
    dob = e.opt_num("DOBUTamine", "ug/kg/min") or 0.0
    epi = e.opt_num("EPINEPHrine", "ug/kg/min") or 0.0
    norepi = e.opt_num("norEPINEPHrine", "ug/kg/min") or 0.0
    if dop > 15 or epi > 0.1 or norepi > 0.1:
        return 4
    if dop > 5 or epi > 0 or norepi > 0:
        return 3
    if dop > 0 or dob > 0:
        return 2
    low_map = e.flag("Hypotension")
    if e.has("Systolic Blood Pressure") and e.has("Diastolic Blood Pressure"):
        low_map = low_map or mean_arterial_pressure(e) < 70
    return 1 if low_map else 0


def _sofa_renal(e: Entities) -> int:
    points = 0
    creat = e.opt_num("creatinine", "mg/dL")
    if creat is not None:
        points = band(creat, [(5, 4), (3.5, 3), (2, 2), (1.2, 1)], 0)
    urine = e.opt_num("Urine Output", "mL/day")
    if urine is not None:
        points = max(points, 4 if urine < 200 else 3 if urine < 500 else 0)
    return points


def sofa(e: Entities) -> int:
    """Respiration (PaO2/FiO2 with ventilation), platelets, GCS, bilirubin, cardiovascular, renal: 0–4 each."""
    ratio = e.num("Partial pressure of oxygen (PaO₂) for Apache II", "mmHg") / (e.num("FiO₂", "%") / 100.0)
    ventilated = e.flag("On mechanical ventilation", "Continous positive airway pressure")
    if ratio >= 400:
        score = 0
    elif ratio >= 300:
        score = 1
    elif ratio >= 200 or not ventilated:
        score = 2
    else:
        score = 3 if ratio >= 100 else 4
    score += band(e.num("Platelet count", "uL") / 1000.0, [(150, 0), (100, 1), (50, 2), (20, 3)], 4)
    score += band(e.num("Glasgow Coma Score"), [(15, 0), (13, 1), (10, 2), (6, 3)], 4)
    score += band(e.num("Bilirubin", "mg/dL"), [(12, 4), (6, 3), (2, 2), (1.2, 1)], 0)
    return score + _sofa_cardiovascular(e) + _sofa_renal(e)
