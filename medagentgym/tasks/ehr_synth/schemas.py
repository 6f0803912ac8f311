"""Exact table schemas of the three databases, and a deterministic SQLite writer.

* ``MIMIC_III``: EHRSQL's MIMIC-III (17 tables, upper-case names, DDL column order).
* ``EICU``: EHRSQL's eICU (10 tables, lower-case names).
* ``TREQS``: MIMICSQL's five tables (DEMOGRAPHIC, DIAGNOSES, PROCEDURES, PRESCRIPTIONS, LAB), all text but DOD_YEAR.

A schema is ``{table: ((column, sql_type), ...)}``. :func:`write_sqlite` creates the tables in that order,
inserts rows in the given order, adds lookup indexes (they change no table or column) and writes the file with
a fixed page size and no journal, so the same rows give the same bytes.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

Schema = dict[str, tuple[tuple[str, str], ...]]

_TS = "TIMESTAMP(0)"
_DBL = "DOUBLE PRECISION"

MIMIC_III: Schema = {
    "PATIENTS": (("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("GENDER", "VARCHAR(5)"), ("DOB", _TS), ("DOD", _TS)),
    "ADMISSIONS": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ADMITTIME", _TS), ("DISCHTIME", _TS),
        ("ADMISSION_TYPE", "VARCHAR(50)"), ("ADMISSION_LOCATION", "VARCHAR(50)"), ("DISCHARGE_LOCATION", "VARCHAR(50)"),
        ("INSURANCE", "VARCHAR(255)"), ("LANGUAGE", "VARCHAR(10)"), ("MARITAL_STATUS", "VARCHAR(50)"),
        ("ETHNICITY", "VARCHAR(200)"), ("AGE", "INT"),
    ),
    "D_ICD_DIAGNOSES": (("ROW_ID", "INT"), ("ICD9_CODE", "VARCHAR(10)"), ("SHORT_TITLE", "VARCHAR(50)"), ("LONG_TITLE", "VARCHAR(255)")),
    "D_ICD_PROCEDURES": (("ROW_ID", "INT"), ("ICD9_CODE", "VARCHAR(10)"), ("SHORT_TITLE", "VARCHAR(50)"), ("LONG_TITLE", "VARCHAR(255)")),
    "D_LABITEMS": (("ROW_ID", "INT"), ("ITEMID", "INT"), ("LABEL", "VARCHAR(200)")),
    "D_ITEMS": (("ROW_ID", "INT"), ("ITEMID", "INT"), ("LABEL", "VARCHAR(200)"), ("LINKSTO", "VARCHAR(50)")),
    "DIAGNOSES_ICD": (("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ICD9_CODE", "VARCHAR(10)"), ("CHARTTIME", _TS)),
    "PROCEDURES_ICD": (("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ICD9_CODE", "VARCHAR(10)"), ("CHARTTIME", _TS)),
    "LABEVENTS": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ITEMID", "INT"), ("CHARTTIME", _TS),
        ("VALUENUM", _DBL), ("VALUEUOM", "VARCHAR(20)"),
    ),
    "PRESCRIPTIONS": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("STARTDATE", _TS), ("ENDDATE", _TS),
        ("DRUG", "VARCHAR(100)"), ("DOSE_VAL_RX", "VARCHAR(120)"), ("DOSE_UNIT_RX", "VARCHAR(120)"), ("ROUTE", "VARCHAR(120)"),
    ),
    "COST": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("EVENT_TYPE", "VARCHAR(20)"), ("EVENT_ID", "INT"),
        ("CHARGETIME", _TS), ("COST", _DBL),
    ),
    "CHARTEVENTS": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ICUSTAY_ID", "INT"), ("ITEMID", "INT"),
        ("CHARTTIME", _TS), ("VALUENUM", _DBL), ("VALUEUOM", "VARCHAR(50)"),
    ),
    "INPUTEVENTS_CV": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ICUSTAY_ID", "INT"), ("CHARTTIME", _TS),
        ("ITEMID", "INT"), ("AMOUNT", _DBL),
    ),
    "OUTPUTEVENTS": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ICUSTAY_ID", "INT"), ("CHARTTIME", _TS),
        ("ITEMID", "INT"), ("VALUE", _DBL),
    ),
    "MICROBIOLOGYEVENTS": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("CHARTTIME", _TS),
        ("SPEC_TYPE_DESC", "VARCHAR(100)"), ("ORG_NAME", "VARCHAR(100)"),
    ),
    "ICUSTAYS": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ICUSTAY_ID", "INT"),
        ("FIRST_CAREUNIT", "VARCHAR(20)"), ("LAST_CAREUNIT", "VARCHAR(20)"), ("FIRST_WARDID", "SMALLINT"),
        ("LAST_WARDID", "SMALLINT"), ("INTIME", _TS), ("OUTTIME", _TS),
    ),
    "TRANSFERS": (
        ("ROW_ID", "INT"), ("SUBJECT_ID", "INT"), ("HADM_ID", "INT"), ("ICUSTAY_ID", "INT"), ("EVENTTYPE", "VARCHAR(20)"),
        ("CAREUNIT", "VARCHAR(20)"), ("WARDID", "SMALLINT"), ("INTIME", _TS), ("OUTTIME", _TS),
    ),
}

EICU: Schema = {
    "patient": (
        ("uniquepid", "VARCHAR(10)"), ("patienthealthsystemstayid", "INT"), ("patientunitstayid", "INT"),
        ("gender", "VARCHAR(25)"), ("age", "VARCHAR(10)"), ("ethnicity", "VARCHAR(50)"), ("hospitalid", "INT"),
        ("wardid", "INT"), ("admissionheight", "NUMERIC(10,2)"), ("admissionweight", "NUMERIC(10,2)"),
        ("dischargeweight", "NUMERIC(10,2)"), ("hospitaladmittime", _TS), ("hospitaladmitsource", "VARCHAR(30)"),
        ("unitadmittime", _TS), ("unitdischargetime", _TS), ("hospitaldischargetime", _TS),
        ("hospitaldischargestatus", "VARCHAR(10)"),
    ),
    "diagnosis": (("diagnosisid", "INT"), ("patientunitstayid", "INT"), ("diagnosisname", "VARCHAR(200)"),
                  ("diagnosistime", _TS), ("icd9code", "VARCHAR(100)")),
    "treatment": (("treatmentid", "INT"), ("patientunitstayid", "INT"), ("treatmentname", "VARCHAR(200)"), ("treatmenttime", _TS)),
    "lab": (("labid", "INT"), ("patientunitstayid", "INT"), ("labname", "VARCHAR(256)"), ("labresult", "NUMERIC(11,4)"),
            ("labresulttime", _TS)),
    "medication": (
        ("medicationid", "INT"), ("patientunitstayid", "INT"), ("drugname", "VARCHAR(220)"), ("dosage", "VARCHAR(60)"),
        ("routeadmin", "VARCHAR(120)"), ("drugstarttime", _TS), ("drugstoptime", _TS),
    ),
    "cost": (("costid", "INT"), ("uniquepid", "VARCHAR(10)"), ("patienthealthsystemstayid", "INT"), ("eventtype", "VARCHAR(20)"),
             ("eventid", "INT"), ("chargetime", _TS), ("cost", _DBL)),
    "allergy": (("allergyid", "INT"), ("patientunitstayid", "INT"), ("drugname", "VARCHAR(255)"), ("allergyname", "VARCHAR(255)"),
                ("allergytime", _TS)),
    "intakeoutput": (
        ("intakeoutputid", "INT"), ("patientunitstayid", "INT"), ("cellpath", "VARCHAR(500)"), ("celllabel", "VARCHAR(255)"),
        ("cellvaluenumeric", "NUMERIC(12,4)"), ("intakeoutputtime", _TS),
    ),
    "microlab": (("microlabid", "INT"), ("patientunitstayid", "INT"), ("culturesite", "VARCHAR(255)"), ("organism", "VARCHAR(255)"),
                 ("culturetakentime", _TS)),
    "vitalperiodic": (
        ("vitalperiodicid", "BIGINT"), ("patientunitstayid", "INT"), ("temperature", "NUMERIC(11,4)"), ("sao2", "INT"),
        ("heartrate", "INT"), ("respiration", "INT"), ("systemicsystolic", "INT"), ("systemicdiastolic", "INT"),
        ("systemicmean", "INT"), ("observationtime", _TS),
    ),
}

_DEMOGRAPHIC_COLS = (
    "SUBJECT_ID", "HADM_ID", "NAME", "MARITAL_STATUS", "AGE", "DOB", "GENDER", "LANGUAGE", "RELIGION", "ADMISSION_TYPE",
    "DAYS_STAY", "INSURANCE", "ETHNICITY", "EXPIRE_FLAG", "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "DIAGNOSIS", "DOD",
    "DOB_YEAR", "DOD_YEAR", "ADMITTIME", "DISCHTIME", "ADMITYEAR",
)
TREQS: Schema = {
    "DEMOGRAPHIC": tuple((c, "REAL" if c == "DOD_YEAR" else "TEXT") for c in _DEMOGRAPHIC_COLS),
    "DIAGNOSES": tuple((c, "TEXT") for c in ("SUBJECT_ID", "HADM_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE")),
    "PROCEDURES": tuple((c, "TEXT") for c in ("SUBJECT_ID", "HADM_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE")),
    "PRESCRIPTIONS": tuple((c, "TEXT") for c in (
        "SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "DRUG_TYPE", "DRUG", "FORMULARY_DRUG_CD", "ROUTE", "DRUG_DOSE")),
    "LAB": tuple((c, "TEXT") for c in (
        "SUBJECT_ID", "HADM_ID", "ITEMID", "CHARTTIME", "FLAG", "VALUE_UNIT", "LABEL", "FLUID", "CATEGORY")),
}

#: Lookup indexes per database (speed only; tables and columns are untouched).
INDEXES: dict[str, tuple[tuple[str, str], ...]] = {
    "mimic_iii": tuple((t, c) for t, cols in MIMIC_III.items() for c, _ in cols
                       if c in {"SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "ITEMID", "ICD9_CODE"} and not t.startswith("D_"))
    + (("COST", "EVENT_ID"), ("PRESCRIPTIONS", "DRUG")),
    "eicu": tuple((t, c) for t, cols in EICU.items() for c, _ in cols if c in {"patientunitstayid", "uniquepid"})
    + (("patient", "patienthealthsystemstayid"), ("cost", "eventid"), ("medication", "drugname"), ("diagnosis", "diagnosisname"), ("treatment", "treatmentname")),
    "treqs": (("DEMOGRAPHIC", "HADM_ID"), ("DIAGNOSES", "HADM_ID"), ("PROCEDURES", "HADM_ID"),
              ("PRESCRIPTIONS", "HADM_ID"), ("LAB", "HADM_ID"), ("LAB", "LABEL"), ("LAB", "SUBJECT_ID"),
              ("DIAGNOSES", "SUBJECT_ID"), ("DIAGNOSES", "SHORT_TITLE"), ("PRESCRIPTIONS", "SUBJECT_ID"),
              ("PRESCRIPTIONS", "DRUG")),
}


def ddl(schema: Schema, table: str, primary_key: str | None = None) -> str:
    """``CREATE TABLE`` text for one table (``primary_key`` marks that column ``PRIMARY KEY``)."""
    cols = [f"{name} {typ}{' PRIMARY KEY' if name == primary_key else ''}" for name, typ in schema[table]]
    return f"CREATE TABLE {table} (\n    " + ",\n    ".join(cols) + "\n)"


def write_sqlite(path: Path, schema: Schema, rows: dict[str, Iterable[Sequence[Any]]], *, db_name: str,
                 primary_keys: dict[str, str] | None = None) -> dict[str, int]:
    """Write a fresh SQLite file at ``path`` (atomically) with ``rows`` per table, in schema order.

    Args:
        path: Destination file; replaced if it exists.
        schema: Table → columns.
        rows: Table → row tuples in column order (every table of ``schema`` must be present).
        db_name: Key into :data:`INDEXES`.
        primary_keys: Table → primary-key column.

    Returns:
        Row count per table.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp, isolation_level=None)
    counts: dict[str, int] = {}
    try:
        con.execute("PRAGMA page_size = 4096")
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        con.execute("BEGIN")
        for table in schema:
            con.execute(ddl(schema, table, (primary_keys or {}).get(table)))
            marks = ", ".join("?" * len(schema[table]))
            cur = con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows[table])
            counts[table] = cur.rowcount
        for table, column in INDEXES[db_name]:
            con.execute(f"CREATE INDEX idx_{table.lower()}_{column.lower()} ON {table} ({column})")
        con.execute("COMMIT")
        con.execute("ANALYZE")
    finally:
        con.close()
    os.replace(tmp, path)
    return counts
