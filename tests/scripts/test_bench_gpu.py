"""scripts/bench_gpu.py: the GPU benchmark's code path, run at the tiny shape on CPU (issue #21)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_a_gpu_shape_without_a_gpu_is_refused_in_one_line():
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
    for step in (grpo, sft):
        assert step["dry_run_estimate_gib"]["training"] > 0 and step["estimate_at_measured_lengths_gib"]["training"] > 0
    assert sft["tokens"] == sft["micro_batch"] * sft["max_length"] and sft["step_s"] > 0
