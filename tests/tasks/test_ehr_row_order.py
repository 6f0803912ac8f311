"""Stored row order says nothing about time in any EHR table (issue 34).

Before: LABEVENTS rows were stored in time order per patient 99 % of the time, so "first/last" questions were
answerable without ORDER BY. Here, for every table with a time column, the share of one patient's consecutive
stored rows (by rowid, what a query without ORDER BY returns) that are in time order is near one half.
"""

from __future__ import annotations

import sqlite3

import pytest

#: (table, patient column, time column) per database; every EHR table of each schema with a time.
TIMED = {
    "mimic_iii": [("admissions", "subject_id", "admittime"), ("labevents", "subject_id", "charttime"),
                  ("chartevents", "subject_id", "charttime"), ("prescriptions", "subject_id", "startdate"),
                  ("inputevents_cv", "subject_id", "charttime"), ("outputevents", "subject_id", "charttime"),
                  ("microbiologyevents", "subject_id", "charttime"), ("icustays", "subject_id", "intime"),
                  ("transfers", "subject_id", "intime"), ("diagnoses_icd", "subject_id", "charttime"),
                  ("procedures_icd", "subject_id", "charttime"), ("cost", "subject_id", "chargetime")],
    "eicu": [("patient", "uniquepid", "unitadmittime"), ("lab", "patientunitstayid", "labresulttime"),
             ("vitalperiodic", "patientunitstayid", "observationtime"),
             ("medication", "patientunitstayid", "drugstarttime"),
             ("intakeoutput", "patientunitstayid", "intakeoutputtime"),
             ("diagnosis", "patientunitstayid", "diagnosistime"), ("treatment", "patientunitstayid", "treatmenttime"),
             ("microlab", "patientunitstayid", "culturetakentime"), ("cost", "uniquepid", "chargetime")],
    "treqs": [("lab", "subject_id", "charttime"), ("demographic", "subject_id", "admittime")],
}


def _in_time_order(con: sqlite3.Connection, table: str, who: str, when: str) -> tuple[float, int]:
    """(share of a patient's consecutive stored rows with non-decreasing time, over pairs of distinct times)."""
    rows = con.execute(f"select {who}, {when} from {table} where {when} is not null order by rowid").fetchall()
    last: dict = {}
    up = pairs = 0
    for patient, t in rows:
        if patient in last and last[patient] != t:
            pairs += 1
            up += last[patient] < t
        last[patient] = t
    return (up / pairs if pairs else 0.5), pairs


@pytest.mark.parametrize("family", sorted(TIMED))
def test_stored_row_order_is_independent_of_time(dbs, family):
    con = sqlite3.connect(f"file:{dbs / f'{family}.db'}?mode=ro", uri=True)
    try:
        tables = {r[0].lower() for r in con.execute("select name from sqlite_master where type = 'table'")}
        for table, who, when in TIMED[family]:
            assert table in tables, (family, table)
            share, pairs = _in_time_order(con, table, who, when)
            if pairs < 40:
                continue  # too few pairs in a tiny build to say anything
            # random order: share ~ 0.5 with sd <= 0.5/sqrt(pairs); time order gave 0.99
            assert abs(share - 0.5) < 0.1 + 2.5 * 0.5 / pairs ** 0.5, (family, table, share, pairs)
    finally:
        con.close()
