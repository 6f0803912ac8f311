"""biocoder: executed gold, splice/re-indent, sandboxed hidden tests, the contract check and the record importer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medagentgym import tasks
from medagentgym.tasks.base import GradeContext, TaskError
from medagentgym.tasks.bio import biocoder_build as bb
from medagentgym.tasks.biocoder import KINDS, BioCoder, import_records

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "biocoder" / "records.jsonl"
DETERMINISM = FIXTURE.with_name("determinism.jsonl")


@pytest.fixture(scope="module")
def session(make_test_pool):
    """One sandbox session (bwrap when it works here, else the unisolated local backend) for grading."""
    pool = make_test_pool(1, preload=None)
    with pool.session() as sess:
        yield sess
    pool.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("biocoder")
    fam = BioCoder(root=root / "biocoder")
    manifest = fam.build(root, size="tiny", seed=0)
    return fam, manifest


def test_catalogue_has_enough_distinct_tasks():
    tasks_ = {f"{k.id}.{v['fn']}" for k in KINDS for v in k.variants}
    assert len(KINDS) >= 40 and len(tasks_) >= 150
    fam = BioCoder(root="unused")
    assert fam.counts("default") == {"categories": len(KINDS), "instances": 6 * len(tasks_)}
    assert fam.counts("default")["instances"] >= 1000


def test_build_is_deterministic_and_drops_nothing(built, tmp_path):
    fam, manifest = built
    again = BioCoder(root=tmp_path / "biocoder").build(tmp_path, size="tiny", seed=0)
    assert again["files"] == manifest["files"]
    assert manifest["dropped"] == []
    assert sum(manifest["counts"].values()) == fam.counts("tiny")["instances"]
    other = BioCoder(root=tmp_path / "o" / "biocoder").build(tmp_path / "o", size="tiny", seed=1)
    assert other["files"]["test.jsonl"] != manifest["files"]["test.jsonl"]


def test_train_and_test_functions_are_disjoint(built):
    fam, _ = built
    train = {i.metadata["task"] for i in fam.instances("train")}
    test = {i.metadata["task"] for i in fam.instances("test")}
    assert train and test and not train & test


def test_gold_is_the_executed_reference(built):
    fam, _ = built
    for inst in fam.instances("test")[:20]:
        meta = inst.metadata
        payload = bb.run_in_process(bb.program(meta["module"], inst.solution, meta["target"], meta["tests"], "x"), "x")
        assert payload["results"] == meta["expected"], inst.id
        assert "<<insert solution here>>" in meta["module"]
        shown = inst.question + inst.context
        assert not any(isinstance(a, str) and len(a) > 12 and a in shown for case in meta["tests"] for a in case)


def test_splice_reindents_into_a_class_body():
    ctx = "class A:\n    x = 1\n\n    <<insert solution here>>\n\nprint(A().f())\n"
    code = "        def f(self):\n            return self.x + 1\n"
    spliced = bb.splice(ctx, code)
    assert "    def f(self):\n        return self.x + 1" in spliced
    ns: dict = {}
    exec(compile(spliced.replace("print(A().f())", "out = A().f()"), "<t>", "exec"), ns)  # noqa: S102 - test-built code
    assert ns["out"] == 2
    with pytest.raises(ValueError, match="insert solution here"):
        bb.splice("def f(): pass\n", "x = 1")


def test_same_compares_canonical_results():
    assert bb.same([1, 2.0000000001], [1, 2]) and bb.same({"__set__": ["a"]}, {"__set__": ["a"]})
    assert not bb.same(True, 1) and not bb.same([1, 2], [1, 2, 3]) and not bb.same(0.5, 0.51)


def test_grading_runs_hidden_tests_in_the_sandbox(built, session):
    fam, _ = built
    ctx = GradeContext(session=session)
    inst = next(i for i in fam.instances("test") if i.metadata["task"] == "reverse_complement.complement_rna")
    assert fam.grade(inst, inst.solution, ctx).correct
    assert fam.grade(inst, f"```python\n{inst.solution}\n```", ctx).correct
    wrong = {
        "def complement_rna(seq):\n    return seq[::-1]": "hidden tests fail",
        "def other_name(seq):\n    return seq": "never defined",  # decided on the host, no sandbox run
        "# complement_rna is left out\nx = 1": "is not defined",  # the name occurs: the harness finds it missing
        "def complement_rna(seq):\n    raise RuntimeError('no')": "hidden tests fail",
        "def complement_rna(seq):\n    return seq\nimport sys\nsys.exit(0)": "SystemExit",
        "def complement_rna(seq) return": "SyntaxError",
    }
    for code, why in wrong.items():
        verdict = fam.grade(inst, code, ctx)
        assert not verdict.correct and why in verdict.reason, (code, verdict)
    method = next(i for i in fam.instances("test") if i.category == "sequence_toolkit")
    assert fam.grade(method, method.solution, ctx).correct
    assert not fam.grade(method, "def masked(self, seq):\n    return seq", ctx).correct


def test_reference_solution_steps(built):
    fam, _ = built
    inst = fam.instances("train")[0]
    steps = fam.reference_solution(inst)
    assert [s["action"] for s in steps] == ["code_execution", "submit_answer"]
    assert inst.solution in steps[0]["params"]["code"] and "<<insert" not in steps[0]["params"]["code"]
    assert set(fam.actions) == {"code_execution", "terminal", "debugging", "submit_answer"}


def test_check_family_contract(session, tmp_path):
    tasks.register("biocoder", entry_point="medagentgym.tasks.biocoder:BioCoder", max_turns=10, replace=True)

    def play(family, inst, steps):
        return family.grade(inst, steps[-1]["params"]["answer"], GradeContext(session=session)).score

    report = tasks.check_family("biocoder", size="tiny", seed=0, root=tmp_path, play=play, limit=6)
    for split in ("train", "test"):
        assert report[split]["oracle"] == 1.0
        assert report[split]["empty"] == report[split]["traceback"] == report[split]["shotgun"] == 0


def test_importer_keeps_deterministic_records_and_grades_stdout(session):
    instances, dropped = import_records(FIXTURE, session=session)
    assert [i.metadata["idx"][:1] for i in instances] == ["a", "b"]
    assert sorted(d[:1] for d in dropped) == ["c", "d"]
    assert any("nondeterministic" in d for d in dropped) and any("reference fails" in d for d in dropped)
    ctx = GradeContext(session=session)
    plain, method = instances
    assert plain.metadata["expected_stdout"].strip().isdigit()
    assert BioCoder(root="unused").grade(plain, plain.solution, ctx).correct
    assert not BioCoder(root="unused").grade(plain, "def count_cpg(seq):\n    return 0", ctx).correct
    assert BioCoder(root="unused").grade(method, method.solution, ctx).correct  # indented marker, re-indented code


def test_nondeterministic_demos_are_rejected_the_same_way_every_time(session):
    # A coin flip between two values, set order (hash seed), an unseeded default_rng, wall-clock time: each would
    # pass a two-run comparison some of the time. Fixed worlds and traced entropy give one verdict, every run.
    from medagentgym.tasks.importers.biocoder import check_record

    records = [json.loads(line) for line in DETERMINISM.read_text().splitlines()]
    want = {"e": "global generator without seeding", "f": "different output in fixed worlds",
            "g": "default_rng() without a seed", "h": "different output in fixed worlds"}
    for _ in range(2):
        for rec in records:
            reason, detail, _ctx, hidden = check_record(rec, session)
            if rec["idx"][0] in want:
                assert reason == "nondeterministic" and want[rec["idx"][0]] in detail, (rec["idx"][0], detail)
                assert hidden == {"salts": [], "stdouts": []}
            else:  # seeded numpy draws: deterministic, and the hidden seeds give other inputs
                assert reason == "" and detail.strip().isdigit() and len(hidden["salts"]) == 2
                assert len({detail, *hidden["stdouts"]}) == 3


def test_imported_records_are_graded_on_hidden_seeds_too(session):
    # The demo's inputs are in the module the agent reads; a function that only reproduces the demo's printed
    # result passes the visible run and fails the hidden seeds (before hidden seeds, it earned reward 1).
    instances, _ = import_records(FIXTURE, session=session)
    plain = instances[0]
    fam, ctx = BioCoder(root="unused"), GradeContext(session=session)
    assert plain.metadata["hidden_salts"] and len(plain.metadata["hidden_stdout"]) == len(plain.metadata["hidden_salts"])
    visible = plain.metadata["expected_stdout"].strip()
    cheat = f"def count_cpg(seq):\n    return {visible}"
    verdict = fam.grade(plain, cheat, ctx)
    assert not verdict.correct and "hidden seed" in verdict.reason, verdict
    assert fam.grade(plain, plain.solution, ctx).correct
    # a record imported before hidden seeds existed is graded on its visible demo alone, as then
    old = plain.model_copy(update={"metadata": {k: v for k, v in plain.metadata.items()
                                                if not k.startswith("hidden_")}})
    assert fam.grade(old, cheat, ctx).correct and fam.grade(old, plain.solution, ctx).correct
    forged = plain.model_copy(update={"metadata": {**plain.metadata, "hidden_stdout": []}})
    with pytest.raises(TaskError, match="re-import"):
        fam.grade(forged, plain.solution, ctx)


def test_bio_extra_packages_import_or_are_named(session, tmp_path):
    # The [bio] extra (scikit-image, pysam, centrosome) is what the public records need: installed (make venv),
    # a record using all three imports and grades; without it the importer names the pip line instead.
    import importlib.util

    from medagentgym.tasks.importers.biocoder import check_record

    context = ("import numpy as np\nimport skimage.filters\nimport pysam\nimport centrosome.cpmorphology\n\n"
               "<<insert solution here>>\n\ndef main():\n    np.random.seed(3)\n    image = np.random.rand(16, 16)\n"
               "    print(round(float(otsu(image)), 6), pysam.qualitystring_to_array('II#').tolist())\n\n"
               "if __name__ == \"__main__\":\n    main()\n")
    rec = {"idx": "j" * 64, "problem": "This is in python\nOtsu threshold of an image.", "signature": "def otsu(image)",
           "solution": "def otsu(image):\n    return skimage.filters.threshold_otsu(image)", "context": context}
    reason, detail, _, hidden = check_record(rec, session)
    if all(importlib.util.find_spec(m) for m in ("skimage", "pysam", "centrosome")):
        assert reason == "" and "[40, 40, 2]" in detail and hidden["salts"], (reason, detail)
    else:
        assert reason == "needs_packages" and "pip install" in detail


def test_importer_rejects_malformed_records(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"idx": "x", "problem": "p"}) + "\n")
    with pytest.raises(TaskError, match="lacks"):
        import_records(bad)
    bad.write_text("{not json\n")
    with pytest.raises(TaskError, match="not JSON"):
        import_records(bad)


def test_default_build_keeps_every_task(tmp_path):
    manifest = BioCoder(root=tmp_path / "biocoder").build(tmp_path, size="default", seed=0)
    assert manifest["dropped"] == [] and sum(manifest["counts"].values()) == 1080
    assert all(n == 24 for n in manifest["categories"].values())


@pytest.mark.slow
def test_every_default_reference_passes_in_the_sandbox(session, tmp_path):
    fam = BioCoder(root=tmp_path / "biocoder")
    fam.build(tmp_path, size="default", seed=0)
    ctx = GradeContext(session=session)
    failed = [i.id for split in ("train", "test") for i in fam.instances(split) if not fam.grade(i, i.solution, ctx).correct]
    assert failed == []
