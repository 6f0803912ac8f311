"""Two real processes (torchrun, gloo on CPU): what only shows up when training runs on more than one rank.

- GRPO lets a group span processes: one group of 4 episodes is split 2 + 2. The step must not crash on it
  (the ``env/*`` metrics count flat groups over every process's rows), and the two ranks, holding the same
  prompt, must sample different episodes (sampling seeds include the rank).
- PPO's adaptive KL coefficient must stay one number across ranks: every rank updates its controller with the
  KL of all processes' episodes, never only its own.

The ZeRO-3 / FSDP refusal (``generate`` would need the same number of calls on every rank) is checked on fake
accelerators: no DeepSpeed launch is needed to see the rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from medagentgym.medcopilot.rollout_func import check_generation_layout

#: CPU-bound for 1-2 minutes; on a loaded shared machine the wall time can be many times that.
pytestmark = pytest.mark.timeout(1800)

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def ranks(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    (root / "pick").mkdir()
    (root / "pick" / "family.yaml").write_text("name: pick\nanswer_type: integer\nactions: [submit_answer]\n"
                                              "max_turns: 1\nsplits: [train, test]\n", encoding="utf-8")
    (root / "pick" / "tasks.jsonl").write_text("".join(
        json.dumps({"question": f"Submit the number {n}.", "answer": n, "split": "train"}) + "\n" for n in (1, 3, 5)),
        encoding="utf-8")
    out = tmp_path_factory.mktemp("ranks")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "TRL_EXPERIMENTAL_SILENCE": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "_distributed.py"), str(tiny_model_dir), str(root), str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_a_grpo_group_split_across_processes_trains_and_logs(ranks):
    for rank in ranks:
        log = rank["grpo_log"][0]
        assert log["env/zero_adv_frac"] in (0.0, 1.0)  # one whole group, counted over both processes
        assert "loss" in log


def test_ranks_holding_the_same_prompt_sample_different_episodes(ranks):
    first, second = (r["grpo_completions"] for r in ranks)
    assert len(first) == len(second) == 2
    assert first != second and first[0] != second[0]


def test_ppo_kl_controller_sees_every_process(ranks):
    first, second = (r["kl_updates"] for r in ranks)
    assert len(first) == 1 and first == second  # the same global (kl, episodes) on both ranks
    assert first[0][1] == 4 and first[0][0] > 0  # 2 episodes per rank, a reference that is not the policy
    assert ranks[0]["kl_coef"] == ranks[1]["kl_coef"]


def _accelerator(kind: str, processes: int, stage: int | None = None) -> SimpleNamespace:
    plugin = None if stage is None else SimpleNamespace(zero_stage=stage)
    return SimpleNamespace(num_processes=processes, distributed_type=SimpleNamespace(value=kind),
                           state=SimpleNamespace(deepspeed_plugin=plugin))


@pytest.mark.parametrize("kind,stage", [("DEEPSPEED", 3), ("FSDP", None)])
def test_sharded_multi_process_generation_is_refused_in_one_line(kind, stage):
    with pytest.raises(RuntimeError, match="would hang under .* with 2 processes") as err:
        check_generation_layout(_accelerator(kind, 2, stage))
    assert "\n" not in str(err.value) and "zero2" in str(err.value)


@pytest.mark.parametrize("kind,processes,stage", [("DEEPSPEED", 1, 3), ("DEEPSPEED", 2, 2), ("MULTI_GPU", 4, None),
                                                  ("FSDP", 1, None), ("NO", 1, None)])
def test_layouts_that_generate_independently_are_allowed(kind, processes, stage):
    check_generation_layout(_accelerator(kind, processes, stage))
