"""ehrcon: EHRCon / MedAgentGym ``ehrcon`` task JSONL -> yes/no instances over the user's EHRCon files.

A record is ``{"Hospital admission": "NNNNNN.0", "Medical entity", "Number of inconsistencies", "Has error",
"split"}``. The label is EHRCon's annotation of MIMIC-III notes against MIMIC-III tables (credentialed, never
shipped): pass ``--data DIR`` holding ``EHRCon_combined.db`` (the merged per-admission SQLite database) and
``clinical_notes.csv`` (NOTEEVENTS columns), as MedAgentGym lays them out; both are copied into the family.

Each (admission, entity) pair becomes one instance whose gold is ``Has error``. The public files repeat pairs,
some with conflicting labels: a repeat with the same label is rejected as ``duplicate``, and every occurrence of
a pair whose labels conflict is rejected as ``conflicting_labels`` (no answer is right for both). A record whose
admission has no note in ``clinical_notes.csv`` is rejected as ``admission_not_found``.
"""

from __future__ import annotations

import csv
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import Instance
from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport

__all__ = ["CONTEXT", "FIELDS", "run"]

FIELDS = ("Hospital admission", "Medical entity", "Has error")
DB_FILE, NOTES_FILE = "EHRCon_combined.db", "clinical_notes.csv"
NEED = (f"needs EHRCon's files (credentialed MIMIC-III data): put {DB_FILE} and {NOTES_FILE} in DIR and pass "
        "--data DIR")
CONTEXT = (
    f"Files (read-only): /data/{DB_FILE}, EHRCon's SQLite database of the admissions' MIMIC-III rows (chartevents, "
    "labevents, prescriptions, inputevents_cv/_mv, outputevents, microbiologyevents, diagnoses, procedures and "
    f"the d_* dictionaries; text lower-case), and /data/{NOTES_FILE}, the clinical notes (NOTEEVENTS columns "
    "ROW_ID, SUBJECT_ID, HADM_ID, CHARTDATE, CHARTTIME, STORETIME, CATEGORY, DESCRIPTION, CGID, ISERROR, TEXT, "
    "ADMITTIME). A statement of a note about an entity is consistent when the admission's rows agree with it "
    "(value, unit, time, dose, route, existence). Submit exactly one word: true (there is an inconsistency) or "
    "false (none).")
_EXPLORE = "select name from sqlite_master where type = 'table' order by name"


def _admissions_with_notes(notes: Path) -> set[int]:
    with open(notes, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        key = next((k for k in reader.fieldnames or [] if k.strip().lower() == "hadm_id"), None)
        if key is None:
            return set()
        out = set()
        for row in reader:
            try:
                out.add(int(float(row[key])))
            except (TypeError, ValueError):
                continue
        return out


def _label(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return {"true": True, "1": True, "false": False, "0": False}.get(text)


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every record of ``paths`` (see the module docstring); rejected records go to ``report``."""
    data = Path(opts.data) if opts.data else None
    have_data = data is not None and (data / DB_FILE).is_file() and (data / NOTES_FILE).is_file()
    if have_data:
        sqlite3.connect(f"file:{data / DB_FILE}?mode=ro", uri=True).execute(_EXPLORE).fetchall()  # is it SQLite?
        shutil.copyfile(data / DB_FILE, opts.family_dir / DB_FILE)
        shutil.copyfile(data / NOTES_FILE, opts.family_dir / NOTES_FILE)
        noted = _admissions_with_notes(data / NOTES_FILE)
    rows: list[tuple[Path, int, dict[str, Any], int, str, bool]] = []
    for path, line, record in each_record(paths, report):
        missing = [f for f in FIELDS if f not in record]
        label = _label(record.get("Has error"))
        try:
            hadm = int(float(record.get("Hospital admission")))
        except (TypeError, ValueError):
            hadm = -1
        if missing or label is None or hadm < 0 or not str(record["Medical entity"]).strip():
            report.reject(str(path), line, "missing_field",
                          f"needs {list(FIELDS)} with an admission id, an entity and a true/false label")
        elif not have_data:
            report.need(str(path), line, NEED)
        elif hadm not in noted:
            report.reject(str(path), line, "admission_not_found", f"no note of admission {hadm} in {NOTES_FILE}")
        else:
            rows.append((path, line, record, hadm, str(record["Medical entity"]).strip(), label))
    labels: dict[tuple[int, str], set[bool]] = {}
    for *_, hadm, entity, label in rows:
        labels.setdefault((hadm, entity.lower()), set()).add(label)
    from medagentgym.tasks.ehrcon import _question

    out: list[Imported] = []
    seen: set[tuple[int, str]] = set()
    for path, line, record, hadm, entity, label in rows:
        key = (hadm, entity.lower())
        if len(labels[key]) > 1:
            report.reject(str(path), line, "conflicting_labels", f"({hadm}, {entity!r}) is labelled both ways")
            continue
        if key in seen:
            report.reject(str(path), line, "duplicate", f"({hadm}, {entity!r}) was imported from an earlier line")
            continue
        seen.add(key)
        split = split_of(record, path, opts.split)
        out.append(Imported(Instance(
            id=f"ehrcon/{split}/{hadm}-{len(out):05d}", family="ehrcon", category="imported", split=split,
            question=_question(hadm, entity), context=CONTEXT, answer=label, answer_type="boolean", solution=_EXPLORE,
            solution_lang="sql", data={DB_FILE: DB_FILE, NOTES_FILE: NOTES_FILE},
            metadata={"hadm_id": hadm, "entity": entity, "sql_database": DB_FILE, "label_source": "EHRCon annotation",
                      "inconsistencies": record.get("Number of inconsistencies")}), str(path), line))
        report.keep()
    return out
