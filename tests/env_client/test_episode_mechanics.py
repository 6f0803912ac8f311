"""Guard on what one episode costs, counted rather than timed (issue 35).

A toy_sql oracle episode (one SQL call, one graded submit) on a warm one-worker pool must cost, once warm: one
runner process forked in the jail, three requests to the worker (open, run, reset), and on the host no worker start,
no helper process (mount sync, IPC limits), no staged copy or link and no file digest. Counts do not depend on the
machine's load, so a per-episode cost creeping back (a spare forked and thrown away each session, a helper process
per open, a copy per mount) fails here on any machine. ``scripts/bench_rollout.py`` measures the time.
"""

from __future__ import annotations

from collections import Counter

import pytest

import medagentgym.sandbox._jail as jail
import medagentgym.sandbox.pool as sandbox_pool
from medagentgym.env_client import Env
from medagentgym.env_client.policies import make_policy
from medagentgym.env_client.rollout import WorkItem, run_episode

WARM_UP = 3
EPISODES = 8


@pytest.fixture()
def solo_pool(make_test_pool):
    """A one-worker pool: every episode lands on the same worker, whose counters the test reads."""
    pool = make_test_pool(1, preload=None)  # the spare-forking mechanics need warm (preloading) workers
    yield pool
    pool.close()


def _worker_counts(pool) -> tuple[int, int]:
    """``(runner forks, sessions)`` the pool's only worker reports."""
    (worker,) = pool._workers
    reply = worker.request({"op": "ping", "detail": True}, timeout=30)
    return reply["forks"], reply["sessions"]


def test_a_warm_oracle_episode_costs_one_runner_three_round_trips_and_nothing_else(
        solo_pool, built, toy_test, monkeypatch):
    root, fam = built
    env = Env(solo_pool, tasks_root=root)
    oracle = make_policy("oracle", families={"toy_sql": fam})
    items = [WorkItem(toy_test[i % len(toy_test)], 0, i) for i in range(WARM_UP + EPISODES)]
    for item in items[:WARM_UP]:  # the first sessions settle which kind of spare the worker keeps
        assert run_episode(env, oracle, item).final.reason == "submitted"

    ops: Counter = Counter()
    host: Counter = Counter()
    request = sandbox_pool._Worker.request

    def counted_request(self, msg, timeout):
        ops[msg.get("op")] += 1
        return request(self, msg, timeout)

    def counting(name, inner):
        def wrapper(*args, **kwargs):
            host[name] += 1
            return inner(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(sandbox_pool._Worker, "request", counted_request)
    monkeypatch.setattr(jail, "_run_helper", counting("helper process", jail._run_helper))
    monkeypatch.setattr(sandbox_pool, "_link_tree", counting("staged link or copy", sandbox_pool._link_tree))
    monkeypatch.setattr(solo_pool, "_start_worker", counting("worker start", solo_pool._start_worker))
    digests = sandbox_pool._file_digest.cache_info().misses
    forks0, sessions0 = _worker_counts(solo_pool)
    ops.clear()

    for item in items[WARM_UP:]:
        traj = run_episode(env, oracle, item)
        assert traj.final.reason == "submitted" and traj.final.reward == 1.0
        assert [s.action["action"] for s in traj.steps] == ["code_execution", "submit_answer"]
    forks1, sessions1 = _worker_counts(solo_pool)

    assert sessions1 - sessions0 == EPISODES
    # One runner per session: the spare forked for it ahead of time, used; none forked and thrown away.
    assert forks1 - forks0 == EPISODES, f"{(forks1 - forks0) / EPISODES:.2f} runner forks per episode, expected 1"
    ops.pop("ping", None)
    assert dict(ops) == {"open": EPISODES, "run": EPISODES, "reset": EPISODES}, dict(ops)
    assert sandbox_pool._file_digest.cache_info().misses == digests
    assert dict(host) == {}, f"per-episode host work that should happen once per pool: {dict(host)}"


def _uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line.split()[1] for line in fh if line.startswith("Uid:")))


def test_spares_of_the_last_kind_only_and_none_of_a_running_session_uid(solo_pool):
    """The worker forks spares only of the kind the last session started (a session of another kind forks its
    runner on its first call: two forks), and once a session's code runs no spare of its uid is alive: a spare of
    another kind forked for it was dropped before its first call ran (the code could signal or prlimit it)."""
    forks = []
    for kind in ("shell", "shell", "python", "python", "shell"):
        before, _ = _worker_counts(solo_pool)
        with solo_pool.session() as s:
            res = s.run_shell("true") if kind == "shell" else s.run_python("print(1)")
            assert res.ok, res
            roles = solo_pool.process_roles()
            if solo_pool.jail_uids:  # runners drop to the slot's uids (bwrap as root)
                runner = _uid(next(pid for pid, role in roles.items() if role == "runner"))
                spares = {role: _uid(pid) for pid, role in roles.items() if role.startswith("spare-")}
                assert runner not in spares.values(), (runner, spares)
        after, _ = _worker_counts(solo_pool)
        forks.append(after - before)
    assert forks == [1, 1, 2, 1, 2], forks


def test_stage_profile_counts_every_stage_only_while_active(make_env, toy_test, built):
    from medagentgym.env_client.episode import STAGES, profile_stages

    _, fam = built
    oracle = make_policy("oracle", families={"toy_sql": fam})
    env = make_env()
    run_episode(env, oracle, WorkItem(toy_test[0], 0, 0))  # not profiled: nothing recorded anywhere
    with profile_stages() as prof:
        for i in range(3):
            run_episode(env, oracle, WorkItem(toy_test[i], 0, i))
    run_episode(env, oracle, WorkItem(toy_test[1], 1, 1))  # after the block: not recorded either
    counts = {stage: len(rows) for stage, rows in prof.samples.items()}
    assert counts == {**dict.fromkeys(STAGES, 0), "reset.prepare": 3, "reset.open": 3, "reset.prompt": 3,
                      "step.parse": 6, "step.sandbox": 3, "step.exec": 3, "step.grade": 3, "step.bookkeeping": 6,
                      "close.session": 3}
    summary = prof.summary(episodes=3)
    assert set(summary) == {s for s, c in counts.items() if c} and summary["step.parse"]["n"] == 6
    assert all(row["cpu_mean_ms"] >= 0 and row["p50_ms"] <= row["p99_ms"] for row in summary.values())
