"""Serve MedAgentGym episodes over HTTP: the glue between ``env_client.Env`` and ``sandbox.server``.

``sandbox.server.create_app`` is generic; this module hands it a factory that builds one :class:`Env` per
session (sharing one sandbox pool) plus the wire models: ``/reset`` takes a task reference (family, split,
task id) and a seed, ``/step`` takes the model's raw text (the server parses it, so parse errors are the same
locally and over HTTP), ``/state`` and ``/close`` return the trajectory so far.

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

from env_client.actions import Action
from env_client.episode import Env, EnvConfig, Observation, StepResult
from env_client.errors import EnvClientError, ResetNeeded
from tasks.base import Instance, TaskError, UnknownTask

__all__ = ["ResetRequest", "StepAction", "background_server", "build_app"]


@contextlib.contextmanager
def background_server(app: Any, *, host: str = "127.0.0.1", startup_timeout_s: float = 20.0) -> Iterator[str]:
    """Run an ASGI app with uvicorn on a free loopback port in a daemon thread.

    Args:
        app: The ASGI app.
        host: Interface to bind (loopback by default).
        startup_timeout_s: How long to wait for the server to accept connections.

    Yields:
        The base URL, e.g. ``"http://127.0.0.1:43817"``; the server stops when the block exits.

    Raises:
        RuntimeError: If the server did not start in time.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
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

    task_id: str = Field(description="Instance id, e.g. 'toy_sql/test/0003'.")
    family: str = Field(description="Family registry name of the instance.")
    split: Literal["train", "test"] = Field(description="Split the instance belongs to.")
    seed: int | None = Field(None, description="Episode seed, recorded in the trajectory.")
    options: dict[str, Any] | None = Field(None, description="{'policy': str, 'sample_idx': int} for the header.")


class StepAction(BaseModel):
    """``/step`` action: the model's raw text (parsed by the server) or one typed action; not both."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(None, description="The model's raw reply, exactly as generated.")
    typed: Action | None = Field(None, description="A typed action, e.g. {'action': 'terminal', 'cmd': 'ls'}.")
    n_tokens: int | None = Field(None, ge=0, description="Completion tokens of this reply.")
    n_prompt_tokens: int | None = Field(None, ge=0, description="Prompt tokens the policy was billed for this turn.")

    @model_validator(mode="after")
    def _one_of(self) -> StepAction:
        if (self.text is None) == (self.typed is None):
            raise ValueError("give exactly one of 'text' (model reply) or 'typed' (an action object)")
        return self


class _ServedEnv:
    """Adapts :class:`Env` to the generic server: instance lookup on reset, trajectory in the state."""

    def __init__(self, env: Env, instances: Callable[[str, str], dict[str, Instance]]) -> None:
        self.env, self._instances = env, instances

    def reset(self, req: ResetRequest) -> tuple[Observation, dict[str, Any]]:
        found = self._instances(req.family, req.split).get(req.task_id)
        if found is None:
            raise UnknownTask(f"task {req.task_id!r} is not in {req.family}/{req.split} on this server; "
                              "check the id and that the server's tasks root is the one you built")
        return self.env.reset(found, seed=req.seed, options=req.options)

    def step(self, action: StepAction) -> StepResult:
        return self.env.step(action.text if action.text is not None else action.typed, n_tokens=action.n_tokens,
                             n_prompt_tokens=action.n_prompt_tokens)

    def state(self) -> dict[str, Any]:
        state = self.env.state()
        try:
            state["trajectory"] = self.env.trajectory.model_dump(mode="json")
        except ResetNeeded:  # no episode yet
            state["trajectory"] = None
        return state

    def close(self) -> None:
        self.env.close()


def build_app(tasks_root: str | Path, *, backend: str = "bwrap", workers: int = 4, allow_unisolated: bool = False,
              config: EnvConfig | None = None, capacity: int = 64, idle_timeout_s: float = 600.0,
              pool: Any = None) -> Any:
    """The MedAgentGym env server: ``sandbox.server.create_app`` over ``Env`` sessions sharing one pool.

    Args:
        tasks_root: Built tasks root (``scripts/build_tasks.py --out``).
        backend: Sandbox backend for the pool the app starts (ignored when ``pool`` is given).
        workers: Sandbox workers, i.e. episodes that can run code at the same time.
        allow_unisolated: Required for ``backend="local"``.
        config: Episode rules for every session.
        capacity: Open sessions allowed (503 past it).
        idle_timeout_s: Sessions idle this long are closed by the server.
        pool: An already started sandbox pool to use (the caller closes it).

    Returns:
        The FastAPI app; its pool (if it started one) closes with the app's lifespan.
    """
    import tasks
    from sandbox import make_pool
    from sandbox.server import create_app

    own_pool = pool is None
    pool = pool or make_pool(backend, workers=workers, allow_unisolated=allow_unisolated)
    lock, cache = threading.Lock(), {}

    def instances(family: str, split: str) -> dict[str, Instance]:
        with lock:
            if (family, split) not in cache:
                fam = tasks.make(family, root=tasks_root)
                cache[family, split] = {inst.id: inst for inst in fam.instances(split)}
            return cache[family, split]

    app = create_app(lambda: _ServedEnv(Env(pool, tasks_root=tasks_root, config=config), instances),
                     StepAction, Observation, reset_model=ResetRequest, capacity=capacity,
                     idle_timeout_s=idle_timeout_s, client_errors=(EnvClientError, TaskError, ValueError),
                     title="MedAgentGym environment server", on_shutdown=pool.close if own_pool else None)
    return app
