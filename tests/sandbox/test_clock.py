"""The call clock's bookkeeping against a scripted kernel (``medagentgym.sandbox._clock``), deterministic.

The kernel adds a thread's wait for a CPU to its ``run_delay`` only when the wait ends, so a sample taken in the
middle of a wait shows none of it. ``FakeKernel`` plays threads through run / wait / sleep segments and answers
``schedstat``, ``stat`` and the CPU times with exactly those semantics; the clock is then sampled at chosen times
and its charged time compared with the truth (the clock time the threads were not kept waiting).
"""

from __future__ import annotations

import itertools

import pytest

from medagentgym.sandbox import _clock
from medagentgym.sandbox._clock import CallClock

PID = 4242


class FakeKernel:
    """Threads as lists of ("run" | "wait" | "sleep", seconds) segments from t=0; after the last one, asleep."""

    def __init__(self, threads: dict[int, list[tuple[str, float]]], born: dict[int, float] | None = None,
                 nohz_full: bool = False):
        self.threads, self.born, self.t, self.nohz_full = threads, born or {}, 0.0, nohz_full

    def _walk(self, tid: int):
        t = self.born.get(tid, 0.0)
        for kind, length in self.threads[tid]:
            yield kind, t, min(t + length, self.t)
            t += length
            if t >= self.t:
                return
        yield "sleep", t, self.t

    def alive(self) -> list[int]:
        return [tid for tid in self.threads if self.born.get(tid, 0.0) <= self.t]

    def schedstat(self, tid: int, live: bool = False) -> tuple[int, int, int]:
        ran = delay = 0.0
        count = 0
        waiting = None
        for kind, a, b in self._walk(tid):
            if kind == "run":
                if waiting is not None:  # the wait ends when the thread gets a CPU: only then is it counted
                    delay, waiting = delay + waiting, None
                running_now = b == self.t
                if running_now and self.nohz_full and not live:  # no tick: the run shows at its context switch
                    continue
                ran, count = ran + (b - a), count + 1
            elif kind == "wait":
                waiting = (waiting or 0.0) + (b - a)
        return round(ran * 1e9), round(delay * 1e9), count

    def ticks(self, tid: int) -> int:
        """CPU time in 10 ms clock ticks, current even on a ``nohz_full`` CPU."""
        return int(self.schedstat(tid, live=True)[0] // 10_000_000)

    def state(self, tid: int) -> str:
        kind = "sleep"
        for kind, _a, _b in self._walk(tid):
            pass
        return "S" if kind == "sleep" else "R"

    def waited(self) -> float:
        """Seconds so far in which at least one thread was waiting for a CPU (the truth the clock estimates)."""
        marks = sorted({0.0, self.t, *(x for tid in self.alive() for _k, a, b in self._walk(tid) for x in (a, b))})
        total = 0.0
        for a, b in itertools.pairwise(marks):
            mid = (a + b) / 2
            if any(k == "wait" and s <= mid < e for tid in self.alive() for k, s, e in self._walk(tid)):
                total += b - a
        return total


@pytest.fixture
def kernel(monkeypatch):
    box: dict[str, FakeKernel] = {}

    def stats(pid):
        k = box["k"]
        return {tid: k.schedstat(tid) for tid in k.alive()} if pid == PID else {}

    monkeypatch.setattr(_clock, "_thread_stats", stats)
    monkeypatch.setattr(_clock, "_task_state", lambda pid, tid: (box["k"].state(tid) == "R", box["k"].ticks(tid)))
    monkeypatch.setattr(_clock, "process_cpu_s",
                        lambda pid: sum(box["k"].schedstat(t)[0] for t in box["k"].alive()) / 1e9)
    monkeypatch.setattr(_clock, "_children_cpu_s", lambda: 0.0)

    def make(threads, born=None, nohz_full=False):
        box["k"] = FakeKernel(threads, born, nohz_full)
        return box["k"]

    return make


def _drive(k: FakeKernel, wall_s: float, until: float, step: float | None = None, baseline=True):
    """Check a clock of ``wall_s`` every ``step`` seconds (its own interval by default) up to ``until``; yields
    (time, clock) after each sample."""
    clock = CallClock(wall_s, 1e9, 0.0, lambda: [PID], baseline=(PID,) if baseline else ())
    clock.interval = step or clock.interval
    t = clock.next_check
    while t <= until + 1e-9:
        k.t = t
        clock.check(t)
        assert clock.last == t  # sampled
        yield t, clock
        t = clock.next_check if clock.next_check > t else t + clock.interval  # past the hard cap it stays put


def test_long_waits_are_discounted_even_when_the_kernel_reports_them_late(kernel):
    # a CPU-bound thread on a saturated host: 3 ms slices between waits longer than the check interval (50 ms)
    k = kernel({1: [("sleep", 0.002)] + [("run", 0.003), ("wait", 0.137)] * 40 + [("run", 0.003)]})
    for t, clock in _drive(k, 1.0, 5.7):
        truth = t - k.waited()
        # never charges waiting; a wait still in progress is charged only for the stretch it began in (the first
        # check comes 0.25 s after the start, the others every interval)
        assert truth - 1e-6 <= clock.charged <= truth + 0.25 + clock.interval, (t, clock.charged, truth)
    # once every wait is reported, the charge is exactly the time not waiting: 41 slices of 3 ms, 2 ms asleep before
    # them and the sleep after the last (from 5.605 s)
    assert clock.charged == pytest.approx(41 * 0.003 + 0.002 + (t - 5.605), abs=1e-6)
    assert clock.check(t) is None


@pytest.mark.parametrize("wait", [0.01, 0.049, 0.05, 0.071, 0.1, 0.26, 0.9])
def test_waits_of_any_length_against_the_interval_are_discounted_in_full(kernel, wait):
    k = kernel({1: [("run", 0.004), ("wait", wait)] * 30 + [("run", 0.004), ("sleep", 1.0)]})
    end = 30 * (wait + 0.004) + 0.004  # the last slice ends here; then it sleeps
    *_, (t, clock) = _drive(k, 2.0, end + 0.3)
    assert t > end
    assert clock.waited == pytest.approx(30 * wait, abs=1e-6)
    assert clock.charged == pytest.approx(31 * 0.004 + (t - end), abs=1e-6)


def _until_verdict(k: FakeKernel, clock: CallClock) -> tuple[float, str]:
    t, verdict = clock.next_check, None
    while verdict is None:
        k.t = t
        verdict = clock.check(t)
        t = clock.next_check if t < clock.next_check else t + clock.interval
    return k.t, verdict


def test_sleeping_is_charged_in_full_and_times_out(kernel):
    k = kernel({1: [("run", 0.01), ("sleep", 600.0)]})
    clock = CallClock(1.0, 1e9, 0.0, lambda: [PID], baseline=(PID,))
    t, verdict = _until_verdict(k, clock)
    assert verdict == "wall" and t == pytest.approx(1.0) and clock.waited == 0.0


def test_a_wait_in_progress_does_not_end_a_call_that_is_within_its_limit(kernel):
    # 0.6 s of work and 0.1 s asleep under a 1 s limit, then a 1.5 s wait for a CPU that the kernel reports only
    # when it ends: the call must not be charged past its limit while it waits
    k = kernel({1: [("run", 0.6), ("sleep", 0.1), ("wait", 1.5), ("run", 0.2), ("sleep", 600.0)]})
    clock = CallClock(1.0, 1e9, 0.0, lambda: [PID], baseline=(PID,))
    t, verdict = _until_verdict(k, clock)
    assert verdict == "wall" and t == pytest.approx(0.7 + 1.5 + 0.2 + 0.1, abs=clock.interval + 1e-6)


def test_waiting_banked_by_many_threads_does_not_pay_for_a_later_sleep(kernel):
    # four threads wait for a CPU side by side for 2 s (8 thread-seconds of waiting), then one sleeps: the sleep is
    # charged second for second. Within one interval the threads' waits are summed up to the interval (sequential
    # processes of a shell pipeline each wait in turn), so the discount may exceed the time in which some thread
    # was waiting by at most the interval in which the side-by-side waits end
    threads = {tid: [("run", 0.001), ("wait", 1.999), ("run", 0.001)] for tid in (1, 2, 3, 4)}
    threads[1] = threads[1] + [("sleep", 600.0)]
    k = kernel(threads)
    seen = []
    for t, clock in _drive(k, 3.0, 6.0):
        assert clock.waited <= k.waited() + clock.interval + 1e-6, (t, clock.waited)
        seen.append((t, clock.charged))
    assert clock.waited >= k.waited() - 1e-6
    after = [(t, charged) for t, charged in seen if t >= 2.05]
    assert after[-1][1] - after[0][1] == pytest.approx(after[-1][0] - after[0][0])
    assert clock.check(k.t + 4.0) == "wall"


def test_a_thread_waiting_since_birth_and_a_sleeping_thread_that_wakes_into_a_wait(kernel):
    # thread 2 is born at 0.4 s and waits 0.3 s before it first runs; thread 1 sleeps, wakes at 0.61 s into a
    # 0.2 s wait. Some thread waited from 0.4 to 0.81 s (0.41 s), the two together 0.5 s (0.09 s side by side).
    k = kernel({1: [("run", 0.01), ("sleep", 0.6), ("wait", 0.2), ("run", 0.05)],
                2: [("wait", 0.3), ("run", 0.02)]}, born={2: 0.4})
    *_, (_t, clock) = _drive(k, 1.0, 1.5)
    assert k.waited() == pytest.approx(0.41)
    # when a wake-up began a wait is known only to the interval: up to one interval of it may go uncounted
    assert 0.41 - clock.interval - 1e-6 <= clock.waited <= 0.5 + 1e-6


def test_without_a_baseline_the_first_stretch_is_charged_as_it_was(kernel):
    k = kernel({1: [("wait", 0.2), ("run", 0.01), ("wait", 0.3), ("run", 0.01)]})
    *_, (_t, clock) = _drive(k, 1.0, 0.8, baseline=False)
    # the first 0.25 s (its 0.2 s of waiting included) is charged; the 0.3 s wait after it is discounted
    assert clock.charged == pytest.approx(0.8 - 0.3, abs=1e-6)


def test_the_hard_cap_ends_a_call_whose_threads_always_wait(kernel):
    k = kernel({tid: [("run", 0.001), ("wait", 0.5)] * 100 for tid in (1, 2, 3)})
    clock = CallClock(1.0, 1e9, 0.0, lambda: [PID], baseline=(PID,))
    t, verdict = _until_verdict(k, clock)
    assert verdict == "hard" and t == pytest.approx(_clock.hard_wall_s(1.0), abs=clock.interval)
    assert "waiting for a CPU" in clock.note(verdict, t)


def test_a_running_thread_whose_schedstat_stands_still_is_not_taken_for_waiting(kernel):
    # On a nohz_full CPU the kernel may not update a running thread's schedstat until it is switched out: the loop
    # below looks "runnable and never on a CPU". Its clock ticks still advance, so it is charged and times out at
    # its limit instead of running on, discounted, to the hard cap.
    k = kernel({1: [("run", 600.0)]}, nohz_full=True)
    clock = CallClock(1.0, 1e9, 0.0, lambda: [PID], baseline=(PID,))
    t, verdict = _until_verdict(k, clock)
    assert verdict == "wall" and t == pytest.approx(1.0) and clock.waited == 0.0
