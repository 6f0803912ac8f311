"""Importers on small hand-written files in the real formats (MIMIC-III v1.4 CSVs, eICU CSVs, EHRSQL, MIMICSQL)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from medagentgym.tasks.base import TaskError
from medagentgym.tasks.ehr_synth import importers as im

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ehr"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("imported")
    im.import_mimic_iii(FIXTURES / "mimic_iii_csv", out / "mimic_iii.db", seed=0, n_patients=None)
    im.import_treqs(FIXTURES / "mimic_iii_csv", out / "treqs.db")
    im.import_eicu(FIXTURES / "eicu_csv", out / "eicu.db", seed=0)
    return out


def _q(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_mimic_csv_import_applies_ehrsql_conventions(imported):
    db = imported / "mimic_iii.db"
    # patient 1003 is 300 years old (MIMIC's > 89 shift): dropped by 10 < AGE < 90, with every event of theirs
    assert _q(db, "select distinct subject_id from admissions order by 1") == [(1001,), (1002,)]
    assert _q(db, "select count(*) from diagnoses_icd where subject_id = 1003") == [(0,)]
    assert _q(db, "select count(*) from admissions where dischtime is null") == [(1,)]  # one current patient
    assert all("2100-01-01" <= t <= "2105-12-31 23:59:00" for (t,) in _q(db, "select admittime from admissions"))
    # labs: the HEMOLYZED row (no value) and the outpatient row (no HADM_ID) are gone; units lower-cased
    assert sorted(_q(db, "select valueuom from labevents")) == [("meq/l",), ("mg/dl",), ("mg/dl",)]
    # prescriptions: the "325-650" range dose is dropped, "1,000" loses its comma, names lower-cased
    assert sorted(_q(db, "select drug, dose_val_rx from prescriptions")) == [
        ("furosemide", "40"), ("heparin", "5000"), ("vancomycin", "1000")]
    # chartevents: only the vital items (metavision heart rate 220045 is filtered out)
    assert {r[0] for r in _q(db, "select itemid from chartevents")} == {211, 51, 762}
    assert _q(db, "select count(*) from inputevents_cv") == [(1,)]  # the 'mg' row is dropped
    assert _q(db, "select count(*) from d_items where linksto = 'microbiologyevents'") == [(0,)]
    assert _q(db, "select count(*) from microbiologyevents where charttime is null") == [(0,)]  # date fallback
    # rows are stored in a seeded random order (issue 34): the units, not their order
    assert sorted(_q(db, "select careunit from transfers where careunit is not null")) == [("ccu",), ("micu",)]
    n_events = sum(_q(db, f"select count(*) from {t}")[0][0] for t in
                   ("diagnoses_icd", "procedures_icd", "labevents", "prescriptions"))
    assert _q(db, "select count(*) from cost") == [(n_events,)]


def test_treqs_import_lower_cases_and_keeps_native_dates(imported):
    db = imported / "treqs.db"
    rows = _q(db, 'select SUBJECT_ID, AGE, GENDER, ADMITYEAR, DAYS_STAY, EXPIRE_FLAG from DEMOGRAPHIC order by HADM_ID')
    assert rows[0] == ("1001", "60", "m", "2140", "5", "0")
    assert rows[3][1] == "89"  # 1003 is 300 in MIMIC's shifted calendar: 89 + 300 - 300
    assert _q(db, 'select DRUG_DOSE from PRESCRIPTIONS where DRUG = "heparin"') == [("5000unit",)]
    assert _q(db, 'select VALUE_UNIT from LAB where FLAG = "abnormal"') == [("2.3mg/dl",)]
    assert _q(db, 'select count(*) from LAB') == [(4,)]  # the outpatient row (no HADM_ID) is dropped


def test_eicu_csv_import_applies_conventions(imported):
    db = imported / "eicu.db"
    assert _q(db, "select age, gender from patient order by patientunitstayid") == [
        ("67", "female"), ("68", "female"), ("90", "male")]
    names = {r[0] for r in _q(db, "select diagnosisname from diagnosis")}
    assert "sepsis - severe" in names and "atrial fibrillation - with rapid ventricular response" in names
    assert {r[0] for r in _q(db, "select treatmentname from treatment")} >= {"mechanical ventilation"}
    assert _q(db, "select count(*) from medication") == [(2,)]  # the cancelled vancomycin order is dropped
    assert _q(db, "select celllabel from intakeoutput order by celllabel") == [("ns",), ("urine",)]
    assert _q(db, "select count(*) from patient where hospitaldischargetime is null") == [(1,)]
    assert _q(db, "select count(*) from patient where hospitaldischargetime is null and "
                  "(hospitaldischargestatus is not null or dischargeweight is not null)") == [(0,)]
    assert all(t.startswith("210") for (t,) in _q(db, "select labresulttime from lab"))


def test_question_files_are_reinstantiated_by_execution(imported):
    items, stats = im.ehrsql_instances(FIXTURES / "ehrsql_mimic_iii.json", imported / "mimic_iii.db", family="mimic_iii")
    assert stats == {"records": 4, "kept": 3, "unanswerable": 1, "errors": 0, "empty": 0}
    by_source = {i.metadata["source_id"]: i for i in items}
    assert by_source["0a1b2c3d4e5f60718293a4b5"].answer == 2
    rewritten = by_source["1a1b2c3d4e5f60718293a4b5"].solution
    assert "current_time" not in rewritten and "'2105-12-31 23:59:00'" in rewritten and "%Y" in rewritten
    assert by_source["1a1b2c3d4e5f60718293a4b5"].answer_type == "boolean"
    assert "100.0" in by_source["3a1b2c3d4e5f60718293a4b5"].solution  # heart_rate_upper substituted
    e_items, e_stats = im.ehrsql_instances(FIXTURES / "ehrsql_eicu.json", imported / "eicu.db", family="eicu")
    assert e_stats["kept"] == 2 and e_items[0].answer == "female"
    assert e_items[1].answer_type == "set" and "sepsis - severe" in e_items[1].answer
    t_items, t_stats = im.mimicsql_instances(FIXTURES / "mimicsql.jsonl", imported / "treqs.db")
    assert t_stats["kept"] == 3 and t_items[0].answer == 1 and t_items[2].answer == 1


def test_missing_file_is_named(tmp_path):
    (tmp_path / "PATIENTS.csv").write_text("ROW_ID,SUBJECT_ID,GENDER,DOB,DOD\n")
    with pytest.raises(TaskError, match="ADMISSIONS"):
        im.read_mimic_csv_dir(tmp_path)


def test_postprocess_matches_ehrsql_evaluator():
    out = im.postprocess_ehrsql("SELECT strftime('%j', x) FROM t WHERE a < = current_time AND b > sao2_lower AND b < sao2_upper")
    assert out == "select strftime('%J', x) from t where a <= '2105-12-31 23:59:00' and b > 95.0 and b < 100.0"


def test_a_question_file_cannot_attach_or_write_a_host_file(imported, tmp_path):
    """A question file's SQL runs on the host: ATTACH would create a database file wherever the file says."""
    planted = tmp_path / "planted.db"
    queries = [f"attach database '{planted}' as p",
               f"select 1 from patients where 0 union all select count(*) from pragma_database_list",
               "select count(*) from patients"]
    records = [{"id": f"r{k}", "question": "How many?", "query": q, "split": "train"} for k, q in enumerate(queries)]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(records))
    items, stats = im.ehrsql_instances(path, imported / "mimic_iii.db", family="mimic_iii")
    assert not planted.exists(), "ATTACH created a file on the host"
    assert stats["errors"] == 2 and [i.metadata["source_id"] for i in items] == ["r2"], stats
