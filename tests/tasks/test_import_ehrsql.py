"""EHR SQL importers: public question records (EHRSQL, MedAgentGym, MIMICSQL formats) re-instantiated over a
small synthetic database, answers recomputed by execution, bad records reported with their lines."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym import tasks
from medagentgym.tasks.base import TaskError
from medagentgym.tasks.graders import render_answer
from medagentgym.tasks.importers import check_import, import_files
from medagentgym.tasks.importers._slots import find_slots, replace_in_text, result_of
from medagentgym.tasks.importers.ehrsql import render_mimicsql

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "import_ehr"
SANDBOX = "bwrap" if shutil.which("bwrap") else "local"


def _import(dbs: Path, root: Path, family: str, *files: str):
    return import_files(family, [FIXTURES / f for f in files], root, db=dbs / f"{family}.db")


def _rows(db: Path, sql: str, *params) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def test_absent_values_are_redrawn_from_the_database_and_answers_executed(dbs, tmp_path):
    manifest, report = _import(dbs, tmp_path, "mimic_iii", "ehrsql_mimic_iii.json")
    assert report.records == 7 and report.kept == 4
    assert report.by_reason == {"unanswerable": 1, "not_json": 1, "unstated_value": 1}
    assert [r.line for r in report.rejected] == [5, 6, 7]  # the line each record starts on in the JSON array
    fam = tasks.make("mimic_iii", root=tmp_path)
    items = {i.metadata["source_id"]: i for s in ("train", "test") for i in fam.instances(s)}
    assert manifest["source"] == "import" and manifest["counts"] == {"train": 1, "test": 3}
    db = tmp_path / "mimic_iii" / "mimic_iii.db"
    for inst in items.values():
        for name, (old, new) in inst.metadata["reinstantiated"].items():
            assert str(old) not in inst.question and str(new).lower() in inst.question.lower(), name
        # the gold is what the rewritten SQL returns on the family's own copy of the database
        assert result_of(_rows(db, inst.solution), inst.solution)[:2] == (inst.answer, inst.answer_type)
        assert fam.grade(inst, render_answer(inst.answer_type, inst.answer)).correct
    route = items["fx-route-1"]
    (drug,) = [new for _old, new in route.metadata["reinstantiated"].values()]
    assert _rows(db, "select count(*) from prescriptions where drug = ?", drug)[0][0] > 0
    lab = items["fx-lab-1"].metadata["reinstantiated"]
    patient, label = lab["patient_id"][1], lab["lab_name"][1]  # drawn together: that patient has that lab
    assert _rows(db, "select count(*) from labevents join d_labitems using (itemid) where subject_id = ? and label = ?",
                 patient, label)[0][0] > 0
    assert items["fx-bool-1"].answer_type == "boolean"
    assert "acetaminophen" in items["fx-bool-1"].question  # an existing value is kept


def test_yes_no_questions_get_both_answers_and_distinct_patients(dbs, tmp_path):
    _, report = _import(dbs, tmp_path, "eicu", "eicu_valid_tasks.jsonl")
    assert report.kept == 13 and report.by_reason == {"not_json": 1} and report.rejected[0].line == 14
    items = tasks.make("eicu", root=tmp_path).instances("test")
    answers = [i.answer for i in items]
    assert len(items) == 12 and set(answers) == {True, False}
    assert len({i.question for i in items}) == 12  # no two records re-instantiated onto the same patient
    assert answers.count(True) == answers.count(False)  # each steered towards the rarer answer so far


def test_mimicsql_case_is_fixed_and_paraphrases_fall_back_to_a_template_question(dbs, tmp_path):
    _, report = _import(dbs, tmp_path, "treqs", "treqs_test_tasks.jsonl", "mimicsql_test.jsonl")
    assert report.kept == 4 and report.notes["case_fixed"] >= 1
    items = {i.metadata["source_id"]: i for s in ("train", "test") for i in tasks.make("treqs", root=tmp_path).instances(s)}
    female = items["fx-treqs-1"]
    assert "demographic.'gender' = 'f'" in female.solution  # the stored (lower) case, the question unchanged
    assert female.question.startswith("how many patients are female and were prescribed ")
    renamed = items["fx-treqs-2"]  # "zz drug two" is not how the value is stored: the question is rendered
    new_drug = renamed.metadata["reinstantiated"]["prescriptions.drug"][1]
    assert renamed.question == f"what is the number of patients whose drug is {new_drug.lower()}?"
    assert items["fx-mimicsql-1"].answer_type == "text"  # the original MIMICSQL format (upper case, "quotes")


def test_import_is_reproducible_and_refuses_to_overwrite(dbs, tmp_path):
    a, _ = _import(dbs, tmp_path / "a", "mimic_iii", "ehrsql_mimic_iii.json")
    b, _ = _import(dbs, tmp_path / "b", "mimic_iii", "ehrsql_mimic_iii.json")
    assert a["files"]["test.jsonl"] == b["files"]["test.jsonl"]
    with pytest.raises(TaskError, match="--force"):
        _import(dbs, tmp_path / "a", "mimic_iii", "ehrsql_mimic_iii.json")
    with pytest.raises(TaskError, match="not an SQLite database"):
        import_files("mimic_iii", [FIXTURES / "ehrsql_mimic_iii.json"], tmp_path / "c",
                     db=FIXTURES / "ehrsql_mimic_iii.json")


def test_imported_sql_family_passes_its_oracle_and_rejects_adversaries(dbs, tmp_path):
    _import(dbs, tmp_path, "eicu", "eicu_valid_tasks.jsonl")
    report = check_import("eicu", tmp_path)
    assert report["test"] == {"instances": 12, "oracle": 1.0, "empty": 0.0, "shotgun": 0.0}


def test_cli_then_rollout_uses_the_import_like_a_build(dbs, tmp_path):
    out = tmp_path / "imported"
    done = subprocess.run([sys.executable, "-m", "medagentgym", "import", "--family", "treqs", "--from",
                           str(FIXTURES / "treqs_test_tasks.jsonl"), "--db", str(dbs / "treqs.db"), "--out", str(out),
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["kept"] == 3
    roll = subprocess.run([sys.executable, "-m", "medagentgym", "rollout", "--tasks-root", str(out),
                           "--families", "treqs", "--split", "test", "--policy", "oracle", "--out",
                           str(tmp_path / "roll.jsonl"), "--sandbox", SANDBOX, "--allow-unisolated", "--no-progress",
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert roll.returncode == 0, roll.stderr
    summary = json.loads(roll.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["success_rate"] == 1.0
    bad = subprocess.run([sys.executable, "-m", "medagentgym", "import", "--family", "treqs", "--from",
                          str(tmp_path / "missing.jsonl"), "--out", str(out), "--force"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no task file" in bad.stderr


def test_slot_helpers():
    slots = find_slots("select 1 from p where p.drug = 'it''s' and p.subject_id = 12 and d.linksto = 'chartevents'",
                       None)
    assert [(s.column, s.value) for s in slots] == [("drug", "it's"), ("subject_id", 12)]
    named = find_slots("select 1 from t where t.wardid = 12 and t.x = 5", {"ward_id": 12.0})
    assert [(s.name, s.value) for s in named] == [("ward_id", 12)]
    assert replace_in_text("patient 1001 on heparin; heparin sodium", {"heparin sodium": "asa", "heparin": "b"}) \
        == "patient 1001 on b; asa"
    assert result_of([(0,)], "select count(*) from t")[1] == ""  # a bare 0 is degenerate
    assert result_of([("a", 1), ("a", 1)], "select x, y from t")[:2] == (["a", 1], "list")
    assert render_mimicsql("select demographic.'age' from demographic where demographic.'subject_id' = '7'") \
        == "what is the age of patients whose patient id is 7?"


def test_public_sql_can_only_read(dbs, tmp_path):
    from medagentgym.tasks.importers._slots import DIALECTS, Reinstantiator

    engine = Reinstantiator(dbs / "mimic_iii.db", DIALECTS["mimic_iii"])
    try:
        target = tmp_path / "planted.db"
        for sql in (f"attach database '{target}' as planted", "delete from admissions",
                    "create table x (a int)", "update admissions set subject_id = 1"):
            _, kind, why = engine.answer_of(sql)
            assert kind == "" and "not authorized" in why, sql
        assert not target.exists()
        assert engine.answer_of("select count(*) from admissions")[0] > 0  # nothing was deleted
    finally:
        engine.close()


def test_the_question_field_shown_is_stated_and_the_template_can_be_chosen(dbs, tmp_path):
    """Issue 34: MedAgentGym's harness shows EHRSQL's canonical 'template'; the importer shows the paraphrased
    'question' by default, the report says so, and --question-field template shows the template instead."""
    _, report = _import(dbs, tmp_path / "q", "mimic_iii", "ehrsql_mimic_iii.json")
    assert "'question' field" in report.questions and "--question-field template" in report.questions
    assert report.to_dict()["questions"] == report.questions
    assert report.notes["question_from_question"] == report.kept
    manifest, report = import_files("mimic_iii", [FIXTURES / "ehrsql_mimic_iii.json"], tmp_path / "t",
                                    db=dbs / "mimic_iii.db", question_field="template")
    assert "'template' field" in report.questions
    assert report.notes["question_from_template"] == report.kept == 4
    items = {i.metadata["source_id"]: i for s in ("train", "test") for i in
             tasks.make("mimic_iii", root=tmp_path / "t").instances(s)}
    assert items["fx-route-1"].question.startswith("what is the intake method of ")  # the template's wording
    with pytest.raises(TaskError, match="--question-field"):
        import_files("mimic_iii", [FIXTURES / "ehrsql_mimic_iii.json"], tmp_path / "x", db=dbs / "mimic_iii.db",
                     question_field="paraphrase")


def test_public_answers_can_show_the_template(tmp_path):
    path = tmp_path / "rec.jsonl"
    path.write_text(json.dumps({"db_id": "mimic_iii", "question": "did pt 5 get aspirin?", "template":
                                "has patient 5 been prescribed aspirin?", "query": "select count(*)>0 from "
                                "prescriptions where prescriptions.drug = 'aspirin'", "id": "r1", "split": "test",
                                "answer": ["1"]}) + "\n")
    _, report = import_files("mimic_iii", [path], tmp_path / "out", answers="public", question_field="template",
                             size="tiny")
    (inst,) = tasks.make("mimic_iii", root=tmp_path / "out").instances("test")
    assert inst.question == "has patient 5 been prescribed aspirin?" and inst.metadata["question_field"] == "template"
    assert report.notes["question_from_template"] == 1


def test_import_without_db_says_first_that_it_builds_the_synthetic_database(tmp_path):
    done = subprocess.run([sys.executable, "-m", "medagentgym", "import", "--family", "treqs", "--from",
                           str(FIXTURES / "treqs_test_tasks.jsonl"), "--size", "tiny", "--out",
                           str(tmp_path / "imported")], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("import: no --db given: building treqs's synthetic database first (30 patients, "
                            "--size tiny: seconds)") and "pass --db" in first
