"""A tiny GRPO run whose episodes run on two ``medagentgym serve`` processes (``env.url`` as a list): it trains,
both servers serve episodes, and the trainer starts no sandbox of its own; with one server killed mid-run, its
episodes are played again on the other and the run completes."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from pathlib import Path

import pytest


def _declare(root: Path) -> Path:
    fam = root / "say_seven"
    fam.mkdir(parents=True)
    (fam / "family.yaml").write_text("name: say_seven\nanswer_type: integer\nactions: [submit_answer]\n"
                                     "max_turns: 1\nsplits: [train, test]\n", encoding="utf-8")
    questions = ["Submit the number 7.", "Please submit 7 as the answer."]
    (fam / "tasks.jsonl").write_text("".join(json.dumps({"question": q, "answer": 7, "split": s}) + "\n"
                                             for q in questions for s in ("train", "test")), encoding="utf-8")
    return root


def _grpo_argv(model: Path, root: Path, urls: list[str], out: Path) -> list[str]:
    """Two tiny GRPO steps of 4 one-turn episodes each, on the env servers at ``urls``."""
    return ["recipe=grpo_tiny", f"model.name_or_path={model}", f"tasks.root={root}", "tasks.families=[say_seven]",
            f"env.url=[{', '.join(urls)}]", f"output.dir={out}", "env.max_turns=1", "rollout.concurrency=4",
            "rollout.max_new_tokens=8", "trainer.max_steps=2", "trainer.per_device_train_batch_size=4",
            "trainer.num_generations=2", "trainer.max_completion_length=32", "trainer.report_to=[]"]


@pytest.fixture()
def two_env_servers(tmp_path, env_server_processes):
    """Two medagentgym serve processes serving say_seven: ``(root, [(url, log path)], [process])``."""
    root = _declare(tmp_path / "tasks")
    started = env_server_processes(root, 2, "--workers", "2")
    return root, [(url, log) for _, url, log in started], [proc for proc, _, _ in started]


@pytest.mark.slow  # two server processes start (pandas, the sandbox) and TRL loads: ~1 min on a busy machine
def test_grpo_trains_with_episodes_on_two_env_servers(two_env_servers, tiny_model_dir, tmp_path, train_main,
                                                      quiet_training_env, capsys):
    root, servers, _ = two_env_servers
    urls = [url for url, _ in servers]
    out = tmp_path / "grpo"
    argv = _grpo_argv(tiny_model_dir, root, urls, out)
    assert train_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"env servers {', '.join(urls)}" in printed, "the trainer opened no sandbox of its own"
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["reward_first"] is not None
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert all("env/success_rate/say_seven" in row for row in history if "loss" in row), "per-family success"
    resets = [log.read_text().count("POST /reset") for _, log in servers]
    assert all(n >= 2 for n in resets) and sum(resets) == 8, f"2 steps x 4 episodes over both servers: {resets}"


@pytest.mark.slow  # as above, plus a server killed mid-run
def test_grpo_survives_an_env_server_killed_mid_run(two_env_servers, tiny_model_dir, tmp_path, train_main,
                                                    quiet_training_env, caplog):
    """One of the two servers is killed (SIGKILL) while it holds open episodes: those are played again on the
    other server, the two steps complete with every row's episode, and no row gets two."""
    root, servers, procs = two_env_servers
    urls = [url for url, _ in servers]
    killed = threading.Event()

    def kill_first_mid_episode() -> None:
        # the access log says an episode is mid-way: reset (logged once answered) with its one step not answered
        log = servers[0][1]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and procs[0].poll() is None:
            text = log.read_text()
            if text.count('"POST /reset') - text.count('"POST /step') >= 2:
                procs[0].send_signal(signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.002)

    killer = threading.Thread(target=kill_first_mid_episode, daemon=True)
    killer.start()
    out = tmp_path / "grpo"
    argv = _grpo_argv(tiny_model_dir, root, urls, out)
    with caplog.at_level(logging.WARNING, logger="env_client.http"):
        assert train_main(argv) == 0
    killer.join(timeout=5)
    assert killed.is_set(), "the first server was never killed with an episode open on it"
    replays = [r for r in caplog.records if "lost its env server" in r.getMessage()]
    assert replays, "no episode was running on the killed server"
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["reward_first"] is not None
    resets = [log.read_text().count("POST /reset") for _, log in servers]
    # 8 episodes (2 steps x 4 rows), plus one reset per replay; a reset the killed server answered but whose
    # reply never arrived may add one per episode open there
    assert 8 + len(replays) <= sum(resets) <= 8 + 2 * len(replays) + 4, resets
