"""MedAgentGym as a ``gymnasium.Env`` (``pip install 'medagentgym[gymnasium]'``), registered as ``MedAgentGym-v0``.

Text in, text out: an observation is the text the model reads next (on reset the first user message; the
system prompt and tool schemas are in ``info``), an action is the model's raw reply. ``reset(seed=..., options=
{"task_id": ...})`` starts an episode on that task, or on one picked by ``seed``; ``step(text)`` returns
``(observation, reward, terminated, truncated, info)`` with ``terminated`` after the graded submit and
``truncated`` when a budget ran out. A reward grading could not compute for an infrastructure reason is ``nan`` (never a silent 0;
``info`` then has no ``"reward"``). An info key whose value is None is left out, at every depth (gymnasium's vector
envs batch each key into one array, with a ``_key`` mask saying which envs set it). The step's timings are in ``env.unwrapped.timings``, not in ``info``, so the
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
import multiprocessing
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    import gymnasium
    import numpy as np
    from gymnasium import spaces
    from gymnasium.vector.utils import (
        create_shared_memory,
        read_from_shared_memory,
        write_to_shared_memory,
    )
except ImportError as exc:  # the optional extra is missing: say how to get it
    raise ImportError("medagentgym.adapters.gym needs gymnasium: pip install 'medagentgym[gymnasium]'") from exc

from medagentgym.env_client.server_app import MAX_ACTION_CHARS
from medagentgym.adapters._common import TaskSource, episode_runner

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

    def __eq__(self, other: object) -> bool:
        """Equal to any TextSpace of the same ``max_length`` (vector envs check their envs' spaces agree)."""
        return isinstance(other, TextSpace) and other.max_length == self.max_length

    __hash__ = None  # mutable like every gymnasium space (its RNG); equality is by value

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    @property
    def is_np_flattenable(self) -> bool:
        """Text has no fixed-size vector form."""
        return False


def _without_none(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` without None values, in nested dicts too: a vector env batches a key by the type of its first value,
    so a key that is a dict (or a number) in one env and None in another would break the batch."""
    return {k: _without_none(v) if isinstance(v, dict) else v for k, v in info.items() if v is not None}


# AsyncVectorEnv passes observations through shared memory (its default): a TextSpace slot is a length then the
# text's code points, ``max_length + 1`` int32 per env. AsyncVectorEnv reads the buffer once, when it starts, and
# returns that object after every step (a deep copy of it, by default): for numpy arrays that object is a view of
# the buffer; for text it is :class:`_SharedTexts`, which decodes the buffer when read and deep-copies to a tuple.
# (These are gymnasium's extension points for custom spaces.)
class _SharedTexts(Sequence[str]):
    """The texts in a TextSpace shared-memory buffer, read when accessed (a deep copy is a tuple of them)."""

    def __init__(self, rows: np.ndarray) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._rows[index]
        return row[1:1 + row[0]].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __repr__(self) -> str:
        return repr(tuple(self))


@create_shared_memory.register(TextSpace)
def _create_text_shared_memory(space: TextSpace, n: int = 1, ctx: ModuleType = multiprocessing) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@read_from_shared_memory.register(TextSpace)
def _read_text_shared_memory(space: TextSpace, shared_memory: Any, n: int = 1) -> _SharedTexts:
    return _SharedTexts(np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length + 1)))


@write_to_shared_memory.register(TextSpace)
def _write_text_shared_memory(space: TextSpace, index: int, value: str, shared_memory: Any) -> None:
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int32)
    if len(codes) > space.max_length:
        raise ValueError(f"an observation of {len(codes)} characters does not fit the observation space "
                         f"(max_length={space.max_length}); raise config['obs_max_chars']")
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * (space.max_length + 1):]
    row[0] = len(codes)
    row[1:1 + len(codes)] = codes


class MedAgentGymEnv(gymnasium.Env[str, str]):
    """One MedAgentGym episode at a time, in this process (or on an env server with ``url``).

    Args:
        tasks_root: Built tasks root.
        families: Families a seed-only reset picks from (default: all built ones).
        split: Split a seed-only reset picks from.
        url: A running ``medagentgym serve`` to play on instead of an in-process sandbox.
        token: Its bearer token (default ``$MEDAGENTGYM_ENV_TOKEN``).
        sandbox: In-process sandbox backend (``bwrap``, ``docker``, ``local``).
        workers: Floor of warm sandbox workers; this process's pool grows with the episodes in flight (one per
            env, so ``make_vec(num_envs=N)`` gets N) up to its cap (``$MEDAGENTGYM_SANDBOX_MAX_WORKERS``).
        allow_unisolated: Required for ``sandbox="local"``.
        config: ``medagentgym.env_client.EnvConfig`` fields, e.g. ``{"max_turns": 6}``.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, tasks_root: str | Path, *, families: list[str] | None = None, split: str = "train",
                 url: str | None = None, token: str | None = None, sandbox: str = "bwrap", workers: int | None = None,
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
        return obs.text, _without_none({**info, "messages": obs.messages, "tools": obs.tools})

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply the model's reply; the reward is the graded reward on the submit (0.0 before it)."""
        result = self._env.step(action)
        reward = math.nan if result.reward is None else float(result.reward)
        info = {k: v for k, v in result.info.items() if k not in _TIMINGS}
        self.timings = {k: result.info.get(k) for k in _TIMINGS}  # kept out of info: same seed, same info
        return result.observation.text, reward, result.terminated, result.truncated, _without_none({
            **info, "reward": result.reward, "role": result.observation.role})

    def close(self) -> None:
        """End the episode and return its sandbox worker."""
        self._env.close()


gymnasium.register(id=ENV_ID, entry_point="medagentgym.adapters.gym:MedAgentGymEnv", disable_env_checker=False)
