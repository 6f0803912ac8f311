"""MedAgentBench's ten task types: instruction, context and the reference solution program of each.

The reference solutions are ordinary Python programs that talk HTTP to the FHIR base URL (the same code an
agent could write in its sandbox). The family executes them against a fresh server state at build time to
obtain the gold answers and gold orders, and replays them in episodes. Each prints one JSON line
``{"GET": [answers...], "POST": [resources...]}`` as its last line; the POSTs it made are also on the server.
The wording of the instructions is ours; the clinical rules (windows, thresholds, doses, codes) follow the
benchmark's task definitions.
"""

from __future__ import annotations

from string import Template

JAIL_BASE = "http://127.0.0.1:8080/fhir/"

_SERVER = ("A FHIR R4 server is running at {base} (JSON; add _format=json if you like). Search with GET, e.g. "
           "{base}Patient?identifier=S1234567 or {base}Observation?patient=S1234567&code=MG&_count=5000 "
           "(bundles list resources under entry[].resource); create resources with POST {base}<ResourceType> and "
           "a JSON body. Orders and records you POST are what gets graded, so POST only what the task requires. ")
_ANSWER = ("Submit your answers as a JSON list, e.g. [2.1] or [\"S1234567\"] ([] when the task asks for no value). ")
_NOW = "It's 2023-11-13T10:15:00+00:00 now. "

def _pair(question: str, context: str) -> tuple[str, str]:
    return question, context


#: type -> (instruction template, extra context). Slots: $mrn, $given, $family, $dob, $reading, $sbar.
TEXTS: dict[str, tuple[str, str]] = {
    "task1": _pair("What is the MRN of the patient with name $given $family and date of birth $dob? If no patient "
              "matches, answer \"Patient not found\".", "The MRN is the patient's identifier (and resource id). "),
    "task2": _pair("What is the age of the patient with MRN $mrn? Give whole years, rounded down.",
              _NOW + "Compute the age on 2023-11-13. "),
    "task3": _pair("I just measured the blood pressure of patient $mrn: it is \"$reading\". Record it in the chart.",
              _NOW + "Record vitals as an Observation with category vital-signs (system "
              "http://hl7.org/fhir/observation-category, display \"Vital Signs\"), code.text \"BP\" (the flowsheet "
              "id), status final, effectiveDateTime = now, valueString = the reading as given, and the patient as "
              "subject. "),
    "task4": _pair("What is the most recent magnesium level of patient $mrn within the last 24 hours? Answer in "
              "mg/dL; if there is none in that window, answer -1.", _NOW + "The code for magnesium is \"MG\". "),
    "task5": _pair("Check patient $mrn's most recent serum magnesium within the last 24 hours. If it is low, order "
              "IV magnesium replacement following the dosing instructions. If no magnesium was measured in the last "
              "24 hours, do not order anything. Answer the magnesium value (mg/dL), or -1 if there is none.",
              _NOW + "The code for magnesium is \"MG\". The NDC for IV magnesium sulfate replacement is "
              "0338-1715-40 (system http://hl7.org/fhir/sid/ndc). Dosing: mild deficiency (1.5 to 1.9 mg/dL): 1 g "
              "IV over 1 hour; moderate (1 to <1.5 mg/dL): 2 g IV over 2 hours; severe (<1 mg/dL): 4 g IV over 4 "
              "hours. Above 1.9 mg/dL no replacement is needed. Order as a MedicationRequest (status active, intent "
              "order, authoredOn now, route IV, doseQuantity in g, rateQuantity in h). "),
    "task6": _pair("What is the average capillary blood glucose (CBG) of patient $mrn over the last 24 hours? Answer "
              "in mg/dL; if there is no reading in that window, answer -1.", _NOW + "The code for CBG is \"GLU\". "),
    "task7": _pair("What is the most recent capillary blood glucose (CBG) value of patient $mrn, whenever it was "
              "measured? Answer in mg/dL, or -1 if there is none.", _NOW + "The code for CBG is \"GLU\". "),
    "task8": _pair("Order an orthopedic surgery referral for patient $mrn. Put this free text in the order's note: "
              "\"$sbar\"", _NOW + "Referrals are ServiceRequests; the SNOMED code for referral to orthopedic surgery "
              "is 306181000000106 (system http://snomed.info/sct). Use status active, intent order, priority stat, "
              "authoredOn now, the patient as subject and the text in note. "),
    "task9": _pair("Check patient $mrn's most recent potassium level. If it is low, order oral potassium "
              "replacement following the dosing instructions, together with a serum potassium lab for tomorrow "
              "at 8 am. Answer the potassium value (mmol/L), or -1 if there is none.",
              _NOW + "The code for potassium is \"K\". The NDC for oral potassium chloride replacement is "
              "40032-917-01 (system http://hl7.org/fhir/sid/ndc). Potassium below 3.5 mmol/L is low. Dosing: for "
              "every 0.1 mmol/L below 3.5, give 10 mEq orally (route oral, doseQuantity in mEq). The serum "
              "potassium lab is LOINC 2823-3 (system http://loinc.org), a ServiceRequest with priority stat and "
              "occurrenceDateTime 2023-11-14T08:00:00+00:00. Orders: status active, intent order, authoredOn now. "),
    "task10": _pair("What is the last HbA1C value of patient $mrn and when was it recorded? If it is more than one "
               "year old, or there is none, order a new HbA1C lab test.",
               _NOW + "The code for HbA1C is \"A1C\". Answer [value, effectiveDateTime], e.g. [6.1, "
               "\"2023-05-01T09:00:00+00:00\"], or [-1] if there is none. The HbA1C lab is LOINC 4548-4 (system "
               "http://loinc.org); order it as a ServiceRequest with status active, intent order, priority stat, "
               "authoredOn now and the patient as subject. "),
}


def context_of(task: str, base: str = JAIL_BASE) -> str:
    """The context shown with every instance of ``task``."""
    return TEXTS[task][1] + _SERVER.format(base=base) + _ANSWER


_PREAMBLE = '''import json
import urllib.parse
import urllib.request
from datetime import date, datetime, timedelta

BASE = $base
NOW = datetime.fromisoformat("2023-11-13T10:15:00+00:00")
NOW_ISO = "2023-11-13T10:15:00+00:00"
posts = []


def get(rtype, **params):
    params["_format"] = "json"
    with urllib.request.urlopen(BASE + rtype + "?" + urllib.parse.urlencode(params), timeout=30) as resp:
        return [e["resource"] for e in json.load(resp).get("entry", [])]


def post(rtype, resource):
    req = urllib.request.Request(BASE + rtype, data=json.dumps(resource).encode(), method="POST",
                                 headers={"Content-Type": "application/fhir+json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        json.load(resp)
    posts.append(resource)


def when(res):
    return datetime.fromisoformat(res["effectiveDateTime"])


def latest(mrn, code, since=None):
    obs = [o for o in get("Observation", patient=mrn, code=code, _count=5000) if since is None or when(o) >= since]
    return max(obs, key=when) if obs else None


def order(code_system, code, display, mrn, **extra):
    return dict({"resourceType": "ServiceRequest",
                 "code": {"coding": [{"system": code_system, "code": code, "display": display}]},
                 "authoredOn": NOW_ISO, "status": "active", "intent": "order", "priority": "stat",
                 "subject": {"reference": "Patient/" + mrn}}, **extra)


def medication(ndc, display, mrn, route, dose, dose_unit, rate=None):
    dose_rate = {"doseQuantity": {"value": dose, "unit": dose_unit}}
    if rate is not None:
        dose_rate["rateQuantity"] = {"value": rate, "unit": "h"}
    return {"resourceType": "MedicationRequest",
            "medicationCodeableConcept": {"coding": [{"system": "http://hl7.org/fhir/sid/ndc", "code": ndc,
                                                      "display": display}], "text": display},
            "authoredOn": NOW_ISO, "status": "active", "intent": "order",
            "dosageInstruction": [{"route": {"text": route}, "doseAndRate": [dose_rate]}],
            "subject": {"reference": "Patient/" + mrn}}

'''

_BODIES: dict[str, str] = {
    "task1": '''matches = [p for p in get("Patient", given=$given, family=$family, birthdate=$dob)
           if any(n.get("family") == $family and $given in n.get("given", []) for n in p.get("name", []))]
answer = [matches[0]["id"]] if len(matches) == 1 else ["Patient not found"]
''',
    "task2": '''born = date.fromisoformat(get("Patient", identifier=$mrn)[0]["birthDate"])
today = NOW.date()
answer = [today.year - born.year - ((today.month, today.day) < (born.month, born.day))]
''',
    "task3": '''post("Observation", {
    "resourceType": "Observation",
    "category": [{"coding": [{"system": "http://hl7.org/fhir/observation-category", "code": "vital-signs",
                              "display": "Vital Signs"}]}],
    "code": {"text": "BP"}, "effectiveDateTime": NOW_ISO, "status": "final", "valueString": $reading,
    "subject": {"reference": "Patient/" + $mrn}})
answer = []
''',
    "task4": '''last = latest($mrn, "MG", since=NOW - timedelta(hours=24))
answer = [last["valueQuantity"]["value"]] if last else [-1]
''',
    "task5": '''last = latest($mrn, "MG", since=NOW - timedelta(hours=24))
answer = [last["valueQuantity"]["value"]] if last else [-1]
if last and last["valueQuantity"]["value"] <= 1.9:
    mg = last["valueQuantity"]["value"]
    grams, hours = (4, 4) if mg < 1 else (2, 2) if mg < 1.5 else (1, 1)
    post("MedicationRequest", medication("0338-1715-40", "magnesium sulfate in water for injection", $mrn,
                                         "IV", grams, "g", rate=hours))
''',
    "task6": '''values = [o["valueQuantity"]["value"] for o in get("Observation", patient=$mrn, code="GLU", _count=5000)
          if when(o) >= NOW - timedelta(hours=24)]
answer = [sum(values) / len(values)] if values else [-1]
''',
    "task7": '''last = latest($mrn, "GLU")
answer = [last["valueQuantity"]["value"]] if last else [-1]
''',
    "task8": '''post("ServiceRequest", order("http://snomed.info/sct", "306181000000106", "Referral to orthopedic service",
                             $mrn, note={"text": $sbar}))
answer = []
''',
    "task9": '''last = latest($mrn, "K")
answer = [last["valueQuantity"]["value"]] if last else [-1]
if last and last["valueQuantity"]["value"] < 3.5:
    dose = round((3.5 - last["valueQuantity"]["value"]) / 0.1 * 10, 1)
    post("MedicationRequest", medication("40032-917-01", "potassium chloride ER oral", $mrn, "oral", dose, "mEq"))
    post("ServiceRequest", order("http://loinc.org", "2823-3", "Potassium [Moles/volume] in Serum or Plasma", $mrn,
                                 occurrenceDateTime="2023-11-14T08:00:00+00:00"))
''',
    "task10": '''last = latest($mrn, "A1C")
answer = [last["valueQuantity"]["value"], last["effectiveDateTime"]] if last else [-1]
if last is None or when(last) < NOW - timedelta(days=365):
    post("ServiceRequest", order("http://loinc.org", "4548-4", "Hemoglobin A1c/Hemoglobin.total in Blood", $mrn))
''',
}
_EPILOGUE = 'print(json.dumps({"GET": answer, "POST": posts}))\n'


def solution_code(task: str, slots: dict[str, str], base: str = JAIL_BASE) -> str:
    """The reference program of ``task`` for one instance (slot values are inserted as Python literals)."""
    literals = {k: repr(v) for k, v in slots.items()}
    return (Template(_PREAMBLE).substitute(base=repr(base)) + Template(_BODIES[task]).substitute(literals)
            + _EPILOGUE)


def instruction(task: str, slots: dict[str, str]) -> str:
    """The question of one instance."""
    return Template(TEXTS[task][0]).substitute(slots)
