"""Host uids for jails: each one leased by one pool slot at a time, across every process on the host.

A slot's jailed code runs as its own unprivileged host uid. Two slots that share a uid could signal each other's
processes and read each other's files, so a uid must never be handed out twice while in use, not even to pools
of different processes (a training run next to an env server, two test runs). A lease is held twice, and both
are released by the kernel when the holding process dies (however it dies), so a crashed run never leaks its uids:

- a bound abstract Unix socket named after the uid (``@medagentgym-sandbox-uid-<uid>``): abstract names live in
  the network namespace, not in the file system, so processes in different mount namespaces (two containers, or
  a trainer whose ``/run`` and ``/tmp`` are private) still see each other's leases;
- a POSIX byte-range lock on one lock file (``/run`` or the temp folder), byte ``uid - BASE`` per uid: it also
  covers processes of the same mount namespace in other network namespaces.

What is not covered, and said by :func:`scope`: two processes that share neither a network namespace nor the lock
file (e.g. two containers with their own network and ``/run``, both running as root without a user namespace)
could lease the same host uid; give such deployments disjoint ranges (``MEDAGENTGYM_SANDBOX_UID_BASE``).
Inside one process, a set keeps two pools apart.

The range starts above the 16-bit uids that distributions and older pools of this project use.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading

__all__ = ["BASE", "COUNT", "lease", "release", "scope"]

BASE = int(os.environ.get("MEDAGENTGYM_SANDBOX_UID_BASE", "") or 100_000)
COUNT = 100_000
_LOCK_NAME = "medagentgym-sandbox-uids.lock"
_lock = threading.Lock()
_held: set[int] = set()
_sockets: dict[int, socket.socket] = {}  # uid -> its bound abstract socket (the lease across mount namespaces)
_fd: int | None = None


def _lock_file_path() -> str:
    return os.path.join("/run" if os.access("/run", os.W_OK) else tempfile.gettempdir(), _LOCK_NAME)


def _lock_file() -> int:
    """The process-wide descriptor of the lock file (kept open: closing any descriptor of the file would drop
    every lock this process holds on it)."""
    global _fd
    if _fd is None:
        _fd = os.open(_lock_file_path(), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return _fd


def lease() -> int:
    """A uid in ``[BASE, BASE + COUNT)`` no other slot on this host holds; held until :func:`release` or exit.

    Raises:
        OSError: Every uid of the range is leased (the message says how many).
    """
    with _lock:
        fd = _lock_file()
        start = random.randrange(COUNT)  # spread processes apart: fewer lock attempts than a shared start
        for i in range(COUNT):
            uid = BASE + (start + i) % COUNT
            if uid in _held:
                continue
            sock = _bind(uid)
            if sock is None:
                continue
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, uid - BASE, os.SEEK_SET)
            except OSError:
                sock.close()
                continue
            _held.add(uid)
            _sockets[uid] = sock
            return uid
    raise OSError(f"all {COUNT} sandbox uids ({BASE}-{BASE + COUNT - 1}) are leased on this host")


def release(uid: int) -> None:
    """Give ``uid`` back (its processes must be gone). Unknown uids are ignored."""
    with _lock:
        if uid not in _held or _fd is None:
            return
        _held.discard(uid)
        try:
            fcntl.lockf(_fd, fcntl.LOCK_UN, 1, uid - BASE, os.SEEK_SET)
        except OSError:
            pass
        sock = _sockets.pop(uid, None)
        if sock is not None:
            sock.close()


def _bind(uid: int) -> socket.socket | None:
    """The uid's abstract socket, bound by this process; None when another process holds it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(f"\0medagentgym-sandbox-uid-{uid}")
    except OSError:
        sock.close()
        return None
    return sock


def scope() -> str:
    """Where leases are seen, in one line (for the pool's log and ``docs/architecture.md``)."""
    where = f"processes sharing this network namespace (any mount namespace) or the lock file {_lock_file_path()}"
    try:
        if os.stat("/proc/1/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino:
            where += "; this process is in a network namespace of its own: a pool in another container could lease "\
                     "the same uids unless it shares that file (or set MEDAGENTGYM_SANDBOX_UID_BASE apart)"
    except OSError:
        pass
    return f"uid leases are host-wide among {where}"
