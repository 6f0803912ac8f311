"""Serve MedAgentGym episodes over HTTP: the glue between ``medagentgym.env_client.Env`` and ``medagentgym.sandbox.server``.

``medagentgym.sandbox.server.create_app`` is generic; this module hands it a factory that builds one :class:`Env` per
session (sharing one sandbox pool) plus the wire models: ``/reset`` takes a task reference (family, split,
task id) and a seed, ``/step`` takes the model's raw text (the server parses it, so parse errors are the same
locally and over HTTP), ``/state`` and ``/close`` return the trajectory so far.

Served to clients that may not be trusted, it keeps the gold answers on the server (``hide_gold``, on by
default): every verdict a client can see (``/step`` info, ``/state``, ``/close``) carries ``correct``, ``score``
and whether the grader failed, never the grader's reason (``7 != 8`` would give the answer away) nor its error
text, and an internal error's 500 body names only its class. A session's sandbox worker goes back to the pool as
soon as its episode ends; waiting for a free worker is bounded (``worker_wait_s``, then 503); only a ``/reset`` or a
``/step`` keeps a session alive (an idle one is closed after ``idle_timeout_s``, any episode ``max_episode_s`` after
its reset, a finished one a minute after it ended); one client holds at most half the capacity and never more
sessions than there are sandbox workers, finished and OpenEnv ones included; and the bearer token and body-size
limits of ``medagentgym.sandbox.server`` apply.

Example:
    >>> app = build_app(tasks_root="artifacts/tasks", backend="bwrap", capacity=64)
    >>> with background_server(app) as url:
    ...     env = HTTPEnv(url)
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from medagentgym.env_client.actions import Action
from medagentgym.env_client.episode import Env, EnvConfig, Observation, StepResult
from medagentgym.env_client.errors import EnvClientError, ResetNeeded
from medagentgym.sandbox.errors import SandboxBusy
from medagentgym.tasks.base import Instance, TaskError, UnknownTask

__all__ = ["CLIENT_ERRORS", "MAX_ACTION_CHARS", "ResetRequest", "ServedEnv", "ServerBusy", "StepAction",
           "background_server", "build_app", "public_verdict"]

#: Longest model reply ``/step`` accepts (characters); a real reply is a few thousand.
MAX_ACTION_CHARS = 100_000
HIDDEN = "hidden by the server"
#: Exceptions that mean the client misused an episode (their messages are safe to show).
CLIENT_ERRORS = (EnvClientError, TaskError, ValueError)


@contextlib.contextmanager
def background_server(app: Any, *, host: str = "127.0.0.1", startup_timeout_s: float = 20.0,
                      limits: Any = None) -> Iterator[str]:
    """Run an ASGI app with uvicorn on a free loopback port in a daemon thread.

    Args:
        app: The ASGI app.
        host: Interface to bind (loopback by default).
        startup_timeout_s: How long to wait for the server to accept connections.
        limits: ``medagentgym.sandbox._conn_limits.ConnLimits`` (header deadline, per-address and total connection caps);
            None = its defaults.

    Yields:
        The base URL, e.g. ``"http://127.0.0.1:43817"``; the server stops when the block exits.

    Raises:
        RuntimeError: If the server did not start in time.
    """
    import uvicorn

    from medagentgym.sandbox._conn_limits import server_config

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(server_config(app, limits=limits, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"uvicorn did not start on {host}:{port} within {startup_timeout_s} s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


# ------------------------------------------------------------------------------------------ wire models


class ResetRequest(BaseModel):
    """``/reset`` body: which task to start and how to record it."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(max_length=256, description="Instance id, e.g. 'toy_sql/test/0003'.")
    family: str = Field(max_length=64, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
                        description="Family registry name of the instance.")
    split: Literal["train", "test"] = Field(description="Split the instance belongs to.")
    seed: int | None = Field(None, description="Episode seed, recorded in the trajectory.")
    options: dict[str, Any] | None = Field(None, description="{'policy': str, 'sample_idx': int} for the header.")


class StepAction(BaseModel):
    """``/step`` action: the model's raw text (parsed by the server) or one typed action; not both."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(None, max_length=MAX_ACTION_CHARS,
                             description="The model's raw reply, exactly as generated.")
    typed: Action | None = Field(None, description="A typed action, e.g. {'action': 'terminal', 'cmd': 'ls'}.")
    n_tokens: int | None = Field(None, ge=0, description="Completion tokens of this reply.")
    n_prompt_tokens: int | None = Field(None, ge=0, description="Prompt tokens the policy was billed for this turn.")

    @model_validator(mode="after")
    def _one_of(self) -> StepAction:
        if (self.text is None) == (self.typed is None):
            raise ValueError("give exactly one of 'text' (model reply) or 'typed' (an action object)")
        return self


class ServerBusy(RuntimeError):
    """No sandbox worker became free within the server's wait; the client should retry later (503)."""


def public_verdict(verdict: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a client may see of a verdict: correctness, score, whether the grader failed; no reason or error text.

    Example:
        >>> public_verdict({"correct": False, "score": 0.0, "reason": "7 != 8", "error": None})
        {'correct': False, 'score': 0.0, 'reason': 'hidden by the server', 'error': None}
    """
    if verdict is None:
        return None
    shown = {"correct": verdict.get("correct"), "score": verdict.get("score"), "reason": HIDDEN,
             "error": None if verdict.get("error") is None else f"the grader failed ({HIDDEN})"}
    if "infra" in verdict:  # whether a failure was the infrastructure's: the reward depends on it
        shown["infra"] = bool(verdict["infra"])
    return shown


class ServedEnv:
    """One served session: :class:`Env` plus instance lookup on reset, the trajectory in the state, the worker
    returned when an episode ends, and verdicts made public (``hide_gold``). Any protocol (this module's HTTP
    endpoints, ``medagentgym.adapters.openenv``'s WebSocket sessions) serves these.

    Args:
        env: The episode runner.
        instances: ``instances(family, split) -> {task_id: Instance}`` (cached by the caller).
        hide_gold: Make every verdict public (see :func:`public_verdict`).
        splits: Splits a client may reset on.
    """

    def __init__(self, env: Env, instances: Callable[[str, str], dict[str, Instance]], *, hide_gold: bool,
                 splits: tuple[str, ...]) -> None:
        self.env, self.instances, self.hide_gold, self.splits = env, instances, hide_gold, splits

    def reset(self, req: ResetRequest) -> tuple[Observation, dict[str, Any]]:
        """Start an episode of the requested served instance (unknown split or id: ``UnknownTask``)."""
        if req.split not in self.splits:
            raise UnknownTask(f"split {req.split!r} is not served here (served: {', '.join(self.splits)})")
        found = self.instances(req.family, req.split).get(req.task_id)
        if found is None:
            raise UnknownTask(f"task {req.task_id!r:.80} is not in {req.family}/{req.split} on this server; "
                              "check the id and that the server's tasks root is the one you built")
        try:
            return self.env.reset(found, seed=req.seed, options=req.options)
        except SandboxBusy as exc:
            raise ServerBusy(f"no sandbox worker became free in time; retry later ({exc})") from exc

    def step(self, action: StepAction) -> StepResult:
        """Play one action; a finished episode gives its sandbox worker back at once; verdicts made public."""
        result = self.env.step(action.text if action.text is not None else action.typed, n_tokens=action.n_tokens,
                               n_prompt_tokens=action.n_prompt_tokens)
        if result.terminated or result.truncated:
            self.env.close()  # the episode is recorded: give its sandbox worker back now, not at /close
        if self.hide_gold and result.info.get("verdict") is not None:
            result.info["verdict"] = public_verdict(result.info["verdict"])
        return result

    @property
    def idle(self) -> bool:
        """True when no episode runs (none yet, or it ended): the session holds no sandbox worker."""
        return self.env.done

    def state(self) -> dict[str, Any]:
        """The episode's state with its trajectory so far (verdicts made public when gold is hidden)."""
        state = self.env.state()
        try:
            state["trajectory"] = self.env.trajectory.model_dump(mode="json")
        except ResetNeeded:  # no episode yet
            state["trajectory"] = None
        if self.hide_gold:
            for final in (state.get("final"), (state["trajectory"] or {}).get("final")):
                if final is not None:
                    final["verdict"] = public_verdict(final.get("verdict"))
        return state

    def close(self) -> None:
        """End the episode and give its sandbox worker back (safe to call twice)."""
        self.env.close()


def build_app(tasks_root: str | Path, *, backend: str = "bwrap", workers: int = 4, max_workers: int | None = None,
              allow_unisolated: bool = False,
              config: EnvConfig | None = None, capacity: int = 64, idle_timeout_s: float = 600.0,
              pool: Any = None, hide_gold: bool = True, tokens: tuple[str, ...] | list[str] = (),
              max_body_bytes: int = 1 << 20, max_sessions_per_client: int | None = None,
              worker_wait_s: float | None = 30.0, splits: tuple[str, ...] = ("train", "test"),
              max_episode_s: float | None = None, finished_ttl_s: float | None = None) -> Any:
    """The MedAgentGym env server: ``medagentgym.sandbox.server.create_app`` over ``Env`` sessions sharing one pool.

    Args:
        tasks_root: Built tasks root (``medagentgym build --out``).
        backend: Sandbox backend for the pool the app starts (ignored when ``pool`` is given).
        workers: Warm sandbox workers (the pool's floor).
        max_workers: The pool's cap: it grows to the open episodes up to this many workers (None: from memory,
            see ``medagentgym.sandbox.make_pool``). Each open episode holds one worker.
        allow_unisolated: Required for ``backend="local"``.
        config: Episode rules for every session.
        capacity: Open sessions allowed (503 past it).
        idle_timeout_s: Sessions idle this long are closed by the server (their worker goes back to the pool).
        pool: An already started sandbox pool to use (the caller closes it).
        hide_gold: Keep grader reasons and error texts (which can quote the gold answer) out of every response.
        tokens: Accepted bearer tokens (one per client); empty = no authentication.
        max_body_bytes: Largest request body (413 beyond).
        max_sessions_per_client: Open sessions per client, running or finished, on every protocol (429 beyond);
            ``None`` = half the capacity, at most the pool's workers. Never more than the workers or the capacity
            (ValueError): a client may hold every worker, but not queue past them.
        worker_wait_s: Longest wait of a ``/reset`` for a free sandbox worker (then 503); sets the pool's
            ``acquire_timeout`` (also for a passed ``pool``). ``None`` leaves the pool's own.
        splits: Splits clients may reset on (e.g. ``("train",)`` keeps the test split's graders unreachable).
        max_episode_s: An episode is closed this long after its ``/reset`` even if its client keeps stepping;
            ``None`` = the episode's wall budget (``config.episode_wall_s``) plus two minutes for grading.
        finished_ttl_s: A session whose episode ended (any protocol: HTTP, OpenEnv WebSocket or MCP) is closed this
            long after it ended, its row and worker freed; ``None`` = ``min(idle_timeout_s, 60)``.

    Returns:
        The FastAPI app; its pool (if it started one) closes with the app's lifespan. ``app.state.
        served_env_factory`` makes one :class:`ServedEnv` (for another protocol served on the same app).

    Example:
        >>> app = build_app("artifacts/tasks", tokens=["s3cret-token"], worker_wait_s=10)
    """
    from medagentgym import tasks
    from medagentgym.env_client.rollout import tasks_root_preload
    from medagentgym.sandbox import make_pool
    from medagentgym.sandbox.server import create_app

    bad = set(splits) - {"train", "test"}
    if bad or not splits:
        raise ValueError(f"splits={splits!r} is invalid: choose from train, test")
    own_pool = pool is None
    pool = pool or make_pool(backend, workers=workers, max_workers=max_workers, allow_unisolated=allow_unisolated,
                             preload=tasks_root_preload(tasks_root))
    # Sessions per client never exceed the workers the pool may run (its cap; an older pool: its workers).
    n_workers = int(getattr(pool, "max_workers", 0) or len(getattr(pool, "_workers", ())) or workers)
    if max_sessions_per_client is not None and max_sessions_per_client > n_workers:
        if own_pool:
            pool.close()
        raise ValueError(f"max_sessions_per_client={max_sessions_per_client} exceeds the {n_workers} sandbox workers: "
                         f"one client could queue past every worker; use at most {n_workers} (or more workers)")
    if worker_wait_s is not None:
        pool.acquire_timeout = float(worker_wait_s)  # a /reset waits this long for a worker, then 503
    lock, cache = threading.Lock(), {}

    def instances(family: str, split: str) -> dict[str, Instance]:
        with lock:
            if (family, split) not in cache:
                fam = tasks.make(family, root=tasks_root)
                cache[family, split] = {inst.id: inst for inst in fam.instances(split)}
            return cache[family, split]

    def factory() -> ServedEnv:
        return ServedEnv(Env(pool, tasks_root=tasks_root, config=config), instances, hide_gold=hide_gold,
                          splits=tuple(splits))

    app = create_app(factory, StepAction, Observation, reset_model=ResetRequest, capacity=capacity,
                     idle_timeout_s=idle_timeout_s, client_errors=CLIENT_ERRORS, busy_errors=(ServerBusy,),
                     internal_error_detail=not hide_gold, tokens=tokens, max_body_bytes=max_body_bytes,
                     # every session counts (running or finished, any protocol): by default no client holds
                     # more than half the server, nor more than the workers
                     max_sessions_per_client=max_sessions_per_client or min(n_workers, max(1, capacity // 2)),
                     title="MedAgentGym environment server", on_shutdown=pool.close if own_pool else None,
                     max_episode_s=max_episode_s or (config or EnvConfig()).episode_wall_s + 120.0,
                     finished_ttl_s=finished_ttl_s)
    app.state.served_env_factory = factory  # another protocol on the same app serves the same sessions
    return app
