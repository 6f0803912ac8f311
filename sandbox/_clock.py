"""When a call has run out of time: limits that measure the program, not how busy the host is (stdlib only).

A call gets ``wall_s`` seconds and ``cpu_s`` CPU seconds. On a busy host a correct program that needs one CPU
second may spend ten seconds on the clock, most of them *runnable but waiting for a CPU* that other processes
hold. Counting those seconds would grade a correct program wrong because of the load (reward noise the policy
cannot control), so the worker's :class:`CallClock` charges a call only for the time it was not kept waiting:

* **wall guard**: charged time = clock time minus the time the call's threads spent runnable but waiting for a
  CPU (the kernel's per-thread ``run_delay``, ``/proc/<pid>/task/<tid>/schedstat``), counted per check interval
  and never more than the interval (several waiting threads do not make time run backwards). The kernel adds a
  wait to ``run_delay`` only when it ends, so a wait longer than an interval would be charged while it lasts:
  a thread seen runnable at two checks without running in between (neither its ``schedstat`` nor its CPU ticks
  moved) is counted as waiting for that interval before the kernel reports it, and the part of a late-reported
  wait that began before is discounted from the interval where the thread last ran (up to what that interval was
  charged). A thread that is not runnable at a check is not waiting. Sleeping, blocking on a pipe, a lock or I/O
  is not waiting for a CPU: such a program is charged in full and times out at ``wall_s`` as the agent's failure,
  loaded host or not.
* **CPU limit**: the call's processes together (those alive, plus what exited into their parents or into the
  worker server, which reaps orphans) may use ``cpu_s`` CPU seconds; the runner's own ``RLIMIT_CPU`` stays as
  the kernel-enforced per-process backstop. CPU time does not depend on the load.
* **hard cap**: whatever the discounts, a call ends after ``hard_wall_s(wall_s)`` seconds on the clock
  (:data:`HARD_FACTOR` times its limit, plus :data:`HARD_EXTRA_S`), so starved hosts and programs that keep many
  threads runnable still end; the result says how long the call waited for a CPU.

The runner's CPU and waiting are read when the call starts (``baseline``); after that nothing is read from
``/proc`` during the first ``min(0.25 s, wall_s / 4)`` of a call, so short calls cost one read of the runner's
threads. Processes that start and exit between two checks are not seen: their waiting is not discounted (their
CPU is, through their parent's or the server's children times).
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


def _stat_fields(path: str) -> list[bytes] | None:
    """The fields of a ``/proc`` ``stat`` file after the command name (the state first), or None if it is gone."""
    raw = _read(path)
    return None if raw is None else raw[raw.rfind(b")") + 2:].split()


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds of ``pid`` and of the children it has waited for (utime + stime + cutime + cstime)."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    if fields is None:
        return None
    try:
        return sum(int(f) for f in fields[11:15]) / _TICK
    except (ValueError, IndexError):
        return None


def _thread_stats(pid: int) -> dict[int, tuple[int, int, int]]:
    """tid -> (nanoseconds on a CPU, nanoseconds runnable but waiting for one, times scheduled) of ``pid``'s threads.

    The kernel adds a wait to the second number only when it ends (the thread gets a CPU): a thread waiting now
    shows none of its current wait yet."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        raw = _read(f"/proc/{pid}/task/{tid}/schedstat")
        if raw:
            parts = raw.split()
            if len(parts) >= 3 and all(p.isdigit() for p in parts[:3]):
                out[int(tid)] = (int(parts[0]), int(parts[1]), int(parts[2]))
    return out


def _task_state(pid: int, tid: int) -> tuple[bool, int]:
    """Whether the thread is runnable (running or waiting for a CPU) now, and its CPU time in clock ticks.

    The ticks are a second witness of running: on a ``nohz_full`` CPU the kernel may leave a running thread's
    ``schedstat`` unchanged between context switches, while the tick count it reports here stays current."""
    fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
    if fields is None:
        return False, -1
    try:
        return fields[0] == b"R", int(fields[11]) + int(fields[12])
    except (ValueError, IndexError):
        return False, -1


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
        baseline: Pids alive when the call starts (the runner): their CPU and waiting so far are read now and not
            charged to the call. Without them, the processes seen at the first check are taken as they are then,
            and the first stretch is charged in full.
    """

    def __init__(self, wall_s: float, cpu_s: float, start: float, pids: Callable[[], Iterable[int]],
                 slack_s: float = 2.0, baseline: Iterable[int] = ()) -> None:
        self.wall_s, self.cpu_s, self.start, self.pids = float(wall_s), float(cpu_s), start, pids
        self.hard_s = hard_wall_s(wall_s)
        self.slack_s = slack_s
        self.interval = min(max(self.wall_s / 20, 0.02), 0.25)
        self.next_check = start + min(_FIRST_CHECK_S, self.wall_s / 4)
        self.charged = 0.0  # seconds charged up to ``last``
        self.cpu = 0.0  # CPU seconds of the call's processes
        self.last = start  # time of the last sample
        self._charges: list[float] = []  # seconds charged in each interval between samples
        # tid -> (schedstat, runnable, CPU clock ticks) at the last sample (the baseline's: runnable unknown)
        self._threads: dict[int, tuple[tuple[int, int, int], bool, int]] = {}
        self._pending: dict[int, int] = {}  # tid -> ns of a wait still in progress, discounted before it is reported
        # tid -> (the last interval in which it ran, slept or woke, seconds of it a wait still running may hold)
        self._since: dict[int, tuple[int, float]] = {}
        self._cpu_base: dict[int, float] = {}  # pid -> CPU seconds when first seen (0 for processes born later)
        self._adopt = True  # the next sample takes unknown processes as they are (no baseline)
        self._children_base = _children_cpu_s()
        for pid in baseline:
            used = process_cpu_s(pid)
            if used is not None:
                self._cpu_base[pid] = used
                self._threads.update({tid: (stat, False, -1) for tid, stat in _thread_stats(pid).items()})
                self._adopt = False

    @property
    def waited(self) -> float:
        """Seconds discounted up to ``last``: the call was waiting for a CPU."""
        return (self.last - self.start) - self.charged

    def elapsed(self, now: float) -> float:
        return now - self.start

    def _sample(self, now: float) -> None:
        k, dt = len(self._charges), now - self.last
        adopt, self._adopt = self._adopt, False
        threads: dict[int, tuple[tuple[int, int, int], bool, int]] = {}
        here = 0.0  # seconds of this interval the call's threads spent waiting (summed over threads)
        cpu_now: dict[int, float] = {}  # pid -> CPU seconds now
        for pid in self.pids():
            used = process_cpu_s(pid)
            if used is None:
                continue
            cpu_now[pid] = used
            if pid not in self._cpu_base:
                self._cpu_base[pid] = used if adopt else 0.0
            for tid, stat in _thread_stats(pid).items():
                now_runnable, ticks = _task_state(pid, tid)
                threads[tid] = (stat, now_runnable, ticks)
                # born during the call (all its waiting is the call's), or adopted as it is
                before, was_runnable, ticks_before = self._threads.get(tid, (stat if adopt else (0, 0, 0), False, -1))
                if stat == before and ticks == ticks_before and now_runnable and was_runnable:
                    # Runnable at both samples and never on a CPU in between (a thread blocks only while it runs):
                    # it waited for a CPU the whole interval. The kernel reports that wait only when it ends, so
                    # discount it now and settle when it is reported.
                    self._pending[tid] = self._pending.get(tid, 0) + int(dt * 1e9)
                    here += dt
                    continue
                ran = (stat[0] - before[0]) / 1e9
                reported = max(stat[1] - before[1] - self._pending.pop(tid, 0), 0) / 1e9
                # A wait reported now may have begun in the interval where the thread was last seen running or
                # waking (the intervals after it were discounted as they passed): that interval takes what it can
                # have held of it, up to what it was charged, and this one the rest, at most the time the thread
                # did not run in it. Waits of several threads at once are not discounted twice.
                since, room = self._since.get(tid, (k, 0.0))
                early = min(reported, room) if since < k else 0.0
                if early:
                    back = min(early, self._charges[since])
                    self._charges[since] -= back
                    self.charged -= back
                inside = min(reported - early, max(dt - ran, 0.0))
                here += inside
                # A wait in progress now began in this interval, after the thread last ran; a thread not runnable
                # now is not waiting.
                self._since[tid] = (k, max(dt - ran - inside, 0.0) if now_runnable else 0.0)
        waited = min(here, dt)  # several threads waiting at once do not make time run backwards
        self._charges.append(dt - waited)
        self.charged += dt - waited
        self.cpu = sum(used - self._cpu_base.get(pid, 0.0) for pid, used in cpu_now.items()) \
            + (_children_cpu_s() - self._children_base)
        # A thread gone while waiting keeps what was discounted; the others' bookkeeping goes with them.
        self._pending = {tid: ns for tid, ns in self._pending.items() if tid in threads}
        self._since = {tid: idx for tid, idx in self._since.items() if tid in threads}
        self._threads, self.last = threads, now

    def check(self, now: float) -> str | None:
        """``"wall"``, ``"cpu"`` or ``"hard"`` when that limit ends the call at ``now``, else None."""
        if now - self.start >= self.hard_s:
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
