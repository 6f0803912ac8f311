"""The synthetic hospital and its three databases: determinism, exact schemas, conventions, benchmark-style SQL."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import sys

import pandas as pd
import pytest

from medagentgym.tasks.ehr_synth.eicu_db import build_eicu
from medagentgym.tasks.ehr_synth.eicu_view import eicu_view
from medagentgym.tasks.ehr_synth.hospital import SIZES, draw_hospital
from medagentgym.tasks.ehr_synth.mimic_iii_db import build_mimic_iii
from medagentgym.tasks.ehr_synth.treqs_db import build_treqs

# Expected schemas, written out from the EHRSQL / MIMICSQL DDL (not imported from the code under test).
MIMIC_EXPECTED = {
    "PATIENTS": "ROW_ID SUBJECT_ID GENDER DOB DOD",
    "ADMISSIONS": "ROW_ID SUBJECT_ID HADM_ID ADMITTIME DISCHTIME ADMISSION_TYPE ADMISSION_LOCATION DISCHARGE_LOCATION "
                  "INSURANCE LANGUAGE MARITAL_STATUS ETHNICITY AGE",
    "D_ICD_DIAGNOSES": "ROW_ID ICD9_CODE SHORT_TITLE LONG_TITLE",
    "D_ICD_PROCEDURES": "ROW_ID ICD9_CODE SHORT_TITLE LONG_TITLE",
    "D_LABITEMS": "ROW_ID ITEMID LABEL",
    "D_ITEMS": "ROW_ID ITEMID LABEL LINKSTO",
    "DIAGNOSES_ICD": "ROW_ID SUBJECT_ID HADM_ID ICD9_CODE CHARTTIME",
    "PROCEDURES_ICD": "ROW_ID SUBJECT_ID HADM_ID ICD9_CODE CHARTTIME",
    "LABEVENTS": "ROW_ID SUBJECT_ID HADM_ID ITEMID CHARTTIME VALUENUM VALUEUOM",
    "PRESCRIPTIONS": "ROW_ID SUBJECT_ID HADM_ID STARTDATE ENDDATE DRUG DOSE_VAL_RX DOSE_UNIT_RX ROUTE",
    "COST": "ROW_ID SUBJECT_ID HADM_ID EVENT_TYPE EVENT_ID CHARGETIME COST",
    "CHARTEVENTS": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID ITEMID CHARTTIME VALUENUM VALUEUOM",
    "INPUTEVENTS_CV": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID CHARTTIME ITEMID AMOUNT",
    "OUTPUTEVENTS": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID CHARTTIME ITEMID VALUE",
    "MICROBIOLOGYEVENTS": "ROW_ID SUBJECT_ID HADM_ID CHARTTIME SPEC_TYPE_DESC ORG_NAME",
    "ICUSTAYS": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID FIRST_CAREUNIT LAST_CAREUNIT FIRST_WARDID LAST_WARDID INTIME OUTTIME",
    "TRANSFERS": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID EVENTTYPE CAREUNIT WARDID INTIME OUTTIME",
}
EICU_EXPECTED = {
    "patient": "uniquepid patienthealthsystemstayid patientunitstayid gender age ethnicity hospitalid wardid "
               "admissionheight admissionweight dischargeweight hospitaladmittime hospitaladmitsource unitadmittime "
               "unitdischargetime hospitaldischargetime hospitaldischargestatus",
    "diagnosis": "diagnosisid patientunitstayid diagnosisname diagnosistime icd9code",
    "treatment": "treatmentid patientunitstayid treatmentname treatmenttime",
    "lab": "labid patientunitstayid labname labresult labresulttime",
    "medication": "medicationid patientunitstayid drugname dosage routeadmin drugstarttime drugstoptime",
    "cost": "costid uniquepid patienthealthsystemstayid eventtype eventid chargetime cost",
    "allergy": "allergyid patientunitstayid drugname allergyname allergytime",
    "intakeoutput": "intakeoutputid patientunitstayid cellpath celllabel cellvaluenumeric intakeoutputtime",
    "microlab": "microlabid patientunitstayid culturesite organism culturetakentime",
    "vitalperiodic": "vitalperiodicid patientunitstayid temperature sao2 heartrate respiration systemicsystolic "
                     "systemicdiastolic systemicmean observationtime",
}
TREQS_EXPECTED = {
    "DEMOGRAPHIC": "SUBJECT_ID HADM_ID NAME MARITAL_STATUS AGE DOB GENDER LANGUAGE RELIGION ADMISSION_TYPE DAYS_STAY "
                   "INSURANCE ETHNICITY EXPIRE_FLAG ADMISSION_LOCATION DISCHARGE_LOCATION DIAGNOSIS DOD DOB_YEAR DOD_YEAR "
                   "ADMITTIME DISCHTIME ADMITYEAR",
    "DIAGNOSES": "SUBJECT_ID HADM_ID ICD9_CODE SHORT_TITLE LONG_TITLE",
    "PROCEDURES": "SUBJECT_ID HADM_ID ICD9_CODE SHORT_TITLE LONG_TITLE",
    "PRESCRIPTIONS": "SUBJECT_ID HADM_ID ICUSTAY_ID DRUG_TYPE DRUG FORMULARY_DRUG_CD ROUTE DRUG_DOSE",
    "LAB": "SUBJECT_ID HADM_ID ITEMID CHARTTIME FLAG VALUE_UNIT LABEL FLUID CATEGORY",
}


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    """The three tiny databases (seed 0) in ``a``; ``b`` holds a second build from a fresh draw of the same seed."""
    out = {}
    for tag in ("a", "b"):
        raw = draw_hospital(SIZES["tiny"], seed=0)
        d = tmp_path_factory.mktemp(f"ehr_{tag}")
        build_mimic_iii(raw, d / "mimic_iii.db", seed=0)
        build_treqs(raw, d / "treqs.db", seed=0)
        build_eicu(eicu_view(raw, seed=0), d / "eicu.db", seed=0)
        out[tag] = d
    return out


def _columns(db, table):
    con = sqlite3.connect(db)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def _tables(db):
    con = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"))
    finally:
        con.close()


def test_draw_is_deterministic_and_seed_sensitive():
    a, b, c = draw_hospital(12, seed=3), draw_hospital(12, seed=3), draw_hospital(12, seed=4)
    for name in a.tables:
        pd.testing.assert_frame_equal(a.tables[name], b.tables[name])
    assert not a.tables["ADMISSIONS"].equals(c.tables["ADMISSIONS"])


def test_draw_has_realistic_noise():
    raw = draw_hospital(SIZES["tiny"], seed=0).tables
    labs, rx = raw["LABEVENTS"], raw["PRESCRIPTIONS"]
    assert labs["VALUENUM"].isna().any() or labs["VALUEUOM"].isna().any()  # rows the builder must drop
    assert (~rx["DOSE_VAL_RX"].str.fullmatch(r"\d+")).any()  # range / decimal doses
    assert rx["DRUG"].map(lambda s: s != s.lower() and s != s.upper()).any()  # mixed case names
    assert raw["MICROBIOLOGYEVENTS"]["CHARTTIME"].isna().any() or len(raw["MICROBIOLOGYEVENTS"]) < 20


def test_databases_are_byte_identical_per_seed(dbs):
    for name in ("mimic_iii.db", "eicu.db", "treqs.db"):
        assert _sha(dbs["a"] / name) == _sha(dbs["b"] / name), name


def test_databases_are_identical_across_processes(dbs, tmp_path):
    """A fresh interpreter with another string-hash seed writes the same bytes (no set-order dependence)."""
    code = (
        "import sys; from pathlib import Path; from medagentgym.tasks.ehr_synth.hospital import draw_hospital; "
        "from medagentgym.tasks.ehr_synth.mimic_iii_db import build_mimic_iii; from medagentgym.tasks.ehr_synth.eicu_view import eicu_view; "
        "from medagentgym.tasks.ehr_synth.eicu_db import build_eicu; raw = draw_hospital(30, seed=0); d = Path(sys.argv[1]); "
        "build_mimic_iii(raw, d / 'mimic_iii.db', seed=0); build_eicu(eicu_view(raw, seed=0), d / 'eicu.db', seed=0)"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env, timeout=600)
    for name in ("mimic_iii.db", "eicu.db"):
        assert _sha(tmp_path / name) == _sha(dbs["a"] / name), name


@pytest.mark.parametrize("db_name, expected", [("mimic_iii.db", MIMIC_EXPECTED), ("eicu.db", EICU_EXPECTED),
                                               ("treqs.db", TREQS_EXPECTED)])
def test_schema_is_exact(dbs, db_name, expected):
    db = dbs["a"] / db_name
    assert _tables(db) == sorted(expected)
    for table, cols in expected.items():
        assert _columns(db, table) == cols.split(), table


def test_mimic_conventions(dbs):
    con = sqlite3.connect(dbs["a"] / "mimic_iii.db")
    q = lambda sql: con.execute(sql).fetchall()
    assert q("select count(*) from admissions where dischtime is null")[0][0] >= 1
    lo, hi = q("select min(admittime), max(admittime) from admissions")[0]
    assert "2100-01-01" <= lo and hi <= "2105-12-31 23:59:00"
    assert q("select max(charttime) from labevents")[0][0] <= "2105-12-31 23:59:00"
    assert q("select count(*) from admissions where age <= 10 or age >= 90")[0][0] == 0
    assert {r[0] for r in q("select distinct itemid from chartevents")} <= {677, 834, 211, 618, 51, 8368, 52, 762, 920}
    assert {r[0] for r in q("select distinct gender from patients")} <= {"m", "f"}
    for table, col in (("prescriptions", "drug"), ("d_labitems", "label"), ("admissions", "admission_type"),
                       ("d_icd_diagnoses", "short_title"), ("labevents", "valueuom")):
        assert q(f"select count(*) from {table} where {col} != lower({col})")[0][0] == 0, table
    assert q("select count(*) from prescriptions where cast(dose_val_rx as integer) || '' != dose_val_rx")[0][0] == 0
    assert q("select count(*) from diagnoses_icd d join admissions a on d.hadm_id = a.hadm_id "
             "where d.charttime != a.admittime")[0][0] == 0
    n_events = sum(q(f"select count(*) from {t}")[0][0] for t in ("diagnoses_icd", "procedures_icd", "labevents", "prescriptions"))
    assert q("select count(*) from cost")[0][0] == n_events
    assert q("select count(*) from ( select d.icd9_code, count( distinct c.cost ) as n from cost c join diagnoses_icd d "
             "on c.event_id = d.row_id where c.event_type = 'diagnoses_icd' group by d.icd9_code ) where n > 1")[0][0] == 0
    rows = q("select row_id from labevents order by row_id")
    assert [r[0] for r in rows] == list(range(len(rows)))
    con.close()


def test_eicu_and_treqs_conventions(dbs):
    con = sqlite3.connect(dbs["a"] / "eicu.db")
    assert {r[0] for r in con.execute("select distinct gender from patient")} <= {"male", "female"}
    assert all(re.fullmatch(r"\d+", r[0]) for r in con.execute("select age from patient"))
    assert all(re.fullmatch(r"\d{3}-\d{3,6}", r[0]) for r in con.execute("select uniquepid from patient"))
    assert con.execute("select count(*) from patient where hospitaldischargetime is null "
                       "and (hospitaldischargestatus is not null or dischargeweight is not null)").fetchone()[0] == 0
    assert con.execute("select count(*) from patient where hospitaldischargetime is null").fetchone()[0] >= 1
    con.close()
    con = sqlite3.connect(dbs["a"] / "treqs.db")
    assert {r[0] for r in con.execute('select distinct "GENDER" from DEMOGRAPHIC')} <= {"m", "f"}  # lower-case, as MedAgentGym
    assert con.execute("select count(*) from DEMOGRAPHIC where typeof(AGE) != 'text'").fetchone()[0] == 0
    assert con.execute("select count(*) from DEMOGRAPHIC where cast(AGE as integer) > 89 and cast(AGE as integer) < 300 "
                       "or cast(AGE as integer) >= 300").fetchone()[0] == con.execute(
        "select count(*) from DEMOGRAPHIC where cast(AGE as integer) > 89").fetchone()[0]
    assert con.execute("select count(*) from PRESCRIPTIONS where DRUG_DOSE like '% %'").fetchone()[0] == 0
    con.close()


# A dozen queries in the public benchmarks' own style (EHRSQL MIMIC-III / eICU after the evaluator's rewriting,
# MIMICSQL with its double-quoted identifiers and values, lower-cased as MedAgentGym's): each must execute and return at least one row.
MIMIC_QUERIES = [
    "select count( distinct admissions.hadm_id ) from admissions where admissions.subject_id = {pid}",
    ("select prescriptions.drug from prescriptions where prescriptions.hadm_id in ( select admissions.hadm_id from "
     "admissions where admissions.subject_id = {pid} and admissions.dischtime is not null order by admissions.admittime "
     "asc limit 1 ) order by prescriptions.startdate desc limit 1"),
    ("select chartevents.valuenum from chartevents where chartevents.icustay_id in ( select icustays.icustay_id from "
     "icustays where icustays.hadm_id in ( select admissions.hadm_id from admissions where admissions.subject_id = {pid} "
     ") ) and chartevents.itemid in ( select d_items.itemid from d_items where d_items.label = 'heart rate' and "
     "d_items.linksto = 'chartevents' ) order by chartevents.charttime asc limit 1"),
    ("select d_icd_diagnoses.short_title from d_icd_diagnoses where d_icd_diagnoses.icd9_code in ( select t1.icd9_code "
     "from ( select diagnoses_icd.icd9_code, dense_rank( ) over ( order by count( * ) desc ) as c1 from diagnoses_icd "
     "where datetime( diagnoses_icd.charttime ) >= datetime( '2105-12-31 23:59:00', '-6 year' ) group by "
     "diagnoses_icd.icd9_code ) as t1 where t1.c1 <= 4 )"),
    ("select 24 * ( strftime( '%J', '2105-12-31 23:59:00' ) - strftime( '%J', admissions.admittime ) ) from admissions "
     "where admissions.dischtime is null"),
    ("select sum( cost.cost ) from cost where cost.hadm_id in ( select admissions.hadm_id from admissions where "
     "admissions.subject_id = {pid} )"),
    ("select max( labevents.valuenum ) from labevents where labevents.itemid in ( select d_labitems.itemid from "
     "d_labitems where d_labitems.label = 'creatinine' ) and strftime( '%Y', labevents.charttime ) >= '2100'"),
    "select count( * ) from transfers where transfers.careunit in ( 'micu', 'ccu', 'csru', 'sicu', 'tsicu' )",
]
EICU_QUERIES = [
    ("select patient.hospitaladmittime from patient where patient.uniquepid = '{upid}' order by "
     "patient.hospitaladmittime asc limit 1"),
    ("select vitalperiodic.heartrate from vitalperiodic where vitalperiodic.patientunitstayid in ( select "
     "patient.patientunitstayid from patient where patient.patienthealthsystemstayid in ( select "
     "patient.patienthealthsystemstayid from patient where patient.uniquepid = '{upid}' ) ) and "
     "vitalperiodic.heartrate is not null order by vitalperiodic.observationtime desc limit 1"),
    ("select t1.drugname from ( select medication.drugname, dense_rank( ) over ( order by count( * ) desc ) as c1 from "
     "medication group by medication.drugname ) as t1 where t1.c1 <= 3"),
    "select count( distinct patient.uniquepid ) from patient where patient.hospitaldischargetime is null",
    "select intakeoutput.celllabel from intakeoutput where intakeoutput.cellpath like '%output%' limit 1",
]
TREQS_QUERIES = [
    ('SELECT COUNT ( DISTINCT DEMOGRAPHIC."SUBJECT_ID" ) FROM DEMOGRAPHIC WHERE DEMOGRAPHIC."GENDER" = "f" AND '
     'DEMOGRAPHIC."AGE" < "90"'),
    ('SELECT AVG ( DEMOGRAPHIC."AGE" ) FROM DEMOGRAPHIC INNER JOIN DIAGNOSES on DEMOGRAPHIC.HADM_ID = DIAGNOSES.HADM_ID '
     'WHERE DEMOGRAPHIC."ADMISSION_TYPE" = "emergency"'),
    ('SELECT COUNT ( DISTINCT DEMOGRAPHIC."SUBJECT_ID" ) FROM DEMOGRAPHIC INNER JOIN LAB on DEMOGRAPHIC.HADM_ID = '
     'LAB.HADM_ID WHERE LAB."FLAG" = "abnormal" AND LAB."FLUID" = "blood"'),
    'SELECT DEMOGRAPHIC."MARITAL_STATUS", DEMOGRAPHIC."DOB" FROM DEMOGRAPHIC WHERE DEMOGRAPHIC."NAME" = "{name}"',
]


def test_benchmark_style_queries_execute_and_return_rows(dbs):
    con = sqlite3.connect(dbs["a"] / "mimic_iii.db")
    pid = con.execute("select subject_id from icustays order by row_id limit 1").fetchone()[0]
    for sql in MIMIC_QUERIES:
        assert con.execute(sql.format(pid=pid)).fetchall(), sql
    con.close()
    con = sqlite3.connect(dbs["a"] / "eicu.db")
    upid = con.execute("select uniquepid from patient order by patientunitstayid limit 1").fetchone()[0]
    for sql in EICU_QUERIES:
        assert con.execute(sql.format(upid=upid)).fetchall(), sql
    con.close()
    con = sqlite3.connect(dbs["a"] / "treqs.db")
    name = con.execute('select "NAME" from DEMOGRAPHIC limit 1').fetchone()[0]
    for sql in TREQS_QUERIES:
        assert con.execute(sql.format(name=name)).fetchall(), sql
    con.close()
