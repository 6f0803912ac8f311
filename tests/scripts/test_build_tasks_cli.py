"""medagentgym build: relative --out from any directory, drops reported on stderr, empty builds fail the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym import tasks

ROOT = Path(__file__).resolve().parents[2]


def _build(cwd: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medagentgym", "build", "--size", "tiny",
                           "--no-progress", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)


def _splits(root: Path, name: str) -> dict[str, int]:
    fam = tasks.make(name, root=root)
    return {split: len(fam.instances(split)) for split in ("train", "test")}


def test_relative_out_from_another_directory_builds_every_split(tmp_path):
    done = _build(tmp_path, "--families", "biodsbench,toy_sql", "--out", "artifacts/tasks")
    assert done.returncode == 0, done.stderr
    assert "built 2 family(ies)" in done.stdout and "warning" not in done.stderr
    for name in ("biodsbench", "toy_sql"):
        assert all(_splits(tmp_path / "artifacts" / "tasks", name).values())
        assert json.loads((tmp_path / "artifacts" / "tasks" / name / "manifest.json").read_text()).get(
            "dropped", []) == []


def test_a_family_whose_build_drops_everything_fails_the_command(tmp_path, monkeypatch, capsys, load_script):
    from medagentgym.tasks import biodsbench

    def failing(*_a, **_k):
        raise FileNotFoundError("no such table")

    monkeypatch.setattr(biodsbench, "_run_reference", failing)
    monkeypatch.chdir(tmp_path)
    status = load_script("build_tasks").main(["--families", "biodsbench,toy_sql", "--size", "tiny", "--out", "t",
                                              "--jobs", "1", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 1 and "built" not in out and "toy_sql: test" in out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("warning: biodsbench: the build dropped")
    assert lines[1].startswith("error: 1 of 2 families failed to build: biodsbench: the build left the 'train' "
                               "and 'test' split(s) empty (") and "FileNotFoundError: no such table" in lines[1]


def test_partial_drops_warn_with_count_and_reason_but_succeed(tmp_path, monkeypatch, capsys, load_script):
    from medagentgym.tasks import biodsbench

    real, calls = biodsbench._run_reference, []

    def every_third_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) % 3 == 0:
            raise RuntimeError("reference crashed")
        return real(*args, **kwargs)

    monkeypatch.setattr(biodsbench, "_run_reference", every_third_fails)
    status = load_script("build_tasks").main(["--families", "biodsbench", "--size", "tiny", "--out",
                                              str(tmp_path), "--jobs", "1", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    dropped = len(calls) // 3
    assert status == 0 and dropped > 0
    assert err == [(f"warning: biodsbench: the build dropped {dropped} of {len(calls)} instances: {dropped}x "
                    f"RuntimeError: reference crashed (see {tmp_path / 'biodsbench' / 'manifest.json'})")]


@pytest.mark.slow
def test_readme_build_command_from_another_directory_fills_every_family(tmp_path):
    """README's `medagentgym build --families all --size tiny --out artifacts/tasks`, run from a directory that is not
    the repository: every registered family gets non-empty train and test splits (about a minute on 2 cores)."""
    done = _build(tmp_path, "--families", "all", "--out", "artifacts/tasks", timeout=900)
    assert done.returncode == 0, done.stderr
    root = tmp_path / "artifacts" / "tasks"
    empty = {name: counts for name in tasks.names() if not all((counts := _splits(root, name)).values())}
    assert not empty, f"families with an empty split: {empty}"
    assert f"built {len(tasks.names())} family(ies)" in done.stdout


def test_env_spec_ships_an_absolute_tasks_root(tmp_path, monkeypatch):
    """EnvSpec is pickled to worker processes, which may start elsewhere (Ray actors do): it carries no cwd."""
    import pickle

    from medagentgym.env_client.rollout import EnvSpec

    monkeypatch.chdir(tmp_path)
    spec = pickle.loads(pickle.dumps(EnvSpec(tasks_root="artifacts/tasks")))
    assert spec.tasks_root == str(tmp_path / "artifacts" / "tasks")
