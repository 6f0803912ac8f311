"""Evaluation metrics over finished trajectories: success, Pass@K, Best@K, error taxonomy, actions, cost.

:func:`evaluate` turns the trajectories of one run (``k`` samples per task) into an :class:`EvalReport`;
:func:`write_report` writes ``report.md``, ``report.json`` and PNG plots; :func:`leaderboard` merges several
``report.json`` files. Used by ``scripts/evaluate.py`` and ``scripts/leaderboard.py``.

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
- **Actions**: counts of actions taken (``code_execution:python`` and ``code_execution:sql`` apart,
  ``invalid`` for replies that did not parse); **cost**: turns, completion tokens and wall seconds.

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

from env_client.errors import EnvClientError
from rewards.oracle import infra_failure

__all__ = ["ERROR_CLASSES", "OOD_FAMILIES", "EvalError", "EvalReport", "best_at_k", "classify_failure",
           "evaluate", "label_base_rate", "leaderboard", "load_reports", "pass_at_k",
           "render_markdown", "write_plots", "write_report"]

#: Families held out of training for the out-of-distribution suite (``--suite ood``): a code-heavy
#: bioinformatics family, a statistics family and an EHR prediction family, one per data modality.
OOD_FAMILIES = ("biodsbench", "npowerai", "ehrshot")

#: Failure classes, in the order the taxonomy tests them.
ERROR_CLASSES = ("grader_error", "loop", "wrong_answer", "syntax_error", "io_error", "runtime_error",
                 "invalid_action", "truncated", "no_submission")

_IO_RE = re.compile(r"FileNotFoundError|PermissionError|IsADirectoryError|NotADirectoryError|No such file|"
                    r"no such table|unable to open database|EmptyDataError|\bOSError\b|UnicodeDecodeError",
                    re.IGNORECASE)
_FAILED_STATUSES = {"error", "fatal", "parse_error", "forbidden"}


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
        episodes: Episodes evaluated; ``tasks``: distinct task ids; ``k``: the largest K of Pass@K.
        success_rate: Share of correct episodes.
        per_family: ``family -> {n, success_rate, pass_at_k (at K), errors, base_rate?}``.
        per_category: ``family/category -> {n, success_rate}``.
        pass_at_k: ``str(k) -> unbiased Pass@k`` for ``k = 1..K``.
        best_at_k: ``str(k) -> Best@k``, or None without scores.
        grader_errors: Episodes whose grading failed for an infrastructure reason (reward None; counted, never
            scored 0 silently). A failure the submission caused is a wrong answer.
        errors: ``class -> count`` over failed episodes; ``error_shares``: the same as shares of failures.
        actions: ``action -> count`` over all steps; ``action_shares``: as shares.
        mean_turns, mean_tokens, total_tokens, mean_wall_s, total_wall_s: Cost.
        meta: Free-form run facts (split, size, suite, seed).
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

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict (``report.json``)."""
        return asdict(self)


def _groups(trajs: list[Any]) -> dict[str, list[Any]]:
    by_task: dict[str, list[Any]] = defaultdict(list)
    for t in trajs:
        by_task[t.header.task_id].append(t)
    return {tid: sorted(ts, key=lambda t: t.header.sample_idx) for tid, ts in by_task.items()}


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 6) if values else 0.0


def evaluate(trajectories: Iterable[Any], *, policy: str | None = None,
             scores: Mapping[tuple[str, int], float] | None = None,
             base_rates: Mapping[str, float] | None = None, meta: Mapping[str, Any] | None = None) -> EvalReport:
    """Compute every metric over finished trajectories.

    Args:
        trajectories: ``env_client.Trajectory`` objects (k samples per task; k may differ per task).
        policy: Name recorded in the report (default: the first trajectory's ``header.policy``).
        scores: ``(task_id, sample_idx) -> score`` of a scorer (e.g. the learned verifier) for Best@K; every
            episode must have one. None: Best@K is reported as N/A.
        base_rates: ``family -> label base rate`` to show beside each family's success.
        meta: Run facts copied into the report.

    Returns:
        The :class:`EvalReport`.

    Raises:
        EvalError: No trajectories, an unfinished one, or ``scores`` missing an episode.
    """
    trajs = list(trajectories)
    if not trajs:
        raise EvalError("no trajectories to evaluate; run the rollout first (or check --families/--limit)")
    if any(t.final is None for t in trajs):
        raise EvalError("an unfinished trajectory (final is None) was passed; evaluate finished episodes only")
    groups = _groups(trajs)
    big_k = min(len(ts) for ts in groups.values())
    passk = {str(k): round(_mean([pass_at_k(len(ts), sum(map(_success, ts)), k) for ts in groups.values()]), 6)
             for k in range(1, big_k + 1)}
    bestk = None
    if scores is not None:
        missing = [t.key for t in trajs if t.key not in scores]
        if missing:
            raise EvalError(f"scores lack {len(missing)} episode(s), e.g. {missing[0]}; score every episode")
        bestk = {str(k): round(_mean([best_at_k([_success(t) for t in ts], [scores[t.key] for t in ts], k)
                                      for ts in groups.values()]), 6) for k in range(1, big_k + 1)}
    per_family: dict[str, dict[str, Any]] = {}
    for fam in sorted({t.header.family for t in trajs}):
        fam_groups = [ts for ts in groups.values() if ts[0].header.family == fam]
        ft = [t for ts in fam_groups for t in ts]
        row: dict[str, Any] = {"n": len(ft), "success_rate": _mean([float(_success(t)) for t in ft]),
                               "pass_at_k": _mean([pass_at_k(len(ts), sum(map(_success, ts)), big_k)
                                                   for ts in fam_groups])}
        fam_errors = Counter(classify_failure(t) for t in ft if not _success(t))
        row["errors"] = {c: fam_errors[c] for c in ERROR_CLASSES if fam_errors[c]}
        if base_rates and fam in base_rates:
            row["base_rate"] = base_rates[fam]
        per_family[fam] = row
    cats: dict[str, list[bool]] = defaultdict(list)
    for t in trajs:
        cats[f"{t.header.family}/{t.header.category}"].append(_success(t))
    per_category = {c: {"n": len(v), "success_rate": _mean([float(x) for x in v])} for c, v in sorted(cats.items())}
    errors = Counter(classify_failure(t) for t in trajs if not _success(t))
    failed = sum(errors.values())
    actions = Counter(_action_name(s) for t in trajs for s in t.steps)
    n_steps = sum(actions.values())
    return EvalReport(
        policy=policy or trajs[0].header.policy or "unknown", episodes=len(trajs), tasks=len(groups), k=big_k,
        success_rate=_mean([float(_success(t)) for t in trajs]), per_family=per_family, per_category=per_category,
        pass_at_k=passk, best_at_k=bestk,
        grader_errors=sum(1 for t in trajs if infra_failure(_verdict(t))),
        errors={c: errors[c] for c in ERROR_CLASSES if errors[c]},
        error_shares={c: round(errors[c] / failed, 6) for c in ERROR_CLASSES if errors[c]},
        actions=dict(actions.most_common()),
        action_shares={a: round(n / n_steps, 6) for a, n in actions.most_common()},
        mean_turns=_mean([len(t.steps) for t in trajs]), mean_tokens=_mean([t.final.total_tokens for t in trajs]),
        total_tokens=sum(t.final.total_tokens for t in trajs), mean_wall_s=_mean([t.final.wall_s for t in trajs]),
        total_wall_s=round(sum(t.final.wall_s for t in trajs), 4), meta=dict(meta or {}),
    )


# ------------------------------------------------------------------------------------------ writing


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _pct(x: float | None) -> str:
    return "N/A" if x is None else f"{x:.1%}"


def _main_error(errors: dict[str, int]) -> str:
    return f"{max(errors, key=errors.get)} ({max(errors.values())})" if errors else "–"


def render_markdown(report: EvalReport) -> str:
    """The ``report.md`` text: headline, per family, Pass@K/Best@K, errors, actions, cost, per category."""
    r = report
    lines = [f"# Evaluation: {r.policy}", "",
             f"{r.episodes} episodes over {r.tasks} tasks (K = {r.k})"
             + "".join(f"; {k}: {v}" for k, v in sorted(r.meta.items())), "",
             (f"**Success rate: {_pct(r.success_rate)}**, Pass@{r.k}: {_pct(r.pass_at_k[str(r.k)])}, "
              f"Best@{r.k}: {_pct(r.best_at_k[str(r.k)]) if r.best_at_k else 'N/A (no scores)'}, "
              f"grader errors: {r.grader_errors}"), "",
             "## Per family", "", "| family | episodes | success | pass@K | base rate | main error |",
             "|---|---:|---:|---:|---:|---|"]
    for fam, row in r.per_family.items():
        lines.append(f"| {fam} | {row['n']} | {_pct(row['success_rate'])} | {_pct(row['pass_at_k'])} | "
                     f"{_pct(row.get('base_rate'))} | {_main_error(row.get('errors') or {})} |")
    lines += ["", ("Base rate: share of the most common gold answer (what one constant answer scores under exact "
              "matching; families graded on workspace files submit a pointer such as `done`, so theirs reads 100 %)."),
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
    lines += [f"| {a} | {n} | {_pct(r.action_shares[a])} |" for a, n in r.actions.items()]
    lines += ["", "## Cost", "", f"- mean turns per episode: {r.mean_turns:.2f}",
              f"- completion tokens: {r.total_tokens} total, {r.mean_tokens:.1f} per episode",
              f"- wall time: {r.total_wall_s:.2f} s of episodes, {r.mean_wall_s:.3f} s per episode", "",
              "## Per category", "", "| family/category | episodes | success |", "|---|---:|---:|"]
    lines += [f"| {c} | {row['n']} | {_pct(row['success_rate'])} |" for c, row in r.per_category.items()]
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


def write_plots(report: EvalReport, out_dir: Path) -> list[Path]:
    """Write ``success_by_family.png``, ``pass_at_k.png`` and ``errors.png`` (matplotlib, Agg); returns paths."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    fams = list(report.per_family)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(fams) + 2), 4))
    rates = [report.per_family[f]["success_rate"] * 100 for f in fams]
    bars = ax.bar(fams, rates, color="#4c72b0", label="success")
    bases = [(x, report.per_family[f].get("base_rate")) for x, f in enumerate(fams)]
    bases = [(x, b) for x, b in bases if b is not None]
    if bases:  # a red tick across each bar at the family's label base rate
        ax.hlines([b * 100 for _, b in bases], [x - 0.4 for x, _ in bases], [x + 0.4 for x, _ in bases],
                  colors="#c44e52", linewidth=2.5, label="label base rate")
    ax.bar_label(bars, fmt="%.0f%%", fontsize=8)
    ax.legend(loc="upper left", ncol=2, fontsize=8)
    ax.set(ylim=(0, 122), ylabel="success (%)", title=f"Success per family: {report.policy}")
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
           title=f"Pass@K{' and Best@K' if report.best_at_k else ''}: {report.policy}")
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
    ax.set_title(f"Error breakdown ({sum(report.errors.values())} failed): {report.policy}")
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
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise EvalError(f"cannot read report {p}: {exc}; pass report.json files written by evaluate.py") from exc
        if not isinstance(data, dict) or not {"policy", "success_rate", "per_family"} <= set(data):
            raise EvalError(f"{p} is not an evaluate.py report.json (needs policy, success_rate, per_family)")
        reports.append(data)
    if not reports:
        raise EvalError("no reports given; pass one or more report.json paths")
    return reports


def leaderboard(reports: list[dict[str, Any]], png: Path | str | None = None) -> str:
    """A Markdown table (one row per report, best overall first; columns: overall, Pass@1, each family) and,
    when ``png`` is given, a grouped bar plot of success per family.

    Returns:
        The Markdown table.
    """
    rows = sorted(reports, key=lambda r: -r["success_rate"])
    fams = sorted({f for r in rows for f in r["per_family"]})
    head = ["policy", "episodes", "success", "pass@1", *fams]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        cells = [r["policy"], str(r.get("episodes", "")), _pct(r["success_rate"]),
                 _pct((r.get("pass_at_k") or {}).get("1"))]
        cells += [_pct(r["per_family"][f]["success_rate"]) if f in r["per_family"] else "–" for f in fams]
        lines.append("| " + " | ".join(cells) + " |")
    if png is not None:
        plt = _pyplot()
        cols, width = ["overall", *fams], 0.8 / len(rows)
        fig, ax = plt.subplots(figsize=(min(14.0, max(6.0, 0.45 * len(cols) * len(rows) ** 0.5 + 2)), 4.2))
        for i, r in enumerate(rows):
            vals = [r["success_rate"]] + [r["per_family"].get(f, {}).get("success_rate", 0.0) for f in fams]
            ax.bar([j + i * width for j in range(len(cols))], [v * 100 for v in vals], width, label=r["policy"])
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))], cols, rotation=45, ha="right")
        ax.set(ylim=(0, 105), ylabel="success (%)", title="Leaderboard: success per family")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        Path(png).parent.mkdir(parents=True, exist_ok=True)
        _save(fig, Path(png))
        plt.close(fig)
    return "\n".join(lines) + "\n"


def label_base_rate(instances: Iterable[Any]) -> float:
    """Share of the most common rendered gold answer among ``instances`` (what one constant answer scores
    under exact matching; a family with tolerance bands may let a constant score slightly more)."""
    from tasks.graders import render_answer

    rendered = Counter(render_answer(i.answer_type, i.answer) for i in instances)
    total = sum(rendered.values())
    return round(rendered.most_common(1)[0][1] / total, 6) if total else 0.0
