"""Reward floors: the best constant answer per family over the whole split, its bound, and the medagentbench
rebalance that keeps "do nothing" below it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym import tasks
from env_client.evaluation import FLOOR_BOUND, constant_floor
from medagentgym.tasks.base import Instance
from medagentgym.tasks.graders import grade

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = "bwrap" if shutil.which("bwrap") else "local"


class _Graded:
    """A minimal family: the strict graders of medagentgym.tasks.graders, nothing else."""

    root = None

    def grade(self, inst, submission, ctx=None):
        return grade(inst.answer_type, inst.answer, submission, **inst.metadata.get("grading", {}))


def _inst(k: int, answer, answer_type: str, **extra) -> Instance:
    return Instance(id=f"f/test/{k}", family="f", category="c", split="test", question="q", answer=answer,
                    answer_type=answer_type, **extra)


def test_floor_is_the_best_constant_under_the_family_grader():
    # 3 of 10 answers are 5.0, and 5.004 sits within a 0.01 tolerance of both 5.0 and 5.01: "5" wins 4/10.
    answers = [5.0, 5.0, 5.0, 5.01, 1.5, 2.5, 3.5, 4.5, 6.5, 7.5]
    items = [_inst(k, a, "number", metadata={"grading": {"abs_tol": 0.01, "rel_tol": 0.0}})
             for k, a in enumerate(answers)]
    floor = constant_floor(_Graded(), items)
    assert floor["floor"] == 0.4 and floor["constant"] == "5" and floor["exceeds"] and floor["bound"] == FLOOR_BOUND
    assert not floor["binary"] and floor["instances"] == 10


def test_binary_families_are_reported_against_half():
    items = [_inst(k, k % 3 == 0, "boolean") for k in range(9)]  # 3 yes, 6 no
    floor = constant_floor(_Graded(), items)
    assert floor["binary"] and floor["bound"] == 0.5 and floor["floor"] == pytest.approx(6 / 9, abs=1e-6)
    assert floor["constant"] in ("false", "no") and floor["exceeds"]


def test_program_answers_count_shared_references_without_running_them():
    items = [_inst(k, code, "text", solution=code, solution_lang="python")
             for k, code in enumerate(["def f(): return 1"] * 2 + ["def g(): return 2"] * 8)]
    floor = constant_floor(_Graded(), items)
    assert floor["method"] == "shared reference program" and floor["floor"] == 0.8


def test_medagentbench_do_nothing_stays_below_the_bound(tmp_path):
    fam = tasks.make("medagentbench", root=tmp_path)
    fam.build(tmp_path, size="tiny", seed=0)
    for split in ("train", "test"):
        items = fam.instances(split)
        idle = sum(json.loads(i.answer) == {"GET": [-1], "POST": []} for i in items)
        assert 0 < idle <= 0.08 * len(items)
        floor = constant_floor(fam, items)
        assert floor["floor"] <= FLOOR_BOUND and not floor["exceeds"], floor
    assert fam.version == 3


def test_evaluate_reports_floors_over_the_whole_split(tmp_path):
    root = tmp_path / "tasks"
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    n_test = len(tasks.make("toy_sql", root=root).instances("test"))
    done = subprocess.run([sys.executable, "-m", "medagentgym", "eval", "--policy", "empty", "--families",
                           "toy_sql", "--limit", "2", "--tasks-root", str(root), "--out", str(tmp_path / "eval"),
                           "--sandbox", SANDBOX, "--allow-unisolated", "--no-progress", "--no-plots", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    floor = summary["floor"]["toy_sql"]
    assert summary["episodes"] == 2 and floor["instances"] == n_test > 2
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["per_family"]["toy_sql"]["floor"] == floor
    assert "constant floor" in (tmp_path / "eval" / "report.md").read_text()
