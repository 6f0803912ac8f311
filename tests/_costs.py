"""What each test costs, and the longest modules first under xdist (issue #29). A pytest plugin (tests/conftest.py
loads it) and a command.

**Order.** ``--dist loadscope`` hands a worker one module (or class) at a time, in the order of the workers'
collection; pytest-xdist would sort them by number of tests, so a module of three long tests (a real model, a
learning run) came last and ran alone while the other worker idled. Here each worker's collection is ordered by
the CPU seconds of ``tests/costs.json`` (a scope's setup, calls and teardown, measured below), longest first, and
xdist's own reordering is switched off: the long modules start at once and the short ones fill both workers to the
end. A scope the table has not seen (a new test module) is costed at its number of tests times the table's median
cost per test, so it lands among modules of its size; a missing or unreadable table leaves the collection order.
A single process (no xdist) keeps the collection order.

**Measure.** ``MEDAGENTGYM_TEST_COSTS=DIR`` makes every pytest process (each xdist worker, or the one process)
append one JSON line per test to ``DIR/<worker>.jsonl``: its node id and scope, the CPU seconds of the process and
its waited-for children from the start of its setup to the end of its teardown (module fixtures count in the first
and last test of their module), and its wall start and end. Then::

    python tests/_costs.py DIR            # per worker: busy CPU, busy wall, the idle tail; the costliest scopes;
                                          # both orders simulated on these costs
    python tests/_costs.py DIR --write    # and merge these measurements into tests/costs.json

CPU seconds are comparable between a loaded and a quiet run; on a quiet 2-core machine a worker's wall time is
about its CPU time plus its tests' waits, so the larger worker's busy CPU is the estimate of the quiet wall time.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import pytest

TABLE = Path(__file__).resolve().parent / "costs.json"
ENV = "MEDAGENTGYM_TEST_COSTS"


def scope_of(nodeid: str) -> str:
    """The unit ``--dist loadscope`` sends to one worker: the node id up to its last ``::`` (module or class)."""
    return nodeid.rsplit("::", 1)[0]


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def load_table(path: Path | None = None) -> dict[str, float]:
    """Scope -> CPU seconds of ``path`` (default :data:`TABLE`); empty when the table is missing or unreadable (the
    collection order is kept)."""
    try:
        table = json.loads((path or TABLE).read_text(encoding="utf-8"))["scopes"]
        return {str(k): float(v) for k, v in table.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def order_scopes(nodeids: list[str], table: dict[str, float]) -> list[int]:
    """Indexes of ``nodeids`` with whole scopes ordered by cost, longest first (ties: collection order); a scope
    outside ``table`` costs its number of tests times the table's median per-test cost. No table: the given order."""
    if not table:
        return list(range(len(nodeids)))
    groups: dict[str, list[int]] = {}
    for i, nodeid in enumerate(nodeids):
        groups.setdefault(scope_of(nodeid), []).append(i)
    known = [(table[s], len(ix)) for s, ix in groups.items() if s in table]
    per_test = statistics.median(c / n for c, n in known) if known else 0.0
    order = sorted(groups, key=lambda s: -table.get(s, per_test * len(groups[s])))
    return [i for s in order for i in groups[s]]


def pytest_configure(config: pytest.Config) -> None:
    # Our order replaces xdist's by-number-of-tests order (the controller reads this when it schedules).
    if getattr(config.option, "dist", "no") == "loadscope" and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id (``gw0``...), None outside a worker (its config, not the environment: a
    pytest that a test starts inherits PYTEST_XDIST_WORKER)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput.get("workerid") if workerinput else None


def _controller(config: pytest.Config) -> bool:
    return _worker(config) is None and getattr(config.option, "dist", "no") != "no"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    if _worker(config) is None:
        return
    order = order_scopes([item.nodeid for item in items], load_table())
    items[:] = [items[i] for i in order]


class _Recorder:
    def __init__(self, folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}-{os.getpid()}.jsonl"
        self.outcome = "passed"

    def write(self, record: dict) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # the process's CPU so far: interpreter start, conftest imports and collection
        self.write({"event": "collected", "cpu": round(_cpu(), 3), "t": time.time(), "n": len(session.items)})

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.outcome = "failed" if report.when == "call" else "error"
        elif report.skipped and self.outcome == "passed":
            self.outcome = "skipped"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        cpu, start, self.outcome = _cpu(), time.time(), "passed"
        yield
        self.write({"nodeid": item.nodeid, "scope": scope_of(item.nodeid), "cpu": round(_cpu() - cpu, 3),
                    "start": start, "end": time.time(), "outcome": self.outcome})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # the process's whole CPU, its waited-for children's included (session fixtures are torn down by now)
        self.write({"event": "finished", "cpu": round(_cpu(), 3), "t": time.time()})


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    folder = os.environ.get(ENV)
    config = session.config
    if folder and not _controller(config) and not config.pluginmanager.has_plugin("medagentgym-costs"):
        config.pluginmanager.register(_Recorder(Path(folder), _worker(config) or "main"), "medagentgym-costs")


def summarize(folder: Path) -> tuple[str, dict[str, float]]:
    """A report of the records in ``folder`` and the scope -> CPU seconds they give."""
    workers: dict[str, list[dict]] = {}
    collected: dict[str, dict] = {}
    finished: dict[str, dict] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("event") == "collected":
                collected[path.stem] = record
            elif record.get("event") == "finished":
                finished[path.stem] = record
            else:
                workers.setdefault(path.stem, []).append(record)
    if not workers:
        raise SystemExit(f"no test records in {folder}: run pytest with {ENV}={folder} first")
    end = max(r["end"] for rs in workers.values() for r in rs)
    begin = min(r["start"] for rs in workers.values() for r in rs)
    lines = [f"{sum(len(rs) for rs in workers.values())} tests on {len(workers)} worker(s), "
             f"{end - begin:.0f} s from the first test to the last"]
    for name, records in sorted(workers.items()):
        cpu = sum(r["cpu"] for r in records)
        busy = sum(r["end"] - r["start"] for r in records)
        last = max(r["end"] for r in records)
        col = collected.get(name, {})
        whole = f", {finished[name]['cpu']:.0f} s CPU in all" if name in finished else ""
        bad = [r["nodeid"] for r in records if r.get("outcome") in ("failed", "error")]
        lines.append(f"  {name}: {len(records)} tests, {cpu:.0f} s CPU in tests, {busy:.0f} s wall in tests, "
                     f"idle for the last {end - last:.0f} s; start-up + collection {col.get('cpu', 0):.1f} s CPU"
                     f"{whole}{f'; failed or errored: {len(bad)}' if bad else ''}")
    scopes: dict[str, float] = {}
    for records in workers.values():
        for r in records:
            scopes[r["scope"]] = scopes.get(r["scope"], 0.0) + r["cpu"]
    top = sorted(scopes.items(), key=lambda kv: -kv[1])
    lines.append(f"scopes: {len(scopes)}, {sum(scopes.values()):.0f} s CPU; the costliest:")
    lines += [f"  {cpu:7.1f} s  {scope}" for scope, cpu in top[:25]]
    return "\n".join(lines), {s: round(c, 1) for s, c in top}


def simulate(units: list[tuple[str, list[float]]], workers: int = 2) -> list[float]:
    """Each worker's busy seconds when ``--dist loadscope`` hands out ``units`` ((scope, its tests' costs) in queue
    order) as pytest-xdist 3.8 does: one unit per worker to start, and another whenever a worker has at most two
    tests left (so a unit can wait behind the last two tests of the one before it)."""
    queue = list(units)
    todo: list[list[float]] = [[] for _ in range(workers)]
    clock = [0.0] * workers

    def top_up(w: int) -> None:
        while queue and len(todo[w]) <= 2:
            todo[w].extend(queue.pop(0)[1])
            if not todo[w]:
                continue
            break

    for w in range(workers):
        if queue:
            todo[w].extend(queue.pop(0)[1])
    for w in range(workers):
        top_up(w)
    while any(todo):
        w = min((w for w in range(workers) if todo[w]), key=lambda w: clock[w] + todo[w][0])
        clock[w] += todo[w].pop(0)
        top_up(w)
    return clock


def _units(folder: Path) -> dict[str, list[float]]:
    units: dict[str, list[float]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if "nodeid" in record:
                units.setdefault(record["scope"], []).append(record["cpu"])
    return units


def compare_orders(folder: Path, workers: int = 2) -> str:
    """Simulated per-worker CPU of the measured tests under xdist's by-count order and under the cost order."""
    units = _units(folder)
    costs = {s: sum(c) for s, c in units.items()}
    by_count = sorted(units.items(), key=lambda kv: -len(kv[1]))
    by_cost = sorted(units.items(), key=lambda kv: -costs[kv[0]])
    lines = []
    for name, order in (("xdist's order (most tests first)", by_count), ("cost order (tests/costs.json)", by_cost)):
        clock = simulate(order, workers)
        lines.append(f"{name}: workers busy {', '.join(f'{c:.0f}' for c in clock)} s CPU; the last ends at "
                     f"{max(clock):.0f} s (ideal {sum(costs.values()) / workers:.0f} s)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: python tests/_costs.py DIR [--write]  (DIR: the MEDAGENTGYM_TEST_COSTS folder of a run)",
              file=sys.stderr)
        return 2
    report, scopes = summarize(Path(argv[0]))
    print(report)
    print(compare_orders(Path(argv[0])))
    if "--write" in argv[1:]:
        merged = write_table(scopes)
        print(f"wrote {TABLE}: {len(scopes)} scopes measured, {len(merged) - len(scopes)} kept from before")
    return 0


def write_table(measured: dict[str, float], path: Path | None = None) -> dict[str, float]:
    """Merge ``measured`` into the table (a partial run updates what it ran; scopes whose file is gone are
    dropped) and write it atomically. Returns the merged table."""
    path = path or TABLE
    root = path.resolve().parent.parent
    merged = {s: c for s, c in load_table(path).items() if (root / s.split("::")[0]).is_file()}
    merged.update(measured)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"about": "CPU seconds per xdist loadscope scope (setup + calls + teardown), merged "
                                        "by `python tests/_costs.py DIR --write` from MEDAGENTGYM_TEST_COSTS runs; "
                                        "scopes no such run has measured yet are estimates from --durations wall "
                                        "times (docs/benchmarks.md, Test suite). Only the order matters.",
                               "scopes": dict(sorted(merged.items()))}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return merged


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
