"""The per-template floor compared with the public files' (issue 34): the same template grain and the same
estimator. MedAgentGym's figure (mimic_iii 21.9 %, 14.0 % without wall-clock golds) is one constant per EHRSQL
``q_tag`` learned on about 2-3 train records per template; ours learns on about 90, so the comparison draws our
train samples at the public sizes (``matched_template_floor``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medagentgym import tasks
from medagentgym.tasks.base import Instance
from medagentgym.tasks.floors import (
    matched_template_floor,
    public_template_floor,
    public_template_key,
    slot_template,
    template_floor,
)
from medagentgym.tasks.graders import grade

DATA = Path(__file__).resolve().parents[2] / "medagentgym" / "tasks" / "data"


class _Graded:
    root = None

    def grade(self, inst, submission, ctx=None):
        return grade(inst.answer_type, inst.answer, submission)


def _rec(q_tag, template, answer, query="select 1"):
    return {"q_tag": q_tag, "template": template, "answer": answer, "query": query}


def test_public_floor_uses_the_unfilled_template_and_answer_sets():
    train = [_rec("how many {x}?", "how many a?", ["0"]), _rec("how many {x}?", "how many b?", ["0"]),
             _rec("how many {x}?", "how many c?", ["3"]), _rec("route of {d}?", "route of e?", ["po", "iv"])]
    test = [_rec("how many {x}?", "how many f?", ["0"]), _rec("how many {x}?", "how many g?", ["5"]),
            _rec("route of {d}?", "route of h?", ["IV", "po"]), _rec("new {t}?", "new i?", ["0"])]
    got = public_template_floor(train, test)
    # "0" learned for how-many (2 of 3) pays once; the route set pays regardless of order/case; "new" has no train
    assert got["floor"] == pytest.approx(2 / 4) and got["templates"] == 3
    assert got["train_per_template"] == [3, 0, 1]  # sorted templates: how many, new, route
    filled = public_template_floor(train, test, key=lambda r: r["template"])
    assert filled["floor"] == 0.0  # every filled template is new: the grain decides the figure


def test_treqs_records_have_their_sql_with_values_blanked_as_template():
    a = {"query": "select count ( distinct demographic.'subject_id' ) from demographic where "
                  "demographic.'ethnicity' = 'white' and demographic.'dob_year' < '2101' and x = 3"}
    b = dict(a, query=a["query"].replace("'white'", "'asian'").replace("2101", "2088").replace("= 3", "= 41"))
    assert public_template_key(a) == public_template_key(b) and "white" not in public_template_key(a)
    assert public_template_key({"q_tag": "t {x}", "query": "q"}) == "t {x}"


def _templated(k, template, variant, answer, split):
    return Instance(id=f"f/{split}/{k}", family="f", category=f"{template}.{variant}", split=split, question="q",
                    answer=answer, answer_type="integer" if isinstance(answer, int) else "text",
                    metadata={"template": template, "variant": variant})


def _split(split, n_templates=40, per=20, zero_share=0.4):
    out = []
    for t in range(n_templates):
        for k in range(per):
            zero = k < per * zero_share
            out.append(_templated(len(out), f"t{t}", ("a", "b")[k % 2], 0 if zero else f"{split}-{t}-{k}", split))
    return out


def test_slot_template_merges_variants():
    inst = _templated(0, "lab_count", "in_year", 0, "test")
    assert slot_template(None, inst) == "lab_count" and inst.category == "lab_count.in_year"


@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 2, 3))])
def test_a_few_train_records_per_template_learn_the_common_answer_less_often(seed):
    """Each template answers 0 40 % of the time, the rest unique. Learned on every train record, "0" pays 40 %;
    learned on 2 records, "0" wins when both are 0 (16 %) or the first drawn is (24 %): 0.4 x 0.4 = 16 %
    expected (per draw sd over 40 templates ~3.1 points; mean of 20 draws ~0.7; bound 4 sd)."""
    train, test = _split("train"), _split("test")
    full = template_floor(_Graded(), train, test)["floor"] if seed == 0 else 0.4
    got = matched_template_floor(_Graded(), train, test, [2], draws=20, seed=seed)
    assert full == pytest.approx(0.4) and got["full"] == pytest.approx(0.4)
    assert got["floor"] == pytest.approx(0.16, abs=0.03) and got["templates"] == 40
    big = matched_template_floor(_Graded(), train, test, [12], draws=3, seed=seed)
    assert big["floor"] == pytest.approx(0.4, abs=0.02)  # enough records: the common answer every time


@pytest.mark.parametrize("family,published,clean", [("mimic_iii", 0.219, 0.140), ("eicu", 0.237, 0.141),
                                                    ("treqs", 0.042, 0.042)])
def test_stored_public_figures_hold_counts_only(family, published, clean):
    doc = json.loads((DATA / family / "public_floor.json").read_text(encoding="utf-8"))
    assert doc["floor_published"] == pytest.approx(published, abs=0.0006)
    assert doc["floor_clean"] == pytest.approx(clean, abs=0.0006)
    assert len(doc["train_per_template"]) == doc["templates_clean"]
    assert all(isinstance(k, int) and k >= 0 for k in doc["train_per_template"])
    assert set(doc) == {"files", "grains", "floor_published", "floor_clean", "templates_clean", "test_clean",
                        "train_per_template", "source"}


def _matched(name, seed, tmp_path, draws=10):
    from _build_cache import tasks_root

    fam = tasks.make(name, root=tasks_root([name], tmp_path / f"{name}-{seed}", seed=seed))
    public = json.loads((DATA / name / "public_floor.json").read_text(encoding="utf-8"))
    got = matched_template_floor(fam, fam.instances("train"), fam.instances("test"), public["train_per_template"],
                                 draws=draws, seed=seed)
    return got, public["floor_clean"]


@pytest.mark.parametrize("name", ["mimic_iii", "eicu"])
def test_tiny_floor_like_for_like_is_near_the_public_one(tmp_path, name):
    """Issue 34's acceptance, on the tiny build: measured like the public files, the per-template floor is within
    3 points of the public clean figure (mimic_iii 14.0 %, eicu 14.1 %), plus two sd of a tiny test split (~120
    instances at ~16 %: 6.7 points). v5, tiny seed 0: mimic_iii 16.0 %, eicu 16.5 % (v4: 17.6 %, 16.9 %); the
    default builds are measured in docs/families/floors.json (``template_matched``)."""
    got, public = _matched(name, 0, tmp_path)
    assert got["templates"] < got["instances"] and 0.0 < got["floor"]
    assert got["floor"] <= public + 0.03 + 2 * (got["floor"] * (1 - got["floor"]) / got["instances"]) ** 0.5, got


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mimic_iii", "eicu", "treqs"])
def test_floors_like_for_like_over_three_tiny_seeds(tmp_path, name):
    """The mean over tiny seeds 0-2 within 3 points of the public clean figure plus two sd of that mean. (Seeds
    whose 30 patients leave a category empty build with a larger tiny hospital: before, of seeds 0-5 mimic_iii
    built 2 and eicu 1.)"""
    rows = [_matched(name, seed, tmp_path) for seed in range(3)]
    public = rows[0][1]
    mean = sum(r[0]["floor"] for r in rows) / len(rows)
    n = sum(r[0]["instances"] for r in rows)
    assert mean <= public + 0.03 + 2 * (mean * (1 - mean) / n) ** 0.5, (name, [r[0] for r in rows])
