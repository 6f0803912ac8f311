"""Importers for users who hold the real (credentialed) data: the same builders, real input.

* :func:`read_mimic_csv_dir` reads a MIMIC-III v1.4 CSV directory (``PATIENTS.csv`` ... , or ``.csv.gz``) into the
  raw frames the builders consume; :func:`import_mimic_iii` / :func:`import_treqs` then write the EHRSQL
  MIMIC-III / MIMICSQL databases with exactly the conventions used for the synthetic hospital.
* :func:`read_eicu_csv_dir` / :func:`import_eicu` do the same for eICU-CRD v2.0 CSVs (``patient.csv``,
  ``intakeOutput.csv``, ``vitalPeriodic.csv``, ...).
* :func:`ehrsql_instances` and :func:`mimicsql_instances` turn the public question files (EHRSQL JSON,
  MIMICSQL JSON lines or MedAgentGym ``treqs`` rows) into instances over whatever database is given: each gold
  query is post-processed like EHRSQL's evaluator and EXECUTED; the answer is what it returns. They keep the
  given slot values; ``medagentgym import`` (``medagentgym.tasks.importers.ehrsql``) also re-instantiates values the
  database lacks and writes a built family.

Nothing here downloads data; paths point at files the user already has.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medagentgym.tasks.base import Instance, TaskError
from medagentgym.tasks.ehr_synth import hospital
from medagentgym.tasks.ehr_synth.conventions import CURRENT_TIME
from medagentgym.tasks.ehr_synth.eicu_db import build_eicu
from medagentgym.tasks.ehr_synth.mimic_iii_db import VITAL_ITEMIDS, build_mimic_iii
from medagentgym.tasks.ehr_synth.public_sql import connect_read_only, execute
from medagentgym.tasks.ehr_synth.treqs_db import build_treqs

_MIMIC_TIMES = {"DOB", "DOD", "DOD_HOSP", "ADMITTIME", "DISCHTIME", "DEATHTIME", "INTIME", "OUTTIME", "CHARTTIME",
                "STARTDATE", "ENDDATE", "CHARTDATE"}
_MIMIC_DICTS = {
    "D_ICD_DIAGNOSES": ("ROW_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"),
    "D_ICD_PROCEDURES": ("ROW_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"),
    "D_LABITEMS": ("ROW_ID", "ITEMID", "LABEL", "FLUID", "CATEGORY", "LOINC_CODE"),
    "D_ITEMS": ("ROW_ID", "ITEMID", "LABEL", "LINKSTO", "DBSOURCE", "UNITNAME"),
}
_EICU_FILES = {
    "patient": "patient", "diagnosis": "diagnosis", "treatment": "treatment", "lab": "lab",
    "medication": "medication", "allergy": "allergy", "intakeoutput": "intakeOutput", "microlab": "microLab",
    "vitalperiodic": "vitalPeriodic",
}
_EICU_COLUMNS = {
    "patient": ("patientunitstayid", "patienthealthsystemstayid", "uniquepid", "gender", "age", "ethnicity",
                "hospitalid", "wardid", "admissionheight", "admissionweight", "dischargeweight", "hospitaladmittime24",
                "hospitaladmitoffset", "hospitaladmitsource", "hospitaldischargeyear", "hospitaldischargetime24",
                "hospitaldischargeoffset", "hospitaldischargestatus", "unitadmittime24", "unitdischargeoffset"),
    "diagnosis": ("diagnosisid", "patientunitstayid", "diagnosisoffset", "diagnosisstring", "icd9code"),
    "treatment": ("treatmentid", "patientunitstayid", "treatmentoffset", "treatmentstring"),
    "lab": ("labid", "patientunitstayid", "labresultoffset", "labname", "labresult"),
    "medication": ("medicationid", "patientunitstayid", "drugstartoffset", "drugordercancelled", "drugname",
                   "dosage", "routeadmin", "drugstopoffset"),
    "allergy": ("allergyid", "patientunitstayid", "allergyoffset", "drugname", "allergyname"),
    "intakeoutput": ("intakeoutputid", "patientunitstayid", "intakeoutputoffset", "cellpath", "celllabel",
                     "cellvaluenumeric"),
    "microlab": ("microlabid", "patientunitstayid", "culturetakenoffset", "culturesite", "organism"),
    "vitalperiodic": ("vitalperiodicid", "patientunitstayid", "observationoffset", "temperature", "sao2", "heartrate",
                      "respiration", "systemicsystolic", "systemicdiastolic", "systemicmean"),
}


def _find(directory: Path, stem: str) -> Path:
    for name in (f"{stem}.csv", f"{stem}.csv.gz", f"{stem.lower()}.csv", f"{stem.lower()}.csv.gz"):
        if (directory / name).is_file():
            return directory / name
    raise TaskError(f"{directory}: missing {stem}.csv (or .csv.gz); point at the unpacked dataset directory")


def _read(path: Path, columns: tuple[str, ...], *, upper: bool, keep=None, chunksize: int = 1_000_000) -> pd.DataFrame:
    """Read the wanted columns (absent optional ones become NULL); ``keep`` filters each chunk."""
    header = pd.read_csv(path, nrows=0).columns
    names = {(c.upper() if upper else c.lower()): c for c in header}
    present = [c for c in columns if c in names]
    frames = []
    for chunk in pd.read_csv(path, usecols=[names[c] for c in present], chunksize=chunksize, low_memory=False):
        chunk.columns = [c.upper() if upper else c.lower() for c in chunk.columns]
        frames.append(chunk if keep is None else chunk[keep(chunk)])
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=present)
    for col in columns:
        if col not in df.columns:
            df[col] = None
    df = df[list(columns)]
    return df.astype(object).where(df.notna(), None)


def read_mimic_csv_dir(directory: Path | str) -> hospital.RawHospital:
    """Read a MIMIC-III v1.4 CSV directory into raw frames (CHARTEVENTS is streamed, keeping the 9 vital items).

    Raises:
        TaskError: A required file is missing (names it).
    """
    directory = Path(directory)
    tables: dict[str, pd.DataFrame] = {}
    for stem, cols in {**hospital._COLUMNS, **_MIMIC_DICTS}.items():
        keep = (lambda c: c["ITEMID"].isin(VITAL_ITEMIDS)) if stem == "CHARTEVENTS" else None
        df = _read(_find(directory, stem), cols, upper=True, keep=keep)
        for col in set(cols) & _MIMIC_TIMES:
            df[col] = pd.to_datetime(df[col], errors="coerce").astype(object).where(df[col].notna(), None)
        tables[stem] = df
    for stem, col in (("ADMISSIONS", "HADM_ID"), ("LABEVENTS", "HADM_ID")):
        tables[stem][col] = pd.to_numeric(tables[stem][col], errors="coerce")
    tables["LABEVENTS"]["VALUENUM"] = pd.to_numeric(tables["LABEVENTS"]["VALUENUM"], errors="coerce")
    allergies = pd.DataFrame(columns=["SUBJECT_ID", "ALLERGYNAME", "DRUGNAME"])
    return hospital.RawHospital(tables=tables, allergies=allergies)


def sample_patients(raw: hospital.RawHospital, n_patients: int, seed: int = 0) -> hospital.RawHospital:
    """Keep ``n_patients`` randomly chosen patients (EHRSQL builds its databases from 1,000)."""
    ids = sorted(raw.tables["PATIENTS"]["SUBJECT_ID"].tolist())
    if n_patients >= len(ids):
        return raw
    chosen = set(np.random.default_rng(seed).choice(ids, size=n_patients, replace=False).tolist())
    tables = {k: (df[df["SUBJECT_ID"].isin(chosen)].reset_index(drop=True) if "SUBJECT_ID" in df.columns else df)
              for k, df in raw.tables.items()}
    return hospital.RawHospital(tables=tables, allergies=raw.allergies)


def import_mimic_iii(csv_dir: Path | str, out_db: Path | str, *, seed: int = 0, n_patients: int | None = 1000) -> dict[str, int]:
    """Real MIMIC-III CSVs -> the EHRSQL MIMIC-III database (``n_patients=None`` keeps every patient)."""
    raw = read_mimic_csv_dir(csv_dir)
    if n_patients:
        raw = sample_patients(raw, n_patients, seed)
    return build_mimic_iii(raw, Path(out_db), seed=seed)


def import_treqs(csv_dir: Path | str, out_db: Path | str, *, seed: int = 0) -> dict[str, int]:
    """Real MIMIC-III CSVs -> the MIMICSQL five-table database (whole cohort)."""
    return build_treqs(read_mimic_csv_dir(csv_dir), Path(out_db), seed=seed)


def read_eicu_csv_dir(directory: Path | str) -> dict[str, pd.DataFrame]:
    """Read eICU-CRD CSVs (``patient.csv``, ``intakeOutput.csv``, ...) into the frames ``eicu_db`` consumes."""
    directory = Path(directory)
    frames = {}
    for table, stem in _EICU_FILES.items():
        frames[table] = _read(_find(directory, stem), _EICU_COLUMNS[table], upper=False)
    pat = frames["patient"]
    for col in ("hospitaladmitoffset", "hospitaldischargeoffset", "unitdischargeoffset", "hospitaldischargeyear"):
        pat[col] = pd.to_numeric(pat[col]).astype("int64")
    return frames


def import_eicu(csv_dir: Path | str, out_db: Path | str, *, seed: int = 0) -> dict[str, int]:
    """Real eICU-CRD CSVs -> the EHRSQL eICU database."""
    return build_eicu(read_eicu_csv_dir(csv_dir), Path(out_db), seed=seed)


# ---------------------------------------------------------------------------------------------------------------
# Question files

#: EHRSQL's normal ranges for the vital-sign placeholders (``heart_rate_lower`` ...).
VITAL_RANGES = {"temperature": (35.5, 38.1), "sao2": (95.0, 100.0), "heart_rate": (60.0, 100.0),
                "respiration": (12.0, 18.0), "systolic_bp": (90.0, 120.0), "diastolic_bp": (60.0, 90.0),
                "mean_bp": (60.0, 110.0)}
_DATETIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")


def postprocess_ehrsql(query: str) -> str:
    """EHRSQL's evaluator rewriting: lower-case, fixed current time, vital placeholders, ``%y``/``%j`` fixes."""
    q = query.lower()
    q = re.sub(r"\bcurrent_time\b", f"'{CURRENT_TIME}'", q)
    for name, (low, high) in VITAL_RANGES.items():
        if f"{name}_lower" in q and f"{name}_upper" in q:
            q = q.replace(f"{name}_lower", str(low)).replace(f"{name}_upper", str(high))
    q = q.replace("''", "'").replace("< =", "<=").replace("%y", "%Y").replace("%j", "%J")
    return q.replace("'now'", f"'{CURRENT_TIME}'")


def _answer(rows: list[tuple], sql: str) -> tuple[Any, str] | None:
    """(answer, answer_type) from executed rows; None when empty."""
    values = [r[0] for r in rows if r and r[0] is not None]
    if not values:
        return None
    if len(rows) > 1:
        return sorted({str(v) if not isinstance(v, (int, float)) else v for v in values}, key=str), "set"
    value = values[0]
    if re.search(r"count\s*\(\s*\*\s*\)\s*>\s*0", sql, re.IGNORECASE) and value in (0, 1):
        return bool(value), "boolean"
    if isinstance(value, int):
        return value, "integer"
    if isinstance(value, float):
        return value, "number"
    if isinstance(value, str) and _DATETIME_RE.match(value):
        return value, "datetime"
    return value, "text"


def _instances(records: list[dict[str, Any]], db_path: Path, *, family: str, question_key: str, sql_key: str,
               category_key: str, rewrite, default_split: str) -> tuple[list[Instance], dict[str, int]]:
    # The file's SQL runs on the host: read-only, behind the authorizer (no ATTACH, no PRAGMA), with a deadline.
    con = connect_read_only(db_path)
    stats = {"records": len(records), "kept": 0, "unanswerable": 0, "errors": 0, "empty": 0}
    out: list[Instance] = []
    try:
        for k, rec in enumerate(records):
            raw_sql = rec.get(sql_key)
            if rec.get("is_impossible") or not isinstance(raw_sql, str) or raw_sql.strip().lower() in ("", "nan", "null"):
                stats["unanswerable"] += 1
                continue
            sql = rewrite(raw_sql)
            rows = execute(con, sql, limit=101)
            if rows is None:  # failed, refused by the authorizer, or past the deadline
                stats["errors"] += 1
                continue
            got = _answer(rows, sql)
            if got is None:
                stats["empty"] += 1
                continue
            split = "test" if str(rec.get("split", default_split)).lower() in ("test", "valid", "dev") else "train"
            out.append(Instance(
                id=f"{family}/{split}/{rec.get('id', rec.get('key', k))}", family=family,
                category=str(rec.get(category_key) or "imported"), split=split, question=str(rec[question_key]),
                answer=got[0], answer_type=got[1], solution=sql, solution_lang="sql",
                data={db_path.name: db_path.name}, metadata={"sql_database": db_path.name, "source_id": rec.get("id", rec.get("key"))},
            ))
            stats["kept"] += 1
    finally:
        con.close()
    return out, stats


def _load_records(path: Path) -> list[dict[str, Any]]:
    text = Path(path).read_text(encoding="utf-8").strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ehrsql_instances(question_file: Path | str, db_path: Path | str, *, family: str) -> tuple[list[Instance], dict[str, int]]:
    """EHRSQL question records (JSON list or lines) -> instances over ``db_path``; returns (instances, stats).

    Unanswerable records (``is_impossible`` or a ``nan`` query) are skipped; each query is rewritten by
    :func:`postprocess_ehrsql` and executed; category = the record's ``q_tag``.
    """
    return _instances(_load_records(Path(question_file)), Path(db_path), family=family, question_key="question",
                      sql_key="query", category_key="q_tag", rewrite=postprocess_ehrsql, default_split="test")


def mimicsql_instances(question_file: Path | str, db_path: Path | str, *, family: str = "treqs") -> tuple[list[Instance], dict[str, int]]:
    """MIMICSQL records (``question_refine``/``sql``) or MedAgentGym ``treqs`` rows (``question``/``query``) -> instances.

    The SQL is lower-cased as MedAgentGym did (the MIMICSQL database stores lower-case values)."""
    records = _load_records(Path(question_file))
    for rec in records:
        rec.setdefault("question", rec.get("question_refine"))
        rec.setdefault("query", rec.get("sql"))
        rec.setdefault("category", "mimicsql")
    return _instances(records, Path(db_path), family=family, question_key="question", sql_key="query",
                      category_key="category", rewrite=str.lower, default_split="test")
