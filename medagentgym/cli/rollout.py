"""Roll out a policy over task families and store one trajectory per episode.

    medagentgym rollout --tasks-root artifacts/tasks --families toy_sql --split test --policy oracle \
        -k 4 --concurrency 8 --backend thread --out runs/rollouts/oracle.jsonl --seed 0

Appends one JSON line per finished episode to ``--out`` (an ``env_client.TrajectoryStore``) and prints a
summary table (success rate overall and per family/category, turns, tokens, throughput). Rerunning with the
same ``--out`` resumes: finished ``(task, sample)`` pairs are skipped, nothing is lost or duplicated, even after
a kill -9; a rerun under other settings (policy, weights, sampling, caps, format, seed, family data) is refused
with one line naming the difference. ``--json`` ends stdout with the summary as one JSON object. Policy grammar:
``--help``.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from env_client.argtypes import nonneg_int, positive_int
from medagentgym import tasks
from env_client.errors import EnvClientError
from env_client.policies import add_policy_arguments, failures_in_a_row, make_policy, policy_kwargs, probe
from env_client.rollout import BACKENDS, EnvSpec, RolloutSummary, describe_run, rollout
from env_client.trajectory import TrajectoryStore
from sandbox.errors import SandboxError
from medagentgym.tasks.base import TaskError


def select_instances(root: Path, families: str, split: str, limit: int | None) -> list:
    """Instances of the chosen families (``all`` = every family built under ``root``), ``limit`` per family."""
    names = [n for n in tasks.names(root) if (root / n).is_dir()] if families == "all" else [
        f.strip() for f in families.split(",") if f.strip()]
    if not names:
        raise TaskError(f"no families selected (built under {root}: {', '.join(tasks.names(root)) or 'none'})")
    out = []
    for name in names:
        out.extend(tasks.make(name, root=root).instances(split)[:limit])
    return out


def print_summary(summary: RolloutSummary, out: Path | None) -> None:
    """A rich table of the summary (per category, then totals)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"rollout summary{f' ({out})' if out else ''}")
    for col in ("family/category", "episodes", "success"):
        table.add_column(col, justify="left" if col == "family/category" else "right")
    for cat, row in summary.per_category.items():
        table.add_row(cat, str(int(row["n"])), f"{row['success_rate']:.1%}")
    table.add_row("[bold]all[/bold]", str(summary.episodes), f"[bold]{summary.success_rate:.1%}[/bold]")
    table.add_row("pass@k (any sample of a task)", "", f"{summary.pass_at_k:.1%}")
    console = Console(stderr=False)
    console.print(table)
    console.print(
        f"new {summary.new}, resumed {summary.skipped}, failed {summary.failed}, grader errors "
        f"{summary.grader_errors}; mean turns {summary.mean_turns:.2f}, tokens {summary.total_tokens}; "
        f"{summary.episodes_per_s:.1f} episodes/s, {summary.steps_per_s:.1f} steps/s "
        f"(env overhead p50 {summary.env_overhead_p50_ms:.2f} ms, exec p50 {summary.exec_p50_ms:.2f} ms, "
        f"backend {summary.backend})")
    for err in summary.errors[:5]:
        console.print(f"[red]failed[/red] {err}")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks-root", type=Path, default=Path("artifacts/tasks"),
                   help="built tasks root (medagentgym build --out); default artifacts/tasks")
    p.add_argument("--families", default="all", help="comma-separated family names, or 'all' built ones (default)")
    p.add_argument("--split", choices=["train", "test"], default="test", help="split to roll out (default test)")
    p.add_argument("--limit", type=positive_int, default=None, help="at most this many instances per family")
    p.add_argument("-k", type=positive_int, default=1, help="samples per task (GRPO groups, Pass@K); default 1")
    p.add_argument("--concurrency", type=positive_int, default=4, help="episodes in flight; default 4")
    p.add_argument("--backend", choices=BACKENDS, default="thread", help="concurrency backend; default thread")
    p.add_argument("--sandbox", choices=["bwrap", "docker", "local"], default="bwrap",
                   help="sandbox backend for code; default bwrap ('local' is unisolated)")
    p.add_argument("--allow-unisolated", action="store_true", help="permit --sandbox local")
    p.add_argument("--max-turns", type=positive_int, default=None, help="episode turn cap (EnvConfig.max_turns)")
    p.add_argument("--format", choices=["tool_call", "json"], default="tool_call",
                   help="action wire format of prompts and scripted policies; default tool_call")
    p.add_argument("--out", type=Path, default=None, help="JSONL trajectory store; rerun with it to resume")
    p.add_argument("--seed", type=nonneg_int, default=0, help="base seed of per-sample seeds; default 0")
    p.add_argument("--on-error", choices=["raise", "skip"], default="raise",
                   help="stop at a failed episode (default) or skip it and go on")
    p.add_argument("--json", action="store_true", help="end stdout with the summary as one JSON line")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_policy_arguments(p)
    args = p.parse_args(argv)
    try:
        config = {"format": args.format, **({"max_turns": args.max_turns} if args.max_turns else {})}
        spec = EnvSpec(tasks_root=str(args.tasks_root), backend=args.sandbox,
                       allow_unisolated=args.allow_unisolated, config=config)
        kwargs = policy_kwargs(args)
        policy = args.policy  # a spec string travels to the joblib/ray workers; an object only when it must
        if kwargs or args.format != "tool_call":
            policy = make_policy(args.policy, families=spec.families(), fmt=args.format, **kwargs)
        if str(args.policy).startswith("openai:"):  # a down or mute endpoint fails here, once, before any episode
            probe(policy if not isinstance(policy, str) else make_policy(args.policy, **kwargs))
        instances = select_instances(args.tasks_root, args.families, args.split, args.limit)
        run_info = describe_run(args.policy, policy, kwargs, config=config, fmt=args.format, split=args.split,
                                tasks_root=args.tasks_root, families={i.family for i in instances})
        result = rollout(instances, policy, spec, k=args.k, seed=args.seed, concurrency=args.concurrency,
                         backend=args.backend, store=args.out, policy_name=args.policy, on_error=args.on_error,
                         progress=not args.no_progress, run_info=run_info,
                         max_consecutive_failures=failures_in_a_row(args))
    except KeyboardInterrupt:
        saved = len(TrajectoryStore(args.out)) if args.out and args.out.exists() else 0
        where = f"saved in {args.out}; rerun the same command to resume" if args.out else "kept (no --out given)"
        print(f"\ninterrupted: {saved} episode(s) {where}", file=sys.stderr)
        return 130
    except (EnvClientError, TaskError, SandboxError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_summary(result.summary, args.out)
    if args.json:
        print(json.dumps(result.summary.to_dict(), sort_keys=True))
    return 0 if result.summary.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
