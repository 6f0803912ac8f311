"""scripts/bench_rollout.py: its table, and one JSON line with the throughput keys the issue asks for."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from medagentgym import tasks

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = "bwrap" if shutil.which("bwrap") else "local"


def test_bench_rollout_json_line(tmp_path):
    root = tmp_path / "tasks"
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    n_test = len(tasks.make("toy_sql", root=root).instances("test"))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_rollout.py"), "--tasks-root", str(root), "--families",
         "toy_sql", "--quick", "-k", "2", "--sandbox", SANDBOX, "--allow-unisolated", "--json"],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["episodes"] == 2 * min(n_test, 20) and out["failed"] == 0
    assert out["oracle_success_rate"] == 1.0 and out["families"] == ["toy_sql"]
    assert out["episodes_per_s"] > 0 and out["steps"] == 2 * out["episodes"]  # toy_sql's oracle: query, submit
    assert 0 < out["env_overhead_p50_ms"] < 1000 and out["exec_total_s"] > 0 and out["env_total_s"] > 0
    assert "oracle rollout benchmark" in proc.stdout and "toy_sql" in proc.stdout
    # Where an episode's time goes: every stage counted once per episode or per step, CPU per episode measured.
    stages, n = out["stages"], out["episodes"]
    assert {k: v["n"] for k, v in stages.items()} == {
        "reset.prepare": n, "reset.open": n, "reset.prompt": n, "step.parse": 2 * n, "step.sandbox": n,
        "step.exec": n, "step.grade": n, "step.bookkeeping": 2 * n, "close.session": n}
    assert all(v["p50_ms"] <= v["p99_ms"] and v["ms_per_episode"] >= 0 for v in stages.values())
    assert stages["step.exec"]["ms_per_episode"] <= stages["step.sandbox"]["ms_per_episode"]
    assert out["cpu_ms_per_episode"] > 0 and out["host_cpu_ms_per_episode"] > 0 and out["cpu_scope"]
    if out["cpu_scope"].startswith("cgroup"):  # the jails' CPU is counted too
        assert out["cpu_ms_per_episode"] >= out["host_cpu_ms_per_episode"]
    assert "where an episode's time goes" in proc.stdout


def test_bench_rollout_unknown_family_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_rollout.py"), "--tasks-root", str(tmp_path), "--families",
         "no_such_family", "--quick"], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
