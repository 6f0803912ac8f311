"""Question-type and answer mix of EHR SQL questions (medagentgym.tasks.ehr_synth.mix): features read from the gold
SQL and answer alike for public records and our instances, and per-category quotas that reach a target mix."""

from __future__ import annotations

import json

import pytest

from medagentgym.tasks.ehr_synth.family import DATA_DIR
from medagentgym.tasks.ehr_synth.mix import (
    features,
    load_target,
    measure,
    nothing_kind,
    question_features,
    quotas,
)

EICU_EAE = ("select count( distinct t1.uniquepid ) from ( select patient.uniquepid, diagnosis.diagnosistime from "
            "diagnosis join patient on diagnosis.patientunitstayid = patient.patientunitstayid where "
            "strftime('%y',diagnosis.diagnosistime) >= '2104' ) as t1 join ( select patient.uniquepid from "
            "treatment join patient ) as t2 on t1.uniquepid = t2.uniquepid")


@pytest.mark.parametrize("sql,answer_type,want", [
    (EICU_EAE, "integer", {"time_window", "event_after_event"}),
    ("select count(*)>0 from admissions where admissions.subject_id = 3 and admissions.dischtime is null", None,
     {"yes_no", "current_visit"}),
    ("select ( select lab.labresult from lab ) > ( select lab.labresult from lab )", None, {"yes_no"}),
    (("select t1.drug from ( select drug, dense_rank() over ( order by count(*) desc ) as c1 from p ) as t1 "
      "where t1.c1 <= 3"), "set", {"top_n"}),
    ("select demographic.'marital_status',demographic.'language' from demographic where x = '1'", None,
     {"two_attribute"}),
    ('SELECT DISTINCT DEMOGRAPHIC."GENDER", DEMOGRAPHIC."DOB" FROM DEMOGRAPHIC', "list", {"two_attribute"}),
    ("select sum( case when strftime('%j', a) - strftime('%j', b) > 1 then 1 else 0 end ) * 100 / count(*) from t",
     "number", {"time_window"}),  # commas inside a function call are not two attributes
    ("select count(*) from admissions", "boolean", {"yes_no"}),
])
def test_question_features_are_read_from_the_gold_sql(sql, answer_type, want):
    assert question_features(sql, answer_type) == want


@pytest.mark.parametrize("answer,answer_type,kind", [
    (["0"], None, "zero"), (["None"], None, "none"), (["None", None], None, "none"), ([], None, "empty"),
    (["0", "1"], None, None), (["7"], None, None), (["1"], "result", None),
    (0, "integer", "zero"), (0.0, "number", "zero"), (None, "datetime", "none"), ([], "set", "empty"),
    (False, "boolean", None), (3, "integer", None), (["a"], "set", None), (None, "unknown", None),
])
def test_nothing_kinds(answer, answer_type, kind):
    assert nothing_kind(answer, answer_type) == kind


def test_yes_no_answers_are_never_nothing_found_and_measure_counts_answers_apart():
    assert "nothing_found" not in features("select count(*)>0 from t", ["0"])
    m = measure([("select count(*) from t", ["0"], None), ("select count(*) from t", None, "unknown"),
                 ("select x from t where strftime('%Y', y) = '2104'", ["a"], None)])
    assert (m["n"], m["n_answers"], m["nothing_zero"], m["time_window"]) == (3, 2, 50.0, 33.3)


def test_quotas_reach_a_target_under_availability_and_floors():
    cells = [(frozenset({"top_n"}), 40), (frozenset(), 500), (frozenset({"nothing_found", "nothing_zero"}), 60),
             (frozenset({"time_window"}), 200)]
    target = {"top_n": 0.10, "nothing_zero": 0.075, "time_window": 0.5}
    keep = quotas(cells, target)
    total = sum(keep)
    assert all(k <= a for k, (_f, a) in zip(keep, cells))
    for feat, share in target.items():
        got = sum(k for k, (f, _a) in zip(keep, cells) if feat in f) / total
        assert abs(got - share) < 0.01, (feat, got)
    assert quotas([(frozenset({"x"}), 0), (frozenset(), 5)], {"x": 0.5}, floor=[1, 1]) == [0, 5]


@pytest.mark.parametrize("family", ["mimic_iii", "eicu", "treqs"])
def test_shipped_targets_are_within_five_points_of_the_public_shares(family):
    doc = json.loads((DATA_DIR / family / "mix.json").read_text())
    target, public, trusted = load_target(DATA_DIR / family / "mix.json"), doc["public_percent"], doc["public_trusted_percent"]
    for feat, share in target.items():
        if feat in public and not feat.startswith("nothing_"):
            assert abs(100 * share - public[feat]) < 0.5, feat  # question types: the public shares themselves
    nothing = 100 * sum(v for k, v in target.items() if k.startswith("nothing_"))
    assert abs(nothing - public["nothing_found"]) < 5 and abs(nothing - trusted["nothing_found"]) < 5
    assert all(v <= 0.075 for k, v in target.items() if k.startswith("nothing_"))  # under the 8 % answer cap
