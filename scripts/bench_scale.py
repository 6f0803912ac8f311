"""Benchmark hundreds of episodes at once on one machine: the elastic sandbox pool under 16 / 64 / 256 episodes.

    python scripts/bench_scale.py [--levels 16,64,256] [--think-s 2] [--rounds 2] [--families id] [--json]
                                  [--plot docs/img/scale.png] [--max-workers N] [--tasks-root DIR]

For each level N, a fresh bwrap pool (2 warm workers, the default cap unless ``--max-workers``) serves N episodes
at once, ``--rounds`` times: N threads each play one episode of a mix of families (the oracle's actions, with
``--think-s`` seconds of idle think time before every turn standing in for the model), so N sandbox sessions are
open at the same time, mostly idle, as in RL rollouts. The first round grows the pool from 2 workers to N; the
next ones find it warm. A sampler reads the memory of every worker's processes (``/proc/<pid>/smaps_rollup``)
while the sessions are open.

Prints a table per level and, with ``--json``, ends stdout with ONE JSON line: per level and round the episodes/s,
p50/p99 latency of a step (``env.step`` as the caller sees it: parse, sandbox call, grading) and of a reset
(which includes starting a worker when none is idle), failures with their one-line reason; per level the peak
workers, the host memory per live session (RSS, PSS: shared pages divided among their users, anonymous: private to
the session's jail) and in total, CPU seconds on the host side (this process: episodes, parsing, grading) and in
the jails (workers: starts, imports, user code), and where the episodes' wall time went (reset, think, user code,
env overhead, close); overall the memory per session measured at the largest level and the number of concurrent
sessions that would fill the machine's memory. ``--plot`` draws memory and latency against concurrency.
Builds the families at size ``tiny`` into a temporary directory unless ``--tasks-root`` is given. Writes nothing
else. Heavy at 256: several core-minutes of worker starts; run it on purpose, not in a loop.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from medagentgym import tasks
from env_client.errors import EnvClientError
from env_client.policies import PolicyOutput, bind, make_policy
from env_client.rollout import EnvSpec
from medagentgym.tasks.base import TaskError
from sandbox import SandboxError, make_pool
from sandbox.pool import memory_limit_mb

_ROLLUP_KEYS = ("Rss", "Pss", "Pss_Anon", "Private_Clean", "Private_Dirty")


def _tree(root: int) -> list[int]:
    """``root`` and all its descendants (through every thread's children list)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return found


def _rollup(pid: int) -> dict[str, int]:
    """kB figures of ``/proc/<pid>/smaps_rollup`` (empty when the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB" and parts[0].rstrip(":") in _ROLLUP_KEYS:
                    out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        pass
    return out


def pool_memory(pool: Any) -> dict[str, Any]:
    """MiB of every worker's processes: ``rss``, ``pss``, ``anon`` (PSS of anonymous pages: what the jails
    hold privately), ``private``; PSS by role (``server``, ``zygote-light``, ``zygote-ml``, ``spare-*``,
    ``runner``, ``bwrap``); ``processes``, ``busy`` (sessions open) and ``lean`` workers at the time."""
    total = dict.fromkeys(_ROLLUP_KEYS, 0)
    roles = pool.process_roles(timeout=2.0)
    by_role: dict[str, float] = {}
    procs = lean = 0
    for worker in list(pool._workers):
        lean += "pandas" not in worker.ready.get("preloaded", [])
        for pid in _tree(worker.proc.pid):
            got = _rollup(pid)
            procs += bool(got)
            for key in _ROLLUP_KEYS:
                total[key] += got.get(key, 0)
            role = roles.get(pid, "bwrap" if pid == worker.proc.pid else "call")
            by_role[role] = by_role.get(role, 0) + got.get("Pss", 0) / 1024
    mib = {k: round(v / 1024, 1) for k, v in total.items()}
    return {"rss": mib["Rss"], "pss": mib["Pss"], "anon": mib["Pss_Anon"],
            "private": round(mib["Private_Clean"] + mib["Private_Dirty"], 1), "processes": procs,
            "busy": pool.stats()["busy"], "workers": len(pool._workers), "lean": lean,
            "pss_by_role": {k: round(v, 1) for k, v in sorted(by_role.items())}}


def pool_cpu_s(pool: Any) -> float:
    """CPU seconds used so far by every worker's processes (and the children they reaped)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for worker in list(pool._workers):
        try:
            with open(f"/proc/{worker.proc.pid}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        total += sum(int(f) for f in raw[raw.rfind(b")") + 2:].split()[11:15]) / tick
        for pid in _tree(worker.proc.pid)[1:]:
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            fields = raw[raw.rfind(b")") + 2:].split()
            if int(fields[1]) == worker.proc.pid:  # the server (bwrap's child): it and all it reaped
                total += sum(int(f) for f in fields[11:15]) / tick
    return total


def _self_rss_mib() -> float:
    return round(_rollup(os.getpid()).get("Rss", 0) / 1024, 1)


def _mem_available_mib() -> int:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) // 1024 for line in fh if line.startswith("MemAvailable:"))


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Thinking:
    """A policy that waits ``think_s`` before each turn (the model's latency), then plays the oracle's action."""

    def __init__(self, inner: Any, think_s: float, clock: dict[str, float]) -> None:
        self.inner, self.think_s, self.clock = inner, think_s, clock

    def act(self, messages: list[dict], *, tools: list[dict] | None = None, seed: int | None = None) -> PolicyOutput:
        time.sleep(self.think_s)
        self.clock["think"] += self.think_s
        return self.inner.act(messages, tools=tools, seed=seed)


def play(env: Any, policy: Any, instance: Any, seed: int, think_s: float) -> dict[str, Any]:
    """One episode with every phase timed (seconds): reset, think, steps (the caller's view), close."""
    clock = {"think": 0.0}
    p = Thinking(bind(policy, instance), think_s, clock)
    t0 = time.perf_counter()
    obs, _ = env.reset(instance, seed=seed)
    reset_s = time.perf_counter() - t0
    messages, tools, steps = list(obs.messages), obs.tools, []
    try:
        while True:
            out = p.act(messages, tools=tools, seed=seed + len(steps))
            t = time.perf_counter()
            result = env.step(out.text)
            steps.append(time.perf_counter() - t)
            if result.terminated or result.truncated:
                break
            messages.append({"role": "assistant", "content": out.text})
            messages.extend(result.observation.messages)
    finally:
        t = time.perf_counter()
        env.close()
        close_s = time.perf_counter() - t
    traj = env.trajectory
    exec_s = sum(st.exec_s for st in traj.steps)
    return {"family": instance.family, "reset_s": reset_s, "steps_s": steps, "think_s": clock["think"],
            "exec_s": exec_s, "close_s": close_s, "wall_s": time.perf_counter() - t0,
            "correct": bool(traj.final and traj.final.verdict and traj.final.verdict.get("correct"))}


def run_round(pool: Any, spec: EnvSpec, policy: Any, instances: list[Any], think_s: float,
              sample_s: float) -> dict[str, Any]:
    """All ``instances`` at once, one thread each; memory sampled while they run."""
    samples: list[dict[str, float]] = []
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(sample_s):
            samples.append({**pool_memory(pool), "self_rss": _self_rss_mib(), "available": _mem_available_mib()})

    def episode(i: int) -> dict[str, Any] | str:
        env = spec.make_env(pool)
        try:
            return play(env, policy, instances[i], seed=i, think_s=think_s)
        except Exception as exc:  # noqa: BLE001 - a failed episode is reported with its reason, the round goes on
            return f"{type(exc).__name__}: {exc}".splitlines()[0][:400]

    watcher = threading.Thread(target=sampler, name="bench-sampler", daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(instances), thread_name_prefix="episode") as ex:
        outcomes = list(ex.map(episode, range(len(instances))))
    wall = time.perf_counter() - t0
    stop.set()
    watcher.join()
    done = [o for o in outcomes if isinstance(o, dict)]
    errors = sorted({o for o in outcomes if isinstance(o, str)})
    steps = [s for o in done for s in o["steps_s"]]
    resets = [o["reset_s"] for o in done]
    peak = max(samples, key=lambda s: (s["busy"], s["pss"]), default=None)
    return {
        "episodes": len(instances), "completed": len(done), "failed": len(instances) - len(done),
        "errors": errors[:5], "correct": sum(o["correct"] for o in done), "wall_s": round(wall, 2),
        "episodes_per_s": round(len(done) / wall, 3) if wall else 0.0,
        "step_p50_ms": round(_pct(steps, 0.5) * 1000, 2), "step_p99_ms": round(_pct(steps, 0.99) * 1000, 2),
        "reset_p50_ms": round(_pct(resets, 0.5) * 1000, 2), "reset_p99_ms": round(_pct(resets, 0.99) * 1000, 2),
        "time_s": {"reset": round(sum(resets), 2), "think": round(sum(o["think_s"] for o in done), 2),
                   "user_code": round(sum(o["exec_s"] for o in done), 2),
                   "env_overhead": round(sum(steps) - sum(o["exec_s"] for o in done), 2),
                   "close": round(sum(o["close_s"] for o in done), 2)},
        "peak_sample": peak, "samples": len(samples),
        "min_available_mib": min((s["available"] for s in samples), default=None),
    }


def run_level(n: int, args: argparse.Namespace, spec: EnvSpec, policy: Any, mix: list[Any]) -> dict[str, Any]:
    """A fresh pool, ``args.rounds`` rounds of ``n`` concurrent episodes; CPU split host side / jails."""
    cpu0 = os.times()
    t0 = time.perf_counter()
    pool = make_pool("bwrap", workers=2, max_workers=args.max_workers, idle_s=3600,
                     acquire_timeout=args.acquire_timeout)
    start_s = time.perf_counter() - t0
    cap, cap_source = pool.max_workers, pool.cap_source
    rounds = []
    cycle = itertools.cycle(mix)
    try:
        for _ in range(args.rounds):
            rounds.append(run_round(pool, spec, policy, [next(cycle) for _ in range(n)], args.think_s,
                                    args.sample_s))
        peak_workers = pool.stats()["peak"]
        jail_cpu = pool_cpu_s(pool)
    finally:
        pool.close()
    cpu1 = os.times()
    host_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    peaks = [r["peak_sample"] for r in rounds if r["peak_sample"]]
    peak = max(peaks, key=lambda s: (s["busy"], s["pss"]), default=None)
    per_session = None
    if peak and peak["busy"]:
        per_session = {k: round(peak[k] / peak["busy"], 1) for k in ("rss", "pss", "anon", "private")}
    return {"concurrency": n, "cap": cap, "cap_source": cap_source, "pool_start_s": round(start_s, 2),
            "peak_workers": peak_workers, "rounds": rounds, "memory_at_peak_mib": peak,
            "mib_per_live_session": per_session, "host_cpu_s": round(host_cpu, 1), "jail_cpu_s": round(jail_cpu, 1)}


def summarize(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Memory per session (at the largest level, and the slope between the two largest) and the concurrency
    at which the machine's memory would be full."""
    measured = [lv for lv in levels if lv["memory_at_peak_mib"] and lv["memory_at_peak_mib"]["busy"]]
    total_mib = memory_limit_mb()
    out: dict[str, Any] = {"memory_mib": total_mib}
    if not measured:
        return out
    top = measured[-1]
    per = top["mib_per_live_session"]["pss"]
    out["pss_mib_per_session"] = per
    if len(measured) >= 2:
        a, b = measured[-2]["memory_at_peak_mib"], top["memory_at_peak_mib"]
        if b["busy"] > a["busy"]:
            out["marginal_pss_mib_per_session"] = round((b["pss"] - a["pss"]) / (b["busy"] - a["busy"]), 1)
    marginal = out.get("marginal_pss_mib_per_session") or per
    out["sessions_to_fill_memory"] = int(total_mib // max(marginal, 1e-6))
    return out


def print_tables(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    table = Table(title=f"{result['episodes_per_round_note']}")
    cols = ("concurrency", "round", "done/failed", "episodes/s", "step p50 / p99 ms", "reset p50 / p99 ms",
            "peak workers", "PSS MiB/session", "RSS MiB/session", "PSS total GiB", "host / jail CPU s")
    for col in cols:
        table.add_column(col, justify="right")
    for lv in result["levels"]:
        per = lv["mib_per_live_session"] or {}
        peak = lv["memory_at_peak_mib"] or {}
        for i, r in enumerate(lv["rounds"]):
            first = i == 0
            table.add_row(str(lv["concurrency"]) if first else "", str(i + 1), f"{r['completed']}/{r['failed']}",
                          f"{r['episodes_per_s']:.2f}", f"{r['step_p50_ms']:.0f} / {r['step_p99_ms']:.0f}",
                          f"{r['reset_p50_ms']:.0f} / {r['reset_p99_ms']:.0f}",
                          str(lv["peak_workers"]) if first else "", f"{per.get('pss', 0):.1f}" if first else "",
                          f"{per.get('rss', 0):.1f}" if first else "",
                          f"{peak.get('pss', 0) / 1024:.2f}" if first else "",
                          f"{lv['host_cpu_s']:.0f} / {lv['jail_cpu_s']:.0f}" if first else "")
    console.print(table)
    for lv in result["levels"]:
        for i, r in enumerate(lv["rounds"]):
            t = r["time_s"]
            total = sum(t.values()) or 1.0
            share = ", ".join(f"{k} {v / total:.0%}" for k, v in t.items())
            console.print(f"{lv['concurrency']} x round {i + 1}: episode time went to {share}")
            for err in r["errors"]:
                console.print(f"[red]failed[/red] {err}")
    for lv in result["levels"]:
        peak = lv["memory_at_peak_mib"]
        if peak:
            roles = ", ".join(f"{k} {v:.0f}" for k, v in sorted(peak["pss_by_role"].items(), key=lambda kv: -kv[1]))
            console.print(f"{lv['concurrency']}: at the peak sample, {peak['busy']} sessions open on {peak['workers']} "
                          f"workers ({peak['lean']} lean): PSS MiB by role: {roles}")
    s = result["summary"]
    if "pss_mib_per_session" in s:
        console.print(f"memory per live session {s['pss_mib_per_session']} MiB PSS at the largest level "
                      f"(marginal {s.get('marginal_pss_mib_per_session', '-')} MiB): "
                      f"{s['sessions_to_fill_memory']} sessions fill {s['memory_mib'] / 1024:.1f} GiB")


def plot(result: dict[str, Any], path: Path) -> None:
    """Memory per session and in total, and step latency, against concurrency (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [lv for lv in result["levels"] if lv["mib_per_live_session"]]
    xs = [lv["concurrency"] for lv in levels]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(xs, [lv["mib_per_live_session"]["pss"] for lv in levels], "o-", label="PSS per live session (MiB)")
    ax1.plot(xs, [lv["mib_per_live_session"]["anon"] for lv in levels], "s--", label="anonymous per session (MiB)")
    ax1b = ax1.twinx()
    ax1b.plot(xs, [lv["memory_at_peak_mib"]["pss"] / 1024 for lv in levels], "^:", color="tab:red",
              label="PSS total (GiB)")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("concurrent episodes")
    ax1.set_ylabel("MiB per session")
    ax1b.set_ylabel("GiB in total", color="tab:red")
    ax1.legend(loc="upper left", fontsize=8)
    ax1.set_title("host memory of the sandbox")
    for q, style in (("step_p50_ms", "o-"), ("step_p99_ms", "s--")):
        ax2.plot(xs, [lv["rounds"][-1][q] for lv in levels], style, label=f"step {q.split('_')[1]} (last round)")
    ax2.plot(xs, [lv["rounds"][0]["reset_p99_ms"] for lv in levels], "^:", label="reset p99 (first round)")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("concurrent episodes")
    ax2.set_ylabel("ms")
    ax2.legend(fontsize=8)
    ax2.set_title("latency seen by the caller")
    fig.suptitle(result["machine_note"], fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def build_mix(root: Path, families: list[str], split: str) -> list[Any]:
    """Test instances of the families, interleaved (family 1's first, family 2's first, ...)."""
    per = [tasks.make(name, root=root).instances(split) for name in families]
    mix = [inst for group in itertools.zip_longest(*per) for inst in group if inst is not None]
    if not mix:
        raise TaskError(f"no {split} instances of {', '.join(families)} under {root}")
    return mix


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", default="16,64,256", help="concurrent episodes per level; default 16,64,256")
    p.add_argument("--rounds", type=int, default=2, help="rounds of N episodes per level; default 2")
    p.add_argument("--think-s", type=float, default=2.0, help="idle think time before every turn; default 2")
    p.add_argument("--families", default="id",
                   help="a suite (id, ood) or comma-separated families; default id (the flagship mix)")
    p.add_argument("--tasks-root", type=Path, default=None, help="built tasks root; default: build tiny into a temp dir")
    p.add_argument("--max-workers", type=int, default=None, help="the pools' cap; default the pool's own (memory)")
    p.add_argument("--acquire-timeout", type=float, default=30.0, help="pool acquire_timeout (s); default 30")
    p.add_argument("--sample-s", type=float, default=3.0, help="seconds between memory samples; default 3")
    p.add_argument("--plot", type=Path, default=None, help="write the memory/latency plot (PNG) here")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line of results")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = p.parse_args(argv)
    tmp = None
    try:
        levels = [int(x) for x in args.levels.split(",") if x.strip()]
        if not levels or min(levels) < 1 or args.rounds < 1:
            raise ValueError(f"--levels {args.levels!r} / --rounds {args.rounds}: use positive integers")
        families = list(tasks.SUITES[args.families]) if args.families in tasks.SUITES else [
            f.strip() for f in args.families.split(",") if f.strip()]
        root = args.tasks_root
        if root is None:
            tmp = tempfile.TemporaryDirectory(prefix="bench-scale-")
            root = Path(tmp.name)
            failed = tasks.registry.build_families(families, root, size="tiny", seed=0, jobs=os.cpu_count() or 1,
                                                   skip_errors=True)[1]
            families = [f for f in families if f not in failed]
        mix = build_mix(root, families, "test")
        spec = EnvSpec(tasks_root=str(root))
        policy = make_policy("oracle", families=spec.families())
        load = os.getloadavg()[0]
        results = [run_level(n, args, spec, policy, mix) for n in levels]
    except (EnvClientError, TaskError, SandboxError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if tmp is not None:
            tmp.cleanup()
    machine = (f"{os.cpu_count()} CPUs, {memory_limit_mb() / 1024:.1f} GiB, load {load:.1f} at start "
               f"(end {os.getloadavg()[0]:.1f}), {dt.date.today().isoformat()}")
    out = {"levels": results, "summary": summarize(results), "families": families, "think_s": args.think_s,
           "rounds": args.rounds, "machine_note": machine, "cpus": os.cpu_count(),
           "python": platform.python_version(),
           "episodes_per_round_note": f"{', '.join(families)}; oracle + {args.think_s:g} s think per turn; "
                                      f"{machine}"}
    print_tables(out)
    if args.plot:
        plot(out, args.plot)
    if args.json:
        print(json.dumps(out, sort_keys=True))
    return 0 if all(r["failed"] == 0 for lv in results for r in lv["rounds"]) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # one line, not a traceback; 130 = killed by SIGINT, as shells report it
        print("\ninterrupted: nothing saved (the benchmark writes nothing but its --plot); rerun the same command",
              file=sys.stderr)
        sys.exit(130)
