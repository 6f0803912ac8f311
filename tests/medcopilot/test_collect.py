"""medagentgym collect: K trajectories per task from a policy, successes kept for SFT, both outcomes for DPO,
resumable, a summary per family; the SFT recipe trains on what it wrote."""

from __future__ import annotations

import json
import threading

import pytest

from medagentgym import tasks
from medagentgym.env_client.policies import ConstantPolicy, OraclePolicy
from medagentgym.env_client.trajectory import TrajectoryStore
from medagentgym.medcopilot.collect import collect
from medagentgym.medcopilot.data import dpo_pairs, load_episodes, sft_rows


class Alternating:
    """Sample 0 of each task replays the oracle, sample 1 submits "0" at once: one success and one failure."""

    def __init__(self, root):
        self.oracle = OraclePolicy(lambda name: tasks.make(name, root=root))
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def for_episode(self, instance):
        with self.lock:
            n = self.seen[instance.id] = self.seen.get(instance.id, -1) + 1
        return self.oracle.for_episode(instance) if n % 2 == 0 else ConstantPolicy("0")

    def act(self, messages, *, tools=None, seed=None):
        raise AssertionError("bound per episode")


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("collect_tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


@pytest.fixture(scope="module")
def collected(toy_root, tmp_path_factory, sandbox_backend):
    from medagentgym.env_client.rollout import EnvSpec

    out = tmp_path_factory.mktemp("collect") / "teacher"
    spec = EnvSpec(tasks_root=str(toy_root), backend=sandbox_backend, allow_unisolated=sandbox_backend == "local")
    instances = tasks.make("toy_sql", root=toy_root).instances("train")[:3]
    run_info = {"policy": "alternating", "k": 2}
    result = collect(instances, Alternating(toy_root), spec, k=2, out=out, concurrency=1, run_info=run_info)
    return out, result, instances, spec, run_info


def test_successes_for_sft_both_outcomes_for_dpo_and_a_summary(collected):
    out, result, _, _, _ = collected
    row = result.summary["toy_sql"]
    assert row == {**row, "tasks": 3, "episodes": 6, "successes": 3, "success_rate": 0.5, "tasks_solved": 3,
                   "tasks_with_both": 3, "sft_rows": 3}
    assert row["dpo_pairs"] == 3, "each task pairs its success with its failure at their first divergent turn"
    assert json.loads((out / "summary.json").read_text()) == result.summary
    sft = load_episodes(out / "sft.jsonl")
    assert len(sft) == 3 and all(ep.success for ep in sft) and len(sft_rows(sft)) == 3
    dpo = load_episodes(out / "dpo.jsonl")
    assert len(dpo) == 6 and len(dpo_pairs(dpo)) == 3
    assert len(TrajectoryStore(out / "trajectories.jsonl")) == 6


def test_a_rerun_resumes_and_a_changed_run_is_refused(collected, toy_root):
    from medagentgym.env_client.rollout import RolloutError

    out, first, instances, spec, run_info = collected
    before = (out / "sft.jsonl").read_bytes()
    again = collect(instances, Alternating(toy_root), spec, k=2, out=out, concurrency=1, run_info=run_info)
    assert again.rollout.new == 0 and again.rollout.skipped == 6 and again.summary == first.summary
    assert (out / "sft.jsonl").read_bytes() == before
    with pytest.raises(RolloutError, match="holds episodes of another run"):
        collect(instances, Alternating(toy_root), spec, k=2, out=out, run_info={**run_info, "k": 3})


def test_the_cli_writes_the_same_layout(load_script, toy_root, tmp_path, capsys):
    main = load_script("collect").main
    out = tmp_path / "oracle"
    argv = ["--tasks-root", str(toy_root), "--families", "toy_sql", "--limit", "2", "-k", "1", "--policy",
            "oracle", "--out", str(out), "--no-progress", "--json", "--sandbox", "local", "--allow-unisolated"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["all"]["successes"] == 2 and summary["all"]["dpo_pairs"] == 0
    assert main(["--tasks-root", str(toy_root), "--suite", "id", "--out", str(tmp_path / "x")]) == 2
    assert "is not built" in capsys.readouterr().err


def test_the_sft_recipe_trains_on_the_collected_successes(collected, tiny_model_dir, tmp_path, train_main,
                                                         quiet_training_env):
    out, _, instances, spec, _ = collected
    # the tasks root and the number of tasks it was collected over: without them the recipe's relative
    # artifacts/tasks is read, and after `make demo` built toy_sql there the store's 3 tasks are refused
    argv = ["recipe=sft_tiny", f"model.name_or_path={tiny_model_dir}", f"rollout.store={out / 'sft.jsonl'}",
            f"tasks.root={spec.tasks_root}", f"tasks.limit={len(instances)}",
            f"output.dir={tmp_path / 'sft'}", "trainer.max_steps=1", "trainer.save_steps=1"]
    assert train_main(argv) == 0
    assert json.loads((tmp_path / "sft" / "run_summary.json").read_text())["train_rows"] == 3
