"""Per-episode statistics and the per-step environment metrics GRPO logs.

The rollout hook (:mod:`medagentgym.medcopilot.rollout_func`) turns every finished episode into one :class:`EpisodeStats`;
the reward adapter (:mod:`medagentgym.medcopilot.rewards_adapter`) aggregates a generation batch of them with
:func:`batch_metrics` and hands each number to TRL's ``log_metric`` hook. TRL averages those values over the
logging window and writes them into ``trainer.state.log_history`` next to its own ``reward`` and ``loss``.

Metric names (all in ``[0, 1]`` except where a unit is given):

- ``env/success_rate``: episodes whose graded submission was fully correct.
- ``env/turns_mean``: model turns per episode (count).
- ``env/tool_failure_rate``: tool calls that failed (bad call, sandbox error, non-zero exit) over all tool calls;
  0 when no tool was called.
- ``env/loop_rate``: episodes in which the model repeated an earlier action verbatim.
- ``env/truncation_rate``: episodes ended by a budget (turns or tokens) rather than a graded submission.
- ``env/zero_adv_frac``: groups (one task, ``num_generations`` episodes) whose rewards are all equal, so every
  advantage in the group is 0 and the group teaches nothing.
- ``env/grader_error_rate``: episodes whose reward is missing (None: an infrastructure failure of grading, a
  failed verifier call, an episode that could not be played), not 0; a grader failure the submission caused is
  a wrong answer, reward 0.
- ``env/infra_failure_rate``: episodes that failed for a reason of ours (the sandbox could not go on, an env
  server or the task data failed, grading failed for an infrastructure reason, the episode could not be played):
  reward None. The rollout hook stops the run when their share passes ``rollout.max_infra_failure_share``.
- ``env/agent_error_rate``: episodes ended because an action made the host raise an exception nobody classified
  (``agent_error``: a wrong answer, reward 0, the cause in the logs); a rising rate points at a host bug.
- ``env/sandbox_latency_s``: mean wall time of one sandbox call (seconds).

Example:
    >>> stats = [EpisodeStats(success=True, turns=2, tool_calls=1), EpisodeStats(turns=4, truncated=True)]
    >>> batch_metrics(stats, rewards=[1.0, 0.0], group_size=2)["env/success_rate"]
    0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EpisodeStats", "batch_metrics", "episode_outcome", "zero_advantage_fraction"]

#: Actions that always run in the sandbox (their step duration is sandbox latency).
SANDBOX_ACTIONS = frozenset({"code_execution", "terminal"})
#: Step statuses that count as a failed tool call.
FAILED_STATUSES = frozenset({"error", "parse_error", "forbidden", "agent_error", "fatal"})


@dataclass(frozen=True)
class EpisodeStats:
    """What one finished episode contributes to the step metrics.

    Attributes:
        success: The graded submission was fully correct.
        turns: Model turns taken (count).
        tool_calls: Tool calls the model made (count), the final submit included.
        tool_failures: Tool calls that failed: unparseable, not permitted, sandbox error or non-zero exit (count).
        looped: The model repeated an earlier action of the episode verbatim.
        truncated: A budget (turns, tokens) ended the episode before a graded submission.
        grader_error: The episode's reward is missing (None): infrastructure failure of grading, a failed
            verifier call, or an episode that could not be played.
        infra_failure: The episode failed for an infrastructure reason (reward None; see the module docstring).
        agent_error: An action made the host raise; the episode ended as a wrong answer.
        sandbox_calls: Sandbox executions (count).
        sandbox_seconds: Total wall time of those executions (seconds).
        model_tokens: Tokens the model generated (count, env tokens excluded).
        env_tokens: Environment tokens spliced into the completion (count).
    """

    success: bool = False
    turns: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    looped: bool = False
    truncated: bool = False
    grader_error: bool = False
    infra_failure: bool = False
    agent_error: bool = False
    sandbox_calls: int = 0
    sandbox_seconds: float = 0.0
    model_tokens: int = 0
    env_tokens: int = 0

    def to_dict(self) -> dict[str, float | int | bool]:
        """Plain dict (what travels through TRL's reward kwargs and into JSONL logs)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EpisodeStats:
        """Inverse of :meth:`to_dict`; unknown keys raise so a renamed field cannot vanish silently."""
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown EpisodeStats fields {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**data)


def zero_advantage_fraction(rewards: Sequence[float | None], group_size: int) -> float:
    """Fraction of GRPO groups whose rewards are all equal (every advantage 0).

    Rows are grouped as TRL groups them: ``group_size`` consecutive rows share one task. A None reward (failed
    grader) is left out of its group's comparison, as TRL's NaN-aware baseline leaves it out; a group with fewer
    than two scored rows counts as zero-advantage.

    Args:
        rewards: One reward per row, length a multiple of ``group_size``.
        group_size: ``num_generations``.

    Returns:
        A fraction in ``[0, 1]``.

    Raises:
        ValueError: If the length is not a multiple of ``group_size``.
    """
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}; pass num_generations")
    n_groups = len(rewards) // group_size
    if n_groups == 0:
        return 0.0
    flat = 0
    for g in range(n_groups):
        scored = [r for r in rewards[g * group_size:(g + 1) * group_size] if r is not None and not math.isnan(r)]
        if len(scored) < 2 or max(scored) - min(scored) < 1e-9:
            flat += 1
    return flat / n_groups


@dataclass
class _Totals:
    episodes: int = 0
    counts: dict[str, float] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.counts[key] = self.counts.get(key, 0.0) + float(value)


def batch_metrics(
    stats: Sequence[EpisodeStats], *, rewards: Sequence[float | None], group_size: int,
    group_rewards: Sequence[float | None] | None = None,
) -> dict[str, float]:
    """Aggregate one generation batch of episodes into the ``env/*`` metrics (see the module docstring).

    Args:
        stats: One entry per row (episode), in TRL's row order.
        rewards: The episode rewards, same order (None for a failed grader).
        group_size: ``num_generations``, for ``env/zero_adv_frac``.
        group_rewards: The rewards of whole groups for ``env/zero_adv_frac`` when ``rewards`` holds only this
            process's part of a group (TRL lets a group span processes): every process's rows in rank order.
            Default: ``rewards``.

    Returns:
        Metric name -> value. Empty when ``stats`` is empty.
    """
    if len(stats) != len(rewards):
        raise ValueError(f"{len(stats)} episode stats but {len(rewards)} rewards; the rollout must return one per row")
    if not stats:
        return {}
    t = _Totals(episodes=len(stats))
    for s in stats:
        t.add("success", s.success)
        t.add("turns", s.turns)
        t.add("tool_calls", s.tool_calls)
        t.add("tool_failures", s.tool_failures)
        t.add("looped", s.looped)
        t.add("truncated", s.truncated)
        t.add("grader_error", s.grader_error)
        t.add("infra_failure", s.infra_failure)
        t.add("agent_error", s.agent_error)
        t.add("sandbox_calls", s.sandbox_calls)
        t.add("sandbox_seconds", s.sandbox_seconds)
    n = t.episodes
    c = t.counts
    return {
        "env/success_rate": c["success"] / n,
        "env/turns_mean": c["turns"] / n,
        "env/tool_failure_rate": c["tool_failures"] / c["tool_calls"] if c["tool_calls"] else 0.0,
        "env/loop_rate": c["looped"] / n,
        "env/truncation_rate": c["truncated"] / n,
        "env/zero_adv_frac": zero_advantage_fraction(rewards if group_rewards is None else group_rewards, group_size),
        "env/grader_error_rate": c["grader_error"] / n,
        "env/infra_failure_rate": c["infra_failure"] / n,
        "env/agent_error_rate": c["agent_error"] / n,
        "env/sandbox_latency_s": c["sandbox_seconds"] / c["sandbox_calls"] if c["sandbox_calls"] else 0.0,
    }


def episode_outcome(trajectory: Any, *, model_tokens: int = 0, env_tokens: int = 0) -> tuple[Any, EpisodeStats]:
    """The verdict and the :class:`EpisodeStats` of one finished ``env_client`` trajectory.

    Args:
        trajectory: A ``medagentgym.env_client.trajectory.Trajectory`` whose ``final`` is set.
        model_tokens: Model tokens of the episode (from the token-level rollout).
        env_tokens: Environment tokens spliced into its completion.

    Returns:
        ``(verdict, stats)``: the verdict dict (None when nothing was submitted) and the statistics.
        ``grader_error`` is left False: the reward function decides it (a None reward).

    Raises:
        ValueError: If the episode has not ended (no ``final`` record).
    """
    final = trajectory.final
    if final is None:
        raise ValueError(f"episode {trajectory.header.episode_id} has no final record; it did not end")
    verdict = final.verdict
    steps = trajectory.steps
    sandbox = [s for s in steps if (s.action or {}).get("action") in SANDBOX_ACTIONS]
    stats = EpisodeStats(
        success=bool(verdict and verdict.get("correct")),
        turns=final.turns,
        tool_calls=len(steps),
        tool_failures=sum(s.status in FAILED_STATUSES for s in steps),
        looped=any(s.loop for s in steps) or final.reason == "loop",
        truncated=bool(final.truncated and not final.terminated),
        agent_error=any(s.status == "agent_error" for s in steps),
        sandbox_calls=len(sandbox),
        sandbox_seconds=sum(s.duration_s for s in sandbox),
        model_tokens=model_tokens,
        env_tokens=env_tokens,
    )
    return verdict, stats
