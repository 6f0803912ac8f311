"""A tiny GRPO run whose episodes run on two ``medagentgym serve`` processes (``env.url`` as a list): it trains,
both servers serve episodes, and the trainer starts no sandbox of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from medcopilot.config import RECIPES_DIR

REPO = RECIPES_DIR.parent


def _declare(root: Path) -> Path:
    fam = root / "say_seven"
    fam.mkdir(parents=True)
    (fam / "family.yaml").write_text("name: say_seven\nanswer_type: integer\nactions: [submit_answer]\n"
                                     "max_turns: 1\nsplits: [train, test]\n", encoding="utf-8")
    questions = ["Submit the number 7.", "Please submit 7 as the answer."]
    (fam / "tasks.jsonl").write_text("".join(json.dumps({"question": q, "answer": 7, "split": s}) + "\n"
                                             for q in questions for s in ("train", "test")), encoding="utf-8")
    return root


@pytest.fixture()
def two_env_servers(tmp_path, sandbox_backend):
    """Two medagentgym serve processes on free loopback ports: ``[(url, log path)]``; each is stopped afterwards."""
    root = _declare(tmp_path / "tasks")
    started = []
    try:
        for i in range(2):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            log = tmp_path / f"server{i}.log"
            cmd = [sys.executable, "-m", "medagentgym", "serve", "--tasks-root", str(root),
                   "--port", str(port), "--workers", "2", "--sandbox", sandbox_backend]
            if sandbox_backend == "local":
                cmd.append("--allow-unisolated")
            proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                    env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
            started.append((proc, f"http://127.0.0.1:{port}", log))
        for proc, url, log in started:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.3)
        yield root, [(url, log) for _, url, log in started]
    finally:
        for proc, _, _ in started:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.mark.slow  # two server processes start (pandas, the sandbox) and TRL loads: ~1 min on a busy machine
def test_grpo_trains_with_episodes_on_two_env_servers(two_env_servers, tiny_model_dir, tmp_path, train_main,
                                                      quiet_training_env, capsys):
    root, servers = two_env_servers
    urls = [url for url, _ in servers]
    out = tmp_path / "grpo"
    argv = ["recipe=grpo_tiny", f"model.name_or_path={tiny_model_dir}", f"tasks.root={root}",
            "tasks.families=[say_seven]", f"env.url=[{', '.join(urls)}]", f"output.dir={out}",
            "env.max_turns=1", "rollout.concurrency=4", "rollout.max_new_tokens=8", "trainer.max_steps=2",
            "trainer.per_device_train_batch_size=4", "trainer.num_generations=2", "trainer.max_completion_length=32",
            "trainer.report_to=[]"]
    assert train_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"env servers {', '.join(urls)}" in printed, "the trainer opened no sandbox of its own"
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["reward_first"] is not None
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert all("env/success_rate/say_seven" in row for row in history if "loss" in row), "per-family success"
    resets = [log.read_text().count("POST /reset") for _, log in servers]
    assert all(n >= 2 for n in resets) and sum(resets) == 8, f"2 steps x 4 episodes over both servers: {resets}"
