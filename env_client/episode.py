"""One episode: reset on a task instance, step on model text, grade exactly one submitted answer.

``Env`` is gymnasium-like and reused across tasks by one worker (``reset`` closes the previous sandbox
session). Each ``step`` takes the model's raw reply, parses it (Qwen ``<tool_call>`` or the original JSON
format), enforces the family's permitted actions, runs the action in the episode's sandbox session and returns
``StepResult(observation, reward, terminated, truncated, info)``:

* ``reward`` is 0.0 until ``submit_answer``; then the family's oracle grades the one submission and the reward
  is ``medagentgym.rewards.oracle_reward(verdict)``. Intermediate outputs are never graded. A grader that raises is judged
  by :func:`grade_submission`: an infrastructure failure (``InfraError``, ``GraderError``, ``SandboxError``) is
  ``infra=True`` (reward None); any other exception is a wrong answer (reward 0.0), since a policy can cause it.
* Every step is total: an action whose handling raises ends the episode. An infrastructure error
  (:data:`INFRA_ERRORS`: the sandbox cannot go on, our data or grader is broken) is ``fatal`` (reward None);
  any other exception is the action's doing (``agent_error``: a wrong answer, reward 0.0, the cause logged and
  kept in the final verdict's ``error``). Model text never raises.
* ``terminated``: the graded submit, an ``agent_error``, or a fatal sandbox failure. ``truncated``: a budget ran out (turns,
  completion tokens, wall time, or a detected loop with ``end_on_loop``), applied in :meth:`Env._budget`.
* Stepping before ``reset`` or after the end raises :class:`ResetNeeded`; ``close`` is idempotent.

Example:
    >>> env = Env(pool, tasks_root="artifacts/tasks")
    >>> obs, info = env.reset(tasks.make("toy_sql", root="artifacts/tasks").instances("test")[0])
    >>> res = env.step('<tool_call>{"name": "submit_answer", "arguments": {"answer": "7"}}</tool_call>')
    >>> res.terminated, res.reward
    (True, 0.0)
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from medagentgym import tasks
from medagentgym.env_client.actions import (
    ACTION_MODELS,
    CodeExecution,
    Debugging,
    RequestInfo,
    SubmitAnswer,
    Terminal,
    parse_action,
)
from medagentgym.env_client.errors import InvalidAction, ResetNeeded
from medagentgym.env_client.parsing import ParseResult, parse_model_text
from medagentgym.env_client.prompts import episode_tools, initial_messages
from medagentgym.env_client.request_info import Catalogue, InfoError
from medagentgym.env_client.trajectory import FinalRecord, StepRecord, Trajectory, TrajectoryHeader, dump_json
from medagentgym.rewards.oracle import oracle_reward
from medagentgym.sandbox import Limits, SandboxError
from medagentgym.sandbox.grounding import ground
from medagentgym.tasks.base import GradeContext, GraderError, InfraError, Instance, Verdict
from medagentgym.tasks.registry import max_turns as family_max_turns

__all__ = ["AGENT_ERROR", "INFRA_ERRORS", "STAGES", "Env", "EnvConfig", "Observation", "StageProfile", "StepResult",
           "explain_failure", "grade_submission", "profile_stages", "truncate_middle"]

log = logging.getLogger(__name__)
_SQL_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_GOLD_FILES = ("train.jsonl", "test.jsonl", "tasks.jsonl", "manifest.json")


#: The stages of an episode that :func:`profile_stages` times: ``reset.prepare`` (instance checks, mounts),
#: ``reset.open`` (borrowing and opening a sandbox session), ``reset.prompt`` (prompt, tools, trajectory header); per
#: step ``step.parse``, ``step.sandbox`` (a code_execution or terminal call, round trip; ``step.exec`` is the part of
#: it spent running the user's code, as the sandbox measured it), ``step.grade`` (a submit), ``step.other``
#: (request_info, debugging, refusals), ``step.bookkeeping`` (observation, loop check, step record, reward); and
#: ``close.session`` (returning the session: the worker's reset and the wipe of its directories).
STAGES = ("reset.prepare", "reset.open", "reset.prompt", "step.parse", "step.sandbox", "step.exec", "step.grade", "step.other",
          "step.bookkeeping", "close.session")


class StageProfile:
    """Wall and CPU time per episode stage (see :data:`STAGES`), from every thread, while :func:`profile_stages`
    is active. CPU is the calling thread's (``time.thread_time``): the host's own work, not the jail's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.samples: dict[str, list[tuple[float, float]]] = {name: [] for name in STAGES}

    def add(self, stage: str, wall_s: float, cpu_s: float) -> None:
        with self._lock:
            self.samples[stage].append((wall_s, cpu_s))

    def summary(self, episodes: int) -> dict[str, dict[str, float]]:
        """Per stage: ``n``, wall ``p50_ms`` / ``mean_ms`` / ``p99_ms``, ``cpu_mean_ms``, and ``ms_per_episode``
        (the stage's summed wall time over ``episodes``)."""
        out = {}
        for stage, rows in self.samples.items():
            if not rows:
                continue
            walls = sorted(w for w, _ in rows)
            out[stage] = {"n": len(rows), "p50_ms": round(walls[len(walls) // 2] * 1000, 4),
                          "mean_ms": round(sum(walls) / len(walls) * 1000, 4),
                          "p99_ms": round(walls[min(len(walls) - 1, int(len(walls) * 0.99))] * 1000, 4),
                          "cpu_mean_ms": round(sum(c for _, c in rows) / len(rows) * 1000, 4),
                          "ms_per_episode": round(sum(walls) / max(episodes, 1) * 1000, 4)}
        return out


_PROFILE: StageProfile | None = None


@contextlib.contextmanager
def profile_stages() -> Iterator[StageProfile]:
    """Time every episode stage of every ``Env`` of this process while the block runs (for the benchmarks).

    Example:
        >>> with profile_stages() as prof:
        ...     rollout(instances, "oracle", spec)
        >>> prof.summary(episodes=200)["reset.open"]["p50_ms"]
    """
    global _PROFILE
    previous, _PROFILE = _PROFILE, StageProfile()
    try:
        yield _PROFILE
    finally:
        _PROFILE = previous


class _Clock:
    """Marks stage boundaries of one reset/step/close when profiling; costs one global lookup when not."""

    __slots__ = ("cpu", "prof", "wall")

    def __init__(self) -> None:
        self.prof = _PROFILE
        if self.prof is not None:
            self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def lap(self, stage: str) -> None:
        if self.prof is not None:
            wall, cpu = time.perf_counter(), time.thread_time()
            self.prof.add(stage, wall - self.wall, cpu - self.cpu)
            self.wall, self.cpu = wall, cpu


class EnvConfig(BaseModel):
    """Episode rules. Its JSON hash is recorded in every trajectory header."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(15, ge=1, description="Turn cap; the episode uses min(this, the family's max_turns).")
    max_total_tokens: int | None = Field(None, ge=1, description="Cap on summed completion tokens (None = none).")
    episode_wall_s: float = Field(600.0, gt=0, description="Wall-clock seconds from reset before truncation.")
    obs_max_chars: int = Field(4000, ge=200, description="Observation cap; head + tail kept around a marker.")
    loop_window: int = Field(3, ge=2, description="Same action or same error this many times in a row = a loop.")
    end_on_loop: bool = Field(False, description="Truncate the episode when a loop is detected.")
    llm_debugger: dict[str, Any] | None = Field(
        None,
        description="Optional LLM debugger (OFF when None): {'base_url', 'model', 'api_key_env'?, 'max_tokens'?, "
        "'temperature'?, 'timeout_s'?} for any OpenAI-compatible endpoint.",
    )
    limits: dict[str, Any] | None = Field(None, description="Per-call sandbox Limits fields (None = pool defaults).")
    format: Literal["tool_call", "json"] = Field("tool_call", description="Wire format shown in the prompt.")
    prompt: Literal["full", "compact", "compact_last"] = Field(
        "full", description="full: instruction, actions, rules and tool schemas; compact: one line of action "
        "signatures, no tool block (tiny models that learn the format from demonstrations); compact_last: compact "
        "with the question after its context.")

    @field_validator("llm_debugger")
    @classmethod
    def _check_debugger(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            missing = {"base_url", "model"} - set(value)
            unknown = set(value) - _LLM_DEBUGGER_KEYS
            if missing or unknown:
                raise ValueError(f"llm_debugger needs base_url and model (missing {sorted(missing)}); "
                                 f"unknown keys {sorted(unknown)}; allowed: {sorted(_LLM_DEBUGGER_KEYS)}")
        return value

    @field_validator("limits", mode="before")
    @classmethod
    def _check_limits(cls, value: Any) -> dict[str, Any] | None:
        if isinstance(value, Limits):
            return value.to_dict()
        if value is not None:
            Limits.from_dict(value)  # raises naming the bad field
        return value

    def hash(self) -> str:
        """sha256 prefix of the config's JSON."""
        return hashlib.sha256(dump_json(self.model_dump()).encode()).hexdigest()[:16]


class Observation(BaseModel):
    """What the policy sees after ``reset`` or ``step``."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="Observation text (on reset: the first user message).")
    role: Literal["user", "tool"] = Field("user", description="Chat role to send `text` as.")
    messages: list[dict[str, str]] = Field(
        description="Messages to append to the conversation: [system, user] on reset, one message per step."
    )
    tools: list[dict[str, Any]] = Field(default_factory=list, description="Tool schemas (on reset only).")
    kind: str = Field(description="task | requested_info | code_execution | cmd_result | debugging_info | "
                      "parse_error | forbidden | submitted | error | fatal.")
    turn: int = Field(0, description="Turns taken so far.")
    turns_left: int = Field(description="Turns left before truncation.")


class StepResult(NamedTuple):
    """``(observation, reward, terminated, truncated, info)``; unpacks like gymnasium's tuple."""

    observation: Observation
    reward: float | None
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and the tail of ``text`` around a marker ``… [N chars truncated] …``.

    Example:
        >>> truncate_middle("a" * 50 + "b" * 50, 40)
        'aaaaaaaaaaa… [70 chars truncated] …bbbbbbbbbbb'
    """
    if len(text) <= max_chars:
        return text
    marker_len = len(f"… [{len(text)} chars truncated] …")
    keep = max(max_chars - marker_len, 2)
    head, tail = keep - keep // 2, keep // 2
    cut = len(text) - head - tail
    return f"{text[:head]}… [{cut} chars truncated] …{text[len(text) - tail:]}"


class _Outcome(NamedTuple):
    text: str
    kind: str
    status: str  # ok | error | parse_error | forbidden | submitted | fatal
    exec_s: float = 0.0
    error_kind: str | None = None
    verdict: Verdict | None = None
    llm_debugger: bool = False


class Env:
    """A reusable episode runner over a sandbox pool.

    Args:
        pool: A started ``medagentgym.sandbox.Pool``; one session is borrowed per episode.
        tasks_root: The tasks root the families were built under.
        config: Episode rules.
    """

    def __init__(self, pool: Any, *, tasks_root: Path | str, config: EnvConfig | None = None) -> None:
        self.pool = pool
        self.tasks_root = Path(tasks_root)
        self.config = config or EnvConfig()
        self._limits = Limits.from_dict(self.config.limits) if self.config.limits else None
        self._families: dict[str, Any] = {}
        self._catalogues: dict[tuple[tuple[str, str], ...], Catalogue] = {}
        self._session: Any = None
        self._episode: Any = None  # what a family serves for the current episode (see reset)
        self._traj: Trajectory | None = None
        self._done = True
        self.instance: Instance | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def family(self, name: str) -> Any:
        """The family object ``name`` bound to ``tasks_root`` (cached)."""
        if name not in self._families:
            self._families[name] = tasks.make(name, root=self.tasks_root)
        return self._families[name]

    def reset(self, task: Instance, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode on ``task``: open a sandbox session with its data mounts and build the prompt.

        Args:
            task: The instance to solve.
            seed: Recorded in the trajectory (the policy's sampling seed).
            options: ``{"policy": str, "sample_idx": int}`` recorded in the header.

        Returns:
            ``(observation, info)``; ``observation.messages`` = [system, user], ``observation.tools`` = schemas.
        """
        self.close()  # an unfinished previous episode is recorded as closed; its session is returned
        clock = _Clock()
        options = dict(options or {})
        unknown = set(options) - {"policy", "sample_idx"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; allowed: policy, sample_idx")
        fam = self.family(task.family)
        self.instance = task
        self.permitted = frozenset(fam.actions) & frozenset(ACTION_MODELS)
        self.max_turns = min(self.config.max_turns, family_max_turns(task.family, root=self.tasks_root))
        self._mounts = {name: Path(fam.root) / rel for name, rel in task.data.items()}
        missing = [str(p) for p in self._mounts.values() if not p.exists()]
        if missing:
            raise tasks.NotBuilt(f"data of {task.id} is missing ({missing[0]}); build the family with "
                                 f"`medagentgym build --families {task.family} --out {self.tasks_root}`")
        leaking = [name for name, p in self._mounts.items() if p.is_dir() and any((p / f).exists() for f in _GOLD_FILES)]
        if leaking:  # the agent would read the gold answers from its own data mount
            raise tasks.TaskError(f"{task.family}: mount {leaking[0]!r} exposes instance files with gold answers "
                                  f"({', '.join(_GOLD_FILES)}); mount a data subdirectory instead")
        # A family may serve the episode (e.g. a FHIR server with per-episode state): its bridges are the only
        # addresses the jailed code can reach.
        opener = getattr(fam, "open_episode", None)
        self._episode = opener(task) if callable(opener) else None
        bridges = getattr(self._episode, "bridges", None)
        clock.lap("reset.prepare")
        try:
            self._session = self.pool.session(mounts=self._mounts, persistent=True, limits=self._limits,
                                              **({"bridges": bridges} if bridges else {}))
        except BaseException:
            self._close_episode()
            raise
        clock.lap("reset.open")
        self._last_failure: Any = None
        self._signatures: collections.deque = collections.deque(maxlen=self.config.loop_window)
        self._errors: collections.deque = collections.deque(maxlen=self.config.loop_window)
        self._turn, self._tokens, self._prompt_tokens, self._t0 = 0, 0, 0, time.monotonic()
        messages = initial_messages(task, self.permitted, fmt=self.config.format, prompt=self.config.prompt)
        # none in json format or with the compact prompt: the text has them
        tools = episode_tools(self.permitted, self.config.format, prompt=self.config.prompt)
        header = TrajectoryHeader(
            task_id=task.id, family=task.family, family_version=getattr(fam, "version", None),
            category=task.category, split=task.split, policy=options.get("policy"),
            sample_idx=int(options.get("sample_idx", 0)), seed=seed, config_hash=self.config.hash(),
            config=self.config.model_dump(), format=self.config.format,
        )
        self._traj = Trajectory(header=header, prompt=messages, tools=tools)
        self._done = False
        obs = Observation(text=messages[-1]["content"], role="user", messages=messages, tools=tools, kind="task",
                          turn=0, turns_left=self.max_turns)
        info = {"episode_id": header.episode_id, "task_id": task.id, "permitted_actions": sorted(self.permitted),
                "max_turns": self.max_turns, "format": self.config.format}
        clock.lap("reset.prompt")
        return obs, info

    def close(self) -> None:
        """End the episode (recorded as ``closed`` if it was still running) and return the sandbox session."""
        if not self._done and self._traj is not None:
            self._finish(None, terminated=False, truncated=False, reason="closed")
        self._close_session()

    def _close_session(self) -> None:
        if self._session is not None:
            clock = _Clock()
            session, self._session = self._session, None
            session.close()
            clock.lap("close.session")
        self._close_episode()

    def _close_episode(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            episode.close()

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def trajectory(self) -> Trajectory:
        """The record of the current (or last) episode."""
        if self._traj is None:
            raise ResetNeeded("no episode yet: call reset(task) first")
        return self._traj

    @property
    def done(self) -> bool:
        """True before the first reset and after the episode ended."""
        return self._done

    def state(self) -> dict[str, Any]:
        """A JSON summary of the episode (for the HTTP server's ``/state``)."""
        traj = self._traj
        return {
            "episode_id": traj.header.episode_id if traj else None,
            "task_id": traj.header.task_id if traj else None,
            "turn": getattr(self, "_turn", 0), "done": self._done, "total_tokens": getattr(self, "_tokens", 0),
            "final": traj.final.model_dump() if traj and traj.final else None,
        }

    # -- step --------------------------------------------------------------------------------------------
    def step(self, model_text: str | BaseModel | dict[str, Any], *, n_tokens: int | None = None,
             n_prompt_tokens: int | None = None) -> StepResult:
        """Advance one turn on the model's reply.

        Args:
            model_text: The raw assistant text; or a typed action (model or flat dict, e.g. from the HTTP client).
            n_tokens: Completion tokens of this reply (counted against ``max_total_tokens``).
            n_prompt_tokens: Prompt tokens the policy was billed for this turn (recorded for cost reports).

        Returns:
            ``StepResult(observation, reward, terminated, truncated, info)``.

        Raises:
            ResetNeeded: No running episode.
            InvalidAction: A typed action dict that does not validate (model text never raises).
        """
        if self._done or self._traj is None:
            raise ResetNeeded("the episode is over (or never started): call reset(task) before step()")
        t_start = time.monotonic()
        clock = _Clock()
        parsed = self._parse(model_text)
        self._turn += 1
        self._tokens += int(n_tokens or 0)
        self._prompt_tokens += int(n_prompt_tokens or 0)
        clock.lap("step.parse")
        try:
            outcome = self._dispatch(parsed)
        except Exception as exc:  # noqa: BLE001 - see AGENT_ERROR: whatever the action made us raise ends it as 0
            outcome = self._agent_error(parsed, exc)
        if clock.prof is not None:
            name = parsed.action.action if parsed.action is not None else None
            clock.lap("step.grade" if outcome.status == "submitted" else
                      "step.sandbox" if name in ("code_execution", "terminal") else "step.other")
            if outcome.exec_s:
                clock.prof.add("step.exec", outcome.exec_s, 0.0)
        role: Literal["user", "tool"] = "tool" if parsed.format == "tool_call" else "user"
        text = truncate_middle(outcome.text, self.config.obs_max_chars)
        loop = self._loop_check(parsed, outcome)
        duration = time.monotonic() - t_start
        self._traj.steps.append(StepRecord(
            turn=self._turn, raw_text=parsed.raw, action=parsed.action.model_dump() if parsed.action else None,
            format=parsed.format, parse_error=parsed.error, observation=text, observation_role=role,
            status=outcome.status, error_kind=outcome.error_kind, duration_s=round(duration, 6),
            exec_s=round(outcome.exec_s, 6), n_tokens=n_tokens, n_prompt_tokens=n_prompt_tokens, loop=loop,
            llm_debugger=outcome.llm_debugger,
        ))
        reward: float | None = 0.0
        terminated = outcome.status in {"submitted", "fatal", AGENT_ERROR}
        truncated, reason = False, None
        if outcome.status == "submitted":
            reason = "submitted"
            reward = self._finish(outcome.verdict, terminated=True, truncated=False, reason=reason)
        elif outcome.status == AGENT_ERROR:
            reason = f"{AGENT_ERROR}: {outcome.verdict.error if outcome.verdict else ''}"
            reward = self._finish(outcome.verdict, terminated=True, truncated=False, reason=reason)
        elif outcome.status == "fatal":
            reason = f"fatal: {outcome.text}"
            reward = self._finish(None, terminated=True, truncated=False, reason=reason, fatal=True)
        else:
            reason = self._budget(loop)
            if reason:
                truncated = True
                reward = self._finish(None, terminated=False, truncated=True, reason=reason)
        obs = Observation(text=text, role=role, messages=[{"role": role, "content": text}], kind=outcome.kind,
                          turn=self._turn, turns_left=max(self.max_turns - self._turn, 0))
        info = {
            "turn": self._turn, "action": parsed.action.action if parsed.action else None, "format": parsed.format,
            "parse_error": parsed.error, "status": outcome.status, "error_kind": outcome.error_kind,
            "exec_s": outcome.exec_s, "overhead_s": max(duration - outcome.exec_s, 0.0), "duration_s": duration,
            "loop": loop, "llm_debugger": outcome.llm_debugger, "total_tokens": self._tokens, "reason": reason,
            "verdict": outcome.verdict.model_dump() if outcome.verdict else None,
        }
        clock.lap("step.bookkeeping")
        return StepResult(obs, reward, terminated, truncated, info)

    def _parse(self, model_text: Any) -> ParseResult:
        if isinstance(model_text, str):
            return parse_model_text(model_text)
        if isinstance(model_text, dict):
            try:
                model_text = parse_action(model_text)
            except ValidationError as exc:
                raise InvalidAction(f"invalid typed action: {str(exc).splitlines()[0]} ({exc.error_count()} error(s))"
                                    ) from None
        if isinstance(model_text, tuple(ACTION_MODELS.values())):
            args = model_text.model_dump(exclude={"action"}, exclude_none=True)
            raw = "<tool_call>\n" + dump_json({"name": model_text.action, "arguments": args}) + "\n</tool_call>"
            return ParseResult(raw=raw, action=model_text, format="tool_call", name=model_text.action)
        raise InvalidAction(f"step() takes model text or an action, got {type(model_text).__name__}")

    def _budget(self, loop: bool) -> str | None:
        """The one place budgets are applied; returns the truncation reason or None."""
        if loop and self.config.end_on_loop:
            return "loop"
        if self._turn >= self.max_turns:
            return "max_turns"
        if self.config.max_total_tokens is not None and self._tokens >= self.config.max_total_tokens:
            return "max_tokens"
        if time.monotonic() - self._t0 >= self.config.episode_wall_s:
            return "wall_time"
        return None

    def _loop_check(self, parsed: ParseResult, outcome: _Outcome) -> bool:
        signature = None
        if parsed.action is not None:
            fields = parsed.action.model_dump()
            signature = dump_json({k: " ".join(v.split()) if isinstance(v, str) else v for k, v in fields.items()})
        error = outcome.text if outcome.status in {"error", "parse_error", "forbidden"} else None
        self._signatures.append(signature)
        self._errors.append(error)
        n = self.config.loop_window

        def repeated(seq: collections.deque) -> bool:
            return len(seq) == n and seq[0] is not None and all(x == seq[0] for x in seq)

        return repeated(self._signatures) or repeated(self._errors)

    def _finish(self, verdict: Verdict | None, *, terminated: bool, truncated: bool, reason: str,
                fatal: bool = False) -> float | None:
        reward = None if fatal else oracle_reward(verdict)
        self._traj.final = FinalRecord(
            verdict=verdict.model_dump() if verdict else None, reward=reward, terminated=terminated,
            truncated=truncated, reason=reason, turns=self._turn, total_tokens=self._tokens,
            prompt_tokens=self._prompt_tokens, wall_s=round(time.monotonic() - self._t0, 6),
        )
        self._done = True
        return reward

    def _agent_error(self, parsed: ParseResult, exc: Exception) -> _Outcome:
        """The outcome of an action whose handling raised something other than an infrastructure error."""
        if isinstance(exc, INFRA_ERRORS):
            why = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.error("episode %s: infrastructure failure while handling %s: %s", self._traj.header.episode_id,
                      parsed.name, why)
            return _Outcome(f"The environment failed ({type(exc).__name__}); the episode ends.", "fatal", "fatal",
                            error_kind="infra_error")
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
        log.warning("episode %s: the action %s made the host raise %s; the episode ends as a wrong answer",
                    self._traj.header.episode_id, parsed.name, why, exc_info=exc)
        verdict = Verdict(correct=False, score=0.0, reason="the action made the environment fail", error=why,
                          infra=False)
        return _Outcome(f"The action could not be handled ({type(exc).__name__}); the episode ends.",
                        "error", AGENT_ERROR, error_kind="host_error", verdict=verdict)

    # -- actions -----------------------------------------------------------------------------------------
    def _dispatch(self, parsed: ParseResult) -> _Outcome:
        if parsed.action is None:
            return _Outcome(parsed.error or "Invalid action.", "parse_error", "parse_error")
        action = parsed.action
        if action.action not in self.permitted:
            allowed = ", ".join(n for n in ACTION_MODELS if n in self.permitted)
            return _Outcome(f"Action {action.action!r} is not allowed in this task. Allowed actions: {allowed}.",
                            "forbidden", "forbidden")
        try:
            if isinstance(action, SubmitAnswer):
                return self._submit(action)
            if isinstance(action, RequestInfo):
                return self._request_info(action)
            if isinstance(action, CodeExecution):
                return self._execute(action)
            if isinstance(action, Terminal):
                return self._run_result(self._session.run_shell(action.cmd, self._call_limits()), "cmd_result")
            if isinstance(action, Debugging):
                return self._debug(action)
        except SandboxError as exc:
            return _Outcome(f"{type(exc).__name__}: {exc}", "fatal", "fatal", error_kind="sandbox_error")
        raise AssertionError(f"unhandled action {action.action!r}")

    def _call_limits(self) -> Limits | None:
        """Per-call limits, with the wall time capped by what is left of the episode."""
        base = self._limits or getattr(self._session, "limits", None) or Limits()
        left = self.config.episode_wall_s - (time.monotonic() - self._t0)
        if left >= base.wall_s:
            return self._limits
        return Limits(**{**base.to_dict(), "wall_s": max(left, 0.5)})

    def _sql_database(self) -> str | None:
        meta = self.instance.metadata.get("sql_database")
        if meta:
            return f"/data/{meta}"
        for name in sorted(self._mounts):
            if name.endswith(_SQL_SUFFIXES):
                return f"/data/{name}"
        return None

    def _execute(self, action: CodeExecution) -> _Outcome:
        if action.lang == "sql":
            database = self._sql_database()
            if database is None:
                return _Outcome("This task has no SQL database; use lang 'python'.", "code_execution", "error")
            result = self._session.run_sql(action.code, database, self._call_limits())
        else:
            result = self._session.run_python(action.code, self._call_limits())
        return self._run_result(result, "code_execution")

    def _run_result(self, result: Any, kind: str) -> _Outcome:
        kind_value = getattr(result.error_kind, "value", str(result.error_kind))
        if result.ok:
            body = result.stdout if result.stdout.strip() else "(no output; print the values you need)"
            if result.stderr.strip():
                body += f"\nstderr:\n{result.stderr}"
            if result.truncated:
                body += "\n" + ground(result, result.source)
            return _Outcome(f"status: SUCCESS\n{body}", kind, "ok", result.duration_s)
        self._last_failure = result
        parts = ["status: FAILED"]
        if result.stdout.strip():
            parts.append(f"stdout:\n{result.stdout.rstrip()}")
        parts.append(ground(result, result.source))
        return _Outcome("\n".join(parts), kind, "error", result.duration_s, kind_value)

    def _request_info(self, action: RequestInfo) -> _Outcome:
        key = tuple(sorted((name, str(path)) for name, path in self._mounts.items()))
        if key not in self._catalogues:  # built once per distinct set of mounts, reused across episodes
            try:
                self._catalogues[key] = Catalogue(self._mounts)
            except (OSError, sqlite3.Error) as exc:  # our built data, read before the action is looked at
                raise InfraError(f"the task data could not be catalogued: {type(exc).__name__}: {exc}") from exc
        try:
            text = self._catalogues[key].answer(action.info_type, target=action.target, keyterm=action.keyterm)
        except InfoError as exc:
            return _Outcome(f"request_info failed: {exc}", "requested_info", "error")
        return _Outcome(text, "requested_info", "ok")

    def _debug(self, action: Debugging) -> _Outcome:
        text = explain_failure(self._last_failure, code=action.code, error_msg=action.error_msg)
        used = False
        if self.config.llm_debugger and self._last_failure is not None:
            advice, used = llm_advice(self.config.llm_debugger, text, self.instance.question)
            text += "\n\n" + advice
        return _Outcome(text, "debugging_info", "ok", llm_debugger=used)

    def _submit(self, action: SubmitAnswer) -> _Outcome:
        fam = self.family(self.instance.family)
        ctx = GradeContext(workspace=getattr(self._session, "workspace", None), session=self._session,
                           family_dir=Path(fam.root))
        verdict = grade_submission(fam, self.instance, action.answer, ctx)
        return _Outcome("Answer submitted. The episode is over.", "submitted", "submitted", verdict=verdict)


#: Exceptions that are the infrastructure's failure (reward None), not the submission's or the action's: from
#: ``grade()``, and from handling any other action. Every other exception an action or a submission makes the
#: host raise is the agent's (``AGENT_ERROR``, reward 0.0): an RL policy optimised against us must never turn a
#: wrong answer into "no reward" by finding an exception we did not foresee.
INFRA_ERRORS = (InfraError, GraderError, SandboxError)
#: Step status of an action whose handling raised an agent-caused exception: the episode ends as a wrong answer.
AGENT_ERROR = "agent_error"


def grade_submission(family: Any, instance: Instance, submission: str, ctx: GradeContext | None) -> Verdict:
    """``family.grade(...)`` with grading failures judged: whose failure decides the reward.

    Args:
        family: The task family.
        instance: The instance being graded.
        submission: The one submitted answer.
        ctx: The episode's grading context.

    Returns:
        The family's verdict; or, when ``grade`` raised, an error verdict that keeps the exception for the
        logs: ``infra=True`` (reward None) for :data:`INFRA_ERRORS` and a grader that did not return a Verdict
        (our bug), else ``infra=False``: a wrong answer (reward 0.0), because an RL policy can make a grader
        raise on purpose and must not be spared the penalty by doing so.

    Example:
        >>> grade_submission(fam, inst, "1e999", None).score
        0.0
    """
    try:
        verdict = family.grade(instance, submission, ctx)
    except INFRA_ERRORS as exc:
        return Verdict(correct=False, score=0.0, reason="grading failed (infrastructure)",
                       error=f"{type(exc).__name__}: {exc}", infra=True)
    except Exception as exc:  # noqa: BLE001 - whatever the submission made the grader raise is a wrong answer
        return Verdict(correct=False, score=0.0, reason="the submission made the grader fail",
                       error=f"{type(exc).__name__}: {str(exc)[:500]}", infra=False)
    if not isinstance(verdict, Verdict):
        return Verdict(correct=False, score=0.0, reason="grading failed (infrastructure)",
                       error=f"grade() returned {type(verdict).__name__}, not a Verdict", infra=True)
    return verdict


# -- debugging -------------------------------------------------------------------------------------------
_CELL_LINE_RE = re.compile(r'File "<[^"]*>", line (\d+)')
_LLM_DEBUGGER_KEYS = {"base_url", "model", "api_key_env", "max_tokens", "temperature", "timeout_s"}


def _failure_line(result: Any) -> int | None:
    exc = getattr(result, "exception", None) or {}
    if isinstance(exc.get("lineno"), int):
        return exc["lineno"]
    found = _CELL_LINE_RE.findall(getattr(result, "stderr", "") or "")
    return int(found[-1]) if found else None


def explain_failure(result: Any, *, code: str | None = None, error_msg: str | None = None, context: int = 2) -> str:
    """A grounded explanation of the last failed execution: kind, line, source with context, message.

    Args:
        result: The last failed ``ExecResult`` of the episode, or None.
        code: Code the agent says failed (used when the result's own source is unavailable).
        error_msg: The error the agent saw (echoed when there is no recorded failure).
        context: Source lines shown before and after the failing line.
    """
    if result is None:
        said = f" You reported: {error_msg.strip()[:300]}" if error_msg and error_msg.strip() else ""
        return "No failed execution in this episode to explain yet." + said
    kind = getattr(result.error_kind, "value", str(result.error_kind))
    source = result.source or code or ""
    lines = [f"Last failure: {kind} in {result.lang} (exit status {result.exit_code}).", ground(result, source)]
    lineno = _failure_line(result)
    src_lines = source.splitlines()
    if lineno and 1 <= lineno <= len(src_lines):
        lines.append(f"Source around line {lineno}:")
        for n in range(max(1, lineno - context), min(len(src_lines), lineno + context) + 1):
            lines.append(f"{'>' if n == lineno else ' '} {n:4d} | {src_lines[n - 1]}")
    return "\n".join(lines)


def llm_advice(cfg: dict[str, Any], explanation: str, question: str) -> tuple[str, bool]:
    """Ask an OpenAI-compatible endpoint to explain the failure and suggest a fix.

    Returns:
        ``(text, used)``; ``used`` is False (and the text says why) when the endpoint failed.
    """
    try:
        from openai import OpenAI

        client = OpenAI(base_url=cfg["base_url"], api_key=os.environ.get(cfg.get("api_key_env", "OPENAI_API_KEY"),
                        "EMPTY"), timeout=float(cfg.get("timeout_s", 30.0)), max_retries=0)
        reply = client.chat.completions.create(
            model=cfg["model"], max_tokens=int(cfg.get("max_tokens", 512)),
            temperature=float(cfg.get("temperature", 0.0)),
            messages=[
                {"role": "system", "content": "You are a debugging assistant. Explain the error in two or three "
                 "sentences and propose a concrete fix. Do not solve the task itself."},
                {"role": "user", "content": f"Task: {question}\n\n{explanation}"},
            ],
        )
        content = (reply.choices[0].message.content or "").strip()
        return f"LLM debugger advice:\n{content}", True
    except Exception as exc:  # the optional helper must never break an episode
        return f"(LLM debugger unavailable: {type(exc).__name__}: {str(exc)[:200]})", False
