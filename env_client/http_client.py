"""``HTTPEnv``: the local ``Env`` interface over the environment server (``medagentgym.env_client.server_app``).

Same methods, same return types: ``reset(task, *, seed, options) -> (Observation, info)``,
``step(model_text, *, n_tokens, n_prompt_tokens) -> StepResult``, ``close()`` (idempotent), ``trajectory``, ``state()``.
The server parses the model text, so parse errors, observations and rewards are the ones a local ``Env`` gives.
Errors come back typed: misuse (``ResetNeeded``, ``InvalidAction``, unknown task) raises the same class as
locally; a server failure raises :class:`ServerError` naming the endpoint and the server's message, and a
server that is full or out of free sandbox workers (429 / 503) raises its subclass :class:`ServerBusy`.
A server started with ``--token`` needs the same token: ``HTTPEnv(url, token=...)`` or the
``MEDAGENTGYM_ENV_TOKEN`` environment variable (sent as ``Authorization: Bearer``; use it over loopback or TLS).
A server that hides gold answers (``medagentgym serve``'s default) returns verdicts without their reason.

Several servers (sandboxes on CPU nodes, the trainer on GPU nodes): :class:`EnvServers` hands out envs that pick
a server per episode round-robin among the healthy ones (``GET /health``, re-checked every ``health_every_s``),
retry a ``/reset`` that fails (unreachable, full, no free worker) on the next server with a short back-off, and
mark an unreachable server unhealthy until its next check. An episode lives on the server it started on: when
that server dies or forgets the episode mid-way, the step raises :class:`ServerLost` and the server is marked
unhealthy; the rollout engine (``medagentgym.env_client.rollout``) and GRPO's rollout (``medagentgym.medcopilot.rollout_func``) then play
the whole episode again, with the same seed, on another server (:func:`retry_lost`). Episodes are recorded by the
client once they finish, so a lost one is never recorded twice and never lost.

Example:
    >>> with HTTPEnv("http://127.0.0.1:8000") as env:
    ...     obs, info = env.reset(instance, seed=0)
    ...     result = env.step('<tool_call>{"name": "submit_answer", "arguments": {"answer": "7"}}</tool_call>')
    >>> servers = EnvServers(["http://cpu-a:8000", "http://cpu-b:8000"])
    >>> env = servers.env()                # an HTTPEnv-like env; each reset picks a healthy server
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from medagentgym.env_client.episode import Observation, StepResult
from medagentgym.env_client.errors import EnvClientError, InvalidAction, ResetNeeded
from medagentgym.env_client.trajectory import Trajectory

__all__ = ["EPISODE_ATTEMPTS", "TOKEN_ENV", "BalancedEnv", "EnvServers", "HTTPEnv", "ServerBusy", "ServerError",
           "ServerLost", "retry_lost"]

#: Environment variable holding the bearer token (read by the client and by ``medagentgym serve``).
TOKEN_ENV = "MEDAGENTGYM_ENV_TOKEN"

_TYPED_ERRORS: dict[str, type[Exception]] = {"ResetNeeded": ResetNeeded, "InvalidAction": InvalidAction}
T = TypeVar("T")


class ServerError(EnvClientError):
    """The environment server failed, is unreachable, or answered something unexpected."""


class ServerBusy(ServerError):
    """The server is at its session cap or has no free sandbox worker (HTTP 429 / 503): retry later."""


class ServerLost(ServerError, ResetNeeded):
    """The server of a running episode is gone (unreachable, timed out, or it no longer knows the episode): the
    episode cannot go on; reset, or play it again from the start on another server (:func:`retry_lost`)."""


#: Times :func:`retry_lost` plays an episode whose server was lost, in all.
EPISODE_ATTEMPTS = 3
_log = logging.getLogger("env_client.http")


def retry_lost(play: Callable[[], T], *, attempts: int = EPISODE_ATTEMPTS, what: str = "episode") -> T:
    """Run ``play()`` (one whole episode, from its reset) again when its env server was lost mid-way.

    Only :class:`ServerLost` is retried: the episode's record lives in the client, so a replay on another server
    neither loses nor duplicates it. Each failed try is logged; the last one raises.
    """
    for attempt in range(1, attempts + 1):
        try:
            return play()
        except ServerLost as exc:
            if attempt == attempts:
                raise
            _log.warning("%s lost its env server (%s); playing it again on another server (try %d of %d)",
                         what, exc, attempt + 1, attempts)
    raise AssertionError("unreachable")


class HTTPEnv:
    """A remote episode runner with the interface of :class:`medagentgym.env_client.Env`.

    Args:
        base_url: Server root, e.g. ``http://127.0.0.1:8000``.
        timeout_s: Per-request timeout (a step may run code for up to the sandbox's wall limit).
        client: An ``httpx.Client`` to reuse (connection pooling across envs); one is created otherwise.
        token: Bearer token of a server started with ``--token``; default ``$MEDAGENTGYM_ENV_TOKEN`` (if set).
    """

    def __init__(self, base_url: str, *, timeout_s: float = 300.0, client: httpx.Client | None = None,
                 token: str | None = None) -> None:
        self.base_url, self.timeout_s = base_url.rstrip("/"), timeout_s
        token = token if token is not None else os.environ.get(TOKEN_ENV, "").strip()
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._own_client = client is None
        self._http = client or self._new_client()
        self.episode_id: str | None = None
        self._final_state: dict[str, Any] | None = None
        self._lost: ServerLost | None = None  # why the last episode's record is gone (its server was lost)

    def _new_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=self.timeout_s)

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        url = path if self._own_client else self.base_url + path  # a shared client has no base_url
        if self._own_client and self._http.is_closed:  # reopened after close(), like a local Env
            self._http = self._new_client()
        try:
            resp = self._http.request(method, url, headers=self._headers, **kwargs)
        except httpx.HTTPError as exc:
            # no answer (refused, reset, timed out): with an episode running there, that episode is lost
            cls = ServerLost if self.episode_id is not None and path != "/close" else ServerError
            raise cls(f"{method} {self.base_url}{path} failed: {type(exc).__name__}: {exc}") from exc
        if resp.status_code == 200:
            return resp.json()
        detail = _detail(resp)
        if resp.status_code == 409 and isinstance(detail, dict):
            cls = _TYPED_ERRORS.get(detail.get("error", ""), EnvClientError)
            raise cls(detail.get("message", ""))
        if resp.status_code == 404:
            if self.episode_id is not None and path in ("/step", "/state"):  # restarted, or reaped the episode
                raise ServerLost(f"{method} {self.base_url}{path}: the server no longer knows episode "
                                 f"{self.episode_id} ({detail})")
            raise ResetNeeded(f"{detail}")
        if isinstance(detail, dict):
            detail = f"{detail.get('error')}: {detail.get('message')}"
        if resp.status_code in (429, 503):
            raise ServerBusy(f"{method} {path} -> HTTP {resp.status_code}: {detail}")
        if resp.status_code == 401:
            raise ServerError(f"{method} {path} -> HTTP 401: {detail}; pass HTTPEnv(url, token=...) or set "
                              f"{TOKEN_ENV}")
        raise ServerError(f"{method} {path} -> HTTP {resp.status_code}: {detail}")

    def reset(self, task: Any, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode on ``task`` (reuses this client's server session when it has one).

        Returns:
            ``(observation, info)`` as from ``Env.reset``.
        """
        body: dict[str, Any] = {"task_id": task.id, "family": task.family, "split": task.split, "seed": seed,
                                "options": options}
        if self.episode_id is not None:
            body["episode_id"] = self.episode_id
        try:
            data = self._call("POST", "/reset", json=body)
        except ResetNeeded:  # our session expired on the server: open a fresh one
            body.pop("episode_id", None)
            data = self._call("POST", "/reset", json=body)
        self.episode_id, self._final_state, self._lost = data["episode_id"], None, None
        return Observation.model_validate(data["observation"]), data["info"]

    def step(self, model_text: str | BaseModel | dict[str, Any], *, n_tokens: int | None = None,
             n_prompt_tokens: int | None = None) -> StepResult:
        """Advance one turn on the model's text (or a typed action); see ``Env.step``.

        Raises:
            ResetNeeded: No running episode.
            InvalidAction: A typed action the server rejects.
        """
        if self.episode_id is None:
            raise ResetNeeded("no episode: call reset(task) before step()")
        if isinstance(model_text, str):
            action: dict[str, Any] = {"text": model_text}
        else:
            typed = model_text.model_dump() if isinstance(model_text, BaseModel) else dict(model_text)
            action = {"typed": typed}
        action["n_tokens"] = n_tokens
        if n_prompt_tokens is not None:
            action["n_prompt_tokens"] = n_prompt_tokens
        try:
            data = self._call("POST", "/step", json={"episode_id": self.episode_id, "action": action})
        except ServerError as exc:
            if "HTTP 422" in str(exc) and "typed" in action:
                raise InvalidAction(f"invalid typed action: {exc}") from None
            raise
        return StepResult(Observation.model_validate(data["observation"]), data["reward"], data["terminated"],
                          data["truncated"], data["info"])

    def state(self) -> dict[str, Any]:
        """The server's state of this episode (including its trajectory so far)."""
        if self.episode_id is None:
            if self._final_state is not None:
                return self._final_state
            if self._lost is not None:
                raise self._lost
            raise ResetNeeded("no episode yet: call reset(task) first")
        return self._call("GET", "/state", params={"episode_id": self.episode_id})

    @property
    def trajectory(self) -> Trajectory:
        """The record of the current (or last closed) episode."""
        traj = self.state().get("trajectory")
        if traj is None:
            raise ResetNeeded("no episode yet: call reset(task) first")
        return Trajectory.model_validate(traj)

    def close(self) -> None:
        """Close the server session (recorded as ``closed`` if still running) and our connections; idempotent.

        A later ``reset`` opens a new session (and connection), as a local ``Env`` reopens a sandbox session.
        """
        if self.episode_id is not None:
            episode_id, self.episode_id = self.episode_id, None
            try:
                self._final_state = self._call("POST", "/close", json={"episode_id": episode_id})["state"]
            except ResetNeeded:  # already reaped by the server
                pass
            except ServerError as exc:  # the server is gone, and the episode's record with it
                self._lost = ServerLost(f"{self.base_url} was lost before episode {episode_id} was closed: {exc}")
        if self._own_client:
            self._http.close()

    def __enter__(self) -> HTTPEnv:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EnvServers:
    """Several env servers behind one factory of envs: round-robin over the healthy ones, with retry.

    Args:
        urls: Server roots (``http(s)://host:port``), each once.
        token: Bearer token for all of them; default ``$MEDAGENTGYM_ENV_TOKEN``.
        timeout_s: Per-request timeout of the envs.
        health_every_s: A server's health is re-checked at most this often (seconds).
        attempts: ``/reset`` tries per episode on servers that fail (unreachable, erroring), each on the next
            healthy server.
        backoff_s: Pause after a failed or busy try, doubled each time up to 2 s (seconds).
        busy_wait_s: How long a ``/reset`` keeps trying while the servers are only busy (full, or no sandbox
            worker free: 429 / 503), e.g. after one of them died and the others took its load (seconds).

    Raises:
        ValueError: No URL, a repeated one, or one that is not http(s).
    """

    def __init__(self, urls: Sequence[str], *, token: str | None = None, timeout_s: float = 300.0,
                 health_every_s: float = 10.0, attempts: int = 4, backoff_s: float = 0.2,
                 busy_wait_s: float = 300.0) -> None:
        urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        if not urls or len(set(urls)) != len(urls) or not all(u.startswith(("http://", "https://")) for u in urls):
            raise ValueError(f"env server URLs must be distinct http(s)://host:port roots, got {urls!r}")
        self.urls, self.token, self.timeout_s = urls, token, timeout_s
        self.health_every_s, self.attempts, self.backoff_s = health_every_s, max(1, attempts), backoff_s
        self.busy_wait_s = busy_wait_s
        self._lock = threading.Lock()
        self._order = itertools.cycle(range(len(urls)))
        self._checked: dict[str, tuple[float, bool]] = {}  # url -> (monotonic time of the check, healthy)
        self._client = httpx.Client(timeout=timeout_s, limits=httpx.Limits(max_connections=256))
        self.episodes: dict[str, int] = dict.fromkeys(urls, 0)  # episodes started per server (for logs and tests)
        self.lost: dict[str, int] = dict.fromkeys(urls, 0)  # episodes lost mid-way per server (replayed elsewhere)

    def healthy(self, url: str, *, refresh: bool = False) -> bool:
        """Whether ``url`` answered ``/health`` with ``status: healthy`` at its last check (re-checked when due)."""
        with self._lock:
            checked = self._checked.get(url)
        if checked is not None and not refresh and time.monotonic() - checked[0] < self.health_every_s:
            return checked[1]
        try:
            resp = self._client.get(url + "/health", timeout=min(self.timeout_s, 5.0))
            ok = resp.status_code == 200 and resp.json().get("status") == "healthy"
        except (httpx.HTTPError, ValueError):
            ok = False
        self.mark(url, ok)
        return ok

    def mark(self, url: str, healthy: bool) -> None:
        """Record ``url``'s health now (an env marks a server it could not reach as unhealthy)."""
        with self._lock:
            self._checked[url] = (time.monotonic(), healthy)

    def pick(self) -> str:
        """The next healthy server in round-robin order; when the last checks found none, each is checked again
        now (a server too busy to answer a check in time is not dead).

        Raises:
            ServerError: None of the servers is healthy (naming them).
        """
        for refresh in (False, True):
            for _ in range(len(self.urls)):
                with self._lock:
                    url = self.urls[next(self._order)]
                if self.healthy(url, refresh=refresh):
                    return url
        raise ServerError(f"no healthy env server among {', '.join(self.urls)} (GET /health failed on each); "
                          f"start medagentgym serve there or fix env.url")

    def env(self) -> BalancedEnv:
        """A fresh env (the ``Env`` interface) whose episodes run on these servers."""
        return BalancedEnv(self)

    def close(self) -> None:
        """Close the health-check connections (envs close their own)."""
        self._client.close()


class BalancedEnv:
    """An ``Env``-like client whose every ``reset`` starts the episode on a healthy server of :class:`EnvServers`.

    ``step``, ``state``, ``trajectory`` and ``close`` go to the server the episode runs on.
    """

    def __init__(self, servers: EnvServers) -> None:
        self.servers = servers
        self._env: HTTPEnv | None = None
        self.url: str | None = None
        self._lost_counted = False  # the current episode was counted in servers.lost

    def reset(self, task: Any, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode on the next healthy server, trying the following ones when a server fails.

        Raises:
            ServerError: Every try failed (the last error is chained).
        """
        self.close()
        delay, last, failures = self.servers.backoff_s, None, 0
        busy_until = time.monotonic() + self.servers.busy_wait_s
        while True:
            try:
                url = self.servers.pick()
            except ServerError:  # none answered its health check: an overloaded one may answer the next
                failures += 1
                if failures >= self.servers.attempts:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            env = HTTPEnv(url, timeout_s=self.servers.timeout_s, token=self.servers.token)
            try:
                out = env.reset(task, seed=seed, options=options)
            except ServerError as exc:  # busy, full or unreachable: the next server may take it
                env.close()
                last = exc
                if isinstance(exc, ServerBusy):  # every server busy: wait for one to free, up to busy_wait_s
                    if time.monotonic() + delay > busy_until:
                        raise ServerError(f"every env server stayed busy for {self.servers.busy_wait_s:g} s: {exc}; "
                                          f"run fewer episodes at once or add servers") from exc
                else:
                    self.servers.mark(url, False)
                    failures += 1
                    if failures >= self.servers.attempts:
                        break
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self._env, self.url, self._lost_counted = env, url, False
            with self.servers._lock:
                self.servers.episodes[url] += 1
            return out
        raise ServerError(f"no env server accepted the episode after {self.servers.attempts} tries: {last}") from last

    def _current(self) -> HTTPEnv:
        if self._env is None:
            raise ResetNeeded("no episode: call reset(task) before step()")
        return self._env

    def step(self, model_text: str | BaseModel | dict[str, Any], *, n_tokens: int | None = None,
             n_prompt_tokens: int | None = None) -> StepResult:
        """One turn on the episode's server (see :meth:`HTTPEnv.step`).

        Raises:
            ServerLost: The episode's server is gone (it is marked unhealthy); replay the episode elsewhere.
        """
        env = self._current()
        try:
            return env.step(model_text, n_tokens=n_tokens, n_prompt_tokens=n_prompt_tokens)
        except ServerLost:
            self._lost()
            raise

    def _lost(self) -> None:
        """The episode's server is gone: mark it unhealthy and count the episode lost there (once)."""
        self.servers.mark(self.url, False)
        with self.servers._lock:
            if not self._lost_counted:
                self._lost_counted = True
                self.servers.lost[self.url] += 1

    def state(self) -> dict[str, Any]:
        """The episode's state on its server."""
        try:
            return self._current().state()
        except ServerLost:
            self._lost()
            raise

    @property
    def trajectory(self) -> Trajectory:
        """The record of the current (or last closed) episode (``ServerLost`` when its server took it along)."""
        try:
            return self._current().trajectory
        except ServerLost:
            self._lost()
            raise

    def close(self) -> None:
        """Close the episode on its server (the last trajectory stays readable); idempotent."""
        if self._env is not None:
            self._env.close()

    def __enter__(self) -> BalancedEnv:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _detail(resp: httpx.Response) -> Any:
    try:
        return resp.json().get("detail", resp.text)
    except ValueError:
        return resp.text[:500]
