"""Benchmark the sandbox against the two ways code is usually executed for agents.

    python scripts/bench_sandbox.py [--backend bwrap] [--quick] [--json] [--output bench.json]

Prints a table (per-call latency percentiles and throughput) and, with ``--json``, ends stdout with ONE line
holding a JSON object (``--output`` also writes it to a file, atomically). It compares, on the same snippets
(a trivial ``print(1)``, a pandas groupby on a small frame, a sqlite query on a small database created in a
temporary directory and mounted read-only):

* the sandbox pool (``--backend``; a persistent session, the mode episodes use, and a one-shot session,
  which forks a fresh runner per call), plus concurrent throughput on all cores;
* a fresh interpreter per call (``subprocess.run([python, "-c", code])``, what a one-shot executor does);
* the original MedAgentGym harness: code written to a file, ``python file.py`` started through a shell and
  polled with ``poll()`` + ``time.sleep(1)``.

``--quick`` (under 30 s) runs fewer iterations and only 3 of the original harness's ~1 s calls.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from medagentgym.sandbox import Limits, make_pool

TRIVIAL = "print(1)"
PANDAS = (
    "import pandas as pd\n"
    "df = pd.DataFrame({'ward': [i % 7 for i in range(500)], 'los': [(i * 37) % 19 for i in range(500)]})\n"
    "print(df.groupby('ward')['los'].mean().round(3).to_dict())\n"
)
SQL = "SELECT gender, COUNT(*) AS n, ROUND(AVG(age), 2) AS mean_age FROM patients GROUP BY gender"
SQL_VIA_PYTHON = (
    "import sqlite3\n"
    "conn = sqlite3.connect('file:{db}?mode=ro', uri=True)\n"
    f"print(conn.execute({SQL!r}).fetchall())\n"
)


def make_db(folder: Path) -> Path:
    """Create a small patients database (1,000 rows) in ``folder``; return its path."""
    path = folder / "bench.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE patients (subject_id INTEGER PRIMARY KEY, gender TEXT, age INTEGER)")
    conn.executemany("INSERT INTO patients VALUES (?, ?, ?)",
                     [(i, "F" if i % 3 else "M", 20 + (i * 7) % 70) for i in range(1000)])
    conn.commit()
    conn.close()
    os.chmod(folder, 0o755)
    os.chmod(path, 0o644)  # readable by the jail's unprivileged uid
    return path


def timed(fn: Callable[[], object], n: int, warmup: int = 2) -> list[float]:
    """Call ``fn`` ``warmup + n`` times; return the last ``n`` durations in milliseconds."""
    out = []
    for i in range(warmup + n):
        start = time.perf_counter()
        fn()
        if i >= warmup:
            out.append((time.perf_counter() - start) * 1000)
    return out


def pct(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``samples``, nearest-rank."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def checked(run: Callable[[], object]) -> Callable[[], object]:
    """Wrap a sandbox call so that a failed execution stops the benchmark instead of timing an error."""

    def call():
        res = run()
        if not res.ok:
            raise SystemExit(f"benchmark snippet failed in the sandbox ({res.error_kind.value}): "
                             f"{res.stderr.strip()[-300:]}")
        return res

    return call


def fresh(code: str) -> Callable[[], object]:
    """A fresh interpreter per call: the venv's interpreter binary, no shell."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}

    def call():
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"fresh-process snippet failed: {proc.stderr.decode()[-300:]}")

    return call


def original(code: str, workdir: Path) -> Callable[[], object]:
    """The original harness: write a file, start it through a shell, poll once per second."""
    path = workdir / "snippet.py"
    path.write_text(code)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"

    def call():
        proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while proc.poll() is None:
            time.sleep(1)
        proc.communicate()

    return call


def throughput(pool, threads: int, duration: float) -> float:
    """Executions per second of ``print(1)`` with ``threads`` sessions hammering the pool at once."""
    counts = [0] * threads
    barrier = threading.Barrier(threads + 1)
    stop = threading.Event()
    errors: list[str] = []

    def hammer(i: int) -> None:
        with pool.session() as session:
            session.run_python(TRIVIAL)
            barrier.wait()
            while not stop.is_set():
                if not session.run_python(TRIVIAL).ok:
                    errors.append("a concurrent print(1) failed")
                    return
                counts[i] += 1

    workers = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(duration)
    stop.set()
    for w in workers:
        w.join()
    if errors:
        raise SystemExit(errors[0])
    return sum(counts) / (time.perf_counter() - start)


def measure(args: argparse.Namespace) -> dict:
    """Run every measurement; return the flat result dict printed with ``--json``."""
    n = args.iterations
    threads = args.threads or max(2, min(4, os.cpu_count() or 2))
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        tmp_path = Path(tmp)
        data = tmp_path / "data"
        data.mkdir()
        db = make_db(data)
        mounts = {"bench": data}
        start = time.perf_counter()
        pool = make_pool(args.backend, workers=threads, limits=Limits(wall_s=30.0), mounts=mounts,
                         allow_unisolated=args.backend == "local")
        startup_s = time.perf_counter() - start
        try:
            samples: dict[str, list[float]] = {}
            for mode, persistent in (("", True), ("oneshot_", False)):
                with pool.session(persistent=persistent) as s:
                    samples[f"{mode}trivial"] = timed(checked(lambda: s.run_python(TRIVIAL)), n)
                    samples[f"{mode}pandas"] = timed(checked(lambda: s.run_python(PANDAS)), max(5, n // 2))
                    samples[f"{mode}sqlite"] = timed(
                        checked(lambda: s.run_sql(SQL, database="bench/bench.db")), max(5, n // 2))
            exec_per_s = throughput(pool, threads, args.duration)
            layers = list(pool.layers)
        finally:
            pool.close()
        few = max(3, n // 10)  # a fresh interpreter costs 10-100x a sandbox call; pandas ~0.3-1 s more
        samples["fresh_trivial"] = timed(fresh(TRIVIAL), few, warmup=1)
        samples["fresh_pandas"] = timed(fresh(PANDAS), max(3, n // 20), warmup=1)
        samples["fresh_sqlite"] = timed(fresh(SQL_VIA_PYTHON.format(db=db)), few, warmup=1)
        samples["original_trivial"] = timed(original(TRIVIAL, tmp_path), args.original_iterations, warmup=0)
    p50 = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "backend": args.backend,
        "layers": layers,
        "session_mode": "persistent",
        "p50_ms": round(p50["trivial"], 3),
        "p95_ms": round(pct(samples["trivial"], 0.95), 3),
        "pandas_p50_ms": round(p50["pandas"], 3),
        "sqlite_p50_ms": round(p50["sqlite"], 3),
        "oneshot_p50_ms": round(p50["oneshot_trivial"], 3),
        "oneshot_pandas_p50_ms": round(p50["oneshot_pandas"], 3),
        "oneshot_sqlite_p50_ms": round(p50["oneshot_sqlite"], 3),
        "exec_per_s": round(exec_per_s, 1),
        "threads": threads,
        "fresh_process_p50_ms": round(p50["fresh_trivial"], 3),
        "fresh_process_pandas_p50_ms": round(p50["fresh_pandas"], 3),
        "fresh_process_sqlite_p50_ms": round(p50["fresh_sqlite"], 3),
        "original_p50_ms": round(p50["original_trivial"], 3),
        "speedup_vs_fresh_pandas": round(p50["fresh_pandas"] / p50["pandas"], 1),
        "speedup_vs_original": round(p50["original_trivial"] / p50["trivial"], 1),
        "pool_startup_s": round(startup_s, 3),
        "iterations": n,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def print_table(r: dict) -> None:
    """Render the results as a rich table on stdout."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sandbox benchmark: backend={r['backend']}, {r['cpu_count']} CPUs, {r['date']}")
    for col in ("method", "print(1) p50 ms", "pandas p50 ms", "sqlite p50 ms"):
        table.add_column(col, justify="right" if "ms" in col else "left")
    table.add_row(f"{r['backend']} pool, persistent session", f"{r['p50_ms']:.2f} (p95 {r['p95_ms']:.2f})",
                  f"{r['pandas_p50_ms']:.2f}", f"{r['sqlite_p50_ms']:.2f}")
    table.add_row(f"{r['backend']} pool, one-shot session", f"{r['oneshot_p50_ms']:.2f}",
                  f"{r['oneshot_pandas_p50_ms']:.2f}", f"{r['oneshot_sqlite_p50_ms']:.2f}")
    table.add_row("fresh interpreter per call", f"{r['fresh_process_p50_ms']:.1f}",
                  f"{r['fresh_process_pandas_p50_ms']:.1f}", f"{r['fresh_process_sqlite_p50_ms']:.1f}")
    table.add_row("original harness (shell + 1 s poll)", f"{r['original_p50_ms']:.0f}", "-", "-")
    console = Console(width=None if sys.stdout.isatty() else 120)
    console.print(table)
    console.print(f"throughput: {r['exec_per_s']:.0f} print(1)/s with {r['threads']} concurrent sessions; "
                  f"speedup vs fresh pandas x{r['speedup_vs_fresh_pandas']}, vs original "
                  f"x{r['speedup_vs_original']}; pool start {r['pool_startup_s']:.2f} s")
    console.print("layers: " + ", ".join(r["layers"]))


def main(argv: list[str] | None = None) -> int:
    """Parse flags, measure, print; return the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("bwrap", "docker", "local"), default="bwrap",
                   help="sandbox backend to measure (local = unisolated, for comparison only)")
    p.add_argument("--quick", action="store_true", help="fewer iterations (under 30 s): 60 calls, 1.5 s "
                   "throughput, 3 original-harness calls")
    p.add_argument("--iterations", type=int, default=None,
                   help="timed calls of print(1) per mode (pandas/sqlite get half); default 300, quick 60")
    p.add_argument("--duration", type=float, default=None,
                   help="seconds of the concurrent throughput run; default 5, quick 1.5")
    p.add_argument("--original-iterations", type=int, default=None,
                   help="calls through the original harness (each >= 1 s); default 10, quick 3")
    p.add_argument("--threads", type=int, default=None,
                   help="concurrent sessions for the throughput run; default min(4, max(2, CPUs))")
    p.add_argument("--json", action="store_true", help="end stdout with one line holding the results as JSON")
    p.add_argument("--output", type=Path, default=None, help="also write the JSON results to this file")
    args = p.parse_args(argv)
    defaults = (60, 1.5, 3) if args.quick else (300, 5.0, 10)
    for flag, default in zip(("iterations", "duration", "original_iterations"), defaults):
        if getattr(args, flag) is None:
            setattr(args, flag, default)
    for flag in ("iterations", "original_iterations", "threads"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')}={value} is invalid: use a positive integer")
    if args.duration <= 0:
        p.error(f"--duration={args.duration} is invalid: use a positive number of seconds")
    result = measure(args)
    print_table(result)
    line = json.dumps(result, sort_keys=True)
    if args.output:
        tmp = args.output.with_name(args.output.name + ".tmp")
        tmp.write_text(line + "\n")
        os.replace(tmp, args.output)
    if args.json:
        sys.stdout.flush()
        print(line)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # one line, not a traceback; 130 = killed by SIGINT, as shells report it
        print("\ninterrupted: nothing saved "
              "(the benchmark prints and writes its numbers only when it finishes); rerun the same command",
              file=sys.stderr)
        sys.exit(130)
