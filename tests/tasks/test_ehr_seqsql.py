"""ehr_seqsql family: chains re-execute step by step, only the last step is graded strictly, contract audits."""

from __future__ import annotations

import sqlite3

import pytest

from medagentgym import tasks
from medagentgym.tasks.base import TaskError
from medagentgym.tasks.ehr_seqsql import DB_FILE, EHRSeqSQL, Step, load_chains, prior_answer
from medagentgym.tasks.ehr_synth.templating import Template, gold_answer
from medagentgym.tasks.graders import render_answer

NAME = "ehr_seqsql"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """check_family on the build cache's copy in ``root`` (tests/_build_cache.py, built=True). The same-seed rebuild
    and its file-by-file comparison is make test-slow's (test_registry.py's registry-wide run): rebuild=False."""
    from _build_cache import tasks_root

    tasks.register(NAME, entry_point="medagentgym.tasks.ehr_seqsql:EHRSeqSQL", max_turns=15, replace=True)
    root = tasks_root([NAME], tmp_path_factory.mktemp("seqsql_root"))
    report = tasks.check_family(NAME, size="tiny", seed=0, root=root, built=True, rebuild=False)
    return report, EHRSeqSQL(root=root / NAME)


def test_contract_audits_pass(built):
    report, _fam = built
    for split in ("train", "test"):
        assert report[split]["oracle"] == 1.0
        assert report[split]["empty"] == report[split]["traceback"] == report[split]["shotgun"] == 0
        assert report[split]["base_rate"] < 0.2


def test_every_chain_instantiates_and_every_step_reexecutes(built):
    _report, fam = built
    items = fam.instances("train") + fam.instances("test")
    assert len(fam.categories) >= 20 and {i.category for i in items} == set(fam.categories)
    con = sqlite3.connect(f"file:{fam.root / DB_FILE}?mode=ro", uri=True)
    try:
        for inst in items:
            steps = inst.metadata["steps"]
            assert 2 <= len(steps) <= 4 and steps[-1]["sql"] == inst.solution
            for k, step in enumerate(steps):
                rows = con.execute(step["sql"]).fetchall()
                if k == len(steps) - 1:
                    tpl = Template(id="x", type=step["answer_type"], q="", sql="", pool="")
                    assert gold_answer(tpl, rows) == inst.answer, inst.id
                else:
                    assert prior_answer(Step(step["answer_type"], "", ""), rows) == step["answer"], inst.id
    finally:
        con.close()


def test_question_shows_the_conversation_and_asks_the_last_step(built):
    _report, fam = built
    inst = next(i for i in fam.instances("test") if len(i.metadata["steps"]) == 4)
    steps = inst.metadata["steps"]
    for k, step in enumerate(steps[:-1], 1):
        assert f"Q{k}: {step['question']}" in inst.question
        assert f"A{k}: {render_answer(step['answer_type'], step['answer'])}" in inst.question
    assert inst.question.rstrip().endswith(f"Q{len(steps)}: {steps[-1]['question']}")
    assert inst.data == {DB_FILE: DB_FILE} and "2105-12-31 23:59:00" in inst.context


def test_only_the_last_answer_counts_and_grading_is_strict(built):
    _report, fam = built
    for inst in fam.instances("test"):
        earlier = inst.metadata["steps"][0]
        if render_answer(earlier["answer_type"], earlier["answer"]) != render_answer(inst.answer_type, inst.answer):
            break
    assert fam.grade(inst, fam.reference_solution(inst)[-1]["params"]["answer"]).correct
    assert not fam.grade(inst, render_answer(earlier["answer_type"], earlier["answer"])).correct
    num = next(i for i in fam.instances("test") if i.answer_type == "integer")
    assert not fam.grade(num, f"{num.answer} or {num.answer + 1}").correct
    boolean = next(i for i in fam.instances("train") if i.answer_type == "boolean")
    assert not fam.grade(boolean, "true\nfalse").correct


def test_counts_default_size_and_bad_inputs(tmp_path):
    counts = EHRSeqSQL().counts("default")
    assert counts["categories"] >= 20 and counts["instances"] >= 5000
    with pytest.raises(TaskError, match="use 'tiny' or 'default'"):
        EHRSeqSQL().counts("huge")
    bad = tmp_path / "chains.yaml"
    bad.write_text("chains:\n- id: one\n  pool: 'select 1 as x'\n  steps:\n  - {type: integer, q: 'a', sql: 'b'}\n")
    with pytest.raises(TaskError, match="has 1 steps; use 2 to 4"):
        load_chains(bad)
    with pytest.raises(tasks.NotBuilt, match="medagentgym build"):
        EHRSeqSQL(root=tmp_path / "missing").instances("test")
