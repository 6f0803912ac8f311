"""MedAgentGym over OpenEnv's protocol, served by ``openenv-core``'s own server code (``pip install '.[openenv]'``).

:func:`build_openenv_app` is ``env_client.server_app.build_app`` (its ``/reset`` ``/step`` ``/state`` ``/close``
session endpoints, token, size and session limits, gold hiding) plus the routes of openenv-core's
``HTTPEnvServer``: ``/ws`` (one WebSocket per session: ``reset``, ``step``, ``state``, ``close`` messages),
``/metadata`` and ``/mcp``. ``/health`` and ``/schema`` answer both protocols (``{"status": "healthy", ...}``;
``{"action", "observation", "state", ...}``). So OpenEnv's ``GenericEnvClient`` works unchanged:

    >>> from openenv import GenericEnvClient
    >>> with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
    ...     env.reset(task_id="toy_sql/test/0003")         # or env.reset(seed=7): a task picked by seed
    ...     result = env.step({"text": '<tool_call>{"name": "submit_answer", "arguments": {"answer": "7"}}</tool_call>'})
    ...     result.reward, result.done

``reset`` takes ``seed``, ``episode_id`` and optionally ``task_id`` (``family/split/index``), ``family``, ``split``,
``options``; without a task one is picked by ``seed`` from the server's ``families`` on ``split`` (train by default).
``step`` takes :class:`MedAction` (the model's raw ``text``, or one ``typed`` action). With tokens on, a client that
cannot set headers passes the token as the URL's password: ``GenericEnvClient(base_url="http://u:TOKEN@host:8000")``
(sent as HTTP Basic auth on the WebSocket handshake). The observation's ``info`` carries the step's info with the
verdict made public when gold is hidden; an internal error reaches the client as its class name only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import Field

from env_client.episode import Observation as EpisodeObservation
from env_client.server_app import (
    CLIENT_ERRORS,
    MAX_ACTION_CHARS,
    ResetRequest,
    ServedEnv,
    ServerBusy,
    StepAction,
    build_app,
)

try:
    from openenv.core.env_server import Environment, HTTPEnvServer
    from openenv.core.env_server.types import (
        Action,
        ConcurrencyConfig,
        EnvironmentMetadata,
        Observation,
        State,
    )
except ImportError as exc:  # the optional extra is missing: say how to get it
    raise ImportError("medagentgym.adapters.openenv needs openenv-core: pip install 'medagentgym[openenv]'") from exc

__all__ = ["MedAction", "MedEnvironment", "MedObservation", "build_openenv_app"]
log = logging.getLogger("medagentgym.adapters.openenv")


class MedAction(Action):
    """One turn: the model's raw reply (``text``) or one typed action (``typed``), exactly one of them."""

    text: str | None = Field(None, max_length=MAX_ACTION_CHARS, description="The model's raw reply, as generated.")
    typed: dict[str, Any] | None = Field(None, description="A typed action, e.g. {'action': 'terminal', 'cmd': 'ls'}.")
    n_tokens: int | None = Field(None, ge=0, description="Completion tokens of this reply.")


class MedObservation(Observation):
    """What the policy sees (the fields of ``env_client.Observation``) plus the step's ``info``."""

    text: str = Field(description="Observation text (on reset: the first user message).")
    role: str = Field("user", description="Chat role to send `text` as.")
    messages: list[dict[str, str]] = Field(default_factory=list, description="Messages to append to the chat.")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="Tool schemas (on reset only).")
    kind: str = Field(description="task | requested_info | code_execution | ... | submitted | error | fatal.")
    turn: int = Field(0, description="Turns taken so far.")
    turns_left: int = Field(0, description="Turns left before truncation.")
    info: dict[str, Any] = Field(default_factory=dict, description="Step info (the verdict is public only).")


class MedEnvironment(Environment):
    """An OpenEnv ``Environment`` over one :class:`env_client.server_app.ServedEnv` session.

    Args:
        served: The session (its ``Env``, instance lookup, gold hiding, served splits).
        families: Families a seed-only ``reset`` picks from.
        split: Split a seed-only ``reset`` picks from.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # one Env (and sandbox session) per WebSocket

    def __init__(self, served: ServedEnv, families: list[str], split: str = "train") -> None:
        super().__init__()
        self.served, self.families, self.split = served, families, split
        self._episode_id: str | None = None

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
            import random

            pool = [(fam, key) for fam in self.families for key in self.served.instances(fam, self.split)]
            if not pool:
                raise ValueError(f"no {self.split!r} tasks to pick from in {self.families}; pass task_id")
            family, task_id = random.Random(seed).choice(sorted(pool))
            split = self.split
        parts = task_id.split("/")
        request = ResetRequest(task_id=task_id, family=family or parts[0],
                               split=split or (parts[1] if len(parts) == 3 else self.split), seed=seed,
                               options=options)
        observation, info = self._guard(lambda: self.served.reset(request))
        self._episode_id = episode_id or info.get("episode_id")
        return MedObservation(**observation.model_dump(), info=info, done=False, reward=None)

    def step(self, action: MedAction, timeout_s: float | None = None, **_: Any) -> MedObservation:
        """Apply one turn; ``reward`` is the graded reward on the submit (0.0 before), ``done`` ends the episode."""
        request = StepAction(text=action.text, typed=action.typed, n_tokens=action.n_tokens)
        result = self._guard(lambda: self.served.step(request))
        obs: EpisodeObservation = result.observation
        return MedObservation(**obs.model_dump(), done=bool(result.terminated or result.truncated),
                              reward=result.reward, info={**result.info, "terminated": result.terminated,
                                                          "truncated": result.truncated})

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
                        f"reset(task_id=... | seed=...), step({{'text': model reply}} | {{'typed': action}}).")

    def close(self) -> None:
        """Close the episode and return its sandbox worker (idempotent)."""
        self.served.close()


def build_openenv_app(tasks_root: str | Path, *, families: list[str] | None = None, split: str = "train",
                      capacity: int = 64, idle_timeout_s: float = 600.0, **build_kwargs: Any) -> Any:
    """The env server speaking OpenEnv's protocol as well as MedAgentGym's session protocol.

    Args:
        tasks_root: Built tasks root.
        families: Families a seed-only ``reset`` picks from (default: every family built under ``tasks_root``).
        split: Split a seed-only ``reset`` picks from.
        capacity: Open sessions allowed, per protocol (WebSocket sessions count against OpenEnv's own cap).
        idle_timeout_s: Idle sessions are closed after this long (OpenEnv's reaper checks every
            ``max(idle_timeout_s / 4, 5)`` seconds).
        **build_kwargs: ``env_client.server_app.build_app`` arguments (pool, tokens, hide_gold, limits, ...).

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

    server = HTTPEnvServer(factory, MedAction, MedObservation, concurrency_config=ConcurrencyConfig(
        max_concurrent_envs=capacity, session_timeout=idle_timeout_s))
    # production mode: openenv-core's stateless HTTP /reset and /step are not registered (ours keep sessions)
    server.register_routes(app, mode="production")
    return app
