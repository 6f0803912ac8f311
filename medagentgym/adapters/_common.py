"""What every adapter needs: task lookup by id or seed, one sandbox pool per process, an episode runner.

An adapter (gymnasium, SkyRL-gym, TRL's ``environment_factory``, verifiers) runs MedAgentGym episodes in its own
process (a ``medagentgym.env_client.Env`` over a shared sandbox pool) or against a running env server
(``medagentgym.env_client.http_client.HTTPEnv``, when ``url`` is given). Either way the episode is the same: the model text or
typed action goes in, the oracle grades one submitted answer.
"""

from __future__ import annotations

import atexit
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from medagentgym.env_client.actions import tool_schema
from medagentgym import tasks
from medagentgym.tasks.base import Instance, UnknownTask

__all__ = ["ACTION_TOOLS", "EPISODE_OVER", "TaskSource", "episode_runner", "shared_pool"]

#: What an action tool returns once its episode has ended.
EPISODE_OVER = "The episode is over (the answer was submitted or a budget ran out); no more actions are taken."

_POOLS: dict[tuple[str, bool], Any] = {}
_POOLS_LOCK = threading.Lock()


def _forget_pools_in_child() -> None:
    """A forked child (AsyncVectorEnv's workers, a dataloader) must not borrow its parent's workers: their pipes
    belong to the parent. The child starts its own pool on first use; the parent's stay the parent's."""
    global _POOLS, _POOLS_LOCK
    _POOLS, _POOLS_LOCK = {}, threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def shared_pool(backend: str = "bwrap", workers: int | None = None, allow_unisolated: bool = False,
                tasks_root: str | Path | None = None) -> Any:
    """This process's sandbox pool for ``backend``: made once, elastic, closed at exit.

    Adapter objects are created by the thousand (one per rollout) and each episode holds one worker from its reset
    to its close, so the pool follows the episodes in flight: it is ``medagentgym.sandbox.make_pool``'s elastic pool, which
    starts a worker when a session finds none idle, up to its cap (``$MEDAGENTGYM_SANDBOX_MAX_WORKERS``, else half
    the memory), and stops workers idle beyond the floor. A library's own concurrency knob (TRL's generation batch,
    gymnasium's ``num_envs``, verifiers' ``--max-concurrent``, SkyRL's batch) therefore sizes it, with no flag here.

    Args:
        backend, allow_unisolated: The sandbox backend.
        workers: The floor of warm workers (default 1); a later call with a higher floor than the pool's is
            served by the same pool, which grows on demand anyway.
        tasks_root: The call that makes the pool has its workers preload what the families under this root
            declare (``medagentgym.env_client.rollout.tasks_root_preload``; None or a family declaring nothing:
            the sandbox's default); later calls share that pool, whose workers import what they lack on first use.

    Example:
        >>> pool = shared_pool("bwrap")
        >>> pool.stats()["max_workers"]
    """
    from medagentgym.sandbox import make_pool

    key = (backend, bool(allow_unisolated))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or getattr(pool, "_closed", False):
            from medagentgym.env_client.rollout import tasks_root_preload

            preload = None if tasks_root is None else tasks_root_preload(tasks_root)
            pool = _POOLS[key] = make_pool(backend, workers=max(1, int(workers or 1)),
                                           allow_unisolated=allow_unisolated, preload=preload)
            atexit.register(pool.close)
        return pool


def episode_runner(tasks_root: str | Path, *, url: str | None = None, token: str | None = None,
                   backend: str = "bwrap", workers: int | None = None, allow_unisolated: bool = False,
                   config: dict[str, Any] | None = None) -> Any:
    """An ``Env`` on the shared pool, or an ``HTTPEnv`` on ``url`` (both: ``reset(instance)``, ``step(text)``).

    Args:
        tasks_root: The built tasks root (the server's own, when ``url`` is given).
        url: A running ``medagentgym serve``; None = run episodes in this process.
        token: Bearer token of that server (default ``$MEDAGENTGYM_ENV_TOKEN``).
        backend, workers, allow_unisolated: The in-process sandbox pool (see :func:`shared_pool`): it grows with
            the episodes in flight; ``workers`` is its floor of warm workers.
        config: ``medagentgym.env_client.EnvConfig`` fields (e.g. ``{"max_turns": 4}``), in-process only.
    """
    if url:
        from medagentgym.env_client.http_client import HTTPEnv

        return HTTPEnv(url, token=token)
    from medagentgym.env_client import Env, EnvConfig

    return Env(shared_pool(backend, workers, allow_unisolated, tasks_root=tasks_root), tasks_root=tasks_root,
               config=EnvConfig(**(config or {})))


class TaskSource:
    """The instances of a built tasks root: by id (``toy_sql/test/0003``), or one picked by seed.

    Args:
        tasks_root: The built tasks root.
        families: Families to pick from when no task is named (default: every family built there).
        split: Split to pick from when no task is named.

    Example:
        >>> source = TaskSource("artifacts/tasks", families=["toy_sql"])
        >>> source.get("toy_sql/train/0001").question
        >>> source.pick(seed=3).id
    """

    def __init__(self, tasks_root: str | Path, families: list[str] | None = None, split: str = "train") -> None:
        self.root, self.split = Path(tasks_root), split
        self.families = list(families) if families else [
            n for n in tasks.names(self.root) if (self.root / n / "manifest.json").is_file()]
        self._cache: dict[tuple[str, str], dict[str, Instance]] = {}
        self._lock = threading.Lock()

    def instances(self, family: str, split: str) -> dict[str, Instance]:
        """``{task_id: Instance}`` of one family and split (cached)."""
        with self._lock:
            if (family, split) not in self._cache:
                fam = tasks.make(family, root=self.root)
                self._cache[family, split] = {inst.id: inst for inst in fam.instances(split)}
            return self._cache[family, split]

    def get(self, task_id: str, family: str | None = None, split: str | None = None) -> Instance:
        """The instance ``task_id``; family and split default to the id's own (``family/split/index``).

        Raises:
            UnknownTask: No such instance (names the family and split searched).
        """
        parts = task_id.split("/")
        family = family or parts[0]
        split = split or (parts[1] if len(parts) == 3 else self.split)
        found = self.instances(family, split).get(task_id)
        if found is None:
            raise UnknownTask(f"task {task_id!r:.80} is not in {family}/{split} under {self.root}; "
                              "check the id (family/split/index) and the tasks root")
        return found

    def pick(self, seed: int | None = None, rng: Any = None) -> Instance:
        """One instance of ``families`` / ``split``, chosen by ``seed`` (the same seed, the same task), or drawn
        from ``rng`` (a ``numpy.random.Generator`` such as gymnasium's ``np_random``, or a ``random.Random``)."""
        pool = [inst for fam in self.families for inst in self.instances(fam, self.split).values()]
        if not pool:
            raise UnknownTask(f"no {self.split!r} instances of {self.families} under {self.root}; build them with "
                              f"`medagentgym build --out {self.root}`")
        rng = rng if rng is not None else random.Random(seed)
        return pool[int(rng.integers(len(pool))) if hasattr(rng, "integers") else rng.randrange(len(pool))]

    def rows(self, split: str | None = None, limit: int | None = None) -> list[dict[str, str]]:
        """Dataset rows ``{"task_id", "family", "split"}`` of ``families`` (``limit`` per family)."""
        split = split or self.split
        return [{"task_id": inst.id, "family": inst.family, "split": split}
                for fam in self.families for inst in list(self.instances(fam, split).values())[:limit]]


# The family actions as typed tool functions of an object with ``_act(action dict) -> observation text``: TRL's
# ``environment_factory`` methods and the OpenEnv server's MCP tools. Their docstrings (which TRL and FastMCP turn
# into tool schemas) are generated from the action models below: see _tool_doc.
def request_info(self, info_type: Literal["schema", "column_names", "column_values", "term"],
                 target: str | None = None, keyterm: str | None = None) -> str:
    return self._act({"action": "request_info", "info_type": info_type, "target": target, "keyterm": keyterm})


def code_execution(self, code: str, lang: Literal["python", "sql"] = "python") -> str:
    return self._act({"action": "code_execution", "lang": lang, "code": code})


def terminal(self, cmd: str) -> str:
    return self._act({"action": "terminal", "cmd": cmd})


def debugging(self, code: str | None = None, error_msg: str | None = None) -> str:
    return self._act({"action": "debugging", "code": code, "error_msg": error_msg})


def submit_answer(self, answer: str) -> str:
    return self._act({"action": "submit_answer", "answer": answer})


ACTION_TOOLS: dict[str, Callable[..., str]] = {f.__name__: f for f in (request_info, code_execution, terminal, debugging,
                                                                   submit_answer)}
#: What each tool returns; the rest of its docstring, which TRL turns into the tool schema, is generated from the
#: action's pydantic model (``medagentgym.env_client.actions.tool_schema``), the one source of the action descriptions.
_RETURNS = {
    "request_info": "The requested description of the data.",
    "code_execution": "The status, the output and, on failure, a grounded error message.",
    "terminal": "The status and the command's output.",
    "debugging": "The explanation.",
    "submit_answer": "A confirmation that the answer was submitted.",
}


def _tool_doc(name: str) -> str:
    fn = tool_schema(name)["function"]
    args = [f"    {key}: {prop['description']}" for key, prop in fn["parameters"]["properties"].items()]
    return "\n".join([fn["description"], "", "Args:", *args, "", "Returns:", f"    {_RETURNS[name]}", ""])


for _name, _tool in ACTION_TOOLS.items():
    _tool.__doc__ = _tool_doc(_name)
del _name, _tool
