"""medagentgym rollout: a run killed with SIGKILL midway resumes to the exact set of episodes, no duplicates."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from medagentgym import tasks
from env_client.trajectory import TrajectoryStore

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = "bwrap" if shutil.which("bwrap") else "local"


@pytest.fixture(scope="module")
def tasks_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


def _cmd(root: Path, out: Path, *extra: str, seed: int = 3) -> list[str]:
    return [sys.executable, "-m", "medagentgym", "rollout", "--tasks-root", str(root), "--families",
            "toy_sql", "--split", "test", "--policy", "oracle", "-k", "2", "--out", str(out), "--seed", str(seed),
            "--sandbox", SANDBOX, "--allow-unisolated", "--no-progress", *extra]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_kill9_midway_then_resume_gives_exact_set(tasks_root, tmp_path):
    out = tmp_path / "roll.jsonl"
    expected = {(inst.id, j) for inst in tasks.make("toy_sql", root=tasks_root).instances("test") for j in range(2)}
    proc = subprocess.Popen(_cmd(tasks_root, out, "--concurrency", "1"), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600  # ends at the 5th stored line (the event); a hang guard (issue #29)
    while _lines(out) < 5 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stored_at_kill = _lines(out)
    assert proc.returncode == -signal.SIGKILL
    assert 5 <= stored_at_kill < len(expected), "the kill must land mid-run for this test to mean anything"

    done = subprocess.run(_cmd(tasks_root, out, "--concurrency", "2", "--json"), cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == len(expected) and summary["skipped"] >= stored_at_kill
    assert summary["success_rate"] == 1.0

    keys = [t.key for t in TrajectoryStore(out).read()]
    assert Counter(keys).most_common(1)[0][1] == 1, "an episode was stored twice"
    assert set(keys) == expected
    # seeds are a pure function of (seed, task, sample): same as a fresh planner computes
    from env_client.rollout import episode_seed

    for t in TrajectoryStore(out).read():
        assert t.header.seed == episode_seed(3, t.header.task_id, t.header.sample_idx)

    again = subprocess.run(_cmd(tasks_root, out, "--json"), cwd=ROOT, check=False, capture_output=True, text=True, timeout=600)
    assert json.loads(again.stdout.strip().splitlines()[-1])["new"] == 0
    assert _lines(out) == len(expected)


def test_bad_arguments_exit_2_with_one_line(tasks_root, tmp_path):
    bad = subprocess.run(_cmd(tasks_root, tmp_path / "x.jsonl", "--policy", "bogus"), cwd=ROOT,
                         check=False, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("error: unknown policy spec 'bogus'")
    bad = subprocess.run([sys.executable, "-m", "medagentgym", "rollout", "--tasks-root", str(tasks_root),
                          "--families", "toy_sq"], cwd=ROOT, check=False, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "did you mean `toy_sql`" in bad.stderr


def test_a_rerun_under_other_settings_is_refused(tasks_root, tmp_path):
    out = tmp_path / "roll.jsonl"
    first = subprocess.run(_cmd(tasks_root, out, "--limit", "2"), cwd=ROOT, check=False, capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    stored = _lines(out)
    for cmd, what in ((_cmd(tasks_root, out, "--limit", "2", "--max-turns", "3"), "env.max_turns: "),
                      (_cmd(tasks_root, out, "--limit", "2", seed=4), "seed: 3 -> 4")):
        other = subprocess.run(cmd, cwd=ROOT, check=False, capture_output=True, text=True, timeout=600)
        assert other.returncode == 2 and what in other.stderr and "another --out" in other.stderr, other.stderr
    assert _lines(out) == stored  # nothing was added to the store
