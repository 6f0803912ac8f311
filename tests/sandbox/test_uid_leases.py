"""uid leases hold across mount namespaces (issue 31): two trainers whose ``/run`` and ``/tmp`` are private (e.g.
two containers sharing the host's network namespace and kernel uids) never lease the same host uid.

Attack: before, the lease was only a lock on ``/run/medagentgym-sandbox-uids.lock`` (else in the temp folder), so
two processes with private ``/run`` and ``/tmp`` each locked their own file and could both take the same uid;
both processes here start their search at the same uid (the same random seed), which they then both leased.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEASE = ("import random, sys; random.seed(31); sys.path.insert(0, {root!r}); from medagentgym.sandbox import _uids; "
         "print(_uids.lease(), flush=True); sys.stdin.read()")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="needs root and unshare(1) for private mount namespaces")


def _private_mounts_process() -> subprocess.Popen:
    """A python that leases one uid inside its own mount namespace with a private /run, and holds it.

    The lock file lives in /run when it is writable (the tmpfs here), so a private /run is what made two trainers
    miss each other's leases. /tmp is left alone: the repository and its venv may live under it (a fresh clone in
    /tmp, as CI may have it), and a tmpfs there would hide this python itself."""
    code = LEASE.format(root=str(ROOT))
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount -t tmpfs medagentgym-run /run && exec "$0" -c "$1"',
         sys.executable, code],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_mount_namespaces_never_lease_the_same_uid():
    first = _private_mounts_process()
    try:
        uid_a = first.stdout.readline().strip()
        assert uid_a.isdigit(), first.stderr.read() if first.poll() is not None else uid_a
        second = _private_mounts_process()
        try:
            uid_b = second.stdout.readline().strip()
            assert uid_b.isdigit(), second.stderr.read() if second.poll() is not None else uid_b
        finally:
            second.communicate("", timeout=60)
        assert uid_a != uid_b, f"both processes leased host uid {uid_a}"
    finally:
        first.communicate("", timeout=60)


def test_a_lease_is_released_when_its_process_dies():
    from medagentgym.sandbox import _uids

    first = _private_mounts_process()
    uid = int(first.stdout.readline().strip())
    first.kill()
    first.wait()
    sock = _uids._bind(uid)  # the kernel dropped the dead process's socket: free again
    assert sock is not None
    sock.close()
    assert "network namespace" in _uids.scope()
