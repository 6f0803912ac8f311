"""train.py prints and checks every input file a recipe reads, before any model is loaded (medagentgym.medcopilot.inputs)."""

from __future__ import annotations

import json
import shutil

import pytest

from medagentgym import tasks

SANDBOX = "bwrap" if shutil.which("bwrap") else "local"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, load_script):
    """A tiny toy_sql build and a smoke collection over 2 of its 22 train tasks (the README's kind of run)."""
    base = tmp_path_factory.mktemp("inputs")
    root = base / "tasks"
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    status = load_script("collect").main(["--tasks-root", str(root), "--families", "toy_sql", "--policy", "oracle",
                                          "--limit", "2", "-k", "1", "--out", str(base / "collect"), "--sandbox",
                                          SANDBOX, "--allow-unisolated", "--no-progress", "--concurrency", "1"])
    assert status == 0
    return root, base / "collect" / "sft.jsonl"


def _run(train_main, capsys, *args):
    status = train_main(list(args))
    out, err = capsys.readouterr()
    return status, out, err.strip()


def test_a_flagship_recipe_refuses_a_tiny_build_where_it_reads(smoke, train_main, capsys, tmp_path):
    root, _ = smoke
    status, out, err = _run(train_main, capsys, "recipe=sft_qwen7b", "--dry-run", f"tasks.root={root}",
                            "tasks.families=[toy_sql]", "tasks.mixture=null", f"output.dir={tmp_path / 'o'}")
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"train.py: error: {root} holds a tiny build of toy_sql, but this run needs size default: "
                          f"rebuild with `medagentgym build --families toy_sql --size default --out {root}`")
    assert "tasks.size=tiny" in err
    assert f"# input tasks toy_sql: REFUSED ({root / 'toy_sql'} is a tiny build, the recipe needs default)" in out


def test_a_smoke_store_is_refused_for_a_recipe_that_trains_on_more_tasks(smoke, train_main, capsys, tmp_path):
    root, store = smoke
    common = ["recipe=sft_tiny", "--dry-run", f"tasks.root={root}", f"rollout.store={store}",
              f"output.dir={tmp_path / 'o'}"]
    status, out, err = _run(train_main, capsys, *common)
    assert status == 2 and len(err.splitlines()) == 1
    assert f"rollout.store {store} was collected over 2 of the 16 train tasks of toy_sql" in err
    assert "a --limit smoke run?" in err and "tasks.limit=2" in err
    assert f"# input store {store}: 2 rows" in out
    assert "# input store toy_sql: 2 rows, 2 successes, 2 tasks, family version 1" in out
    assert f"# input tasks toy_sql: {root / 'toy_sql'} (tiny build, version 1, test 22, train 22)" in out
    status, out, err = _run(train_main, capsys, *common, "tasks.limit=2")
    assert status == 0, err


def test_a_store_played_under_another_family_version_or_missing_a_family_is_refused(smoke, train_main, capsys,
                                                                                     tmp_path):
    root, store = smoke
    rows = [json.loads(line) for line in store.read_text().splitlines()]
    for row in rows:
        row["header"]["family_version"] = 0
    stale = tmp_path / "stale.jsonl"
    stale.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["recipe=sft_tiny", "--dry-run", f"tasks.root={root}", "tasks.limit=2", f"output.dir={tmp_path / 'o'}"]
    status, _, err = _run(train_main, capsys, *common, f"rollout.store={stale}")
    assert status == 2 and "its toy_sql episodes were played under family version(s) [0], but this code is " \
                           "version 1; collect them again" in err
    status, _, err = _run(train_main, capsys, *common, f"rollout.store={store}", "tasks.families=[toy_sql,toy_lookup]")
    assert status == 2 and "has no episode of family 'toy_lookup' (families in it: toy_sql)" in err


def test_a_missing_local_model_warns_on_a_dry_run_and_stops_a_run_at_once(smoke, train_main, capsys, tmp_path,
                                                                          monkeypatch):
    root, store = smoke
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "sft_tiny").mkdir(parents=True)
    (tmp_path / "runs" / "sft_tiny" / "config.json").write_text("{}")
    common = ["recipe=sft_tiny", f"tasks.root={root}", "tasks.limit=2", f"rollout.store={store}",
              "model.name_or_path=runs/sft_tny", f"output.dir={tmp_path / 'o'}"]
    status, out, err = _run(train_main, capsys, *common, "--dry-run")
    assert status == 0, err
    assert "# input model: MISSING: no model folder at 'runs/sft_tny' (runs/sft_tny does not exist); did you " \
           "mean runs/sft_tiny?" in out
    status, _, err = _run(train_main, capsys, *common)
    assert status == 2 and len(err.splitlines()) == 1 and "model: no model folder at 'runs/sft_tny'" in err
    assert not (tmp_path / "o").exists()  # refused before anything was written or loaded
