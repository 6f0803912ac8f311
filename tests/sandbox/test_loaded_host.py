"""Limits that measure the program, not the host: with every core saturated by other processes, a correct program
still passes and a sleeping one still times out (``medagentgym.sandbox._clock``).

The busy loops run at the test's own priority, six per core, so the sandbox's processes get at most about a
seventh of a core (six per core plus the jail, each its own scheduling group): a program that needs half a CPU
second then spends three or more seconds on the clock, far past its 1 s limit, and must pass; a program that sleeps
uses no CPU and waits for none, and must time out at its limit. The burners hold every core while they run, so
they start after the jail's worker is up and stop with the last call. Issue #29: the cost is both cores for as long
as the block runs, whatever the number of loops; it was 3 s and 1.5 CPU seconds (~34 s with the cores taken from
the rest of the suite), then 2 s and 1 CPU second (~21 core-s), now 1 s and 0.5 CPU seconds; the scikit-learn
import on the same clock is in ``make test-slow``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from medagentgym.sandbox import ErrorKind, Limits, make_pool
from medagentgym.sandbox._clock import hard_wall_s

WALL_S = 1.0
BURN = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\n"
        "print('burned', round(time.process_time() - t, 1))")


@contextlib.contextmanager
def saturated():
    """Six busy-loop processes per core while the block runs, each in its own session: with the kernel's autogroup
    scheduling on, every session shares the CPUs as one group, so loops in the test's own session would compete
    only with one another."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(6 * (os.cpu_count() or 2))]
    try:
        yield len(procs)
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


@contextlib.contextmanager
def _session(limits: Limits):
    """A lean one-worker pool's session whose runner is up before the cores are taken (issue #29: the burners hold
    both cores, so they run only for the calls under test, not for the worker's start)."""
    with make_pool("bwrap", workers=1, max_workers=1, limits=limits, preload=("sqlite3",)) as pool, \
            pool.session() as s:
        assert s.run_python("x = 1").ok
        yield s


def test_correct_programs_pass_and_sleeping_ones_time_out_on_a_saturated_host():
    with _session(Limits(wall_s=WALL_S, cpu_s=20)) as s, saturated():
        burn = s.run_python(BURN)
        assert burn.ok and burn.stdout.startswith("burned"), burn.stderr
        # it needed half a CPU second and got a seventh of a core: more than 2 s on the clock, yet it passed
        assert burn.duration_s > 2 * WALL_S, burn.duration_s
        slept = s.run_python("import time\nprint('asleep', flush=True)\ntime.sleep(600)")
        assert slept.timed_out and slept.error_kind == ErrorKind.TIMEOUT and slept.stdout == "asleep\n"
        assert f"wall-clock limit of {WALL_S:g} s reached" in slept.stderr
        assert WALL_S <= slept.duration_s < hard_wall_s(WALL_S)
        blocked = s.run_shell("mkfifo fifo && cat fifo")  # blocks opening a FIFO no one will ever write
        assert blocked.timed_out and blocked.error_kind == ErrorKind.TIMEOUT
        assert s.run_python("print('still serving')").stdout == "still serving\n"


@pytest.mark.slow  # the same clock as the burn above on a heavier program (~10 s of both cores held)
def test_a_heavy_import_passes_on_a_saturated_host():
    with _session(Limits(wall_s=WALL_S, cpu_s=20)) as s, saturated():
        # the import needs ~1.5 CPU seconds here and gets a seventh of a core: its limit is sized for a machine five
        # times slower (7.5 CPU s, ~55 s on the clock), under the hard cap of hard_wall_s(20) = 110 s
        heavy = s.run_python("import sklearn.linear_model\nprint(sklearn.linear_model.LogisticRegression.__name__)",
                             limits=Limits(wall_s=20.0, cpu_s=60))
        assert heavy.ok and heavy.stdout == "LogisticRegression\n", heavy.stderr
