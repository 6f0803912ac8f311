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

The JSON also says where an episode's time goes: ``stages`` (per stage of ``medagentgym.env_client.episode.STAGES``: count,
wall p50 / mean / p99 ms, the host thread's CPU, and wall ms per episode; thread and async backends, whose episodes
run in this process), ``cpu_ms_per_episode`` (CPU of this process and of every sandbox process it started, during
the episodes only, from a cpuacct cgroup of its own where the host allows one; ``cpu_scope`` says which) and
``host_cpu_ms_per_episode`` (this process alone). CPU time is far less sensitive to other load than wall time: compare
runs by it on a busy machine. The sandbox pool is started (and its start timed, ``pool_start_s``) before the clock.
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
from medagentgym.env_client.episode import profile_stages
from medagentgym.env_client.errors import EnvClientError
from medagentgym.env_client.policies import make_policy
from medagentgym.env_client.rollout import BACKENDS, EnvSpec, rollout
from medagentgym.sandbox.errors import SandboxError
from medagentgym.tasks.base import TaskError


def built_families(root: Path) -> list[str]:
    """Families with a built directory under ``root``."""
    return [n for n in tasks.names(root) if (root / n / "manifest.json").exists() or (root / n).is_dir()]


class CpuMeter:
    """CPU seconds of this process and of every process it starts after it (the sandbox's jails too).

    Uses a cpuacct cgroup of its own (cgroup v1) or a child cgroup (v2) when the host lets this process create
    and enter one (root); otherwise counts this process alone. ``scope`` says which; :meth:`close` leaves the
    cgroup and removes it.
    """

    def __init__(self) -> None:
        self.scope, self._dir, self._home = "this process only (no cgroup could be made)", None, None
        name = f"bench-rollout-{os.getpid()}"
        v1 = Path("/sys/fs/cgroup/cpuacct")
        try:
            if (v1 / "cpuacct.usage").exists():
                home = v1
                for line in Path("/proc/self/cgroup").read_text().splitlines():
                    _, hier, path = line.split(":", 2)
                    if "cpuacct" in hier.split(","):
                        home = v1 / path.lstrip("/")
                self._enter(home, home / name, "cgroup v1 cpuacct: this process and its sandbox processes")
            elif Path("/sys/fs/cgroup/cgroup.controllers").exists():
                own = next(line.split("::", 1)[1] for line in Path("/proc/self/cgroup").read_text().splitlines()
                           if line.startswith("0::"))
                home = Path("/sys/fs/cgroup") / own.lstrip("/")
                self._enter(home, home / name, "cgroup v2: this process and its sandbox processes")
        except (OSError, StopIteration, ValueError):
            self._dir = None

    def _enter(self, home: Path, path: Path, scope: str) -> None:
        path.mkdir()
        try:
            (path / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            path.rmdir()
            raise
        self._dir, self._home, self.scope = path, home, scope

    def seconds(self) -> float:
        """CPU seconds so far."""
        if self._dir is not None:
            if (self._dir / "cpuacct.usage").exists():
                return int((self._dir / "cpuacct.usage").read_text()) / 1e9
            for line in (self._dir / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec"):
                    return int(line.split()[1]) / 1e6
        return time.process_time()

    def close(self) -> None:
        if self._dir is None:
            return
        try:
            (self._home / "cgroup.procs").write_text(str(os.getpid()))
            for _ in range(50):  # processes of the closed pool may still be exiting
                try:
                    self._dir.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
        except OSError:
            pass
        self._dir = None


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
    tmp = pool = None
    load0 = round(os.getloadavg()[0], 2)
    meter = CpuMeter()
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
        env: EnvSpec | object = spec
        policy: object = "oracle"
        t_pool = time.perf_counter()
        if args.backend in ("thread", "async"):  # episodes in this process: its pool is started before the clock
            pool = spec.make_pool(args.concurrency)
            policy = make_policy("oracle", families=spec.families())
            env = lambda: spec.make_env(pool)
        pool_start_s = time.perf_counter() - t_pool
        cpu0, host0 = meter.seconds(), time.process_time()
        with profile_stages() as prof:
            result = rollout(instances, policy, env, k=args.k, seed=args.seed, concurrency=args.concurrency,
                             backend=args.backend, on_error="skip", policy_name="oracle")
        cpu_s, host_cpu_s = meter.seconds() - cpu0, time.process_time() - host0
    except (EnvClientError, TaskError, SandboxError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if pool is not None:
            pool.close()
        meter.close()
        if tmp is not None:
            tmp.cleanup()
    s = result.summary
    per_episode = max(s.new, 1)
    steps = [st for t in result.trajectories for st in t.steps]
    exec_total = sum(st.exec_s for st in steps)
    stages = prof.summary(s.new)
    _print_table(result, names)
    _print_stages(stages, cpu_s / per_episode * 1000, host_cpu_s / per_episode * 1000, meter.scope)
    for name, err in build_failed.items():
        print(f"build failed: {name}: {err}", file=sys.stderr)
    out = {"episodes_per_s": s.episodes_per_s, "steps_per_s": s.steps_per_s,
           "env_overhead_p50_ms": s.env_overhead_p50_ms, "exec_p50_ms": s.exec_p50_ms, "episodes": s.new,
           "steps": s.steps, "wall_s": s.wall_s, "exec_total_s": round(exec_total, 3),
           "env_total_s": round(sum(st.duration_s for st in steps) - exec_total, 3), "backend": args.backend,
           "sandbox": args.sandbox,
           "concurrency": args.concurrency, "oracle_success_rate": s.success_rate, "failed": s.failed,
           "families": names, "build_failed": sorted(build_failed), "cpus": os.cpu_count(),
           "python": platform.python_version(), "quick": args.quick, "pool_start_s": round(pool_start_s, 3),
           "cpu_ms_per_episode": round(cpu_s / per_episode * 1000, 3), "cpu_scope": meter.scope,
           "host_cpu_ms_per_episode": round(host_cpu_s / per_episode * 1000, 3),
           "stages": stages, "load_avg_1m_start": load0, "load_avg_1m_end": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(out, sort_keys=True))
    return 0


def _print_stages(stages: dict[str, dict[str, float]], cpu_ms: float, host_cpu_ms: float, scope: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="where an episode's time goes (wall ms; CPU of the host thread)")
    for col in ("stage", "n", "p50 ms", "mean ms", "p99 ms", "host CPU ms", "ms per episode"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for stage, row in stages.items():
        table.add_row(stage, str(row["n"]), f"{row['p50_ms']:.3f}", f"{row['mean_ms']:.3f}", f"{row['p99_ms']:.3f}",
                      f"{row['cpu_mean_ms']:.3f}", f"{row['ms_per_episode']:.3f}")
    console = Console()
    console.print(table)
    console.print(f"CPU per episode {cpu_ms:.2f} ms ({scope}); this process {host_cpu_ms:.2f} ms")


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
