"""Host uids for jails: each one leased by one pool slot at a time, across every process on the host.

A slot's jailed code runs as its own unprivileged host uid. Two slots that share a uid could signal each other's
processes and read each other's files, so a uid must never be handed out twice while in use, not even to pools
of different processes (a training run next to an env server, two test runs). Leases are POSIX byte-range locks
on one lock file, byte ``uid - BASE`` per uid: the kernel drops them when the holding process dies (however it
dies), so a crashed run never leaks its uids. Inside one process, a set keeps two pools apart (record locks do
not conflict within their owning process).

The range starts above the 16-bit uids that distributions and older pools of this project use.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
import threading

__all__ = ["BASE", "COUNT", "lease", "release"]

BASE = 100_000
COUNT = 100_000
_LOCK_NAME = "medagentgym-sandbox-uids.lock"
_lock = threading.Lock()
_held: set[int] = set()
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
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, uid - BASE, os.SEEK_SET)
            except OSError:
                continue
            _held.add(uid)
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
