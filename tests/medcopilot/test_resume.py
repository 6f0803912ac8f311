"""A killed SFT run resumes from its newest checkpoint: the global step continues and the run finishes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from medagentgym.medcopilot.modeling import last_checkpoint

REPO = Path(__file__).resolve().parents[2]
MAX_STEPS = 20


def _train_args(tiny_model_dir, store, out):
    return ["recipe=sft_tiny", f"model.name_or_path={tiny_model_dir}", f"rollout.store={store}",
            f"output.dir={out}", f"trainer.max_steps={MAX_STEPS}", "trainer.save_steps=1", "trainer.save_total_limit=3",
            "trainer.logging_steps=1", "trainer.max_length=512", "trainer.report_to=none"]


def test_killed_run_resumes_from_last_checkpoint(tiny_model_dir, sample_trajectory_store, tmp_path, train_main,
                                                 quiet_training_env, capsys):
    """First run: a real ``python train.py`` process, SIGKILLed once a checkpoint exists. Rerun: the same
    command line through ``train.main`` in this process (one interpreter start fewer: imports cost ~5-15 s)."""
    out = tmp_path / "run"
    argv = _train_args(tiny_model_dir, sample_trajectory_store, out)
    cmd = [sys.executable, "train.py", *argv]
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600  # a hang guard: ends at the first checkpoint (~10 CPU-s in)
        while last_checkpoint(out) is None and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, f"run ended before it could be killed: {first.stderr.read()[-500:]}"
        first.kill()
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
    killed_at = last_checkpoint(out)
    assert killed_at is not None and not (out / "run_summary.json").exists()
    step_at_kill = int(killed_at.rsplit("-", 1)[1])
    assert 1 <= step_at_kill < MAX_STEPS

    capsys.readouterr()
    assert train_main(argv) == 0
    resumed_from = last_checkpoint_mentioned(capsys.readouterr().out)
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == MAX_STEPS
    assert summary["resumed_from"] is not None and int(summary["resumed_from"].rsplit("-", 1)[1]) >= step_at_kill
    assert resumed_from == summary["resumed_from"]
    steps = [e["step"] for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in e]
    assert steps == list(range(1, MAX_STEPS + 1))  # old history kept, new steps continue it, none repeated


def last_checkpoint_mentioned(stdout: str) -> str | None:
    """The checkpoint path from sft.run's '[sft] ... resuming from <path>' line."""
    for line in stdout.splitlines():
        if line.startswith("[sft]") and "resuming from " in line:
            value = line.rsplit("resuming from ", 1)[1].strip()
            return None if value == "scratch" else value
    return None


def test_last_checkpoint_skips_incomplete_and_explicit_choice_wins(tmp_path):
    import pytest

    from medagentgym.medcopilot.config import RecipeError
    from medagentgym.medcopilot.modeling import resume_checkpoint

    assert last_checkpoint(tmp_path / "missing") is None
    for step, complete in ((2, True), (10, True), (11, False)):  # checkpoint-11: killed while saving
        ckpt = tmp_path / f"checkpoint-{step}"
        ckpt.mkdir()
        if complete:
            (ckpt / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-final").mkdir()
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # numeric, not lexical, order
    assert resume_checkpoint({}, tmp_path) == str(tmp_path / "checkpoint-10")
    assert resume_checkpoint({"resume_from_checkpoint": str(tmp_path / "checkpoint-2")}, tmp_path).endswith("-2")
    with pytest.raises(RecipeError, match="does not exist"):
        resume_checkpoint({"resume_from_checkpoint": str(tmp_path / "nope")}, tmp_path)
