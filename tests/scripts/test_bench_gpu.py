"""scripts/bench_gpu.py: the GPU benchmark's code path, run at the tiny shape on CPU (issue #21)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_a_gpu_shape_without_a_gpu_is_refused_in_one_line(load_script, capsys):
    """Through the script's ``main`` in this process; the same as a subprocess (nothing on stdout) is the slow twin."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit) as refused:
        load_script("bench_gpu").main(["--shape", "7b", "--json"])
    assert str(refused.value) == ("bench_gpu.py: error: --shape 7b needs a CUDA GPU (this machine has none); "
                                  "--shape tiny runs the same code on CPU")
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_a_gpu_shape_without_a_gpu_is_refused_in_one_line_as_a_subprocess():
    proc = subprocess.run([sys.executable, "scripts/bench_gpu.py", "--shape", "7b", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == ("bench_gpu.py: error: --shape 7b needs a CUDA GPU (this machine "
                                                    "has none); --shape tiny runs the same code on CPU")


@pytest.mark.slow
def test_tiny_shape_measures_a_grpo_and_an_sft_step_on_cpu():
    proc = subprocess.run([sys.executable, "scripts/bench_gpu.py", "--shape", "tiny", "--json", "--tasks", "2",
                           "--generations", "2", "--max-turns", "2", "--max-new-tokens", "32"],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, "one JSON line on stdout, everything else on stderr"
    result = json.loads(lines[0])
    assert result["shape"] == "tiny" and result["device"].startswith("CPU")
    assert "rewards are 0" in result["rewards"]
    grpo, sft = result["grpo"], result["sft"]
    assert grpo["episodes"] == 4 and grpo["reward"] == 0.0
    assert grpo["sandbox_calls"] >= 4, "every episode opened with its task's reference SQL in the sandbox"
    split = grpo["split_s"]
    assert sum(split.values()) == pytest.approx(grpo["step_s"], abs=0.05)
    assert split["generation"] > 0 and split["update"] > 0 and 0 <= grpo["generator_idle_share"] <= 1
    assert grpo["generated_tokens"] > 0 and grpo["trained_tokens"] > grpo["generated_tokens"]
    assert grpo["generated_tokens_per_s"] > 0 and grpo["trained_tokens_per_s"] > 0
    assert grpo["peak_allocated_gib"] is None  # no GPU: nothing to read
    assert set(grpo["peak_gib_by_phase"]) == {"model_loaded", "rollout", "update"}
    assert grpo["generation_backend"].startswith("HF-generate step") and "vLLM" in grpo["generation_backend"]
    assert 0 < grpo["sandbox_share_of_step"] < 1
    for step in (grpo, sft):
        assert step["dry_run_estimate_gib"]["training"] > 0 and step["estimate_at_measured_lengths_gib"]["training"] > 0
    assert sft["tokens"] == sft["micro_batch"] * sft["max_length"] and sft["step_s"] > 0


def test_a_step_that_cannot_finish_before_the_deadline_is_skipped_and_said(tmp_path, load_script, monkeypatch,
                                                                           capsys):
    """In this process, through the script's ``main``; the same run as a subprocess is the slow test below."""
    import torch

    bench = load_script("bench_gpu")
    monkeypatch.setattr(bench, "STARTED", time.monotonic())  # the deadline counts from this run's start
    for key in ("TRL_EXPERIMENTAL_SILENCE", "WANDB_MODE"):  # main sets them; give this worker's back afterwards
        monkeypatch.setenv(key, os.environ.get(key, ""))
        if not os.environ[key]:
            monkeypatch.delenv(key)
    threads = torch.get_num_threads()  # main sets one torch thread on CPU: the worker's other tests keep theirs
    out = tmp_path / "bench.json"
    try:
        assert bench.main(["--shape", "tiny", "--json", "--deadline-s", "5", "--out-json", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    result = json.loads(out.read_text())
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and json.loads(printed[0]) == result, "one JSON line on stdout, everything else on stderr"
    assert "grpo" not in result and "sft" not in result
    assert set(result["skipped"]) == {"grpo", "sft"} and "less than the 150 s a step needs" in result["skipped"]["grpo"]
    assert result["datasets"] and result["pyarrow"]


@pytest.mark.slow
def test_the_deadline_skip_as_a_subprocess_prints_one_json_line(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "scripts/bench_gpu.py", "--shape", "tiny", "--json", "--deadline-s", "5",
                           "--out-json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(proc.stdout.strip().splitlines()) == 1 and json.loads(proc.stdout) == result
    assert set(result["skipped"]) == {"grpo", "sft"} and result["elapsed_s"] < 600


PACK311 = REPO / ".gpu_pack311"


@pytest.mark.slow
@pytest.mark.skipif(not (PACK311 / "wheels").is_dir(), reason="needs `make gpu-pack GPU_PY=3.11 GPU_PACK=.gpu_pack311`")
def test_the_device_script_runs_the_tiny_shape_with_the_pack_inside_its_budget(tmp_path):
    """The device call as it will run there, on this machine's Python: the pack installed with --no-index --no-deps
    --target over this interpreter, the tiny shape, the default 520 s budget; one JSON and the log under OUT."""
    env = {**os.environ, "PY": sys.executable, "PACK": str(PACK311), "SHAPE": "tiny", "OUT": str(tmp_path / "out"),
           "SITE": str(tmp_path / "site-packages")}
    proc = subprocess.run(["sh", "scripts/bench_gpu_device.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=560)
    assert proc.returncode == 0, (tmp_path / "out" / "bench_gpu.log").read_text()[-3000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bench_gpu.json", "bench_gpu.log"]
    result = json.loads((tmp_path / "out" / "bench_gpu.json").read_text())
    assert result["datasets"] == "5.2.0" and result["trl"] == "1.16.0"
    assert result["grpo"]["step_s"] > 0 and result["sft"]["step_s"] > 0 and result["elapsed_s"] < 520
