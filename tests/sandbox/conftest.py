"""Shared sandbox fixtures: one warm pool for the sandbox tests, and a process-leak check.

The pool uses small limits so that attacks end fast, and a 64 MiB workspace quota so that filling it is quick.
Its backend is bwrap, or the one named by ``MEDAGENTGYM_TEST_BACKEND`` (``docker``: ``make test-docker`` runs the
attack suite that way, unchanged). Either way the code of a call runs as the pool's ``jail_uids`` on the host
(bwrap as root, and docker, which has no user namespace), so the leak check finds every process a call left,
inside a container too.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from medagentgym.sandbox import Limits, make_pool

FAST = Limits(wall_s=10.0, cpu_s=10.0, memory_mb=2048, processes=64, output_bytes=65536, file_size_mb=64)
BACKEND = os.environ.get("MEDAGENTGYM_TEST_BACKEND", "bwrap")
if BACKEND not in ("bwrap", "docker"):
    raise pytest.UsageError(f"MEDAGENTGYM_TEST_BACKEND={BACKEND!r} is invalid: use 'bwrap' (default) or 'docker'")


def jail_processes(pool_or_uids, settle_s: float = 2.0) -> list[str]:
    """Host-wide ps lines of live processes owned by a jail uid (real or effective): a call's leftovers.

    Given a pool, its idle spare runners (forked ahead of need and already dropped to the jail uid) are the
    pool's own and not counted; given uids, every such process counts. Killed processes are reaped
    asynchronously, so a process still tearing down gets ``settle_s`` to go.
    """
    pool = pool_or_uids if hasattr(pool_or_uids, "jail_uids") else None
    uids = pool.jail_uids if pool is not None else pool_or_uids
    if not uids:
        return []
    wanted = {str(u) for u in uids}
    deadline = time.monotonic() + settle_s
    while True:
        spares = {pid for pid, role in pool.process_roles().items() if role.startswith("spare-")} if pool else set()
        out = subprocess.run(["ps", "-e", "-o", "ruid=,euid=,stat=,pid=,args="], capture_output=True,
                             text=True, check=True).stdout
        found = [line for line in out.splitlines()
                 if set(line.split()[:2]) & wanted and not line.split()[2].startswith("Z")
                 and int(line.split()[3]) not in spares]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def containers_left(launcher, settle_s: float = 15.0) -> list[str]:
    """Names of a docker launcher's containers still known to the engine after ``settle_s`` at most."""
    deadline = time.monotonic() + settle_s
    while True:
        names = launcher.containers()
        if not names or time.monotonic() > deadline:
            return names
        time.sleep(0.2)


@pytest.fixture(scope="session")
def pool(tmp_path_factory):
    """A pool of two warm workers (at most four) shared by the sandbox tests; after the suite no jailed process may
    remain.

    Its ``data_root`` holds one dataset, ``demo/readme.txt``, so it appears at ``/data/demo/readme.txt``.
    """
    root = tmp_path_factory.mktemp("data_root")
    (root / "demo").mkdir()
    (root / "demo" / "readme.txt").write_text("demo data\n")
    for path in (root, root / "demo"):
        path.chmod(0o755)
    # Workers it starts beyond the two are like them (grow_preload=None), not lean: the tests here may assume the
    # preloaded runners of a warm worker; test_elastic.py covers lean workers with pools of its own.
    p = make_pool(BACKEND, workers=2, max_workers=4, grow_preload=None, limits=FAST, workspace_mb=64, data_root=root)
    if BACKEND == "docker" or os.geteuid() == 0:
        assert p.jail_uids, f"the {BACKEND} pool reports no jail uids: the leak checks would be vacuous"
    yield p
    uids = list(p.jail_uids)
    p.close()
    assert jail_processes(uids) == [], "jailed processes survived the pool"
    if BACKEND == "docker":
        left = containers_left(p.launcher)
        p.launcher.remove_all()
        assert left == [], f"containers survived the pool: {left}"


@pytest.fixture(scope="session")
def backend() -> str:
    """The sandbox backend under test (``bwrap``, or ``MEDAGENTGYM_TEST_BACKEND``)."""
    return BACKEND


@pytest.fixture(scope="session")
def leftovers():
    """``leftovers(pool_or_uids)`` -> host-wide ps lines of a jail's leftover processes (see jail_processes)."""
    return jail_processes


@pytest.fixture(scope="session")
def container_leftovers():
    """``container_leftovers(docker_launcher)`` -> names of its containers the engine still has (15 s grace)."""
    return containers_left


@pytest.fixture(scope="session")
def fast_limits():
    """The small limits the shared pool uses."""
    return FAST


@pytest.fixture()
def session(pool):
    """A fresh persistent session; checks afterwards that the session left no jailed process behind."""
    with pool.session() as s:
        yield s
    assert jail_processes(pool) == []
