"""MedAgentGym as a ``gymnasium.Env`` (``pip install 'medagentgym[gymnasium]'``), registered as ``MedAgentGym-v0``.

Text in, text out: an observation is the text the model reads next (on reset the first user message; the
system prompt and tool schemas are in ``info``), an action is the model's raw reply. ``reset(seed=..., options=
{"task_id": ...})`` starts an episode on that task, or on one picked by ``seed``; ``step(text)`` returns
``(observation, reward, terminated, truncated, info)`` with ``terminated`` after the graded submit and
``truncated`` when a budget ran out. A reward grading could not compute for an infrastructure reason is ``nan`` (never a silent 0;
``info["reward"]`` is then None). The step's timings are in ``env.unwrapped.timings``, not in ``info``, so the
same seed and actions give the same infos.

Example:
    >>> import gymnasium
    >>> env = gymnasium.make("medagentgym.adapters.gym:MedAgentGym-v0", tasks_root="artifacts/tasks", families=["toy_sql"])
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(
    ...     '<tool_call>{"name": "submit_answer", "arguments": {"answer": "7"}}</tool_call>')
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as exc:  # the optional extra is missing: say how to get it
    raise ImportError("medagentgym.adapters.gym needs gymnasium: pip install 'medagentgym[gymnasium]'") from exc

from medagentgym.adapters._common import TaskSource, episode_runner
from env_client.server_app import MAX_ACTION_CHARS

__all__ = ["ENV_ID", "MedAgentGymEnv", "TextSpace"]

ENV_ID = "MedAgentGym-v0"
_TIMINGS = ("exec_s", "overhead_s", "duration_s")


class TextSpace(spaces.Space[str]):
    """Any string of at most ``max_length`` characters (gymnasium's ``Text`` space restricts the charset)."""

    def __init__(self, max_length: int, seed: int | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A short random reply (what a policy that knows nothing would say)."""
        return "".join(self.np_random.choice(list("abcdefghij 0123456789"), size=int(self.np_random.integers(1, 32))))

    def contains(self, x: Any) -> bool:
        """True for a string no longer than ``max_length``."""
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """Text has no fixed-size vector form."""
        return False


class MedAgentGymEnv(gymnasium.Env[str, str]):
    """One MedAgentGym episode at a time, in this process (or on an env server with ``url``).

    Args:
        tasks_root: Built tasks root.
        families: Families a seed-only reset picks from (default: all built ones).
        split: Split a seed-only reset picks from.
        url: A running ``medagentgym serve`` to play on instead of an in-process sandbox.
        token: Its bearer token (default ``$MEDAGENTGYM_ENV_TOKEN``).
        sandbox: In-process sandbox backend (``bwrap``, ``docker``, ``local``).
        workers: Warm sandbox workers shared by every env of this process.
        allow_unisolated: Required for ``sandbox="local"``.
        config: ``env_client.EnvConfig`` fields, e.g. ``{"max_turns": 6}``.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, tasks_root: str | Path, *, families: list[str] | None = None, split: str = "train",
                 url: str | None = None, token: str | None = None, sandbox: str = "bwrap", workers: int = 2,
                 allow_unisolated: bool = False, config: dict[str, Any] | None = None) -> None:
        self.source = TaskSource(tasks_root, families, split)
        self._env = episode_runner(tasks_root, url=url, token=token, backend=sandbox, workers=workers,
                                   allow_unisolated=allow_unisolated, config=config)
        limit = int((config or {}).get("obs_max_chars", 4000))
        self.observation_space = TextSpace(max(limit * 4, 100_000))  # the first message may exceed the step cap
        self.action_space = TextSpace(MAX_ACTION_CHARS)
        self.timings: dict[str, float | None] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on ``options["task_id"]``, or on a task picked by ``seed``.

        Returns:
            ``(first user message, info)``; ``info`` has ``messages`` (system + user), ``tools``, ``task_id``.
        """
        super().reset(seed=seed)
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        instance = self.source.get(task_id) if task_id else self.source.pick(rng=self.np_random)
        obs, info = self._env.reset(instance, seed=seed, options=options or None)
        return obs.text, {**info, "messages": obs.messages, "tools": obs.tools}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply the model's reply; the reward is the graded reward on the submit (0.0 before it)."""
        result = self._env.step(action)
        reward = math.nan if result.reward is None else float(result.reward)
        info = {k: v for k, v in result.info.items() if k not in _TIMINGS}
        self.timings = {k: result.info.get(k) for k in _TIMINGS}  # kept out of info: same seed, same info
        return result.observation.text, reward, result.terminated, result.truncated, {
            **info, "reward": result.reward, "role": result.observation.role}

    def close(self) -> None:
        """End the episode and return its sandbox worker."""
        self._env.close()


gymnasium.register(id=ENV_ID, entry_point="medagentgym.adapters.gym:MedAgentGymEnv", disable_env_checker=False)
