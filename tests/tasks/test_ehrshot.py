"""ehrshot: contract (reference replayed into a workspace), hidden labels, full-coverage scoring, sandbox run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from medagentgym import tasks
from medagentgym.tasks.base import GradeContext, GraderError, TaskError
from medagentgym.tasks.ehrshot import (
    MOUNT,
    PREDICTIONS,
    TASKS,
    EHRShot,
    solution_code,
)


def replay(family, inst, steps) -> float:
    """check_family's play: the family replays its reference program into a fresh workspace."""
    return family.replay(inst, steps)


@pytest.fixture(scope="module")
def fam(tmp_path_factory):
    # Registered only for this module (until medagentgym/tasks/__init__.py carries the line); restored afterwards.
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(tasks.registry._REGISTRY, "ehrshot", tasks.registry.FamilySpec("ehrshot", "medagentgym.tasks.ehrshot:EHRShot", 12))
        from _build_cache import tasks_root

        # the contract on the build cache's copy (built=True); the same-seed rebuild and file comparison (~16 CPU-s)
        # is make test-slow's (test_registry.py's registry-wide run), so it is skipped here (rebuild=False)
        root = tasks_root(["ehrshot"], tmp_path_factory.mktemp("ehrshot_root"))
        report = tasks.check_family("ehrshot", size="tiny", seed=0, root=root, play=replay, built=True, rebuild=False)
        family = tasks.make("ehrshot", root=root)
        family.contract_report = report
        yield family


def _truth(family, inst) -> dict[int, int]:
    rows = list(csv.reader((family.root / inst.metadata["hidden_labels"]).read_text().splitlines()))[1:]
    return {int(a): int(b) for a, b in rows}


def _write(ws: Path, rows, header="id,prediction") -> GradeContext:
    (ws / PREDICTIONS).write_text(header + "\n" + "".join(f"{a},{b}\n" for a, b in rows))
    return GradeContext(workspace=ws)


def test_contract_and_layout(fam):
    report = fam.contract_report
    assert report["train"]["oracle"] == report["test"]["oracle"] == 1.0
    dropped = json.loads((fam.root / "manifest.json").read_text())["dropped"]
    assert all("no-information spread" in k for k in dropped)
    assert report["test"]["instances"] + sum(k.startswith("test/") for k in dropped) == (
        EHRShot(fam.root).counts("tiny")["instances"] // 2)
    assert len(dropped) <= 4  # cohorts whose reference does not clear the no-information spread
    items = fam.instances("train") + fam.instances("test")
    assert {i.category for i in items} == set(fam.categories) and len(fam.categories) == 15
    for inst in items:
        assert inst.data[MOUNT] == f"data/{inst.metadata['cohort']}"  # only its own cohort folder is mounted
        mount = fam.root / inst.data[MOUNT]
        assert f"/data/{MOUNT}/ " in inst.question and inst.metadata["cohort"] not in inst.question
        assert sorted(p.name for p in mount.iterdir()) == [
            "test_embeddings.npy", "test_ids.csv", "train_embeddings.npy", "train_labels.csv"]
        assert "hidden" not in inst.data[MOUNT] and inst.metadata["hidden_labels"].startswith("hidden/")
        x = np.load(mount / "train_embeddings.npy")
        assert x.dtype == np.float32 and x.shape[1] == 64
        if inst.metadata["k"] != "all":  # few-shot: at most k per class/finding
            assert len(x) <= inst.metadata["k"] * (14 if inst.category == "chexpert" else 4)


def test_k_shot_mounts_hold_no_label_beyond_the_instance(fam):
    """v1 mounted every cohort: a k-shot instance read the "all" cohort's labels of the same patients. Now its one
    mount holds its k-shot labels only, and no label of any of its test patients anywhere."""
    items = fam.instances("train") + fam.instances("test")
    for inst in items:
        mount = fam.root / inst.data[MOUNT]
        test_ids = {int(r[0]) for r in list(csv.reader((mount / "test_ids.csv").read_text().splitlines()))[1:]}
        labelled = {}
        for path in mount.rglob("*.csv"):
            rows = list(csv.reader(path.read_text().splitlines()))
            if "label" in rows[0]:
                labelled.update({int(r[0]): int(r[1]) for r in rows[1:]})
        assert not test_ids & set(labelled), inst.id
        if inst.metadata["k"] != "all":
            full = next(i for i in items if i.category == inst.category and i.split == inst.split
                        and i.metadata["k"] == "all")
            all_labels = list(csv.reader((fam.root / full.data[MOUNT] / "train_labels.csv").read_text().splitlines()))
            assert len(labelled) < len(all_labels) - 1  # fewer labels than the full cohort holds
            assert set(labelled) < {int(r[0]) for r in all_labels[1:]}  # the same patients, fewer of them


def test_labels_match_reference_types(fam):
    for inst in fam.instances("test"):
        labels = set(_truth(fam, inst).values())
        kind = inst.metadata["label_type"]
        if kind == "boolean":
            assert labels == {0, 1}
        elif kind == "categorical":
            assert labels <= {0, 1, 2, 3} and 0 in labels and len(labels) >= 3
        else:
            assert max(labels) < 1 << 14 and 8192 in labels  # "No Finding" only occurs


def test_trivial_and_partial_predictions_score_low(fam, tmp_path):
    inst = next(i for i in fam.instances("test") if i.category == "guo_los" and i.metadata["k"] == "all")
    truth = _truth(fam, inst)
    constant = fam.grade(inst, PREDICTIONS, _write(tmp_path, [(i, 0.5) for i in truth]))
    assert constant.score == 0.0 and not constant.correct
    perfect = fam.grade(inst, PREDICTIONS, _write(tmp_path, list(truth.items())))
    assert perfect.score == 1.0 and perfect.correct
    one_row = fam.grade(inst, PREDICTIONS, _write(tmp_path, list(truth.items())[:1]))
    assert one_row.score == 0.0 and "missing" in one_row.reason  # the original scored only predicted ids
    dup = list(truth.items()) + [next(iter(truth.items()))]
    assert "twice" in fam.grade(inst, PREDICTIONS, _write(tmp_path, dup)).reason
    assert "header" in fam.grade(inst, PREDICTIONS, _write(tmp_path, truth.items(), header="a,b")).reason
    flipped = fam.grade(inst, PREDICTIONS, _write(tmp_path, [(i, 1 - v) for i, v in truth.items()]))
    assert flipped.score == 0.0


def test_lab_and_chexpert_constants_earn_nothing(fam, tmp_path):
    for category, constant in (("lab_anemia", 0), ("chexpert", 16383), ("chexpert", 8192)):
        inst = next(i for i in fam.instances("test") if i.category == category)
        verdict = fam.grade(inst, PREDICTIONS, _write(tmp_path, [(i, constant) for i in _truth(fam, inst)]))
        assert verdict.score == 0.0, (category, verdict.reason)
    lab = next(i for i in fam.instances("test") if i.category == "lab_anemia")
    assert "integer" in fam.grade(lab, PREDICTIONS, _write(tmp_path, [(i, 0.5) for i in _truth(fam, lab)])).reason


def test_predictions_that_read_no_feature_earn_nothing(fam, tmp_path):
    # v2 put the zero point of partial credit at the chance MEAN and the pass threshold at 80 % of the way to the
    # reference: on few-shot lab tasks (a rare class of a few test patients makes balanced accuracy noisy)
    # uniformly random classes earned full reward in up to ~20 % of draws and partial credit in about half.
    rng = np.random.default_rng(3)
    scores, correct = [], 0
    for inst in fam.instances("test"):
        truth = _truth(fam, inst)
        ids, y = sorted(truth), np.asarray([truth[i] for i in sorted(truth)])
        meta = inst.metadata
        assert meta["reference_metric"] - meta["null_high"] >= max(0.03, meta["null_sd"]) - 1e-9
        kind = meta["label_type"]
        for draw in range(5):
            if kind == "boolean":
                guesses = [rng.random(len(ids)), rng.permutation(y)]
            elif kind == "categorical":
                guesses = [rng.choice(np.unique(y), len(ids)), rng.permutation(y)]
            else:
                guesses = [rng.permutation(y), rng.integers(0, 1 << 14, len(ids))]
            for k, guess in enumerate(guesses):
                verdict = fam.grade(inst, PREDICTIONS, _write(tmp_path, zip(ids, guess)))
                scores.append(verdict.score)
                correct += verdict.correct
    assert correct == 0 and float(np.mean(scores)) < 0.01, (correct, float(np.mean(scores)))


def test_the_floor_check_measures_no_information_predictions(fam):
    from medagentgym.tasks.floors import constant_floor

    floor = constant_floor(fam, fam.instances("test"))
    assert floor["method"] == "no-information predictions" and floor["constant"]
    assert floor["floor"] < 0.01 and floor["worst_instance_full_reward"] == 0.0 and not floor["exceeds"]
    # Blind spot of v2's floor check (a constant "predictions.csv" on an empty workspace: always 0): the same
    # instances with v2's zero point (the chance mean) and a reference barely above it are caught now.
    weak = [i.model_copy(update={"metadata": {**i.metadata, "null_high": i.metadata["chance"],
                                              "reference_metric": i.metadata["chance"] + 0.03}})
            for i in fam.instances("test") if i.metadata["label_type"] == "categorical"]
    caught = constant_floor(fam, weak)
    assert caught["exceeds"] and caught["floor"] > 0.1, caught


def test_submission_text_and_workspace_are_required(fam, tmp_path):
    inst = fam.instances("test")[0]
    for text in ("", "0.87", "predictions.csv predictions.csv", "Traceback (most recent call last):"):
        assert fam.grade(inst, text, GradeContext(workspace=tmp_path)).score == 0.0
    assert "does not exist" in fam.grade(inst, PREDICTIONS, GradeContext(workspace=tmp_path)).reason
    (tmp_path / PREDICTIONS).symlink_to(fam.root / inst.metadata["hidden_labels"])
    verdict = fam.grade(inst, PREDICTIONS, GradeContext(workspace=tmp_path))
    assert verdict.score == 0.0 and "symlink" in verdict.reason
    with pytest.raises(GraderError, match="workspace"):
        fam.grade(inst, PREDICTIONS, GradeContext())


def test_bad_size_is_one_line_error(tmp_path):
    with pytest.raises(TaskError, match="size 'huge'"):
        EHRShot(tmp_path / "ehrshot").build(tmp_path, size="huge")
    assert len(TASKS) == 15 and {t["label_type"] for t in TASKS} == {"boolean", "categorical", "multilabel"}


def test_reference_solution_in_the_sandbox(fam):
    """The stored solution runs in a real jail: /data mount, workspace cwd, scikit-learn; scored outside."""
    from medagentgym.sandbox import SandboxUnavailable, make_pool

    try:
        pool = make_pool("bwrap", workers=1, preload=("numpy", "pandas"))
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap sandbox unavailable here: {exc}")
    inst = next(i for i in fam.instances("test") if i.category == "chexpert")
    try:
        with pool.session(mounts={n: fam.root / rel for n, rel in inst.data.items()}, persistent=True) as session:
            result = session.run_python(inst.solution)
            assert result.ok, result.stdout + str(getattr(result, "stderr", ""))
            verdict = fam.grade(inst, PREDICTIONS, GradeContext(workspace=session.workspace, family_dir=fam.root))
    finally:
        pool.close()
    assert verdict.score >= 0.99 and verdict.correct, verdict.reason


def test_replay_runs_only_the_reference_program(fam):
    inst = fam.instances("test")[0]
    # the jail's paths: /data/ehrshot (the instance's cohort only), cwd
    assert inst.solution == solution_code(inst.metadata["label_type"], f"/data/{MOUNT}")
    with pytest.raises(TaskError, match="only the reference program"):
        fam.replay(inst, [{"action": "code_execution", "params": {"lang": "python", "code": "import os"}},
                          {"action": "submit_answer", "params": {"answer": PREDICTIONS}}])
    assert fam.replay(inst, [{"action": "submit_answer", "params": {"answer": PREDICTIONS}}]) == 0.0
