"""What every adapter needs: task lookup by id or seed, one sandbox pool per process, an episode runner.

An adapter (gymnasium, SkyRL-gym, TRL's ``environment_factory``, verifiers) runs MedAgentGym episodes in its own
process (an ``env_client.Env`` over a shared sandbox pool) or against a running env server
(``env_client.http_client.HTTPEnv``, when ``url`` is given). Either way the episode is the same: the model text or
typed action goes in, the oracle grades one submitted answer.
"""

from __future__ import annotations

import atexit
import os
import random
import threading
from pathlib import Path
from typing import Any

from medagentgym import tasks
from medagentgym.tasks.base import Instance, UnknownTask

__all__ = ["MAX_WORKERS_ENV", "SharedPool", "TaskSource", "default_max_workers", "episode_runner", "shared_pool"]

#: Environment variable that caps the sandbox workers one process's adapters may start (default: from memory).
MAX_WORKERS_ENV = "MEDAGENTGYM_MAX_WORKERS"
#: Host memory budgeted per sandbox worker when deriving the default cap (a warm worker with numpy and pandas
#: preloaded, plus the headroom of a running call).
_MB_PER_WORKER = 256

_POOLS: dict[tuple[str, bool], SharedPool] = {}
_POOLS_LOCK = threading.Lock()


def default_max_workers() -> int:
    """The cap on one process's adapter workers: ``$MEDAGENTGYM_MAX_WORKERS``, else host memory / 256 MiB
    (at least 4, at most 1,024)."""
    raw = os.environ.get(MAX_WORKERS_ENV)
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{MAX_WORKERS_ENV}={raw!r} is invalid: use a positive integer")
        return value
    try:
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError):
        total_mb = 8 * 1024
    return max(4, min(1024, total_mb // _MB_PER_WORKER))


class SharedPool:
    """Sandbox workers for this process's adapter episodes, as many as there are episodes in flight.

    Every adapter episode holds one worker from its reset to its close. A library decides how many run at once
    (TRL's generation batch, gymnasium's ``num_envs``, verifiers' ``--max-concurrent``, SkyRL's batch), so the pool
    follows that demand instead of a flag: a ``session()`` that finds every worker busy starts more (the workers
    in use, doubled, at least the callers waiting), up to ``max_workers``; at the cap it waits ``wait_s`` for an
    episode to end, then fails with one line naming the cap and how to raise it. Workers stay started until the
    process exits.

    Args:
        backend: Sandbox backend (``bwrap``, ``docker``, ``local``).
        allow_unisolated: Required for ``local``.
        warm: Workers to start before the first episode (0: the first ``session()`` starts them).
        max_workers: Cap on workers (default :func:`default_max_workers`).
        wait_s: How long a ``session()`` at the cap waits for a worker.

    Example:
        >>> pool = shared_pool("bwrap")
        >>> with pool.session(mounts={"db": path}) as session:
        ...     session.run_sql("SELECT 1", "/data/db")
    """

    def __init__(self, backend: str = "bwrap", *, allow_unisolated: bool = False, warm: int = 0,
                 max_workers: int | None = None, wait_s: float = 60.0) -> None:
        self.backend, self.allow_unisolated = backend, allow_unisolated
        self.max_workers = int(max_workers or default_max_workers())
        self.wait_s = wait_s
        self._subs: list[Any] = []  # started sandbox pools; each worker of each is in use or free
        self._size: dict[int, int] = {}  # id(sub pool) -> its workers
        self._used: dict[int, int] = {}  # id(sub pool) -> its workers in use
        self._waiting = 0
        self._growing = False
        self._cond = threading.Condition()
        self._closed = False
        if warm:
            self._grow(min(int(warm), self.max_workers))

    # -- capacity ---------------------------------------------------------------------------------
    @property
    def workers(self) -> int:
        """Workers started so far."""
        return sum(self._size[id(sub)] for sub in self._subs)

    @property
    def in_use(self) -> int:
        """Workers held by an episode now."""
        return sum(self._used.values())

    @property
    def layers(self) -> list[str]:
        """The isolation layers in force (those of the first started pool; every pool is made the same way)."""
        return list(self._subs[0].layers) if self._subs else []

    def _grow(self, n: int) -> None:
        from sandbox import make_pool

        sub = make_pool(self.backend, workers=n, allow_unisolated=self.allow_unisolated)
        self._subs.append(sub)
        self._size[id(sub)], self._used[id(sub)] = n, 0

    def _free_sub(self) -> Any:
        return next((sub for sub in self._subs if self._used[id(sub)] < self._size[id(sub)]), None)

    def _take(self) -> Any:
        """A started pool with a free worker, counted as used; grows the pool or waits at the cap."""
        import time

        from sandbox.errors import SandboxBusy, SessionClosed

        deadline = time.monotonic() + self.wait_s
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    if self._closed:
                        raise SessionClosed("the adapters' sandbox pool is closed (the process is exiting)")
                    sub = self._free_sub()
                    if sub is not None:
                        self._used[id(sub)] += 1
                        return sub
                    room = self.max_workers - self.workers
                    if not self._growing and room > 0:
                        n = min(room, max(self._waiting, self.workers, 1))
                        self._growing = True
                        self._cond.release()
                        try:
                            self._grow(n)
                        finally:
                            self._cond.acquire()
                            self._growing = False
                            self._cond.notify_all()
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0 or (room <= 0 and self.wait_s <= 0):
                        raise SandboxBusy(
                            f"all {self.workers} sandbox workers of this process are in use and that is the cap "
                            f"({self.max_workers}); end finished episodes (close()), or raise the cap with "
                            f"{MAX_WORKERS_ENV}=N (each worker needs ~{_MB_PER_WORKER} MiB)")
                    self._cond.wait(timeout=min(left, 1.0))
            finally:
                self._waiting -= 1

    def _give_back(self, sub: Any) -> None:
        with self._cond:
            self._used[id(sub)] -= 1
            self._cond.notify()

    # -- sessions ---------------------------------------------------------------------------------
    def session(self, **kwargs: Any) -> _PoolSession:
        """Borrow a worker for one episode (``sandbox.Pool.session`` arguments); closing the session frees it."""
        sub = self._take()
        try:
            return _PoolSession(sub.session(**kwargs), lambda: self._give_back(sub))
        except BaseException:
            self._give_back(sub)
            raise

    def close(self) -> None:
        """Stop every worker (at process exit)."""
        with self._cond:
            self._closed = True
            subs, self._subs = self._subs, []
            self._cond.notify_all()
        for sub in subs:
            sub.close()


class _PoolSession:
    """A ``sandbox.Session`` whose ``close()`` also frees its slot in the :class:`SharedPool`."""

    def __init__(self, session: Any, release: Any) -> None:
        self._session, self._release = session, release

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def close(self) -> None:
        """Close the sandbox session and free the worker's slot (idempotent)."""
        release, self._release = self._release, None
        try:
            self._session.close()
        finally:
            if release is not None:
                release()

    def __enter__(self) -> _PoolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _forget_pools_in_child() -> None:
    """A forked child (AsyncVectorEnv's workers, a dataloader) must not borrow its parent's workers: their pipes
    belong to the parent. The child starts its own pool on first use; the parent's stay the parent's."""
    global _POOLS, _POOLS_LOCK
    _POOLS, _POOLS_LOCK = {}, threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def shared_pool(backend: str = "bwrap", workers: int | None = None, allow_unisolated: bool = False) -> SharedPool:
    """This process's :class:`SharedPool` for ``backend`` (made once, closed at exit).

    Adapter objects are created by the thousand (one per rollout); the pool's warm workers are made once and grow
    with the episodes in flight.

    Args:
        backend, allow_unisolated: The sandbox backend.
        workers: Warm workers to have started (more start on demand); None = none before the first episode.

    Example:
        >>> pool = shared_pool("bwrap", workers=4)
    """
    key = (backend, bool(allow_unisolated))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool._closed:
            pool = _POOLS[key] = SharedPool(backend, allow_unisolated=allow_unisolated)
            atexit.register(pool.close)
    if workers and pool.workers < workers:
        with pool._cond:
            missing = min(int(workers), pool.max_workers) - pool.workers
            if missing > 0:
                pool._grow(missing)
    return pool


def episode_runner(tasks_root: str | Path, *, url: str | None = None, token: str | None = None,
                   backend: str = "bwrap", workers: int | None = None, allow_unisolated: bool = False,
                   config: dict[str, Any] | None = None) -> Any:
    """An ``Env`` on the shared pool, or an ``HTTPEnv`` on ``url`` (both: ``reset(instance)``, ``step(text)``).

    Args:
        tasks_root: The built tasks root (the server's own, when ``url`` is given).
        url: A running ``scripts/serve_env.py``; None = run episodes in this process.
        token: Bearer token of that server (default ``$MEDAGENTGYM_ENV_TOKEN``).
        backend, workers, allow_unisolated: The in-process sandbox pool (see :func:`shared_pool`): it grows with
            the episodes in flight; ``workers`` only starts that many before the first.
        config: ``env_client.EnvConfig`` fields (e.g. ``{"max_turns": 4}``), in-process only.
    """
    if url:
        from env_client.http_client import HTTPEnv

        return HTTPEnv(url, token=token)
    from env_client import Env, EnvConfig

    return Env(shared_pool(backend, workers, allow_unisolated), tasks_root=tasks_root,
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
                              f"`python scripts/build_tasks.py --out {self.root}`")
        rng = rng if rng is not None else random.Random(seed)
        return pool[int(rng.integers(len(pool))) if hasattr(rng, "integers") else rng.randrange(len(pool))]

    def rows(self, split: str | None = None, limit: int | None = None) -> list[dict[str, str]]:
        """Dataset rows ``{"task_id", "family", "split"}`` of ``families`` (``limit`` per family)."""
        split = split or self.split
        return [{"task_id": inst.id, "family": inst.family, "split": split}
                for fam in self.families for inst in list(self.instances(fam, split).values())[:limit]]
