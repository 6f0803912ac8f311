"""Benchmark the rollout engine: the oracle policy over every registered family with built data.

    python scripts/bench_rollout.py [--tasks-root artifacts/tasks] [--quick] [--json] [--concurrency 2]

Builds every registered family at size ``tiny`` into a temporary directory when ``--tasks-root`` is not given,
then rolls out the oracle (whose replies cost nothing, so what is measured is the environment: parsing, sandbox
execution, grading, trajectory bookkeeping). Prints a per-family table and, with ``--json``, ends stdout with
ONE JSON line: ``episodes_per_s``, ``steps_per_s``, ``env_overhead_p50_ms`` (step wall time minus the time spent
executing user code in the sandbox), ``exec_p50_ms``, ``exec_total_s`` / ``env_total_s`` (summed over all steps:
time in user code / the rest of the steps' time), ``episodes``, ``backend`` and more. Writes nothing else.
``--quick`` (under 30 s) caps instances per family. Targets on a quiet 2-core machine: overhead p50 <= 2 ms,
>= 100 episodes/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

from medagentgym import tasks
from env_client.errors import EnvClientError
from env_client.rollout import BACKENDS, EnvSpec, rollout
from sandbox.errors import SandboxError
from medagentgym.tasks.base import TaskError


def built_families(root: Path) -> list[str]:
    """Families with a built directory under ``root``."""
    return [n for n in tasks.names(root) if (root / n / "manifest.json").exists() or (root / n).is_dir()]


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks-root", type=Path, default=None,
                   help="built tasks root; default: build every family (tiny) into a temp dir")
    p.add_argument("--families", default="all", help="comma-separated family names, or 'all' (default)")
    p.add_argument("--split", choices=["train", "test"], default="test", help="split to run; default test")
    p.add_argument("--quick", action="store_true", help="at most 20 instances per family (< 30 s)")
    p.add_argument("-k", type=int, default=1, help="samples per task; default 1")
    p.add_argument("--concurrency", type=int, default=os.cpu_count() or 2, help="episodes in flight; default CPUs")
    p.add_argument("--backend", choices=BACKENDS, default="thread", help="rollout backend; default thread")
    p.add_argument("--sandbox", choices=["bwrap", "docker", "local"], default="bwrap",
                   help="sandbox backend; default bwrap ('local' is unisolated)")
    p.add_argument("--allow-unisolated", action="store_true", help="permit --sandbox local")
    p.add_argument("--seed", type=int, default=0, help="build and sampling seed; default 0")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line of results")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = p.parse_args(argv)
    tmp = None
    try:
        build_failed: dict[str, str] = {}
        if args.tasks_root is None:
            tmp = tempfile.TemporaryDirectory(prefix="bench-rollout-")
            root = Path(tmp.name)
            wanted = tasks.names() if args.families == "all" else args.families.split(",")
            t_build = time.perf_counter()
            build_failed = tasks.registry.build_families(wanted, root, size="tiny", seed=args.seed,
                                                         jobs=os.cpu_count() or 1, skip_errors=True)[1]
            print(f"built {len(wanted) - len(build_failed)} families in {time.perf_counter() - t_build:.1f} s "
                  f"into {root}", file=sys.stderr)
        else:
            root = args.tasks_root
        names = built_families(root) if args.families == "all" else [
            n for n in args.families.split(",") if n not in build_failed]
        names = [n for n in names if n not in build_failed]
        instances = []
        for name in names:
            instances.extend(tasks.make(name, root=root).instances(args.split)[: 20 if args.quick else None])
        if not instances:
            raise TaskError(f"no instances to run under {root} (build failures: {build_failed or 'none'})")
        spec = EnvSpec(tasks_root=str(root), backend=args.sandbox, allow_unisolated=args.allow_unisolated)
        result = rollout(instances, "oracle", spec, k=args.k, seed=args.seed, concurrency=args.concurrency,
                         backend=args.backend, on_error="skip")
    except (EnvClientError, TaskError, SandboxError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if tmp is not None:
            tmp.cleanup()
    s = result.summary
    steps = [st for t in result.trajectories for st in t.steps]
    exec_total = sum(st.exec_s for st in steps)
    _print_table(result, names)
    for name, err in build_failed.items():
        print(f"build failed: {name}: {err}", file=sys.stderr)
    out = {"episodes_per_s": s.episodes_per_s, "steps_per_s": s.steps_per_s,
           "env_overhead_p50_ms": s.env_overhead_p50_ms, "exec_p50_ms": s.exec_p50_ms, "episodes": s.new,
           "steps": s.steps, "wall_s": s.wall_s, "exec_total_s": round(exec_total, 3),
           "env_total_s": round(sum(st.duration_s for st in steps) - exec_total, 3), "backend": args.backend,
           "sandbox": args.sandbox,
           "concurrency": args.concurrency, "oracle_success_rate": s.success_rate, "failed": s.failed,
           "families": names, "build_failed": sorted(build_failed), "cpus": os.cpu_count(),
           "python": platform.python_version(), "quick": args.quick}
    if args.json:
        print(json.dumps(out, sort_keys=True))
    return 0


def _print_table(result, names: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    by_family: dict[str, list] = {}
    for t in result.trajectories:
        by_family.setdefault(t.header.family, []).append(t)
    table = Table(title="oracle rollout benchmark")
    for col in ("family", "episodes", "oracle success", "steps", "user code s", "env+grading s"):
        table.add_column(col, justify="left" if col == "family" else "right")
    for name in names:
        trajs = by_family.get(name, [])
        ok = sum(1 for t in trajs if t.final and t.final.verdict and t.final.verdict.get("correct"))
        steps = [st for t in trajs for st in t.steps]
        exec_s = sum(st.exec_s for st in steps)
        table.add_row(name, str(len(trajs)), f"{ok / len(trajs):.1%}" if trajs else "-", str(len(steps)),
                      f"{exec_s:.2f}", f"{sum(st.duration_s for st in steps) - exec_s:.2f}")
    s = result.summary
    console = Console()
    console.print(table)
    console.print(f"{s.episodes_per_s:.1f} episodes/s, {s.steps_per_s:.1f} steps/s, env overhead p50 "
                  f"{s.env_overhead_p50_ms:.3f} ms, exec p50 {s.exec_p50_ms:.3f} ms, {s.new} episodes in "
                  f"{s.wall_s:.2f} s ({s.backend}); failed {s.failed}")
    for err in s.errors[:5]:
        console.print(f"[red]failed[/red] {err}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # one line, not a traceback; 130 = killed by SIGINT, as shells report it
        print("\ninterrupted: nothing saved "
              "(the benchmark writes nothing; its temporary task build is removed); rerun the same command",
              file=sys.stderr)
        sys.exit(130)
