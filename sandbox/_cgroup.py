"""A memory cgroup per sandbox slot, and the jail's processes made the kernel's first choice under memory pressure.

``memory_mb`` is RLIMIT_AS: per process. A session's code that forks children multiplies it (four children of
500 MB under ``memory_mb=1024`` held 2.5 GiB). A cgroup bounds the jail as a whole: every process of a slot's
jail (bwrap, the worker server, its zygotes, runners and whatever they start) is moved into the slot's own
memory cgroup, whose limit is the session's ``memory_mb`` plus ``SLOT_OVERHEAD_MB`` for the worker itself.
When the jail passes it, the kernel's OOM killer picks a process of that cgroup, never one outside it.

Which hierarchy: a cgroup v2 tree whose ``memory`` controller this process may delegate (its own cgroup lists
``memory`` in ``cgroup.subtree_control``, or can enable it), else the cgroup v1 ``memory`` hierarchy (writable as
root: ``memory.limit_in_bytes``, and ``memory.memsw.limit_in_bytes`` where swap accounting is on). Neither
(a container without a writable cgroup fs, no root): no cgroup, and the pool's layers do not list ``mem-cgroup``.

Independently, every jail process gets ``oom_score_adj`` 1000, so under host-wide pressure the kernel kills jailed
code before the trainer or the env server. The value is locked only when this process holds CAP_SYS_RESOURCE: the
kernel then also sets ``oom_score_adj_min`` to 1000, and lowering below it needs CAP_SYS_RESOURCE, which no jail
process holds (layer ``oom-first``). Without it (a container that drops the capability, an unprivileged pool) a
jailed program that owns its /proc files (any exec'd one) can write 0 back: the layer is ``oom-first-unlocked``
(the memory cgroup, where there is one, still bounds the jail).
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

__all__ = ["SLOT_OVERHEAD_MB", "SlotCgroups", "jail_tree", "oom_first", "oom_first_layer"]
log = logging.getLogger("medagentgym.sandbox.pool")

#: Memory a slot's worker needs besides its session's code (server, zygotes, spares; the ml zygote with
#: scikit-learn loaded is the largest, ~150 MiB): added to ``memory_mb`` for the slot's cgroup limit.
SLOT_OVERHEAD_MB = 384


def jail_tree(pid: int) -> list[int]:
    """``pid`` and every descendant (by ``/proc/<pid>/task/*/children``)."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except OSError:
                pass
    return seen


def oom_first(pids: list[int]) -> bool:
    """Set ``oom_score_adj`` 1000 on ``pids`` (their children inherit it); True when every live one took it."""
    ok = True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/oom_score_adj", "w") as fh:
                fh.write("1000")
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        except OSError:
            ok = False
    return ok


def oom_first_layer() -> str:
    """``oom-first`` where the jail cannot lower the ``oom_score_adj`` this process sets (it holds
    CAP_SYS_RESOURCE, so the kernel locks the value as the minimum), else ``oom-first-unlocked``."""
    try:
        with open("/proc/self/status") as fh:
            eff = next((int(line.split()[1], 16) for line in fh if line.startswith("CapEff:")), 0)
    except (OSError, ValueError):
        eff = 0
    return "oom-first" if eff >> 24 & 1 else "oom-first-unlocked"  # CAP_SYS_RESOURCE is capability 24


def _mounts() -> list[tuple[str, str, str]]:
    """``(mount point, fs type, super options)`` of the cgroup file systems."""
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
                    out.append((fields[4].replace("\\040", " "), rfields[0], rfields[2]))
    except OSError:
        pass
    return out


def _own_path(version: str) -> str | None:
    """This process's cgroup path in the v2 tree (``version="2"``) or the v1 memory hierarchy."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                hid, ctrls, path = line.rstrip("\n").split(":", 2)
                if (version == "2" and hid == "0" and ctrls == "") or (version == "1" and "memory" in ctrls.split(",")):
                    return path
    except OSError:
        pass
    return None


def _remove_stale(parent: Path) -> None:
    """Remove the empty cgroups of pools whose process is gone (killed before it could remove them)."""
    for base in parent.glob("medagentgym-*"):
        try:
            pid = int(base.name.split("-")[1])
            os.kill(pid, 0)
            continue  # its pool's process still runs
        except (ValueError, IndexError):
            continue
        except ProcessLookupError:
            pass
        except OSError:
            continue
        for child in [*base.glob("slot*"), *base.glob("probe"), base]:
            try:
                child.rmdir()
            except OSError:
                pass


def _try_base(parent: Path, version: str) -> Path | None:
    """A new, writable cgroup for this pool under ``parent`` where children get a memory limit, or None."""
    base = parent / f"medagentgym-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        base.mkdir()
        if version == "2":
            with open(base / "cgroup.subtree_control", "w") as fh:
                fh.write("+memory")
        probe = base / "probe"
        probe.mkdir()
        limit = probe / ("memory.max" if version == "2" else "memory.limit_in_bytes")
        with open(limit, "w") as fh:
            fh.write(str(1 << 30))
        probe.rmdir()
        return base
    except OSError as exc:
        log.debug("no memory cgroup under %s: %s", parent, exc)
        for path in (base / "probe", base):
            try:
                path.rmdir()
            except OSError:
                pass
        return None


class SlotCgroups:
    """The pool's memory cgroups: one base cgroup, one child per slot (see the module docstring).

    Use :meth:`detect`; ``None`` means no cgroup is available here.
    """

    def __init__(self, base: Path, version: str) -> None:
        self.base, self.version = base, version
        self._limit_file = "memory.max" if version == "2" else "memory.limit_in_bytes"
        self._swap_file = "memory.swap.max" if version == "2" else "memory.memsw.limit_in_bytes"

    @classmethod
    def detect(cls) -> SlotCgroups | None:
        """The memory cgroups this host lets this process make (v2 first, then v1), or None."""
        if os.environ.get("MEDAGENTGYM_SANDBOX_CGROUP", "").strip().lower() in ("0", "off", "no"):
            return None
        mounts = _mounts()
        for version, fstype in (("2", "cgroup2"), ("1", "cgroup")):
            own = _own_path(version)
            if own is None:
                continue
            for point, kind, options in mounts:
                if kind != fstype or (version == "1" and "memory" not in options.split(",")):
                    continue
                if version == "2":
                    try:
                        if "memory" not in (Path(point) / "cgroup.controllers").read_text().split():
                            continue
                    except OSError:
                        continue
                parent = Path(point) / own.lstrip("/")
                _remove_stale(parent)
                base = _try_base(parent, version) if parent.is_dir() else None
                if base is not None:
                    return cls(base, version)
        return None

    @property
    def layer(self) -> str:
        return f"mem-cgroup-v{self.version}"

    def path(self, slot: int) -> Path:
        return self.base / f"slot{slot}"

    def attach(self, slot: int, pids: list[int], memory_mb: int) -> bool:
        """Make the slot's cgroup (limit ``memory_mb + SLOT_OVERHEAD_MB``) and move ``pids`` into it."""
        path = self.path(slot)
        try:
            path.mkdir(exist_ok=True)
            if self.version == "1":  # a moved process's charges move with it (the limit covers them)
                _write(path / "memory.move_charge_at_immigrate", "3", quiet=True)
            self.set_limit(slot, memory_mb)
            for pid in pids:
                try:
                    _write(path / "cgroup.procs", str(pid))
                except ProcessLookupError:
                    continue
            if self.version == "2":
                _write(path / "memory.oom.group", "0", quiet=True)  # kill the process, not the whole jail
            return True
        except OSError as exc:
            log.warning("could not put slot %s's jail into its memory cgroup %s: %s", slot, path, exc)
            return False

    def set_limit(self, slot: int, memory_mb: int) -> None:
        """The slot's limit for a session of ``memory_mb`` (swap included where it is accounted)."""
        path = self.path(slot)
        limit = str((int(memory_mb) + SLOT_OVERHEAD_MB) << 20)
        if self.version == "1":  # memsw must stay >= the limit: raise it first when growing, after when shrinking
            _write(path / self._swap_file, limit, quiet=True)
            _write(path / self._limit_file, limit)
            _write(path / self._swap_file, limit, quiet=True)
        else:
            _write(path / self._limit_file, limit)
            _write(path / self._swap_file, "0", quiet=True)

    def peak_mb(self, slot: int) -> float | None:
        """The slot cgroup's peak memory use in MiB (None where the kernel does not say)."""
        name = "memory.peak" if self.version == "2" else "memory.max_usage_in_bytes"
        try:
            return int((self.path(slot) / name).read_text()) / (1 << 20)
        except (OSError, ValueError):
            return None

    def remove(self, slot: int) -> None:
        """Remove the slot's cgroup (its processes must be gone; best effort)."""
        try:
            self.path(slot).rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("slot cgroup %s not removed: %s", self.path(slot), exc)

    def close(self, wait_s: float = 5.0) -> None:
        """Remove every slot's cgroup and the pool's (after its workers were killed): processes still exiting are
        waited for, up to ``wait_s``, then killed (only jail processes are in these cgroups)."""
        import signal
        import time

        deadline = time.monotonic() + wait_s
        for child in list(self.base.glob("slot*")):
            while True:
                try:
                    pids = [int(p) for p in (child / "cgroup.procs").read_text().split()]
                except OSError:
                    pids = []
                if not pids:
                    break
                if time.monotonic() > deadline:
                    for pid in pids:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
                time.sleep(0.02)
                if time.monotonic() > deadline + wait_s:
                    break
            try:
                child.rmdir()
            except OSError as exc:
                log.warning("slot cgroup %s not removed: %s", child, exc)
        try:
            self.base.rmdir()
        except OSError as exc:
            log.warning("pool cgroup %s not removed: %s", self.base, exc)


def _write(path: Path, value: str, quiet: bool = False) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError:
        if not quiet:
            raise
