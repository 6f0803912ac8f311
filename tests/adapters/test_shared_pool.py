"""The adapters' pool: one elastic ``sandbox`` pool per process and backend (it grows with the episodes in flight,
see tests/sandbox/test_elastic.py), and a forked child (AsyncVectorEnv's workers) never borrows its parent's."""

from __future__ import annotations

import multiprocessing

from medagentgym.adapters._common import shared_pool


def _child_pool(backend: str, parent_id: int, out) -> None:
    pool = shared_pool(backend, allow_unisolated=True)
    with pool.session() as session:
        out.put((id(pool) != parent_id, session.run_python("print(6 * 7)").stdout))


def test_one_pool_per_process_and_a_forked_child_makes_its_own(sandbox_backend):
    pool = shared_pool(sandbox_backend, allow_unisolated=True)
    assert shared_pool(sandbox_backend, allow_unisolated=True) is pool
    assert pool.stats()["max_workers"] > pool.stats()["min_workers"] >= 1  # elastic: room to grow
    with pool.session():  # the parent holds a worker while the child works: the child must not touch it
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_child_pool, args=(sandbox_backend, id(pool), out))
        child.start()
        fresh, printed = out.get(timeout=600)
        child.join(timeout=60)
    assert child.exitcode == 0 and fresh and printed == "42\n"
