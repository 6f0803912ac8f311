"""Registry: lazy entry points, make/names, typos, config-declared families."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from medagentgym import tasks
from medagentgym.tasks.registry import FamilySpec, family_class, max_turns, register, spec


def test_import_tasks_loads_no_family():
    code = ("import sys; from medagentgym import tasks; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('medagentgym.tasks'))))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert "medagentgym.tasks.toy_sql" not in loaded and "medagentgym.tasks.config_family" not in loaded
    assert "toy_sql" in subprocess.run([sys.executable, "-c", "from medagentgym import tasks; print(tasks.names())"],
                                       capture_output=True, text=True, check=True).stdout


def test_make_binds_family_to_its_built_dir(toy_root):
    fam = tasks.make("toy_sql", root=toy_root)
    assert fam.root == toy_root / "toy_sql"
    assert fam.name == "toy_sql" and isinstance(fam.version, int)
    assert isinstance(fam, tasks.TaskFamily)
    assert fam.actions <= tasks.ALL_ACTIONS
    assert max_turns("toy_sql") == 8


def test_typo_suggests_nearest_name():
    with pytest.raises(tasks.UnknownTask, match="did you mean `toy_sql`"):
        tasks.make("toy_sq")
    with pytest.raises(tasks.UnknownTask, match="known families"):
        tasks.make("zzzzzzzz")


def test_unbuilt_family_says_how_to_build(tmp_path):
    fam = tasks.make("toy_sql", root=tmp_path)
    with pytest.raises(tasks.NotBuilt, match="medagentgym build --families toy_sql"):
        fam.instances("test")


def test_family_without_a_built_dir_is_a_one_line_error():
    from medagentgym.tasks.base import load_instances

    with pytest.raises(tasks.TaskError, match=r"^mimic_iii: no built directory given; construct with root="):
        load_instances(None, "test", family="mimic_iii")


def test_build_families_in_processes_records_or_raises_failures(tmp_path):
    from medagentgym.tasks.registry import build_families

    manifests, errors = build_families(["toy_sql", "no_such_family"], tmp_path, size="tiny", jobs=2,
                                       skip_errors=True)
    assert list(manifests) == ["toy_sql"] and manifests["toy_sql"]["counts"]["test"] > 0
    assert (tmp_path / "toy_sql" / "manifest.json").is_file()
    assert list(errors) == ["no_such_family"] and errors["no_such_family"].startswith("UnknownTask: ")
    with pytest.raises(tasks.UnknownTask, match="no_such_family"):
        build_families(["no_such_family"], tmp_path, size="tiny")


def test_build_from_a_relative_root_binds_families_to_absolute_paths(tmp_path, monkeypatch):
    """biodsbench's references read their tables after a chdir: a relative root used to drop every instance."""
    from medagentgym.tasks.registry import build_families

    monkeypatch.chdir(tmp_path)
    manifests, errors = build_families(["biodsbench", "toy_sql"], "rel/tasks", size="tiny", jobs=1)
    assert errors == {} and manifests["biodsbench"]["dropped"] == []
    for name in ("biodsbench", "toy_sql"):
        fam = tasks.make(name, root="rel/tasks")
        assert fam.root == tmp_path / "rel" / "tasks" / name and fam.root.is_absolute()
        assert fam.instances("train") and fam.instances("test")


def test_build_report_counts_drops_and_names_empty_splits():
    from medagentgym.tasks.registry import build_report

    manifest = {"dropped": ["s1:k:0: FileNotFoundError: no\ntable", "s1:k:1: FileNotFoundError: no\ntable",
                            "x#3"], "dropped_unverified": 2, "counts": {"train": 5, "test": 0}}
    warning, error = build_report("fam", "/r", manifest, {"train": 5, "test": 0})
    assert warning == ("warning: fam: the build dropped 5 of 10 instances: 2x FileNotFoundError: no table; "
                       "2x unverified; 1 other reason(s) (see /r/fam/manifest.json)")
    assert error == ("the build left the 'test' split(s) empty (5 dropped, most often 2x FileNotFoundError: no "
                     "table; 2 other reason(s)); see /r/fam/manifest.json")
    assert build_report("fam", "/r", {"dropped": [], "dropped_x": 0}, {"train": 1, "test": 1}) == (None, None)


def test_build_that_leaves_a_split_empty_raises_one_line_after_the_others(tmp_path, monkeypatch, capsys):
    from medagentgym.tasks import biodsbench
    from medagentgym.tasks.registry import build_families

    def failing(*_a, **_k):
        raise FileNotFoundError("table not found")

    monkeypatch.setattr(biodsbench, "_run_reference", failing)
    n = biodsbench.BioDSBench(tmp_path).counts("tiny")["instances"]
    with pytest.raises(tasks.TaskError) as caught:
        build_families(["biodsbench", "toy_sql"], tmp_path, size="tiny", jobs=1)
    assert str(caught.value).startswith(f"biodsbench: the build left the 'train' and 'test' split(s) empty ({n} "
                                        f"dropped, most often {n}x FileNotFoundError: table not found)")
    assert (tmp_path / "toy_sql" / "manifest.json").is_file()  # the other family was still built
    assert capsys.readouterr().err.strip().splitlines() == [
        (f"warning: biodsbench: the build dropped {n} of {n} instances: {n}x FileNotFoundError: table not found "
         f"(see {tmp_path / 'biodsbench' / 'manifest.json'})")]
    manifests, errors = build_families(["biodsbench"], tmp_path, size="tiny", skip_errors=True)
    assert manifests == {} and errors["biodsbench"].startswith("TaskError: the build left the 'train' and 'test'")


def test_register_validates_and_refuses_silent_override():
    with pytest.raises(tasks.TaskError, match="lowercase"):
        register("Bad-Name", entry_point="medagentgym.tasks.toy_sql:ToySQL")
    with pytest.raises(tasks.TaskError, match="entry_point"):
        register("some_family", entry_point="medagentgym.tasks.toy_sql.ToySQL")
    with pytest.raises(tasks.TaskError, match="already registered"):
        register("toy_sql", entry_point="tasks.other:Other")
    assert register("toy_sql", entry_point="medagentgym.tasks.toy_sql:ToySQL", max_turns=8) == spec("toy_sql")


def test_bad_entry_point_fails_on_make_only():
    register("broken_family", entry_point="tasks.does_not_exist:Nope")
    try:
        assert "broken_family" in tasks.names()
        with pytest.raises(tasks.TaskError, match="cannot import 'tasks.does_not_exist'"):
            family_class("broken_family")
    finally:
        from medagentgym.tasks import registry

        registry._REGISTRY.pop("broken_family")


def test_config_family_is_found_under_root(tmp_path):
    d = tmp_path / "declared_family"
    d.mkdir()
    (d / "family.yaml").write_text("name: declared_family\nanswer_type: integer\nmax_turns: 4\n")
    (d / "tasks.jsonl").write_text(json.dumps({"question": "1+1?", "answer": 2, "split": "test"}) + "\n")
    assert "declared_family" in tasks.names(tmp_path)
    assert "declared_family" not in tasks.names()
    assert spec("declared_family", root=tmp_path) == FamilySpec(
        "declared_family", "medagentgym.tasks.config_family:ConfigFamily", max_turns=4)
    fam = tasks.make("declared_family", root=tmp_path)
    assert fam.instances("test")[0].answer == 2
    with pytest.raises(tasks.UnknownTask, match="did you mean `declared_family`"):
        tasks.make("declared_familly", root=tmp_path)


#: Families whose own test module already runs ``check_family`` (a fixture or a test), so the registry-wide run
#: repeats their builds (~10-25 s each): it runs in ``make test-slow`` for them. The SQL and EHR families' own runs
#: (tiny, seed 0, the default play, 150 items per split or all) cover this one's 6 (mimic_iii: 98 s at load ~15).
#: Those own runs skip the same-seed rebuild (``rebuild=False``, issue #29): this registry-wide run is where those
#: families' builds are checked byte-identical, so it must stay in make test-slow for every family.
OWN_CHECK = {"biodsbench", "ehrshot", "mimic_extract", "mimic_iii", "eicu", "treqs", "ehrcon", "ehr_seqsql",
             "npowerai", "medagentbench"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in OWN_CHECK else n
                                  for n in tasks.names()])
def test_every_registered_family_passes_check_family(name):
    # A bounded sample per split keeps this fast for all families; the families' own test modules check more.
    report = tasks.check_family(name, size="tiny", seed=0, limit=6)
    for split in ("train", "test"):
        if report[split]["instances"]:
            assert report[split]["oracle"] == 1.0
            assert report[split]["empty"] == report[split]["traceback"] == report[split]["shotgun"] == 0.0


def test_check_family_catches_a_lenient_grader(monkeypatch):
    from medagentgym.tasks.base import Verdict
    from medagentgym.tasks.toy_sql import ToySQL

    monkeypatch.setattr(ToySQL, "grade", lambda self, inst, sub, ctx=None: Verdict(
        correct=str(inst.answer) in str(sub), score=float(str(inst.answer) in str(sub))))  # substring grading
    with pytest.raises(tasks.TaskError, match="shotgun submission scores"):
        tasks.check_family("toy_sql")


def test_check_family_on_an_existing_build_still_compares_it_with_a_fresh_one(tmp_path):
    """built=True (issue #29: the tests' cached builds stand for check_family's first build): the build in ``root``
    is compared file by file with a second one, so a build that differs from what the code builds now fails, and a
    root without a build of that size and seed is refused in words, not checked against nothing."""
    from medagentgym.tasks.base import write_manifest

    with pytest.raises(tasks.TaskError, match=r"built=True\) needs root= holding toy_sql/manifest.json"):
        tasks.check_family("toy_sql", root=tmp_path, limit=3, built=True)
    manifest = tasks.make("toy_sql", root=tmp_path).build(tmp_path, size="tiny", seed=0)
    assert tasks.check_family("toy_sql", size="tiny", seed=0, root=tmp_path, limit=3, built=True)["test"]["oracle"] == 1
    with pytest.raises(tasks.TaskError, match="needs root="):  # the build in root is of another seed
        tasks.check_family("toy_sql", size="tiny", seed=1, root=tmp_path, limit=3, built=True)
    family_dir = tmp_path / "toy_sql"
    (family_dir / "notes.txt").write_text("written by an older build\n")  # a build from other code
    write_manifest(family_dir, **{k: v for k, v in manifest.items() if k not in ("files", "build_seconds")})
    with pytest.raises(tasks.TaskError, match="same seed, different files"):
        tasks.check_family("toy_sql", size="tiny", seed=0, root=tmp_path, limit=3, built=True)
    # rebuild=False takes the build as it is (the determinism check is the slow suite's): no comparison, said so
    report = tasks.check_family("toy_sql", size="tiny", seed=0, root=tmp_path, limit=3, built=True, rebuild=False)
    assert report["rebuilt"] is False and report["test"]["oracle"] == 1
    with pytest.raises(tasks.TaskError, match=r"rebuild=False\) needs built=True"):
        tasks.check_family("toy_sql", limit=3, rebuild=False)


def test_check_family_runs_the_reference_program_and_catches_a_broken_one(monkeypatch):
    """A reference whose SQL computes something else still submits the gold: check_family runs the program."""
    from medagentgym.tasks.base import run_then_submit
    from medagentgym.tasks.graders import render_answer
    from medagentgym.tasks.toy_sql import ToySQL

    report = tasks.check_family("toy_sql", limit=3)
    assert report["test"]["reference_runs"] == 3
    monkeypatch.setattr(ToySQL, "reference_solution", lambda self, inst: run_then_submit(
        "sql", "SELECT 123456789 AS wrong", render_answer(inst.answer_type, inst.answer)))
    with pytest.raises(tasks.TaskError, match=r"reference program of toy_sql/\w+/\d+ prints '123456789', which "
                                              r"does not hold the gold answer"):
        tasks.check_family("toy_sql", limit=3)
    monkeypatch.setattr(ToySQL, "reference_solution", lambda self, inst: run_then_submit(
        "sql", "SELECT nope FROM no_such_table", render_answer(inst.answer_type, inst.answer)))
    with pytest.raises(tasks.TaskError, match=r"reference program of \S+ fails in the sandbox .*no such table"):
        tasks.check_family("toy_sql", limit=3)


_PLUGIN = '''
from medagentgym.tasks.toy_sql import ToySQL


class PluginSQL(ToySQL):
    name = "plugin_sql"
    max_turns = 3
'''


def test_an_installed_distribution_registers_a_family_through_the_entry_point_group(tmp_path):
    """A package that declares ``medagentgym.families`` is found, made and played with no edit to ours."""
    (tmp_path / "plugin_pkg.py").write_text(_PLUGIN)
    info = tmp_path / "plugin_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[medagentgym.families]\nplugin_sql = plugin_pkg:PluginSQL\n"
                                           "toy_sql = plugin_pkg:PluginSQL\nBad-Name = plugin_pkg:PluginSQL\n")
    code = ("import json; from medagentgym import tasks; from medagentgym.tasks.registry import max_turns, spec; "
            "fam = tasks.make('plugin_sql', root='t'); fam.build('t', size='tiny', seed=0); "
            "print(json.dumps([tasks.names(), max_turns('plugin_sql'), spec('plugin_sql').plugin, "
            "spec('toy_sql').entry_point, len(fam.instances('test'))]))")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True)
    names, turns, plugin, toy_entry, n_test = json.loads(out.stdout.splitlines()[-1])
    assert "plugin_sql" in names and "toy_sql" in names and "Bad-Name" not in names
    assert turns == 3 and plugin == "plugin-pkg" and n_test > 0
    assert toy_entry == "medagentgym.tasks.toy_sql:ToySQL"  # a built-in name is never taken over
    assert "family 'toy_sql' of the installed distribution 'plugin-pkg'" in out.stderr
    assert "'Bad-Name' of 'plugin-pkg' is ignored" in out.stderr
