"""DeepSpeed ZeRO-2 and ZeRO-3 (recipes/accelerate/zero*.yaml) on 2 CPU processes: a tiny SFT step and a tiny
GRPO step through ``accelerate launch train.py``, the way a user runs them on GPUs.

Slow: each launch starts two interpreters (torch, TRL, DeepSpeed) and the first one JIT-compiles DeepSpeed's
shared-memory communication op (~45 s on a quiet 2-core machine; needs g++ and ninja). Skipped where the
``deepspeed`` extra is not installed (``DS_BUILD_OPS=0 pip install -e '.[deepspeed]'``; ``make venv`` does not).

``accelerate launch --multi_gpu`` would silently replace the config's DeepSpeed with plain DDP (and ``--cpu``
runs one process), so the launch passes only ``--num_processes 2 --mixed_precision no``; the saved checkpoint's
per-rank ZeRO shards prove that DeepSpeed ran with two ranks.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym import tasks
from medagentgym.medcopilot.config import RECIPES_DIR

pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")
pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _launch(stage: str, recipe: str, overrides: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "WANDB_DIR": str(tmp_path)}
    accelerate = Path(sys.executable).with_name("accelerate")
    with socket.socket() as sock:  # a free rendezvous port: other runs on this machine may hold 29500
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [str(accelerate), "launch", "--config_file", str(RECIPES_DIR / "accelerate" / f"{stage}.yaml"),
           "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(port),
           str(REPO / "train.py"), f"recipe={recipe}", *overrides]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
                          check=False)


def _zero_shards(checkpoint: Path) -> list[str]:
    return sorted(p.name for p in checkpoint.rglob("*zero_pp_rank_*optim_states.pt"))


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds_tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_sft_step_on_two_cpu_processes(stage, tiny_model_dir, sample_trajectory_store, tmp_path):
    out = tmp_path / "sft"
    done = _launch(stage, "sft_tiny", [f"model.name_or_path={tiny_model_dir}",
                                       f"rollout.store={sample_trajectory_store}", f"output.dir={out}",
                                       "trainer.max_steps=1", "trainer.save_steps=1", "trainer.report_to=none",
                                       "trainer.per_device_train_batch_size=1"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 1
    shards = _zero_shards(out / "checkpoint-1")
    assert len(shards) == 2 and any("rank_0" in s for s in shards) and any("rank_1" in s for s in shards), shards


def test_grpo_step_on_two_cpu_processes_zero2(tiny_model_dir, toy_root, tmp_path):
    out = tmp_path / "grpo"
    done = _launch("zero2", "grpo_tiny", [f"model.name_or_path={tiny_model_dir}", f"tasks.root={toy_root}",
                                          f"output.dir={out}", "tasks.limit=2", "env.sandbox=local",
                                          "env.allow_unisolated=true",
                                          "env.workers=2", "rollout.concurrency=2", "rollout.max_new_tokens=8",
                                          "trainer.max_steps=1", "trainer.per_device_train_batch_size=2",
                                          "trainer.num_generations=2", "trainer.max_completion_length=64",
                                          "trainer.save_strategy=steps", "trainer.save_steps=1"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 1 and summary["reward_first"] is not None
    assert len(_zero_shards(out / "checkpoint-1")) == 2


def test_grpo_step_under_zero3_is_refused_or_runs_never_hangs(tiny_model_dir, toy_root, tmp_path):
    """ZeRO-3 shards the weights, so ``model.generate`` needs the same number of calls on every process; a
    multi-turn rollout batches by timing, so the rollout hook refuses it with one line (use ZeRO-2 or vLLM)."""
    out = tmp_path / "grpo3"
    done = _launch("zero3", "grpo_tiny", [f"model.name_or_path={tiny_model_dir}", f"tasks.root={toy_root}",
                                          f"output.dir={out}", "tasks.limit=2", "env.sandbox=local",
                                          "env.allow_unisolated=true",
                                          "env.workers=2", "rollout.concurrency=2", "rollout.max_new_tokens=8",
                                          "trainer.max_steps=1", "trainer.per_device_train_batch_size=2",
                                          "trainer.num_generations=2", "trainer.max_completion_length=64"], tmp_path)
    text = done.stdout + done.stderr
    assert done.returncode != 0 and "DeepSpeed ZeRO-3" in text and "use DDP or ZeRO-2" in text, text[-3000:]
    shutil.rmtree(out, ignore_errors=True)
