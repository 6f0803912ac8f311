"""Roll out a policy over task families and store one trajectory per episode.

    medagentgym rollout --tasks-root artifacts/tasks --families toy_sql --split test --policy oracle \
        -k 4 --concurrency 8 --backend thread --out runs/rollouts/oracle.jsonl --seed 0

Appends one JSON line per finished episode to ``--out`` (a ``medagentgym.env_client.TrajectoryStore``) and prints a
summary table (success rate overall and per family/category, turns, tokens, throughput). Rerunning with the
same ``--out`` resumes: finished ``(task, sample)`` pairs are skipped, nothing is lost or duplicated, even after
a kill -9 (a torn last line is cut off and that episode played again). A rerun that asks another question
(``--families``, ``--split``, ``--limit``, ``-k``, ``--seed``: as ``medagentgym eval`` words it) or runs under
other settings (policy, weights, sampling, caps, format, family data) is refused with one line naming the
difference, and the file is left as it was; ``--overwrite`` replaces it instead (the new episodes go to a hidden
file beside it, ``.<name>.overwrite``, which replaces ``--out`` when the run ends; an interrupted
``--overwrite`` run resumes from it when rerun). ``--json`` ends stdout with the summary as one JSON object.
Policy grammar: ``--help``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import traceback
from pathlib import Path

from medagentgym.env_client.argtypes import nonneg_int, positive_int
from medagentgym import tasks
from medagentgym.env_client.errors import EnvClientError
from medagentgym.env_client.policies import add_policy_arguments, failures_in_a_row, make_policy, policy_kwargs, probe
from medagentgym.env_client.rollout import (BACKENDS, EnvSpec, RolloutError, RolloutSummary, describe_run, rollout, run_key,
                                settings_path)
from medagentgym.env_client.trajectory import TrajectoryStore
from medagentgym.sandbox.errors import SandboxError
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


#: How a refusal to add to a store of another question or run ends (``rollout --out`` and ``eval --out``).
START_OVER = "--overwrite to replace it"


def refuse_another_question(out: Path, question: dict) -> None:
    """Refuse to add to ``out`` episodes of another question than the one its stored episodes answer (the words of
    ``medagentgym eval``'s refusal); nothing is written. Other settings are checked by :func:`rollout` itself.

    Raises:
        RolloutError: One line naming each changed flag (``--limit: 10 -> 2``) and what to do.
    """
    from medagentgym.cli.evaluate import question_difference

    if not out.exists() or not any(True for _ in TrajectoryStore(out).read()):
        return
    try:
        recorded = json.loads(settings_path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # no settings recorded: rollout() refuses it, saying so
    changed = question_difference(recorded, question) if isinstance(recorded, dict) else None
    if changed:
        raise RolloutError(f"{out} holds the episodes of another question ({changed}); pass another --out, or "
                           f"{START_OVER}")


def overwrite_twin(out: Path) -> Path:
    """Where an ``--overwrite`` run writes until it ends: ``.<name>.overwrite`` beside ``out``."""
    return out.with_name(f".{out.name}.overwrite")


def overwrite_store(out: Path, settings: dict, *, episodes: str | None = None) -> Path:
    """The hidden twin an ``--overwrite`` run writes instead of ``out`` (``.<name>.overwrite`` beside it): the
    store file itself, or, with ``episodes``, a folder holding the store under that name (``medagentgym eval``'s
    ``--out`` folder, with its ``trajectories.jsonl``). Kept when its store holds episodes of these very
    ``settings`` (an interrupted ``--overwrite`` run resumes), emptied otherwise. :func:`replace_store` puts it in
    place of ``out`` when the run ends."""
    tmp = overwrite_twin(out)
    store = tmp / episodes if episodes else tmp
    try:
        same = run_key(json.loads(settings_path(store).read_text(encoding="utf-8"))) == run_key(settings)
    except (OSError, ValueError):
        same = False
    if not same and episodes:
        shutil.rmtree(tmp, ignore_errors=True)
    elif not same:
        for path in (tmp, settings_path(tmp)):
            path.unlink(missing_ok=True)
    store.parent.mkdir(parents=True, exist_ok=True)
    store.touch()
    return tmp


def replace_store(tmp: Path, out: Path) -> None:
    """Put the finished ``--overwrite`` twin in place of ``out``. A store file: each file by one rename (the
    episodes first). A folder: by two renames (``out`` aside, the twin in its place), then the old one is deleted;
    a crash between them leaves no ``out`` and the finished twin, which a rerun of the ``--overwrite`` command
    resumes in full and puts in place."""
    if not tmp.is_dir():
        os.replace(tmp, out)
        os.replace(settings_path(tmp), settings_path(out))
        return
    old = out.with_name(f".{out.name}.replaced")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


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
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out (when the run ends) instead of resuming it; needed to change its question")
    p.add_argument("--seed", type=nonneg_int, default=0, help="base seed of per-sample seeds; default 0")
    p.add_argument("--on-error", choices=["raise", "skip"], default="raise",
                   help="stop at a failed episode (default) or skip it and go on")
    p.add_argument("--json", action="store_true", help="end stdout with the summary as one JSON line")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_policy_arguments(p)
    args = p.parse_args(argv)
    if args.overwrite and args.out is None:
        p.error("--overwrite replaces the file of --out; pass --out FILE")
    store = args.out
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
        names = sorted({i.family for i in instances})
        run_info = describe_run(args.policy, policy, kwargs, config=config, fmt=args.format, split=args.split,
                                tasks_root=args.tasks_root, families=names)
        run_info.update(limit=args.limit, k=args.k)  # the question: with families, split and seed (added by rollout)
        if args.out is not None and args.overwrite:
            store = overwrite_store(args.out, {**run_info, "seed": args.seed})
        elif args.out is not None:
            refuse_another_question(args.out, {"families": names, "split": args.split, "limit": args.limit,
                                               "k": args.k, "seed": args.seed})
        result = rollout(instances, policy, spec, k=args.k, seed=args.seed, concurrency=args.concurrency,
                         backend=args.backend, store=store, policy_name=args.policy, on_error=args.on_error,
                         progress=not args.no_progress, run_info=run_info,
                         max_consecutive_failures=failures_in_a_row(args), start_over=START_OVER)
        if store != args.out:
            replace_store(store, args.out)
    except KeyboardInterrupt:
        saved = len(TrajectoryStore(store)) if store and store.exists() else 0
        again = "rerun the same command to resume" + (f" (kept apart from {args.out} until it ends)"
                                                      if store != args.out else "")
        where = f"saved in {store}; {again}" if store else "kept (no --out given)"
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
