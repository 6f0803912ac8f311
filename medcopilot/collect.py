"""SFT and DPO data at scale, as the paper made it: K trajectories per training task from any policy.

:func:`collect` rolls a policy (an OpenAI-compatible teacher, a local checkpoint, the oracle: any
``medagentgym.env_client.policies.make_policy`` spec) out ``k`` times over every task instance, in parallel, into one
resumable trajectory store, then splits it into the two stores the trainers read (``rollout.store``):

``<out>/trajectories.jsonl``  every episode (the resumable store; ``.run.json`` beside it refuses stale resumes)
``<out>/sft.jsonl``           the successful episodes: SFT trains on them (``recipes/sft_qwen*.yaml``)
``<out>/dpo.jsonl``           every episode of a task that has both a success and a failure: DPO pairs them
``<out>/summary.json``        per family: tasks, episodes, successes, tasks solved, SFT conversations, DPO pairs

The split files are rewritten from the full store on every run (atomically), so an interrupted and resumed
collection ends with the same files as an uninterrupted one. No torch is imported.

Example:
    >>> result = collect(instances, "openai:gpt-4.1-mini", spec, k=4, out="artifacts/collect/teacher")  # doctest: +SKIP
    >>> result.summary["all"]["sft_rows"], result.summary["all"]["dpo_pairs"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medagentgym.env_client.rollout import EnvSpec, RolloutSummary, rollout
from medagentgym.env_client.trajectory import Trajectory, to_chat_messages
from medagentgym.medcopilot.data import dpo_pairs, episode_from_trajectory, sft_rows

__all__ = ["CollectResult", "collect", "family_summary", "split_stores"]

STORE, SFT, DPO, SUMMARY = "trajectories.jsonl", "sft.jsonl", "dpo.jsonl", "summary.json"


@dataclass
class CollectResult:
    """What :func:`collect` returns: the rollout summary, the per-family summary and the files written."""

    rollout: RolloutSummary
    summary: dict[str, dict[str, Any]]
    files: dict[str, Path]


def collect(instances: Iterable[Any], policy: Any, env: EnvSpec | Any, *, k: int, out: str | os.PathLike,
            concurrency: int = 4, seed: int = 0, backend: str = "thread", policy_name: str | None = None,
            run_info: dict[str, Any] | None = None, on_error: str = "skip", progress: bool = False,
            max_pairs_per_task: int = 4, max_consecutive_failures: int | None = None) -> CollectResult:
    """Sample ``k`` episodes per instance with ``policy``, keep successes for SFT and both outcomes for DPO.

    Args:
        instances: Training task instances (unique ids).
        policy: A policy object or spec (see ``medagentgym.env_client.rollout.rollout``).
        env: An ``EnvSpec`` or a factory of env objects (e.g. ``EnvServers.env`` for remote env servers).
        k: Samples per task.
        out: Output folder (created).
        concurrency: Episodes in flight.
        seed: Base seed of the per-sample seeds.
        backend: Rollout backend (``thread``, ``async``, ``joblib``, ``ray``).
        policy_name: Recorded in each trajectory header.
        run_info: Settings fingerprinted into the store (``medagentgym.env_client.rollout.describe_run``); a resume under
            other settings is refused.
        on_error: ``skip`` (default: a failed episode is retried by the next run) or ``raise``.
        progress: Show a progress bar.
        max_pairs_per_task: DPO pairs counted per task (as the DPO trainer builds them).
        max_consecutive_failures: Stop once this many episodes in a row failed to run (see ``rollout``).

    Returns:
        The rollout summary, the per-family summary (also in ``summary.json``) and the paths written.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    result = rollout(instances, policy, env, k=k, seed=seed, concurrency=concurrency, backend=backend,
                     store=folder / STORE, policy_name=policy_name, on_error=on_error, progress=progress,
                     run_info=run_info, max_consecutive_failures=max_consecutive_failures)
    trajectories = result.trajectories  # stored and new episodes of the requested tasks, in plan order
    files = split_stores(trajectories, folder)
    summary = family_summary(trajectories, max_pairs_per_task=max_pairs_per_task)
    summary["all"]["failed_episodes"] = result.summary.failed
    _write_atomic(folder / SUMMARY, json.dumps(summary, indent=2, sort_keys=True) + "\n")
    files["summary"] = folder / SUMMARY
    return CollectResult(result.summary, summary, files)


def _success(traj: Trajectory) -> bool:
    return bool(traj.final and traj.final.verdict and traj.final.verdict.get("correct"))


def split_stores(trajectories: list[Trajectory], folder: Path) -> dict[str, Path]:
    """Write ``sft.jsonl`` (successes) and ``dpo.jsonl`` (tasks with both outcomes) atomically; return the paths."""
    outcomes: dict[str, set[bool]] = defaultdict(set)
    for traj in trajectories:
        outcomes[traj.header.task_id].add(_success(traj))
    both = {task for task, seen in outcomes.items() if seen == {True, False}}
    sft = [t for t in trajectories if _success(t)]
    dpo = [t for t in trajectories if t.header.task_id in both]
    paths = {"store": folder / STORE, "sft": folder / SFT, "dpo": folder / DPO}
    for key, rows in (("sft", sft), ("dpo", dpo)):
        _write_atomic(paths[key], "".join(t.model_dump_json() + "\n" for t in rows))
    return paths


def family_summary(trajectories: list[Trajectory], *, max_pairs_per_task: int = 4) -> dict[str, dict[str, Any]]:
    """Per family (and ``all``): tasks, episodes, successes, success rate, tasks solved, SFT rows, DPO pairs."""
    by_family: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajectories:
        by_family[traj.header.family].append(traj)
    out = {name: _counts(trajs, max_pairs_per_task) for name, trajs in sorted(by_family.items())}
    out["all"] = _counts(trajectories, max_pairs_per_task)
    return out


def _counts(trajs: list[Trajectory], max_pairs_per_task: int) -> dict[str, Any]:
    episodes = [episode_from_trajectory(t, to_chat_messages(t)) for t in trajs]
    tasks: dict[str, set[bool]] = defaultdict(set)
    for ep in episodes:
        tasks[ep.task_id].add(ep.success)
    successes = sum(ep.success for ep in episodes)
    return {
        "tasks": len(tasks), "episodes": len(episodes), "successes": successes,
        "success_rate": round(successes / len(episodes), 4) if episodes else 0.0,
        "tasks_solved": sum(True in seen for seen in tasks.values()),
        "tasks_with_both": sum(seen == {True, False} for seen in tasks.values()),
        "sft_rows": len(sft_rows(episodes)),
        "dpo_pairs": len(dpo_pairs(episodes, max_pairs_per_task=max_pairs_per_task)),
    }


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
