"""biodsbench: synthetic cBioPortal studies, executed asserts, one-namespace grading, contract check, importer."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from medagentgym import tasks
from medagentgym.tasks.base import GradeContext, TaskError
from medagentgym.tasks.bio.cbioportal import (
    MAF_COLUMNS,
    PATIENT_COLUMNS,
    SAMPLE_COLUMNS,
    STUDIES,
    TABLES,
    write_study,
)
from medagentgym.tasks.biodsbench import KINDS, MOUNT, BioDSBench, extract_expr, import_records

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "biodsbench"


@pytest.fixture(scope="module")
def built(tmp_path_factory, make_test_pool):
    root = tmp_path_factory.mktemp("biodsbench")
    fam = BioDSBench(root=root / "biodsbench", grader_backend=_backend(make_test_pool))
    yield fam, fam.build(root, size="tiny", seed=0)
    fam.close()


def _backend(make_test_pool) -> str:
    """The backend the test pools use here (bwrap, else local), for the family's grader-only jail."""
    pool = make_test_pool(1, preload=None)
    pool.close()
    return pool.backend


@pytest.fixture(scope="module")
def imported_dir(tmp_path_factory):
    """A family dir holding the fixture study copied by the importer (no verification run yet)."""
    family_dir = tmp_path_factory.mktemp("imported") / "biodsbench"
    import_records(FIXTURES / "records.jsonl", FIXTURES / "data", family_dir)
    return family_dir


@pytest.fixture(scope="module")
def pool(make_test_pool):
    """Two sandbox workers (bwrap, else local): one for the grading session, one for the episode test."""
    pool = make_test_pool(2, preload=None)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def session(pool, built, imported_dir):
    """One sandbox session seeing the built studies and the imported fixture study."""
    fam, _ = built
    mounts = {MOUNT: fam.root / "studies", "workdir": imported_dir / "imported" / "32437664"}
    with pool.session(mounts=mounts) as sess:
        yield sess


def test_catalogue_sizes():
    fam = BioDSBench(root="unused")
    assert len(KINDS) >= 15 and len({k.id for k in KINDS}) == len(KINDS)
    assert fam.counts("default")["instances"] >= 300 and fam.counts("tiny")["instances"] == len(KINDS)
    assert len(STUDIES) >= 3


def test_studies_have_cbioportal_columns_and_depend_on_the_seed(built, tmp_path):
    fam, manifest = built  # byte-identical rebuilds are checked by test_check_family_contract
    assert manifest["dropped"] == [] and sum(manifest["counts"].values()) == len(KINDS)
    study = fam.root / "studies" / STUDIES[0].study_id
    assert sorted(p.name for p in study.iterdir()) == sorted(TABLES)
    assert tuple(pd.read_csv(study / "data_mutations.csv").columns) == MAF_COLUMNS
    assert tuple(pd.read_csv(study / "data_clinical_patient.csv").columns) == PATIENT_COLUMNS
    assert tuple(pd.read_csv(study / "data_clinical_sample.csv").columns) == SAMPLE_COLUMNS
    assert set(pd.read_csv(study / "data_clinical_patient.csv")["OS_STATUS"]) == {"0:LIVING", "1:DECEASED"}
    cna = pd.read_csv(study / "data_cna.csv")
    assert cna.columns[0] == "Hugo_Symbol" and set(cna.columns[1:]) == set(pd.read_csv(study / "data_clinical_sample.csv")["SAMPLE_ID"])
    write_study(STUDIES[0], tmp_path / "s1", seed=1)
    assert (tmp_path / "s1" / "data_mutations.csv").read_bytes() != (study / "data_mutations.csv").read_bytes()


def test_instances_hide_gold_and_mount_only_data(built):
    fam, _ = built
    items = fam.instances("train") + fam.instances("test")
    assert {i.category for i in items} == {k.id for k in KINDS}
    for inst in items:
        assert inst.data == {MOUNT: "studies"}
        assert "assert" not in inst.question + inst.context
        assert all(f"`{name}`" in inst.question for name in inst.metadata["outputs"])
        # no jail-side asserts: the gold stays in metadata["values"] / ["plot"]["gold"], compared on the host
        assert "asserts" not in inst.metadata and "checks" not in inst.metadata
    assert not any((fam.root / "studies").rglob("*.jsonl"))
    plots = [i for i in items if i.metadata["plot"]]
    assert {i.category for i in plots} == {"km_plot", "mutation_bar_plot", "age_histogram"}
    km = next(i for i in plots if i.category == "km_plot")
    assert len(km.metadata["plot"]["gold"]["curves"]) == 2  # mutant and wild-type survival functions


def test_extract_expr_covers_value_types():
    ns = {"x": 2.5, "n": 3, "s": "TP53", "l": ["A", "B"], "d": {"a": 1, "b": 0.5}, "h": [1.0, 2.0], "b": True}
    for name, value in ns.items():
        assert eval(extract_expr(name, value), dict(ns)) == value
    with pytest.raises(TaskError, match="not finite"):
        extract_expr("m", float("inf"))


def test_reference_passes_and_wrong_code_fails_in_the_sandbox(built, session):
    fam, _ = built
    ctx = GradeContext(session=session)
    for inst in fam.instances("train") + fam.instances("test"):
        assert fam.grade(inst, inst.solution, ctx).correct, inst.id
    km = next(i for i in fam.instances("train") + fam.instances("test") if i.category == "km_median_os_by_gene")
    gene = km.metadata["params"]["gene"]
    wrong = {
        "median_os_mut = 1.0\nmedian_os_wt = 2.0": "wrong value of median_os_mut, median_os_wt",
        km.solution.replace(f"'{gene}'", "'CDH1'"): "wrong value",
        "print('done')": "never defined",
        "print('median_os_mut median_os_wt')": "NameError",
        "median_os_mut = (": "SyntaxError",
        "median_os_mut = median_os_wt = 1.0\nimport sys\nsys.exit(0)": "SystemExit",
        "": "empty",
    }
    for code, why in wrong.items():
        verdict = fam.grade(km, code, ctx)
        assert not verdict.correct and why in verdict.reason, (code[:40], verdict)
    plot = next(i for i in fam.instances("train") + fam.instances("test") if i.category == "km_plot")
    no_file = plot.solution.replace("fig.savefig(", "print(")
    assert "is not a PNG file" in fam.grade(plot, no_file, ctx).reason


def test_check_family_contract(session, tmp_path):
    tasks.register("biodsbench", entry_point="medagentgym.tasks.biodsbench:BioDSBench", max_turns=10, replace=True)

    def play(family, inst, steps):
        return family.grade(inst, steps[-1]["params"]["answer"], GradeContext(session=session)).score

    # Same seed and size as the `built` fixture, so the session's mounted studies hold identical bytes.
    report = tasks.check_family("biodsbench", size="tiny", seed=0, root=tmp_path, play=play, limit=4)
    for split in ("train", "test"):
        assert report[split]["oracle"] == 1.0
        assert report[split]["empty"] == report[split]["traceback"] == report[split]["shotgun"] == 0


def test_importer_runs_histories_and_drops_failing_references(imported_dir, session, built):
    instances, dropped = import_records(FIXTURES / "records.jsonl", FIXTURES / "data", imported_dir)
    assert [i.metadata["question_id"] for i in instances] == ["0", "1", "2"] and not dropped
    assert all((i.question + i.context + i.solution).replace("/data/workdir/", "").count("/workdir/") == 0
               for i in instances)
    assert all(i.data == {"workdir": "imported/32437664"} for i in instances)
    assert instances[0].metadata["check_names"] == ["n_male"]
    backend = built[0]._checker.backend
    kept, dropped = import_records(FIXTURES / "records.jsonl", FIXTURES / "data", imported_dir, session=session,
                                   grader_backend=backend)
    assert [i.metadata["question_id"] for i in kept] == ["0", "1"]
    assert len(dropped) == 1 and "reference fails" in dropped[0]
    fam, ctx = BioDSBench(root=imported_dir, grader_backend=backend), GradeContext(session=session)
    try:
        with_history = kept[1]
        assert "patients = pd.read_csv" in with_history.metadata["prelude"]
        assert fam.grade(with_history, with_history.solution, ctx).correct
        # isinstance(n_male, int) is one of the record's checks: a numpy integer must still fail it
        numpy_int = kept[0].solution.replace("n_male = int(", "n_male = __import__('numpy').int64(")
        assert not fam.grade(kept[0], numpy_int, ctx).correct
        assert not fam.grade(kept[0], "n_male = 4", ctx).correct
    finally:
        fam.close()
    assert not fam.grade(with_history, "mean_os_dead = 12.0", ctx).correct
    assert not fam.grade(kept[0], "n_male = 2", ctx).correct


def test_importer_rejects_malformed_records(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"queries": "q"}) + "\n")
    with pytest.raises(TaskError, match="lacks"):
        import_records(bad, FIXTURES / "data", tmp_path / "f")
    rec = json.loads((FIXTURES / "records.jsonl").read_text().splitlines()[0])
    bad.write_text(json.dumps(dict(rec, study_ids="999")) + "\n")
    with pytest.raises(TaskError, match="no data folder"):
        import_records(bad, FIXTURES / "data", tmp_path / "f")


def test_episode_grades_the_submitted_code(pool, built, session):
    from medagentgym.env_client.episode import Env

    fam, _ = built
    tasks.register("biodsbench", entry_point="medagentgym.tasks.biodsbench:BioDSBench", max_turns=10, replace=True)
    inst = next(i for i in fam.instances("train") + fam.instances("test") if i.category == "cohort_size")
    with Env(pool, tasks_root=fam.root.parent) as env:
        obs, info = env.reset(inst)
        assert set(info["permitted_actions"]) == set(fam.actions) and "/data/biodsbench/" in obs.text
        ran = env.step(json.dumps({"action": "code_execution", "params": {"lang": "python", "code": inst.solution +
                                                                           "\nprint(n_patients)"}}))
        assert ran.info["status"] == "ok" and str(inst.metadata["values"]["n_patients"]) in ran.observation.text
        done = env.step(json.dumps({"action": "submit_answer", "params": {"answer": inst.solution}}))
        assert done.terminated and done.reward == 1.0 and done.info["verdict"]["correct"]
        env.reset(inst)
        wrong = env.step(json.dumps({"action": "submit_answer", "params": {"answer": "n_patients = 1\nn_samples = 1"}}))
        assert wrong.terminated and wrong.reward == 0.0


def test_shadowed_builtins_and_lenient_objects_cannot_pass(built, session):
    fam, _ = built
    ctx = GradeContext(session=session)
    km = next(i for i in fam.instances("train") + fam.instances("test") if i.category == "km_median_os_by_gene")
    cheat = "abs = lambda x: 0.0\nmedian_os_mut = 1.0\nmedian_os_wt = 2.0\n"
    verdict = fam.grade(km, cheat, ctx)
    assert not verdict.correct and "wrong value" in verdict.reason
    top = next(i for i in fam.instances("train") + fam.instances("test") if i.category == "top_mutated_genes")
    n = top.metadata["params"]["n"]
    lenient = f"class S(str):\n    def __eq__(self, other):\n        return True\n\ntop_genes = [S('x')] * {n}\n"
    assert not fam.grade(top, lenient, ctx).correct


@pytest.mark.slow
def test_every_default_reference_passes_in_the_sandbox(tmp_path, make_test_pool):
    fam = BioDSBench(root=tmp_path / "biodsbench", grader_backend=_backend(make_test_pool))
    manifest = fam.build(tmp_path, size="default", seed=0)
    assert manifest["dropped"] == [] and sum(manifest["counts"].values()) == 300
    pool = make_test_pool(1, preload=None)
    with pool, pool.session(mounts={MOUNT: fam.root / "studies"}) as sess:
        ctx = GradeContext(session=sess)
        failed = [i.id for s in ("train", "test") for i in fam.instances(s) if not fam.grade(i, i.solution, ctx).correct]
    assert failed == []


def test_value_transfer_round_trips_plain_data_only():
    """Imported records' variables cross to the checker jail as JSON: types survive, code and objects do not."""
    import datetime

    import numpy as np

    from medagentgym.tasks.bio.values import check_names, mg_decode, mg_encode

    frame = pd.DataFrame({"a": [1, 2], "b": [0.5, float("nan")], "c": ["x", "y"]}, index=[10, 11])
    values = {"i": 3, "f": float("nan"), "n": np.int64(4), "arr": np.arange(6).reshape(2, 3), "df": frame,
              "s": pd.Series([1.5, 2.5], index=["p", "q"], name="m"), "t": (1, "a"), "set": {1, 2},
              "d": {1: "one"}, "ts": pd.Timestamp("2020-01-02 03:04:05"), "day": datetime.date(2020, 1, 2),
              "np": np, "os": os}
    back = {k: mg_decode(json.loads(json.dumps(mg_encode(v)))) for k, v in values.items()}
    assert back["i"] == 3 and math.isnan(back["f"]) and type(back["n"]) is np.int64 and back["n"] == 4
    assert (back["arr"] == values["arr"]).all() and back["arr"].shape == (2, 3)
    pd.testing.assert_frame_equal(back["df"], frame)
    pd.testing.assert_series_equal(back["s"], values["s"])
    assert back["t"] == (1, "a") and back["set"] == {1, 2} and back["d"] == {1: "one"}
    assert back["ts"] == values["ts"] and back["day"] == values["day"] and back["np"] is np
    assert back["os"] != os and "unsupported" in repr(back["os"])  # not an analysis library: not re-imported

    class Lenient:
        def __eq__(self, other):
            return True

    lenient = mg_decode(json.loads(json.dumps(mg_encode(Lenient()))))
    assert lenient != 0 and (lenient == 0) is False  # an object's own __eq__ never crosses; the marker equals nothing
    deep: list = []
    for _ in range(60):
        deep = [deep]
    assert "unsupported" in repr(mg_decode(mg_encode(deep)))
    assert check_names("assert abs(x - 1.5) < 1e-6\nassert isinstance(n, int) and len(df) == 2") == ["df", "n", "x"]


def test_plot_check_evaluates_the_drawn_step_function():
    from medagentgym.tasks.bio.plots import check_plot

    t, s = [0.0, 1.0, 2.0, 3.0], [1.0, 0.8, 0.5, 0.5]
    spec, gold, png = {"file_type": "png", "labels": {"xlabel": "Months"}}, {"curves": [[t, s]]}, "89504e470d0a1a0a"

    def fig(*lines, xlabel="Months"):
        return {"xlabel": xlabel, "ylabel": "", "title": "", "lines": list(lines), "bars": [], "n_patches": 0}

    post = {"x": t, "y": s, "drawstyle": "steps-post"}
    manual = {"x": [0, 1, 1, 2, 2, 3], "y": [1, 1, 0.8, 0.8, 0.5, 0.5], "drawstyle": "default"}
    assert check_plot(spec, gold, fig(post), png) is None and check_plot(spec, gold, fig(manual), png) is None
    for bad in ({**post, "drawstyle": "default"},  # linear between the steps
                {**post, "drawstyle": "steps-pre"},  # left-continuous: the wrong step function
                {"x": t[:3], "y": s[:3], "drawstyle": "steps-post"},  # stops early
                {"x": t, "y": [1.0, 0.8, float("nan"), 0.5], "drawstyle": "steps-post"},
                {"x": [0, 2, 1, 3], "y": s, "drawstyle": "steps-post"}, {"x": "0,1", "y": s}, "not a line"):
        assert "no plotted line matches" in check_plot(spec, gold, fig(bad), png), bad
    assert "xlabel" in check_plot(spec, gold, fig(post, xlabel="Time"), png)
    assert "not a PNG" in check_plot(spec, gold, fig(post), "25504446")
    two = {"curves": [[t, s], [t, s]]}  # one drawn line cannot stand for two curves
    assert "curve 2 of 2" in check_plot(spec, two, fig(post), png)
    hist = {"bars": [2.0, 3.0], "edges": [0.0, 1.0, 2.0]}
    bars = {**fig(), "bars": [[0.0, 1.0, 2.0], [1.0, 1.0, 3.0]]}
    assert check_plot(spec, hist, bars, png) is None
    assert "height" in check_plot(spec, hist, {**bars, "bars": [[0.0, 1.0, 2.0], [1.0, 1.0, 4.0]]}, png)
    assert "bin" in check_plot(spec, hist, {**bars, "bars": [[0.0, 1.0, 2.0], [1.5, 1.0, 3.0]]}, png)
    assert "2 expected" in check_plot(spec, hist, {**bars, "bars": bars["bars"][:1]}, png)
