"""Build MIMICSQL's (TREQS) five-table database from raw MIMIC-III-shaped frames.

Conventions (MIMICSQL's table builder, per the fact sheet): DEMOGRAPHIC = ADMISSIONS joined with PATIENTS,
one row per admission, with a synthetic NAME per patient, AGE = ADMITYEAR - DOB_YEAR (ages above 89, MIMIC's
300-year shift, become 89 + age - 300), DAYS_STAY in whole days, EXPIRE_FLAG from PATIENTS; DIAGNOSES and
PROCEDURES = the *_ICD rows inner-joined with their dictionary; PRESCRIPTIONS with DRUG_DOSE = dose value and
unit glued; LAB = lab rows that have an admission, a value and a unit, joined with D_LABITEMS, VALUE_UNIT glued.
Values are lower-cased, as in MedAgentGym's MIMICSQL (its gold SQL compares lower-case literals such as
``gender = 'f'``, ``admission_type = 'newborn'``), procedure codes lose their leading zeros (the MIMICSQL builder
read them as numbers: ``'93'`` for 0093); dates stay in MIMIC's own shifted calendar (no EHRSQL time shift);
every column is text except DOD_YEAR (a float year, NULL when the patient is alive).
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd

from medagentgym.tasks.ehr_synth import vocab_items as v
from medagentgym.tasks.ehr_synth.conventions import fmt_time, row_order
from medagentgym.tasks.ehr_synth.hospital import RawHospital
from medagentgym.tasks.ehr_synth.schemas import TREQS, write_sqlite


def _text(x) -> str | None:
    if x is None or (isinstance(x, float) and pd.isna(x)) or x is pd.NaT or x is pd.NA:
        return None
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def patient_name(subject_id: int, seed: int = 0) -> str:
    """A stable synthetic full name for a patient id."""
    rng = random.Random(f"treqs-name:{seed}:{subject_id}")
    return f"{rng.choice(v.FIRST_NAMES)} {rng.choice(v.LAST_NAMES)}"


def _demographic(raw: RawHospital, seed: int) -> list[tuple]:
    adm = raw.tables["ADMISSIONS"]
    pat = raw.tables["PATIENTS"].set_index("SUBJECT_ID")
    rows = []
    for rec in adm.itertuples(index=False):
        p = pat.loc[rec.SUBJECT_ID]
        admit, disch = pd.Timestamp(rec.ADMITTIME), pd.Timestamp(rec.DISCHTIME)
        dob = pd.Timestamp(p["DOB"])
        dod = None if pd.isna(p["DOD"]) else pd.Timestamp(p["DOD"])
        age = admit.year - dob.year
        if age > 89:
            age = 89 + age - 300
        rows.append((
            str(rec.SUBJECT_ID), str(rec.HADM_ID), raw.names.get(rec.SUBJECT_ID) or patient_name(rec.SUBJECT_ID, seed),
            _text(rec.MARITAL_STATUS),
            str(age), fmt_time(dob), p["GENDER"], _text(rec.LANGUAGE), _text(rec.RELIGION), rec.ADMISSION_TYPE,
            str((disch - admit).days), rec.INSURANCE, rec.ETHNICITY, str(int(p["EXPIRE_FLAG"])), rec.ADMISSION_LOCATION,
            rec.DISCHARGE_LOCATION, rec.DIAGNOSIS, fmt_time(dod), str(dob.year), None if dod is None else float(dod.year),
            fmt_time(admit), fmt_time(disch), str(admit.year),
        ))
    return rows


def _coded(events: pd.DataFrame, dictionary: pd.DataFrame) -> list[tuple]:
    merged = events.merge(dictionary[["ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"]], on="ICD9_CODE", how="inner", sort=False)
    merged = merged.sort_values("ROW_ID", kind="stable")
    return [(str(r.SUBJECT_ID), str(r.HADM_ID), r.ICD9_CODE, r.SHORT_TITLE, r.LONG_TITLE)
            for r in merged.itertuples(index=False)]


def _prescriptions(raw: RawHospital) -> list[tuple]:
    icu = raw.tables["ICUSTAYS"].sort_values("INTIME").drop_duplicates("HADM_ID").set_index("HADM_ID")["ICUSTAY_ID"]
    rx = raw.tables["PRESCRIPTIONS"]
    rows = []
    for r in rx.itertuples(index=False):
        stay = r.ICUSTAY_ID if not pd.isna(r.ICUSTAY_ID) else icu.get(r.HADM_ID)
        dose = None if pd.isna(r.DOSE_VAL_RX) else f"{r.DOSE_VAL_RX}{'' if pd.isna(r.DOSE_UNIT_RX) else r.DOSE_UNIT_RX}"
        rows.append((str(r.SUBJECT_ID), str(r.HADM_ID), _text(stay), _text(r.DRUG_TYPE), r.DRUG,
                     _text(r.FORMULARY_DRUG_CD), _text(r.ROUTE), dose))
    return rows


def _labs(raw: RawHospital) -> list[tuple]:
    labs = raw.tables["LABEVENTS"].dropna(subset=["HADM_ID", "VALUE", "VALUEUOM"])
    items = raw.tables["D_LABITEMS"][["ITEMID", "LABEL", "FLUID", "CATEGORY"]]
    merged = labs.merge(items, on="ITEMID", how="inner", sort=False).sort_values("ROW_ID", kind="stable")
    return [(str(r.SUBJECT_ID), _text(r.HADM_ID), str(r.ITEMID), fmt_time(r.CHARTTIME), _text(r.FLAG),
             f"{r.VALUE}{r.VALUEUOM}", r.LABEL, r.FLUID, r.CATEGORY) for r in merged.itertuples(index=False)]


def _lower(rows: list[tuple]) -> list[tuple]:
    return [tuple(x.lower() if isinstance(x, str) else x for x in row) for row in rows]


def treqs_rows(raw: RawHospital, seed: int = 0) -> dict[str, list[tuple]]:
    """The five MIMICSQL tables as row tuples in :data:`schemas.TREQS` column order (text lower-cased)."""
    t = raw.tables
    procedures = [(s, h, str(int(code)) if str(code).isdigit() else code, short, long_)
                  for s, h, code, short, long_ in _coded(t["PROCEDURES_ICD"], t["D_ICD_PROCEDURES"])]
    return {
        "DEMOGRAPHIC": _lower(_demographic(raw, seed)),
        "DIAGNOSES": _lower(_coded(t["DIAGNOSES_ICD"], t["D_ICD_DIAGNOSES"])),
        "PROCEDURES": _lower(procedures),
        "PRESCRIPTIONS": _lower(_prescriptions(raw)),
        "LAB": _lower(_labs(raw)),
    }


def build_treqs(raw: RawHospital, path: Path, *, seed: int = 0) -> dict[str, int]:
    """Write ``path`` (SQLite) with the five MIMICSQL tables, rows in a seeded random order (stored order says
    nothing about time); returns row counts per table."""
    rows = {table: [v[k] for k in row_order(len(v), seed, table)] for table, v in treqs_rows(raw, seed).items()}
    return write_sqlite(path, TREQS, rows, db_name="treqs")
