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
from medagentgym.env_client.trajectory import TrajectoryStore

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
    from medagentgym.env_client.rollout import episode_seed

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


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, check=False, capture_output=True, text=True, timeout=600)


def _summary(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_rerun_that_asks_another_question_is_refused_in_words_and_leaves_the_store_byte_identical(tasks_root,
                                                                                                    tmp_path):
    tasks.make("toy_lookup", root=tasks_root).build(tasks_root, size="tiny", seed=0)
    out = tmp_path / "roll.jsonl"
    _summary(_run(_cmd(tasks_root, out, "--limit", "3", "--json")))
    before = out.read_bytes(), (tmp_path / "roll.jsonl.run.json").read_bytes()
    assert before[0].count(b"\n") == 6
    for extra, seed, words in (
            (["--limit", "2"], 3, "(--limit: 3 -> 2)"),
            (["--limit", "4"], 3, "(--limit: 3 -> 4)"),
            (["--limit", "3", "-k", "1"], 3, "(-k: 2 -> 1)"),
            (["--limit", "3", "--split", "train"], 3, "(--split: test -> train)"),
            (["--limit", "3", "--families", "toy_sql,toy_lookup"], 3,
             "(--families: toy_sql -> 2 families (toy_lookup, toy_sql))"),
            (["--limit", "1", "-k", "3"], 5, "(--limit: 3 -> 1; -k: 2 -> 3; --seed: 3 -> 5)")):
        done = _run(_cmd(tasks_root, out, *extra, seed=seed))
        err = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(err) == 1, done.stderr
        assert err[0] == (f"error: {out} holds the episodes of another question {words}; pass another --out, or "
                          f"--overwrite to replace it"), err[0]
        assert (out.read_bytes(), (tmp_path / "roll.jsonl.run.json").read_bytes()) == before
    # the same question under other settings: refused by the rollout's own check, in words too
    for extra, words in ((["--max-turns", "3"], "env.max_turns: 15 -> 3"),
                         (["--policy", "constant:0"], 'policy.spec: "oracle" -> "constant:0"')):
        done = _run(_cmd(tasks_root, out, "--limit", "3", *extra))
        assert done.returncode == 2 and words in done.stderr and "manifest" not in done.stderr, done.stderr
        assert (out.read_bytes(), (tmp_path / "roll.jsonl.run.json").read_bytes()) == before
    assert _summary(_run(_cmd(tasks_root, out, "--limit", "3", "--json")))["new"] == 0  # the same question resumes
    assert out.read_bytes() == before[0]


def test_the_same_question_resumes_past_a_torn_last_line(tasks_root, tmp_path):
    out = tmp_path / "roll.jsonl"
    _summary(_run(_cmd(tasks_root, out, "--limit", "3", "--json")))
    whole = out.read_bytes()
    kept = whole[:whole[:-1].rfind(b"\n") + 1]  # five complete episodes, then the sixth's first half (a crash)
    out.write_bytes(kept + whole[len(kept):len(kept) + (len(whole) - len(kept)) // 2])
    summary = _summary(_run(_cmd(tasks_root, out, "--limit", "3", "--json")))
    assert (summary["skipped"], summary["new"], summary["episodes"]) == (5, 1, 6)
    data = out.read_bytes()
    assert data.startswith(kept) and data.endswith(b"\n") and data.count(b"\n") == 6
    keys = [t.key for t in TrajectoryStore(out).read()]
    assert len(keys) == len(set(keys)) == 6


def test_overwrite_replaces_the_store_only_when_the_run_ends_and_an_interrupted_one_resumes(tasks_root, tmp_path):
    out = tmp_path / "roll.jsonl"
    hidden = tmp_path / ".roll.jsonl.overwrite"
    _summary(_run(_cmd(tasks_root, out, "--limit", "3", "--json")))
    before = out.read_bytes()
    proc = subprocess.Popen(_cmd(tasks_root, out, "--limit", "6", "--overwrite", "--concurrency", "1"), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600  # ends at the 3rd line of the new store (the event); a hang guard
    while _lines(hidden) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and 3 <= _lines(hidden) < 12, "the kill must land mid-run"
    assert out.read_bytes() == before, "the old store stays whole until the new run ends"
    summary = _summary(_run(_cmd(tasks_root, out, "--limit", "6", "--overwrite", "--json")))
    assert summary["skipped"] >= 3 and summary["episodes"] == 12 and summary["success_rate"] == 1.0
    assert not hidden.exists() and not (tmp_path / ".roll.jsonl.overwrite.run.json").exists()
    assert _lines(out) == 12 and json.loads((tmp_path / "roll.jsonl.run.json").read_text())["limit"] == 6
    # --overwrite starts over even for the same question, and a stale hidden store of another run is not reused
    hidden.write_bytes(before)
    summary = _summary(_run(_cmd(tasks_root, out, "--limit", "1", "--overwrite", "--json")))
    assert (summary["skipped"], summary["new"]) == (0, 2) and _lines(out) == 2 and not hidden.exists()
    done = _run([sys.executable, "-m", "medagentgym", "rollout", "--tasks-root", str(tasks_root), "--overwrite"])
    assert done.returncode == 2 and "--overwrite replaces the file of --out; pass --out FILE" in done.stderr
