"""Smoke test of scripts/bench_sandbox.py: it runs end to end and its JSON line is complete and sane."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_sandbox.py"
KEYS = {"backend", "layers", "p50_ms", "p95_ms", "pandas_p50_ms", "sqlite_p50_ms", "exec_per_s",
        "fresh_process_p50_ms", "fresh_process_pandas_p50_ms", "original_p50_ms", "speedup_vs_fresh_pandas",
        "speedup_vs_original", "date", "cpu_count", "python", "oneshot_p50_ms", "oneshot_pandas_p50_ms"}


def test_quick_json_run(tmp_path: Path):
    backend = "bwrap" if shutil.which("bwrap") else "local"
    out_file = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", "--backend", backend, "--iterations", "12",
         "--duration", "0.5", "--original-iterations", "1", "--output", str(out_file)],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    result = json.loads(last)
    assert KEYS <= set(result)
    assert json.loads(out_file.read_text()) == result
    assert result["backend"] == backend and result["layers"] and all(isinstance(x, str) for x in result["layers"])
    if backend == "bwrap":
        assert {"bwrap", "netns", "pidns"} <= set(result["layers"])
    for key in KEYS - {"backend", "layers", "date", "python"}:
        assert result[key] > 0, key
    assert result["p95_ms"] >= result["p50_ms"]
    assert result["original_p50_ms"] >= 1000  # the original harness polls once per second
    assert result["speedup_vs_fresh_pandas"] > 1 and result["speedup_vs_original"] > 1
    assert result["speedup_vs_original"] == pytest.approx(result["original_p50_ms"] / result["p50_ms"], rel=0.01)
    assert "sandbox benchmark" in proc.stdout  # the table came first


def test_bad_flag_is_one_line_error():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--iterations", "0"], capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 2 and "--iterations=0 is invalid" in proc.stderr
