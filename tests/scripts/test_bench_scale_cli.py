"""scripts/bench_scale.py at toy size: its JSON line (memory per open session, latencies, where the time went), and
the table naming the cap when more episodes run than the pool may hold."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym import tasks

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bench_scale.py measures the bwrap sandbox")


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


def _bench(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--tasks-root", str(root),
                           "--families", "toy_sql", "--rounds", "1", "--think-s", "0", "--json", *args],
                          capture_output=True, text=True, timeout=600, check=False)


def test_three_sessions_open_at_once_are_measured(toy_root):
    proc = _bench(toy_root, "--levels", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (level,) = out["levels"]
    (rnd,) = level["rounds"]
    assert rnd["completed"] == 3 == rnd["correct"] and rnd["failed"] == 0 and level["peak_workers"] == 3
    peak = level["memory_at_peak_mib"]
    assert peak["busy"] == 3 and peak["workers"] == 3 and peak["lean"] == 1  # two warm workers, one started
    assert peak["pss_by_role"]["server"] > 0 and 0 < level["mib_per_live_session"]["pss"] < peak["pss"]
    assert set(rnd["time_s"]) == {"reset", "wait_for_all", "think", "user_code", "env_overhead", "close"}
    assert out["summary"]["sessions_to_fill_memory"] > 0 and out["summary"]["default_cap"] >= 2
    assert "with all sessions open, 3 sessions on 3 workers" in proc.stdout


def test_more_episodes_than_the_cap_fail_with_the_cap_named(toy_root):
    proc = _bench(toy_root, "--levels", "3", "--max-workers", "2", "--acquire-timeout", "1")
    assert proc.returncode == 1
    (rnd,) = json.loads(proc.stdout.strip().splitlines()[-1])["levels"][0]["rounds"]
    assert rnd["completed"] == 2 and rnd["failed"] == 1
    (error,) = rnd["errors"]
    assert error.startswith("SandboxBusy: ") and "all 2 workers are busy" in error and "max_workers=2" in error
    assert "failed" in proc.stdout and "max_workers=2" in proc.stdout
