"""toy_sql: deterministic build, executed gold answers, reference solutions and adversarial submissions."""

from __future__ import annotations

import collections
import pickle
import sqlite3

import pytest

from medagentgym import tasks
from medagentgym.tasks.base import Instance
from medagentgym.tasks.graders import render_answer
from medagentgym.tasks.toy_sql import DB_NAME, TEMPLATES

TRACEBACK = "Traceback (most recent call last):\n  File \"<cell-1>\", line 1\nsqlite3.OperationalError: no such table"


def test_build_is_byte_identical_per_seed(tmp_path):
    fam = tasks.make("toy_sql", root=tmp_path)
    first = fam.build(tmp_path / "a", size="tiny", seed=3)
    second = fam.build(tmp_path / "b", size="tiny", seed=3)
    other = fam.build(tmp_path / "c", size="tiny", seed=4)
    assert first == second
    assert set(first["files"]) == {DB_NAME, "train.jsonl", "test.jsonl"}
    for name in first["files"]:
        assert (tmp_path / "a/toy_sql" / name).read_bytes() == (tmp_path / "b/toy_sql" / name).read_bytes()
    assert (tmp_path / "a/toy_sql/manifest.json").read_bytes() == (tmp_path / "b/toy_sql/manifest.json").read_bytes()
    assert other["files"][DB_NAME] != first["files"][DB_NAME]


def test_manifest_counts_and_categories(toy, toy_root):
    import json

    manifest = json.loads((toy_root / "toy_sql/manifest.json").read_text())
    assert manifest["counts"] == {"train": len(toy.instances("train")), "test": len(toy.instances("test"))}
    assert sum(manifest["counts"].values()) == toy.counts("tiny")["instances"]
    assert set(manifest["categories"]) == set(toy.categories) == {t.id for t in TEMPLATES}
    assert len(toy.categories) >= 10
    assert toy.counts("default") == {"categories": len(TEMPLATES), "instances": 20 * len(TEMPLATES)}


def test_instances_are_well_formed_and_disjoint(toy):
    train, test = toy.instances("train"), toy.instances("test")
    assert {i.split for i in train} == {"train"} and {i.split for i in test} == {"test"}
    assert not {i.question for i in train} & {i.question for i in test}
    ids = [i.id for i in train + test]
    assert len(ids) == len(set(ids))
    for inst in test:
        assert inst.data == {DB_NAME: DB_NAME} and inst.solution_lang == "sql"
        assert pickle.loads(pickle.dumps(inst)) == inst
        assert Instance.model_validate_json(inst.model_dump_json()) == inst


def test_gold_answers_are_the_executed_gold_sql(toy, toy_root):
    con = sqlite3.connect(f"file:{toy_root / 'toy_sql' / DB_NAME}?mode=ro", uri=True)
    try:
        for inst in toy.instances("train") + toy.instances("test"):
            rows = con.execute(inst.solution).fetchall()
            if inst.answer_type in {"set", "list"}:
                assert [r[0] for r in rows] == inst.answer, inst.id
            elif inst.answer_type == "boolean":
                assert bool(rows[0][0]) is inst.answer, inst.id
            else:
                assert rows[0][0] == inst.answer, inst.id
    finally:
        con.close()


def test_reference_solution_grades_correct(toy):
    for inst in toy.instances("test"):
        steps = toy.reference_solution(inst)
        assert [s["action"] for s in steps] == ["code_execution", "submit_answer"]
        assert steps[0]["params"] == {"lang": "sql", "code": inst.solution}
        assert toy.grade(inst, steps[-1]["params"]["answer"]).correct, inst.id


def _base_rate(instances: list[Instance]) -> float:
    """Best accuracy any constant answer could reach: the share of the most common gold answer."""
    counts = collections.Counter(render_answer(i.answer_type, i.answer) for i in instances)
    return counts.most_common(1)[0][1] / len(instances)


@pytest.mark.parametrize("split", ["train", "test"])
def test_adversarial_submissions_score_at_most_base_rate(toy, split):
    items = toy.instances(split)
    base = _base_rate(items)
    shotgun = " ".join(str(n) for n in range(1000)) + " yes no true false cardiology"
    for policy in ["0", "1", "yes", "no", "cardiology", "2020-01-01", shotgun, TRACEBACK, "", "[]"]:
        score = sum(toy.grade(i, policy).score for i in items) / len(items)
        assert score <= base, (policy[:30], score, base)
    assert sum(toy.grade(i, shotgun).score for i in items) == 0
    assert sum(toy.grade(i, TRACEBACK).score for i in items) == 0
    assert sum(toy.grade(i, "").score for i in items) == 0


def _script(*args: str):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "medagentgym", "build", *args], check=False, capture_output=True,
                          text=True, cwd=root, timeout=600)


def test_build_script_is_deterministic_and_lists_json(tmp_path):
    import json

    for out in ("a", "b"):
        res = _script("--families", "toy_sql", "--size", "tiny", "--seed", "5", "--out", str(tmp_path / out),
                      "--no-progress")
        assert res.returncode == 0, res.stderr
        assert "built 1 family" in res.stdout
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    listing = json.loads(_script("--list", "--json", "--out", str(tmp_path / "a")).stdout.strip().splitlines()[-1])
    assert listing["toy_sql"] == {"categories": len(TEMPLATES), "instances": 20 * len(TEMPLATES), "version": 1}
    bad = _script("--families", "toy_sq", "--out", str(tmp_path / "c"))
    assert bad.returncode == 2 and "did you mean `toy_sql`" in bad.stderr and "Traceback" not in bad.stderr
