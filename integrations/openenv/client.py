"""MedAgentGym's OpenEnv client: ``MedagentgymEnv`` (the class name openenv-core's AutoEnv derives from the manifest's
``name: medagentgym``; ``MedAgentGymEnv`` is the same class).

    >>> from openenv import AutoEnv
    >>> env = AutoEnv.from_env("medagentgym", base_url="http://127.0.0.1:8000")    # a running server
    >>> env = AutoEnv.from_env("medagentgym")       # or: start the image medagentgym-env:latest (server/Dockerfile)
    >>> with env.sync() as client:
    ...     first = client.reset(seed=3)
    ...     result = client.step(MedAction(text=model_reply))
    ...     result.observation.text, result.reward, result.done

``step`` takes a :class:`MedAction`, a dict of its fields, or a string (the model's raw reply). Observations are
:class:`MedObservation`; ``state()`` is OpenEnv's ``State`` with the episode's summary as extra fields.

The server closes a session whose episode ended a while ago (its finished clock, a minute by default) with close code
:data:`EXPIRED_CLOSE_CODE`: the next ``reset`` reconnects transparently (a trainer may pause between episodes for an
optimizer step), and a ``step`` raises one line saying to reset.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any, Literal

from pydantic import Field
from websockets.exceptions import ConnectionClosed

from openenv.core.client_types import StepResult
from openenv.core.containers.runtime import LocalDockerProvider
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State

#: The longest model reply one step may carry (the server's ``medagentgym.env_client.server_app.MAX_ACTION_CHARS``).
MAX_ACTION_CHARS = 100_000
#: The close code of a session the server closed on its finished clock (``medagentgym.adapters.openenv``'s).
EXPIRED_CLOSE_CODE = 4001


# The wire types, declared here with pydantic and openenv-core only: the client never imports medagentgym (its
# sandbox, task families and server stack). tests/adapters/test_openenv_package.py keeps their JSON schemas equal
# to the server's (medagentgym.adapters.openenv).
class MedAction(Action):
    """One turn: the model's raw reply (``text``) or one typed action (``typed``), exactly one of them; or an MCP
    tool call (``type``, ``tool_name``, ``arguments``)."""

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

__all__ = ["EXPIRED_CLOSE_CODE", "JAIL_DOCKER_OPTIONS", "JailDockerProvider", "MedAction", "MedAgentGymEnv", "MedObservation",
           "MedagentgymEnv"]

#: What the env-server container needs so its sandbox can build bubblewrap jails inside it (user, mount and pid
#: namespaces): Docker's default seccomp and AppArmor profiles refuse them. The jails then drop every capability
#: and run model code as an unprivileged uid; the container is the outer boundary.
JAIL_DOCKER_OPTIONS = ("--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined",
                       "--security-opt", "apparmor=unconfined")
#: Environment variable of the env server's bearer token (medagentgym serve and server/app.py read it).
TOKEN_ENV = "MEDAGENTGYM_ENV_TOKEN"


class JailDockerProvider(LocalDockerProvider):
    """openenv-core's local Docker provider, starting the container with :data:`JAIL_DOCKER_OPTIONS`."""

    def start_container(self, image: str, port: int | None = None, env_vars: dict[str, str] | None = None,
                        **kwargs: Any) -> str:
        """``docker run -d`` the image with the jail options, mapping a free host port to 8000; returns its URL."""
        import subprocess

        port = port or self._find_available_port()
        self._container_name = self._generate_container_name(image)
        command = ["docker", "run", "-d", "--name", self._container_name, "-p", f"127.0.0.1:{port}:8000",
                   *JAIL_DOCKER_OPTIONS]
        for key, value in (env_vars or {}).items():
            command += ["-e", f"{key}={value}"]
        command.append(image)
        try:
            out = subprocess.run(command, capture_output=True, text=True, check=True)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"docker run {image} failed (exit {exc.returncode}): {exc.stderr.strip()[:500]}; "
                               f"build the image with `docker build -f integrations/openenv/server/Dockerfile "
                               f"-t {image} .` in the repository") from exc
        self._container_id = out.stdout.strip()
        return f"http://127.0.0.1:{port}"


class MedagentgymEnv(EnvClient[MedAction, MedObservation, State]):
    """A WebSocket session with a MedAgentGym env server: one episode at a time (see the module docstring)."""

    async def reset(self, **kwargs: Any) -> StepResult[MedObservation]:
        """Start an episode (see the module docstring); after the server expired this session, on a new one."""
        try:
            return await super().reset(**kwargs)
        except ConnectionClosed as exc:
            if _expiry(exc) is None:
                raise
        await self._drop()  # the server closed our finished session: open a new one
        return await super().reset(**kwargs)

    async def step(self, action: MedAction | dict[str, Any] | str, **kwargs: Any) -> StepResult[MedObservation]:
        """Play one turn; on a session the server expired, a one-line ``RuntimeError`` saying to reset."""
        try:
            return await super().step(action, **kwargs)
        except ConnectionClosed as exc:
            reason = _expiry(exc)
            if reason is None:
                raise
        await self._drop()
        raise RuntimeError(f"{reason or 'session expired'} (close code {EXPIRED_CLOSE_CODE}); call reset() to start "
                           f"a new episode on a new session")

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):  # closed by the server already
                await ws.close()

    def _step_payload(self, action: MedAction | dict[str, Any] | str) -> dict[str, Any]:
        if isinstance(action, str):
            return {"text": action}
        if isinstance(action, MedAction):
            return action.model_dump(exclude_none=True, exclude_defaults=True)
        return dict(action)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[MedObservation]:
        done, reward = bool(payload.get("done", False)), payload.get("reward")
        observation = MedObservation(**{**payload.get("observation", {}), "done": done, "reward": reward})
        return StepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)

    @classmethod
    async def from_docker_image(cls, image: str, provider: Any = None, **kwargs: Any) -> MedagentgymEnv:
        """Start ``image`` (default provider: :class:`JailDockerProvider`) with a fresh bearer token, and connect.

        The token goes to the container as ``$MEDAGENTGYM_ENV_TOKEN`` and to the server with each connection (the
        server refuses clients without it, since a mapped port is reachable from the network).
        """
        provider = provider or JailDockerProvider()
        token = secrets.token_hex(16)
        env_vars = {**(kwargs.pop("env_vars", None) or {}), TOKEN_ENV: token}
        base_url = provider.start_container(image, env_vars=env_vars, **kwargs)
        provider.wait_for_ready(base_url, timeout_s=float(kwargs.get("wait_timeout", 120.0)))
        client = cls(base_url=base_url.replace("://", f"://medagentgym:{token}@", 1), provider=provider)
        await client.connect()
        return client


def _expiry(exc: ConnectionClosed) -> str | None:
    """The server's reason when it closed the connection on its finished clock, else None."""
    frame = exc.rcvd
    return (frame.reason or "session expired") if frame is not None and frame.code == EXPIRED_CLOSE_CODE else None


MedAgentGymEnv = MedagentgymEnv
