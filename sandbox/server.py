"""A generic HTTP shell around any reset/step environment (FastAPI), in the style of OpenEnv.

It knows nothing about episodes, tasks or prompts: the caller hands it a factory and the pydantic models of
what crosses the wire. `medagentgym.env_client.server_app` is the glue that serves MedAgentGym episodes with it.

Endpoints (JSON; sessions are keyed by ``episode_id``):

- ``GET /health``  -> ``{"status": "healthy", "sessions": n, "capacity": c}``
- ``GET /schema``  -> JSON schemas of the reset request, the action, the observation and the state
- ``POST /reset``  ``{"episode_id"?: str, ...reset fields}`` -> ``{"episode_id", "observation", "info"}``;
  without an ``episode_id`` a new session (and env) is created, 503 when ``capacity`` sessions are open
- ``POST /step``   ``{"episode_id": str, "action": {...}}`` ->
  ``{"observation", "reward", "terminated", "truncated", "done", "info"}``
- ``GET /state?episode_id=...`` -> the env's ``state()`` (any JSON object)
- ``POST /close``  ``{"episode_id": str}`` -> ``{"episode_id", "closed": true, "state": state after close}``

Malformed bodies get FastAPI's 422 with field-level errors; an unknown or expired ``episode_id`` gets 404.
An exception raised by the env is returned as ``{"detail": {"error": <class name>, "message": str}}`` with
status 409 when its class is in ``client_errors`` (the caller misused the episode), 503 (with ``Retry-After``)
when it is in ``busy_errors`` (e.g. no sandbox worker became free in time) and 500 otherwise; with
``internal_error_detail=False`` a 500 names only the class (the message goes to the server log).
A background reaper closes sessions idle for longer than ``idle_timeout_s`` (activity is a ``/reset`` or a
``/step``: polling ``/state`` keeps nothing alive) and episodes older than ``max_episode_s`` since their
``/reset``, active or not; shutdown closes them all.

Abuse limits (see ``sandbox/_server_guard.py``): with ``tokens`` every endpoint but ``/health`` needs
``Authorization: Bearer <token>`` (401 otherwise; tokens compared in constant time); request bodies over
``max_body_bytes`` get 413 before they are buffered; a client (its token, else its peer address) may run at
most ``max_sessions_per_client`` sessions at once (429 beyond; default half the capacity): every open session
counts, running or finished, whatever protocol opened it (``app.state.env_sessions`` is the one table another
protocol mounted on the app reserves its sessions in). A client sees only its own sessions (404 for the others').
A session whose env says it is ``idle`` (its episode ended) is closed ``finished_ttl_s`` after it ended, on its
own clock: only a call that succeeds is activity, so a refused ``/step`` (409) refreshes nothing.

The served object (``env_factory()``) needs ``reset(request) -> (observation, info)``, ``step(action) ->
(observation, reward, terminated, truncated, info)`` (tuple or attributes), ``state() -> dict``, ``close()``.
Calls on one session are serialised by its lock; sessions run concurrently on the server's threads.

Example:
    >>> app = create_app(make_env, MyAction, MyObservation, reset_model=MyReset, capacity=32)
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)
"""

# No `from __future__ import annotations`: FastAPI must see the request models built inside create_app.
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field, create_model

from medagentgym.sandbox._server_guard import Guard, check_tokens, client_id

__all__ = ["create_app"]
log = logging.getLogger("medagentgym.sandbox.server")


class _Session:
    def __init__(self, env: Any, owner: str, kind: str = "http") -> None:
        self.env, self.owner, self.lock, self.last_used = env, owner, threading.Lock(), time.monotonic()
        self.started = self.last_used  # the current episode's /reset
        self.kind = kind  # "http" (this server's endpoints) or another protocol's (e.g. "ws", "mcp")
        self.finished_at: float | None = None  # when its env last said it holds nothing (``idle``)

    def note_activity(self, now: float | None = None) -> None:
        """A call succeeded: it is activity, and the env may have finished (or restarted) its episode."""
        self.last_used = now = time.monotonic() if now is None else now
        if not _idle(self):
            self.finished_at = None
        elif self.finished_at is None:
            self.finished_at = now


class _Sessions:
    """Thread-safe session table with a capacity, a per-client cap and reaping.

    Every open session counts, whatever its protocol and whether its episode runs or has finished: against the
    server's ``capacity`` and against its client's cap. A session is closed when idle for ``idle_timeout_s``
    (activity: a successful ``/reset`` or ``/step``), ``max_episode_s`` after its reset, and
    ``finished_ttl_s`` after its episode finished (its own clock: a refused call does not refresh it).
    """

    def __init__(self, factory: Callable[[], Any], capacity: int, idle_timeout_s: float,
                 per_client: int | None = None, max_episode_s: float | None = None,
                 finished_ttl_s: float | None = None) -> None:
        self.factory, self.capacity, self.idle_timeout_s = factory, capacity, idle_timeout_s
        self.per_client = per_client or capacity
        self.max_episode_s = max_episode_s
        self.finished_ttl_s = min(idle_timeout_s, 60.0) if finished_ttl_s is None else finished_ttl_s
        self._table: dict[str, _Session] = {}
        self._lock = threading.Lock()  # guards the table; each session has its own lock for env calls

    def __len__(self) -> int:
        return len(self._table)

    def count(self, owner: str) -> int:
        """Open sessions of ``owner`` (every protocol, running or finished)."""
        with self._lock:
            return sum(s.owner == owner for s in self._table.values())

    def refusal(self, owner: str) -> str | None:
        """Why a new session of ``owner`` would be refused now (None: it would not)."""
        with self._lock:
            refused = self._refusal(owner)
        return None if refused is None else refused[1]

    def _refusal(self, owner: str) -> tuple[int, str] | None:
        if sum(s.owner == owner for s in self._table.values()) >= self.per_client:  # the client's own doing first
            return 429, (f"this client already holds {self.per_client} open sessions (the per-client cap; finished "
                         "ones count until closed or expired); /close one first")
        if len(self._table) >= self.capacity:
            return 503, (f"server at capacity ({self.capacity} open sessions); close finished episodes with /close "
                         "or retry later")
        return None

    def reserve(self, owner: str, kind: str = "http", env: Any = None) -> tuple[str, _Session]:
        """A new row for ``owner`` (503 at capacity, 429 at the client's cap); ``env`` may be set later."""
        with self._lock:
            refused = self._refusal(owner)
            if refused is not None:
                raise HTTPException(refused[0], refused[1], headers={"Retry-After": "5"})
            episode_id, session = uuid.uuid4().hex, _Session(env, owner, kind)
            self._table[episode_id] = session  # reserve the slot before the (slow) factory runs
        return episode_id, session

    def peek(self, episode_id: str) -> _Session | None:
        """The row of ``episode_id`` whoever owns it (for the protocol that opened it), None if gone."""
        return self._table.get(episode_id)

    def discard(self, episode_id: str) -> _Session | None:
        """Drop a row whatever its owner (the protocol that reserved it ended it); None if already gone."""
        with self._lock:
            return self._table.pop(episode_id, None)

    def open(self, owner: str = "") -> tuple[str, _Session]:
        episode_id, session = self.reserve(owner)
        try:
            session.env = self.factory()
        except BaseException:
            self.discard(episode_id)
            raise
        return episode_id, session

    def get(self, episode_id: str, owner: str = "") -> _Session:
        """The client's session opened on this server's endpoints (another client's looks unknown: 404)."""
        session = self._table.get(episode_id)
        if session is None or session.env is None or session.owner != owner or session.kind != "http":
            raise HTTPException(404, f"unknown or expired episode_id {episode_id!r:.80}; call /reset to start one")
        return session

    def pop(self, episode_id: str, owner: str = "") -> _Session:
        with self._lock:
            session = self._table.get(episode_id)
            if session is None or session.env is None or session.owner != owner or session.kind != "http":
                raise HTTPException(404, f"unknown or expired episode_id {episode_id!r:.80}; nothing to close")
            del self._table[episode_id]
        return session

    def reap(self, now: float | None = None) -> list[str]:
        """Close sessions idle past the timeout, whose episode passed its lifetime, or finished longer than
        ``finished_ttl_s`` ago (skipping any that are mid-call); return their ids."""
        now = time.monotonic() if now is None else now

        def expired(s: _Session) -> bool:
            return now - s.last_used > self.idle_timeout_s or (
                self.max_episode_s is not None and now - s.started > self.max_episode_s) or (
                s.finished_at is not None and now - s.finished_at > self.finished_ttl_s)

        with self._lock:
            stale = [k for k, s in self._table.items() if s.env is not None and expired(s) and not s.lock.locked()]
            victims = [(k, self._table.pop(k)) for k in stale]
        for _, session in victims:
            _close_quietly(session)
        return [k for k, _ in victims]

    def close_all(self) -> None:
        with self._lock:
            victims, self._table = list(self._table.values()), {}
        for session in victims:
            _close_quietly(session)


def _idle(session: _Session) -> bool:
    """Whether a session's env says it holds nothing (``idle``: no episode yet, or it ended)."""
    return session.env is not None and bool(getattr(session.env, "idle", False))


def _close_quietly(session: _Session) -> None:
    with session.lock:
        if session.env is not None:
            try:
                session.env.close()
            except Exception as exc:  # noqa: BLE001 - logged; one bad env must not stop the reaper
                log.warning("closing a session's env failed: %s: %s", type(exc).__name__, exc)


class _Errors:
    """How env exceptions become HTTP answers (see the module docstring)."""

    def __init__(self, client: tuple[type[BaseException], ...], busy: tuple[type[BaseException], ...],
                 detail: bool) -> None:
        self.client, self.busy, self.detail = client, busy, detail

    def call(self, session: _Session, fn: Callable[[], Any], touch: bool = True) -> Any:
        """``fn()`` under the session's lock; only a call that succeeds is activity (``touch``): a refused one
        (409, 503, 500) neither keeps the session alive nor restarts a finished episode's clock."""
        with session.lock:
            try:
                out = fn()
            except HTTPException:
                raise
            except self.busy as exc:
                raise HTTPException(503, {"error": type(exc).__name__, "message": str(exc)},
                                    headers={"Retry-After": "5"}) from exc
            except self.client as exc:
                raise HTTPException(409, {"error": type(exc).__name__, "message": str(exc)}) from exc
            except Exception as exc:
                if self.detail:
                    raise HTTPException(500, {"error": type(exc).__name__, "message": str(exc)}) from exc
                log.exception("env call failed")  # the message may quote task data: keep it in the server log
                raise HTTPException(500, {"error": type(exc).__name__, "message": "internal error (details in "
                                          "the server log)"}) from exc
            if touch:
                session.note_activity()
            return out


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


class _Empty(BaseModel):
    model_config = ConfigDict(extra="forbid")


def create_app(env_factory: Callable[[], Any], action_model: type[BaseModel], observation_model: type[BaseModel],
               *, reset_model: type[BaseModel] | None = None, capacity: int = 64, idle_timeout_s: float = 600.0,
               reap_interval_s: float | None = None, client_errors: tuple[type[BaseException], ...] = (),
               busy_errors: tuple[type[BaseException], ...] = (), internal_error_detail: bool = True,
               tokens: tuple[str, ...] | list[str] = (), max_body_bytes: int = 1 << 20,
               max_sessions_per_client: int | None = None, title: str = "environment server",
               on_shutdown: Callable[[], None] | None = None, max_episode_s: float | None = None,
               max_ws_per_client: int | None = None, finished_ttl_s: float | None = None) -> FastAPI:
    """Build the FastAPI app serving environments made by ``env_factory``.

    Args:
        env_factory: Called with no arguments to create one env per session (see the module docstring).
        action_model: Pydantic model of the ``action`` field of ``/step``; the env receives an instance.
        observation_model: Pydantic model the env's observations are validated against before returning.
        reset_model: Pydantic model of the ``/reset`` fields (besides ``episode_id``); the env's ``reset``
            receives an instance. ``None`` means no fields.
        capacity: Maximum number of open sessions; ``/reset`` beyond it answers 503.
        idle_timeout_s: A session without a ``/reset`` or ``/step`` for this many seconds is closed by the reaper.
        reap_interval_s: How often the reaper runs; defaults to ``min(idle_timeout_s / 4, 30)``.
        client_errors: Exception classes raised by the env that mean misuse (answered 409, not 500).
        busy_errors: Exception classes that mean "try again later" (answered 503 with ``Retry-After``).
        internal_error_detail: Put the message of other exceptions in the 500 body (off: class name only).
        tokens: Accepted bearer tokens; empty = no authentication. Each token is one client for the caps.
        max_body_bytes: Largest request body (413 beyond, refused before it is buffered).
        max_sessions_per_client: Open sessions one client may hold, running or finished, on every protocol
            (429 beyond); ``None`` = half the capacity (at least 1), so no one client fills the server. Never more
            than ``capacity``.
        title: Shown in the OpenAPI page.
        on_shutdown: Called once after every session is closed at shutdown (e.g. to stop a sandbox pool).
        max_episode_s: A session whose last ``/reset`` is older than this is closed by the reaper even while
            it steps (``None``: no limit).
        max_ws_per_client: Open WebSocket connections one client may hold (another protocol mounted on the app,
            e.g. OpenEnv's); ``None`` = no cap on sockets (each session such a protocol opens is counted in
            ``app.state.env_sessions`` like any other).
        finished_ttl_s: A session whose episode finished (its env says ``idle``) is closed this long after it
            finished, whatever its client does meanwhile; ``None`` = ``min(idle_timeout_s, 60)``.

    Returns:
        The app (behind the token and size guard); the reaper thread starts and stops with the app's lifespan.

    Raises:
        ValueError: If a limit is not positive, or a token is shorter than 8 characters.
    """
    if capacity < 1 or idle_timeout_s <= 0 or max_body_bytes < 1 or (max_sessions_per_client or 1) < 1 or \
            (max_episode_s is not None and max_episode_s <= 0) or (finished_ttl_s is not None and finished_ttl_s <= 0):
        raise ValueError(f"capacity, max_sessions_per_client and max_body_bytes must be >= 1, idle_timeout_s and "
                         f"max_episode_s > 0 (got {capacity}, {max_sessions_per_client}, {max_body_bytes}, "
                         f"{idle_timeout_s}, {max_episode_s})")
    if (max_sessions_per_client or 0) > capacity:
        raise ValueError(f"max_sessions_per_client={max_sessions_per_client} exceeds capacity={capacity}: one client "
                         f"could fill the server; use at most {capacity} (default: half the capacity)")
    check_tokens(tokens)
    reset_model = reset_model or _Empty
    per_client = max_sessions_per_client or max(1, capacity // 2)
    sessions = _Sessions(env_factory, capacity, idle_timeout_s, per_client, max_episode_s, finished_ttl_s)
    errors = _Errors(client_errors, busy_errors, internal_error_detail)
    interval = reap_interval_s or min(idle_timeout_s / 4, (max_episode_s or idle_timeout_s) / 4,
                                      sessions.finished_ttl_s / 4, 30.0)
    eid = (str, Field(description="Session returned by /reset."))
    ResetRequest = create_model("ResetRequest", __base__=reset_model, episode_id=(
        str | None, Field(None, description="Reuse this session's env; omit to open a new one.")))
    StepRequest = create_model("StepRequest", __config__=ConfigDict(extra="forbid"), episode_id=eid,
                               action=(action_model, Field(description="The action to apply.")))
    CloseRequest = create_model("CloseRequest", __config__=ConfigDict(extra="forbid"), episode_id=eid)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        stop = threading.Event()

        def reaper() -> None:
            while not stop.wait(interval):
                sessions.reap()

        (thread := threading.Thread(target=reaper, name="env-server-reaper", daemon=True)).start()
        # A lifespan replaces FastAPI's startup/shutdown events, so run the handlers that another protocol mounted
        # on this app registered (e.g. OpenEnv's session reaper).
        for handler in _app.router.on_startup:
            await _maybe_await(handler())
        try:
            yield
        finally:
            for handler in _app.router.on_shutdown:
                await _maybe_await(handler())
            stop.set()
            thread.join(timeout=5)
            sessions.close_all()
            if on_shutdown is not None:
                on_shutdown()

    app = FastAPI(title=title, lifespan=lifespan)
    app.state.env_sessions = sessions  # another protocol mounted on the app counts its sessions here too
    app.add_middleware(Guard, tokens=tuple(tokens), max_body_bytes=max_body_bytes,  # checked above, not per call
                       max_ws_per_client=max_ws_per_client, ws_refusal=sessions.refusal)
    # sessions are counted in the table (a WebSocket session too: refused at the handshake when its client or the
    # server is full), sockets by the connection limits (sandbox/_conn_limits.py)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "healthy", "sessions": len(sessions), "capacity": capacity}

    @app.get("/schema")
    def schema() -> dict[str, Any]:  # the action/observation/state keys are also OpenEnv's /schema contract
        return {"reset": ResetRequest.model_json_schema(), "action": action_model.model_json_schema(),
                "observation": observation_model.model_json_schema(),
                "state": {"type": "object", "description": "The env's state() mapping (see GET /state)."}}

    @app.post("/reset")
    def reset(request: ResetRequest, http: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        owner = client_id(http.scope)
        episode_id, session = sessions.open(owner) if request.episode_id is None else (
            request.episode_id, sessions.get(request.episode_id, owner))
        fields = reset_model.model_validate(request.model_dump(exclude={"episode_id"}))
        session.started = time.monotonic()  # a new episode: its lifetime starts now
        try:
            observation, info = errors.call(session, lambda: session.env.reset(fields))
        except HTTPException:
            if request.episode_id is None:  # a session that never started is not left open
                _close_quietly(sessions.pop(episode_id, owner))
            raise
        return {"episode_id": episode_id, "observation": _dump(observation_model.model_validate(_dump(observation))),
                "info": _dump(info)}

    @app.post("/step")
    def step(request: StepRequest, http: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        session = sessions.get(request.episode_id, client_id(http.scope))
        out = errors.call(session, lambda: session.env.step(request.action))
        obs, reward, terminated, truncated, info = out if isinstance(out, tuple) else (
            out.observation, out.reward, out.terminated, out.truncated, out.info)
        return {"observation": _dump(observation_model.model_validate(_dump(obs))), "reward": reward,
                "terminated": bool(terminated), "truncated": bool(truncated),
                "done": bool(terminated or truncated), "info": _dump(info)}

    @app.get("/state")
    def state(http: Request, episode_id: str = Query(description="Session returned by /reset.")) -> dict[str, Any]:
        session = sessions.get(episode_id, client_id(http.scope))  # reading is not activity (touch=False)
        return _dump(errors.call(session, lambda: session.env.state(), touch=False))

    @app.post("/close")
    def close(request: CloseRequest, http: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        session = sessions.pop(request.episode_id, client_id(http.scope))

        def close_then_state() -> Any:  # state after close: it records how the episode ended
            session.env.close()
            return session.env.state()

        try:
            final = errors.call(session, close_then_state)
        except HTTPException:
            _close_quietly(session)  # a failed state() must not leak the env; close() may run twice
            raise
        return {"episode_id": request.episode_id, "closed": True, "state": _dump(final)}

    return app
