"""When a call has run out of time: limits that measure the program, not how busy the host is (stdlib only).

A call gets ``wall_s`` seconds and ``cpu_s`` CPU seconds. On a busy host a correct program that needs one CPU
second may spend ten seconds on the clock, most of them *runnable but waiting for a CPU* that other processes
hold. Counting those seconds would grade a correct program wrong because of the load (reward noise the policy
cannot control), so the worker's :class:`CallClock` charges a call only for the time it was not kept waiting:

* **wall guard**: charged time = clock time minus the time the call's threads spent runnable but waiting for a
  CPU (the kernel's per-thread ``run_delay``, ``/proc/<pid>/task/<tid>/schedstat``), counted per check interval
  and never more than the interval (several waiting threads do not make time run backwards). Sleeping, blocking
  on a pipe, a lock or I/O is not waiting for a CPU: such a program is charged in full and times out at
  ``wall_s`` as the agent's failure, loaded host or not.
* **CPU limit**: the call's processes together (those alive, plus what exited into their parents or into the
  worker server, which reaps orphans) may use ``cpu_s`` CPU seconds; the runner's own ``RLIMIT_CPU`` stays as
  the kernel-enforced per-process backstop. CPU time does not depend on the load.
* **hard cap**: whatever the discounts, a call ends after ``hard_wall_s(wall_s)`` seconds on the clock
  (:data:`HARD_FACTOR` times its limit, plus :data:`HARD_EXTRA_S`), so starved hosts and programs that keep many
  threads runnable still end; the result says how long the call waited for a CPU.

Nothing is read from ``/proc`` during the first ``min(0.25 s, wall_s / 4)`` of a call, so short calls cost
nothing extra; the waiting in that first stretch is not discounted. Processes that start and exit between two
checks are not seen: their waiting is not discounted (their CPU is, through their parent's or the server's
children times).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

__all__ = ["HARD_EXTRA_S", "HARD_FACTOR", "CallClock", "hard_wall_s"]

HARD_FACTOR = 5.0
HARD_EXTRA_S = 10.0
_FIRST_CHECK_S = 0.25
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def hard_wall_s(wall_s: float) -> float:
    """Seconds on the clock after which a call with wall-clock limit ``wall_s`` ends whatever the host's load."""
    return float(wall_s) * HARD_FACTOR + HARD_EXTRA_S


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds of ``pid`` and of the children it has waited for (utime + stime + cutime + cstime)."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return sum(int(f) for f in fields[11:15]) / _TICK
    except (ValueError, IndexError):
        return None


def _thread_delays(pid: int) -> dict[int, int]:
    """tid -> nanoseconds the thread has spent runnable but waiting for a CPU."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        raw = _read(f"/proc/{pid}/task/{tid}/schedstat")
        if raw:
            parts = raw.split()
            if len(parts) >= 2 and parts[1].isdigit():
                out[int(tid)] = int(parts[1])
    return out


def _children_cpu_s() -> float:
    times = os.times()
    return times.children_user + times.children_system


class CallClock:
    """The time limits of one call: ``check()`` says whether (and which) limit ended it.

    Args:
        wall_s: The call's wall-clock limit (charged time, see the module docstring).
        cpu_s: CPU seconds the call's processes may use together.
        start: ``time.monotonic()`` when the call's code was handed to the runner.
        pids: Returns the pids of the call's processes (the worker's own processes excluded).
        slack_s: CPU seconds over ``cpu_s`` tolerated: the runner's own ``RLIMIT_CPU`` (rounded up to whole
            seconds) ends a single-process call first, with its SIGXCPU.
    """

    def __init__(self, wall_s: float, cpu_s: float, start: float, pids: Callable[[], Iterable[int]],
                 slack_s: float = 2.0) -> None:
        self.wall_s, self.cpu_s, self.start, self.pids = float(wall_s), float(cpu_s), start, pids
        self.hard_s = hard_wall_s(wall_s)
        self.slack_s = slack_s
        self.interval = min(max(self.wall_s / 20, 0.02), 0.25)
        self.next_check = start + min(_FIRST_CHECK_S, self.wall_s / 4)
        self.charged = 0.0  # seconds charged up to ``last``
        self.waited = 0.0  # seconds discounted: the call was waiting for a CPU
        self.cpu = 0.0  # CPU seconds since the first check
        self.last: float | None = None  # time of the last check (None before the first)
        self._delays: dict[int, int] = {}  # tid -> run_delay at the last check
        self._cpu_base: dict[int, float] = {}  # pid -> CPU seconds at the first check (0 for later processes)
        self._children_base = 0.0

    def elapsed(self, now: float) -> float:
        return now - self.start

    def _sample(self, now: float) -> None:
        first = self.last is None
        delays: dict[int, int] = {}
        cpu_now: dict[int, float] = {}  # pid -> CPU seconds now
        for pid in self.pids():
            used = process_cpu_s(pid)
            if used is None:
                continue
            cpu_now[pid] = used
            if pid not in self._cpu_base:
                self._cpu_base[pid] = used if first else 0.0
            delays.update(_thread_delays(pid))
        if first:
            self.charged = now - self.start
            self._children_base = _children_cpu_s()
        else:
            dt = now - self.last
            waited_ns = sum(d - self._delays.get(tid, 0) for tid, d in delays.items())
            waited = min(max(waited_ns / 1e9, 0.0), dt)
            self.waited += waited
            self.charged += dt - waited
        # A process that exits moves its CPU into its parent's children times (the runner's, or the server's for an
        # orphan), so nothing is lost; one alive at the first check is then over-counted by what it used before
        # that check (at most a quarter of a second per process).
        self.cpu = sum(used - self._cpu_base.get(pid, 0.0) for pid, used in cpu_now.items()) \
            + (_children_cpu_s() - self._children_base)
        self._delays = delays
        self.last = now

    def check(self, now: float) -> str | None:
        """``"wall"``, ``"cpu"`` or ``"hard"`` when that limit ends the call at ``now``, else None."""
        if now - self.start >= self.hard_s:
            if self.last is not None or now >= self.next_check:
                self._sample(now)
            return "hard"
        if now < self.next_check:
            return None
        self._sample(now)
        self.next_check = now + self.interval
        if self.cpu >= self.cpu_s + self.slack_s:
            return "cpu"
        if self.charged >= self.wall_s:
            return "wall"
        return None

    def timeout_s(self, now: float) -> float:
        """Seconds until the next check is due (for ``poll``)."""
        return max(min(self.next_check, self.start + self.hard_s) - now, 0.0)

    def note(self, verdict: str, now: float) -> str:
        """The one-line explanation of a limit that ended the call, for its stderr."""
        on_clock = now - self.start
        if verdict == "cpu":
            return (f"CPU limit of {self.cpu_s:g} s reached by the call's processes together ({self.cpu:.1f} s "
                    f"CPU); every process of the call was killed")
        if verdict == "hard":
            return (f"the call ran {on_clock:.1f} s on the clock, {self.waited:.1f} s of them waiting for a CPU "
                    f"(a busy host), and was stopped at {HARD_FACTOR:g}x its wall-clock limit of {self.wall_s:g} s; "
                    f"every process of the call was killed")
        waited = f" ({on_clock:.1f} s on the clock, {self.waited:.1f} s waiting for a CPU not counted)" \
            if self.waited >= 0.05 else ""
        return f"wall-clock limit of {self.wall_s:g} s reached{waited}; every process of the call was killed"
