"""medagentgym eval and medagentgym leaderboard end to end: build on demand, report, plots, JSON line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym.cli import COMMANDS
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

ROOT = Path(__file__).resolve().parents[2]
#: "evaluate.py" -> "eval": the command that replaced each script (medagentgym.cli.COMMANDS)
_COMMAND = {f"{module}.py": name for name, (module, _) in COMMANDS.items()}
SANDBOX = "bwrap" if shutil.which("bwrap") else "local"
FAMILIES = "toy_sql,medcalcbench"


# 600 s is a hang guard (issue #29): an eval here is ~8 CPU-s, but a loaded run once needed more than 120 s of clock.
def _run(script: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medagentgym", _COMMAND[script], *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _evaluate(root: Path, out: Path, policy: str, *extra: str) -> subprocess.CompletedProcess:
    return _run("evaluate.py", "--policy", policy, "--families", FAMILIES, "--limit", "4", "--tasks-root", str(root),
                "--out", str(out), "--sandbox", SANDBOX, "--allow-unisolated", "--no-progress", "--json",
                "--concurrency", "2", *extra)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("eval")
    root = base / "tasks"  # missing: medagentgym eval must build the families into it
    oracle = _evaluate(root, base / "oracle", "oracle", "-k", "2")
    shotgun = _evaluate(root, base / "shotgun", "shotgun")
    return base, root, oracle, shotgun


def test_oracle_scores_every_family_and_writes_report(runs):
    base, root, oracle, _ = runs
    assert oracle.returncode == 0, oracle.stderr
    assert (root / "toy_sql" / "manifest.json").exists() and (root / "medcalcbench" / "manifest.json").exists()
    summary = json.loads(oracle.stdout.strip().splitlines()[-1])
    assert summary["success_rate"] == 1.0 and summary["episodes"] == 16
    assert summary["per_family"] == {"medcalcbench": 1.0, "toy_sql": 1.0}
    assert summary["pass_at_k"] == {"1": 1.0, "2": 1.0} and summary["best_at_k"] is None
    report = json.loads((base / "oracle" / "report.json").read_text())
    assert report["actions"]["submit_answer"] >= 16 and report["errors"] == {}
    for png in ("success_by_family.png", "pass_at_k.png", "errors.png"):
        assert (base / "oracle" / png).stat().st_size > 1000
    assert "Pass@K" in (base / "oracle" / "report.md").read_text()


def test_adversarial_policy_stays_at_or_below_base_rate(runs):
    _base, _, _, shotgun = runs
    assert shotgun.returncode == 0, shotgun.stderr
    summary = json.loads(shotgun.stdout.strip().splitlines()[-1])
    for fam, rate in summary["per_family"].items():
        assert rate <= summary["base_rate"][fam]
    assert summary["success_rate"] == 0.0 and summary["errors"] == {"wrong_answer": 8}


def test_leaderboard_merges_reports(runs):
    base = runs[0]
    done = _run("leaderboard.py", str(base / "oracle"), str(base / "shotgun" / "report.json"), "--out",
                str(base / "lb"), "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout.strip().splitlines()[-1])["rows"]
    assert [r["policy"] for r in rows] == ["oracle", "shotgun"]
    assert "| oracle | 16 | 100.0% |" in (base / "lb" / "leaderboard.md").read_text()
    assert (base / "lb" / "leaderboard.png").stat().st_size > 1000


def test_bad_input_is_one_line_error(runs, tmp_path):
    root = runs[1]
    bad = _run("evaluate.py", "--families", "toy_sq", "--tasks-root", str(root), "--out", str(tmp_path))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "did you mean" in bad.stderr
    reuse = _evaluate(root, runs[0] / "oracle", "empty")  # an out dir holding another policy's episodes
    assert reuse.returncode == 2 and "pass another --out" in reuse.stderr
    missing = _run("leaderboard.py", str(tmp_path / "nope.json"), "--out", str(tmp_path))
    assert missing.returncode == 2 and "cannot read report" in missing.stderr


def test_rerun_resumes_and_scores_give_best_at_k(runs):
    base, root, _, _ = runs
    store = base / "oracle" / "trajectories.jsonl"
    keys = [(json.loads(line)["header"]["task_id"], json.loads(line)["header"]["sample_idx"])
            for line in store.read_text().splitlines()]
    scores = base / "scores.jsonl"
    scores.write_text("".join(json.dumps({"task_id": t, "sample_idx": i, "score": 0.5}) + "\n" for t, i in keys))
    again = _evaluate(root, base / "oracle", "oracle", "-k", "2", "--scores", str(scores), "--no-plots")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["best_at_k"] == {"1": 1.0, "2": 1.0} and summary["episodes"] == 16
    assert len(store.read_text().splitlines()) == 16  # resumed: nothing re-run, nothing duplicated
    scores.write_text('{"task_id": "x"}\n')
    bad = _evaluate(root, base / "oracle", "oracle", "-k", "2", "--scores", str(scores))
    assert bad.returncode == 2 and "sample_idx" in bad.stderr


def _chat_server(status: int = 200, served: str | None = None):
    """An OpenAI-compatible endpoint that always submits "0" (or answers ``status`` with an error); ``served``: the
    model id its responses name (default: the one asked for)."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        if status != 200:
            return JSONResponse({"error": {"message": "invalid api key", "type": "auth"}}, status_code=status)
        text = '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": "0"}}\n</tool_call>'
        return {"id": "x", "object": "chat.completion", "created": 0, "model": served or body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109}}

    return app


@pytest.mark.slow  # ~12 s; make test keeps the resume and provenance checks of the other evaluate tests
def test_rerun_with_other_sampling_never_reuses_episodes_and_reports_provenance(runs, tmp_path):
    from medagentgym.env_client.server_app import background_server

    root = runs[1]
    with background_server(_chat_server()) as base:
        policy = f"openai:m@{base}/v1"
        first = _evaluate(root, tmp_path / "api", policy, "--temperature", "0.7")
        assert first.returncode == 0, first.stderr
        again = _evaluate(root, tmp_path / "api", policy, "--temperature", "0.7")  # same settings: resumes
        assert again.returncode == 0 and json.loads(again.stdout.splitlines()[-1])["episodes"] == 8
        hotter = _evaluate(root, tmp_path / "api", policy, "--temperature", "1.0")
    assert hotter.returncode == 2 and hotter.stderr.count("\n") == 1, hotter.stderr
    assert "temperature: 0.7 -> 1.0" in hotter.stderr and "another --out" in hotter.stderr
    report = json.loads((tmp_path / "api" / "report.json").read_text())
    meta = report["meta"]
    assert meta["policy"]["sampling"]["temperature"] == 0.7 and meta["policy"]["spec"] == policy
    assert meta["commit"] and meta["date"] and len(meta["task_set"]) == 16 and meta["families"]["toy_sql"]["version"]
    assert report["prompt_tokens"] == 800 and report["total_tokens"] == 72  # 8 one-turn episodes
    assert len(report["ci95"]) == 2 and "## Provenance" in (tmp_path / "api" / "report.md").read_text()


def test_a_failing_endpoint_lowers_the_headline_and_says_why_once(runs, tmp_path):
    from medagentgym.env_client.server_app import background_server

    with background_server(_chat_server(status=401)) as base:
        done = _evaluate(runs[1], tmp_path / "down", f"openai:m@{base}/v1")
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["success_rate"] == 0.0 and summary["episodes"] == 8 and summary["infra_failures"] == 8
    failed = [line for line in done.stderr.splitlines() if "failed to run" in line]
    assert len(failed) == 1 and "8 episode(s)" in failed[0] and "OPENAI_API_KEY" in failed[0]


def test_a_bad_scores_file_fails_before_any_episode_runs(runs, tmp_path):
    """--scores was read only after every episode had run (hours on a real model): now it is read first."""
    _, root, _, _ = runs
    scores = tmp_path / "scores.jsonl"
    scores.write_text('{"task_id": "x", "score": 0.5}\n')
    for path in (scores, tmp_path / "missing.jsonl"):
        bad = _evaluate(root, tmp_path / "out", "oracle", "--scores", str(path))
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
        assert str(path) in bad.stderr
        assert not (tmp_path / "out" / "trajectories.jsonl").exists()  # no episode was rolled out


def test_the_report_records_sandbox_versions_wall_time_and_the_model_id_the_endpoint_served(runs, tmp_path):
    from medagentgym.env_client.server_app import background_server

    root = runs[1]
    with background_server(_chat_server(served="m-2026-11-01")) as base:
        done = _evaluate(root, tmp_path / "api", f"openai:m@{base}/v1", "--temperature", "0")
    assert done.returncode == 0, done.stderr
    meta = json.loads((tmp_path / "api" / "report.json").read_text())["meta"]
    assert meta["served_model"] == ["m-2026-11-01"] and meta["sandbox"] == SANDBOX
    assert meta["versions"]["medagentgym"] and meta["versions"]["openai"] and meta["versions"]["python"]
    assert isinstance(meta["wall_s"], float) and meta["wall_s"] >= 0
    md = (tmp_path / "api" / "report.md").read_text()
    assert "| served_model | `[\"m-2026-11-01\"]` |" in md and "| sandbox |" in md and "| wall_s |" in md
