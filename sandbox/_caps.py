"""Linux capabilities of the in-jail processes (stdlib + ctypes; imported inside the jail).

As root, bubblewrap starts the worker server with exactly the capabilities it is told to add, but leaves the
*bounding* set full and copies the added ones into the ambient set. This module narrows every process to what
it needs, before any code that agent-written programs can influence runs:

=================  ==================================  =====================================================
process            effective / permitted               why
=================  ==================================  =====================================================
worker server      KILL / KILL SETUID SETGID SETPCAP   kills a call's leftovers (another uid); its children
                                                       need the other three to drop to the runner uid
zygotes            none / SETUID SETGID SETPCAP        fork runners, kill nothing
runner, cleaner    none / none (bounding set empty)    drop every capability, then the uid, at fork
=================  ==================================  =====================================================

The bounding set of each process equals its permitted set; inheritable and ambient sets are empty. With
no-new-privs set by bwrap, no execve can add a capability back.

Example:
    >>> restrict(permitted={CAP_KILL}, effective={CAP_KILL})   # inside the jail, as the worker server
    >>> read_status()["CapEff"]
    32
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["CAP_KILL", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "drop_to_uid", "mask", "read_status",
           "restrict"]

CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP = 5, 6, 7, 8
_VERSION_3 = 0x20080522
_PR_CAPBSET_READ, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 23, 24, 47, 4


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


def mask(caps: set[int] | frozenset[int]) -> int:
    """The bit mask of a set of capability numbers (as /proc/<pid>/status prints it, in hex)."""
    return sum(1 << c for c in caps)


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 40


def _capset(effective: int, permitted: int) -> None:
    data = (_Data * 2)()
    for i in range(2):
        data[i].effective = (effective >> (32 * i)) & 0xFFFFFFFF
        data[i].permitted = (permitted >> (32 * i)) & 0xFFFFFFFF
        data[i].inheritable = 0
    if _libc.capset(ctypes.byref(_Header(_VERSION_3, 0)), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


def _permitted() -> int:
    data = (_Data * 2)()
    if _libc.capget(ctypes.byref(_Header(_VERSION_3, 0)), data) != 0:
        return 0
    return data[0].permitted | (data[1].permitted << 32)


def _drop_bounding(keep: set[int]) -> bool:
    """Drop every capability not in ``keep`` from the bounding set (needs CAP_SETPCAP; False without it)."""
    held = _permitted()
    if not held & (1 << CAP_SETPCAP):
        return False
    _capset(held, held)  # CAP_SETPCAP must be effective for the drops
    for cap in range(_last_cap() + 1):
        if cap not in keep and _libc.prctl(_PR_CAPBSET_READ, cap, 0, 0, 0) == 1:
            if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"PR_CAPBSET_DROP({cap}): {os.strerror(err)}")
    return True


def restrict(permitted: set[int], effective: set[int]) -> bool:
    """Narrow this process to ``permitted`` (also its bounding set) and ``effective``; clear the rest.

    Args:
        permitted: Capabilities to keep in the permitted and bounding sets.
        effective: The subset to keep effective.

    Returns:
        True when the process held CAP_SETPCAP and its bounding set is now narrowed too; False where it
        holds no capabilities to narrow (non-root backends): then only what it had is dropped.

    Raises:
        OSError: A capability could not be dropped (the caller must not go on with more than it asked for).
    """
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    bounded = _drop_bounding(permitted)
    held = _permitted()
    _capset(mask(effective) & held, mask(permitted) & held)
    return bounded


def drop_to_uid(uid: int | None, gid: int | None = None) -> None:
    """Drop every capability (bounding set included), then become ``uid``/``gid`` for good.

    With ``uid`` None (no uid to drop to: local and docker backends) only the capabilities are cleared.

    Raises:
        OSError: A step failed; the caller must exit rather than run code with privileges.
    """
    if uid is None:
        restrict(set(), set())
        return
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _drop_bounding(set())
    gid = uid if gid is None else gid
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # all ids non-zero: the kernel clears permitted, effective and ambient
    if _permitted():
        raise OSError(1, "capabilities survived the uid drop")


def read_status(pid: int | str = "self") -> dict[str, int]:
    """``CapInh/CapPrm/CapEff/CapBnd/CapAmb`` (ints), ``Seccomp`` and ``NoNewPrivs`` of ``/proc/<pid>/status``."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key.startswith("Cap"):
                out[key] = int(value.strip(), 16)
            elif key in ("Seccomp", "NoNewPrivs"):
                out[key] = int(value.strip())
    return out
