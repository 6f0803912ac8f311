"""A session's memory is bounded as a whole (issue 31): a memory cgroup per slot, jail processes first for the OOM
killer.

Attack: RLIMIT_AS is per process, so code that forks children multiplies ``memory_mb`` (four children of 500 MB
under ``memory_mb=1024`` held 2.5 GiB). Here six children of 160 MB each (each well under its own 256 MiB address
space cap) try to hold their memory at once under ``memory_mb=256``: without a cgroup all six do (960 MB); with the
slot's cgroup (256 + SLOT_OVERHEAD_MB = 640 MiB for the whole jail, worker included) the kernel kills some, and
what the survivors hold fits the limit.
"""

from __future__ import annotations

import json
import shutil

import pytest

from medagentgym.sandbox import Limits, make_pool
from medagentgym.sandbox._cgroup import SLOT_OVERHEAD_MB, SlotCgroups

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

CHILD_MB, CHILDREN, MEMORY_MB = 160, 6, 256

HOG = f"""
import os, json
reads = []
kids = []
for i in range({CHILDREN}):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            block = b"x" * ({CHILD_MB} << 20)  # every page written: resident, charged
            os.write(w, b"1")
            import time
            while True:
                time.sleep(1)
        except MemoryError:
            os._exit(3)
    os.close(w)
    reads.append(r)
    kids.append(pid)
held = 0
for r in reads:  # a child either writes "1" (it holds its block) or dies (EOF)
    held += os.read(r, 1) == b"1"
alive = 0
for pid in kids:  # those still alive hold their block now, all at once
    done, status = os.waitpid(pid, os.WNOHANG)
    alive += done == 0
for pid in kids:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
print(json.dumps({{"held": held, "alive": alive, "oom_score_adj": open("/proc/self/oom_score_adj").read().strip()}}))
"""


def test_forked_children_cannot_multiply_a_sessions_memory():
    cgroups = SlotCgroups.detect()
    if cgroups is None:
        pytest.skip("no writable memory cgroup here (the pool's layers say so: no mem-cgroup layer)")
    cgroups.close()
    with make_pool("bwrap", workers=1, max_workers=1, limits=Limits(memory_mb=MEMORY_MB, wall_s=120, cpu_s=120,
                                                                  processes=32)) as pool:
        assert any(layer.startswith("mem-cgroup") for layer in pool.layers), pool.layers
        assert {"oom-first", "oom-first-unlocked"} & set(pool.layers)
        with pool.session() as s:
            res = s.run_python(HOG)
        assert res.exit_code == 0, (res.stdout, res.stderr)
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert out["oom_score_adj"] == "1000"  # the jail's code goes first under host-wide pressure
        limit_mb = MEMORY_MB + SLOT_OVERHEAD_MB
        assert out["alive"] * CHILD_MB <= limit_mb, f"{out['alive']} children held {out['alive'] * CHILD_MB} MB " \
                                                    f"at once, over the session's {limit_mb} MiB"
        assert out["alive"] < CHILDREN
        peak = pool._cgroups.peak_mb(0)
        assert peak is None or peak <= limit_mb + 1
        # the pool survives: the next session runs normally
        with pool.session() as s:
            assert s.run_python("print(6 * 7)").stdout.strip() == "42"


def test_jail_processes_are_first_for_the_oom_killer_without_a_cgroup(monkeypatch):
    """Where no cgroup can be made, the jail's processes still get oom_score_adj 1000 (layer oom-first)."""
    monkeypatch.setenv("MEDAGENTGYM_SANDBOX_CGROUP", "off")
    with make_pool("bwrap", workers=1, max_workers=1) as pool:
        assert {"oom-first", "oom-first-unlocked"} & set(pool.layers)
        assert not any(x.startswith("mem-cgroup") for x in pool.layers)
        with pool.session() as s:
            res = s.run_python("import os; os.system('cat /proc/self/oom_score_adj'); "
                               "print(open('/proc/1/oom_score_adj').read().strip())")
        assert res.stdout.split() == ["1000", "1000"], (res.stdout, res.stderr)


def test_every_jail_process_is_born_first_for_the_oom_killer(monkeypatch):
    """No race with the host's passes over the jail's tree: with those passes writing nothing (as if every process
    was forked between a pass's listing and its write, which happened once on a loaded host), bwrap, the jail's
    init, its server and a runner's children still have oom_score_adj 1000, inherited from birth; and where the
    host holds CAP_SYS_RESOURCE the jail cannot lower it (oom_score_adj_min is inherited too)."""
    from medagentgym.sandbox import pool as pool_module

    monkeypatch.setenv("MEDAGENTGYM_SANDBOX_CGROUP", "off")
    monkeypatch.setattr(pool_module, "oom_first", lambda pids: True)
    with make_pool("bwrap", workers=1, max_workers=1, preload=("sqlite3",)) as pool:
        [worker] = pool._workers
        with open(f"/proc/{worker.proc.pid}/oom_score_adj") as fh:
            assert fh.read().strip() == "1000", "bwrap itself"
        with pool.session() as s:
            res = s.run_python("import os; os.system('cat /proc/self/oom_score_adj'); "
                               "print(open('/proc/1/oom_score_adj').read().strip())\n"
                               "try:\n    open('/proc/self/oom_score_adj', 'w').write('0')\n"
                               "except OSError as e:\n    print('refused')\n"
                               "print(open('/proc/self/oom_score_adj').read().strip())")
        lines = res.stdout.split()
        assert lines[:2] == ["1000", "1000"], (res.stdout, res.stderr)
        if "oom-first" in pool.layers:  # locked: lowering it needs CAP_SYS_RESOURCE, which no jail process holds
            assert lines[2:] == ["refused", "1000"], res.stdout


def test_a_worker_that_cannot_join_its_cgroup_never_runs_a_session():
    """Fail closed (attack round of issue 31): the pool's layers say ``mem-cgroup`` from its first worker, so a
    later worker (here a replacement) whose cgroup cannot be made must not serve a session without one. Before,
    the failure was a log line and the session ran unbounded while the layers still claimed the cgroup."""
    from medagentgym.sandbox import SandboxUnavailable

    cgroups = SlotCgroups.detect()
    if cgroups is None:
        pytest.skip("no writable memory cgroup here")
    cgroups.close()
    with make_pool("bwrap", workers=1, max_workers=1) as pool:
        assert any(layer.startswith("mem-cgroup") for layer in pool.layers), pool.layers
        real = pool._cgroups.base
        try:
            pool._cgroups.base = real / "gone" / "missing"  # mkdir of the slot's cgroup fails (ENOENT)
            pool._workers[0].proc.kill()  # the next session needs a new worker
            pool._workers[0].proc.wait()
            with pytest.raises(SandboxUnavailable, match="memory cgroup"), pool.session() as s:
                s.run_python("print(1)")
        finally:
            pool._cgroups.base = real
        with pool.session() as s:  # the cgroup works again: the pool recovers
            assert s.run_python("print(6 * 7)").stdout.strip() == "42"


def test_the_jail_cannot_undo_oom_first_where_the_layer_is_claimed(monkeypatch):
    """Attack (issue 31 review): a jailed program (exec'd, so its /proc files are its own) writes 0 to its
    ``oom_score_adj``. The kernel refuses only when the value was set by a process holding CAP_SYS_RESOURCE (that
    sets ``oom_score_adj_min``); a pool without it (a container that drops it, an unprivileged user) cannot lock
    the value. Before, the pool claimed ``oom-first`` there and the jail lowered its score to 0."""
    monkeypatch.setenv("MEDAGENTGYM_SANDBOX_CGROUP", "off")
    with make_pool("bwrap", workers=1, max_workers=1) as pool:
        with pool.session() as s:
            res = s.run_python("import subprocess; print(subprocess.run(['/bin/sh', '-c', 'echo 0 > "
                               "/proc/self/oom_score_adj; cat /proc/self/oom_score_adj'], capture_output=True, "
                               "text=True).stdout.split()[-1])")
        lowered = res.stdout.split()[-1] != "1000"
        assert not ("oom-first" in pool.layers and lowered), \
            f"layers claim oom-first but the jail set its oom_score_adj to {res.stdout.split()[-1]}"
        assert "oom-first" in pool.layers or "oom-first-unlocked" in pool.layers, pool.layers
