"""MedAgentGym as a TRL ``environment_factory`` (GRPO's tool-calling loop), one env object per rollout.

TRL (1.16) creates an object per rollout, calls ``reset(**row)`` with the dataset row, exposes the object's
public methods as tools (their type hints and Google-style docstrings become the tool schemas) and, when the
object has ``get_reward()``, uses it as a reward source. :func:`environment_factory` builds that class for a
family: its tools are exactly the family's permitted actions (``request_info``, ``code_execution``, ``terminal``,
``debugging``, ``submit_answer``), each running one typed action in the episode's sandbox session and returning
the observation text; ``get_reward()`` is the oracle's reward for the one submitted answer (0.0 without one,
None when grading failed for an infrastructure reason). :func:`tool_env_dataset` gives rows that name their task.

Example:
    >>> from trl import GRPOConfig, GRPOTrainer
    >>> trainer = GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", args=GRPOConfig(...),
    ...                       train_dataset=tool_env_dataset("artifacts/tasks", "toy_sql"),
    ...                       environment_factory=environment_factory("artifacts/tasks", "toy_sql"))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medagentgym.env_client.prompts import user_prompt
from medagentgym import tasks
from medagentgym.adapters._common import (
    ACTION_TOOLS,
    EPISODE_OVER,
    TaskSource,
    episode_runner,
)

__all__ = ["environment_factory", "tool_env_dataset"]

#: The tools (also importable as ``_TOOLS``): the family actions as typed, documented functions (see ``_common``).
_TOOLS = ACTION_TOOLS


class _ToolEnv:
    """What every family's tool env shares: the episode runner, reset, get_reward (tools are added per family)."""

    _source: TaskSource
    _runner_kwargs: dict[str, Any]

    def __init__(self) -> None:
        self._env = episode_runner(self._source.root, **self._runner_kwargs)
        self._started = self._live = False

    def reset(self, **row: Any) -> None:
        """Start the episode of the row's ``task_id`` (the prompt comes from the dataset row)."""
        self._env.reset(self._source.get(str(row["task_id"])))
        self._started = self._live = True

    def _act(self, action: dict[str, Any]) -> str:
        if not self._live:
            return EPISODE_OVER
        result = self._env.step(action)
        self._live = not (result.terminated or result.truncated)
        return result.observation.text

    def get_reward(self) -> float | None:
        """The oracle's reward for the episode: ends it first (recorded as closed) if nothing was submitted."""
        if not self._started:
            return None
        self._env.close()
        self._live = False
        return self._env.trajectory.final.reward


def environment_factory(tasks_root: str | Path, family: str, *, actions: list[str] | None = None,
                        url: str | None = None, token: str | None = None, sandbox: str = "bwrap", workers: int | None = None,
                        allow_unisolated: bool = False, config: dict[str, Any] | None = None) -> type:
    """The class to pass as ``GRPOTrainer(environment_factory=...)`` for ``family``.

    Args:
        tasks_root: Built tasks root.
        family: The family whose permitted actions become the tools.
        actions: Offer only these of them (e.g. ``["submit_answer"]`` for a short prompt); default all.
        url, token: Play on a running env server instead of an in-process sandbox.
        sandbox, workers, allow_unisolated: The in-process sandbox pool, shared by every env object; it grows to
            the episodes in flight (TRL resets one env per rollout of its generation batch), ``workers`` is its
            floor of warm workers.
        config: ``medagentgym.env_client.EnvConfig`` fields (e.g. ``{"max_turns": 6}``).

    Returns:
        A class (a zero-argument callable) named ``MedAgentGym_<family>``.

    Raises:
        UnknownTask: ``family`` is not known under ``tasks_root`` (with "did you mean").
        ValueError: ``actions`` names an action the family does not permit.
    """
    permitted = [name for name in _TOOLS if name in tasks.make(family, root=tasks_root).actions]
    bad = sorted(set(actions or ()) - set(permitted))
    if bad:
        raise ValueError(f"actions {bad} are not permitted in {family}; choose from {permitted}")
    actions = [name for name in permitted if actions is None or name in actions]
    attrs: dict[str, Any] = {name: _TOOLS[name] for name in actions}
    attrs.update(_source=TaskSource(tasks_root, [family]), __doc__=f"MedAgentGym {family} episode; tools: "
                 f"{', '.join(actions)}.", _runner_kwargs={"url": url, "token": token, "backend": sandbox,
                                                           "workers": workers, "allow_unisolated": allow_unisolated,
                                                           "config": config})
    return type(f"MedAgentGym_{family}", (_ToolEnv,), attrs)


def tool_env_dataset(tasks_root: str | Path, family: str, split: str = "train", limit: int | None = None) -> Any:
    """A ``datasets.Dataset`` of ``{"prompt": [user message], "task_id"}`` rows for :func:`environment_factory`.

    The prompt is the task alone: TRL's chat template shows the tools itself.
    """
    from datasets import Dataset

    source = TaskSource(tasks_root, [family], split)
    rows = [{"prompt": [{"role": "user", "content": user_prompt(source.get(row["task_id"]))}],
             "task_id": row["task_id"]} for row in source.rows(split, limit)]
    return Dataset.from_list(rows)
