"""The 55 MedCalc-Bench calculators: id, exact benchmark name, answer kind, category, question, function.

:func:`calculate` is the one entry point: ``calculate(4, entities)`` or
``calculate("CHA2DS2-VASc Score for Atrial Fibrillation Stroke Risk", entities)``. Answers follow the benchmark:
decimals rounded to 3 places, integer scores, ``MM/DD/YYYY`` dates, ``(weeks, days)`` tuples.

Example:
    >>> calculate("Body Mass Index (BMI)", {"weight": [70, "kg"], "height": [175, "cm"]})
    22.857
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from medagentgym.tasks.medcalc import dates
from medagentgym.tasks.medcalc import equations as eq
from medagentgym.tasks.medcalc import scores as sc
from medagentgym.tasks.medcalc import scores_icu as icu
from medagentgym.tasks.medcalc.bench import BENCH_VARIANTS, bench_entities
from medagentgym.tasks.medcalc.units import Entities

__all__ = ["CALCULATORS", "CONVENTIONS", "Calculator", "bounds", "calculate", "get_calculator"]

DECIMAL, INTEGER, DATE, WEEKS_DAYS = "decimal", "integer", "date", "weeks_days"
_METHODS_PATH = Path(__file__).resolve().parent.parent / "data" / "medcalcbench" / "methods.json"


@lru_cache(maxsize=1)
def _method_texts() -> dict[str, str]:
    return json.loads(_METHODS_PATH.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Calculator:
    """One calculator: benchmark id and exact name, answer kind and unit, benchmark category, the fixed question."""

    id: int
    name: str
    kind: str
    category: str
    unit: str
    question: str
    fn: Callable[[Entities], Any]

    @property
    def slug(self) -> str:
        """A short stable category id for task instances, e.g. ``'c04_cha2ds2_vasc'``."""
        return f"c{self.id:02d}_{self.fn.__name__}"

    @property
    def method(self) -> str:
        """The method summary shown to the agent: the full summary in ``methods.json``, else the docstring."""
        return _method_texts().get(str(self.id)) or " ".join(inspect.getdoc(self.fn).split())


_ROWS: list[tuple[int, str, str, str, str, str, Callable[[Entities], Any]]] = [
    (2, "Creatinine Clearance (Cockcroft-Gault Equation)", DECIMAL, "lab test", "mL/min",
     ("What is the patient's Creatinine Clearance using the Cockroft-Gault Equation in terms of mL/min? You "
      "should use the patient's adjusted body weight in kg instead of the patient's actual body weight if the "
      "patient is overweight or obese based on their BMI. If the patient's BMI's normal, set their adjusted body "
      "weight to the minimum of the ideal body and actual weight. If the patient is underweight, please set their "
      "adjusted body weight to their actual body weight."),
     eq.cockcroft_gault),
    (3, "CKD-EPI Equations for Glomerular Filtration Rate", DECIMAL, "lab test", "mL/min/1.73 m²",
     ("Using the 2021 CKD-EPI Creatinine equation, what is the patient's Glomerular Filtration Rate (GFR) in "
     "terms of mL/min/1.73 m²?"), eq.ckd_epi_2021),
    (4, "CHA2DS2-VASc Score for Atrial Fibrillation Stroke Risk", INTEGER, "risk", "points",
     "What is the patient's CHA2DS2-VASc Score?", sc.cha2ds2_vasc),
    (5, "Mean Arterial Pressure (MAP)", DECIMAL, "physical", "mm Hg",
     "What is patient's mean arterial pressure in mm Hg?", eq.mean_arterial_pressure),
    (6, "Body Mass Index (BMI)", DECIMAL, "physical", "kg/m²", ("What is the patient's body mass index (BMI)? "
     "Your answer should be in terms of kg/m²."), eq.bmi),
    (7, "Calcium Correction for Hypoalbuminemia", DECIMAL, "lab test", "mg/dL",
     ("Using the Calcium Correction for Hypoalbuminemia formula, what is the patient's corrected calcium in mg/dL? "
     "Your may set your normal albumin concentration to be 4 g/dL."), eq.calcium_correction),
    (8, "Wells' Criteria for Pulmonary Embolism", DECIMAL, "risk", "points",
     "What is the patient's score of Wells' criteria for Pulmonary Embolism?", sc.wells_pe),
    (9, "MDRD GFR Equation", DECIMAL, "lab test", "mL/min/1.73 m²",
     ("Using the MDRD GFR equation, what is the patient's Glomerular Filtration Rate (GFR) in terms of "
     "mL/min/1.73 m²?"), eq.mdrd),
    (10, "Ideal Body Weight", DECIMAL, "physical", "kg",
     "Based on the patient's height, what is the patient's ideal body weight in terms of kg?", eq.ideal_body_weight),
    (11, "QTc Bazett Calculator", DECIMAL, "physical", "msec",
     ("Using the Bazett Formula for corrected QT interval, what is the patient's corrected QT interval in terms of "
     "msec?"), eq.qtc_bazett),
    (13, "Estimated Due Date", DATE, "date", "MM/DD/YYYY",
     ("Using Naegele's Rule for estimated due date based on the last menstrual period and cycle length, what is "
     "the patient's estimated due date? Your response should be a date written as MM/DD/YYYY, e.g. 08/31/2023."),
     dates.estimated_due_date),
    (15, "Child-Pugh Score for Cirrhosis Mortality", INTEGER, "severity", "points",
     "What is the patient's Child-Pugh Score?", sc.child_pugh),
    (16, "Wells' Criteria for DVT", INTEGER, "risk", "points",
     "What is the patient's score of Wells' criteria for Deep Vein Thrombosis?", sc.wells_dvt),
    (17, "Revised Cardiac Risk Index for Pre-Operative Risk", INTEGER, "risk", "points",
     "What is the patient's Cardiac Risk Index?", sc.rcri),
    (18, "HEART Score for Major Cardiac Events", INTEGER, "risk", "points",
     "What is the patient's HEART score?", sc.heart_score),
    (19, "Fibrosis-4 (FIB-4) Index for Liver Fibrosis", DECIMAL, "lab test", "",
     "What is the patient's Fibrosis-4 (FIB-4) index?", eq.fib4),
    (20, "Centor Score (Modified/McIsaac) for Strep Pharyngitis", INTEGER, "severity", "points",
     "What is the patient's Centor Score?", sc.centor_mcisaac),
    (21, "Glasgow Coma Score (GCS)", INTEGER, "severity", "points",
     "What is the patient's Glasgow Coma Score?", sc.glasgow_coma_scale),
    (22, "Maintenance Fluids Calculations", DECIMAL, "physical", "mL/hr",
     "Based on the patient's weight, what is the patient's maintenance fluid in mL/hr?", eq.maintenance_fluids),
    (23, "MELD Na (UNOS/OPTN)", DECIMAL, "lab test", "points", "What is the patient's MELD Na score?", eq.meld_na),
    (24, "Steroid Conversion Calculator", DECIMAL, "dosage", "mg",
     "Based on the patient's dose of the given steroid, what is the equivalent dose of the target steroid in mg?",
     eq.steroid_conversion),
    (25, "HAS-BLED Score for Major Bleeding Risk", INTEGER, "risk", "points",
     "What is the patient's HAS-BLED score?", sc.has_bled),
    (26, "Sodium Correction for Hyperglycemia", DECIMAL, "lab test", "mEq/L",
     "What is the patient's corrected sodium concentration in terms of mEq/L?", eq.sodium_correction),
    (27, "Glasgow-Blatchford Bleeding Score (GBS)", INTEGER, "risk", "points",
     "What is the patient's Glasgow-Blatchford Bleeding score?", sc.glasgow_blatchford),
    (28, "APACHE II Score", INTEGER, "risk", "points", "What is the patient's APACHE II score?", icu.apache_ii),
    (29, "PSI Score: Pneumonia Severity Index for CAP", INTEGER, "severity", "points",
     "What is the patient's Pneumonia Severity Index (PSI)?", icu.psi),
    (30, "Serum Osmolality", DECIMAL, "lab test", "mOsm/kg",
     "What is the patient's calculated serum osmolality in terms of mOsm/kg?", eq.serum_osmolality),
    (31, "HOMA-IR (Homeostatic Model Assessment for Insulin Resistance)", DECIMAL, "lab test", "",
     "What is the patient's HOMA-IR score?", eq.homa_ir),
    (32, "Charlson Comorbidity Index (CCI)", INTEGER, "risk", "points",
     "What is the patient's Charlson Comorbidity Index (CCI)?", sc.charlson),
    (33, "FeverPAIN Score for Strep Pharyngitis", INTEGER, "diagnosis", "points",
     "What is the patient's FeverPAIN score?", sc.feverpain),
    (36, "Caprini Score for Venous Thromboembolism (2005)", INTEGER, "risk", "points",
     "What is the patient's Caprini Score for Venous Thromboembolism?", icu.caprini),
    (38, "Free Water Deficit", DECIMAL, "lab test", "L",
     "What is the patient's free water deficit in terms of liters?", eq.free_water_deficit),
    (39, "Anion Gap", DECIMAL, "lab test", "mEq/L", "What is the patient's anion gap in terms of mEq/L?",
     eq.anion_gap),
    (40, "Fractional Excretion of Sodium (FENa)", DECIMAL, "lab test", "%",
     "What is the patient's FENa percentage?", eq.fena),
    (43, "Sequential Organ Failure Assessment (SOFA) Score", INTEGER, "risk", "points",
     "What is the patient's Sequential Organ Failure Assessment (SOFA) Score?", icu.sofa),
    (44, "LDL Calculated", DECIMAL, "lab test", "mg/dL", ("What is the patient's LDL cholestrol concentration "
     "in mg/dL?"), eq.ldl_friedewald),
    (45, "CURB-65 Score for Pneumonia Severity", INTEGER, "risk", "points",
     "What is the patient's CURB-65 score?", sc.curb65),
    (46, "Framingham Risk Score for Hard Coronary Heart Disease", DECIMAL, "lab test", "%",
     "What is the patient's Framingham Risk Score (10-year risk of hard coronary heart disease, in %)?",
     eq.framingham_hard_chd),
    (48, "PERC Rule for Pulmonary Embolism", INTEGER, "diagnosis", "criteria",
     "How many criteria for the PERC Rule for Pulmonary Embolism does the patient meet?", sc.perc),
    (49, "Morphine Milligram Equivalents (MME) Calculator", DECIMAL, "dosage", "mg/day",
     ("Based on the patient's dose of opioids, what is the patient's daily Morphine Milligram Equivalents "
     "(MME) in mg/day?"), eq.morphine_milligram_equivalents),
    (51, "SIRS Criteria", INTEGER, "diagnosis", "criteria",
     "How many SIRS criteria does the patient meet?", sc.sirs),
    (56, "QTc Fridericia Calculator", DECIMAL, "physical", "msec",
     ("Using the Fridericia Formula for corrected QT interval, what is the patient's corrected QT interval in "
     "terms of msec?"), eq.qtc_fridericia),
    (57, "QTc Framingham Calculator", DECIMAL, "physical", "msec",
     ("Using the Framingham Formula for corrected QT interval, what is the patient's corrected QT interval in "
     "terms of msec?"), eq.qtc_framingham),
    (58, "QTc Hodges Calculator", DECIMAL, "physical", "msec",
     ("Using the Hodges Formula for corrected QT interval, what is the patient's corrected QT interval in terms "
     "of msec?"), eq.qtc_hodges),
    (59, "QTc Rautaharju Calculator", DECIMAL, "physical", "msec",
     ("Using the Rautaharju Formula for corrected QT interval, what is the patient's corrected QT interval in "
     "terms of msec?"), eq.qtc_rautaharju),
    (60, "Body Surface Area Calculator", DECIMAL, "physical", "m²",
     "What is the patient's body surface area in terms of m²?", eq.body_surface_area),
    (61, "Target weight", DECIMAL, "physical", "kg",
     "Based on the patient's height and target BMI, what is the patient's target weight in kg?", eq.target_weight),
    (62, "Adjusted Body Weight", DECIMAL, "physical", "kg",
     "What is the patient's adjusted body weight in terms of kg?", eq.adjusted_body_weight),
    (63, "Delta Gap", DECIMAL, "lab test", "mEq/L", "What is the patient's delta gap in mEq/L?", eq.delta_gap),
    (64, "Delta Ratio", DECIMAL, "lab test", "", "What is the patient's delta ratio?", eq.delta_ratio),
    (65, "Albumin Corrected Anion Gap", DECIMAL, "lab test", "mEq/L",
     "What is the patient's albumin corrected anion gap in mEq/L?", eq.albumin_corrected_anion_gap),
    (66, "Albumin Corrected Delta Gap", DECIMAL, "lab test", "mEq/L",
     "What is the patient's albumin corrected delta gap in mEq/L?", eq.albumin_corrected_delta_gap),
    (67, "Albumin Corrected Delta Ratio", DECIMAL, "lab test", "",
     "What is the patient's albumin corrected delta ratio?", eq.albumin_corrected_delta_ratio),
    (68, "Estimated of Conception", DATE, "date", "MM/DD/YYYY",
     ("Using the patient's last menstrual period date, what is the patient's estimated date of conception? Your "
     "response should be a date written as MM/DD/YYYY, e.g. 08/31/2023."), dates.estimated_conception_date),
    (69, "Estimated Gestational Age", WEEKS_DAYS, "date", "(weeks, days)",
     ("Using the patient's last menstrual period and the current date, what is the patient's estimated "
     "gestational age? Your response should be a tuple of weeks and days, e.g. (4, 3) for 4 weeks and 3 days."),
     dates.estimated_gestational_age),
]

CALCULATORS: dict[int, Calculator] = {row[0]: Calculator(*row) for row in _ROWS}
_BY_NAME = {c.name.lower(): c for c in CALCULATORS.values()}
_ALIASES = {"estimated date of conception": 68}  # MedCalc-Bench-Verified spelling


def get_calculator(calculator: int | str) -> Calculator:
    """Look a calculator up by id (``4``, ``"4"``), exact name (any case) or slug.

    Raises:
        ValueError: Unknown calculator; the message names the nearest one.
    """
    if isinstance(calculator, bool):
        raise ValueError(f"unknown calculator {calculator!r}; pass an id (2-69) or a name")  # noqa: TRY004
    text = str(calculator).strip()
    if text.isdigit() and int(text) in CALCULATORS:
        return CALCULATORS[int(text)]
    lowered = text.lower()
    if lowered in _BY_NAME:
        return _BY_NAME[lowered]
    if lowered in _ALIASES:
        return CALCULATORS[_ALIASES[lowered]]
    for calc in CALCULATORS.values():
        if calc.slug == lowered:
            return calc
    if text.isdigit():
        raise ValueError(f"unknown calculator id {text}; valid ids are {min(CALCULATORS)}-{max(CALCULATORS)} "
                         f"except {sorted(set(range(2, 70)) - set(CALCULATORS))}")
    raise ValueError(f"unknown calculator {calculator!r}; did you mean {_nearest(lowered)!r}?")


def _nearest(lowered: str) -> str:
    """The calculator name closest to ``lowered``: containment first, then the best fuzzy ratio on any word run."""
    def closeness(name: str) -> float:
        low = name.lower()
        if lowered and lowered in low:
            return 2.0
        words = low.replace("(", " ").replace(")", " ").split()
        runs = [" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)]
        return max(difflib.SequenceMatcher(None, lowered, run).ratio() for run in runs + [low])

    return max((c.name for c in CALCULATORS.values()), key=closeness)


def round_answer(kind: str, value: Any) -> Any:
    """Benchmark answer form: decimals to 3 places, integer scores as int, dates/tuples unchanged."""
    if kind == DECIMAL:
        rounded = round(float(value), 3)
        return 0.0 if rounded == 0 else rounded
    if kind == INTEGER:
        return round(value)
    return value


CONVENTIONS = ("published", "medcalc-bench")


def calculate(calculator: int | str, entities: dict[str, Any] | Entities, *, convention: str = "published") -> Any:
    """Compute a calculator's answer from a Relevant Entities dict.

    Args:
        calculator: Id (2-69), exact benchmark name, or slug.
        entities: The entities dict (keys and ``[value, unit]`` shapes as in MedCalc-Bench).
        convention: ``"published"`` (the published rules; default, used for synthetic gold) or
            ``"medcalc-bench"`` (MedCalc-Bench's 2024 gold-generating code: its unit converter and every departure
            from the published rules, listed in ``medagentgym.tasks.medcalc.bench.QUIRKS``; used to check the public rows).

    Returns:
        A float rounded to 3 decimals, an int score, a ``MM/DD/YYYY`` string, or a ``(weeks, days)`` tuple.

    Raises:
        ValueError: Unknown calculator (names the nearest), a missing entity (names the key), or a bad value.

    Example:
        >>> gcs = {"Best eye response": "eye opening to pain", "Best verbal response": "confused",
        ...        "Best motor response": "localizes pain"}
        >>> calculate(21, gcs), calculate(21, gcs, convention="medcalc-bench")  # 2024 code: verbal counted twice
        (11, 15)
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; use one of {', '.join(CONVENTIONS)}")
    calc = get_calculator(calculator)
    if convention == "medcalc-bench":
        return round_answer(calc.kind, BENCH_VARIANTS.get(calc.id, calc.fn)(bench_entities(calc.id, entities)))
    view = entities if isinstance(entities, Entities) else Entities(entities)
    return round_answer(calc.kind, calc.fn(view))


def bounds(kind: str, answer: Any) -> tuple[Any, Any]:
    """Inclusive [Lower, Upper] limits as in the benchmark: ±5 % of a decimal answer (swapped when negative)."""
    if kind != DECIMAL:
        return answer, answer
    lo, hi = answer * 0.95, answer * 1.05
    return (lo, hi) if lo <= hi else (hi, lo)
