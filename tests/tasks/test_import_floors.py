"""Reward floors: the best constant answer per family over the whole split, its bound, the per-template floor
(one constant per question template learned on train), and the medagentbench rebalance that keeps "do nothing"
below them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym import tasks
from medagentgym.env_client.evaluation import FLOOR_BOUND, constant_floor
from medagentgym.tasks.floors import question_template, template_floor
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
        assert 0 < idle <= max(0.06 * len(items), 5 if split == "train" else 0)  # train: each idle kind once
        floor = constant_floor(fam, items)
        assert floor["floor"] <= FLOOR_BOUND and not floor["exceeds"], floor
    assert fam.version == 4


def test_evaluate_reports_floors_over_the_whole_split(tmp_path):
    root = tmp_path / "tasks"
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    n_test = len(tasks.make("toy_sql", root=root).instances("test"))
    done = subprocess.run([sys.executable, "-m", "medagentgym", "eval", "--policy", "empty", "--families",
                           "toy_sql", "--limit", "2", "--tasks-root", str(root), "--out", str(tmp_path / "eval"),
                           "--sandbox", SANDBOX, "--allow-unisolated", "--no-progress", "--no-plots", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    floor = summary["floor"]["toy_sql"]
    assert summary["episodes"] == 2 and floor["instances"] == n_test > 2
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["per_family"]["toy_sql"]["floor"] == floor
    assert "constant floor" in (tmp_path / "eval" / "report.md").read_text()


def _templated(k: int, template: str, answer, answer_type: str, split: str) -> Instance:
    return Instance(id=f"f/{split}/{k}", family="f", category=template, split=split, question="q", answer=answer,
                    answer_type=answer_type)


def test_template_floor_learns_one_constant_per_template_on_train():
    # Family-wide no constant pays (answers spread over 0..9 and names), but per template one does: template
    # "count" is mostly 2 and "name" mostly "x". The per-template floor finds that; the constant floor cannot.
    def split(name: str, n: int) -> list[Instance]:
        out = []
        for k in range(n):
            out.append(_templated(len(out), "count", 2 if k % 4 else k % 10, "integer", name))
            out.append(_templated(len(out), "name", "x" if k % 2 else f"n{k}", "text", name))
            out += [_templated(len(out), f"open{j}", f"{name}{k}-{j}", "text", name) for j in range(8)]
        return out

    train, test = split("train", 40), split("test", 40)
    assert constant_floor(_Graded(), test)["floor"] <= 0.1
    floor = template_floor(_Graded(), train, test)
    # "count": 2 in 30 of 40 test items plus k = 12, 32; "name": x in 20 of 40; ten templates in all.
    assert floor["floor"] == pytest.approx((32 / 40 + 20 / 40) / 10) and floor["templates"] == 10
    assert floor["exceeds"] and floor["bound"] == pytest.approx(FLOOR_BOUND)
    assert {r["template"]: r["constant"] for r in floor["top"][:2]} == {"count": "2", "name": "x"}
    assert set(floor["over"]) == {"count", "name"}


def test_yes_no_templates_are_held_to_the_base_rate():
    def split(name: str, yes_share: float) -> list[Instance]:
        out = [_templated(k, "has", k < 100 * yes_share, "boolean", name) for k in range(100)]
        return out + [_templated(100 + k, "open", f"{name}{k}", "text", name) for k in range(100)]

    balanced = template_floor(_Graded(), split("train", 0.5), split("test", 0.5))
    assert balanced["floor"] == pytest.approx(0.25) and balanced["bound"] == pytest.approx((0.52 + 0.10) / 2)
    assert not balanced["exceeds"] and balanced["over"] == []
    skewed = template_floor(_Graded(), split("train", 0.8), split("test", 0.8))  # "always yes" earns 80 %
    assert skewed["floor"] == pytest.approx(0.4) and skewed["exceeds"] and skewed["over"] == ["has"]


def test_binary_family_per_template_floor_is_bounded_by_its_base_rate():
    class Stated(_Graded):
        floor_bound = 0.72  # built at the public label balance: 70 % consistent

    def split(name: str, shares: dict[str, float]) -> list[Instance]:
        return [_templated(len(shares) * k + j, t, k >= round(100 * share), "boolean", name)
                for k in range(100) for j, (t, share) in enumerate(shares.items())]

    even = {"lab": 0.3, "rx": 0.3}
    floor = template_floor(Stated(), split("train", even), split("test", even))
    assert floor["binary"] and floor["floor"] == pytest.approx(0.7) and not floor["exceeds"]
    assert constant_floor(Stated(), split("test", even))["bound"] == 0.72
    leaky = {"lab": 0.05, "rx": 0.55}  # the same 30 % overall, but the table tells the label
    floor = template_floor(Stated(), split("train", leaky), split("test", leaky))
    assert floor["floor"] == pytest.approx(0.75) and floor["exceeds"]


def test_question_template_hook_hides_outcome_categories(tmp_path):
    # medagentbench's categories name the outcome (task5_normal / task5_mild); its question template is the task.
    fam = tasks.make("medagentbench", root=tmp_path)
    fam.build(tmp_path, size="tiny", seed=0)
    test = fam.instances("test")
    assert {question_template(fam, i) for i in test} == {i.metadata["task"] for i in test}
    by_category = template_floor(_Categories(fam), fam.instances("train"), test)
    by_template = template_floor(fam, fam.instances("train"), test)
    assert by_template["floor"] < by_category["floor"]


class _Categories:
    """A family seen through its categories only (no question_template hook)."""

    def __init__(self, family) -> None:
        self._family, self.root = family, family.root

    def grade(self, inst, submission, ctx=None):
        return self._family.grade(inst, submission, ctx)


def test_a_stated_nothing_found_share_is_allowed_per_template_and_nothing_more():
    # A family reproducing the public share of "nothing found" answers (0, None, []) declares it; each template's
    # bound then adds its own nothing-found share up to that, as yes/no templates are held to their base rate.
    def split(name: str, zeros: int, twos: int) -> list[Instance]:
        out = []
        for k in range(100):
            answer = 0 if k < zeros else 2 if k < zeros + twos else 10 + k
            out.append(_templated(len(out), "count", answer, "integer", name))
            out.append(_templated(len(out), "open", f"{name}{k}", "text", name))
        return out

    class Declared(_Graded):
        nothing_found_share = 0.2

    strict = template_floor(_Graded(), split("train", 20, 0), split("test", 20, 0))
    assert strict["floor"] == pytest.approx(0.1) and strict["nothing_found"] == pytest.approx(0.1)
    assert strict["bound"] == pytest.approx(0.1) and strict["over"] == ["count"]
    allowed = template_floor(Declared(), split("train", 20, 0), split("test", 20, 0))
    assert allowed["bound"] == pytest.approx(0.2) and not allowed["exceeds"] and allowed["over"] == []
    # ... but not a constant beyond the nothing-found mass: 20 % zeros and 50 % twos in one template
    clustered = template_floor(Declared(), split("train", 20, 50), split("test", 20, 50))
    assert clustered["floor"] == pytest.approx(0.25) and clustered["over"] == ["count"] and clustered["exceeds"]
