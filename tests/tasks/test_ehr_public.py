"""Public EHRSQL / MIMICSQL questions on our databases: vocabularies, planned patients, the checker.

Fixtures are question files written for these tests in the public formats (EHRSQL JSON, MedAgentGym JSONL);
the public files themselves are never needed.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from medagentgym.tasks.base import TaskError
from medagentgym.tasks.ehr_synth import public_sql as ps
from medagentgym.tasks.ehr_synth import public_vocab as pv
from medagentgym.tasks.ehr_synth import vocab_items as vi
from medagentgym.tasks.ehr_synth.eicu_db import build_eicu
from medagentgym.tasks.ehr_synth.eicu_view import eicu_view
from medagentgym.tasks.ehr_synth.hospital import draw_hospital
from medagentgym.tasks.ehr_synth.mimic_iii_db import build_mimic_iii
from medagentgym.tasks.ehr_synth.plant import NOW, plan_from_files, plan_from_records, window
from medagentgym.tasks.ehr_synth.treqs_db import build_treqs
from medagentgym.tasks.ehr_synth.vocab import merged

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ehr"
PUBLIC = {"mimic_iii": FIXTURES / "public_mimic_iii.json", "eicu": FIXTURES / "public_eicu.jsonl",
          "mimicsql": FIXTURES / "public_treqs.jsonl"}


def _q(db: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(db)) as con:
        return con.execute(sql).fetchall()


# ---------------------------------------------------------------------------------------------------- public_sql
def test_postprocess_and_outcomes_follow_the_ehrsql_evaluator():
    sql = ps.postprocess_ehrsql("SELECT x FROM t WHERE v > heart_rate_lower AND v < heart_rate_upper AND "
                                "strftime('%y', c) < = strftime('%y', current_time) AND d > datetime('now')")
    assert "60.0" in sql and "100.0" in sql and "%Y" in sql and "<=" in sql
    assert "'2105-12-31 23:59:00'" in sql and "'now'" not in sql and sql == sql.replace("SELECT", "select")
    assert ps.outcome(None) == "error" and ps.outcome([]) == "empty"
    assert ps.outcome([(None,), (0,)]) == "null_or_zero" and ps.outcome([(0.0, "")]) == "null_or_zero"
    assert ps.outcome([(1,)]) == "meaningful" and ps.outcome([("0",)]) == "meaningful"  # text '0' is a value
    assert ps.gold_sql({"query": "nan", "is_impossible": True}, "mimic_iii") is None
    assert ps.gold_sql({"sql": 'SELECT X FROM T WHERE A = "F"'}, "mimicsql") == 'select x from t where a = "f"'


def test_literals_ids_and_mix_are_read_from_gold_sql():
    sql = ("select 1 from demographic where demographic.'name' = 'ada lovell' and prescriptions.'drug' = 'heparin' "
           "and demographic.'subject_id' = '42' and lab.'charttime' = '2182-12-31 17:20:00'")
    assert ps.literals(sql) == {("prescriptions", "drug", "heparin")}  # ids and times are not values
    assert ps.patient_keys(sql) == {("subject_id", "42"), ("name", "ada lovell")}
    assert ps.patient_keys("... patient.uniquepid = '031-90003' ...") == {("uniquepid", "031-90003")}
    mix = ps.question_mix([("one two three", "select dense_rank() over () from t1 join t2"),
                           ("a b", "select 1 where strftime('%Y', x) = '2105'")])
    assert mix == {"time_window": 50.0, "top_n": 50.0, "event_after_event": 50.0, "question_words": 2.5, "n": 2}


def test_checked_queries_can_only_read(tmp_path):
    db = tmp_path / "t.db"
    with closing(sqlite3.connect(db)) as con:
        con.execute("create table t (x)")
        con.execute("insert into t values (3)")
        con.commit()
    con = ps.connect_read_only(db)
    try:
        assert ps.execute(con, "select max(x), strftime('%Y', '2105-01-01') from t") == [(3, "2105")]
        assert ps.execute(con, f"attach database '{tmp_path / 'evil.db'}' as e") is None
        assert ps.execute(con, "pragma writable_schema = 1") is None
        assert ps.execute(con, "delete from t") is None
    finally:
        con.close()
    assert not (tmp_path / "evil.db").exists()
    records = [{"db_id": "mimic_iii", "query": f"attach database '{tmp_path / 'evil2.db'}' as e"}]
    assert ps.check(records, db, "mimic_iii").outcomes == {"error": 1}
    assert not (tmp_path / "evil2.db").exists()


def test_load_records_reads_both_formats_and_names_bad_lines(tmp_path):
    assert len(ps.load_records(PUBLIC["mimic_iii"])) == 6 and len(ps.load_records(PUBLIC["eicu"])) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "select 1"}\nnot json\n')
    with pytest.raises(TaskError, match="bad.jsonl:2"):
        ps.load_records(bad)
    with pytest.raises(TaskError, match="no such question file"):
        ps.load_records(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------------------------- vocabularies
def test_harvest_reads_sql_literals_only_and_links_cms_titles(tmp_path):
    cms = tmp_path / "cms"
    cms.mkdir()
    (cms / "CMS32_DESC_SHORT_DX.txt").write_text("4019    Hypertension NOS\n42731   Atrial fibrillation\n")
    (cms / "CMS32_DESC_LONG_DX.txt").write_text("4019 Unspecified essential hypertension\n42731 Atrial fibrillation\n")
    (cms / "CMS32_DESC_SHORT_SG.txt").write_text("0093    Transplant cadaver donor\n")
    (cms / "CMS32_DESC_LONG_SG.txt").write_text("0093 Transplant from cadaver\n")
    values, icd = pv.harvest({d: [p] for d, p in PUBLIC.items()}, cms)
    assert values["mimic_iii"]["drug"] == ["aspirin", "heparin"]
    assert values["mimic_iii"]["input_item"] == ["d5w"]  # d_items label split by its linksto
    assert values["eicu"]["output"] == ["urine"]  # cell label split by its cellpath pattern
    assert values["mimicsql"]["lab_fluid"] == ["cerebrospinal fluid (csf)"]
    assert not any("90001" in v or "ada lovell" in v for kinds in values.values() for vs in kinds.values() for v in vs)
    assert [(e.code, e.short_title) for e in icd] == [("4019", "Hypertension NOS"), ("42731", "Atrial fibrillation")]
    with pytest.raises(TaskError, match="--cms-dir"):
        pv.harvest({"mimic_iii": [PUBLIC["mimic_iii"]]}, tmp_path)


def test_merged_vocabulary_covers_every_shipped_public_value():
    vocab, V = pv.load(), merged()
    low = lambda xs: {str(x).strip().lower() for x in xs}
    variants = low(x for vs in vi.DRUG_CASE_VARIANTS.values() for x in vs)  # raw spellings the draw uses too
    have = {
        ("mimic_iii", "drug"): low(d[0] for d in V.drugs) | variants, ("mimic_iii", "lab"): low(lab[1] for lab in V.labs),
        ("mimic_iii", "input_item"): low(i[1] for i in V.input_items),
        ("mimic_iii", "output_item"): low(o[1] for o in V.output_items),
        ("mimic_iii", "specimen"): low(s[0] for s in V.specimens), ("mimic_iii", "route"): low(d[5] for d in V.drugs),
        ("mimic_iii", "dx_short"): low(d[1] for d in V.diagnoses), ("mimic_iii", "px_short"): low(p[1] for p in V.procedures),
        ("eicu", "drug"): low(d[7] for d in V.drugs), ("eicu", "route"): low(d[9] for d in V.drugs),
        ("eicu", "lab"): low(lab[11] for lab in V.labs),
        ("eicu", "diagnosis"): {" - ".join(p.split("|")[2:4]) for p in V.dx_paths.values()},
        ("eicu", "culture"): low(s[2] for s in V.specimens),
        ("eicu", "intake"): low(i[5] for i in V.input_items), ("eicu", "input"): low(i[5] for i in V.input_items),
        ("eicu", "output"): low(o[5] for o in V.output_items),
        ("mimicsql", "drug"): low(d[0] for d in V.drugs) | variants, ("mimicsql", "formulary_drug_cd"): low(d[2] for d in V.drugs),
        ("mimicsql", "lab_label"): low(lab[1] for lab in V.labs), ("mimicsql", "lab_fluid"): low(lab[2] for lab in V.labs),
        ("mimicsql", "lab_itemid"): {str(lab[0]) for lab in V.labs},
        ("mimicsql", "dx_long_title"): low(d[2] for d in V.diagnoses),
        ("mimicsql", "diagnosis"): low(V.admit_diagnoses), ("mimicsql", "ethnicity"): low(e[0] for e in V.ethnicities if e[0]),
        ("mimicsql", "discharge_location"): low(d[0] for d in V.discharge_locations),
    }
    assert vocab.values("mimic_iii", "drug"), "the shipped vocabulary is missing"
    cut = {"tietze", "alzheimer"}  # MIMICSQL literals cut at an unescaped apostrophe (those queries fail anywhere)
    for (dataset, kind), known in have.items():
        missing = set(vocab.values(dataset, kind)) - known - cut
        assert not missing, f"{dataset}.{kind}: {sorted(missing)[:5]}"
    treatments = {" - ".join(p.split("|")[2:4]) for p in [*V.px_paths.values(), *vi.DRUG_TREATMENTS.values()]}
    assert not set(vocab.values("eicu", "treatment")) - treatments
    assert any("input" in i[6] for i in V.input_items)  # eICU questions match intake paths with '%input%'


# ---------------------------------------------------------------------------------------------------- planning
def test_time_windows_of_each_ehrsql_filter_kind():
    now = "'2105-12-31 23:59:00'"
    assert window("strftime('%Y',t.c) = '2104'") == (dt.datetime(2104, 1, 1), dt.datetime(2104, 12, 31, 23, 59))
    assert window("strftime('%Y-%m',t.c) >= '2105-11'")[0] == dt.datetime(2105, 11, 1)
    assert window("strftime('%Y-%m-%d',t.c) <= '2101-05-30'")[1] == dt.datetime(2101, 5, 30, 23, 59)
    assert window(f"datetime(t.c,'start of year') = datetime({now},'start of year','-1 year')")[0].year == 2104
    assert window(f"datetime(t.c,'start of month') = datetime({now},'start of month','-1 month')") == (
        dt.datetime(2105, 11, 1), dt.datetime(2105, 11, 30, 23, 59))
    lo, hi = window(f"datetime(t.c) >= datetime({now},'-30 day')")
    assert (hi - lo).days == 30 and hi == NOW
    assert window(f"datetime(t.c) <= datetime({now},'-2 year')")[1].year == 2103
    mixed = window(f"datetime(t.c,'start of year') = datetime({now},'start of year','-0 year') and strftime('%m',t.c) = '07'")
    assert mixed == (dt.datetime(2105, 7, 1), dt.datetime(2105, 7, 31, 23, 59))
    assert window("strftime('%Y',t.c) = '2101' and strftime('%Y',t.c) = '2103'") is None
    assert window("strftime('%Y-%m-%d',t.c) >= '2105-12-00'") is None  # a date in an EHRSQL test query


def test_plan_names_patients_their_needs_and_stays():
    plan = plan_from_files(list(PUBLIC.values()), anonymous=True)
    by_id = {(p.subject_id, p.uniquepid, p.name): p for p in plan.patients}
    p1 = by_id[(90001, None, None)]
    assert p1.current  # asked about the current hospital visit
    kinds = {(n.kind, n.scope) for n in p1.needs}
    assert ("drug", "any") in kinds and ("lab", "current") in kinds
    drug = next(n for n in p1.needs if n.kind == "drug")
    assert drug.item[0] == "Heparin" and drug.lo == dt.datetime(2104, 1, 1)
    assert by_id[(None, "031-90003", None)].current and by_id[(None, None, "ada lovell")].needs
    assert 90004 in plan.subject_ids()
    anon = [p for p in plan.patients if p.subject_id is None and p.uniquepid is None and p.name is None]
    assert len(anon) == 2  # the top-N and the event-after-event questions name nobody
    eae = next(p for p in anon if len(p.needs) == 2)
    assert [n.kind for n in sorted(eae.needs, key=lambda n: n.order)] == ["dx", "drug"]
    assert plan_from_records([{"db_id": "mimic_iii", "query": "nan", "is_impossible": True}]).patients == []


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    out = tmp_path_factory.mktemp("planted")
    raw = draw_hospital(12, seed=3, plan=plan_from_files(list(PUBLIC.values()), anonymous=True))
    build_mimic_iii(raw, out / "mimic_iii.db", seed=3)
    build_eicu(eicu_view(raw, seed=3), out / "eicu.db", seed=3)
    build_treqs(raw, out / "treqs.db", seed=3)
    return out


def test_planned_patients_answer_their_questions(planted):
    for dataset, db in (("mimic_iii", "mimic_iii.db"), ("eicu", "eicu.db"), ("mimicsql", "treqs.db")):
        records = ps.load_records(PUBLIC[dataset])
        report = ps.check(records, planted / db, dataset)
        assert report.patients_found == report.patients_total > 0
        wanted = {"mimic_iii": 6, "eicu": 2, "mimicsql": 2}[dataset]  # the newborn-csf count may well be 0
        assert report.outcomes["meaningful"] >= wanted, (dataset, report.as_dict())
    db = planted / "mimic_iii.db"
    # the current patient's visit is open at the current time, and their rows kept their values (no shuffle)
    assert _q(db, "select count(*) from admissions where subject_id = 90001 and dischtime is null") == [(1,)]
    assert _q(db, "select count(*) from admissions where subject_id = 90001 and dischtime is not null")[0][0] >= 2
    assert _q(db, "select min(age) > 10 and max(age) < 90 from admissions where subject_id = 90002") == [(1,)]


def test_planned_builds_are_deterministic_and_leave_the_default_alone(tmp_path):
    plan = plan_from_files([PUBLIC["mimic_iii"]])
    a = draw_hospital(8, seed=1, plan=plan).tables["PRESCRIPTIONS"]
    b = draw_hospital(8, seed=1, plan=plan_from_files([PUBLIC["mimic_iii"]])).tables["PRESCRIPTIONS"]
    assert a.equals(b)
    plain = draw_hospital(8, seed=1)
    assert not plain.pinned and 90001 not in set(plain.tables["PATIENTS"]["SUBJECT_ID"])


# ---------------------------------------------------------------------------------------------------- databases
@pytest.fixture(scope="module")
def medium(tmp_path_factory):
    out = tmp_path_factory.mktemp("medium")
    raw = draw_hospital(150, seed=0)
    build_treqs(raw, out / "treqs.db")
    build_eicu(eicu_view(raw), out / "eicu.db")
    return out


def test_default_vocabulary_brings_the_missing_categories(medium):
    db = medium / "treqs.db"
    assert _q(db, "select count(*) from demographic where admission_type = 'newborn' and age = '0'")[0][0] >= 1
    assert _q(db, "select count(*) from demographic where admission_location = 'trsf within this facility'")[0][0] >= 1
    assert _q(db, "select count(*) from lab where flag = 'delta'")[0][0] >= 1
    assert _q(db, "select count(*) from lab where fluid = 'cerebrospinal fluid (csf)'")[0][0] >= 1
    assert _q(db, "select count(*) from demographic where gender != lower(gender) or name != lower(name)") == [(0,)]
    assert _q(db, "select count(*) from procedures where icd9_code like '0%'") == [(0,)]  # MIMICSQL's numeric codes
    e = medium / "eicu.db"
    assert _q(e, "select count(*) from intakeoutput where cellpath like '%input%'")[0][0] >= 1


def test_check_public_sql_cli_prints_rates_and_mix(medium, tmp_path, capsys, load_script):
    main = load_script("check_public_sql").main
    root = tmp_path / "root"
    (root / "treqs").mkdir(parents=True)
    (root / "treqs" / "treqs.db").write_bytes((medium / "treqs.db").read_bytes())
    out = tmp_path / "summary.json"
    assert main(["--mimicsql", str(PUBLIC["mimicsql"]), "--tasks-root", str(root), "--json-out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mimicsql" in printed and "mix public" in printed
    summary = json.loads(out.read_text())["datasets"]["mimicsql"]
    assert summary["answerable"] == 3 and summary["executed_pct"] == 100.0
    assert main(["--mimic-iii", str(tmp_path / "nope.json"), "--tasks-root", str(root)]) == 2


# ---------------------------------------------------------------------------------------------------- labels, ids
def test_public_ids_are_carried_by_ordinary_patients_whose_histories_do_not_change():
    from medagentgym.tasks.ehr_synth.plant import public_ids_from_files

    ids = public_ids_from_files(list(PUBLIC.values()))
    assert 90001 in ids.subject_ids and "031-90003" in ids.uniquepids and "ada lovell" in ids.names
    plain, named = draw_hospital(12, seed=1), draw_hospital(12, seed=1, public_ids=ids)
    assert not named.pinned and set(ids.subject_ids) <= set(named.tables["PATIENTS"]["SUBJECT_ID"])
    for table in ("ADMISSIONS", "PRESCRIPTIONS", "LABEVENTS"):  # the same draw, relabelled: nothing shaped
        a, b = plain.tables[table].drop(columns=["SUBJECT_ID"]), named.tables[table].drop(columns=["SUBJECT_ID"])
        assert a.equals(b), table
    assert set(named.uniquepids.values()) == set(ids.uniquepids) and set(named.names.values()) == set(ids.names)


def test_a_planted_build_says_so_in_its_manifest_and_checks(tmp_path, capsys, load_script):
    from medagentgym.env_client.rollout import describe_run
    from medagentgym.tasks.treqs import TREQS

    manifest = TREQS().build(tmp_path, size="tiny", seed=0, public_questions=[PUBLIC["mimicsql"]])
    assert manifest["planted"]["files"] == ["public_treqs.jsonl"]
    assert "smoke" in manifest["planted"]["warning"] and "no number" in manifest["planted"]["warning"]
    assert "planted" not in TREQS().build(tmp_path / "plain", size="tiny", seed=0)
    info = describe_run("oracle", "oracle", {}, config=None, fmt="json", split="test", tasks_root=tmp_path,
                        families=["treqs"])
    assert info["families"]["treqs"]["planted"] is True
    plain = describe_run("oracle", "oracle", {}, config=None, fmt="json", split="test", tasks_root=tmp_path / "plain",
                         families=["treqs"])
    assert "planted" not in plain["families"]["treqs"]  # run keys of ordinary builds are unchanged
    main = load_script("check_public_sql").main
    assert main(["--mimicsql", str(PUBLIC["mimicsql"]), "--tasks-root", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WARNING: treqs: schema/coverage smoke build")
    assert "smoke" in json.loads(out.strip().splitlines()[-1])["warning"]
