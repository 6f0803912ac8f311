"""MedAgentGym for verifiers (0.4, ``verifiers.v1``) and prime-rl: ``load_environment()`` (``[verifiers]`` extra).

verifiers loads a taskset by id: this module is one (``vf-eval medagentgym-verifiers``, through the top-level
``medagentgym_verifiers`` package that re-exports it), exporting the taskset (:class:`MedAgentGymTaskset`: one task
per instance of the chosen families and split), its env (:class:`MedAgentGymEnv`) and its default harness
(:class:`MedAgentGymHarness`). Like verifiers' own OpenEnv taskset, the env plays the user: each episode runs
host-side (a ``medagentgym.env_client.Env`` over this process's sandbox pool, which grows to ``--max-concurrent`` episodes, or
``HTTPEnv`` with ``url``); the agent's reply is the model text that ``Env.step`` parses, the observation is the next
user turn, and the oracle's reward for the one submitted answer is the task's ``medagentgym`` reward (a grader
failure records no reward and stops the trace with ``grader_failed``, never a silent 0). The env server's token is
read from ``MEDAGENTGYM_ENV_TOKEN`` (never put in task data: that is written into traces).

The agent is a chat loop with no tools of its own (the ``null`` harness's program): the model's code runs only in
the episode's sandbox, never on the host, so the player's default runtime is ``subprocess`` (no container engine or
Prime account needed), and the harness runs verifiers' chat program with this interpreter when its packages are
here (no ``uv`` download), so an eval needs only a model endpoint:

    vf-eval medagentgym-verifiers -m MODEL --client.base-url http://127.0.0.1:8000/v1 \
        --client.api-key-var OPENAI_API_KEY --no-push --env.taskset.tasks-root artifacts/tasks

``vf-validate medagentgym-verifiers --env.taskset.tasks-root ...`` checks every task without a model: ``gold``
replays the family's reference solution through an episode and needs reward 1; ``noop`` submits an empty answer and
needs the oracle to refuse it.

Example:
    >>> from medagentgym.adapters.verifiers import load_environment
    >>> env = load_environment(tasks_root="artifacts/tasks", families=["toy_sql"], split="train", limit=8)
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.util
import os
import sys
import weakref
from collections.abc import Iterator
from typing import Any

try:
    import verifiers.v1 as vf
    from verifiers.v1.harnesses.null import NullHarness
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime
except ImportError as exc:  # the optional extra is missing: say how to get it
    raise ImportError("medagentgym.adapters.verifiers needs verifiers: pip install 'medagentgym[verifiers]'") from exc

from medagentgym.env_client.prompts import system_prompt, user_prompt
from medagentgym.env_client.server_app import public_verdict
from medagentgym import tasks
from medagentgym.adapters._common import TaskSource, episode_runner

__all__ = ["MedAgentGymEnv", "MedAgentGymHarness", "MedAgentGymTaskset", "load_environment"]

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
    """Built tasks root (medagentgym build --out)."""
    families: list[str] = ["toy_sql"]  # noqa: RUF012 - a pydantic field default (copied per instance)
    """Families whose instances become tasks."""
    split: str | None = None
    """Split to draw the instances from; None: ``test`` under ``vf-eval``/``vf-validate`` (an evaluation), else
    ``train`` (prime-rl training). Set it to say which."""
    limit: int | None = None
    """At most this many instances per family (None = all)."""
    sandbox: str = "bwrap"
    """In-process sandbox backend: bwrap, docker, or local (unisolated)."""
    workers: int | None = None
    """Floor of warm sandbox workers; the pool grows with the episodes in flight (--max-concurrent)."""
    allow_unisolated: bool = False
    """Required for sandbox=local."""
    url: str | None = None
    """A running medagentgym serve to play on instead (its token from MEDAGENTGYM_ENV_TOKEN)."""
    max_turns: int | None = None
    """Episode turn cap (None = the family's)."""


#: One endpoint check per event loop and endpoint, shared by the episodes that start together.
_CHECKED: Any = weakref.WeakKeyDictionary()

#: The commands that evaluate: a taskset without a split draws from the test split under them.
EVAL_COMMANDS = ("vf-eval", "vf-validate")


def default_split(split: str | None, program: str | None = None) -> str:
    """``split`` when set; otherwise ``"test"`` when the running program (``sys.argv[0]``) is an evaluation
    command (:data:`EVAL_COMMANDS`: evaluating on the training split would report training-set numbers), else
    ``"train"`` (a trainer such as prime-rl loads the taskset to train on it).

    Example:
        >>> default_split(None, "/usr/bin/vf-eval"), default_split(None, "rl"), default_split("train", "vf-eval")
        ('test', 'train', 'train')
    """
    if split:
        return split
    name = os.path.basename(program if program is not None else (sys.argv[0] if sys.argv else ""))
    return "test" if name.startswith(EVAL_COMMANDS) else "train"


@functools.lru_cache(maxsize=16)
def _source(tasks_root: str) -> TaskSource:
    """One instance index per tasks root for this process (verifiers runs many episodes of one taskset at once)."""
    return TaskSource(tasks_root)


def _runner(data: MedAgentGymData) -> Any:
    return episode_runner(data.tasks_root, url=data.url, backend=data.sandbox, workers=data.workers,
                          allow_unisolated=data.allow_unisolated,
                          config={"max_turns": data.max_turns} if data.max_turns else None)


def _reward_of(data: MedAgentGymData, policy: Any) -> float | None:
    """The oracle's reward for one episode of the task played by ``policy`` (an ``env_client`` policy)."""
    from medagentgym.env_client.rollout import WorkItem, run_episode

    trajectory = run_episode(_runner(data), policy, WorkItem(_source(data.tasks_root).get(data.task_id), 0, 0))
    return trajectory.final.reward


class MedAgentGymTask(vf.Task[MedAgentGymData]):
    """A MedAgentGym instance as a verifiers task (its key is the instance id)."""

    @property
    def key(self) -> str:
        """The instance id: durable across runs."""
        return self.data.task_id

    @vf.reward
    async def medagentgym(self, trace: vf.Trace) -> float | dict[str, float]:
        """The oracle's reward for the episode :class:`MedAgentGymEnv` played (``trace.info["medagentgym"]``).

        With no episode on the trace (``vf-validate``'s ``noop`` check scores a task nobody touched) an episode
        submits an empty answer and the oracle grades it. A grading failure of the infrastructure records no reward.
        """
        played = trace.info.get("medagentgym")
        if played is not None:
            reward = played["reward"]
        else:
            from medagentgym.env_client.policies import ConstantPolicy

            reward = await asyncio.to_thread(_reward_of, self.data, ConstantPolicy(""))
        return {} if reward is None else float(reward)

    async def validate(self, runtime: Any) -> bool | None:
        """``vf-validate``'s gold check: the family's reference solution, played through an episode, earns 1."""
        from medagentgym.env_client.policies import OraclePolicy

        root = self.data.tasks_root
        reward = await asyncio.to_thread(_reward_of, self.data, OraclePolicy(lambda name: tasks.make(name, root=root)))
        return reward == 1.0


class MedAgentGymTaskset(vf.Taskset[MedAgentGymTask, MedAgentGymConfig]):
    """One task per instance of ``families`` on ``split`` (``limit`` per family)."""

    def load(self) -> Iterator[MedAgentGymTask]:
        """Yield the tasks; verifiers passes the model no tool schemas, so the system prompt carries each action's
        parameters in compact form (``system_prompt(..., inline=True)``) and asks for the ``<tool_call>`` text that
        ``Env`` parses."""
        c = self.config
        split = default_split(c.split)
        source = TaskSource(str(c.tasks_root), c.families, split)
        for row in source.rows(split, c.limit):
            instance = source.get(row["task_id"])
            actions = tasks.make(instance.family, root=c.tasks_root).actions
            yield MedAgentGymTask(MedAgentGymData(
                id=instance.id, name=instance.id, prompt=user_prompt(instance),
                system_prompt=system_prompt(actions, inline=True),
                task_id=instance.id, tasks_root=str(c.tasks_root), sandbox=c.sandbox, workers=c.workers,
                allow_unisolated=c.allow_unisolated, url=c.url, max_turns=c.max_turns), c.task)


class MedAgentGymHarness(NullHarness):
    """The player's default harness: verifiers' tool-less chat loop (the ``null`` harness's program).

    In the ``subprocess`` runtime it runs that program with this process's interpreter when the program's packages
    import here (a ``verifiers`` install has them), instead of ``uv`` fetching them per run; in any other runtime
    (docker, prime, ...) it is the ``null`` harness unchanged.
    """

    async def setup(self, runtime: Any) -> None:
        """Prepare the chat program (nothing to install when it runs on this interpreter)."""
        await super().setup(_host_python(runtime))

    async def launch(self, ctx: Any, trace: Any, runtime: Any, *args: Any, **kwargs: Any) -> Any:
        """Run the chat program for one agent turn sequence (see ``NullHarness.launch``)."""
        return await super().launch(ctx, trace, _host_python(runtime), *args, **kwargs)


#: What verifiers' chat program imports (its PEP 723 dependencies).
_CHAT_PROGRAM_MODULES = ("openai", "mcp", "httpx", "httpx2", "tenacity", "certifi")


def _host_python(runtime: Any) -> Any:
    """``runtime``, running PEP 723 scripts with this interpreter when it is the host (``subprocess``) runtime and
    the chat program's packages are importable here."""
    if isinstance(runtime, SubprocessRuntime) and all(importlib.util.find_spec(m) for m in _CHAT_PROGRAM_MODULES):
        return _HostPythonRuntime(runtime)
    return runtime


class _HostPythonRuntime:
    """A ``SubprocessRuntime`` whose ``prepare_uv_script`` writes the script and runs it with ``sys.executable``."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script: str | bytes, env: dict[str, str] | None = None, *,
                                activate: bool = True) -> list[str]:
        data = script.encode() if isinstance(script, str) else script
        name = f".medagentgym-chat-{hashlib.sha256(data).hexdigest()[:16]}.py"
        await self._runtime.write(name, data)
        return [sys.executable, name]


class MedAgentGymEnvConfig(vf.EnvConfig):
    """One agent, the player: the taskset's harness (:class:`MedAgentGymHarness`) on the host, since it runs no
    model-written code (``--env.player.runtime.type docker`` etc. still work)."""

    player: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class EndpointUnreachable(RuntimeError):
    """The model endpoint of a run cannot be reached: raised before any episode starts (``vf-eval`` exits != 0)."""


async def check_endpoint(base_url: str, timeout_s: float = 10.0) -> None:
    """Ask ``base_url`` once for its models (``GET /models``); a connection that fails (refused, unknown host,
    no answer within ``timeout_s``) raises. Any HTTP answer passes: the endpoint is up, the first request says
    the rest.

    Raises:
        EndpointUnreachable: One line naming the URL and what to check.
    """
    import httpx

    url = base_url.rstrip("/") + "/models"
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            await client.get(url)
    except httpx.HTTPError as exc:
        raise EndpointUnreachable(f"the model endpoint {base_url} is unreachable (GET {url}: {type(exc).__name__}: "
                                  f"{exc or 'no answer'}); start it, or fix --client.base-url. No episode was "
                                  f"started") from None


class MedAgentGymEnv(vf.Env[MedAgentGymEnvConfig]):
    """Plays one MedAgentGym episode per verifiers episode, the env answering each agent turn.

    Before its first episode it checks once that the model endpoint answers at all: against a dead endpoint every
    episode would fail on its own, and verifiers would record them all as errors and exit 0; one exception here
    stops the whole run instead (verifiers cancels the other episodes and exits non-zero).
    """

    async def run_slot(self, slot: Any, ctx: Any, *args: Any, **kwargs: Any) -> Any:
        """``vf.Env.run_slot`` after :func:`check_endpoint` (once per process and endpoint)."""
        base_url = getattr(getattr(ctx, "client", None), "base_url", None)
        if base_url:
            checks = _CHECKED.setdefault(asyncio.get_running_loop(), {})
            if base_url not in checks:
                checks[base_url] = asyncio.ensure_future(check_endpoint(base_url))
            await asyncio.shield(checks[base_url])
        return await super().run_slot(slot, ctx, *args, **kwargs)

    async def run(self, task: MedAgentGymTask, agents: Any) -> None:
        """The agent speaks first (the task carries the prompt); each reply is one ``Env.step``."""
        data = task.data
        env = _runner(data)
        instance = _source(data.tasks_root).get(data.task_id)
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
                final = env.trajectory.final
                # scored by MedAgentGymTask.medagentgym when the interaction closes; the verdict without its reason
                # (which can quote the gold answer), since traces are stored and may be pushed
                interaction.trace.info["medagentgym"] = {
                    "reward": final.reward, "reason": final.reason, "turns": final.turns,
                    "verdict": public_verdict(final.verdict)}
                if final.reward is None:
                    interaction.trace.stop("grader_failed")
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
