"""Synthetic FHIR R4 patients around MedAgentBench's fixed clock (no real patient data).

Every patient gets a *profile* that decides where their lab values sit relative to the clock
(2023-11-13T10:15:00+00:00): magnesium absent / stale (> 24 h) / recent and severe-low, moderate-low, mild-low
or normal; potassium absent / low / normal; capillary glucose absent / only stale / recent; HbA1c absent /
older than a year / recent. Profiles are dealt round-robin (then shuffled within each round) so that even a
tiny build exercises every grader branch.

Example:
    >>> resources = generate_patients(12, seed=0)
    >>> sorted({r["resourceType"] for r in resources})
    ['Condition', 'MedicationRequest', 'Observation', 'Patient', 'Procedure']
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

CLOCK = dt.datetime(2023, 11, 13, 10, 15, tzinfo=dt.timezone.utc)
CLOCK_ISO = "2023-11-13T10:15:00+00:00"
OBS_CATEGORY = "http://terminology.hl7.org/CodeSystem/observation-category"
LAB_SYSTEM = "http://medagentgym.local/fhir/lab-codes"
#: code -> (display, unit)
LABS = {"MG": ("Magnesium", "mg/dL"), "K": ("Potassium", "mmol/L"), "GLU": ("Glucose, capillary", "mg/dL"),
        "A1C": ("Hemoglobin A1c", "%")}
_NAMES = Path(__file__).resolve().parent.parent / "data" / "medagentbench" / "names.json"

#: Branch of each lab in a profile; the cartesian mixture is dealt round-robin.
MG_BRANCHES = ("none", "stale", "severe", "moderate", "mild", "normal")
K_BRANCHES = ("none", "low", "normal")
GLU_BRANCHES = ("none", "stale", "recent")
A1C_BRANCHES = ("none", "old", "recent")


def iso(t: dt.datetime) -> str:
    """ISO 8601 with seconds and a +00:00 offset, the shape of every date-time the server stores."""
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def _names() -> dict[str, list[str]]:
    return json.loads(_NAMES.read_text(encoding="utf-8"))


def _obs(mrn: str, n: int, code: str, when: dt.datetime, value: float) -> dict[str, Any]:
    display, unit = LABS[code]
    return {
        "resourceType": "Observation", "id": f"{mrn}-{code.lower()}-{n}", "status": "final",
        "category": [{"coding": [{"system": OBS_CATEGORY, "code": "laboratory", "display": "Laboratory"}]}],
        "code": {"coding": [{"system": LAB_SYSTEM, "code": code, "display": display}], "text": code},
        "subject": {"reference": f"Patient/{mrn}"}, "effectiveDateTime": iso(when),
        "issued": iso(when + dt.timedelta(minutes=30)), "valueQuantity": {"value": value, "unit": unit},
    }


def _hours_ago(rng: random.Random, low: float, high: float) -> dt.datetime:
    return CLOCK - dt.timedelta(minutes=rng.randint(int(low * 60), int(high * 60)))


def _mg_values(rng: random.Random, branch: str) -> list[tuple[dt.datetime, float]]:
    if branch == "none":
        return []
    history = [(_hours_ago(rng, 30, 2000), round(rng.uniform(1.4, 2.6), 1)) for _ in range(rng.randint(1, 4))]
    if branch == "stale":
        return history
    ranges = {"severe": (0.6, 0.9), "moderate": (1.0, 1.4), "mild": (1.5, 1.9), "normal": (2.0, 2.6)}
    low, high = ranges[branch]
    latest = _hours_ago(rng, 0.5, 20)
    older_recent = [(latest - dt.timedelta(minutes=rng.randint(60, 180)), round(rng.uniform(1.8, 2.4), 1))]
    return history + older_recent * rng.randint(0, 1) + [(latest, round(rng.uniform(low, high), 1))]


def _k_values(rng: random.Random, branch: str) -> list[tuple[dt.datetime, float]]:
    if branch == "none":
        return []
    values = [(_hours_ago(rng, 24, 3000), round(rng.uniform(3.4, 4.8), 1)) for _ in range(rng.randint(0, 3))]
    latest = round(rng.uniform(2.8, 3.4), 1) if branch == "low" else round(rng.uniform(3.5, 5.0), 1)
    return values + [(_hours_ago(rng, 1, 200), latest)]


def _glu_values(rng: random.Random, branch: str) -> list[tuple[dt.datetime, float]]:
    if branch == "none":
        return []
    stale = [(_hours_ago(rng, 25, 900), float(rng.randint(70, 260))) for _ in range(rng.randint(1, 3))]
    if branch == "stale":
        return stale
    return stale + [(_hours_ago(rng, 0.2, 23.5), float(rng.randint(70, 260))) for _ in range(rng.randint(1, 5))]


def _a1c_values(rng: random.Random, branch: str) -> list[tuple[dt.datetime, float]]:
    if branch == "none":
        return []
    old = [(CLOCK - dt.timedelta(days=rng.randint(380, 1500)), round(rng.uniform(5.2, 9.5), 1))
           for _ in range(rng.randint(1, 3))]
    if branch == "old":
        return old
    return old + [(CLOCK - dt.timedelta(days=rng.randint(5, 350)), round(rng.uniform(5.2, 9.5), 1))]


def _background(rng: random.Random, mrn: str) -> list[dict[str, Any]]:
    """A condition, a procedure and an old outpatient prescription: realistic clutter for searches."""
    subject = {"reference": f"Patient/{mrn}"}
    onset = CLOCK - dt.timedelta(days=rng.randint(100, 4000))
    cond = rng.choice([("38341003", "Hypertensive disorder"), ("44054006", "Diabetes mellitus type 2"),
                       ("195967001", "Asthma"), ("709044004", "Chronic kidney disease")])
    return [
        {"resourceType": "Condition", "id": f"{mrn}-cond-1", "subject": subject,
         "category": [{"coding": [{"code": "problem-list-item", "display": "Problem List Item"}]}],
         "code": {"coding": [{"system": "http://snomed.info/sct", "code": cond[0], "display": cond[1]}],
                  "text": cond[1]},
         "clinicalStatus": {"coding": [{"code": "active"}]}, "onsetDateTime": iso(onset), "recordedDate": iso(onset)},
        {"resourceType": "Procedure", "id": f"{mrn}-proc-1", "status": "completed", "subject": subject,
         "code": {"coding": [{"system": "http://www.ama-assn.org/go/cpt", "code": "80048",
                              "display": "Basic metabolic panel"}]},
         "performedDateTime": iso(onset + dt.timedelta(days=3))},
        {"resourceType": "MedicationRequest", "id": f"{mrn}-med-1", "status": "completed", "intent": "order",
         "subject": subject, "authoredOn": iso(onset + dt.timedelta(days=3)),
         "category": [{"coding": [{"code": "outpatient"}], "text": "Outpatient"}],
         "medicationCodeableConcept": {"coding": [{"system": "http://www.nlm.nih.gov/research/umls/rxnorm",
                                                   "code": "197361", "display": "amlodipine 5 MG Oral Tablet"}],
                                       "text": "amlodipine 5 MG Oral Tablet"}},
    ]


def _patient(rng: random.Random, mrn: str, names: dict[str, list[str]]) -> dict[str, Any]:
    gender = rng.choice(["male", "female"])
    given = rng.choice(names["given_" + gender])
    birth = dt.date(1930, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 75))
    if rng.random() < 0.15:  # birthdays on or right around the clock date: the age rounding is tested
        birth = dt.date(rng.randint(1940, 2000), 11, rng.choice([12, 13, 14]))
    return {
        "resourceType": "Patient", "id": mrn, "active": True,
        "identifier": [{"use": "usual", "type": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/v2-0203",
                                                             "code": "MR", "display": "Medical Record Number"}]},
                        "value": mrn}],
        "name": [{"use": "official", "family": rng.choice(names["family"]), "given": [given]}],
        "gender": gender, "birthDate": birth.isoformat(),
        "telecom": [{"system": "phone", "value": f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"}],
        "address": [{"line": [f"{rng.randint(1, 999)} {rng.choice(names['streets'])}"], "city": rng.choice(names["cities"]),
                     "state": "CA", "postalCode": f"9{rng.randint(1000, 9999)}"}],
    }


def profiles(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` lab profiles; every branch of every lab occurs within each block of 6 patients."""
    rng = random.Random(f"fhir-profiles:{seed}")
    out: list[dict[str, str]] = []
    while len(out) < n:
        block = []
        for i in range(len(MG_BRANCHES)):
            block.append({"MG": MG_BRANCHES[i], "K": K_BRANCHES[i % 3], "GLU": GLU_BRANCHES[(i + 1) % 3],
                          "A1C": A1C_BRANCHES[(i // 2) % 3]})
        for lab in ("K", "GLU", "A1C"):  # decorrelate the labs across blocks
            column = [p[lab] for p in block]
            rng.shuffle(column)
            for p, value in zip(block, column):
                p[lab] = value
        out.extend(block)
    return out[:n]


def generate_patients(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """All resources (patients first, then per patient their labs and background), deterministic per seed.

    Args:
        n: Number of patients (>= 1).
        seed: Seeds names, dates and values.

    Returns:
        FHIR resources as JSON-ready dicts; each patient's MRN is ``S`` + 7 digits and unique.
    """
    if n < 1:
        raise ValueError(f"n={n} patients is invalid: use at least 1")
    rng = random.Random(f"fhir-patients:{seed}")
    names = _names()
    mrns = [f"S{m:07d}" for m in sorted(rng.sample(range(1_000_000, 9_999_999), n))]
    rng.shuffle(mrns)
    resources: list[dict[str, Any]] = []
    labs: list[dict[str, Any]] = []
    seen_names: set[tuple[str, str, str]] = set()
    for mrn, profile in zip(mrns, profiles(n, seed)):
        patient = _patient(rng, mrn, names)
        key = (patient["name"][0]["given"][0], patient["name"][0]["family"], patient["birthDate"])
        while key in seen_names:  # name + birth date identify a patient uniquely (task1)
            patient = _patient(rng, mrn, names)
            key = (patient["name"][0]["given"][0], patient["name"][0]["family"], patient["birthDate"])
        seen_names.add(key)
        resources.append(patient)
        values = {"MG": _mg_values(rng, profile["MG"]), "K": _k_values(rng, profile["K"]),
                  "GLU": _glu_values(rng, profile["GLU"]), "A1C": _a1c_values(rng, profile["A1C"])}
        for code, series in values.items():
            labs.extend(_obs(mrn, i, code, when, value) for i, (when, value) in enumerate(series))
        labs.extend(_background(rng, mrn))
    return resources + labs
