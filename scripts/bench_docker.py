"""Per-call latency of the docker backend beside bwrap, interleaved in one run so that both see the same load.

    python scripts/bench_docker.py [--calls 400] [--json]

Starts one warm worker of each backend (the docker engine and image must be there: ``make test-docker`` or
``scripts/with_dockerd.sh``), opens a persistent session on each and times the same snippets alternately on the
two sessions (docker then bwrap, then bwrap then docker, ...), so load drift on a shared machine hits both alike;
then one-shot sessions (a fresh runner per call) the same way. Prints p50/p95 per backend, the docker/bwrap
ratio and difference of the medians; ``--json`` ends stdout with one JSON line. ``scripts/bench_sandbox.py
--backend docker`` measures one backend against fresh processes and the original harness instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from medagentgym.sandbox import Limits, SandboxUnavailable, make_pool

SNIPPETS = {
    "print": ("python", "print(1)"),
    "pandas": ("python", ("import pandas as pd\nprint(pd.DataFrame({'a': [i % 7 for i in range(500)], "
                          "'b': range(500)}).groupby('a')['b'].mean().round(2).to_dict())")),
    "sql": ("sql", "SELECT a % 3 AS k, COUNT(*) AS n FROM t GROUP BY k"),
}


def _call(session, kind: str, source: str) -> float:
    start = time.perf_counter()
    res = session.run_sql(source, database="bench/bench.db") if kind == "sql" else session.run_python(source)
    elapsed = (time.perf_counter() - start) * 1000
    if not res.ok:
        raise SystemExit(f"bench_docker: a snippet failed in the sandbox: {res.stderr.strip()[-300:]}")
    return elapsed


def interleaved(sessions: dict, calls: int, names: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    """``{snippet: {backend: [ms, ...]}}``, the backends alternating call by call (and in alternating order)."""
    out: dict[str, dict[str, list[float]]] = {}
    order = list(sessions)
    for name in names:
        kind, source = SNIPPETS[name]
        for backend in order:  # warm-up: the first call may fork the session's runner
            _call(sessions[backend], kind, source)
        out[name] = {b: [] for b in order}
        for i in range(calls):
            for backend in (order if i % 2 == 0 else order[::-1]):
                out[name][backend].append(_call(sessions[backend], kind, source))
    return out


def summarize(samples: dict[str, dict[str, list[float]]], prefix: str = "") -> dict[str, float]:
    """Medians, 95th percentiles, ratio and difference of the medians, as flat keys."""
    row: dict[str, float] = {}
    for name, by_backend in samples.items():
        for backend, values in by_backend.items():
            row[f"{prefix}{name}_{backend}_p50_ms"] = round(statistics.median(values), 3)
            row[f"{prefix}{name}_{backend}_p95_ms"] = round(statistics.quantiles(values, n=20)[-1], 3)
        docker, bwrap = row[f"{prefix}{name}_docker_p50_ms"], row[f"{prefix}{name}_bwrap_p50_ms"]
        row[f"{prefix}{name}_ratio"] = round(docker / bwrap, 2)
        row[f"{prefix}{name}_diff_ms"] = round(docker - bwrap, 3)
    return row


def main(argv: list[str] | None = None) -> int:
    """Parse flags, measure, print; return the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=400, help="timed calls per snippet and backend, persistent "
                   "session (one-shot sessions get a quarter); default 400")
    p.add_argument("--json", action="store_true", help="end stdout with one line holding the results as JSON")
    args = p.parse_args(argv)
    if args.calls < 2:
        p.error(f"--calls={args.calls} is invalid: use at least 2")
    with tempfile.TemporaryDirectory(prefix="bench-docker-") as tmp:
        data = Path(tmp) / "bench"
        data.mkdir()
        with sqlite3.connect(data / "bench.db") as conn:
            conn.execute("CREATE TABLE t (a INTEGER)")
            conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(1000)])
        conn.close()
        os.chmod(tmp, 0o755)
        os.chmod(data, 0o755)
        os.chmod(data / "bench.db", 0o644)
        try:
            pools = {b: make_pool(b, workers=1, limits=Limits(wall_s=30.0), mounts={"bench": data})
                     for b in ("docker", "bwrap")}
        except SandboxUnavailable as exc:
            print(f"bench_docker: {exc}", file=sys.stderr)
            return 2
        try:
            result: dict[str, object] = {"calls": args.calls, "date": time.strftime("%Y-%m-%d"),
                                         "loadavg_1m": round(os.getloadavg()[0], 2)}
            for prefix, persistent, calls, names in (("", True, args.calls, ("print", "pandas", "sql")),
                                                     ("oneshot_", False, max(2, args.calls // 4), ("print",))):
                sessions = {b: pool.session(persistent=persistent) for b, pool in pools.items()}
                try:
                    result.update(summarize(interleaved(sessions, calls, names), prefix))
                finally:
                    for s in sessions.values():
                        s.close()
        finally:
            for pool in pools.values():
                pool.close()
    print(f"{'call':<16}{'docker p50 (p95) ms':>22}{'bwrap p50 (p95) ms':>22}{'ratio':>8}{'diff ms':>9}")
    for key in [k[:-len("_ratio")] for k in result if k.endswith("_ratio")]:
        cells = [f"{result[f'{key}_{b}_p50_ms']:.2f} ({result[f'{key}_{b}_p95_ms']:.2f})" for b in ("docker", "bwrap")]
        print(f"{key:<16}{cells[0]:>22}{cells[1]:>22}{result[f'{key}_ratio']:>8.2f}{result[f'{key}_diff_ms']:>9.2f}")
    print(f"load average at start: {result['loadavg_1m']} ({os.cpu_count()} CPUs)")
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # one line, not a traceback; 130 = killed by SIGINT, as shells report it
        print("\ninterrupted: nothing saved "
              "(the benchmark prints its numbers only when it finishes); rerun the same command",
              file=sys.stderr)
        sys.exit(130)
