"""MedAgentGym for verifiers (0.4, ``verifiers.v1``) and prime-rl: ``load_environment()`` (``[verifiers]`` extra).

verifiers loads a taskset by id: this module is one (``--env.taskset.id medagentgym-verifiers``, through the
top-level ``medagentgym_verifiers`` package that re-exports it), exporting the
taskset (:class:`MedAgentGymTaskset`: one task per instance of the chosen families and split) and its env
(:class:`MedAgentGymEnv`). Like verifiers' own OpenEnv taskset, the env plays the user: each episode runs
host-side (an ``env_client.Env`` over the sandbox pool, or ``HTTPEnv`` with ``url``); the agent's reply is the
model text that ``Env.step`` parses, the observation is the next user turn, and the oracle's reward for the one
submitted answer is recorded on the trace as ``medagentgym`` (a grader failure records no reward and stops the
trace with ``grader_failed``, never a silent 0). The env server's token is read from ``MEDAGENTGYM_ENV_TOKEN``
(never put in task data: that is written into traces).

Example:
    >>> from medagentgym.adapters.verifiers import load_environment
    >>> env = load_environment(tasks_root="artifacts/tasks", families=["toy_sql"], split="train", limit=8)
    >>> # or: vf-eval / prime-rl with --env.taskset.id medagentgym-verifiers --env.taskset.tasks_root artifacts/tasks
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

try:
    import verifiers.v1 as vf
except ImportError as exc:  # the optional extra is missing: say how to get it
    raise ImportError("medagentgym.adapters.verifiers needs verifiers: pip install 'medagentgym[verifiers]'") from exc

from medagentgym import tasks
from medagentgym.adapters._common import TaskSource, episode_runner
from env_client.prompts import system_prompt, user_prompt

__all__ = ["MedAgentGymEnv", "MedAgentGymTaskset", "load_environment"]

#: verifiers imports a taskset by id as a top-level module: ``medagentgym_verifiers`` re-exports this one.
TASKSET_ID = "medagentgym-verifiers"
REWARD = "medagentgym"


class MedAgentGymData(vf.TaskData):
    """One MedAgentGym instance to play, and where to play it."""

    task_id: str
    tasks_root: str
    sandbox: str = "bwrap"
    workers: int | None = None
    allow_unisolated: bool = False
    url: str | None = None
    max_turns: int | None = None


class MedAgentGymConfig(vf.TasksetConfig):
    """The taskset's settings (``--env.taskset.<field>``)."""

    tasks_root: str = "artifacts/tasks"
    """Built tasks root (scripts/build_tasks.py --out)."""
    families: list[str] = ["toy_sql"]  # noqa: RUF012 - a pydantic field default (copied per instance)
    """Families whose instances become tasks."""
    split: str = "train"
    """Split to draw the instances from."""
    limit: int | None = None
    """At most this many instances per family (None = all)."""
    sandbox: str = "bwrap"
    """In-process sandbox backend: bwrap, docker, or local (unisolated)."""
    workers: int | None = None
    """Sandbox workers to start up front; the pool grows with the episodes in flight (--max-concurrent)."""
    allow_unisolated: bool = False
    """Required for sandbox=local."""
    url: str | None = None
    """A running scripts/serve_env.py to play on instead (its token from MEDAGENTGYM_ENV_TOKEN)."""
    max_turns: int | None = None
    """Episode turn cap (None = the family's)."""


class MedAgentGymTask(vf.Task[MedAgentGymData]):
    """A MedAgentGym instance as a verifiers task (its key is the instance id)."""

    @property
    def key(self) -> str:
        """The instance id: durable across runs."""
        return self.data.task_id


class MedAgentGymTaskset(vf.Taskset[MedAgentGymTask, MedAgentGymConfig]):
    """One task per instance of ``families`` on ``split`` (``limit`` per family)."""

    def load(self) -> Iterator[MedAgentGymTask]:
        """Yield the tasks; verifiers passes the model no tool schemas, so the system prompt carries each action's
        parameters in compact form (``system_prompt(..., inline=True)``) and asks for the ``<tool_call>`` text that
        ``Env`` parses."""
        c = self.config
        source = TaskSource(c.tasks_root, c.families, c.split)
        for row in source.rows(c.split, c.limit):
            instance = source.get(row["task_id"])
            actions = tasks.make(instance.family, root=c.tasks_root).actions
            yield MedAgentGymTask(MedAgentGymData(
                id=instance.id, name=instance.id, prompt=user_prompt(instance),
                system_prompt=system_prompt(actions, inline=True),
                task_id=instance.id, tasks_root=str(c.tasks_root), sandbox=c.sandbox, workers=c.workers,
                allow_unisolated=c.allow_unisolated, url=c.url, max_turns=c.max_turns), c.task)


class MedAgentGymEnvConfig(vf.EnvConfig):
    """One agent, the player."""

    player: vf.AgentConfig = vf.AgentConfig()


class MedAgentGymEnv(vf.Env[MedAgentGymEnvConfig]):
    """Plays one MedAgentGym episode per verifiers episode, the env answering each agent turn."""

    async def run(self, task: MedAgentGymTask, agents: Any) -> None:
        """The agent speaks first (the task carries the prompt); each reply is one ``Env.step``."""
        data = task.data
        env = episode_runner(data.tasks_root, url=data.url, backend=data.sandbox, workers=data.workers,
                             allow_unisolated=data.allow_unisolated,
                             config={"max_turns": data.max_turns} if data.max_turns else None)
        instance = TaskSource(data.tasks_root).get(data.task_id)
        try:
            await asyncio.to_thread(env.reset, instance)
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    result = await asyncio.to_thread(env.step, segment.last_reply or "")
                    if result.terminated or result.truncated:
                        break
                    segment = await interaction.turn(result.observation.text)
                await asyncio.to_thread(env.close)  # an episode the agent left unfinished is recorded as closed
                reward = env.trajectory.final.reward
                if reward is None:
                    interaction.trace.stop("grader_failed")
                else:
                    interaction.trace.record_reward(REWARD, reward)
        finally:
            await asyncio.to_thread(env.close)


def load_environment(**taskset: Any) -> vf.Env:
    """The verifiers env over MedAgentGym tasks, built by verifiers' own loader.

    Args:
        **taskset: :class:`MedAgentGymConfig` fields (``tasks_root``, ``families``, ``split``, ``limit``,
            ``sandbox``, ``workers``, ``allow_unisolated``, ``url``, ``max_turns``).

    Returns:
        A :class:`MedAgentGymEnv`.

    Example:
        >>> env = load_environment(tasks_root="artifacts/tasks", families=["toy_sql"], limit=4)
    """
    from verifiers.v1.utils.loaders import load_environment as vf_load_environment

    config = MedAgentGymEnvConfig(taskset=MedAgentGymConfig(id=TASKSET_ID, **taskset))
    return vf_load_environment(config)
