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

__all__ = ["LENGTH", "TEMPLATE_STYLE", "VIGNETTE_STYLE", "note_style", "render_case", "render_note"]

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
    words = {"He": "He" if male else "She", "his": "his" if male else "her", "he": "he" if male else "she",
             "him": "him" if male else "her"}
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
    words["who"] = who
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


def _facts(entities: dict[str, Any], rng: random.Random, calc_id: int | None
           ) -> tuple[str, dict[str, str], dict[str, list[str]]]:
    """``(opening sentence, pronouns, {group: sentences})`` stating every entity (groups: history, exam, vitals,
    labs; vitals and labs as ``label value unit`` items)."""
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
    return opening, words, groups


def render_note(entities: dict[str, Any], rng: random.Random, calc_id: int | None = None) -> str:
    """A short clinical note that states every entity of ``entities`` (plus distractors).

    Args:
        entities: A Relevant Entities dict (benchmark key spellings and value shapes).
        rng: The random generator (controls phrasing, order and distractors).
        calc_id: The calculator the note is for (a few keys are phrased per calculator).

    Returns:
        The note text, one paragraph.
    """
    opening, words, groups = _facts(entities, rng, calc_id)
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


# ------------------------------------------------------------------------- case reports (version 2 of the family)

#: Calculators whose public notes are generated from a template: one or two formulaic sentences (~70 characters).
TEMPLATE_STYLE = frozenset({11, 13, 24, 49, 56, 57, 58, 59, 61, 68, 69})
#: Calculators whose public notes are clinician-written vignettes (~1,000 characters); the rest are case reports
#: from PMC-Patients (~3,300 characters, 10-90 % range about 1,000-5,300).
VIGNETTE_STYLE = frozenset({15, 17, 21, 25, 27, 28, 29, 32, 36, 43})
#: Lognormal note lengths (mean and sd of log characters) measured on the public test rows, per style.
LENGTH = {"vignette": (6.84, 0.27), "report": (7.94, 0.64)}
_POOLS_PATH = _PHRASES_PATH.with_name("note_pools.json")
#: Shorthand real notes use for a lab or vital label (chosen at random per mention).
SHORTHAND = {"serum creatinine": "Cr", "blood urea nitrogen": "BUN", "sodium": "Na", "potassium": "K",
             "chloride": "Cl", "bicarbonate": "HCO3", "hemoglobin": "Hgb", "hematocrit": "Hct",
             "white blood cell count": "WBC", "platelet count": "Plt", "total bilirubin": "T. bili",
             "heart rate": "HR", "respiratory rate": "RR", "oxygen saturation": "SpO2", "glucose": "glucose",
             "albumin": "Alb", "calcium": "Ca", "temperature": "T", "arterial pH": "pH", "triglycerides": "TG",
             "total cholesterol": "TC", "HDL cholesterol": "HDL"}


def note_style(calc_id: int | None) -> str:
    """``"template"``, ``"vignette"`` or ``"report"``: the kind of note the public rows of this calculator have."""
    if calc_id in TEMPLATE_STYLE:
        return "template"
    return "vignette" if calc_id in VIGNETTE_STYLE else "report"


@lru_cache(maxsize=1)
def _pools() -> dict[str, Any]:
    return json.loads(_POOLS_PATH.read_text(encoding="utf-8"))


def _blocked(entry: Any, keys: set[str]) -> bool:
    """Whether a pool entry names (directly or by @GROUP) an entity key of the calculator."""
    banned = entry.get("not", []) if isinstance(entry, dict) else entry[6] if isinstance(entry, list) else []
    groups = _pools()["groups"]
    expanded = {k for name in banned for k in (groups[name[1:]] if name.startswith("@") else [name])}
    return bool(expanded & keys)


def _slots(rng: random.Random, words: dict[str, str]) -> dict[str, Any]:
    pools = _pools()
    return {**words, "days": rng.randint(2, 12), "weeks": rng.randint(2, 10), "years": rng.randint(2, 15),
            "n": rng.randint(2, 7), "size": f"{rng.uniform(0.6, 2.8):.1f}", "kids": rng.choice(("two", "three")),
            "job": rng.choice(pools["jobs"]), "field": rng.choice(pools["fields"]),
            "family": rng.choice(pools["families"]).format(**words), "him": words["him"], "he": words["he"]}


def _with_shorthand(item: str, rng: random.Random) -> str:
    """A ``label value unit`` lab/vital item with its label abbreviated about half of the time."""
    for label, short in SHORTHAND.items():
        if item.lower().startswith(label.lower() + " ") and rng.random() < 0.5:
            return short + item[len(label):]
    return item


def _template_note(entities: dict[str, Any], rng: random.Random, calc_id: int) -> str:
    """One or two formulaic sentences, as the benchmark's template-generated notes are."""
    ents = entities
    if calc_id in (11, 56, 57, 58, 59):
        hr, qt = ents["Heart Rate or Pulse"][0], ents["QT interval"][0]
        return rng.choice(("Patient has a heart rate of {h} bpm and a QT interval of {q} msec.",
                           "The patient's heart rate is {h} bpm and the QT interval is {q} msec.")).format(
            h=_fmt(hr), q=_fmt(qt))
    if calc_id in (13, 68):
        return (f"The patient's last menstrual period was on {ents['Last menstrual date']}. Her cycle length is "
                f"{_fmt(ents['cycle length'])} days.")
    if calc_id == 69:
        return (f"The patient's last menstrual period was on {ents['Last menstrual date']}. Today's date is "
                f"{ents['Current Date']}.")
    if calc_id == 24:
        drug, dose, unit = ents["input steroid"]
        return f"Patient has taken {_fmt(dose)} {unit} of {drug}."
    if calc_id == 61:
        height, bmi = ents["height"], ents["Body Mass Index (BMI)"]
        return (f"Patient has a height of {_fmt(height[0])} {height[1]} and their target BMI is {_fmt(bmi[0])} "
                f"{bmi[1]}.")
    doses = [k[: -len(" Dose")] for k in ents if k.endswith(" Dose")]
    parts = []
    for drug in doses:
        dose, unit = ents[f"{drug} Dose"]
        per_day = ents.get(f"{drug} Dose Per Day", [1, "per day"])[0]
        parts.append(f"{_fmt(dose)} {unit} of {drug} {_fmt(per_day)} time{'s' if per_day != 1 else ''} a day")
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f", and {parts[-1]}"
    return f"The patient takes {listed}."


def render_case(entities: dict[str, Any], rng: random.Random, calc_id: int) -> str:
    """A note shaped like the public rows of calculator ``calc_id``: formulaic, a vignette, or a case report.

    Every entity is stated once (as :func:`render_note` states it), hidden among distractors that no formula of
    this calculator reads: a chief complaint and history of present illness, unrelated past history,
    medications, social and family history, examination findings, vital signs and laboratory values the
    calculator does not use (normal-range values, labels often in shorthand such as BP, HR, Cr, Hct), imaging
    and a hospital course. A distractor that could be read as one of this calculator's criteria (any of its
    entity keys, present or absent) is never used. The length is drawn from the lognormal measured on the public
    notes of the same style, so the relevant facts sit in text of the benchmark's length.

    Args:
        entities: A Relevant Entities dict (benchmark key spellings and value shapes).
        rng: The random generator (phrasing, order, distractors, length).
        calc_id: The calculator the note is for.
    """
    from medagentgym.tasks.medcalc.specs import CALC_KEYS

    style = note_style(calc_id)
    if style == "template":
        return _template_note(entities, rng, calc_id)
    pools = _pools()
    keys = set(CALC_KEYS.get(calc_id, entities))
    mu, sd = LENGTH[style]
    target = min(11000, max(500 if style == "report" else 450, int(rng.lognormvariate(mu, sd))))
    _, words, groups = _facts(entities, rng, calc_id)
    sbp, dbp = entities.get("Systolic Blood Pressure"), entities.get("Diastolic Blood Pressure")
    if sbp and dbp and rng.random() < 0.5:  # "BP 122/84 mmHg", as notes chart it
        groups["vitals"] = [v for v in groups["vitals"] if not v.startswith(("systolic blood", "diastolic blood"))]
        groups["vitals"].append(f"BP {_fmt(sbp[0])}/{_fmt(dbp[0])} {rng.choice(('mm Hg', 'mmHg'))}")
    male = words["he"] == "he"
    slots = _slots(rng, words)

    def usable(section: str) -> list[str]:
        items = [e for e in pools[section] if not _blocked(e, keys) and (male or not e.get("male"))]
        rng.shuffle(items)
        return [e["text"].format(**slots) for e in items]

    complaint = rng.choice(pools["complaints"])
    presentation = rng.choice(pools["presentations"]).format(**words)
    intro = f"{words['who']} {presentation} with {complaint}."
    hpi, history, exam, studies, course = (usable(s) for s in ("hpi", "history", "exam", "studies", "course"))
    social = usable("social")
    family = [t.format(**slots) for t in pools["family"]]
    rng.shuffle(family)
    meds = [m.format(**slots) for m in pools["medications"] if male or "tamsulosin" not in m]
    rng.shuffle(meds)
    extra_vitals = _distractor_items(pools["vitals"], keys, rng)
    if not _blocked({"not": ["@HEMO", "Hypertension history", "Blood pressure being treated with medicines"]}, keys):
        extra_vitals.append(f"{rng.choice(('BP', 'blood pressure'))} {rng.randint(108, 134)}/{rng.randint(64, 84)} "
                            "mm Hg")
    labs = [_with_shorthand(item, rng) for item in groups["labs"]]
    extra_labs = _distractor_items(pools["labs"], keys, rng)

    def compose(n_extra: int) -> str:
        """The note with about ``n_extra`` distractor sentences in each narrative section."""
        k = max(0, n_extra)
        paragraphs = [" ".join([intro, *hpi[: min(len(hpi), 1 + k)]])]
        past = history[: min(len(history), 1 + k // 2)]
        facts = list(groups["history"])
        if past:
            facts.append(f"{words['His']} past medical history included {_join(past)}.")
        if k >= 2 and meds:
            facts.append(f"{words['His']} regular medications were {_join(meds[: 1 + k // 3])}.")
        if k >= 3:
            facts += social[: k // 3] + family[: k // 4]
        rng_order = random.Random(len(facts) + k)
        rng_order.shuffle(facts)
        paragraphs.append(" ".join(facts))
        exam_part = list(groups["exam"]) + exam[: k // 2]
        shown_vitals = list(groups["vitals"]) + (extra_vitals if k >= 1 else [])
        random.Random(k + 1).shuffle(shown_vitals)
        if shown_vitals:
            exam_part.insert(0, rng_order.choice(("On examination, vital signs were ", "Vital signs: ",
                                                   "On arrival: ")) + ", ".join(shown_vitals) + ".")
        paragraphs.append(" ".join(exam_part))
        shown_labs = labs + extra_labs[: 2 + k]
        random.Random(k).shuffle(shown_labs)
        if shown_labs:
            paragraphs.append(rng_order.choice(("Laboratory studies showed ", "Initial labs: ", "Blood tests revealed "))
                              + "; ".join(shown_labs) + ".")
        tail = studies[: k // 3] + course[: k // 2]
        if tail:
            paragraphs.append(" ".join(tail))
        return "\n".join(p for p in paragraphs if p.strip())

    best = compose(0)
    for extra in range(1, 24):  # grow the distractors until the note reaches its drawn length
        if len(best) >= target:
            break
        longer = compose(extra)
        if longer == best:
            break
        best = longer
    return best


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _distractor_items(pool: list[list[Any]], keys: set[str], rng: random.Random) -> list[str]:
    """``label value unit`` items from a lab or vital pool that none of ``keys`` could be read from."""
    out = []
    for label, short, lo, hi, unit, decimals, _banned in pool:
        if _blocked([label, short, lo, hi, unit, decimals, _banned], keys):
            continue
        value = round(rng.uniform(lo, hi), decimals)
        text = f"{value:.{decimals}f}" if decimals > 0 else f"{int(value)}"
        name = short if rng.random() < 0.5 else label
        out.append(f"{name} {text}{'' if unit.startswith('%') else ' '}{unit}".rstrip())
    rng.shuffle(out)
    return out
