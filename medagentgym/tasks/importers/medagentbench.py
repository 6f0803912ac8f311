"""medagentbench: MedAgentBench / MedAgentGym ``medagentbench`` task JSONL -> instances over a FHIR snapshot.

A record is ``{"id": "task<N>_<k>", "instruction", "context", "sol", "eval_MRN"}``. Its patient lives on the
benchmark's FHIR server (MedAgentBench ships it as a Docker image), which is not part of this project: pass
``--fhir-url http://localhost:8080/fhir/`` of a running one. The importer reads every resource of the patients
the records name (Patient, Observation, MedicationRequest, Condition, Procedure, ServiceRequest) and stores
them as the family's ``fhir/resources.json``, so episodes run against a private per-episode copy exactly as for
a generated build. Slots come from the record (the MRN; task1's name and birth date; task3's reading; task8's
free text), the gold answer and gold orders from EXECUTING the family's reference program of the task type
against that snapshot. The question is the record's own instruction; the context is the family's (clock,
codes, dosing rules, server, answer format). task1's ``sol`` is compared with the recomputed answer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import Instance, TaskError, write_bytes_atomic
from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record, reject
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport

__all__ = ["parse_record", "run", "snapshot"]

NEED = ("needs a MedAgentBench FHIR server holding the benchmark's patients (its public Docker image, serving "
        "http://localhost:8080/fhir/): start it and pass --fhir-url http://localhost:8080/fhir/")
_MRN = re.compile(r"\bS\d{7}\b")
_RESOURCE_TYPES = ("Observation", "MedicationRequest", "Condition", "Procedure", "ServiceRequest")


def parse_record(record: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """``(task type, slots)`` of one record.

    Raises:
        ValueError: ``"<reason>: <detail>"`` (``missing_field``, ``unknown_task``, ``unparsed``).
    """
    rid, text = str(record.get("id") or ""), str(record.get("instruction") or "")
    if not rid or not text:
        raise ValueError("missing_field: a MedAgentBench record needs 'id' (task<N>_<k>) and 'instruction'")
    match = re.fullmatch(r"(task\d+)_\d+", rid)
    from medagentgym.tasks.fhir.reference import TEXTS

    if match is None or match.group(1) not in TEXTS:
        raise ValueError(f"unknown_task: id {rid!r} is not task1_<k> ... task10_<k>")
    task = match.group(1)
    if task == "task1":
        found = re.search(r"name\s+(.+?)\s+and\s+(?:DOB|date of birth)\s+(?:of\s+)?(\d{4}-\d{2}-\d{2})", text, re.IGNORECASE)
        if found is None:
            raise ValueError("unparsed: task1 instruction states no 'name ... and DOB of YYYY-MM-DD'")
        *given, family = found.group(1).split()
        return task, {"given": " ".join(given) or family, "family": family, "dob": found.group(2)}
    mrn = str(record.get("eval_MRN") or "") or next(iter(_MRN.findall(text)), "")
    if not _MRN.fullmatch(mrn):
        raise ValueError("unparsed: no MRN (eval_MRN or S + 7 digits in the instruction)")
    slots = {"mrn": mrn}
    if task == "task3":
        reading = re.search(r'"(\d{2,3}/\d{2,3}\s*mmHg)"', text)
        if reading is None:
            raise ValueError('unparsed: task3 instruction states no reading like "118/77 mmHg"')
        slots["reading"] = reading.group(1)
    elif task == "task8":
        note = re.search(r'free text[^"]*"(.+)"', text, re.DOTALL)
        if note is None:
            raise ValueError("unparsed: task8 instruction states no quoted free text for the referral")
        slots["sbar"] = note.group(1).strip()
    return task, slots


def _bundle(client: Any, url: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    resources, next_url = [], url
    while next_url:
        reply = client.get(next_url, params=params)
        reply.raise_for_status()
        bundle = reply.json()
        resources += [e["resource"] for e in bundle.get("entry") or [] if isinstance(e.get("resource"), dict)]
        next_url = next((link.get("url") for link in bundle.get("link") or [] if link.get("relation") == "next"), None)
        params = {}
    return resources


def snapshot(base_url: str, patients: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Every resource of the named patients on the FHIR server at ``base_url`` (patients first, then the rest).

    Args:
        base_url: The server's base, e.g. ``http://localhost:8080/fhir/``.
        patients: Slots naming a patient: ``{"mrn"}`` or task1's ``{"given", "family", "dob"}``.

    Raises:
        TaskError: The server cannot be reached or answers with an error (one line, what to check).
    """
    import httpx

    base = base_url.rstrip("/") + "/"
    found: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        with httpx.Client(timeout=60.0) as client:
            client.get(base + "metadata", params={"_format": "json"}).raise_for_status()
            mrns: set[str] = set()
            for slots in patients:
                query = ({"identifier": slots["mrn"]} if "mrn" in slots else
                         {"given": slots["given"], "family": slots["family"], "birthdate": slots["dob"]})
                for patient in _bundle(client, base + "Patient", {**query, "_format": "json"}):
                    found[("Patient", str(patient.get("id")))] = patient
                    mrns.add(str(patient.get("id")))
            for mrn in sorted(mrns):
                for rtype in _RESOURCE_TYPES:
                    for res in _bundle(client, base + rtype, {"patient": mrn, "_count": 5000, "_format": "json"}):
                        found[(rtype, str(res.get("id")))] = res
    except (httpx.HTTPError, ValueError) as exc:
        raise TaskError(f"FHIR server {base}: {type(exc).__name__}: {exc}; is it running? ({NEED})") from exc
    patients_first = sorted(found.items(), key=lambda kv: (kv[0][0] != "Patient", kv[0]))
    return [res for _, res in patients_first]


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every record of ``paths`` over a snapshot of ``opts.fhir_url`` (see the module docstring)."""
    from medagentgym.tasks.fhir.reference import context_of, solution_code
    from medagentgym.tasks.fhir.server import FhirServer
    from medagentgym.tasks.fhir.store import BaseData, FhirStore
    from medagentgym.tasks.medagentbench import FHIR_PORT, RESOURCES, _category, reference_gold

    parsed: list[tuple[Path, int, dict[str, Any], str, dict[str, str]]] = []
    for path, line, record in each_record(paths, report):
        if not opts.fhir_url:
            report.need(str(path), line, NEED)
            continue
        try:
            task, slots = parse_record(record)
        except ValueError as exc:
            reject(report, path, line, exc)
            continue
        parsed.append((path, line, record, task, slots))
    if not parsed:
        return []
    resources = snapshot(opts.fhir_url, [slots for *_, slots in parsed])
    write_bytes_atomic(opts.family_dir / RESOURCES, ("[\n" + ",\n".join(json.dumps(r, sort_keys=True)
                                                                       for r in resources) + "\n]\n").encode())
    base = BaseData(resources)
    out: list[Imported] = []
    with FhirServer(FhirStore(base), port=0) as server:
        for path, line, record, task, slots in parsed:
            if "mrn" in slots and ("Patient", slots["mrn"]) not in base.by_id:  # else "no lab" would look right
                report.reject(str(path), line, "patient_not_found",
                              f"patient {slots['mrn']} is not on the FHIR server at {opts.fhir_url}")
                continue
            try:
                gold = reference_gold(server, base, task, slots)
            except Exception as exc:  # noqa: BLE001 - e.g. the MRN is not on the server: reported per record
                report.reject(str(path), line, "reference_fails", f"{type(exc).__name__}: {str(exc)[:120]}")
                continue
            split = split_of(record, path, opts.split)
            notes = []
            if task == "task1" and isinstance(record.get("sol"), list):
                notes.append("matches_original" if record["sol"] == gold["GET"] else "differs_from_original")
            out.append(Imported(Instance(
                id=f"medagentbench/{split}/{record['id']}", family="medagentbench", category=_category(task, gold),
                split=split, question=str(record["instruction"]).strip(), context=context_of(task),
                answer=json.dumps(gold, sort_keys=True), answer_type="text", solution=solution_code(task, slots),
                solution_lang="python", metadata={"task": task, "slots": slots, "fhir_port": FHIR_PORT,
                                                  "source_id": record["id"]}), str(path), line))
            report.keep(*notes)
    return out
