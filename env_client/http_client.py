"""``HTTPEnv``: the local ``Env`` interface over the environment server (``env_client.server_app``).

Same methods, same return types: ``reset(task, *, seed, options) -> (Observation, info)``,
``step(model_text, *, n_tokens, n_prompt_tokens) -> StepResult``, ``close()`` (idempotent), ``trajectory``, ``state()``.
The server parses the model text, so parse errors, observations and rewards are the ones a local ``Env`` gives.
Errors come back typed: misuse (``ResetNeeded``, ``InvalidAction``, unknown task) raises the same class as
locally; a server failure raises :class:`ServerError` naming the endpoint and the server's message, and a
server that is full or out of free sandbox workers (429 / 503) raises its subclass :class:`ServerBusy`.
A server started with ``--token`` needs the same token: ``HTTPEnv(url, token=...)`` or the
``MEDAGENTGYM_ENV_TOKEN`` environment variable (sent as ``Authorization: Bearer``; use it over loopback or TLS).
A server that hides gold answers (``serve_env.py``'s default) returns verdicts without their reason.

Example:
    >>> with HTTPEnv("http://127.0.0.1:8000") as env:
    ...     obs, info = env.reset(instance, seed=0)
    ...     result = env.step('<tool_call>{"name": "submit_answer", "arguments": {"answer": "7"}}</tool_call>')
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from pydantic import BaseModel

from env_client.episode import Observation, StepResult
from env_client.errors import EnvClientError, InvalidAction, ResetNeeded
from env_client.trajectory import Trajectory

__all__ = ["TOKEN_ENV", "HTTPEnv", "ServerBusy", "ServerError"]

#: Environment variable holding the bearer token (read by the client and by ``scripts/serve_env.py``).
TOKEN_ENV = "MEDAGENTGYM_ENV_TOKEN"

_TYPED_ERRORS: dict[str, type[Exception]] = {"ResetNeeded": ResetNeeded, "InvalidAction": InvalidAction}


class ServerError(EnvClientError):
    """The environment server failed, is unreachable, or answered something unexpected."""


class ServerBusy(ServerError):
    """The server is at its session cap or has no free sandbox worker (HTTP 429 / 503): retry later."""


class HTTPEnv:
    """A remote episode runner with the interface of :class:`env_client.Env`.

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

    def _new_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=self.timeout_s)

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        url = path if self._own_client else self.base_url + path  # a shared client has no base_url
        if self._own_client and self._http.is_closed:  # reopened after close(), like a local Env
            self._http = self._new_client()
        try:
            resp = self._http.request(method, url, headers=self._headers, **kwargs)
        except httpx.HTTPError as exc:
            raise ServerError(f"{method} {self.base_url}{path} failed: {type(exc).__name__}: {exc}") from exc
        if resp.status_code == 200:
            return resp.json()
        detail = _detail(resp)
        if resp.status_code == 409 and isinstance(detail, dict):
            cls = _TYPED_ERRORS.get(detail.get("error", ""), EnvClientError)
            raise cls(detail.get("message", ""))
        if resp.status_code == 404:
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
        self.episode_id, self._final_state = data["episode_id"], None
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
        if self._own_client:
            self._http.close()

    def __enter__(self) -> HTTPEnv:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _detail(resp: httpx.Response) -> Any:
    try:
        return resp.json().get("detail", resp.text)
    except ValueError:
        return resp.text[:500]
