"""Collect SFT and DPO data: K trajectories per training task from any policy, in parallel, resumable.

    medagentgym collect --tasks-root artifacts/tasks --suite id --policy openai:gpt-4.1-mini -k 4 \
        --concurrency 16 --out artifacts/collect/teacher

Writes ``<out>/trajectories.jsonl`` (every episode; rerun the same command to resume, a rerun under other settings
is refused), ``<out>/sft.jsonl`` (successes: what ``recipes/sft_qwen*.yaml`` read as ``rollout.store``),
``<out>/dpo.jsonl`` (every episode of a task with both a success and a failure: what DPO pairs) and
``<out>/summary.json``, and prints a table per family (tasks, episodes, success, tasks solved, SFT conversations,
DPO pairs). Policies: ``oracle``, ``openai:MODEL@URL`` (any OpenAI-compatible server), ``hf:PATH`` (a local
checkpoint), ``vllm:PATH`` (see ``--help``). ``--env-url`` runs the episodes on env servers (medagentgym serve)
instead of a local sandbox. Exit status 1 when some episodes failed (they are retried by a rerun).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from medagentgym.env_client.argtypes import nonneg_int, positive_int
from medagentgym import tasks
from medagentgym.env_client.errors import EnvClientError
from medagentgym.env_client.policies import add_policy_arguments, failures_in_a_row, make_policy, policy_kwargs, probe
from medagentgym.env_client.rollout import BACKENDS, EnvSpec, describe_run
from medagentgym.medcopilot.collect import collect
from medagentgym.sandbox.errors import SandboxError
from medagentgym.tasks.base import TaskError


def families_for(args: argparse.Namespace) -> list[str]:
    """``--families`` (comma-separated) or the ``--suite``'s families."""
    if args.families:
        return [f.strip() for f in args.families.split(",") if f.strip()]
    return list(tasks.SUITES[args.suite])


def build_parser() -> argparse.ArgumentParser:
    """The flat argparse of this script (every flag documented)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks-root", type=Path, default=Path("artifacts/tasks"),
                   help="built tasks root (medagentgym build --out); default artifacts/tasks")
    p.add_argument("--suite", choices=sorted(tasks.SUITES), default="id",
                   help="families of the paper's suite: id (training families, default) or ood")
    p.add_argument("--families", default="", help="comma-separated families instead of --suite")
    p.add_argument("--split", choices=["train", "test"], default="train", help="split to sample (default train)")
    p.add_argument("--limit", type=positive_int, default=None, help="at most this many instances per family")
    p.add_argument("-k", type=positive_int, default=4, help="trajectories per task; default 4")
    p.add_argument("--concurrency", type=positive_int, default=8, help="episodes in flight; default 8")
    p.add_argument("--backend", choices=BACKENDS, default="thread", help="concurrency backend; default thread")
    p.add_argument("--sandbox", choices=["bwrap", "docker", "local"], default="bwrap",
                   help="sandbox backend for code; default bwrap ('local' is unisolated)")
    p.add_argument("--allow-unisolated", action="store_true", help="permit --sandbox local")
    p.add_argument("--env-url", action="append", default=[], metavar="URL",
                   help="env server (medagentgym serve) to run episodes on; repeat for several (round-robin, "
                        "health-checked); token from MEDAGENTGYM_ENV_TOKEN")
    p.add_argument("--max-turns", type=positive_int, default=None, help="episode turn cap (EnvConfig.max_turns)")
    p.add_argument("--out", type=Path, required=True, help="output folder; rerun with it to resume")
    p.add_argument("--seed", type=nonneg_int, default=0, help="base seed of per-sample seeds; default 0")
    p.add_argument("--max-pairs-per-task", type=positive_int, default=4, help="DPO pairs counted per task; default 4")
    p.add_argument("--json", action="store_true", help="end stdout with the per-family summary as one JSON line")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_policy_arguments(p)
    return p


def print_table(summary: dict, out: Path) -> None:
    """A rich table of the per-family summary."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"collected into {out}")
    for col in ("family", "tasks", "episodes", "success", "tasks solved", "SFT rows", "tasks w/ both", "DPO pairs"):
        table.add_column(col, justify="left" if col == "family" else "right")
    for name, row in summary.items():
        bold = name == "all"
        table.add_row(f"[bold]{name}[/bold]" if bold else name, str(row["tasks"]), str(row["episodes"]),
                      f"{row['success_rate']:.1%}", str(row["tasks_solved"]), str(row["sft_rows"]),
                      str(row["tasks_with_both"]), str(row["dpo_pairs"]))
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        config = {"max_turns": args.max_turns} if args.max_turns else {}
        kwargs = policy_kwargs(args)
        spec = EnvSpec(tasks_root=str(args.tasks_root), backend=args.sandbox,
                       allow_unisolated=args.allow_unisolated, config=config or None)
        policy = args.policy  # a spec string travels to joblib/ray workers; an object where it must be built here
        if kwargs or args.env_url:
            policy = make_policy(args.policy, families=spec.families(), **kwargs)
        if str(args.policy).startswith("openai:"):  # a down or mute endpoint fails here, once, before any episode
            probe(policy if not isinstance(policy, str) else make_policy(args.policy, **kwargs))
        instances = []
        for name in families_for(args):
            instances.extend(tasks.make(name, root=args.tasks_root).instances(args.split)[: args.limit])
        if not instances:
            raise TaskError(f"no {args.split} instances under {args.tasks_root}; build them with "
                            f"medagentgym build --families {','.join(families_for(args))}")
        env = spec
        if args.env_url:
            from medagentgym.env_client.http_client import EnvServers

            env = EnvServers(args.env_url).env
        run_info = describe_run(args.policy, policy, kwargs, config=config, fmt="tool_call", split=args.split,
                                tasks_root=args.tasks_root, families={i.family for i in instances})
        result = collect(instances, policy, env, k=args.k, out=args.out, concurrency=args.concurrency,
                         seed=args.seed, backend=args.backend, policy_name=args.policy, run_info=run_info,
                         progress=not args.no_progress, max_pairs_per_task=args.max_pairs_per_task,
                         max_consecutive_failures=failures_in_a_row(args))
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished episodes are kept in {args.out}; rerun the same command to resume",
              file=sys.stderr)
        return 130
    except (EnvClientError, TaskError, SandboxError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_table(result.summary, args.out)
    for err in result.rollout.errors[:5]:
        print(f"failed (rerun to retry): {err}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.summary, sort_keys=True))
    return 0 if result.rollout.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
