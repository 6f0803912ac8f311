"""MedAgentGym as a SkyRL-gym ``BaseTextEnv`` (``pip install 'medagentgym[skyrl]'``), registered as ``medagentgym``.

SkyRL builds one env per trajectory with ``skyrl_gym.make("medagentgym", env_config=..., extras=row)``, where the
row is a dataset row without its ``prompt`` and ``env_class`` (make one with :func:`skyrl_dataset`). The row names
the task (``task_id``, or ``extra_info.task_id``) and may cap the turns (``max_turns``, which SkyRL's generator sets
from ``generator.max_turns``, or ``extra_info.max_turns``); ``env_config`` says where tasks and the sandbox are
(``tasks_root``, ``sandbox``, ``workers``, ``allow_unisolated``, ``url``, ``token``, ``max_turns``). The turn cap is
the smallest of the row's, ``env_config``'s and the family's.

``init(prompt)`` replaces the dataset's prompt by the episode's own opening (system prompt with the actions'
parameters in compact form, then the task); each ``step(model_text)`` returns the observation as the next chat
message, ``done``, and the reward as a float, as SkyRL's contract requires: the graded reward on the submit, 0.0
before it. A reward grading could not compute for an infrastructure reason is 0.0 too, never silently: the step's
``metadata`` says ``grader_failed`` and :meth:`get_metrics` counts it (SkyRL logs env metrics per batch); a failure
the submission caused is a wrong answer, 0. Every env of a process shares one sandbox pool that grows to the
trajectories in flight (SkyRL runs a batch's trajectories at once).

Example:
    >>> import skyrl_gym, medagentgym.adapters.skyrl
    >>> env = skyrl_gym.make("medagentgym", env_config={"tasks_root": "artifacts/tasks"},
    ...                      extras={"task_id": "toy_sql/train/0003", "max_turns": 8})
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

from medagentgym.env_client.prompts import inline_tools, system_prompt, user_prompt
from medagentgym.adapters._common import TaskSource, episode_runner

__all__ = ["ENV_ID", "MedAgentGymTextEnv", "skyrl_dataset", "write_skyrl_dataset"]

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


def _row_value(extras: dict[str, Any], key: str) -> Any:
    """``extras[key]``, else ``extras["extra_info"][key]`` (SkyRL's example datasets keep per-row settings there)."""
    if extras.get(key) is not None:
        return extras[key]
    info = extras.get("extra_info")
    return info.get(key) if isinstance(info, dict) else None


class MedAgentGymTextEnv(BaseTextEnv):
    """One MedAgentGym episode as a SkyRL text environment.

    Args:
        env_config: ``{"tasks_root", "sandbox"?, "workers"?, "allow_unisolated"?, "url"?, "token"?,
            "max_turns"?}`` (see the module docstring).
        extras: The dataset row's extras; ``task_id`` names the task, ``max_turns`` caps the turns.

    Raises:
        ValueError: No ``tasks_root`` or ``task_id``, an unknown ``env_config`` key, or a ``max_turns`` below 1.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        config, extras = _plain(env_config), dict(extras or {})
        unknown = set(config) - _CONFIG_KEYS
        task_id = _row_value(extras, "task_id")
        if unknown or "tasks_root" not in config or task_id is None:
            raise ValueError(f"medagentgym needs env_config.tasks_root and extras.task_id (unknown env_config keys: "
                             f"{sorted(unknown)}; allowed: {sorted(_CONFIG_KEYS)})")
        caps = [int(v) for v in (_row_value(extras, "max_turns"), config.get("max_turns")) if v is not None]
        if any(cap < 1 for cap in caps):
            raise ValueError(f"max_turns must be at least 1 (got {caps})")
        self.instance = TaskSource(config["tasks_root"]).get(str(task_id))
        self._env = episode_runner(config["tasks_root"], url=config.get("url"), token=config.get("token"),
                                   backend=config.get("sandbox", "bwrap"), workers=config.get("workers"),
                                   allow_unisolated=bool(config.get("allow_unisolated", False)),
                                   config={"max_turns": min(caps)} if caps else None)
        self._cap = min(caps) if caps else None
        self._metrics: dict[str, float] = {}

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Open the episode; returns its ``[system, user]`` messages (the dataset prompt is not needed)."""
        obs, info = self._env.reset(self.instance)
        # An env server applies its own rules; the row's cap still holds here.
        self.max_turns = min(int(info["max_turns"]), self._cap or int(info["max_turns"]))
        # SkyRL renders this prompt without `tools`: the system message carries their compact form instead.
        return inline_tools(obs.messages, obs.tools), {"task_id": self.instance.id, "tools": obs.tools,
                                                       "max_turns": self.max_turns}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Apply the model's reply; ``observations`` is the next message (empty once the episode is done)."""
        self.turns += 1
        result = self._env.step(action)
        done = bool(result.terminated or result.truncated)
        metadata = {k: v for k, v in result.info.items() if k != "llm_debugger"}
        if not done and self.turns >= self.max_turns:  # a server with a looser cap than this row's
            self._env.close()
            done, metadata["reason"] = True, f"max_turns ({self.max_turns}) reached"
        reward = result.reward
        if done:
            verdict = result.info.get("verdict") or {}
            self._metrics = {"correct": float(bool(verdict.get("correct"))), "turns": float(self.turns),
                             "grader_failed": float(reward is None)}
        if reward is None:  # SkyRL's reward is a float: a missing reward is 0.0, flagged in metadata and metrics
            metadata["grader_failed"] = True
            reward = 0.0
        observations = [] if done else list(result.observation.messages)
        return BaseTextEnvStepOutput(observations=observations, reward=float(reward), done=done, metadata=metadata)

    def get_metrics(self) -> dict[str, float]:
        """The finished episode's ``correct`` (0/1), ``turns`` and ``grader_failed`` (0/1), averaged by SkyRL."""
        return dict(self._metrics)

    def close(self) -> None:
        """End the episode and return its sandbox worker."""
        self._env.close()


def skyrl_dataset(tasks_root: str, families: list[str] | None = None, split: str = "train", limit: int | None = None,
                  max_turns: int | None = None) -> Any:
    """A ``datasets.Dataset`` in SkyRL's prompt-dataset format, one row per instance, for ``env_class: medagentgym``.

    Each row has ``data_source`` (``medagentgym/<family>``), ``prompt`` (the episode's opening: system prompt with
    the actions in compact form, then the task; the env replaces it with the same messages at ``init``, so SkyRL's
    prompt-length filter sees the real length), ``env_class``, ``task_id`` and ``extra_info`` (family, split, and
    ``max_turns`` when given). No gold answer is written: the oracle grades inside the env.

    Args:
        tasks_root: Built tasks root.
        families: Families to include (default: every family built there).
        split: ``train`` or ``test``.
        limit: At most this many instances per family.
        max_turns: Turn cap stored per row (SkyRL's ``generator.max_turns`` overrides it when set).

    Example:
        >>> ds = skyrl_dataset("artifacts/tasks", ["toy_sql"], "train")
        >>> ds.to_parquet("data/medagentgym/train.parquet")   # then: data.train_data=['data/medagentgym/train.parquet']
    """
    from datasets import Dataset

    from medagentgym import tasks

    source = TaskSource(tasks_root, families, split)
    rows = []
    for row in source.rows(split, limit):
        instance = source.get(row["task_id"])
        actions = tasks.make(instance.family, root=tasks_root).actions
        extra = {"family": instance.family, "split": split, **({"max_turns": int(max_turns)} if max_turns else {})}
        rows.append({"data_source": f"medagentgym/{instance.family}", "env_class": ENV_ID, "task_id": instance.id,
                     "prompt": [{"role": "system", "content": system_prompt(actions, inline=True)},
                                {"role": "user", "content": user_prompt(instance)}],
                     "extra_info": extra})
    return Dataset.from_list(rows)


def write_skyrl_dataset(out_dir: str, tasks_root: str, families: list[str] | None = None, limit: int | None = None,
                        max_turns: int | None = None) -> dict[str, str]:
    """Write ``train.parquet`` (the train split) and ``validation.parquet`` (the test split) the way SkyRL's example
    datasets are laid out, for ``data.train_data`` / ``data.val_data``. Returns ``{split: path}``.

    Each file is written to a temporary name and renamed, so a reader never sees half a file.
    """
    import os
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, name in (("train", "train.parquet"), ("test", "validation.parquet")):
        tmp = out / f".{name}.tmp"
        skyrl_dataset(tasks_root, families, split, limit, max_turns).to_parquet(str(tmp))
        os.replace(tmp, out / name)
        written[split] = str(out / name)
    return written


skyrl_gym.register(id=ENV_ID, entry_point="medagentgym.adapters.skyrl:MedAgentGymTextEnv")
