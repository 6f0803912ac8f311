"""The ``public`` answer convention: imported records keep the benchmark's published gold, graded as the benchmark's
scorer grades it (EHRSQL, TREQS, N-PowerAI), records with a defective published gold set aside with the reason.

Fixtures (``tests/fixtures/public_answers/``) are small files written for these tests in MedAgentGym's public
formats: made-up patients and values for the EHR families, N-PowerAI questions whose answers our snippets computed
(plus the public file's defects reproduced: a constant group, the paired power at n = 42, the ANOVA quirk).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medagentgym import tasks
from medagentgym.tasks.base import TaskError
from medagentgym.tasks.graders import grade
from medagentgym.tasks.importers import import_files
from medagentgym.tasks.importers.public import (
    check_public_answers,
    ehr_gold_defect,
    known_wrong,
    public_renderings,
    treqs_single_row,
)

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "public_answers"
FILES = {"mimic_iii": "mimic_iii_tasks.jsonl", "eicu": "eicu_tasks.jsonl", "treqs": "treqs_tasks.jsonl",
         "npowerai": "npowerai_tasks.jsonl"}
#: family -> (records, imported, set aside / rejected by reason)
EXPECTED = {
    "mimic_iii": (16, 11, {"gold_wall_clock": 2, "gold_day_of_year": 1, "no_public_answer": 1, "unanswerable": 1}),
    "eicu": (7, 5, {"gold_wall_clock": 2}),
    "treqs": (9, 6, {"gold_first_row": 3}),
    "npowerai": (27, 12, {"gold_constant": 10, "gold_not_reproducible": 5}),
}


@pytest.fixture(scope="module")
def imported(dbs, tmp_path_factory):
    root = tmp_path_factory.mktemp("public")
    out = {}
    for family, name in FILES.items():
        db = dbs / f"{family}.db" if family != "npowerai" else None
        manifest, report = import_files(family, [FIXTURES / name], root, answers="public", db=db)
        fam = tasks.make(family, root=root)
        out[family] = (manifest, report, fam, fam.instances("train") + fam.instances("test"))
    return out


@pytest.mark.parametrize("family", list(FILES))
def test_defective_public_golds_are_set_aside_with_their_reason(imported, family):
    manifest, report, _fam, items = imported[family]
    records, kept, reasons = EXPECTED[family]
    assert (report.records, report.kept, len(items)) == (records, kept, kept)
    assert report.by_reason == reasons
    assert manifest["answers"] == "public" and manifest["rejected"] == reasons
    assert all(r.detail for r in report.rejected)
    assert "gold_" in report.summary() or family == "eicu" and "gold_wall_clock" in report.summary()


@pytest.mark.parametrize("family", list(FILES))
def test_every_published_answer_grades_right_and_every_known_wrong_answer_wrong(imported, family):
    _manifest, _report, fam, items = imported[family]
    result = check_public_answers(fam, items)
    assert result["correct"] == result["instances"] == len(items), result["failures"]
    assert result["wrong_submissions"] >= 5 * len(items)
    assert result["graded_wrong"] == result["wrong_submissions"], result["failures"]


def test_ehr_gold_is_the_published_list_and_the_sql_is_kept(imported):
    _m, report, fam, items = imported["mimic_iii"]
    by_id = {i.metadata["source_id"]: i for i in items}
    route = by_id["fx-mimic_iii-5"]
    assert route.answer_type == "result" and route.answer == ["po", "ng"]
    assert "zz-made-up tablet" in route.solution and route.question == "what are the routes of zz-made-up tablet?"
    assert by_id["fx-mimic_iii-1"].metadata["grading"] == {"yes_no": True}
    assert report.warnings == []  # --db was given
    steps = fam.reference_solution(route)
    assert fam.grade(route, steps[-1]["params"]["answer"]).correct


def test_public_answers_without_a_database_warn_that_episodes_cannot_reach_them(tmp_path):
    _manifest, report = import_files("eicu", [FIXTURES / FILES["eicu"]], tmp_path, answers="public", size="tiny")
    assert report.kept == 5 and any("credentialed eicu database" in w for w in report.warnings)


def test_npowerai_defects_name_their_cause(imported):
    _m, report, _fam, items = imported["npowerai"]
    details = [r.detail for r in report.rejected if r.reason == "gold_not_reproducible"]
    assert sum("n = 42 (df 41), not at the stated n = 53" in d for d in details) == 3
    assert sum("f^2 x 10n" in d for d in details) == 2
    constant = [r.detail for r in report.rejected if r.reason == "gold_constant"]
    assert len(constant) == 10 and all("whatever its inputs" in d for d in constant)
    saturated = next(i for i in items if i.answer == 1.0)
    assert report.notes["power_saturated"] == 1 and saturated.question.endswith("What is the power?")


@pytest.mark.parametrize("gold,submission,ok", [
    (0.5, "0.5049", True), (0.5, "0.4951", True), (0.5, "0.5051", False), (0.5, "0.4949", False),
    (0.5, "0.505", False),  # N-PowerAI: strictly inside (0.99 a, 1.01 a)
])
def test_npowerai_power_tolerance_is_the_benchmarks(gold, submission, ok):
    assert grade("number", gold, submission, rel_tol=0.01, abs_tol=0.0, strict=True).correct is ok


@pytest.mark.parametrize("gold,submission,yes_no,ok", [
    (["1"], "1", True, True), (["1"], "['1']", True, True), (["1"], "[True]", True, True), (["0"], "no", True, True),
    (["0"], "[(0,)]", True, True), (["1"], "0", True, False), (["1"], "1 or 0", True, False),
    (["1"], "[1, 0]", True, False), (["1"], "yes no", True, False),
    (["po"], "po", False, True), (["po"], "['po']", False, True), (["po"], "[('po',)]", False, True),
    (["po"], "po, iv", False, False), (["po"], "['po', 'iv']", False, False),
    (["po", "po/ng"], '["po/ng", "po"]', False, True), (["po", "po/ng"], '["po"]', False, False),
    (["72", "72"], "72", False, True), (["72", "72"], "[72, 73]", False, False),
    (["58.05555555555556"], "58.05555555555556", False, True), (["58.05555555555556"], "58.06", False, False),
    (["7"], "7.0", False, True), (["7"], "True", False, False),
    (["None"], "None", False, True), (["None"], "null", False, True), (["None"], "0", False, False),
    (["3"], "None", False, False),
    (["0389"], "0389", False, True), (["0389"], "389", False, False),
    (["2104-04-18 13:57:46"], "2104-04-18 13:57:46", False, True), (["2104-04-18 13:57:46"], "2104-04-18", False, False),
    (["Private", "NEWBORN"], "[('Private', 'NEWBORN')]", False, True), (["Private", "NEWBORN"], "newborn, private", False, True),
    (["Private", "NEWBORN"], "Private", False, False),
    (["hypertension, unspecified"], "hypertension, unspecified", False, True),
    (["None", "zz-drug"], "[None, 'zz-drug']", False, True), (["None", "zz-drug"], "['zz-drug']", False, False),
    (["5"], " ".join(str(i) for i in range(1000)), False, False),
    (["5"], "[[1, 2], [3, 4]]", False, False), (["5"], "", False, False),
])
def test_result_grader_reads_the_public_formats_and_refuses_hedges(gold, submission, yes_no, ok):
    verdict = grade("result", gold, submission, yes_no=yes_no)
    assert verdict.correct is ok, verdict.reason


def test_static_rules():
    assert ehr_gold_defect("mimic_iii", "select 1 where x >= datetime(current_time, '-1 year')")[0] == "gold_wall_clock"
    assert ehr_gold_defect("eicu", "select strftime('%j', a) - strftime('%j', b) from t")[0] == "gold_day_of_year"
    assert ehr_gold_defect("mimic_iii", "select count(*) from admissions") is None
    assert treqs_single_row("select count ( distinct demographic.'subject_id' ) from demographic where x = '1'")
    assert treqs_single_row("select diagnoses.'short_title' from diagnoses where diagnoses.'icd9_code' = '1'")
    assert not treqs_single_row("select prescriptions.'route' from prescriptions where prescriptions.'drug' = 'x'")
    assert not treqs_single_row("select demographic.'insurance' from demographic where demographic.'subject_id' = '1'")


def test_renderings_and_known_wrong_answers_cover_the_formats(imported):
    _m, _r, _fam, items = imported["treqs"]
    two = next(i for i in items if len(i.answer) == 2)
    assert set(public_renderings(two)) == {"file", "python", "rows"} and public_renderings(two)["rows"] == "[('F', '0')]"
    wrong = known_wrong(two, items)
    assert json.dumps(["F", "0", "Fx"]) in wrong and json.dumps(["F"]) in wrong and any(" or " in w for w in wrong)


def test_public_convention_is_refused_where_no_answer_is_published(tmp_path):
    with pytest.raises(TaskError, match="has none to keep"):
        import_files("ehrcon", [FIXTURES / FILES["eicu"]], tmp_path, answers="public")
    with pytest.raises(TaskError, match="not one of"):
        import_files("eicu", [FIXTURES / FILES["eicu"]], tmp_path, answers="official")


def test_check_public_answers_cli(load_script, capsys):
    script = load_script("check_public_answers")
    code = script.main(["--eicu", str(FIXTURES / FILES["eicu"]), "--npowerai", str(FIXTURES / FILES["npowerai"]),
                        "--json"])
    out = capsys.readouterr().out
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["eicu"]["correct_pct"] == 100.0 and summary["npowerai"]["set_aside"]["gold_constant"] == 10
    assert "gold_wall_clock 2" in out
