"""Config-declared families: declared by files alone, strict grader by answer type, a full episode on one."""

from __future__ import annotations

import json

import pytest
import yaml

from medagentgym import tasks
from medagentgym.env_client import Env

COHORT = "patient,age,bmi\np1,34,22.5\np2,61,31.0\np3,47,27.25\np4,52,24.0\n"
ITEMS = [
    {"question": "What is the mean BMI?", "answer": 26.1875, "split": "test", "category": "mean",
     "solution": "import pandas as pd\nprint(pd.read_csv('/data/cohort.csv').bmi.mean())", "solution_lang": "python"},
    {"question": "How many patients are older than 50?", "answer": 2, "split": "test", "category": "count",
     "answer_type": "integer"},
    {"question": "Which patients have a BMI of at least 25?", "answer": ["p2", "p3"], "split": "train",
     "category": "select", "answer_type": "set"},
]


def declare(root, dirname="bmi_cohort", **overrides):
    """Write a config family under ``root/dirname`` and return its directory."""
    d = root / dirname
    (d / "data").mkdir(parents=True)
    (d / "data" / "cohort.csv").write_text(COHORT)
    decl = {"name": dirname, "description": "BMI questions.", "version": 2, "answer_type": "number",
            "tolerance": {"rel_tol": 0.001}, "actions": ["request_info", "code_execution", "submit_answer"],
            "max_turns": 6, "data": {"cohort.csv": "data/cohort.csv"}, "splits": ["train", "test"], **overrides}
    (d / "family.yaml").write_text(yaml.safe_dump(decl))
    (d / "tasks.jsonl").write_text("".join(json.dumps(item) + "\n" for item in ITEMS))
    return d


def test_declared_family_loads_and_grades(tmp_path):
    declare(tmp_path)
    fam = tasks.make("bmi_cohort", root=tmp_path)
    assert (fam.version, fam.max_turns, fam.actions) == (2, 6, {"request_info", "code_execution", "submit_answer"})
    assert fam.categories == ["mean", "count", "select"]
    test = fam.instances("test")
    assert [i.id for i in test] == ["bmi_cohort/test/0000", "bmi_cohort/test/0001"]
    mean, count = test
    assert mean.answer_type == "number" and count.answer_type == "integer"
    assert fam.grade(mean, "26.19").correct  # within rel_tol 0.001
    assert not fam.grade(mean, "26.5").correct
    assert not fam.grade(mean, "26.1875 27").correct
    assert fam.grade(count, "2").correct and not fam.grade(count, "2.5").correct
    select = fam.instances("train")[0]
    assert fam.grade(select, "p3, p2").correct and not fam.grade(select, "p2").correct
    assert fam.counts() == {"categories": 3, "instances": 3}


def test_build_copies_and_writes_manifest(tmp_path):
    declare(tmp_path / "src")
    fam = tasks.make("bmi_cohort", root=tmp_path / "src")
    manifest = fam.build(tmp_path / "out")
    assert manifest["counts"] == {"train": 1, "test": 2}
    assert "data/cohort.csv" in manifest["files"]
    assert tasks.make("bmi_cohort", root=tmp_path / "out").instances("test")[0].answer == 26.1875


@pytest.mark.parametrize("override,message", [
    ({"answer_type": "numbr"}, "answer_type 'numbr'"),
    ({"actions": ["code_execution"]}, "submit_answer"),
    ({"actions": ["submit_answer", "shell"]}, "unknown action"),
    ({"name": "other_name"}, "must equal the directory name"),
    ({"colour": "red"}, "colour"),
])
def test_invalid_declarations_name_the_problem(tmp_path, override, message):
    declare(tmp_path, **override)
    with pytest.raises(tasks.TaskError, match=message):
        tasks.make("bmi_cohort", root=tmp_path).instances("test")


def test_invalid_task_line_names_file_and_line(tmp_path):
    d = declare(tmp_path)
    with open(d / "tasks.jsonl", "a") as fh:
        fh.write(json.dumps({"question": "q", "answer": 1, "split": "valid"}) + "\n")
    with pytest.raises(tasks.TaskError, match=r"tasks.jsonl:4: split"):
        tasks.make("bmi_cohort", root=tmp_path).instances("test")


def test_episode_on_a_declared_family(tmp_path, task_pool):
    declare(tmp_path)
    fam = tasks.make("bmi_cohort", root=tmp_path)
    inst = fam.instances("test")[0]
    with Env(task_pool, tasks_root=tmp_path) as env:
        obs, info = env.reset(inst)
        assert info["max_turns"] == 6 and "terminal" not in info["permitted_actions"]
        assert "/data/cohort.csv" in obs.text
        cols = env.step('{"action": "request_info", "params": {"info_type": "column_names", "target": "cohort.csv"}}')
        assert "patient, age, bmi" in cols.observation.text
        ran = env.step(json.dumps({"action": "validate_code", "params": {"code": inst.solution}}))
        assert ran.info["status"] == "ok" and "26.1875" in ran.observation.text and ran.reward == 0.0
        denied = env.step('{"action": "terminal", "params": {"cmd": "ls"}}')
        assert denied.info["status"] == "forbidden" and "not allowed" in denied.observation.text
        done = env.step(json.dumps({"action": "submit_answer", "params": {"answer": "26.1875"}}))
        assert done.terminated and done.reward == 1.0 and done.info["verdict"]["correct"]
        assert env.trajectory.header.family_version == 2
