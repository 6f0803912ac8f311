"""Evaluation metrics over finished trajectories: success, Pass@K, Best@K, error taxonomy, actions, cost.

:func:`evaluate` turns the trajectories of one run (``k`` samples per task) into an :class:`EvalReport`;
:func:`write_report` writes ``report.md``, ``report.json`` and PNG plots; :func:`leaderboard` merges several
``report.json`` files. Used by ``medagentgym eval`` and ``medagentgym leaderboard``.

Metrics:

- **Success**: share of episodes whose verdict is correct, overall, per family and per ``family/category``.
- **Pass@K** (Chen et al., 2021): for a task with ``n`` samples of which ``c`` are correct, the unbiased
  estimate of "at least one of k random samples is correct" is ``1 - C(n-c, k) / C(n, k)``, averaged over
  tasks, for ``k = 1..K`` (``K`` = the smallest ``n`` of any task).
- **Best@K**: pick the sample a scorer (e.g. the learned verifier) rates highest among k; the share of tasks
  where that pick is correct. Estimated without bias over all k-subsets: with the n samples ranked by score
  (ties broken by ``sample_idx``), the sample at rank ``i`` (0-based) is the pick of a random k-subset with
  probability ``C(n-1-i, k-1) / C(n, k)``. N/A (None) when no scores are given.
- **Error taxonomy** of every failed episode, first matching rule wins: ``grader_error`` (grading failed for an
  infrastructure reason, reward None; a failure the submission caused is a ``wrong_answer``),
  ``loop`` (ended for looping, or a loop-flagged step), ``wrong_answer`` (submitted, graded wrong), then by the
  last failed step: ``syntax_error``, ``io_error`` (file/table not found, permission), ``runtime_error`` (any
  other execution failure: exception, SQL error, timeout, memory, sandbox), ``invalid_action`` (the reply did
  not parse or named a forbidden action); then ``truncated`` (a budget ran out) and ``no_submission``.
- **Constant floor** per family (:func:`constant_floor`): the best score one constant answer earns over the
  whole split under the family's own grader, reported with its bound (10 %, or 50 % for yes/no families).
- **Actions**: counts of actions taken (``code_execution:python`` and ``code_execution:sql`` apart,
  ``invalid`` for replies that did not parse); **cost**: turns, prompt and completion tokens, wall seconds.
- **Infrastructure failures** (the policy's endpoint failed, the sandbox died): episodes that produced no
  trajectory. They count as failures in every success rate (class ``infra_error``), are reported apart, and
  are retried by a rerun; a run with any of them exits non-zero.
- **Intervals and standard errors**: every success rate has a 95 % interval that is clustered over tasks and
  never collapses: Wilson's score interval (statsmodels) over the TASKS, each task counting with its share of
  correct samples (with one sample per task, Wilson over episodes; with K > 1 samples per task, the K samples of
  a task are not independent, so n is the number of tasks: 70 tasks all solved give [94.8 %, 100 %], never
  [100 %, 100 %]); its standard error is the standard error of the mean of the per-task shares (scipy's
  ``sem``, clustered over tasks; 0 when every task agrees, which is why the interval is Wilson's, not ±1.96 SE).
- **Macro average** over families (each family weighs the same) beside the micro one (each episode weighs the
  same), with its standard error (the per-family standard errors combined as independent estimates).

Example:
    >>> report = evaluate(result.trajectories, policy="oracle")
    >>> report.success_rate, report.pass_at_k["1"], report.error_shares
    >>> write_report(report, Path("runs/eval/oracle"))   # report.md, report.json, *.png
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from medagentgym.env_client.errors import EnvClientError
from medagentgym.tasks import SUITES
from medagentgym.tasks._files import FileFormatError, load_json
from medagentgym.rewards.oracle import infra_failure
from medagentgym.tasks.floors import FLOOR_BOUND, constant_floor

__all__ = ["ERROR_CLASSES", "FLOOR_BOUND", "ID_FAMILIES", "OOD_FAMILIES", "EvalError", "EvalReport", "best_at_k",
           "bootstrap_interval", "classify_failure", "code_version", "constant_floor", "evaluate", "label_base_rate",
           "library_versions",
           "leaderboard", "leaderboard_plots", "load_reports", "md_cell", "pass_at_k", "render_markdown",
           "success_interval", "task_interval", "task_set_hash", "task_standard_error", "wilson_interval",
           "write_plots", "write_report"]

#: The paper's in-distribution families (``--suite id``) and the held-out ones (``--suite ood``): ``tasks.SUITES``.
ID_FAMILIES = SUITES["id"]
OOD_FAMILIES = SUITES["ood"]

#: Failure classes, in the order the taxonomy tests them.
ERROR_CLASSES = ("infra_error", "grader_error", "loop", "wrong_answer", "syntax_error", "io_error",
                 "runtime_error", "invalid_action", "truncated", "no_submission")

_IO_RE = re.compile(r"FileNotFoundError|PermissionError|IsADirectoryError|NotADirectoryError|No such file|"
                    r"no such table|unable to open database|EmptyDataError|\bOSError\b|UnicodeDecodeError",
                    re.IGNORECASE)
_FAILED_STATUSES = {"error", "fatal", "parse_error", "forbidden", "agent_error"}


class EvalError(EnvClientError, ValueError):
    """Bad evaluation input: no trajectories, unreadable report files, scores for unknown episodes."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k of one task: ``1 - C(n-c, k) / C(n, k)``.

    Args:
        n: Samples drawn for the task.
        c: Correct samples among them.
        k: Samples allowed (``1 <= k <= n``).

    Raises:
        EvalError: ``k`` outside ``1..n`` or ``c`` outside ``0..n``.

    Example:
        >>> pass_at_k(4, 1, 2)
        0.5
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise EvalError(f"pass_at_k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def best_at_k(correct: list[bool], scores: list[float], k: int) -> float:
    """Unbiased Best@k of one task: the chance that the top-scored of k random samples is correct.

    Args:
        correct: Per sample, whether it was correct (in ``sample_idx`` order).
        scores: Per sample, the scorer's rating (higher = better); ties go to the lower ``sample_idx``.
        k: Samples allowed (``1 <= k <= n``).

    Example:
        >>> best_at_k([False, True, False], [0.1, 0.9, 0.5], 2)   # the correct one is picked if drawn
        0.6666666666666666
    """
    n = len(correct)
    if len(scores) != n or not 1 <= k <= n:
        raise EvalError(f"best_at_k needs len(scores) == len(correct) and 1 <= k <= n, got n={n}, k={k}")
    ranked = sorted(range(n), key=lambda i: (-scores[i], i))
    total = math.comb(n, k)
    return sum(math.comb(n - 1 - rank, k - 1) for rank, i in enumerate(ranked) if correct[i]) / total


def wilson_interval(successes: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion (statsmodels' ``proportion_confint``); ``(0, 1)`` when
    ``n`` is 0. ``successes`` may be fractional (a sum of per-task shares, see :func:`task_interval`).

    Example:
        >>> [round(x, 3) for x in wilson_interval(8, 10)]
        [0.49, 0.943]
    """
    from statsmodels.stats.proportion import proportion_confint

    if n <= 0:
        return (0.0, 1.0)
    lo, hi = proportion_confint(successes, n, alpha=1 - level, method="wilson")
    return (round(max(0.0, float(lo)), 6), round(min(1.0, float(hi)), 6))


def _shares(groups: list[list[bool]]) -> list[float]:
    return [sum(g) / len(g) for g in groups if g]


def task_interval(groups: list[list[bool]], level: float = 0.95) -> tuple[float, float]:
    """Wilson's interval over tasks: each task (a group of samples) counts once, with its share of successes.

    With one sample per task this is Wilson over episodes; with K > 1 it is clustered over tasks (n = tasks), so
    it never collapses when every task agrees.

    Example:
        >>> task_interval([[True, True]] * 70)[0] < 0.95   # 70 tasks all solved twice: [94.8 %, 100 %]
        True
    """
    shares = _shares(groups)
    return wilson_interval(sum(shares), len(shares), level)


def task_standard_error(groups: list[list[bool]]) -> float | None:
    """Standard error of the success rate clustered over tasks: ``scipy.stats.sem`` of the per-task shares;
    None with fewer than two tasks."""
    from scipy.stats import sem

    shares = _shares(groups)
    return round(float(sem(shares)), 6) if len(shares) >= 2 else None


def bootstrap_interval(groups: list[list[bool]], *, n_boot: int = 2000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Cluster bootstrap (scipy's ``bootstrap``, percentile) of the success rate, resampling whole tasks.

    Kept for comparison with :func:`task_interval`, which the reports use: a bootstrap collapses to a point when
    every task agrees (all resamples are equal), Wilson does not.
    """
    import numpy as np
    from scipy.stats import bootstrap

    shares = _shares(groups)
    if len(shares) < 2:
        return (0.0, 1.0)
    if len(set(shares)) == 1:
        return (shares[0], shares[0])
    res = bootstrap((np.asarray(shares),), np.mean, n_resamples=n_boot, confidence_level=level,
                    method="percentile", random_state=np.random.default_rng(seed))
    return (round(float(res.confidence_interval.low), 6), round(float(res.confidence_interval.high), 6))


def success_interval(groups: list[list[bool]], seed: int = 0) -> tuple[list[float], str]:
    """The 95 % interval of a success rate over task groups, and the method used (see the module docstring):
    ``wilson`` (one sample per task) or ``wilson-tasks`` (K > 1, clustered over tasks). ``seed`` is unused
    (kept for callers of the former bootstrap)."""
    lo, hi = task_interval(groups)
    return [lo, hi], ("wilson" if all(len(g) <= 1 for g in groups) else "wilson-tasks")


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _verdict(traj: Any) -> dict[str, Any] | None:
    return _get(traj.final, "verdict")


def _success(traj: Any) -> bool:
    verdict = _verdict(traj)
    return bool(verdict and verdict.get("correct") and not verdict.get("error"))


def classify_failure(traj: Any) -> str:
    """The error class (one of :data:`ERROR_CLASSES`) of a failed trajectory; see the module docstring."""
    final, steps = traj.final, list(traj.steps)
    verdict = _verdict(traj)
    if infra_failure(verdict):
        return "grader_error"
    if (final is not None and final.reason == "loop") or any(s.loop for s in steps):
        return "loop"
    if verdict is not None:
        return "wrong_answer"
    failed = [s for s in steps if s.status in _FAILED_STATUSES]
    if failed:
        last = failed[-1]
        if last.status in ("parse_error", "forbidden"):
            return "invalid_action"
        if last.error_kind == "syntax_error":
            return "syntax_error"
        if _IO_RE.search(last.observation or ""):
            return "io_error"
        return "runtime_error"
    if final is not None and final.truncated:
        return "truncated"
    return "no_submission"


def _action_name(step: Any) -> str:
    action = step.action
    if not action:
        return "invalid"
    name = action.get("action", "invalid")
    return f"{name}:{action.get('lang', 'python')}" if name == "code_execution" else name


@dataclass
class EvalReport:
    """What :func:`evaluate` computes; ``to_dict`` is the ``report.json`` layout.

    Attributes:
        policy: Policy name.
        episodes: Episodes attempted (finished ones plus infrastructure failures); ``tasks``: distinct task
            ids; ``k``: the largest K of Pass@K.
        success_rate: Share of correct episodes among all attempted (micro average); ``ci95``: its 95 %
            interval (``ci_method``: ``wilson``, or ``wilson-tasks`` when K > 1); ``se``: its standard error,
            clustered over tasks.
        macro_success_rate: The mean of the per-family success rates; ``macro_se``: its standard error.
        per_family: ``family -> {n, tasks, success_rate, ci95, ci_method, se, pass_at_k (at K), errors,
            infra_failures, base_rate?, floor?}``.
        per_category: ``family/category -> {n, success_rate}``.
        pass_at_k: ``str(k) -> unbiased Pass@k`` for ``k = 1..K``.
        best_at_k: ``str(k) -> Best@k``, or None without scores.
        grader_errors: Episodes whose grading failed for an infrastructure reason (reward None; counted, never
            scored 0 silently). A failure the submission caused is a wrong answer.
        infra_failures: Episodes that produced no trajectory (endpoint or sandbox failure), counted as failed.
        errors: ``class -> count`` over failed episodes; ``error_shares``: the same as shares of failures.
        actions: ``action -> count`` over all steps; ``action_shares``: as shares.
        mean_turns, mean_tokens, total_tokens, prompt_tokens, mean_prompt_tokens, mean_wall_s, total_wall_s:
            Cost (tokens as the policy reported them; completion and prompt apart).
        meta: Run facts and provenance (split, suite, policy settings, caps, commit, date, task-set hash).
    """

    policy: str
    episodes: int
    tasks: int
    k: int
    success_rate: float
    per_family: dict[str, dict[str, Any]]
    per_category: dict[str, dict[str, Any]]
    pass_at_k: dict[str, float]
    best_at_k: dict[str, float] | None
    grader_errors: int
    errors: dict[str, int]
    error_shares: dict[str, float]
    actions: dict[str, int]
    action_shares: dict[str, float]
    mean_turns: float
    mean_tokens: float
    total_tokens: int
    mean_wall_s: float
    total_wall_s: float
    meta: dict[str, Any] = field(default_factory=dict)
    infra_failures: int = 0
    ci95: list[float] = field(default_factory=lambda: [0.0, 1.0])
    ci_method: str = "wilson"
    prompt_tokens: int = 0
    mean_prompt_tokens: float = 0.0
    se: float | None = None
    macro_success_rate: float = 0.0
    macro_se: float | None = None

    @property
    def all_failed(self) -> bool:
        """Every episode failed to run (an endpoint that never answered): no success rate was measured."""
        return self.episodes > 0 and self.infra_failures == self.episodes

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict (``report.json``)."""
        return asdict(self)


@dataclass(frozen=True)
class _Sample:
    """One attempted episode: a finished trajectory, or an infrastructure failure (``traj`` None)."""

    task_id: str
    family: str
    category: str
    sample_idx: int
    success: bool
    traj: Any = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.sample_idx)


def _groups(samples: list[_Sample]) -> dict[str, list[_Sample]]:
    by_task: dict[str, list[_Sample]] = defaultdict(list)
    for x in samples:
        by_task[x.task_id].append(x)
    return {tid: sorted(xs, key=lambda x: x.sample_idx) for tid, xs in by_task.items()}


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 6) if values else 0.0


def _error_class(x: _Sample) -> str:
    return "infra_error" if x.traj is None else classify_failure(x.traj)


def evaluate(trajectories: Iterable[Any], *, policy: str | None = None,
             scores: Mapping[tuple[str, int], float] | None = None,
             base_rates: Mapping[str, float] | None = None, floors: Mapping[str, Mapping[str, Any]] | None = None,
             meta: Mapping[str, Any] | None = None, failures: Iterable[Mapping[str, Any]] = ()) -> EvalReport:
    """Compute every metric over finished trajectories and the episodes that failed to run.

    Args:
        trajectories: ``medagentgym.env_client.Trajectory`` objects (k samples per task; k may differ per task).
        policy: Name recorded in the report (default: the first trajectory's ``header.policy``).
        scores: ``(task_id, sample_idx) -> score`` of a scorer (e.g. the learned verifier) for Best@K; every
            finished episode must have one. None: Best@K is reported as N/A.
        base_rates: ``family -> label base rate`` to show beside each family's success.
        floors: ``family -> constant_floor(...)`` (the best constant answer over the whole split), shown beside
            each family's success with its bound.
        meta: Run facts copied into the report.
        failures: Episodes that produced no trajectory (``RolloutSummary.failures``: ``task_id``, ``family``,
            ``category``, ``sample_idx``, ``error``): each counts as a failed episode of its task.

    Returns:
        The :class:`EvalReport`.

    Raises:
        EvalError: Nothing to evaluate, an unfinished trajectory, or ``scores`` missing an episode.
    """
    trajs = list(trajectories)
    failures = list(failures)
    if not trajs and not failures:
        raise EvalError("no trajectories to evaluate; run the rollout first (or check --families/--limit)")
    if any(t.final is None for t in trajs):
        raise EvalError("an unfinished trajectory (final is None) was passed; evaluate finished episodes only")
    samples = [_Sample(t.header.task_id, t.header.family, t.header.category, t.header.sample_idx, _success(t), t)
               for t in trajs]
    done = {x.key for x in samples}
    samples += [_Sample(str(f["task_id"]), str(f["family"]), str(f.get("category", "")), int(f["sample_idx"]), False)
                for f in failures if (str(f["task_id"]), int(f["sample_idx"])) not in done]
    groups = _groups(samples)
    flags = {tid: [x.success for x in xs] for tid, xs in groups.items()}
    big_k = min(len(xs) for xs in groups.values())
    passk = {str(k): round(_mean([pass_at_k(len(f), sum(f), k) for f in flags.values()]), 6)
             for k in range(1, big_k + 1)}
    bestk = None
    if scores is not None:
        missing = [t.key for t in trajs if t.key not in scores]
        if missing:
            raise EvalError(f"scores lack {len(missing)} episode(s), e.g. {missing[0]}; score every episode")
        rated = {tid: [scores[x.key] if x.traj is not None else -math.inf for x in xs] for tid, xs in groups.items()}
        bestk = {str(k): round(_mean([best_at_k(flags[tid], rated[tid], k) for tid in groups]), 6)
                 for k in range(1, big_k + 1)}
    per_family: dict[str, dict[str, Any]] = {}
    for fam in sorted({x.family for x in samples}):
        fam_tasks = [tid for tid, xs in groups.items() if xs[0].family == fam]
        fx = [x for tid in fam_tasks for x in groups[tid]]
        ci, method = success_interval([flags[tid] for tid in fam_tasks])
        row: dict[str, Any] = {"n": len(fx), "tasks": len(fam_tasks),
                               "success_rate": _mean([float(x.success) for x in fx]), "ci95": ci,
                               "ci_method": method, "se": task_standard_error([flags[tid] for tid in fam_tasks]),
                               "pass_at_k": _mean([pass_at_k(len(flags[t]), sum(flags[t]), big_k) for t in fam_tasks]),
                               "infra_failures": sum(x.traj is None for x in fx)}
        fam_errors = Counter(_error_class(x) for x in fx if not x.success)
        row["errors"] = {c: fam_errors[c] for c in ERROR_CLASSES if fam_errors[c]}
        if base_rates and fam in base_rates:
            row["base_rate"] = base_rates[fam]
        if floors and fam in floors:
            row["floor"] = dict(floors[fam])
        per_family[fam] = row
    cats: dict[str, list[bool]] = defaultdict(list)
    for x in samples:
        cats[f"{x.family}/{x.category}"].append(x.success)
    per_category = {c: {"n": len(v), "success_rate": _mean([float(b) for b in v])} for c, v in sorted(cats.items())}
    errors = Counter(_error_class(x) for x in samples if not x.success)
    failed = sum(errors.values())
    actions = Counter(_action_name(s) for t in trajs for s in t.steps)
    n_steps = sum(actions.values())
    ci, method = success_interval(list(flags.values()))
    prompt = [getattr(t.final, "prompt_tokens", 0) or 0 for t in trajs]
    fam_se = [row["se"] for row in per_family.values()]
    macro_se = (round(math.sqrt(sum(v * v for v in fam_se)) / len(fam_se), 6)
                if fam_se and all(v is not None for v in fam_se) else None)
    return EvalReport(
        policy=policy or (trajs[0].header.policy if trajs else None) or "unknown", episodes=len(samples),
        tasks=len(groups), k=big_k, success_rate=_mean([float(x.success) for x in samples]),
        per_family=per_family, per_category=per_category, pass_at_k=passk, best_at_k=bestk,
        grader_errors=sum(1 for t in trajs if infra_failure(_verdict(t))),
        errors={c: errors[c] for c in ERROR_CLASSES if errors[c]},
        error_shares={c: round(errors[c] / failed, 6) for c in ERROR_CLASSES if errors[c]},
        actions=dict(actions.most_common()),
        action_shares={a: round(n / n_steps, 6) for a, n in actions.most_common()},
        mean_turns=_mean([len(t.steps) for t in trajs]), mean_tokens=_mean([t.final.total_tokens for t in trajs]),
        total_tokens=sum(t.final.total_tokens for t in trajs), mean_wall_s=_mean([t.final.wall_s for t in trajs]),
        total_wall_s=round(sum(t.final.wall_s for t in trajs), 4), meta=dict(meta or {}),
        infra_failures=sum(x.traj is None for x in samples), ci95=ci, ci_method=method,
        prompt_tokens=sum(prompt), mean_prompt_tokens=_mean([float(v) for v in prompt]),
        se=task_standard_error(list(flags.values())),
        macro_success_rate=_mean([row["success_rate"] for row in per_family.values()]), macro_se=macro_se,
    )


# ------------------------------------------------------------------------------------------ writing


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _pct(x: float | None) -> str:
    return "N/A" if x is None else f"{x:.1%}"


def _se(x: float | None) -> str:
    return "N/A" if x is None else f"{x:.1%}"


def md_cell(value: Any, *, code: bool = False) -> str:
    """``value`` as one Markdown table cell: a pipe is escaped, a line break shown as ``\\n``, so an answer or
    a policy name with either keeps the table's shape; ``code`` wraps it in a code span (backticks become ').

    Example:
        >>> print(md_cell("a|b\\nc"))
        a\\|b\\nc
    """
    text = str(value).replace("\\", "\\\\").replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\n", "\\n").replace("|", "\\|")
    return f"`{text.replace('`', chr(39))}`" if code else text


def _main_error(errors: dict[str, int]) -> str:
    return f"{max(errors, key=errors.get)} ({max(errors.values())})" if errors else "–"


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.1%}, {ci[1]:.1%}]" if ci else "–"


#: Provenance keys of ``meta`` shown first, in this order (the rest follow sorted).
_PROVENANCE = ("policy", "served_model", "split", "suite", "size", "format", "env", "sandbox", "commit", "date",
               "wall_s", "versions", "task_set")


def _meta_value(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)


def _floor_cell(floor: Mapping[str, Any] | None) -> str:
    if not floor:
        return "N/A"
    if floor.get("constant"):
        return f"{_pct(floor['floor'])} ({md_cell(str(floor['constant'])[:24], code=True)})"
    return _pct(floor["floor"])


def _bound_cell(floor: Mapping[str, Any] | None) -> str:
    if not floor:
        return "–"
    what = "vs 50 % (binary)" if floor.get("binary") else f"≤ {floor['bound']:.0%}"
    return f"**exceeds** {what}" if floor.get("exceeds") else what


def _headline(r: EvalReport) -> str:
    if r.all_failed:
        return (f"**All {r.episodes} episodes failed to run** (no success rate was measured: the policy's "
                "endpoint or the sandbox failed every time; rerun with the same --out to retry them)")
    se = f" ± {_se(r.se)} SE" if r.se is not None else ""
    return (f"**Success rate: {_pct(r.success_rate)}**{se} (95 % CI {_ci(r.ci95)}, {r.ci_method}), "
            f"macro over {len(r.per_family)} families: {_pct(r.macro_success_rate)}"
            f"{f' ± {_se(r.macro_se)} SE' if r.macro_se is not None else ''}, "
            f"Pass@{r.k}: {_pct(r.pass_at_k[str(r.k)])}, "
            f"Best@{r.k}: {_pct(r.best_at_k[str(r.k)]) if r.best_at_k else 'N/A (no scores)'}, "
            f"grader errors: {r.grader_errors}")


def render_markdown(report: EvalReport) -> str:
    """The ``report.md`` text: headline with interval, standard error and macro average, per family (interval,
    SE, floors), Pass@K/Best@K, errors, actions, cost, per category and the run's provenance. Every free-text
    cell goes through :func:`md_cell`."""
    r = report
    infra = (f", **{r.infra_failures} episode(s) failed to run** (counted as failures; rerun to retry them)"
             if r.infra_failures else "")
    lines = [f"# Evaluation: {md_cell(r.policy)}", ""]
    lines += [f"> **Warning: {md_cell(w)}**\n" for w in r.meta.get("warnings", ())]
    lines += [f"{r.episodes} episodes over {r.tasks} tasks (K = {r.k}){infra}", "", _headline(r), "",
             "## Per family", "",
             "| family | episodes | tasks | success | 95 % CI | SE | pass@K | base rate | constant floor | "
             "floor bound | infra failures | main error |",
             "|---|---:|---:|---:|---|---:|---:|---:|---|---|---:|---|"]
    for fam, row in r.per_family.items():
        lines.append(f"| {md_cell(fam)} | {row['n']} | {row.get('tasks', '')} | {_pct(row['success_rate'])} | "
                     f"{_ci(row.get('ci95'))} | {_se(row.get('se'))} | "
                     f"{_pct(row['pass_at_k'])} | {_pct(row.get('base_rate'))} | {_floor_cell(row.get('floor'))} | "
                     f"{_bound_cell(row.get('floor'))} | {row.get('infra_failures', 0)} | "
                     f"{_main_error(row.get('errors') or {})} |")
    lines.append(f"| **micro (all episodes)** | {r.episodes} | {r.tasks} | {_pct(r.success_rate)} | {_ci(r.ci95)} | "
                 f"{_se(r.se)} | {_pct(r.pass_at_k[str(r.k)])} | | | | {r.infra_failures} | "
                 f"{_main_error(r.errors)} |")
    lines.append(f"| **macro (mean of families)** | | | {_pct(r.macro_success_rate)} | | {_se(r.macro_se)} | | | | | | |")
    lines += ["", (f"95 % CI: {'Wilson over tasks, each task counting with its share of the K samples (n = tasks)' if r.ci_method == 'wilson-tasks' else 'Wilson over episodes (one per task)'}; "
                   "SE: standard error clustered over tasks. "
                   "Base rate: share of the most common gold answer over the whole split. Constant floor: the best "
                   "score one constant answer (a common gold answer, `[-1]`, `0`, `1`, yes/no, ...) earns over the whole "
                   "split under the family's own grader, with that constant; bound: at most 10 %, or 50 % for binary "
                   "(yes/no) families. Families whose answers are programs count the most common reference program "
                   "instead of running constants."),
              "", "## Pass@K and Best@K", "", "| K | Pass@K | Best@K |", "|---:|---:|---:|"]
    for k, v in r.pass_at_k.items():
        lines.append(f"| {k} | {_pct(v)} | {_pct(r.best_at_k[k]) if r.best_at_k else 'N/A'} |")
    lines += ["", "## Errors of failed episodes", ""]
    if r.errors:
        lines += ["| class | count | share |", "|---|---:|---:|"]
        lines += [f"| {c} | {n} | {_pct(r.error_shares[c])} |" for c, n in r.errors.items()]
    else:
        lines.append("No failed episodes.")
    lines += ["", "## Actions taken", "", "| action | count | share |", "|---|---:|---:|"]
    lines += [f"| {md_cell(a)} | {n} | {_pct(r.action_shares[a])} |" for a, n in r.actions.items()]
    lines += ["", "## Cost", "", f"- mean turns per episode: {r.mean_turns:.2f}",
              f"- prompt tokens: {r.prompt_tokens} total, {r.mean_prompt_tokens:.1f} per episode",
              f"- completion tokens: {r.total_tokens} total, {r.mean_tokens:.1f} per episode",
              f"- wall time: {r.total_wall_s:.2f} s of episodes, {r.mean_wall_s:.3f} s per episode", "",
              "## Per category", "", "| family/category | episodes | success |", "|---|---:|---:|"]
    lines += [f"| {md_cell(c)} | {row['n']} | {_pct(row['success_rate'])} |" for c, row in r.per_category.items()]
    keys = [k for k in _PROVENANCE if k in r.meta] + sorted(k for k in r.meta if k not in _PROVENANCE)
    lines += ["", "## Provenance", "", "| | |", "|---|---|"]
    lines += [f"| {md_cell(k)} | {md_cell(_meta_value(r.meta[k]), code=True)} |" for k in keys]
    return "\n".join(lines) + "\n"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)


def _yerr(rows: list[tuple[float, Any]]) -> list[list[float]]:
    """Matplotlib's asymmetric ``yerr`` (in %) from ``(rate, ci95)`` pairs; no bar where there is no interval."""
    lower = [max(0.0, rate - ci[0]) * 100 if ci else 0.0 for rate, ci in rows]
    upper = [max(0.0, ci[1] - rate) * 100 if ci else 0.0 for rate, ci in rows]
    return [lower, upper]


def _legend(ax: Any, **kwargs: Any) -> None:
    """``ax.legend`` with one entry per label (the first handle of each): artists drawn in pieces share one."""
    first: dict[str, Any] = {}
    for handle, label in zip(*ax.get_legend_handles_labels()):
        first.setdefault(label, handle)
    if first:
        ax.legend(list(first.values()), list(first), **kwargs)


def write_plots(report: EvalReport, out_dir: Path) -> list[Path]:
    """Write ``success_by_family.png``, ``pass_at_k.png`` and ``errors.png`` (matplotlib, Agg); returns paths.

    Every success bar has its 95 % interval as an error bar and its n (episodes / tasks) below the value; the
    family's constant-answer floor (what one constant answer scores over the whole split) is a red tick.
    """
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    fams = list(report.per_family)
    rows = [report.per_family[f] for f in fams]
    labels = fams + ["all (micro)", "macro"]
    rates = [row["success_rate"] for row in rows] + [report.success_rate, report.macro_success_rate]
    cis = [row.get("ci95") for row in rows] + [report.ci95, None]
    ns = [f"n={row['n']}/{row.get('tasks', '?')}t" for row in rows] + [f"n={report.episodes}/{report.tasks}t",
                                                                       f"{len(fams)} fam."]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(labels) + 2), 4.2))
    colors = ["#4c72b0"] * len(fams) + ["#55a868", "#8172b2"]
    bars = ax.bar(labels, [v * 100 for v in rates], color=colors, label="success (95 % CI)",
                  yerr=_yerr(list(zip(rates, cis))), capsize=3, ecolor="#333333")
    if report.macro_se is not None:  # the macro bar's error bar is ±1.96 SE (no task-level interval exists),
        half = 1.96 * report.macro_se  # clipped to [0, 100] %: a rate has no values outside it
        rate = report.macro_success_rate
        ax.errorbar([len(labels) - 1], [rate * 100], yerr=[[min(half, rate) * 100], [min(half, 1 - rate) * 100]],
                    fmt="none", ecolor="#333333", capsize=3)
    floors = [(x, (row.get("floor") or {}).get("floor")) for x, row in enumerate(rows)]
    floors = [(x, f) for x, f in floors if f is not None]
    if floors:  # a red tick across each bar at the family's constant-answer floor
        ax.hlines([f * 100 for _, f in floors], [x - 0.4 for x, _ in floors], [x + 0.4 for x, _ in floors],
                  colors="#c44e52", linewidth=2.5, label="constant-answer floor")
    ax.bar_label(bars, labels=[f"{v:.0%}\n{n}" for v, n in zip(rates, ns)], fontsize=7, padding=2)
    _legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    title = f"Success per family: {report.policy}" + (" (ALL EPISODES FAILED TO RUN)" if report.all_failed else "")
    ax.set(ylim=(0, 100), ylabel="success (%)")  # a rate's axis ends at 100 %; labels of full bars sit above it
    ax.set_title(title, pad=22)
    ax.tick_params(axis="x", rotation=45)
    plt.setp(ax.get_xticklabels(), ha="right")
    paths.append(out_dir / "success_by_family.png")
    _save(fig, paths[-1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ks = [int(k) for k in report.pass_at_k]
    ax.plot(ks, [v * 100 for v in report.pass_at_k.values()], marker="o", label="Pass@K")
    if report.best_at_k:
        ax.plot(ks, [v * 100 for v in report.best_at_k.values()], marker="s", label="Best@K (scorer)")
    ax.set(xlabel="K (samples per task)", ylabel="%", ylim=(0, 105), xticks=ks,
           title=f"Pass@K{' and Best@K' if report.best_at_k else ''}: {report.policy} (n={report.tasks} tasks)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    paths.append(out_dir / "pass_at_k.png")
    _save(fig, paths[-1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    if report.errors:
        names = list(report.errors)
        hb = ax.barh(names, [report.error_shares[n] * 100 for n in names], color="#dd8452")
        ax.bar_label(hb, labels=[f"{report.errors[n]} ({report.error_shares[n]:.0%})" for n in names], padding=2,
                     fontsize=8)
        ax.invert_yaxis()
        ax.set(xlim=(0, 110), xlabel="share of failed episodes (%)")
    else:
        ax.text(0.5, 0.5, "no failed episodes", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    ax.set_title(f"Error breakdown ({sum(report.errors.values())} of {report.episodes} episodes failed): "
                 f"{report.policy}")
    paths.append(out_dir / "errors.png")
    _save(fig, paths[-1])
    plt.close(fig)
    return paths


def write_report(report: EvalReport, out_dir: Path | str, *, plots: bool = True) -> list[Path]:
    """Write ``report.json``, ``report.md`` and (``plots``) the PNGs into ``out_dir`` atomically.

    Returns:
        The paths written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "report.json", (json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n").encode())
    _atomic_write(out / "report.md", render_markdown(report).encode())
    return [out / "report.json", out / "report.md"] + (write_plots(report, out) if plots else [])


# ------------------------------------------------------------------------------------------ leaderboard


def load_reports(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Read ``report.json`` files (a directory means its ``report.json``).

    Raises:
        EvalError: A missing or invalid file (names it).
    """
    reports = []
    for p in map(Path, paths):
        p = p / "report.json" if p.is_dir() else p
        try:
            data = load_json(p)
        except FileFormatError as exc:
            raise EvalError(f"cannot read report {exc} (pass report.json files written by medagentgym eval)") from None
        if not isinstance(data, dict) or not {"policy", "success_rate", "per_family"} <= set(data):
            raise EvalError(f"{p} is not a medagentgym eval report.json (needs policy, success_rate, per_family)")
        reports.append(data)
    if not reports:
        raise EvalError("no reports given; pass one or more report.json paths")
    return reports


def _task_set(report: dict[str, Any]) -> str:
    return str((report.get("meta") or {}).get("task_set", "unknown"))


def _all_failed(report: dict[str, Any]) -> bool:
    episodes = report.get("episodes") or 0
    return episodes > 0 and report.get("infra_failures", 0) == episodes


def _rank(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Best success first; runs whose every episode failed to run last (they measured nothing)."""
    return sorted(reports, key=lambda r: (_all_failed(r), -r["success_rate"]))


def _by_task_set(reports: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_set: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in reports:
        by_set[_task_set(r)].append(r)
    return dict(by_set)


def leaderboard(reports: list[dict[str, Any]], png: Path | str | None = None) -> str:
    """Markdown tables, one per task set (reports over different task sets are never ranked side by side),
    best overall first; columns: episodes, success with its standard error and 95 % interval, the macro average,
    Pass@1, infrastructure failures, then each family (empty where a report did not evaluate that family). A run
    whose every episode failed to run is shown as such, last, with no success rate. With ``png``, one plot per
    task set (:func:`leaderboard_plots`).

    Returns:
        The Markdown text.
    """
    by_set = _by_task_set(reports)
    lines: list[str] = []
    if len(by_set) > 1:
        lines += [f"These {len(reports)} reports cover {len(by_set)} different task sets, so they are ranked in "
                  "separate tables (compare rows within a table only).", ""]
    for task_set, group in by_set.items():
        rows = _rank(group)
        fams = sorted({f for r in rows for f in r["per_family"]})
        if len(by_set) > 1:
            lines += [f"### Task set `{md_cell(task_set)}`", ""]
        head = ["policy", "episodes", "success", "SE", "95 % CI", "macro", "pass@1", "infra failures",
                *map(md_cell, fams)]
        lines += ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---|---:|---:|---:|" + "---:|" * len(fams)]
        for r in rows:
            if _all_failed(r):
                cells = [md_cell(r["policy"]) + " (**all episodes failed to run**)", str(r.get("episodes", "")),
                         "–", "–", "–", "–", "–", str(r.get("infra_failures", 0))] + ["–" if f in r["per_family"]
                                                                                     else "" for f in fams]
            else:
                cells = [md_cell(r["policy"]), str(r.get("episodes", "")), _pct(r["success_rate"]),
                         _se(r.get("se")), _ci(r.get("ci95")), _pct(r.get("macro_success_rate")),
                         _pct((r.get("pass_at_k") or {}).get("1")), str(r.get("infra_failures", 0))]
                cells += [_pct(r["per_family"][f]["success_rate"]) if f in r["per_family"] else "" for f in fams]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if png is not None:
        leaderboard_plots(reports, png)
    return "\n".join(lines).rstrip("\n") + "\n"


def leaderboard_plots(reports: list[dict[str, Any]], png: Path | str) -> list[Path]:
    """One grouped bar plot of success per family (95 % intervals as error bars) per task set: ``png`` itself
    when all reports share one task set, else ``<stem>_<task set>.png`` beside it. Runs whose every episode
    failed to run are left out of the bars and named in the title. Returns the paths written."""
    plt = _pyplot()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    by_set = _by_task_set(reports)
    written = []
    for task_set, group in by_set.items():
        path = png if len(by_set) == 1 else png.with_name(f"{png.stem}_{re.sub(r'[^A-Za-z0-9_.-]', '_', task_set)[:16]}.png")
        rows = [r for r in _rank(group) if not _all_failed(r)]
        failed = [r["policy"] for r in group if _all_failed(r)]
        fams = sorted({f for r in rows for f in r["per_family"]})
        cols, width = ["overall", *fams], 0.8 / max(1, len(rows))
        # one legend entry per run: two runs of one policy are told apart by their order (#2, #3, ...)
        seen: Counter = Counter()
        labels = []
        for r in rows:
            seen[r["policy"]] += 1
            labels.append(r["policy"] + (f" #{seen[r['policy']]}" if seen[r["policy"]] > 1 else ""))
        fig, ax = plt.subplots(figsize=(min(14.0, max(6.0, 0.45 * len(cols) * max(1, len(rows)) ** 0.5 + 2)), 4.2))
        for i, r in enumerate(rows):
            cells = [(r["success_rate"], r.get("ci95"), r.get("episodes"))]
            cells += [(r["per_family"][f]["success_rate"], r["per_family"][f].get("ci95"), r["per_family"][f].get("n"))
                      if f in r["per_family"] else (math.nan, None, None) for f in fams]
            xs = [j + i * width for j in range(len(cols))]
            bars = ax.bar(xs, [v * 100 for v, _, _ in cells], width, label=labels[i],
                          yerr=_yerr([(0.0 if math.isnan(v) else v, ci) for v, ci, _ in cells]), capsize=2)
            ax.bar_label(bars, labels=[f"n={n}" if n else "" for _, _, n in cells], fontsize=6, padding=1)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))], cols, rotation=45, ha="right")
        title = f"Leaderboard, task set {task_set[:16]}: success per family (95 % CI; blank: not evaluated)"
        if failed:
            title += f"\nall episodes failed to run (not drawn): {', '.join(failed)}"
        ax.set(ylim=(0, 100), ylabel="success (%)")
        ax.set_title(title, pad=14)
        if rows:
            _legend(ax, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written


#: Distributions whose versions an evaluation report records (those installed; none is imported).
LIBRARIES = ("medagentgym", "torch", "transformers", "trl", "peft", "vllm", "openai", "verifiers")


def library_versions() -> dict[str, str]:
    """``{distribution: version}`` of :data:`LIBRARIES` that are installed, plus ``python``: provenance."""
    import platform
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def code_version() -> str:
    """The commit of the code that ran (``git rev-parse``, ``-dirty`` when tracked files differ from it), or the
    installed package version when this is not a git checkout."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"medagentgym {version('medagentgym')}"
        except PackageNotFoundError:
            return "unknown"


def task_set_hash(instances: Iterable[Any], family_versions: Mapping[str, Any]) -> str:
    """A fingerprint of what was evaluated: the instance ids, their gold answers and the families' versions.

    Two reports with the same hash ran the same tasks under the same grading, so their numbers compare.
    """
    import hashlib

    digest = hashlib.sha256()
    for inst in sorted(instances, key=lambda i: i.id):
        digest.update(f"{inst.id}\0{json.dumps(inst.answer, sort_keys=True, default=str)}\0".encode())
    digest.update(json.dumps(dict(family_versions), sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def label_base_rate(instances: Iterable[Any]) -> float:
    """Share of the most common rendered gold answer among ``instances`` (what one constant answer scores
    under exact matching; a family with tolerance bands may let a constant score slightly more)."""
    from medagentgym.tasks.graders import render_answer

    rendered = Counter(render_answer(i.answer_type, i.answer) for i in instances)
    total = sum(rendered.values())
    return round(rendered.most_common(1)[0][1] / total, 6) if total else 0.0
