"""The adapters' shared sandbox pool follows the episodes in flight: it starts workers when every one is busy, up to
a cap, and at the cap a session waits a short, bounded time, then fails with one line naming the cap and the fix."""

from __future__ import annotations

import threading

import pytest

from medagentgym.adapters._common import MAX_WORKERS_ENV, SharedPool, default_max_workers
from sandbox.errors import SandboxBusy


@pytest.fixture()
def pool(sandbox_backend):
    made: list[SharedPool] = []

    def make(**kwargs) -> SharedPool:
        made.append(SharedPool(sandbox_backend, allow_unisolated=True, **kwargs))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_concurrent_sessions_grow_the_pool_and_closing_frees_them(pool):
    shared = pool(max_workers=16)
    assert shared.workers == 0  # nothing starts before the first episode
    sessions, errors = [], []
    lock = threading.Lock()

    def open_one() -> None:
        try:
            session = shared.session()
            with lock:
                sessions.append(session)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and len(sessions) == 6 and shared.in_use == 6
    assert 6 <= shared.workers <= 12  # grown for the demand (doubling at most), not to the cap
    assert sessions[0].run_python("print(6 * 7)").stdout == "42\n"  # a real session behind the wrapper
    for session in sessions:
        session.close()
        session.close()  # idempotent: the slot is freed once
    assert shared.in_use == 0
    started = shared.workers
    with shared.session(), shared.session():
        assert shared.workers == started  # free workers are reused before any new one starts


def test_at_the_cap_a_session_waits_then_fails_with_one_line(pool):
    shared = pool(max_workers=2, wait_s=0.5)
    first, second = shared.session(), shared.session()
    with pytest.raises(SandboxBusy) as busy:
        shared.session()
    message = str(busy.value)
    assert "\n" not in message and "cap (2)" in message and f"{MAX_WORKERS_ENV}=N" in message
    # a waiting session gets the worker an episode gives back
    shared.wait_s = 60
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(shared.session()))
    waiter.start()
    first.close()
    waiter.join(timeout=60)
    assert got and shared.workers == 2
    got[0].close()
    second.close()


def test_the_cap_comes_from_the_environment_or_memory(monkeypatch):
    monkeypatch.setenv(MAX_WORKERS_ENV, "24")
    assert default_max_workers() == 24
    monkeypatch.setenv(MAX_WORKERS_ENV, "lots")
    with pytest.raises(ValueError, match=f"{MAX_WORKERS_ENV}='lots' is invalid"):
        default_max_workers()
    monkeypatch.delenv(MAX_WORKERS_ENV)
    assert 4 <= default_max_workers() <= 1024
