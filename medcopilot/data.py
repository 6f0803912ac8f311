"""Trajectories to training data: SFT conversations and DPO preference pairs.

Both datasets are conversational (TRL's ``messages`` / ``prompt`` + ``chosen`` + ``rejected`` formats), built from
the chat an episode actually produced: system prompt, task question, the model's raw messages, and the
environment's observations (``user`` or ``tool`` turns).

* SFT keeps the *successful* episodes. With ``assistant_only_loss=True`` only assistant turns carry loss, so
  observations are context, never targets.
* DPO pairs a success with a failure of the *same task*. ``DPOTrainer`` cannot mask tokens inside a completion,
  so a pair is the shared history (every message up to the first difference, as the prompt) plus ONE divergent
  assistant turn: the success's turn is ``chosen``, the failure's is ``rejected``. No environment text is ever
  trained on. Pairs that first differ in an observation (a non-deterministic environment) are dropped.

Example:
    >>> episodes = load_episodes("artifacts/trajectories/oracle.jsonl")   # doctest: +SKIP
    >>> rows = sft_rows(episodes)
    >>> pairs = dpo_pairs(episodes, max_pairs_per_task=4)
"""

from __future__ import annotations

import itertools
import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medagentgym.medcopilot.config import RecipeError

Message = dict[str, Any]


@dataclass(frozen=True)
class Episode:
    """One finished episode as the trainers see it.

    Attributes:
        task_id: Instance id; DPO pairs only episodes of the same task.
        family: Registry name of the task family.
        category: Template id within the family.
        messages: The chat as the model saw it: ``system``, ``user``, ``assistant`` (raw model text) and
            observation turns (``user`` or ``tool``), in order.
        success: True when the graded submission was correct.
        reward: The episode's scalar reward, if recorded.
        tools: JSON tool schemas passed to the chat template, when the episode used them.
    """

    task_id: str
    family: str
    category: str
    messages: list[Message]
    success: bool
    reward: float | None = None
    tools: list[dict[str, Any]] | None = field(default=None)


def load_episodes(path: str | os.PathLike, *, families: Iterable[str] | None = None) -> list[Episode]:
    """Read a trajectory store (``medagentgym.env_client.trajectory``) into :class:`Episode` records.

    Args:
        path: The store's JSONL file.
        families: Keep only these families (None keeps all).

    Returns:
        The episodes, in store order.

    Raises:
        RecipeError: If the store does not exist.
    """
    from medagentgym.env_client.trajectory import TrajectoryStore, to_chat_messages

    if not Path(path).is_file():
        raise RecipeError(f"trajectory store {str(path)!r} does not exist; set rollout.store to a JSONL written by "
                          f"the rollout engine (medagentgym rollout) or let the trainer generate it")
    keep = set(families) if families is not None else None
    episodes = []
    for traj in TrajectoryStore(path).read():
        episode = episode_from_trajectory(traj, to_chat_messages(traj))
        if keep is None or episode.family in keep:
            episodes.append(episode)
    return episodes


def episode_from_trajectory(traj: Any, messages: list[Message]) -> Episode:
    """Adapt one ``medagentgym.env_client.trajectory.Trajectory`` (and its chat messages) to an :class:`Episode`.

    Success means the final verdict says ``correct``; an episode without a verdict (truncated, or a grader
    error) is a failure for pairing purposes but never a success.
    """
    verdict = traj.final.verdict if traj.final is not None else None
    reward = traj.final.reward if traj.final is not None else None
    return Episode(
        task_id=traj.header.task_id,
        family=traj.header.family,
        category=traj.header.category,
        messages=[dict(m) for m in messages],
        success=bool(verdict and verdict.get("correct")),
        reward=None if reward is None else float(reward),
        tools=list(traj.tools) or None,
    )


def sft_rows(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """Conversations of the successful episodes, deduplicated, in TRL's conversational SFT format.

    Returns:
        Rows ``{"messages": [...]}`` (plus ``"tools"``, a JSON string, when the episode offered tool schemas).
        Every row ends with an assistant turn, so the last trained tokens are the model's own.
    """
    rows, seen = [], set()
    for ep in episodes:
        if not ep.success:
            continue
        messages = _trim_to_last_assistant(ep.messages)
        if not any(m["role"] == "assistant" for m in messages):
            continue
        key = json.dumps([messages, ep.tools], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        rows.append({"messages": messages, **_tools_column(ep.tools)})
    return rows


def divergence(a: list[Message], b: list[Message]) -> int | None:
    """Index of the first message where two chats differ if both have an assistant turn there, else None.

    None means the pair is unusable for DPO: one chat is a prefix of the other, or they first differ in a
    non-assistant message (so the shared history would not be shared).
    """
    for i, (ma, mb) in enumerate(zip(a, b)):
        if _same(ma, mb):
            continue
        return i if ma["role"] == mb["role"] == "assistant" else None
    return None


def dpo_pairs(episodes: Iterable[Episode], *, max_pairs_per_task: int = 4) -> list[dict[str, Any]]:
    """Preference pairs from successes and failures of the same task.

    Args:
        episodes: Episodes from one or more stores; grouped by ``task_id``.
        max_pairs_per_task: Cap per task, so tasks with many samples do not dominate.

    Returns:
        Rows ``{"prompt": [...shared history...], "chosen": [assistant msg], "rejected": [assistant msg],
        "task_id": str}`` (plus ``"tools"``), deduplicated, ordered by task id then by (success, failure) order.
    """
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        by_task[ep.task_id].append(ep)
    rows = []
    for task_id in sorted(by_task):
        group = by_task[task_id]
        wins = [e for e in group if e.success]
        losses = [e for e in group if not e.success]
        seen: set[str] = set()
        for win, loss in itertools.product(wins, losses):
            if len(seen) >= max_pairs_per_task:
                break
            cut = divergence(win.messages, loss.messages)
            if cut is None:
                continue
            row = {
                "prompt": [dict(m) for m in win.messages[:cut]],
                "chosen": [_assistant(win.messages[cut])],
                "rejected": [_assistant(loss.messages[cut])],
            }
            key = json.dumps(row, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            rows.append({**row, "task_id": task_id, **_tools_column(win.tools)})
    return rows


def to_dataset(rows: list[dict[str, Any]], *, what: str) -> Any:
    """A ``datasets.Dataset`` from rows; an empty list is a one-line error saying how to get data.

    Args:
        rows: Output of :func:`sft_rows` or :func:`dpo_pairs`.
        what: ``"sft"`` or ``"dpo"``, for the error message.
    """
    if not rows:
        need = ("successful episodes" if what == "sft"
                else "a success and a failure of the same task that first differ in an assistant turn")
        raise RecipeError(f"no {what.upper()} training rows: the trajectory store has no {need}; "
                          f"check rollout.store / rollout.policy / tasks.families")
    from datasets import Dataset

    if any("tools" in row for row in rows):  # from_list takes its columns from the first row
        rows = [{**row, "tools": row.get("tools")} for row in rows]
    return Dataset.from_list(rows)


def fit_rows(rows: list[dict[str, Any]], tokenizer: Any) -> list[dict[str, Any]]:
    """SFT or DPO rows as ``tokenizer``'s chat template should see them (``medagentgym.env_client.tokens.fit_tools``).

    A template that renders ``tools`` gets the rows unchanged. One that drops them (SmolLM2's) would train on
    conversations whose model never saw the action schemas, unlike the episodes the rollouts render: each row's
    ``tools`` then move into its system message (``messages`` for SFT, ``prompt`` for DPO) in the same compact
    text form a rollout prompt gets, and the column is dropped.
    """
    from medagentgym.env_client.tokens import fit_tools, template_renders_tools

    if not any(row.get("tools") for row in rows) or template_renders_tools(tokenizer):
        return rows
    out = []
    for row in rows:
        row = dict(row)
        tools = json.loads(row.pop("tools")) if row.get("tools") else None
        key = "messages" if "messages" in row else "prompt"
        row[key], _ = fit_tools(tokenizer, row[key], tools)
        out.append(row)
    return out


def _tools_column(tools: list[dict[str, Any]] | None) -> dict[str, str]:
    """Tool schemas as one JSON string (TRL parses it back): Arrow cannot unify differing nested schemas."""
    return {"tools": json.dumps(tools)} if tools else {}


def _same(a: Message, b: Message) -> bool:
    return a.get("role") == b.get("role") and a.get("content") == b.get("content") \
        and a.get("tool_calls") == b.get("tool_calls")


def _assistant(message: Message) -> Message:
    out = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    return out


def _trim_to_last_assistant(messages: list[Message]) -> list[Message]:
    """Drop trailing observations after the final assistant turn (they would only be context with no target)."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return [dict(m) for m in messages[: last + 1]]


__all__ = ["Episode", "divergence", "dpo_pairs", "episode_from_trajectory", "fit_rows", "load_episodes", "sft_rows",
           "to_dataset"]
