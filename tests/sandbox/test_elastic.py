"""Capacity follows demand: a pool grows to the sessions open up to its cap, shrinks when idle, fails fast at the
cap with one line, and leases each jail a host uid no other pool holds.

Mechanics only, so every bound is on counts and on what happened, never on how fast a loaded machine is: waits use
generous deadlines that only guard against a hang.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest

from medagentgym.sandbox import Limits, SandboxBusy, make_pool
from medagentgym.sandbox import _uids
from medagentgym.sandbox.pool import MAX_WORKERS_ENV, default_max_workers

LIGHT = dict(preload=("sqlite3",), workspace_mb=16, limits=Limits(wall_s=20, cpu_s=20))


def _until(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_pool_grows_to_demand_then_fails_fast_at_the_cap_with_one_line(leftovers):
    with make_pool("bwrap", workers=1, max_workers=3, acquire_timeout=0.3, **LIGHT) as pool:
        assert pool.stats()["live"] == 1
        sessions = [pool.session() for _ in range(3)]  # one warm worker, two started on demand
        try:
            assert pool.stats()["live"] == 3 == pool.stats()["busy"]
            outs = [s.run_shell("id -u").stdout.strip() for s in sessions]
            if os.geteuid() == 0:  # each session runs as a leased uid of its own slot (a slot has two, in turn)
                assert len(set(outs)) == 3 and {int(u) for u in outs} <= set(pool.jail_uids)
                assert len(pool.jail_uids) == 6
            t0 = time.monotonic()
            with pytest.raises(SandboxBusy) as info:
                pool.session()
            waited = time.monotonic() - t0
            message = str(info.value)
            assert "\n" not in message and "3 workers are busy" in message and "max_workers=3" in message
            assert f"{MAX_WORKERS_ENV}=N" in message and "make_pool(max_workers=N)" in message
            assert 0.3 <= waited < 60  # it waited acquire_timeout, not the old 600 s
            assert pool.stats()["live"] == 3 and pool.stats()["waiting"] == 0
        finally:
            for s in sessions:
                s.close()
        assert pool.stats()["idle"] == 3 and pool.stats()["peak"] == 3
    assert leftovers(pool.jail_uids) == []


def test_a_waiting_session_gets_the_next_worker_that_frees_first_come_first_served():
    with make_pool("bwrap", workers=1, max_workers=1, acquire_timeout=120, **LIGHT) as pool:
        held = pool.session()
        held.run_python("secret = 41")
        order: list[str] = []

        def wait(name: str) -> None:
            with pool.session() as s:
                order.append(name)
                out = s.run_python("print(globals().get('secret'))").stdout  # a fresh interpreter, wiped slot
                order.append(out.strip())

        first = threading.Thread(target=wait, args=("first",))
        first.start()
        assert _until(lambda: pool.stats()["waiting"] == 1)
        second = threading.Thread(target=wait, args=("second",))
        second.start()
        assert _until(lambda: pool.stats()["waiting"] == 2)
        held.close()
        first.join(120)
        second.join(120)
        assert order == ["first", "None", "second", "None"]
        assert pool.stats()["peak"] == 1


def test_idle_workers_beyond_the_floor_stop_and_their_slots_are_reused():
    with make_pool("bwrap", workers=1, max_workers=3, idle_s=0.2, **LIGHT) as pool:
        sessions = [pool.session() for _ in range(3)]
        uids = sorted(pool.jail_uids)
        for s in sessions:
            s.close()
        assert _until(lambda: pool.stats()["live"] == 1), pool.stats()  # back to the floor, not below
        time.sleep(0.5)
        assert pool.stats()["live"] == 1 and len(pool._workers) == 1
        again = [pool.session() for _ in range(3)]  # grows again in the kept slots: no new uid, no new directory
        try:
            assert pool.stats()["live"] == 3 and sorted(pool.jail_uids) == uids
            assert all(s.run_python("print(6 * 7)").stdout == "42\n" for s in again)
        finally:
            for s in again:
                s.close()


def test_async_sessions_grow_the_pool_too():
    async def main(pool) -> list[str]:
        opened: list[int] = []
        all_open = asyncio.Event()

        async def episode(k: int) -> str:
            async with await pool.asession() as s:
                # all three are open at once: each waits for the others' sessions (an event, not a delay: a 0.2 s
                # sleep let the first close before a loaded host had started the second's worker, peak 1)
                opened.append(k)
                if len(opened) == 3:
                    all_open.set()
                await asyncio.wait_for(all_open.wait(), 600)  # a hang guard: the pool never grew
                return (await s.arun_python(f"print({k})")).stdout

        return await asyncio.gather(*(episode(k) for k in range(3)))

    with make_pool("bwrap", workers=1, max_workers=3, **LIGHT) as pool:
        assert asyncio.run(main(pool)) == ["0\n", "1\n", "2\n"]
        assert pool.stats()["peak"] == 3


def test_the_default_cap_comes_from_memory_or_the_environment(monkeypatch):
    monkeypatch.delenv(MAX_WORKERS_ENV, raising=False)
    cap, source = default_max_workers()
    assert cap >= 2 and "GiB memory" in source and "MiB per worker" in source
    monkeypatch.setenv(MAX_WORKERS_ENV, "7")
    assert default_max_workers() == (7, f"{MAX_WORKERS_ENV}=7")
    for bad in ("0", "-3", "many"):
        monkeypatch.setenv(MAX_WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=f"{MAX_WORKERS_ENV}=.* is invalid: use a positive integer"):
            default_max_workers()
    with pytest.raises(ValueError, match="max_workers=0 is invalid"):
        make_pool("bwrap", workers=1, max_workers=0)


def test_a_leased_uid_is_refused_to_every_other_process_until_released():
    uid = _uids.lease()
    others = [_uids.lease() for _ in range(3)]  # the same process never gets a leased uid twice either
    try:
        assert _uids.BASE <= uid < _uids.BASE + _uids.COUNT and len({uid, *others}) == 4
        probe = ("import fcntl, os, sys\n"
                 f"fd = os.open({_uids._lock_file_path()!r}, os.O_RDWR)\n"
                 "try:\n"
                 f"    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, {uid - _uids.BASE}, 0)\n"
                 "except OSError:\n"
                 "    print('held')\n"
                 "else:\n"
                 "    print('free')\n")
        run = lambda: subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
        assert run() == "held\n"
    finally:
        for leased in (uid, *others):
            _uids.release(leased)
    assert run() == "free\n"



def _tree_pss_kib(root: int) -> int:
    """PSS (kB) of ``root`` and its descendants."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, StopIteration):
            continue
    return total


def test_workers_started_on_demand_are_lean_and_their_sessions_import_what_they_use():
    """The warm worker preloads pandas and keeps zygotes; a worker started for demand preloads sqlite3 only and
    keeps none, so it holds a fraction of the memory, yet its sessions run pandas and scikit-learn code all the
    same (importing on first use) and keep their variables across calls."""
    with make_pool("bwrap", workers=1, max_workers=2, limits=Limits(wall_s=120, cpu_s=60)) as pool:
        warm, lean = pool.session(), pool.session()
        try:
            by_pid = {w.proc.pid: w for w in pool._workers}
            full = [w for w in by_pid.values() if "pandas" in w.ready["preloaded"]]
            thin = [w for w in by_pid.values() if "pandas" not in w.ready["preloaded"]]
            assert len(full) == 1 == len(thin) and thin[0].ready["light_zygote"] is None
            assert full[0].ready["light_zygote"] is not None
            for s in (warm, lean):  # a first call that imports scikit-learn: the warm worker starts its ml zygote
                assert s.run_python("import pandas as pd\nfrom sklearn.linear_model import LinearRegression\n"
                                    "fit = LinearRegression().fit(pd.DataFrame({'x': [0, 1, 2]}), [1, 3, 5])").ok
                assert s.run_python("print(round(float(fit.coef_[0]), 3))").stdout == "2.0\n"
            roles = set(pool.process_roles().values())
            assert "zygote-ml" in roles  # the warm worker keeps its scikit-learn zygote for later sessions
        finally:
            warm.close()
            lean.close()
        idle = {w.proc.pid: _tree_pss_kib(w.proc.pid) for w in pool._workers}
        lean_pid = next(pid for pid, w in by_pid.items() if w in thin)
        warm_pid = next(pid for pid, w in by_pid.items() if w in full)
        # after its session, the lean worker freed pandas and scikit-learn; the warm one keeps both (zygotes)
        assert idle[lean_pid] * 3 < idle[warm_pid], idle


def test_prewarm_starts_workers_ahead_of_a_known_demand_within_the_cap(leftovers):
    """A trainer that knows its episodes per step starts the workers before the step: its sessions then open on
    workers already up (no start while they wait), and prewarming never passes the cap or counts a worker twice."""
    with make_pool("bwrap", workers=1, max_workers=4, **LIGHT) as pool:
        with pytest.raises(ValueError, match="prewarm"):
            pool.prewarm(-1)
        assert pool.prewarm(3, wait=True) == 2
        assert pool.stats()["live"] == 3 and pool.stats()["starting"] == 0
        assert pool.prewarm(3) == 0  # already there
        assert pool.prewarm(100, wait=True) == 1  # up to the cap
        assert pool.stats()["live"] == 4
        started = []
        start = pool._start_worker
        pool._start_worker = lambda slot: started.append(slot) or start(slot)
        sessions = [pool.session() for _ in range(4)]
        try:
            assert all(s.run_shell("echo ok").stdout == "ok\n" for s in sessions)
        finally:
            for s in sessions:
                s.close()
        assert started == [] and pool.stats()["peak"] == 4
    with pytest.raises(Exception, match="closed"):
        pool.prewarm(2)
    assert leftovers(pool.jail_uids) == []


def test_prewarm_does_not_block_and_a_session_takes_the_first_worker_ready():
    with make_pool("bwrap", workers=1, max_workers=3, **LIGHT) as pool:
        busy = pool.session()  # the warm worker is taken
        try:
            assert pool.prewarm(3) == 2  # returns at once; the two start on the spawner threads
            with pool.session() as s:  # takes the first prewarmed worker ready (no third start for it)
                assert s.run_shell("echo ok").stdout == "ok\n"
            assert _until(lambda: pool.stats()["starting"] == 0)
            assert pool.stats()["live"] == 3 and pool.stats()["peak"] == 3
        finally:
            busy.close()
