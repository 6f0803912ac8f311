"""Render a synthetic patient note from a Relevant Entities dict.

The note states every entity (quantities in the entity's own unit, so one note gives weight in lbs and another
in kg), states False criteria as explicit negatives, leaves absent keys unmentioned (the benchmark scores them
as absent), and adds a few distractor facts that no calculator uses. Phrasing, sentence order and unit
spellings vary with the random generator, so two notes with the same entities rarely read the same.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["render_note"]

_PHRASES_PATH = Path(__file__).resolve().parent.parent / "data" / "medcalcbench" / "phrases.json"

_PRESENTATIONS = (
    "presents to the emergency department", "is seen in clinic", "is admitted to the medical ward",
    "presents for evaluation", "is transferred from an outside hospital", "comes in for a scheduled visit",
)
_DISTRACTORS = (
    "Magnesium was {mg:.1f} mg/dL and phosphate {phos:.1f} mg/dL.", "TSH was {tsh:.2f} mIU/L.",
    "Lipase was {lipase} U/L.", "Vitamin D level was {vitd} ng/mL.", "{He} reports an allergy to penicillin.",
    "{He} works as a {job}.", "{He} lives with {family}.", "Vaccinations are up to date.",
    "Urinalysis was negative for nitrites.", "Ferritin was {ferritin} ng/mL.", "{He} recently returned from a trip.",
    "Hemoglobin A1c last year was {a1c:.1f}%.", "Serum lactate was {lactate:.1f} mmol/L.",
)
_JOBS = ("teacher", "truck driver", "accountant", "farmer", "nurse", "retired engineer", "cashier", "chef")
_FAMILY = ("{his} spouse", "{his} daughter", "a roommate", "{his} two children", "{his} sister")
_POS = ("History is notable for {p}.", "{He} has {p}.", "Records document {p}.", "Significant for {p}.")
_NEG = ("{He} has no {p}.", "There is no {p}.", "Negative for {p}.", "No {p} is reported.")
_CATEGORICAL = {
    "Ascites": "On examination, ascites is {v}.",
    "Encephalopathy": "Hepatic encephalopathy: {v}.",
    "Suspicion History": "The clinical history is {v} for an acute coronary syndrome.",
    "Electrocardiogram Test": "The ECG shows: {v}.",
    "Initial troponin": "The initial troponin is {v}.",
    "Best eye response": "Eye response: {v}.",
    "Best verbal response": "Verbal response: {v}.",
    "Best motor response": "Motor response: {v}.",
    "Surgery Type": "Surgery type: {v}.",
    "Mobility": "Mobility status: {v}.",
    "Race": "{He} identifies as {v}.",
    "Liver disease severity": "Liver disease severity: {v}.",
    "Diabetes mellitus criteria for CCI rule": "Diabetes mellitus status: {v}.",
    "Solid tumor": "{He} has a {v} solid tumor.",
    "target steroid": "The team plans to convert this to {v}.",
}
_VITALS = {"Systolic Blood Pressure", "Diastolic Blood Pressure", "Heart Rate or Pulse", "respiratory rate",
           "Temperature", "O₂ saturation percentage", "FiO₂", "weight", "height", "Body Mass Index (BMI)"}
#: Criteria whose label is itself a negation: (sentence when True, sentence when False).
_NEGATED = {
    "Cough Absent": ("{He} has no cough.", "{He} reports a cough."),
    "Absence of cough or coryza": ("{He} has neither cough nor coryza.", "{He} has a cough or coryza."),
}
_KEEP_CASE = {"target steroid", "Race"}


@lru_cache(maxsize=1)
def _phrases() -> dict[str, dict[str, str]]:
    return json.loads(_PHRASES_PATH.read_text(encoding="utf-8"))


def _fmt(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.4f}".rstrip("0").rstrip(".")


def _quantity(value: Any, unit: str, rng: random.Random) -> str:
    """``value unit`` in a note's spelling of the unit."""
    if unit == "µL":
        return rng.choice((f"{int(value):,}/µL", f"{int(value):,} cells/mm³", f"{int(value):,} per µL"))
    if unit == "L":
        return f"{_fmt(value / 1e9)} × 10⁹/L"
    if unit == "m^3":
        return f"{_fmt(value)} per m³"
    spelled = {
        "degrees celsius": ("°C", " degrees Celsius"), "degrees fahrenheit": ("°F", " degrees Fahrenheit"),
        "beats per minute": (" beats per minute", " bpm", "/min"), "breaths per minute": (" breaths/min",
                                                                                            " breaths per minute"),
        "mm Hg": (" mm Hg", " mmHg"), "mm hg": (" mm Hg", " mmHg"), "lbs": (" lb", " pounds"), "in": (" inches", " in"),
        "msec": (" msec", " ms"), "%": ("%",), "kg/m^2": (" kg/m²",), "mcg/kg/min": (" mcg/kg/min",),
        "per day": (" times a day",),
    }.get(unit, (f" {unit}",))
    return _fmt(value) + rng.choice(spelled)


def _opening(ents: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, str]]:
    sex = ents.get("sex") or rng.choice(("Male", "Female"))
    if "Last menstrual date" in ents:
        sex = "Female"
    male = str(sex).lower() == "male"
    words = {"He": "He" if male else "She", "his": "his" if male else "her"}
    age = ents.get("age")
    if age is None:
        age = [rng.randint(19, 42) if "Last menstrual date" in ents else rng.randint(25, 80), "years"]
    number, unit = age[0], age[1]
    article = "An" if _fmt(number).startswith("8") or _fmt(number) in {"11", "18"} else "A"
    if unit == "months":
        who = f"{article} {_fmt(number)}-month-old {'boy' if male else 'girl'}"
    elif number < 18:
        who = f"{article} {_fmt(number)}-year-old {'boy' if male else 'girl'}"
    else:
        who = f"{article} {_fmt(number)}-year-old {'man' if male else 'woman'}"
    return f"{who} {rng.choice(_PRESENTATIONS)}.", words


def _distractors(rng: random.Random, words: dict[str, str]) -> list[str]:
    slots = {"mg": rng.uniform(1.6, 2.6), "phos": rng.uniform(2.5, 4.5), "tsh": rng.uniform(0.5, 4.5),
             "lipase": rng.randint(15, 60), "vitd": rng.randint(12, 60), "job": rng.choice(_JOBS),
             "family": rng.choice(_FAMILY).format(**words), "ferritin": rng.randint(20, 300),
             "a1c": rng.uniform(4.8, 6.2), "lactate": rng.uniform(0.5, 1.9), **words}
    return [t.format(**slots) for t in rng.sample(_DISTRACTORS, rng.randint(1, 3))]


def _special(key: str, value: Any, rng: random.Random, words: dict[str, str]) -> str | None:
    """Sentences for keys with their own shape (dates, doses, bare scores)."""
    if key == "Last menstrual date":
        return rng.choice(("{his} last menstrual period started on {v}.", "LMP: {v}.")).format(v=value, **words)
    if key == "Current Date":
        return f"Today's date is {value}."
    if key == "cycle length":
        return f"{words['His']} menstrual cycles are regular, every {_fmt(value)} days."
    if key == "input steroid":
        drug, dose, unit = value
        return f"{words['He']} is currently taking {_fmt(dose)} {unit} of {drug} daily."
    if key.endswith(" Dose Per Day"):
        return None  # rendered with its dose
    if key == "Glasgow Coma Score":
        return rng.choice((f"GCS is {_fmt(value)}.", f"Glasgow Coma Scale score of {_fmt(value)}."))
    if key == "pH":
        return f"Arterial blood gas shows a pH of {_fmt(value)}."
    if key == "international normalized ratio":
        return f"INR is {_fmt(value)}."
    if key == "A-a gradient":
        return f"The calculated A-a oxygen gradient is {_fmt(value)} mm Hg."
    if key == "Number of Alcoholic Drinks Per Week":
        return f"{words['He']} drinks about {_fmt(value)} alcoholic drinks per week."
    return None


def _dose_sentence(key: str, ents: dict[str, Any], words: dict[str, str]) -> str:
    drug = key[: -len(" Dose")]
    dose, unit = ents[key]
    per_day = ents.get(f"{drug} Dose Per Day", [1, "per day"])[0]
    return f"{words['He']} takes {drug} {_fmt(dose)} {unit} {_fmt(per_day)} time{'s' if per_day != 1 else ''} a day."


def _fact(key: str, value: Any, rng: random.Random, words: dict[str, str],
          labels: dict[str, str]) -> tuple[str, str] | None:
    """(group, sentence) for one entity; groups order the note (history, exam, vitals, labs)."""
    flags, quantities = _phrases()["flags"], {**_phrases()["quantities"], **labels}
    if key in {"sex", "age"} or key.endswith("Dose Per Day"):
        return None
    if key in _NEGATED and isinstance(value, bool):
        return "history", _NEGATED[key][0 if value else 1].format(**words)
    special = _special(key, value, rng, words)
    if special is not None:
        return "history", special[0].upper() + special[1:]
    if key.endswith(" Dose") and isinstance(value, list):
        return "history", ""
    if key in _CATEGORICAL and isinstance(value, str):
        shown = value.strip() if key in _KEEP_CASE else value.strip().lower()
        return "exam", _CATEGORICAL[key].format(v=shown, **words)
    if isinstance(value, bool):
        label = flags.get(key, key.lower())
        template = rng.choice(_POS if value else _NEG)
        if not value and label.startswith(("a ", "an ", "the ")):
            label = label.split(" ", 1)[1]
        return "history", template.format(p=label, **words)
    if isinstance(value, list) and len(value) == 2:
        label = quantities.get(key, key.lower())
        if key in labels:
            return "history", f"The {label} is {_quantity(value[0], value[1], rng)}."
        group = "vitals" if key in _VITALS else "labs"
        return group, f"{label} {_quantity(value[0], value[1], rng)}"
    label = quantities.get(key, key.lower())
    return "labs", f"{label} {_fmt(value) if isinstance(value, (int, float)) else value}"


#: Per-calculator label changes: the same key can mean something else in one calculator.
_LABELS = {61: {"Body Mass Index (BMI)": "target body mass index"}}


def render_note(entities: dict[str, Any], rng: random.Random, calc_id: int | None = None) -> str:
    """A short clinical note that states every entity of ``entities`` (plus distractors).

    Args:
        entities: A Relevant Entities dict (benchmark key spellings and value shapes).
        rng: The random generator (controls phrasing, order and distractors).
        calc_id: The calculator the note is for (a few keys are phrased per calculator).

    Returns:
        The note text, one paragraph.
    """
    opening, words = _opening(entities, rng)
    words["His"] = words["his"].capitalize()
    groups: dict[str, list[str]] = {"history": [], "exam": [], "vitals": [], "labs": []}
    for key, value in entities.items():
        if key.endswith(" Dose") and isinstance(value, list) and len(value) == 2:
            groups["history"].append(_dose_sentence(key, entities, words))
            continue
        fact = _fact(key, value, rng, words, _LABELS.get(calc_id, {}))
        if fact is not None and fact[1]:
            groups[fact[0]].append(fact[1])
    for items in groups.values():
        rng.shuffle(items)
    parts = [opening]
    history = groups["history"] + _distractors(rng, words)
    rng.shuffle(history)
    parts += history
    if groups["vitals"]:
        lead = rng.choice(("Vital signs: ", "On arrival, vitals were ", "Vitals showed "))
        parts.append(lead + ", ".join(groups["vitals"]) + ".")
    parts += groups["exam"]
    if groups["labs"]:
        lead = rng.choice(("Laboratory results: ", "Labs showed ", "Measurements: "))
        parts.append(lead + "; ".join(groups["labs"]) + ".")
    return " ".join(parts)
