"""Benchmark hundreds of episodes at once on one machine: the elastic sandbox pool under 16 / 64 / 256 episodes.

    python scripts/bench_scale.py [--levels 16,64,256] [--think-s 2] [--rounds 2] [--families id] [--json]
                                  [--plot docs/img/bench_scale.png] [--max-workers N] [--tasks-root DIR] [--prewarm]
    python scripts/bench_scale.py --scale-out [--server-cap 16] [--think-s 2] [--json] [--plot PATH]

For each level N, a fresh bwrap pool (2 warm workers, the default cap unless ``--max-workers``) serves N episodes
at once, ``--rounds`` times: N threads each play one episode of a mix of families (the oracle's actions, with
``--think-s`` seconds of idle think time before every turn standing in for the model). Each episode waits after its
first step until all N have made theirs, as a GRPO step's episodes wait for a batched generation, so N sandbox
sessions are open at the same time, idle between turns, holding what their first call loaded (pandas,
scikit-learn); the memory of every worker's processes (``/proc/<pid>/smaps_rollup``) is read at that moment, by
role (server, zygotes, spares, runners). The first round grows the pool from 2 workers
to N (its resets include starting workers); the next ones find it warm. With ``--prewarm`` the N workers are
started before round 1 (``pool.prewarm``; ``prewarm_s``), so round 1's reset p50/p99 shows what a step finds when
its known demand was started ahead.

Prints a table per level and, with ``--json``, ends stdout with ONE JSON line: per level and round the episodes/s,
p50/p99 latency of a step (``env.step`` as the caller sees it: parse, sandbox call, grading) and of a reset
(which includes starting a worker when none is idle), failures with their one-line reason; per level the peak
workers, the host memory per live session (RSS, PSS: shared pages divided among their users, anonymous: private to
the session's jail) and in total, CPU seconds on the host side (this process: episodes, parsing, grading) and in
the jails (workers: starts, imports, user code), and where the episodes' wall time went (reset, think, user code,
env overhead, close); overall the memory per session measured at the largest level and the number of concurrent
sessions that would fill the machine's memory. ``--plot`` draws memory and latency against concurrency.

``--scale-out`` simulates two machines on this one instead: two ``medagentgym serve`` processes whose pools
hold at most ``--server-cap`` workers each; the same ``4 x cap`` episodes on one server (``cap`` at once) and on
both (``2 x cap`` at once, ``EnvServers`` round-robin), the ratio from that one run; then ``4 x cap`` more with one
server killed (SIGKILL to its process group) while it holds open episodes, counting what the store holds (stored,
unique, missing: nothing may be lost or duplicated) and the episodes replayed on the other server; then a two-node
Ray cluster (``ray start --head`` + ``ray start --address``, the ``ray`` extra) running the rollout's Ray actors,
one sandbox pool each, with the actors counted per node. Exit status 1 when the kill lost or duplicated anything.

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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from medagentgym.env_client.errors import EnvClientError
from medagentgym.env_client.policies import PolicyOutput, bind, make_policy
from medagentgym.env_client.rollout import EnvSpec
from medagentgym import tasks
from medagentgym.tasks.base import TaskError
from medagentgym.sandbox import SandboxError, make_pool
from medagentgym.sandbox._cgroup import jail_tree as _tree
from medagentgym.sandbox._clock import process_cpu_s
from medagentgym.sandbox.pool import default_max_workers, memory_limit_mb

_ROLLUP_KEYS = ("Rss", "Pss", "Pss_Anon", "Private_Clean", "Private_Dirty")




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
            role = roles.get(pid, "bwrap" if pid == worker.proc.pid else "runner")  # a runner started since
            by_role[role] = by_role.get(role, 0) + got.get("Pss", 0) / 1024
    mib = {k: round(v / 1024, 1) for k, v in total.items()}
    return {"rss": mib["Rss"], "pss": mib["Pss"], "anon": mib["Pss_Anon"],
            "private": round(mib["Private_Clean"] + mib["Private_Dirty"], 1), "processes": procs,
            "busy": pool.stats()["busy"], "workers": len(pool._workers), "lean": lean,
            "pss_by_role": {k: round(v, 1) for k, v in sorted(by_role.items())}}


def pool_cpu_s(pool: Any) -> float:
    """CPU seconds used so far by every worker's processes, and by the ones they started and reaped (each live
    process's own and its reaped children's times: nothing counted twice)."""
    return sum(process_cpu_s(pid) or 0.0 for worker in list(pool._workers) for pid in _tree(worker.proc.pid))


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


class Gate:
    """Holds every episode of a round after its first step until all have made theirs (or ended, or failed): then
    all ``n`` sessions are open at once, idle between turns and holding what their first call loaded, as while a
    GRPO step's episodes wait for a batched generation. The last one to arrive samples the pool's memory then."""

    def __init__(self, n: int, on_open: Any) -> None:
        self.n, self.on_open, self.settled = n, on_open, 0
        self.cond = threading.Condition()
        self.opened_at: float | None = None

    def settle(self) -> None:
        with self.cond:
            self.settled += 1
            if self.settled == self.n:
                self.opened_at = time.perf_counter()
                self.on_open()
                self.cond.notify_all()
            else:
                while self.settled < self.n:
                    self.cond.wait()


def play(env: Any, policy: Any, instance: Any, seed: int, think_s: float, gate: Gate) -> dict[str, Any]:
    """One episode with every phase timed (seconds): reset, think, steps (the caller's view), the wait at the
    gate after the first step (or at the end of a one-step or failed episode), close."""
    clock = {"think": 0.0}
    p = Thinking(bind(policy, instance), think_s, clock)
    t0 = time.perf_counter()
    settled, gate_s, reset_s = False, 0.0, 0.0
    steps: list[float] = []
    try:
        obs, _ = env.reset(instance, seed=seed)
        reset_s = time.perf_counter() - t0
        messages, tools = list(obs.messages), obs.tools
        while True:
            out = p.act(messages, tools=tools, seed=seed + len(steps))
            t = time.perf_counter()
            result = env.step(out.text)
            steps.append(time.perf_counter() - t)
            if result.terminated or result.truncated:
                break
            if not settled:  # after its first call, the session idles until every episode got here
                settled, t = True, time.perf_counter()
                gate.settle()
                gate_s = time.perf_counter() - t
            messages.append({"role": "assistant", "content": out.text})
            messages.extend(result.observation.messages)
    finally:
        if not settled:
            gate.settle()
        t = time.perf_counter()
        env.close()
        close_s = time.perf_counter() - t
    traj = env.trajectory
    exec_s = sum(st.exec_s for st in traj.steps)
    return {"family": instance.family, "reset_s": reset_s, "gate_s": gate_s, "steps_s": steps,
            "think_s": clock["think"], "exec_s": exec_s, "close_s": close_s, "wall_s": time.perf_counter() - t0,
            "correct": bool(traj.final and traj.final.verdict and traj.final.verdict.get("correct"))}


def run_round(pool: Any, spec: EnvSpec, policy: Any, instances: list[Any], think_s: float,
              sample_s: float) -> dict[str, Any]:
    """All ``instances`` at once, one thread each; memory sampled while they run."""
    samples: list[dict[str, float]] = []
    at_open: list[dict[str, float]] = []
    stop = threading.Event()

    def sample() -> dict[str, Any]:
        return {**pool_memory(pool), "self_rss": _self_rss_mib(), "available": _mem_available_mib()}

    def sampler() -> None:
        while not stop.wait(sample_s):
            samples.append(sample())

    gate = Gate(len(instances), lambda: at_open.append(sample()))

    def episode(i: int) -> dict[str, Any] | str:
        env = spec.make_env(pool)
        try:
            return play(env, policy, instances[i], seed=i, think_s=think_s, gate=gate)
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
    return {
        "episodes": len(instances), "completed": len(done), "failed": len(instances) - len(done),
        "errors": errors[:5], "correct": sum(o["correct"] for o in done), "wall_s": round(wall, 2),
        "episodes_per_s": round(len(done) / wall, 3) if wall else 0.0,
        "step_p50_ms": round(_pct(steps, 0.5) * 1000, 2), "step_p99_ms": round(_pct(steps, 0.99) * 1000, 2),
        "reset_p50_ms": round(_pct(resets, 0.5) * 1000, 2), "reset_p99_ms": round(_pct(resets, 0.99) * 1000, 2),
        "time_s": {"reset": round(sum(resets), 2), "wait_for_all": round(sum(o["gate_s"] for o in done), 2),
                   "think": round(sum(o["think_s"] for o in done), 2),
                   "user_code": round(sum(o["exec_s"] for o in done), 2),
                   "env_overhead": round(sum(steps) - sum(o["exec_s"] for o in done), 2),
                   "close": round(sum(o["close_s"] for o in done), 2)},
        "all_open_s": round(gate.opened_at - t0, 2) if gate.opened_at else None,
        "all_open_sample": at_open[0] if at_open else None, "samples": len(samples),
        "max_pss_mib": max((s["pss"] for s in samples + at_open), default=None),
        "min_available_mib": min((s["available"] for s in samples), default=None),
    }


def run_level(n: int, args: argparse.Namespace, spec: EnvSpec, policy: Any, stream: Iterator[Any]) -> dict[str, Any]:
    """A fresh pool, ``args.rounds`` rounds of ``n`` concurrent episodes; CPU split host side / jails."""
    cpu0 = os.times()
    t0 = time.perf_counter()
    pool = make_pool("bwrap", workers=2, max_workers=args.max_workers or n, idle_s=3600,
                     acquire_timeout=args.acquire_timeout)
    start_s = time.perf_counter() - t0
    prewarm_s = None
    if args.prewarm:  # as a trainer does while its model loads: the N workers start before round 1
        t1 = time.perf_counter()
        pool.prewarm(n, wait=True)
        prewarm_s = round(time.perf_counter() - t1, 2)
    cap, cap_source = pool.max_workers, pool.cap_source
    rounds = []
    try:
        for _ in range(args.rounds):
            rounds.append(run_round(pool, spec, policy, [next(stream) for _ in range(n)], args.think_s,
                                    args.sample_s))
        peak_workers = pool.stats()["peak"]
        jail_cpu = pool_cpu_s(pool)
    finally:
        pool.close()
    cpu1 = os.times()
    host_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    peaks = [r["all_open_sample"] for r in rounds if r["all_open_sample"]]
    peak = max(peaks, key=lambda s: (s["busy"], s["pss"]), default=None)  # all sessions open and idle
    per_session = None
    if peak and peak["busy"]:
        per_session = {k: round(peak[k] / peak["busy"], 1) for k in ("rss", "pss", "anon", "private")}
    return {"concurrency": n, "cap": cap, "cap_source": cap_source, "pool_start_s": round(start_s, 2),
            "prewarm_s": prewarm_s,
            "peak_workers": peak_workers, "rounds": rounds, "memory_at_peak_mib": peak,
            "mib_per_live_session": per_session, "host_cpu_s": round(host_cpu, 1), "jail_cpu_s": round(jail_cpu, 1)}


def summarize(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Memory per session (at the largest level, and the slope between the two largest) and the concurrency
    at which the machine's memory would be full."""
    measured = [lv for lv in levels if lv["memory_at_peak_mib"] and lv["memory_at_peak_mib"]["busy"]]
    total_mib = memory_limit_mb()
    cap, source = default_max_workers()
    out: dict[str, Any] = {"memory_mib": total_mib, "default_cap": cap, "default_cap_source": source}
    if not measured:
        return out
    top = measured[-1]
    per = top["mib_per_live_session"]["pss"]
    out["pss_mib_per_session"] = per
    if len(measured) >= 2:
        a, b = measured[-2]["memory_at_peak_mib"], top["memory_at_peak_mib"]
        if b["busy"] > a["busy"]:
            out["marginal_pss_mib_per_session"] = round((b["pss"] - a["pss"]) / (b["busy"] - a["busy"]), 1)
    marginal = out.get("marginal_pss_mib_per_session")
    cost = marginal if marginal and marginal > 0 else per
    out["sessions_to_fill_memory"] = int(total_mib // max(cost, 0.1))
    return out


def print_tables(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    table = Table(title=f"{result['episodes_per_round_note']}")
    cols = ("concurrency", "round", "done/failed", "episodes/s", "step p50 / p99 ms", "reset p50 / p99 ms",
            "all mid-episode after s", "peak workers", "PSS MiB/session", "RSS MiB/session", "PSS total GiB", "host / jail CPU s")
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
                          f"{r['all_open_s']:.1f}" if r["all_open_s"] is not None else "-",
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
            console.print(f"{lv['concurrency']}: with all sessions open, {peak['busy']} sessions on {peak['workers']} "
                          f"workers ({peak['lean']} lean): PSS MiB by role: {roles}")
    s = result["summary"]
    if "pss_mib_per_session" in s:
        console.print(f"memory per live session {s['pss_mib_per_session']} MiB PSS at the largest level "
                      f"(marginal {s.get('marginal_pss_mib_per_session', '-')} MiB): "
                      f"{s['sessions_to_fill_memory']} sessions fill {s['memory_mib'] / 1024:.1f} GiB")
    console.print(f"a pool's default cap here: {s['default_cap']} workers ({s['default_cap_source']}); "
                  f"these pools were capped at their level (--max-workers to change)")


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
    ax1.set_ylim(bottom=0)
    ax1b.set_ylim(bottom=0)
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


# ------------------------------------------------------------------------------------------ scale-out


class ThinkingOracle:
    """The oracle with ``think_s`` of idle time before each turn, as a policy for ``medagentgym.env_client.rollout``."""

    def __init__(self, oracle: Any, think_s: float) -> None:
        self.oracle, self.think_s = oracle, think_s

    def for_episode(self, instance: Any) -> Thinking:
        return Thinking(self.oracle.for_episode(instance), self.think_s, {"think": 0.0})


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_up(check: Any, proc: Any, what: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise OSError(f"{what} did not come up (exit status {proc.poll()})")
        time.sleep(0.3)


def start_env_server(root: Path, cap: int, log: Path) -> tuple[Any, str]:
    """A ``medagentgym serve`` process (its own process group) whose pool holds at most ``cap`` workers."""
    import subprocess

    import httpx

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "medagentgym", "serve", "--tasks-root", str(root),
                             "--port", str(port), "--workers", "2", "--max-workers", str(cap), "--capacity",
                             str(4 * cap), "--max-sessions-per-client", str(4 * cap), "--log-level", "warning"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    _wait_up(healthy, proc, f"env server on port {port} (log {log})")
    return proc, url


def _kill_group(proc: Any, sig: int) -> None:
    import signal as _signal

    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=60)
    except Exception:  # noqa: BLE001 - still running after the signal: force it
        os.killpg(proc.pid, _signal.SIGKILL)
        proc.wait(timeout=60)


def run_servers(instances: list[Any], policy: Any, urls: list[str], concurrency: int, store: Path | None = None,
                kill: tuple[Any, str] | None = None) -> dict[str, Any]:
    """The episodes over env servers (``EnvServers``); with ``kill``, that server's process group gets SIGKILL once
    a quarter of the episodes are stored and it holds open sessions. Counts what was stored, once or twice."""
    import signal as _signal

    import httpx

    from medagentgym.env_client.http_client import EnvServers
    from medagentgym.env_client.rollout import rollout

    servers = EnvServers(urls, health_every_s=1.0, backoff_s=0.1)
    killed_at: list[float] = []
    t0 = time.perf_counter()

    def killer() -> None:
        proc, url = kill
        while time.perf_counter() - t0 < 1800:
            stored = store.read_text().count("\n") if store.exists() else 0
            try:
                open_sessions = httpx.get(url + "/health", timeout=5).json()["sessions"]
            except (httpx.HTTPError, ValueError):
                return
            if stored >= len(instances) // 4 and open_sessions >= 1:
                _kill_group(proc, _signal.SIGKILL)
                killed_at.append(round(time.perf_counter() - t0, 2))
                return
            time.sleep(0.01)

    thread = threading.Thread(target=killer, daemon=True) if kill else None
    if thread:
        thread.start()
    result = rollout(instances, policy, servers.env, concurrency=concurrency, store=store, on_error="skip")
    wall = time.perf_counter() - t0
    if thread:
        thread.join(timeout=10)
    out = {"episodes": len(instances), "completed": result.summary.new, "failed": result.summary.failed,
           "errors": result.summary.errors[:3], "success_rate": round(result.summary.success_rate, 3),
           "wall_s": round(wall, 2), "episodes_per_s": round(result.summary.new / wall, 3),
           "episodes_per_server": dict(zip("AB", servers.episodes.values())),
           "lost_per_server": dict(zip("AB", servers.lost.values()))}
    if store is not None:
        keys = [(json.loads(line)["header"]["task_id"], json.loads(line)["header"]["sample_idx"])
                for line in store.read_text().splitlines()]
        out.update(stored=len(keys), unique=len(set(keys)), duplicates=len(keys) - len(set(keys)),
                   missing=len({i.id for i in instances} - {k[0] for k in keys}), killed_at_s=killed_at[0]
                   if killed_at else None)
    servers.close()
    return out


def run_ray(instances: list[Any], root: Path, tmp: Path, cpus_per_node: int) -> dict[str, Any]:
    """A two-node Ray cluster on this machine (``ray start --head`` + ``ray start --address``, each in its own
    process group): the rollout's Ray actors (one sandbox pool each) spread over both nodes."""
    import subprocess

    import ray

    from medagentgym.env_client.rollout import EnvSpec, rollout

    ray_bin = str(Path(sys.executable).with_name("ray"))
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    temp = Path("/tmp") / f"rays{os.getpid()}"  # Ray's socket paths must stay short
    common = ["--block", "--node-ip-address=127.0.0.1", f"--num-cpus={cpus_per_node}", "--disable-usage-stats"]
    procs = []
    try:
        procs.append(subprocess.Popen([ray_bin, "start", "--head", f"--port={port}", "--include-dashboard=false",
                                       f"--temp-dir={temp}", *common], stdout=(tmp / "ray-head.log").open("w"),
                                      stderr=subprocess.STDOUT, start_new_session=True, env=env))

        def nodes_up(n: int) -> bool:
            probe = subprocess.run([ray_bin, "status", f"--address=127.0.0.1:{port}"], capture_output=True,
                                   text=True, check=False, env=env)
            return probe.returncode == 0 and probe.stdout.count("node_") >= n

        _wait_up(lambda: nodes_up(1), procs[0], "the Ray head")
        procs.append(subprocess.Popen([ray_bin, "start", f"--address=127.0.0.1:{port}", *common],
                                      stdout=(tmp / "ray-node.log").open("w"), stderr=subprocess.STDOUT,
                                      start_new_session=True, env=env))
        _wait_up(lambda: nodes_up(2), procs[1], "the second Ray node")
        os.environ["RAY_ADDRESS"] = f"127.0.0.1:{port}"
        spec = EnvSpec(tasks_root=str(root), backend="bwrap")
        t0 = time.perf_counter()
        result = rollout(instances, "oracle", spec, concurrency=2 * cpus_per_node, backend="ray", on_error="skip")
        wall = time.perf_counter() - t0
        from ray._private.state import (
            actors as actor_table,  # the GCS's table (no dashboard needed)
        )

        per_node: dict[str, int] = {}
        for actor in actor_table().values():
            if "RayWorker" in str(actor.get("ActorClassName")):
                node = str((actor.get("Address") or {}).get("NodeID", "?"))[:8]
                per_node[node] = per_node.get(node, 0) + 1
        return {"episodes": len(instances), "completed": result.summary.new, "failed": result.summary.failed,
                "success_rate": round(result.summary.success_rate, 3), "wall_s": round(wall, 2),
                "episodes_per_s": round(result.summary.new / wall, 3), "nodes": len(ray.nodes()),
                "actors_per_node": per_node}
    finally:
        os.environ.pop("RAY_ADDRESS", None)
        if ray.is_initialized():
            ray.shutdown()
        import signal as _signal

        for proc in reversed(procs):
            _kill_group(proc, _signal.SIGTERM)
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


def scale_out(args: argparse.Namespace, root: Path, mix: list[Any], spec: EnvSpec) -> dict[str, Any]:
    """Two machines simulated on this one: two env servers (one vs both, then one killed mid-run) and a two-node
    Ray cluster."""
    import signal as _signal

    cap = args.server_cap
    oracle = make_policy("oracle", families=spec.families())
    policy = ThinkingOracle(oracle, args.think_s)
    n = 4 * cap
    if len(mix) < n:
        raise TaskError(f"--server-cap {cap} needs {n} distinct instances; the mix has {len(mix)}")
    out: dict[str, Any] = {"server_cap": cap, "think_s": args.think_s}
    with tempfile.TemporaryDirectory(prefix="bench-scale-out-") as tmp_name:
        tmp = Path(tmp_name)
        started = []
        try:
            for name in "AB":
                started.append(start_env_server(root, cap, tmp / f"server-{name}.log"))
            urls = [url for _, url in started]
            run_servers(mix[:2 * cap], policy, urls, concurrency=2 * cap)  # warm-up: both pools grow to their cap
            out["one_server"] = run_servers(mix[:n], policy, urls[:1], concurrency=cap)
            out["two_servers"] = run_servers(mix[:n], policy, urls, concurrency=2 * cap)
            out["two_over_one"] = round(out["two_servers"]["episodes_per_s"]
                                        / max(out["one_server"]["episodes_per_s"], 1e-9), 2)
            out["kill_one"] = run_servers(mix[n:2 * n] if len(mix) >= 2 * n else mix[-n:], policy, urls,
                                          concurrency=2 * cap, store=tmp / "episodes.jsonl", kill=started[0])
        finally:
            for proc, _ in started:
                _kill_group(proc, _signal.SIGTERM)
        if not args.no_ray:
            out["ray_two_nodes"] = run_ray(mix[:n], root, tmp, cpus_per_node=args.ray_cpus)
    return out


def print_scale_out(res: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"two machines on one: env servers capped at {res['server_cap']} workers each, "
                        f"{res['think_s']:g} s think per turn")
    for col in ("run", "episodes", "done/failed", "episodes/s", "per server (A / B)", "lost with A, replayed",
                "stored / unique / missing"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for key, label in (("one_server", "1 server"), ("two_servers", "2 servers"), ("kill_one", "2 servers, A killed")):
        r = res.get(key)
        if not r:
            continue
        stored = f"{r['stored']} / {r['unique']} / {r['missing']}" if "stored" in r else "-"
        table.add_row(label, str(r["episodes"]), f"{r['completed']}/{r['failed']}", f"{r['episodes_per_s']:.2f}",
                      f"{r['episodes_per_server']['A']} / {r['episodes_per_server'].get('B', 0)}",
                      str(r["lost_per_server"]["A"]), stored)
    ray_res = res.get("ray_two_nodes")
    if ray_res:
        table.add_row(f"Ray, {ray_res['nodes']} nodes", str(ray_res["episodes"]),
                      f"{ray_res['completed']}/{ray_res['failed']}", f"{ray_res['episodes_per_s']:.2f}",
                      "actors per node " + " / ".join(str(v) for v in ray_res["actors_per_node"].values()), "-", "-")
    console = Console(width=200)
    console.print(table)
    console.print(f"2 servers / 1 server: {res['two_over_one']:.2f}x episodes/s")


def plot_scale_out(res: dict[str, Any], path: Path) -> None:
    """Episodes/s of each scale-out run (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(label, res[key]["episodes_per_s"]) for key, label in
            (("one_server", "1 server"), ("two_servers", "2 servers"), ("kill_one", "2 servers,\nA killed"),
             ("ray_two_nodes", "Ray,\n2 nodes")) if key in res]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.bar([r[0] for r in runs], [r[1] for r in runs], color=["tab:gray", "tab:blue", "tab:orange", "tab:green"][:len(runs)])
    ax.set_ylabel("episodes / s")
    ax.set_title(f"scale-out on one machine (cap {res['server_cap']} workers per server)", fontsize=9)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def build_mix(root: Path, families: list[str], split: str) -> tuple[list[Any], Iterator[Any]]:
    """Test instances of the families, interleaved (family 1's first, family 2's first, ...): the distinct ones
    while every family has some left, and an endless stream in which every family keeps its share (a family's
    instances repeat once used up)."""
    per = [tasks.make(name, root=root).instances(split) for name in families]
    per = [group for group in per if group]
    if not per:
        raise TaskError(f"no {split} instances of {', '.join(families)} under {root}")
    distinct = [inst for group in zip(*per) for inst in group]
    cycles = [itertools.cycle(group) for group in per]
    stream = (next(c) for c in itertools.cycle(cycles))
    return distinct, stream


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
    p.add_argument("--max-workers", type=int, default=None,
                   help="the pools' cap; default the level (N workers for N episodes); the default cap a pool "
                        "derives from memory is reported beside")
    p.add_argument("--acquire-timeout", type=float, default=30.0, help="pool acquire_timeout (s); default 30")
    p.add_argument("--sample-s", type=float, default=3.0, help="seconds between memory samples; default 3")
    p.add_argument("--plot", type=Path, default=None, help="write the memory/latency plot (PNG) here")
    p.add_argument("--scale-out", action="store_true",
                   help="instead of the levels: two env servers (one vs two, then one killed mid-run) and a "
                        "two-node Ray cluster, all on this machine")
    p.add_argument("--server-cap", type=int, default=16, help="--scale-out: workers per env server; default 16")
    p.add_argument("--ray-cpus", type=int, default=2, help="--scale-out: CPUs per Ray node; default 2")
    p.add_argument("--no-ray", action="store_true", help="--scale-out: skip the Ray cluster")
    p.add_argument("--prewarm", action="store_true",
                   help="start each level's N workers before its first round (pool.prewarm, as a trainer does while "
                        "its model loads), timed apart as prewarm_s; round 1 then finds them up")
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
        mix, stream = build_mix(root, families, "test")
        spec = EnvSpec(tasks_root=str(root))
        policy = make_policy("oracle", families=spec.families())
        load = os.getloadavg()[0]
        if args.scale_out:
            res = scale_out(args, root, mix, spec)
        else:
            results = [run_level(n, args, spec, policy, stream) for n in levels]
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
    if args.scale_out:
        res.update(machine_note=machine, families=families)
        print_scale_out(res)
        if args.plot:
            plot_scale_out(res, args.plot)
        if args.json:
            print(json.dumps(res, sort_keys=True))
        kill = res.get("kill_one", {})
        return 0 if kill.get("duplicates") == 0 and kill.get("missing") == 0 and not kill.get("failed") else 1
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
