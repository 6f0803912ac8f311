"""MedAgentGym over OpenEnv's protocols, served by ``openenv-core``'s own server code (``pip install '.[openenv]'``).

:func:`build_openenv_app` is ``medagentgym.env_client.server_app.build_app`` (its session endpoints, token, size and session
limits, gold hiding) plus openenv-core's ``HTTPEnvServer`` routes, so every OpenEnv client works unchanged:

- WebSocket sessions at ``/ws`` (``GenericEnvClient``, ``AutoEnv.from_env("medagentgym", base_url=...)``): one
  episode per socket, ``reset``/``step``/``state``/``close`` messages, and ``mcp`` messages (JSON-RPC).
- OpenEnv's HTTP contract: ``POST /reset {}`` (or ``{"seed": 3}``, ``{"task_id": ...}``), ``POST /step
  {"action": {...}}``, ``GET /state``: one of the client's episodes (a client: its token, else its address), keyed
  by the ``episode_id`` ``/reset`` returns, which ``/state`` reports and ``/step``/``/state`` accept; without it they
  play the client's only running episode, and answer 409 asking for it when there are several; answered as
  ``{"observation", "reward", "done"}``. A body with ``task_id``, ``family`` and ``split`` (``/reset``), or an
  ``episode_id`` that is a session id, is MedAgentGym's own session protocol (``medagentgym.env_client.http_client.HTTPEnv``).
- Every session (HTTP, WebSocket, MCP ``openenv/session/create``) is a row of the env server's one session table:
  counted against its client's cap and the capacity, and usable or closable by id only by its client.
  A session whose episode ended (or that never started one) is closed on the server's finished clock
  (``finished_ttl_s``, as an HTTP session): a WebSocket with close code :data:`EXPIRED_CLOSE_CODE` and the reason in
  words, an MCP session id with a JSON-RPC error saying so on its next call; its row and sandbox worker are freed.
  MedAgentGym's own OpenEnv client (``integrations/openenv``) reconnects on the next ``reset`` after such a close,
  so a trainer that pauses longer than the clock between episodes goes on; its ``step`` then is a one-line error.
- MCP tools: the family actions (``request_info``, ``code_execution``, ``terminal``, ``debugging``,
  ``submit_answer``), each playing one typed action in the session's episode; reachable through ``mcp`` messages,
  ``POST /mcp`` and openenv-core's ``MCPToolClient`` (its ``call_tool`` steps carry the reward and ``done``).
- ``/metadata``; ``/health`` and ``/schema`` answer both protocols.

    >>> from openenv import GenericEnvClient
    >>> with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
    ...     env.reset(task_id="toy_sql/test/0003")         # or env.reset(seed=7): a task picked by seed
    ...     result = env.step({"text": '<tool_call>{"name": "submit_answer", "arguments": {"answer": "7"}}</tool_call>'})
    ...     result.reward, result.done

``reset`` takes ``seed``, ``episode_id`` (a name recorded for the episode) and optionally ``task_id``
(``family/split/index``), ``family``, ``split``, ``options``; without a task one is picked by ``seed`` from the
server's ``families`` on ``split`` (train by default). ``step`` takes :class:`MedAction`: the model's raw ``text``,
or one ``typed`` action. A malformed step (neither or both, an action that does not validate) is an ``error``
observation naming what was wrong; the episode goes on. With tokens on, a client that cannot set headers passes the
token as the URL's password: ``GenericEnvClient(base_url="http://u:TOKEN@host:8000")`` (HTTP Basic auth on the
WebSocket handshake). The observation's ``info`` carries the step's info with the verdict made public when gold is
hidden; an internal error reaches the client as its class name only.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import random
import threading
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Body, HTTPException, Query, Request
from pydantic import Field, ValidationError

from medagentgym.env_client.actions import tool_schema
from medagentgym.env_client.episode import Observation as EpisodeObservation
from medagentgym.env_client.errors import ResetNeeded
from medagentgym.env_client.server_app import (
    CLIENT_ERRORS,
    MAX_ACTION_CHARS,
    ResetRequest,
    ServedEnv,
    ServerBusy,
    StepAction,
    build_app,
)
from medagentgym.adapters._common import ACTION_TOOLS, EPISODE_OVER

try:
    from fastmcp import FastMCP
    from openenv.core.env_server import HTTPEnvServer
    from openenv.core.env_server.exceptions import SessionCapacityError
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.mcp_types import (
        CallToolObservation,
        ListToolsObservation,
        Tool,
        ToolError,
        ToolErrorType,
    )
    from openenv.core.env_server.types import (
        Action,
        ConcurrencyConfig,
        EnvironmentMetadata,
        Observation,
        State,
    )
except ImportError as exc:  # the optional extra is missing: say how to get it
    raise ImportError("medagentgym.adapters.openenv needs openenv-core: pip install 'medagentgym[openenv]'") from exc

__all__ = ["EXPIRED_CLOSE_CODE", "MedAction", "MedEnvironment", "MedObservation", "build_openenv_app"]
log = logging.getLogger("medagentgym.adapters.openenv")

#: The WebSocket close code of a session the server closed on its finished clock (its episode ended
#: ``finished_ttl_s`` ago); ``integrations/openenv``'s client knows it (a private-use code, RFC 6455 section 7.4.2).
EXPIRED_CLOSE_CODE = 4001


class MedAction(Action):
    """One turn: the model's raw reply (``text``) or one typed action (``typed``), exactly one of them.

    ``type``/``tool_name``/``arguments`` carry an MCP tool call instead (what openenv-core's ``MCPToolClient``
    sends): ``{"type": "call_tool", "tool_name": "submit_answer", "arguments": {"answer": "7"}}``.
    """

    text: str | None = Field(None, max_length=MAX_ACTION_CHARS, description="The model's raw reply, as generated.")
    typed: dict[str, Any] | None = Field(None, description="A typed action, e.g. {'action': 'terminal', 'cmd': 'ls'}.")
    n_tokens: int | None = Field(None, ge=0, description="Completion tokens of this reply.")
    type: Literal["list_tools", "call_tool"] | None = Field(None, description="An MCP tool action instead.")
    tool_name: str | None = Field(None, description="The tool of a call_tool action.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments.")


class MedObservation(Observation):
    """What the policy sees (the fields of ``medagentgym.env_client.Observation``) plus the step's ``info``."""

    text: str = Field(description="Observation text (on reset: the first user message).")
    role: str = Field("user", description="Chat role to send `text` as.")
    messages: list[dict[str, str]] = Field(default_factory=list, description="Messages to append to the chat.")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="Tool schemas (on reset only).")
    kind: str = Field(description="task | requested_info | code_execution | ... | submitted | error | fatal.")
    turn: int = Field(0, description="Turns taken so far.")
    turns_left: int = Field(0, description="Turns left before truncation.")
    info: dict[str, Any] = Field(default_factory=dict, description="Step info (the verdict is public only).")


def pick_task(instances: Callable[[str, str], dict[str, Any]], families: list[str], split: str,
              seed: int | None) -> tuple[str, str]:
    """``(family, task_id)`` of ``families``/``split`` chosen by ``seed`` (the same seed, the same task)."""
    pool = [(fam, key) for fam in families for key in instances(fam, split)]
    if not pool:
        raise ValueError(f"no {split!r} tasks to pick from in {families}; pass task_id")
    return random.Random(seed).choice(sorted(pool))


def _one_line(exc: BaseException) -> str:
    """A client error as one line: a validation error's fields and messages, else the message."""
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())) or 'action'}: {e.get('msg')}"
                         for e in exc.errors(include_url=False, include_input=False, include_context=False))[:500]
    return " ".join(str(exc).split())[:500]


class MedEnvironment(MCPEnvironment):
    """An OpenEnv ``Environment`` over one :class:`medagentgym.env_client.server_app.ServedEnv` session, with the family actions
    as its MCP tools.

    Args:
        served: The session (its ``Env``, instance lookup, gold hiding, served splits).
        families: Families a seed-only ``reset`` picks from.
        split: Split a seed-only ``reset`` picks from.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # one Env (and sandbox session) per WebSocket

    def __init__(self, served: ServedEnv, families: list[str], split: str = "train") -> None:
        server = FastMCP("medagentgym")
        for tool in ACTION_TOOLS.values():  # bound to this session: each call plays in its episode
            server.tool(types.MethodType(tool, self))
        super().__init__(server)
        self.served, self.families, self.split = served, families, split
        self._episode_id: str | None = None
        self._last: Any = None  # the last tool call's StepResult (its reward and done)
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="medagentgym-openenv")
        self._closed = False
        self._row: Any = None  # its row in the env server's session table (medagentgym.sandbox.server._Session), once created
        self._expired: str | None = None  # why the server closed this session (its finished clock), once it did

    @property
    def idle(self) -> bool:
        """No episode runs (none yet, or it ended): the server's finished clock runs (``_Sessions.reap``)."""
        return self.served.idle

    def expire(self, reason: str) -> None:
        """The server closed this session: every later call is refused with ``reason`` (one line)."""
        self._expired = reason

    @contextlib.contextmanager
    def _session_call(self) -> Iterator[None]:
        """One call of the session's client: under its row's lock (the server's reaper skips a session mid-call),
        refused once expired; a call that returns is activity (and may finish or start the episode's clock)."""
        row = self._row
        with row.lock if row is not None else contextlib.nullcontext():
            if self._expired is not None:
                raise ResetNeeded(self._expired)
            yield
            if row is not None:
                row.note_activity()

    def _guard(self, fn: Any) -> Any:
        try:
            return fn()
        except (*CLIENT_ERRORS, ServerBusy):  # the client's own misuse, or "retry later": safe to say
            raise
        except Exception as exc:
            if not self.served.hide_gold:
                raise
            log.exception("OpenEnv session call failed")  # the message may quote task data
            raise RuntimeError(f"{type(exc).__name__}: internal error (details in the server log)") from None

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              family: str | None = None, split: str | None = None, options: dict[str, Any] | None = None,
              **unknown: Any) -> MedObservation:
        """Start an episode on ``task_id`` (``family``/``split`` default to the id's), or on one picked by ``seed``.

        Raises:
            ValueError: Unknown keyword arguments.
            UnknownTask: No such task, or none to pick from.
        """
        if unknown:
            raise ValueError(f"unknown reset argument(s) {sorted(unknown)}; use seed, episode_id, task_id, family, "
                             "split, options")
        if task_id is None:
            family, task_id = pick_task(self.served.instances, self.families, self.split, seed)
            split = self.split
        parts = task_id.split("/")
        request = ResetRequest(task_id=task_id, family=family or parts[0],
                               split=split or (parts[1] if len(parts) == 3 else self.split), seed=seed,
                               options=options)
        with self._session_call(), self._lock:
            observation, info = self._guard(lambda: self.served.reset(request))
            self._episode_id, self._last = episode_id or info.get("episode_id"), None
        return MedObservation(**observation.model_dump(), info=info, done=False, reward=None)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Apply one turn; ``reward`` is the graded reward on the submit (0.0 before), ``done`` ends the episode.

        An MCP action (``type``, or openenv-core's ``ListToolsAction``/``CallToolAction``) lists the tools or calls
        one: a call's observation carries the tool's result and the reward and ``done`` of the action it played.
        (The tools are called here directly, in the session's thread; ``mcp`` messages and ``POST /mcp`` reach the
        same functions through the MCP server.)
        """
        kind = getattr(action, "type", None)
        if kind == "list_tools":
            return ListToolsObservation(tools=[Tool(name=s["function"]["name"], description=s["function"]["description"],
                                                    input_schema=s["function"]["parameters"])
                                               for s in (tool_schema(name) for name in ACTION_TOOLS)])
        if kind == "call_tool":
            return self._call_tool(action.tool_name or "", dict(action.arguments or {}))
        return super().step(action, timeout_s=timeout_s, **kwargs)

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """What the WebSocket handler awaits: :meth:`step` in this session's own thread (a sandbox call blocks)."""
        executor = None if self._closed else self._executor  # closed (reaped): its answer is "the episode is over"
        return await asyncio.get_running_loop().run_in_executor(
            executor, lambda: self.step(action, timeout_s=timeout_s, **kwargs))

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolObservation:
        tool = ACTION_TOOLS.get(name)
        if tool is None:
            return CallToolObservation(tool_name=name, error=ToolError(
                error_type=ToolErrorType.TOOL_NOT_FOUND, message=f"no tool {name!r}; tools: {', '.join(ACTION_TOOLS)}"))
        self._last = None
        try:
            inspect.signature(tool).bind(self, **arguments)
        except TypeError as exc:
            return CallToolObservation(tool_name=name, error=ToolError(error_type=ToolErrorType.INVALID_ARGS,
                                                                       message=f"{name}: {exc}"))
        result = tool(self, **arguments)
        last, self._last = self._last, None
        done = bool(last is not None and (last.terminated or last.truncated))
        return CallToolObservation(tool_name=name, result=result, done=done,
                                   reward=last.reward if last is not None else None)

    def _step_impl(self, action: Any, timeout_s: float | None = None, **_: Any) -> MedObservation:
        if not isinstance(action, MedAction):
            raise TypeError(f"unsupported action {type(action).__name__}; send text, typed or an MCP tool call")
        try:
            request = StepAction(text=action.text, typed=action.typed, n_tokens=action.n_tokens)
            with self._session_call(), self._lock:
                result = self._guard(lambda: self.served.step(request))
        except (ValidationError, ValueError) as exc:  # malformed: say what was wrong, keep the episode going
            return self._error(exc)
        obs: EpisodeObservation = result.observation
        return MedObservation(**obs.model_dump(), done=bool(result.terminated or result.truncated),
                              reward=result.reward, info={**result.info, "terminated": result.terminated,
                                                          "truncated": result.truncated})

    def _error(self, exc: BaseException) -> MedObservation:
        """The observation of a malformed step: what was wrong, the episode unchanged (no turn counted)."""
        env = self.served.env
        turn = int(env.state().get("turn") or 0)
        text = f"Invalid action: {_one_line(exc)}"
        return MedObservation(text=text, messages=[{"role": "user", "content": text}], kind="error", turn=turn,
                              turns_left=max(int(getattr(env, "max_turns", 0)) - turn, 0), done=False, reward=None,
                              info={"status": "invalid_action", "error": type(exc).__name__})

    def _act(self, action: dict[str, Any]) -> str:
        """One MCP tool call: the typed action in this session's episode; returns the observation text."""
        try:
            with self._session_call(), self._lock:
                if self.served.env.done:
                    return EPISODE_OVER if self.served.state().get("task_id") else "No episode yet: reset first."
                self._last = result = self._guard(lambda: self.served.step(StepAction(typed=action)))
        except (ValidationError, ValueError) as exc:
            return f"Invalid action: {_one_line(exc)}"
        return result.observation.text

    @property
    def state(self) -> State:
        """OpenEnv's ``State``: the reset's ``episode_id``, ``step_count`` = turns, plus the episode summary."""
        data = self._guard(self.served.state)
        turn = data.pop("turn", 0)
        data.pop("episode_id", None)
        return State(episode_id=self._episode_id, step_count=turn, **data)

    def get_metadata(self) -> EnvironmentMetadata:
        """What ``/metadata`` shows: the name, the families a seed-only reset picks from, how to call it."""
        return EnvironmentMetadata(
            name="MedAgentGym", version="1",
            description=f"Biomedical data-science tasks graded by strict oracles; families: {', '.join(self.families)}; "
                        f"reset(task_id=... | seed=...), step({{'text': model reply}} | {{'typed': action}}); "
                        f"MCP tools: {', '.join(ACTION_TOOLS)}.")

    def close(self) -> None:
        """Close the episode and return its sandbox worker (idempotent)."""
        self._closed = True
        self.served.close()
        self._executor.shutdown(wait=False)
        super().close()


def build_openenv_app(tasks_root: str | Path, *, families: list[str] | None = None, split: str = "train",
                      capacity: int = 64, idle_timeout_s: float = 600.0, **build_kwargs: Any) -> Any:
    """The env server speaking OpenEnv's protocols as well as MedAgentGym's session protocol.

    Args:
        tasks_root: Built tasks root.
        families: Families a seed-only ``reset`` picks from (default: every family built under ``tasks_root``).
        split: Split a seed-only ``reset`` picks from.
        capacity: Open sessions allowed, per protocol (WebSocket sessions count against OpenEnv's own cap).
        idle_timeout_s: Idle sessions are closed after this long (OpenEnv's reaper checks every
            ``max(idle_timeout_s / 4, 5)`` seconds).
        **build_kwargs: ``medagentgym.env_client.server_app.build_app`` arguments (pool, tokens, hide_gold, limits, ...).

    Returns:
        The FastAPI app (serve it with uvicorn; ``ws_max_size`` bounds a WebSocket message).

    Example:
        >>> app = build_openenv_app("artifacts/tasks", tokens=["a-long-token"], families=["toy_sql"])
    """
    from medagentgym.adapters._common import TaskSource

    app = build_app(tasks_root, capacity=capacity, idle_timeout_s=idle_timeout_s, **build_kwargs)
    make_served = app.state.served_env_factory
    names = TaskSource(tasks_root, families).families

    def factory() -> MedEnvironment:
        return MedEnvironment(make_served(), names, split)

    server = _OwnedEnvServer(app.state.env_sessions, factory, MedAction, MedObservation,
                             concurrency_config=ConcurrencyConfig(max_concurrent_envs=capacity,
                                                                  session_timeout=idle_timeout_s))
    # production mode: openenv-core's stateless HTTP /reset and /step are not registered; the contract is served by
    # _openenv_http below, on the session endpoints (an episode spans many requests)
    server.register_routes(app, mode="production")
    _openenv_http(app, make_served().instances, names, split)
    _expired_mcp_ids(app, server)
    app.add_middleware(_SocketCloser)  # outermost: each WebSocket connection's close, for the finished clock
    return app


class _OwnedSessions(dict):
    """openenv-core's session table (``session_id -> env``) with owners: a lookup or removal by a client that is
    not the session's owner finds nothing (as for an unknown id), and removing a session frees its row in the env
    server's own table. Outside a request (openenv-core's reaper, shutdown) there is no client and no check."""

    def __init__(self, rows: Any) -> None:
        super().__init__()
        self.rows = rows  # medagentgym.sandbox.server._Sessions: every protocol's sessions, counted per client
        self.owner: dict[str, tuple[str, str]] = {}  # session_id -> (its client, its row in ``rows``)

    def _visible(self, key: Any) -> bool:
        from medagentgym.sandbox._server_guard import current_client

        who, owned = current_client(), self.owner.get(key)
        return who is None or owned is None or owned[0] == who

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(key, default) if self._visible(key) else default

    def pop(self, key: Any, *default: Any) -> Any:
        if not self._visible(key):
            if default:
                return default[0]
            raise KeyError(key)
        value = super().pop(key, *default)
        if value is not None and key in self.owner:  # an env (not a placeholder of one being made): its row goes
            self.rows.discard(self.owner.pop(key)[1])
        return value


#: The close of the WebSocket connection being served (set by :class:`_SocketCloser`), for the session openenv-core
#: makes for it; None on plain HTTP.
_SOCKET: contextvars.ContextVar[_Closer | None] = contextvars.ContextVar("openenv_socket", default=None)


class _Closer:
    """Closes one WebSocket connection from outside its handler (the finished clock's expiry), once."""

    def __init__(self, send: Any) -> None:
        self.send, self.claimed, self.closed = send, False, False

    async def close(self, code: int, reason: str) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):  # the peer may have gone already: closed either way
                await self.send({"type": "websocket.close", "code": code, "reason": reason[:120]})


class _SocketCloser:
    """ASGI middleware: each WebSocket connection's :class:`_Closer` in :data:`_SOCKET` for the code it runs; a
    close it sent is the connection's last message (the handler's own close afterwards is dropped)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        closer = _Closer(send)

        async def guarded(message: dict[str, Any]) -> None:
            if not closer.closed:
                if message["type"] == "websocket.close":
                    closer.closed = True
                await send(message)

        token = _SOCKET.set(closer)
        try:
            await self.app(scope, receive, guarded)
        finally:
            _SOCKET.reset(token)


class _Row:
    """What an OpenEnv session's row in the env server's table holds: the env server's reaper sees its episode's
    ``idle`` and, on the finished clock (or the idle or lifetime bounds), closes it through openenv-core (the socket
    with :data:`EXPIRED_CLOSE_CODE`, the session, its executor and MCP stack)."""

    def __init__(self, server: _OwnedEnvServer, session_id: str, env: MedEnvironment,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.server, self.session_id, self.env, self.loop = server, session_id, env, loop

    @property
    def idle(self) -> bool:
        return self.env.idle

    def close(self) -> None:
        """Called by the env server's reaper thread (or at shutdown, on the loop): refuse further calls, then close
        the session on its event loop."""
        rows = self.server.rows
        why = (f"its episode ended (or none started) over {rows.finished_ttl_s:g} s ago" if self.env.idle else
               f"its episode passed the idle ({rows.idle_timeout_s:g} s) or lifetime bound")
        self.env.expire(f"the server closed this session: {why}; start a new session and reset")
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop or not self.loop.is_running():  # shutdown: the sessions go with the server
            self.env.close()
            return
        asyncio.run_coroutine_threadsafe(self.server.expire(self.session_id, why), self.loop)


class _OwnedEnvServer(HTTPEnvServer):
    """openenv-core's server whose sessions (WebSocket, MCP ``openenv/session/create``) are reserved in the env
    server's table: each counts against its client's cap and the server's capacity like an HTTP session, expires on
    its finished clock like one, and only its client can use or close it by id."""

    def __init__(self, rows: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sessions = _OwnedSessions(rows)
        self.rows = rows
        self._closers: dict[str, _Closer] = {}  # WebSocket sessions: session_id -> its connection's close
        #: Recently expired session ids and their clients (bounded), so an MCP call by id says why it is gone.
        self.expired: OrderedDict[str, tuple[str, str]] = OrderedDict()  # session_id -> (client, why)

    async def expire(self, session_id: str, why: str) -> None:
        """Close a session the env server's reaper expired (``why``, in words): its socket (with
        :data:`EXPIRED_CLOSE_CODE` and the reason) and the session itself."""
        owned = self._sessions.owner.get(session_id)
        if owned is not None:
            self.expired[session_id] = (owned[0], why)
            while len(self.expired) > 4096:
                self.expired.popitem(last=False)
        closer = self._closers.pop(session_id, None)
        await self._destroy_session(session_id)
        if closer is not None:
            await closer.close(EXPIRED_CLOSE_CODE, f"session expired: {why}; reconnect and reset")

    async def _destroy_session(self, session_id: str) -> None:
        self._closers.pop(session_id, None)
        await super()._destroy_session(session_id)

    async def _create_session(self) -> tuple[str, Any]:
        from fastapi import HTTPException as Refused

        from medagentgym.sandbox._server_guard import current_client

        table: _OwnedSessions = self._sessions
        owner = current_client() or "addr:?"
        try:
            row, _ = table.rows.reserve(owner, kind="openenv")
        except Refused as exc:  # 503 (capacity) or 429 (this client's cap): openenv-core's capacity error
            raise SessionCapacityError(len(table.rows), table.rows.capacity, message=str(exc.detail)) from None
        try:
            session_id, env = await super()._create_session()
        except BaseException:
            table.rows.discard(row)
            raise
        table.owner[session_id] = (owner, row)
        session = table.rows.peek(row)
        if session is not None and isinstance(env, MedEnvironment):  # the env server's reaper now sees its clock
            env._row = session
            session.env = _Row(self, session_id, env, asyncio.get_running_loop())
            session.note_activity()  # no episode yet: the finished clock runs until a reset
        closer = _SOCKET.get()
        if closer is not None and not closer.claimed:  # the connection's own session (not one made over its MCP)
            closer.claimed = True
            self._closers[session_id] = closer
        return session_id, env


def _expired_mcp_ids(app: Any, server: _OwnedEnvServer) -> None:
    """``POST /mcp`` naming a session the finished clock closed answers a JSON-RPC error saying so (not "Unknown
    session_id"), to that session's client only."""
    from medagentgym.sandbox._server_guard import client_id

    route = _route(app, "/mcp", "POST")
    inner = route.endpoint
    app.router.routes.remove(route)

    @app.post("/mcp", summary="MCP JSON-RPC (tools/list, tools/call; openenv/session/create and close)")
    async def mcp(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            body = None
        params = body.get("params") if isinstance(body, dict) else None
        sid = params.get("session_id") if isinstance(params, dict) else None
        gone = server.expired.get(sid) if isinstance(sid, str) else None
        if gone is not None and gone[0] == client_id(request.scope):
            return {"jsonrpc": "2.0", "id": body.get("id"), "error": {
                "code": -32600, "message": f"session {sid:.80} expired: {gone[1]}; create a new one with "
                                           f"openenv/session/create"}}
        return await inner(request)


def _route(app: Any, path: str, method: str) -> Any:
    from fastapi.routing import APIRoute

    return next(r for r in app.router.routes if isinstance(r, APIRoute) and r.path == path and method in r.methods)


def _openenv_http(app: Any, instances: Callable[[str, str], dict[str, Any]], families: list[str],
                  split: str) -> None:
    """Serve OpenEnv's HTTP contract on the session endpoints: ``POST /reset {}``, ``POST /step {"action": ...}``,
    ``GET /state`` play one of the client's episodes, each a session of this server like any other (its caps,
    reaper, token and gold hiding apply); a request in MedAgentGym's own protocol is passed on unchanged.

    Each ``/reset`` answers an ``episode_id`` (the one it was given, else a new one) that ``/state`` reports and that
    ``/step`` and ``/state`` accept. A reset naming one of the client's episodes restarts it; any other reset never
    takes over a running episode: it plays on the session of one of the client's finished episodes, else on a new
    session (the client's cap applies: 429 names the way out). Without an ``episode_id``, ``/step`` and ``/state``
    play the client's one running episode (else its one open episode); when several are open (two clients behind
    one address, or one client's parallel episodes) they answer 409 and ask for the ``episode_id``, so no answer
    is ever graded on another episode's task.
    """
    from medagentgym.sandbox._server_guard import client_id

    ours = {path: _route(app, path, method) for path, method in (("/reset", "POST"), ("/step", "POST"),
                                                                   ("/state", "GET"))}
    models = {path: inspect.signature(route.endpoint).parameters["request"].annotation
              for path, route in ours.items() if path != "/state"}
    for route in ours.values():
        app.router.routes.remove(route)
    table = app.state.env_sessions
    named: dict[tuple[str, str], str] = {}  # (client, episode_id) -> its session
    lock = threading.Lock()

    def alive(owner: str) -> dict[str, Any]:
        """The client's open contract episodes, ``episode_id -> session`` (forgetting closed or reaped ones)."""
        with lock:
            rows = {key: table.peek(sid) for key, sid in named.items()}
            for key in [k for k, row in rows.items() if row is None]:  # every client's: the map stays bounded
                del named[key]
            return {name: row for (who, name), row in rows.items() if who == owner and row is not None}

    def session_of(owner: str, name: str | None) -> str:
        episodes = alive(owner)
        if name is not None:
            if name not in episodes:
                raise HTTPException(404, f"unknown or expired episode_id {name!r:.80}; POST /reset to start one")
            return named[owner, name]
        if not episodes:
            raise HTTPException(409, "no episode yet: POST /reset first")
        running = [n for n, row in episodes.items() if row.finished_at is None]
        picks = running if running else list(episodes)
        if len(picks) > 1:
            raise HTTPException(409, f"{len(picks)} episodes of this client are open; pass the episode_id that "
                                     "/reset returned (clients behind one address: give each its own token)")
        return named[owner, picks[0]]

    @app.post("/reset", summary="Start an episode (OpenEnv: {} or {seed, episode_id, task_id}; or a session reset)")
    def reset(http: Request, body: Annotated[dict[str, Any] | None, Body()] = None) -> dict[str, Any]:
        body = body or {}
        if {"family", "split"} <= set(body) and "task_id" in body:  # MedAgentGym's session protocol
            return ours["/reset"].endpoint(request=_validated(models["/reset"], body), http=http)
        body = dict(body)
        owner, name = client_id(http.scope), body.pop("episode_id", None)
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 256):
            raise HTTPException(422, "episode_id must be a string of 1 to 256 characters")
        seed, task_id = body.pop("seed", None), body.pop("task_id", None)
        if task_id is None:
            _, task_id = pick_task(instances, families, split, seed)
        parts = str(task_id).split("/")
        fields = {"task_id": task_id, "family": body.pop("family", parts[0]),
                  "split": body.pop("split", parts[1] if len(parts) == 3 else split), "seed": seed,
                  "options": body.pop("options", None)}
        if body:
            raise HTTPException(422, f"unknown reset field(s) {sorted(body)}; use seed, episode_id, task_id, "
                                     "family, split, options")
        episodes = alive(owner)
        reuse = named.get((owner, name)) if name is not None and name in episodes else None  # a restart
        if reuse is None:  # a new episode: on the session of one of the client's finished ones, else a new one
            finished = [n for n, row in episodes.items() if row.finished_at is not None]
            with lock:
                reuse = named.pop((owner, finished[0]), None) if finished else None
        out = None
        if reuse is not None:
            try:
                out = ours["/reset"].endpoint(request=_validated(models["/reset"], {**fields, "episode_id": reuse}),
                                              http=http)
            except HTTPException as exc:
                if exc.status_code != 404:  # 404: reaped or closed meanwhile; open a new one
                    raise
        if out is None:
            out = ours["/reset"].endpoint(request=_validated(models["/reset"], fields), http=http)
        name = name or out["episode_id"]
        with lock:
            named[owner, name] = out["episode_id"]
        return {**out, "episode_id": name, "reward": None, "done": False}

    @app.post("/step", summary="Play one action (OpenEnv: {action}; or a session step with episode_id)")
    def step(http: Request, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        owner = client_id(http.scope)
        name = body.get("episode_id")
        if name is None or name in alive(owner):  # OpenEnv's contract (its own episode, or one it names)
            body = {**body, "episode_id": session_of(owner, name)}
            body.pop("timeout_s", None), body.pop("request_id", None)  # OpenEnv's optional step fields
        return ours["/step"].endpoint(request=_validated(models["/step"], body), http=http)

    @app.get("/state", summary="The episode's state (OpenEnv: the client's episode; or ?episode_id=)")
    def state(http: Request, episode_id: Annotated[str | None, Query(description="Episode; omit for your own.")] = None
              ) -> dict[str, Any]:
        owner = client_id(http.scope)
        if episode_id is not None and episode_id not in alive(owner):  # a session id of the own protocol
            return ours["/state"].endpoint(http=http, episode_id=episode_id)
        session = session_of(owner, episode_id)
        data = ours["/state"].endpoint(http=http, episode_id=session)
        name = episode_id or next((n for (who, n), sid in list(named.items()) if who == owner and sid == session),
                                  session)
        return {**data, "episode_id": name, "step_count": data.get("turn", 0), "session_id": session}


def _validated(model: Any, body: dict[str, Any]) -> Any:
    """``model(**body)``, a validation failure answered as FastAPI's 422 with the field errors."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise HTTPException(422, exc.errors(include_url=False, include_input=False, include_context=False)) from None
