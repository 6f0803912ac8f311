"""Equation-based MedCalc-Bench calculators (decimal answers, graded within a ±5 % band).

Each function takes an :class:`~medagentgym.tasks.medcalc.units.Entities` view and returns an unrounded float in the unit the
benchmark reports (mL/min, mmHg, kg, msec, ...). Formulas follow their published sources; the module-level
comment of each function names the formula. Rounding happens once, in the registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from medagentgym.tasks.medcalc.units import Entities, convert

# ---------------------------------------------------------------------------------------------------- body size


def height_in_inches(e: Entities) -> float:
    return e.num("height", "in")


def ideal_body_weight(e: Entities) -> float:
    """Devine: 50 kg (male) or 45.5 kg (female) + 2.3 kg per inch over 60 inches."""
    base = 50.0 if _is_male(e) else 45.5
    return base + 2.3 * (height_in_inches(e) - 60.0)


def adjusted_body_weight(e: Entities) -> float:
    """ABW = IBW + 0.4 × (actual weight − IBW)."""
    ibw = ideal_body_weight(e)
    return ibw + 0.4 * (e.num("weight", "kg") - ibw)


def bmi(e: Entities) -> float:
    """Weight (kg) / height (m)²."""
    return e.num("weight", "kg") / e.num("height", "m") ** 2


def body_surface_area(e: Entities) -> float:
    """Mosteller: sqrt(height cm × weight kg / 3600), in m²."""
    return math.sqrt(e.num("height", "cm") * e.num("weight", "kg") / 3600.0)


def target_weight(e: Entities) -> float:
    """Target BMI (kg/m²) × height (m)²."""
    return e.num("Body Mass Index (BMI)", "kg/m2") * e.num("height", "m") ** 2


def maintenance_fluids(e: Entities) -> float:
    """Holliday-Segar 4-2-1 rule, mL/hr: 4 mL/kg for the first 10 kg, 2 for the next 10, 1 for each kg above 20."""
    w = e.num("weight", "kg")
    if w <= 10:
        return 4.0 * w
    if w <= 20:
        return 40.0 + 2.0 * (w - 10.0)
    return 60.0 + (w - 20.0)


def mean_arterial_pressure(e: Entities) -> float:
    """MAP = 2/3 × diastolic + 1/3 × systolic."""
    return 2.0 / 3.0 * e.num("Diastolic Blood Pressure", "mmHg") + e.num("Systolic Blood Pressure", "mmHg") / 3.0


# ----------------------------------------------------------------------------------------------------- kidney


def _is_male(e: Entities) -> bool:
    sex = e.text("sex")
    if sex not in {"male", "female"}:
        raise ValueError(f"entity 'sex' must be 'Male' or 'Female', got {e.get('sex')!r}")
    return sex == "male"


def cockcroft_gault(e: Entities) -> float:
    """CrCl (mL/min) = (140 − age) × weight × (0.85 if female) / (72 × Cr mg/dL).

    The weight follows MedCalc-Bench's convention from BMI: underweight (< 18.5) uses actual weight, normal
    (18.5–24.9) the lesser of ideal and actual weight, overweight/obese (≥ 25) the adjusted body weight.
    """
    weight = e.num("weight", "kg")
    body_mass_index = bmi(e)
    if body_mass_index >= 25:
        weight = adjusted_body_weight(e)
    elif body_mass_index >= 18.5:
        weight = min(ideal_body_weight(e), weight)
    crcl = (140.0 - e.num("age", "years")) * weight / (72.0 * e.num("creatinine", "mg/dL"))
    return crcl if _is_male(e) else 0.85 * crcl


def ckd_epi_2021(e: Entities) -> float:
    """2021 race-free CKD-EPI creatinine equation, mL/min/1.73 m²."""
    male = _is_male(e)
    kappa, alpha = (0.9, -0.302) if male else (0.7, -0.241)
    ratio = e.num("creatinine", "mg/dL") / kappa
    gfr = 142.0 * min(ratio, 1.0) ** alpha * max(ratio, 1.0) ** -1.200 * 0.9938 ** e.num("age", "years")
    return gfr if male else gfr * 1.012


def mdrd(e: Entities) -> float:
    """IDMS-traceable MDRD: 175 × Cr^−1.154 × age^−0.203 × 0.742 (female) × 1.212 (Black)."""
    gfr = 175.0 * e.num("creatinine", "mg/dL") ** -1.154 * e.num("age", "years") ** -0.203
    if not _is_male(e):
        gfr *= 0.742
    if e.text("Race", "") == "black":
        gfr *= 1.212
    return gfr


def fena(e: Entities) -> float:
    """FENa (%) = (urine Na × serum Cr) / (serum Na × urine Cr) × 100."""
    num = e.num("Urine sodium", "mmol/L") * e.num("creatinine", "mg/dL")
    den = e.num("Sodium", "mmol/L") * e.num("Urine creatinine", "mg/dL")
    return num / den * 100.0


# --------------------------------------------------------------------------------------------------- chemistry


def calcium_correction(e: Entities) -> float:
    """Corrected Ca (mg/dL) = Ca + 0.8 × (4 − albumin g/dL)."""
    return e.num("Calcium", "mg/dL") + 0.8 * (4.0 - e.num("Albumin", "g/dL"))


def sodium_correction(e: Entities) -> float:
    """Katz: corrected Na (mEq/L) = Na + 0.024 × (glucose mg/dL − 100)."""
    return e.num("Sodium", "mmol/L") + 0.024 * (e.num("Glucose", "mg/dL") - 100.0)


def serum_osmolality(e: Entities) -> float:
    """2 × Na + BUN/2.8 + glucose/18 (mOsm/kg; BUN and glucose in mg/dL)."""
    return (
        2.0 * e.num("Sodium", "mmol/L")
        + e.num("Blood Urea Nitrogen (BUN)", "mg/dL") / 2.8
        + e.num("Glucose", "mg/dL") / 18.0
    )


def homa_ir(e: Entities) -> float:
    """Insulin (µIU/mL) × glucose (mg/dL) / 405."""
    return e.num("Insulin", "uIU/mL") * e.num("Glucose", "mg/dL") / 405.0


def anion_gap(e: Entities) -> float:
    """Na − (Cl + HCO3), mEq/L."""
    return e.num("Sodium", "mmol/L") - (e.num("Chloride", "mmol/L") + e.num("Bicarbonate", "mmol/L"))


def delta_gap(e: Entities) -> float:
    """Anion gap − 12 (normal anion gap)."""
    return anion_gap(e) - 12.0


def delta_ratio(e: Entities) -> float:
    """(Anion gap − 12) / (24 − HCO3)."""
    return delta_gap(e) / (24.0 - e.num("Bicarbonate", "mmol/L"))


def albumin_corrected_anion_gap(e: Entities) -> float:
    """Anion gap + 2.5 × (4 − albumin g/dL)."""
    return anion_gap(e) + 2.5 * (4.0 - e.num("Albumin", "g/dL"))


def albumin_corrected_delta_gap(e: Entities) -> float:
    """Albumin-corrected anion gap − 12."""
    return albumin_corrected_anion_gap(e) - 12.0


def albumin_corrected_delta_ratio(e: Entities) -> float:
    """(Albumin-corrected anion gap − 12) / (24 − HCO3)."""
    return albumin_corrected_delta_gap(e) / (24.0 - e.num("Bicarbonate", "mmol/L"))


def free_water_deficit(e: Entities) -> float:
    """Total body water × (Na/140 − 1), litres.

    Total body water fraction: 0.6 for children (< 18) and adult men < 65, 0.5 for adult women < 65 and men
    ≥ 65, 0.45 for women ≥ 65.
    """
    age, male = e.num("age", "years"), _is_male(e)
    if age < 18:
        fraction = 0.6
    elif age < 65:
        fraction = 0.6 if male else 0.5
    else:
        fraction = 0.5 if male else 0.45
    return fraction * e.num("weight", "kg") * (e.num("Sodium", "mmol/L") / 140.0 - 1.0)


def ldl_friedewald(e: Entities) -> float:
    """Friedewald: LDL = total cholesterol − HDL − triglycerides/5 (mg/dL)."""
    return (
        e.num("Total cholesterol", "mg/dL")
        - e.num("high-density lipoprotein cholesterol", "mg/dL")
        - e.num("Triglycerides", "mg/dL") / 5.0
    )


def fib4(e: Entities) -> float:
    """Age × AST / (platelets [10⁹/L] × sqrt(ALT))."""
    platelets = e.num("Platelet count", "uL") / 1000.0  # per µL -> 10^9/L
    return (
        e.num("age", "years") * e.num("Aspartate aminotransferase", "U/L")
        / (platelets * math.sqrt(e.num("Alanine aminotransferase", "U/L")))
    )


def meld_na(e: Entities) -> float:
    """MELD-Na (UNOS/OPTN, 2016).

    Cr, bilirubin and INR are floored at 1.0; Cr is capped at 4.0 and set to 4.0 after dialysis twice in the
    past week or ≥ 24 h of CVVHD; Na is bounded to 125–137. MELD(i) = 0.957 ln Cr + 0.378 ln bili + 1.120 ln INR
    + 0.643, rounded to the tenth and × 10; when MELD(i) > 11: MELD(i) + 1.32 × (137 − Na) − 0.033 × MELD(i) ×
    (137 − Na). The score is rounded to an integer and capped at 40.
    """
    creat = min(max(e.num("creatinine", "mg/dL"), 1.0), 4.0)
    if e.flag("Dialysis at least twice in the past week",
              "Continuous veno-venous hemodialysis for ≥24 hours in the past week"):
        creat = 4.0
    bili = max(e.num("Bilirubin", "mg/dL"), 1.0)
    inr = max(e.num("international normalized ratio"), 1.0)
    sodium = min(max(e.num("Sodium", "mmol/L"), 125.0), 137.0)
    meld = 10.0 * round(0.957 * math.log(creat) + 0.378 * math.log(bili) + 1.120 * math.log(inr) + 0.643, 1)
    if meld > 11:
        meld = meld + 1.32 * (137.0 - sodium) - 0.033 * meld * (137.0 - sodium)
    return float(min(round(meld), 40))


#: 10-year baseline survival of the hard-CHD model, by sex (male: True).
FRAMINGHAM_BASELINE = {True: 0.9402, False: 0.98767}


def framingham_linear(*, male: bool, age: float, tc: float, hdl: float, sbp: float, treated: bool,
                      smoker: bool) -> float:
    """The ATP III hard-CHD linear predictor (TC and HDL in mg/dL, SBP in mmHg).

    The age term paired with smoking uses age capped at 70 (men) or 78 (women).
    """
    ln_age, ln_tc, ln_hdl, ln_sbp = math.log(age), math.log(tc), math.log(hdl), math.log(sbp)
    treat, smoke = float(treated), float(smoker)
    ln_age_smoke = math.log(min(age, 70.0 if male else 78.0))
    if male:
        return (52.00961 * ln_age + 20.014077 * ln_tc - 0.905964 * ln_hdl + 1.305784 * ln_sbp
                + 0.241549 * treat + 12.096316 * smoke - 4.605038 * ln_age * ln_tc
                - 2.84367 * ln_age_smoke * smoke - 2.93323 * ln_age * ln_age - 172.300168)
    return (31.764001 * ln_age + 22.465206 * ln_tc - 1.187731 * ln_hdl + 2.552905 * ln_sbp
            + 0.420251 * treat + 13.07543 * smoke - 5.060998 * ln_age * ln_tc
            - 2.996945 * ln_age_smoke * smoke - 146.5933061)


def framingham_hard_chd(e: Entities) -> float:
    """10-year risk (%) of hard CHD, ATP III Framingham Cox model (MDCalc form): 1 - S0^exp(linear predictor)."""
    male = _is_male(e)
    lin = framingham_linear(
        male=male, age=e.num("age", "years"), tc=e.num("Total cholesterol", "mg/dL"),
        hdl=e.num("high-density lipoprotein cholesterol", "mg/dL"), sbp=e.num("Systolic Blood Pressure", "mmHg"),
        treated=e.flag("Blood pressure being treated with medicines"), smoker=e.flag("Smoker"))
    return (1.0 - FRAMINGHAM_BASELINE[male] ** math.exp(lin)) * 100.0


# -------------------------------------------------------------------------------------------------------- QTc


def _qt_rr(e: Entities) -> tuple[float, float, float]:
    qt = e.num("QT interval", "ms")
    hr = e.num("Heart Rate or Pulse", "bpm")
    return qt, hr, 60.0 / hr


#: QTc formulas of (QT msec, heart rate bpm, RR s); the calculators below feed them the entities.
QTC_FORMULAS: dict[str, Callable[[float, float, float], float]] = {
    "bazett": lambda qt, hr, rr: qt / math.sqrt(rr),
    "fridericia": lambda qt, hr, rr: qt / rr ** (1.0 / 3.0),
    "framingham": lambda qt, hr, rr: qt + 154.0 * (1.0 - rr),
    "hodges": lambda qt, hr, rr: qt + 1.75 * (hr - 60.0),
    "rautaharju": lambda qt, hr, rr: qt * (120.0 + hr) / 180.0,
}


def qtc_bazett(e: Entities) -> float:
    """QT / sqrt(RR), RR in seconds (msec)."""
    return QTC_FORMULAS["bazett"](*_qt_rr(e))


def qtc_fridericia(e: Entities) -> float:
    """QT / RR^(1/3) (msec)."""
    return QTC_FORMULAS["fridericia"](*_qt_rr(e))


def qtc_framingham(e: Entities) -> float:
    """QT + 154 × (1 − RR) (msec)."""
    return QTC_FORMULAS["framingham"](*_qt_rr(e))


def qtc_hodges(e: Entities) -> float:
    """QT + 1.75 × (HR − 60) (msec)."""
    return QTC_FORMULAS["hodges"](*_qt_rr(e))


def qtc_rautaharju(e: Entities) -> float:
    """QT × (120 + HR) / 180 (msec)."""
    return QTC_FORMULAS["rautaharju"](*_qt_rr(e))


# ------------------------------------------------------------------------------------------------------ dosing

#: Equivalent glucocorticoid doses (mg): these amounts are equally potent.
STEROID_EQUIVALENT_MG = {
    "betamethasone iv": 0.75,
    "cortisone po": 25.0,
    "dexamethasone iv": 0.75,
    "dexamethasone po": 0.75,
    "hydrocortisone iv": 20.0,
    "hydrocortisone po": 20.0,
    "methylprednisolone iv": 4.0,
    "methylprednisolone po": 4.0,
    "prednisolone po": 5.0,
    "prednisone po": 5.0,
    "triamcinolone iv": 4.0,
}


def _steroid_factor(name: str) -> float:
    key = " ".join(str(name).lower().split())
    if key not in STEROID_EQUIVALENT_MG:
        raise ValueError(f"unknown steroid {name!r}; use one of {', '.join(sorted(STEROID_EQUIVALENT_MG))}")
    return STEROID_EQUIVALENT_MG[key]


def steroid_conversion(e: Entities) -> float:
    """Target dose (mg) = input dose / input equivalent × target equivalent."""
    given = e.require("input steroid")
    if not isinstance(given, (list, tuple)) or len(given) != 3:
        raise ValueError(f"entity 'input steroid' must be [drug, dose, unit], got {given!r}")
    drug, dose, unit = given
    dose_mg = convert(float(dose), unit, "mg")
    return dose_mg / _steroid_factor(drug) * _steroid_factor(e.require("target steroid"))


#: Oral morphine milligram equivalent per unit dose (CDC 2022 guideline factors, as used by MDCalc).
MME_FACTORS = {
    "Codeine": (0.15, "mg"),
    "FentaNYL buccal": (0.13, "ug"),
    "FentANYL patch": (2.4, None),  # per mcg/hr; the benchmark records the patch strength with unit 'mg'
    "HYDROcodone": (1.0, "mg"),
    "HYDROmorphone": (5.0, "mg"),
    "Methadone": (4.7, "mg"),
    "Morphine": (1.0, "mg"),
    "OxyCODONE": (1.5, "mg"),
    "OxyMORphone": (3.0, "mg"),
    "Tapentadol": (0.4, "mg"),
    "TraMADol": (0.2, "mg"),
}


def morphine_milligram_equivalents(e: Entities) -> float:
    """Sum over opioids of dose × doses per day × MME factor (mg/day)."""
    total = 0.0
    for drug, (factor, unit) in MME_FACTORS.items():
        if not e.has(f"{drug} Dose"):
            continue
        dose = e.num(f"{drug} Dose", unit)
        per_day = e.num(f"{drug} Dose Per Day") if e.has(f"{drug} Dose Per Day") else 1.0
        total += dose * per_day * factor
    return total
