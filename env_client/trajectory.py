"""Trajectories: the typed record of one episode, a crash-safe JSONL store, and chat-message export for SFT.

A :class:`Trajectory` is a header (who, what, which config), the prompt messages and tools, one
:class:`StepRecord` per model turn (raw text always kept), and a :class:`FinalRecord`. A
:class:`TrajectoryStore` appends one JSON line per finished episode with a single ``os.write`` on an
``O_APPEND`` descriptor followed by ``fsync``, so concurrent writers never interleave lines and a crash leaves
at most one torn final line, which readers ignore.

Example:
    >>> store = TrajectoryStore("runs/rollouts/toy_sql.jsonl")
    >>> store.append(env.trajectory)
    >>> done = store.done_keys()          # {(task_id, sample_idx), ...} for resuming
    >>> msgs = to_chat_messages(next(store.read()))
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from medagentgym.env_client.errors import StoreError

__all__ = ["FinalRecord", "StepRecord", "Trajectory", "TrajectoryHeader", "TrajectoryStore", "to_chat_messages"]

SCHEMA_VERSION = 1


class TrajectoryHeader(BaseModel):
    """Who ran what: identifies the episode and everything needed to reproduce or group it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(SCHEMA_VERSION, description="Version of this record layout.")
    episode_id: str = Field(default_factory=lambda: uuid.uuid4().hex, description="Unique id of the episode.")
    task_id: str = Field(description="Instance id, e.g. 'toy_sql/test/0003'.")
    family: str = Field(description="Family registry name.")
    family_version: int | None = Field(None, description="The family's version number when the episode ran.")
    category: str = Field(description="Instance category (template id).")
    split: str = Field(description="'train' or 'test'.")
    policy: str | None = Field(None, description="Policy or model name that produced the assistant turns.")
    sample_idx: int = Field(0, description="Index of this sample among several rollouts of the same task.")
    seed: int | None = Field(None, description="Seed passed to reset (sampling seed of the policy).")
    config_hash: str = Field(description="sha256 prefix of the EnvConfig JSON; same hash = same episode rules.")
    config: dict[str, Any] = Field(default_factory=dict, description="The EnvConfig the episode ran under.")
    format: str = Field("tool_call", description="Wire format the prompt asked for ('tool_call' or 'json').")
    run_key: str | None = Field(None, description="Fingerprint of the run settings that produced it (rollout's "
                                "run_info: policy, weights, sampling, caps, format, seed, family versions).")
    started_at: str = Field(
        default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        description="UTC ISO-8601 start time.",
    )


class StepRecord(BaseModel):
    """One model turn and the environment's answer."""

    model_config = ConfigDict(extra="forbid")

    turn: int = Field(description="1-based turn number.")
    raw_text: str = Field(description="The model's text exactly as generated (kept even when it did not parse).")
    action: dict[str, Any] | None = Field(None, description="The parsed typed action, or None on a parse error.")
    format: str | None = Field(None, description="Detected wire format: 'tool_call', 'json', 'typed', or None.")
    parse_error: str | None = Field(None, description="What was wrong with the reply, when it did not parse.")
    observation: str = Field(description="The observation text returned to the model (after truncation).")
    observation_role: Literal["tool", "user"] = Field("user", description="Chat role the observation is sent as.")
    status: str = Field(description="ok | error | parse_error | forbidden | submitted | agent_error | fatal.")
    error_kind: str | None = Field(None, description="Sandbox error kind of a failed execution, if any.")
    duration_s: float = Field(0.0, description="Wall seconds the env spent on this step (parse + run + grade).")
    exec_s: float = Field(0.0, description="Seconds spent in user code (ExecResult.duration_s).")
    n_tokens: int | None = Field(None, description="Completion tokens of this turn, as reported by the policy.")
    n_prompt_tokens: int | None = Field(None, description="Prompt tokens of this turn, as reported by the policy.")
    loop: bool = Field(False, description="True when this step repeated the same action or error loop_window times.")
    llm_debugger: bool = Field(False, description="True when an LLM debugger's advice is part of the observation.")


class FinalRecord(BaseModel):
    """How the episode ended."""

    model_config = ConfigDict(extra="forbid")

    verdict: dict[str, Any] | None = Field(None, description="The grader's verdict on the submit; None without one.")
    reward: float | None = Field(None, description="Oracle reward; None when grading failed for an infrastructure "
                                 "reason (never a silent 0); 0 when the submission made the grader fail.")
    terminated: bool = Field(description="True after the graded submit or a fatal error.")
    truncated: bool = Field(description="True when a budget ran out (turns, tokens, wall time, loop).")
    reason: str = Field(description="submitted | max_turns | max_tokens | wall_time | loop | fatal: ... | closed.")
    turns: int = Field(description="Number of model turns taken.")
    total_tokens: int = Field(0, description="Sum of the reported completion tokens.")
    prompt_tokens: int = Field(0, description="Sum of the reported prompt tokens (what an API bills as input).")
    wall_s: float = Field(description="Seconds from reset to the end.")


class Trajectory(BaseModel):
    """The full record of one episode."""

    model_config = ConfigDict(extra="forbid")

    header: TrajectoryHeader = Field(description="Identity of the episode.")
    prompt: list[dict[str, str]] = Field(description="Initial chat messages: system, then the first user message.")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="Tool schemas offered to the model.")
    steps: list[StepRecord] = Field(default_factory=list, description="One record per model turn.")
    final: FinalRecord | None = Field(None, description="Set when the episode has ended.")

    @property
    def key(self) -> tuple[str, int]:
        """``(task_id, sample_idx)``: the resume key."""
        return (self.header.task_id, self.header.sample_idx)


def to_chat_messages(traj: Trajectory, *, include_final_observation: bool = False) -> list[dict[str, str]]:
    """Chat messages for SFT: the prompt, then each assistant reply (raw text) and its observation.

    Args:
        traj: A trajectory.
        include_final_observation: Keep the environment's answer to the last turn (e.g. "answer submitted").

    Returns:
        ``[{"role": ..., "content": ...}, ...]``; observations use the role recorded per step ("tool" after a
        tool call, "user" otherwise).
    """
    messages = [dict(m) for m in traj.prompt]
    for i, step in enumerate(traj.steps):
        messages.append({"role": "assistant", "content": step.raw_text})
        if i < len(traj.steps) - 1 or include_final_observation:
            messages.append({"role": step.observation_role, "content": step.observation})
    return messages


class TrajectoryStore:
    """Append-only JSONL file of finished trajectories, one line per episode.

    Args:
        path: The JSONL file (parents are created).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, traj: Trajectory) -> None:
        """Append one finished trajectory atomically (one write of a full line, then fsync).

        Raises:
            StoreError: The trajectory has not ended (``final`` is None).
        """
        if traj.final is None:
            raise StoreError(f"trajectory {traj.header.episode_id} has not ended; close or finish it before storing")
        line = (traj.model_dump_json() + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise StoreError(f"{self.path}: short write ({written} of {len(line)} bytes); disk full?")
            os.fsync(fd)
        finally:
            os.close(fd)

    def extend(self, trajs: Iterable[Trajectory]) -> int:
        """Append several trajectories; returns how many."""
        n = 0
        for traj in trajs:
            self.append(traj)
            n += 1
        return n

    def read(self) -> Iterator[Trajectory]:
        """Yield stored trajectories in file order; a torn (unterminated) final line is ignored.

        Raises:
            StoreError: A complete line that is not a valid trajectory (names the line).
        """
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        # The last element is b"" after a complete final line, or the torn tail of an interrupted write.
        for lineno, line in enumerate(lines[:-1], 1):
            if not line.strip():
                continue
            try:
                yield Trajectory.model_validate_json(line)
            except ValueError as exc:
                raise StoreError(f"{self.path}:{lineno}: not a trajectory: {str(exc).splitlines()[0]}") from exc

    def done_keys(self) -> set[tuple[str, int]]:
        """``{(task_id, sample_idx)}`` of the stored episodes (for resuming an interrupted run)."""
        return {traj.key for traj in self.read()}

    def __len__(self) -> int:
        return sum(1 for _ in self.read())


def dump_json(value: Any) -> str:
    """Compact, key-sorted JSON (used for config hashes and normalised action keys)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
