"""MedAgentGym as a SkyRL-gym ``BaseTextEnv`` (``pip install 'medagentgym[skyrl]'``), registered as ``medagentgym``.

SkyRL builds one env per trajectory with ``skyrl_gym.make("medagentgym", env_config=..., extras=row)``: the
dataset row's extras name the task (``{"task_id": "toy_sql/train/0003"}``), ``env_config`` says where tasks and the
sandbox are (``tasks_root``, ``sandbox``, ``workers``, ``allow_unisolated``, ``url``, ``token``, ``max_turns``).
``init(prompt)`` replaces the dataset's prompt by the episode's own opening (system prompt with the actions'
parameters in compact form, then the task); each ``step(model_text)`` returns the observation as the next chat message, the reward (the graded
reward on the submit, 0.0 before it; None when grading failed for an infrastructure reason, never a silent 0;
a failure the submission caused is a wrong answer, 0) and ``done``.

Example:
    >>> import skyrl_gym, medagentgym.adapters.skyrl
    >>> env = skyrl_gym.make("medagentgym", env_config={"tasks_root": "artifacts/tasks"},
    ...                      extras={"task_id": "toy_sql/train/0003"})
    >>> prompt, meta = env.init([])
    >>> out = env.step('<tool_call>{"name": "submit_answer", "arguments": {"answer": "7"}}</tool_call>')
    >>> out["reward"], out["done"]
"""

from __future__ import annotations

from typing import Any

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import (
        BaseTextEnv,
        BaseTextEnvStepOutput,
        ConversationType,
    )
except ImportError as exc:  # the optional extra is missing: say how to get it
    raise ImportError("medagentgym.adapters.skyrl needs skyrl-gym: pip install 'medagentgym[skyrl]'") from exc

from medagentgym.adapters._common import TaskSource, episode_runner
from env_client.prompts import inline_tools

__all__ = ["ENV_ID", "MedAgentGymTextEnv"]

ENV_ID = "medagentgym"
_CONFIG_KEYS = {"tasks_root", "sandbox", "workers", "allow_unisolated", "url", "token", "max_turns"}


def _plain(config: Any) -> dict[str, Any]:
    """``env_config`` as a dict (SkyRL passes an OmegaConf ``DictConfig`` or a dataclass)."""
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    try:
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(config, resolve=True))
    except (ImportError, ValueError):
        return dict(vars(config))


class MedAgentGymTextEnv(BaseTextEnv):
    """One MedAgentGym episode as a SkyRL text environment.

    Args:
        env_config: ``{"tasks_root", "sandbox"?, "workers"?, "allow_unisolated"?, "url"?, "token"?,
            "max_turns"?}`` (see the module docstring).
        extras: The dataset row's extras; ``task_id`` names the task.

    Raises:
        ValueError: No ``tasks_root`` or ``task_id``, or an unknown ``env_config`` key.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        config, extras = _plain(env_config), dict(extras or {})
        unknown = set(config) - _CONFIG_KEYS
        if unknown or "tasks_root" not in config or "task_id" not in extras:
            raise ValueError(f"medagentgym needs env_config.tasks_root and extras.task_id (unknown env_config keys: "
                             f"{sorted(unknown)}; allowed: {sorted(_CONFIG_KEYS)})")
        self.instance = TaskSource(config["tasks_root"]).get(str(extras["task_id"]))
        episode = {"max_turns": config["max_turns"]} if config.get("max_turns") else None
        self._env = episode_runner(config["tasks_root"], url=config.get("url"), token=config.get("token"),
                                   backend=config.get("sandbox", "bwrap"), workers=int(config.get("workers", 2)),
                                   allow_unisolated=bool(config.get("allow_unisolated", False)), config=episode)

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Open the episode; returns its ``[system, user]`` messages (the dataset prompt is not needed)."""
        obs, info = self._env.reset(self.instance)
        self.max_turns = int(info["max_turns"])
        # SkyRL renders this prompt without `tools`: the system message carries their compact form instead.
        return inline_tools(obs.messages, obs.tools), {"task_id": self.instance.id, "tools": obs.tools}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Apply the model's reply; ``observations`` is the next message (empty once the episode is done)."""
        self.turns += 1
        result = self._env.step(action)
        done = bool(result.terminated or result.truncated)
        observations = [] if done else list(result.observation.messages)
        return BaseTextEnvStepOutput(observations=observations, reward=result.reward, done=done,
                                     metadata={k: v for k, v in result.info.items() if k != "llm_debugger"})

    def close(self) -> None:
        """End the episode and return its sandbox worker."""
        self._env.close()


skyrl_gym.register(id=ENV_ID, entry_point="medagentgym.adapters.skyrl:MedAgentGymTextEnv")
