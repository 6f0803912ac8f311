"""Host side of the sandbox: a pool of warm workers, sessions on top of them.

A :class:`Pool` owns ``workers`` slots. Each slot has a host directory (``workspace/`` and ``tmp/``, on a
size-limited tmpfs when the host may mount one), an unprivileged uid, and one worker process started by a
launcher (``medagentgym.sandbox._jail``). A :class:`Session` borrows one worker for an episode; closing it kills what
the session left running, wipes the slot's directories and returns the worker. Workers are started from one
long-lived thread per slot (so slots start in parallel), because bubblewrap's ``--die-with-parent`` is tied
to the starting thread.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import itertools
import json
import logging
import os
import queue
import re
import select
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import uuid
import weakref
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from pathlib import Path

from . import _uids
from . import worker as _proto
from ._caps import mask
from ._clock import hard_wall_s
from ._cgroup import SlotCgroups, jail_tree, oom_first, oom_first_layer
from ._jail import JAIL_BRIDGE_DIR, Slot, ipc_limits, mount_tmpfs, set_bwrap_ipc_limits, sync_bwrap_mounts, umount
from .api import ErrorKind, ExecResult, Limits
from .bridge import SessionBridges, check_bridges
from .errors import SandboxBusy, SandboxError, SandboxUnavailable, SessionClosed, WorkerLost, WorkerRefused

log = logging.getLogger("sandbox")
_MOUNT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_GRACE_S = 15.0
#: Workers a pool starts at the same time (each start imports numpy and pandas: about a core-second).
_STARTS = min(8, max(2, os.cpu_count() or 2))


def _recv(fd: int, deadline: float) -> dict | None:
    """Read one protocol frame, giving up at ``deadline`` (raises TimeoutError). None at EOF."""
    buf = bytearray()
    need = _proto._HDR.size
    size = None
    while True:
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from the worker in time")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, max(need - len(buf), 1 << 16))
            if not chunk:
                return None
            buf += chunk
        if size is None:
            (size,) = _proto._HDR.unpack(buf[: _proto._HDR.size])
            need = _proto._HDR.size + size
            continue
        return json.loads(bytes(buf[_proto._HDR.size: need]))


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, inode: int, size: int, mtime_ns: int) -> str:
    """sha256 of a file, cached by its identity and version (the key's other fields)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def same_source(a: Path | None, b: Path) -> bool:
    """True when mount sources ``a`` and ``b`` show the same data: the same path, or two files with equal bytes.

    Families built from one seed ship byte-identical databases under the same mount name (mimic_iii and
    ehr_seqsql both mount ``mimic_iii.db``); treating them as one keeps a worker's jail instead of restarting it
    each time episodes of the two families alternate.
    """
    if a is None:
        return False
    if a == b:
        return True
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    if not (stat.S_ISREG(sa.st_mode) and stat.S_ISREG(sb.st_mode)) or sa.st_size != sb.st_size:
        return False
    return (_file_digest(str(a), sa.st_ino, sa.st_size, sa.st_mtime_ns)
            == _file_digest(str(b), sb.st_ino, sb.st_size, sb.st_mtime_ns))


def _send(fd: int, msg: dict, deadline: float) -> None:
    """Write one protocol frame to the non-blocking ``fd``, giving up at ``deadline`` (raises TimeoutError).

    A worker that stops reading (wedged, or stopped by the kernel) would otherwise block the caller forever
    once the frame is larger than what the pipe buffers.
    """
    data = json.dumps(msg, default=str).encode("utf-8")
    view = memoryview(_proto._HDR.pack(len(data)) + data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the worker did not read its request in time")
        if not select.select([], [fd], [], left)[1]:
            continue
        try:
            view = view[os.write(fd, view[: 1 << 16]):]
        except BlockingIOError:
            continue


class _Worker:
    """One running worker process and its request/response channel."""

    def __init__(self, slot: Slot, proc: subprocess.Popen, log_path: Path, ready: dict) -> None:
        self.slot = slot
        self.proc = proc
        self.log_path = log_path
        self.ready = ready
        self.lock = threading.Lock()
        self.dead = False
        self.roles: dict[int, str] | None = None  # jail pid -> role, as last reported (Pool.process_roles)
        os.set_blocking(proc.stdin.fileno(), False)  # requests are written with a deadline (_send)

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def request(self, msg: dict, timeout: float) -> dict:
        with self.lock:
            if not self.alive():
                raise WorkerLost(f"worker {self.slot.index} is not running")
            try:
                deadline = time.monotonic() + timeout
                _send(self.proc.stdin.fileno(), msg, deadline)
                reply = _recv(self.proc.stdout.fileno(), deadline)
                if reply is not None and not isinstance(reply, dict):
                    raise ValueError(f"a reply that is not a JSON object ({type(reply).__name__})")
            except Exception as exc:  # noqa: BLE001 - wedged, dead, or a reply we cannot read (RecursionError too)
                self.kill()
                raise WorkerLost(f"worker {self.slot.index} failed: {type(exc).__name__}: {str(exc)[:200]}") from None
            if reply is None:
                self.kill()
                raise WorkerLost(f"worker {self.slot.index} died (exit status {self.proc.poll()})")
            if not reply.get("ok"):
                raise WorkerRefused(f"worker {self.slot.index} refused {msg.get('op')!r}: {str(reply.get('error'))[:300]}")
            return reply

    def kill(self) -> None:
        self.dead = True
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("sandbox worker %s (pid %s) did not exit after SIGKILL", self.slot.index, self.proc.pid)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


def _cleanup(base: Path, workers: list, mounted: list, slots: list, cgroups: SlotCgroups | None = None) -> None:
    """Kill every worker, unmount the quotas, remove the pool's directory and give back its slots' uids, whoever
    leased them (the pool for bwrap, the docker launcher's ``prepare``), also at exit."""
    for w in list(workers):
        w.kill()
    if cgroups is not None:
        cgroups.close()
    for path in mounted:
        umount(path)
    shutil.rmtree(_stage_dir_of(base), ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)
    for slot in list(slots):
        for uid in slot.uids:
            _uids.release(uid)


def _raise_fd_limit(workers: int) -> None:
    """Raise this process's soft open-files limit towards its hard limit when ``workers`` need more: each worker
    holds two pipes here (and its session's bridges more), and the usual soft limit of 1024 ends a pool at a few
    hundred workers with EMFILE."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8 * workers + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if new > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            log.info("sandbox pool: open-files limit raised from %d to %d for %d workers", soft, new, workers)


def _shrink_loop(ref: weakref.ref) -> None:
    """A pool's shrinker: stops workers idle for ``idle_s`` beyond the floor. Holds the pool only weakly."""
    while True:
        pool = ref()
        if pool is None or pool._closed:
            return
        period = min(max(pool.idle_s / 4, 0.05), 5.0)
        pool._shrink(time.monotonic())
        del pool
        time.sleep(period)


def _stage_dir_of(base: Path) -> Path:
    """The pool's staging directory: a sibling with a random name of its own, recorded in ``base/stage-dir``.

    A bind mount shows its source's path in the jail's ``/proc/self/mountinfo``; staging under the pool's directory
    would name that directory (where the slots' workspaces live) to every jail. The sibling's name says nothing.
    """
    try:
        name = (base / "stage-dir").read_text().strip()
    except OSError:
        return base / "stage"
    return base.parent / name if name.startswith("s-") and "/" not in name else base / "stage"


def _force_writable(func, path, _exc) -> None:
    """rmtree error hook: the jailed code may have removed write permission from its own directories."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


def _process_identity(pid: int) -> str | None:
    """``"pid:start_time"`` of a live process (robust against pid reuse), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            start = fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None
    return f"{pid}:{start}"


_STAGE_COPY_MB = 256


def _link_tree(source: Path, target: Path) -> None:
    """Recreate ``source`` (a file or a directory tree) at ``target`` with hard links; copy when the two are on
    different filesystems (up to ``_STAGE_COPY_MB`` in all). Symbolic links are recreated as they are.

    Raises:
        OSError: Neither a link nor a copy was possible (or the copy would be too large).
    """
    files = [(source, target)] if not source.is_dir() else []
    if source.is_dir():
        target.mkdir(mode=0o755)
        for root, dirs, names in os.walk(source):
            rel = Path(root).relative_to(source)
            for d in dirs:
                if os.path.islink(os.path.join(root, d)):
                    os.symlink(os.readlink(os.path.join(root, d)), target / rel / d)
                else:
                    (target / rel / d).mkdir(mode=0o755)
            files += [(Path(root) / n, target / rel / n) for n in names]
    copied = 0
    for src, dst in files:
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
            continue
        try:
            os.link(src, dst)
        except OSError:
            copied += src.stat().st_size
            if copied > _STAGE_COPY_MB << 20:
                raise OSError(f"{source} is on another filesystem and larger than {_STAGE_COPY_MB} MiB") from None
            shutil.copy2(src, dst)


def _namespace_pids(root: int) -> dict[int, int]:
    """Host pid -> innermost-namespace pid of ``root`` and all its descendants (the same pid without a pid
    namespace)."""
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/status") as fh:
                nspid = next((line.split()[1:] for line in fh if line.startswith("NSpid:")), [str(pid)])
            found[pid] = int(nspid[-1])
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return found


#: ``sh -c`` script run before bwrap (``$0`` is bwrap, ``"$@"`` its arguments): raise this process's own
#: ``oom_score_adj`` to 1000 (always allowed), then become bwrap, so the whole jail is born first for the OOM killer.
_OOM_FIRST_EXEC = '{ echo 1000 > /proc/self/oom_score_adj; } 2>/dev/null; exec "$0" "$@"'


def _pipe_with(data: bytes) -> int:
    """A pipe already holding ``data`` (< 64 KiB) and closed for writing; returns its read end."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end


def _remove_stale_pools(parent: Path) -> None:
    """Unmount and delete pool directories whose owning process died without closing them (SIGKILL)."""
    for base in parent.glob("sandbox-pool-*"):
        try:
            owner = (base / "owner").read_text().strip()
            pid = int(owner.split(":")[0])
        except (OSError, ValueError):
            continue
        if _process_identity(pid) == owner:
            continue
        mounted = [w for w in base.glob("w*") if w.is_dir() and os.path.ismount(w)]
        _cleanup(base, [], mounted, [])
        log.info("removed stale sandbox pool directory %s (owner %s is gone)", base, owner)


def _slot_mode(slot: Slot) -> int:
    """Mode of a slot's writable directories: its two runner uids share the group ``slot.uid``."""
    return 0o770 if slot.alt_uid is not None else 0o700


def _wipe(path: Path, uid: int | None, mode: int = 0o700) -> None:
    """Empty ``path`` without following links planted by the jailed code; restore owner and mode."""
    os.chmod(path, 0o700)
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=_force_writable)
            else:
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass
    os.chmod(path, mode)
    if uid is not None and os.geteuid() == 0:
        os.chown(path, uid, uid)


class _Ticket:
    """A session open waiting for a worker: the pool hands it one (``worker``) or an error, first come first served."""

    __slots__ = ("worker", "error", "event")

    def __init__(self) -> None:
        self.worker: _Worker | None = None
        self.error: BaseException | None = None
        self.event = threading.Event()


#: Host memory one worker with a live session costs, in MiB (PSS of its processes: the pages shared by all workers
#: count once in all): ``scripts/bench_scale.py`` measured 39.6 MiB per session (38.7 marginal) with 256 sessions
#: of the flagship mix open on lean workers, idle between turns (an SQL session ~25, pandas ~60, scikit-learn
#: ~150-200; a warm worker ~80). Heavier mixes are stopped by the memory reserve before the cap (``_memory_low``).
WORKER_MB = 40
#: Share of the host's memory (or of the cgroup's limit) the default cap of a pool may take.
MEMORY_SHARE = 0.5
#: Environment variable that sets the default cap of every pool (``make_pool(max_workers=...)`` wins).
MAX_WORKERS_ENV = "MEDAGENTGYM_SANDBOX_MAX_WORKERS"


def memory_limit_mb() -> int:
    """This host's memory in MiB, or the memory limit of our cgroup (v2 or v1) when it is lower."""
    total = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) // 1024
                break
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as fh:
                raw = fh.read().strip()
        except OSError:
            continue
        if raw.isdigit():
            total = min(total, int(raw) >> 20) if total else int(raw) >> 20
    return total or 4096


def default_max_workers() -> tuple[int, str]:
    """The default cap of a pool and where it comes from: ``$MEDAGENTGYM_SANDBOX_MAX_WORKERS``, else
    :data:`MEMORY_SHARE` of the memory limit divided by :data:`WORKER_MB`.

    Raises:
        ValueError: The environment variable is set to something other than a positive integer.
    """
    raw = os.environ.get(MAX_WORKERS_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"{MAX_WORKERS_ENV}={raw!r} is invalid: use a positive integer (the most sandbox "
                             f"workers one pool may run)")
        return int(raw), f"{MAX_WORKERS_ENV}={raw}"
    mem = memory_limit_mb()
    cap = max(2, int(mem * MEMORY_SHARE) // WORKER_MB)
    return cap, f"{MEMORY_SHARE:.0%} of {mem / 1024:.1f} GiB memory at {WORKER_MB} MiB per worker"


class Pool:
    """A pool of warm sandbox workers that grows with demand. Build one with :func:`medagentgym.sandbox.make_pool`.

    Capacity follows demand: ``workers`` warm workers start with the pool and stay; a session open that finds none
    idle starts another (several start at once, at most :data:`_STARTS` at a time), up to ``max_workers``; a
    worker idle for ``idle_s`` beyond the ``workers`` floor is stopped. A session open at the cap waits for one to
    close, at most ``acquire_timeout`` seconds, then raises :class:`SandboxBusy` with one line naming the cap and
    how to raise it. Waiting sessions are served first come, first served.

    Memory: one worker serves one session at a time, and a session keeps its worker from open to close, idle
    turns included, because a persistent session's variables live in its runner process and its files in its jail.
    The ``workers`` warm workers preload ``preload`` (numpy and pandas: fastest first calls, ~80 MiB of host memory
    each, ~200 MiB once a session imported scikit-learn, whose zygote stays); workers started on demand are *lean*:
    they preload ``grow_preload`` (sqlite3 only) and keep no zygote, so an idle or SQL session costs ~25 MiB and a
    session frees what it imported (numpy, pandas, scikit-learn: 0.3-3 s of CPU on first use) when it ends.
    ``grow_preload=None`` starts every worker like the warm ones. ``scripts/bench_scale.py`` measures all of this.

    Attributes:
        backend: ``"bwrap"``, ``"docker"`` or ``"local"``.
        layers: Isolation layers in force, e.g. ``["bwrap", "uid-drop", "pidns", "netns", "seccomp", ...]``.
        limits: Default per-call limits.
        min_workers: Warm workers kept even when idle (``workers=``).
        max_workers: Most workers the pool runs at once (the cap); ``cap_source`` says where it came from.
        jail_uids: Host uids the jailed code runs as (empty when no uid drop is possible).
    """

    def __init__(self, launcher, *, workers: int, limits: Limits, data_root: Path | None = None,
                 mounts: dict[str, Path] | None = None, workspace_mb: int = 512,
                 preload: tuple[str, ...] = ("numpy", "pandas", "sqlite3"), start_timeout: float = 120.0,
                 acquire_timeout: float = 30.0, sysv_shm_mb: int = 64, max_workers: int | None = None,
                 idle_s: float = 60.0, grow_preload: tuple[str, ...] | None = ("sqlite3",)) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers} is invalid: use at least 1")
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers={max_workers!r} is invalid: use a positive integer, or None for the "
                             f"default derived from memory")
        if idle_s <= 0:
            raise ValueError(f"idle_s={idle_s!r} is invalid: use a number of seconds > 0")
        self.launcher = launcher
        self.backend = launcher.backend
        self.limits = limits
        self.preload = ",".join(preload)
        self.grow_preload = self.preload if grow_preload is None else ",".join(grow_preload)
        self._slot_preload: dict[int, str] = {}  # slot index -> the preload of the workers started there
        self.start_timeout = start_timeout
        self.acquire_timeout = acquire_timeout
        self.workspace_quota_mb = workspace_mb
        self.sysv_shm_mb = sysv_shm_mb
        if max_workers is None:
            max_workers, self.cap_source = default_max_workers()
        else:
            self.cap_source = f"max_workers={max_workers}"
        self.max_workers = max(max_workers, workers)
        self.min_workers = workers
        _raise_fd_limit(self.max_workers)
        self.idle_s = idle_s
        self._closed = False
        _remove_stale_pools(Path(tempfile.gettempdir()))
        self._base = Path(tempfile.mkdtemp(prefix="sandbox-pool-"))
        (self._base / "owner").write_text(_process_identity(os.getpid()) or "")
        self._stage_dir = Path(tempfile.mkdtemp(prefix="s-", dir=self._base.parent))  # see _stage_dir_of
        (self._base / "stage-dir").write_text(self._stage_dir.name)
        self._staged: dict[tuple, Path] = {}
        self._stage_lock = threading.Lock()
        self.data_root = Path(data_root).resolve() if data_root else None
        self.mounts = self._check_mounts(mounts or {})
        self._as_root = os.geteuid() == 0 and self.backend == "bwrap"
        self._workers: list[_Worker] = []
        self._mounted: list[Path] = []
        self._slots: list[Slot] = []
        self._free_slots: list[Slot] = []  # slots whose worker was stopped for idleness, reused by growth
        # Capacity state, all under _cond: idle workers (most recently used last), workers starting, sessions
        # waiting (FIFO), workers lent to sessions.
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._idle_since: dict[int, float] = {}  # id(worker) -> monotonic time it became idle
        self._starting = 0
        self._waiters: collections.deque[_Ticket] = collections.deque()
        self._busy_count = 0
        self.peak_workers = 0
        self._spawn_q: queue.PriorityQueue = queue.PriorityQueue()
        self._spawn_seq = itertools.count()
        self._spawners: list[threading.Thread] = []
        self._spawn_lock = threading.Lock()
        # bwrap: each slot's jail in its own memory cgroup where the host allows one (sandbox/_cgroup.py)
        self._cgroups = SlotCgroups.detect() if self.backend == "bwrap" else None
        self._finalizer = weakref.finalize(self, _cleanup, self._base, self._workers, self._mounted, self._slots,
                                           self._cgroups)
        try:
            with self._cond:
                self._starting = workers
            futures = [self._submit_spawn(self._new_slot(self.preload)) for _ in range(workers)]
            started = [fut.result() for fut in futures]
        except BaseException:
            self.close()
            raise
        with self._cond:
            self._starting = 0
            for worker in started:
                self._idle.append(worker)
                self._idle_since[id(worker)] = time.monotonic()
            self.peak_workers = len(self._workers)
        ready = self._workers[0].ready
        self.layers = list(launcher.layers)
        if str(ready.get("seccomp")) == "on":
            self.layers.append("seccomp")
        if ready.get("no_new_privs"):
            self.layers.append("no-new-privs")
        if len(self._mounted) == workers:
            self.layers.append("ws-quota")
        caps = ready.get("caps") or {}
        if ready.get("caps_bounded") and caps.get("CapEff") == mask(_proto.SERVER_EFFECTIVE):
            self.layers.append("caps")  # the server holds only CAP_KILL effective, the runners nothing
        if ready.get("ipc_limits"):
            self.layers.append("ipc-limits")
        if ready.get("oom_first"):
            self.layers.append(oom_first_layer())  # oom-first only where the jail cannot lower it again
        if ready.get("mem_cgroup"):
            self.layers.append(self._cgroups.layer)
        threading.Thread(target=_shrink_loop, args=(weakref.ref(self),), name="sandbox-pool-shrink",
                         daemon=True).start()
        log.info("sandbox pool ready: backend=%s workers=%d (cap %d: %s) layers=%s seccomp=%s", self.backend,
                 workers, self.max_workers, self.cap_source, ",".join(self.layers), ready.get("seccomp"))

    @property
    def jail_uids(self) -> list[int]:
        """Host uids the jailed code of this pool's slots runs as (one per slot ever started)."""
        return [u for s in list(self._slots) for u in s.uids]

    def stats(self) -> dict[str, int]:
        """Live capacity counts: ``live`` workers (``idle`` + ``busy``), ``starting``, sessions ``waiting``,
        ``peak`` workers so far, the cap (``max_workers``) and the floor (``min_workers``)."""
        with self._cond:
            return {"live": len(self._idle) + self._busy_count, "idle": len(self._idle), "busy": self._busy_count,
                    "starting": self._starting, "waiting": len(self._waiters), "peak": self.peak_workers,
                    "max_workers": self.max_workers, "min_workers": self.min_workers}

    def prewarm(self, n: int, *, wait: bool = False) -> int:
        """Start workers now, ahead of a known demand (e.g. a trainer's episodes in flight per step), so that ``n``
        sessions can open without waiting for a worker to start.

        Starts enough workers to make ``n`` live (idle, busy or starting), within the cap and the memory reserve,
        on the pool's spawner threads: :data:`_STARTS` at a time, the CPU budget of starts. They start lean
        (``grow_preload``), like workers grown on demand, and a session opened meanwhile takes the first one ready.
        Workers above the floor stop after ``idle_s`` idle, as any grown worker does.

        Args:
            n: Sessions expected at once.
            wait: Block until the workers started here are up (or failed to start; failures are logged).

        Returns:
            How many workers this call started.

        Raises:
            ValueError: ``n`` is not a non-negative integer.
            SessionClosed: The pool is closed.
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"prewarm(n={n!r}) is invalid: pass the number of sessions expected at once (>= 0)")
        with self._cond:
            if self._closed:
                raise SessionClosed("the pool is closed: create a new one with make_pool()")
            live = len(self._idle) + self._busy_count + self._starting
            k = max(0, min(n, self.max_workers) - live)
            if k:
                k = min(k, self._memory_room())
            self._starting += k
        futures = []
        for _ in range(k):
            try:
                slot = self._new_slot(self.grow_preload)
                fut = self._submit_spawn(slot, priority=1)
            except (SandboxError, OSError) as exc:  # closed meanwhile, or no slot directory: uncount it
                self._prewarmed(None, Future(), error=exc)
                continue
            fut.add_done_callback(functools.partial(self._prewarmed, slot))
            futures.append(fut)
        if k:
            log.info("sandbox pool: prewarming %d worker(s) for %d sessions (%d live before)", k, n, live)
        if wait:
            futures_wait(futures)  # failures are logged by _prewarmed
        return k

    def _memory_room(self) -> int:
        """Workers the host's available memory allows now, above the pool's reserve (see :meth:`_memory_low`)."""
        try:
            with open("/proc/meminfo") as fh:
                avail = next(int(line.split()[1]) // 1024 for line in fh if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return self.max_workers
        return max(0, (avail - max(512, memory_limit_mb() // 20)) // WORKER_MB)

    def _prewarmed(self, slot: Slot | None, fut: Future, error: BaseException | None = None) -> None:
        """A prewarm start ended: its worker goes to the first waiting session or idles; a failure is logged and
        uncounted (the sessions waiting then start workers of their own)."""
        if error is None:
            try:
                worker = fut.result()
            except Exception as exc:  # noqa: BLE001 - whatever stopped the start is logged below
                worker, error = None, exc
        else:
            worker = None
        if worker is not None:
            self._started(worker, None)
            return
        with self._cond:
            self._starting -= 1
        if slot is not None:
            with self._spawn_lock:
                self._free_slots.append(slot)
        if not isinstance(error, SessionClosed):
            log.warning("sandbox pool: a prewarmed worker failed to start: %s", error)

    # -- workers ------------------------------------------------------------------------------
    def _check_mounts(self, mounts: dict[str, Path]) -> dict[str, Path]:
        checked = {}
        for name, path in mounts.items():
            if not _MOUNT_NAME.match(str(name)):
                raise ValueError(f"mount name {name!r} is invalid: use letters, digits, '_', '.', '-'")
            resolved = Path(path).resolve()
            if not resolved.exists():
                raise ValueError(f"mount {name!r}: host path {str(path)!r} does not exist")
            checked[str(name)] = self._stage(resolved)
        return checked

    def _wanted_mounts(self, extra: dict[str, Path]) -> dict[str, Path]:
        wanted: dict[str, Path] = {}
        if self.data_root and self.data_root.is_dir():
            wanted.update({p.name: self._stage(p.resolve()) for p in self.data_root.iterdir()
                           if _MOUNT_NAME.match(p.name)})
        wanted.update(self.mounts)
        wanted.update(extra)
        return wanted

    def _stage(self, source: Path) -> Path:
        """The path a jail binds for host ``source``: a hard-linked copy in the pool's staging directory.

        A bind mount shows its source's path within its filesystem in the jail's ``/proc/self/mountinfo``;
        binding a staged copy shows a randomly named directory (:func:`_stage_dir_of`) instead of the tasks root,
        the user's data layout or the pool's own directory. Hard links cost no space and share the bytes; where the source is on another filesystem a file
        tree up to ``_STAGE_COPY_MB`` is copied, and a larger one is bound as it is (its path then shows: logged).
        The local backend (no jail) binds nothing and uses the source itself.
        """
        if self.backend == "local":
            return source
        st = source.stat()
        key = (str(source), st.st_ino, st.st_mtime_ns, st.st_size)
        with self._stage_lock:
            staged = self._staged.get(key)
            if staged is None:
                target = self._stage_dir / f"{len(self._staged)}-{source.name}"
                try:
                    _link_tree(source, target)
                    staged = target
                except OSError as exc:
                    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
                    log.warning("sandbox mount %s is bound from its own path (%s): the jail's mountinfo shows it",
                                source, exc)
                    staged = source
                self._staged[key] = staged
        return staged

    def _prepare_slot(self, slot: Slot) -> Slot:
        slot.root.mkdir(mode=0o755)
        if self.workspace_quota_mb and mount_tmpfs(slot.root, self.workspace_quota_mb):
            self._mounted.append(slot.root)
        slot.mounts = self._wanted_mounts({})
        for sub in (slot.workspace, slot.tmp, slot.shm, slot.data, slot.bridge):
            sub.mkdir(mode=0o700, exist_ok=True)
            if slot.uid is not None:
                os.chown(sub, slot.uid, slot.uid)
        for sub in (slot.workspace, slot.tmp, slot.shm):
            os.chmod(sub, _slot_mode(slot))
        os.chmod(slot.data, 0o755)
        if slot.uid is not None:
            os.chown(slot.bridge, 0, 0)  # relay sockets are created by the host; the jail only connects
        os.chmod(slot.bridge, 0o755)
        return slot

    def _new_slot(self, preload: str) -> Slot:
        """A slot for one more worker (started with ``preload``): one stopped for idleness (already wiped), else a
        new one with its own uid."""
        with self._spawn_lock:
            if self._free_slots:
                slot = self._free_slots.pop()
                self._slot_preload[slot.index] = preload
                return slot
            uid = alt = None
            if self._as_root:  # two uids: sessions alternate between them (medagentgym.sandbox.worker.Server)
                uid, alt = _uids.lease(), _uids.lease()  # given back at close (_cleanup)
            slot = Slot(len(self._slots), self._base / f"w{len(self._slots)}", uid, alt_uid=alt)
            self._slots.append(slot)
            self._slot_preload[slot.index] = preload
        return self._prepare_slot(slot)

    def _sync_local_data(self, slot: Slot) -> None:
        """Local backend: /data is a directory of symlinks to the host paths."""
        for entry in os.scandir(slot.data):
            os.unlink(entry.path)
        for name, host in slot.mounts.items():
            os.symlink(host, slot.data / name)

    def _submit_spawn(self, slot: Slot, priority: int = 1) -> Future:
        """Start a worker in ``slot`` on one of the pool's spawner threads (``_STARTS`` start at once). Priority 0
        replaces the worker of a running session, 1 starts a warm worker, 2 grows the pool (dropped when no
        longer needed by the time a spawner takes it)."""
        fut: Future = Future()
        with self._spawn_lock:
            if self._closed:
                raise SessionClosed("the pool is closed: create a new one with make_pool()")
            self._spawn_q.put((priority, next(self._spawn_seq), slot, fut))
            if len(self._spawners) < _STARTS:
                thread = threading.Thread(target=self._spawn_loop, name=f"sandbox-spawner-{len(self._spawners)}",
                                          daemon=True)
                self._spawners.append(thread)
                thread.start()
        return fut

    def _spawn_loop(self) -> None:
        """A spawner thread: it lives as long as the pool, since bwrap's ``--die-with-parent`` follows the thread
        that started the worker."""
        while True:
            prio, _seq, slot, fut = self._spawn_q.get()
            if fut is None:
                return
            if prio == 2 and not self._start_wanted():
                fut.set_result(None)  # the sessions it was for got workers that freed meanwhile
                continue
            try:
                fut.set_result(self._start_worker(slot))
            except BaseException as exc:
                fut.set_exception(exc)

    def _start_worker(self, slot: Slot) -> _Worker:
        if self._closed:
            raise SessionClosed("the pool is closed")
        if hasattr(self.launcher, "prepare"):
            self.launcher.prepare(slot)
        if self.backend == "local":
            self._sync_local_data(slot)
        log_path = self._base / f"w{slot.index}.log"
        argv, pass_fds = self.launcher.argv(slot, self._slot_preload.get(slot.index, self.preload)), ()
        if getattr(self.launcher, "args_via_fd", False):
            # bwrap reads its options from a pipe, so the jail's /proc/1/cmdline shows no host paths; the seccomp
            # filter (BPF) comes through another pipe and is in force before the jailed interpreter starts.
            cut = argv.index("--")
            options = argv[1:cut]
            fds = []
            bpf = getattr(self.launcher, "seccomp_bpf", None)
            if bpf:
                fds.append(_pipe_with(bpf))
                options = [*options, "--seccomp", str(fds[-1])]
            fds.append(_pipe_with(b"".join(a.encode() + b"\0" for a in options)))
            argv, pass_fds = [argv[0], "--args", str(fds[-1]), *argv[cut:]], tuple(fds)
        if self.backend == "bwrap":
            # Born first for the OOM killer: bwrap and every process of the jail inherit oom_score_adj 1000 (and,
            # where this process holds CAP_SYS_RESOURCE, the same oom_score_adj_min) from the shell that execs it.
            # _contain's passes then only check it: on a loaded host a process forked between a pass's listing and
            # its write kept 0 (seen once in a runner, tests/sandbox/test_memory_cgroup.py).
            argv = ["/bin/sh", "-c", _OOM_FIRST_EXEC, *argv]
        try:
            with open(log_path, "ab") as log_fh:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_fh,
                                        env=self.launcher.env(slot), close_fds=True, pass_fds=pass_fds,
                                        cwd=str(slot.workspace))
        finally:
            for fd in pass_fds:
                os.close(fd)
        try:
            ready = _recv(proc.stdout.fileno(), time.monotonic() + self.start_timeout)
        except TimeoutError:
            ready = None
        if not ready or ready.get("op") != "ready":
            proc.kill()
            proc.wait()
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            fix = ("; check that bubblewrap can create namespaces here (`bwrap --ro-bind / / true`), or run "
                   "unisolated for development with make_pool(backend='local', allow_unisolated=True)"
                   if self.backend == "bwrap" else "")
            raise SandboxUnavailable(f"{self.backend} worker failed to start ({tail[0].strip()}; log "
                                     f"{log_path}){fix}")
        worker = _Worker(slot, proc, log_path, ready)
        if self.backend == "bwrap" and slot.uid is not None:
            # Before any session: cap System V shared memory, message queues and semaphores in the jail's IPC
            # namespace (they are outside every per-process limit). No jail runs without these limits.
            why = set_bwrap_ipc_limits(proc.pid, ipc_limits(self.sysv_shm_mb))
            if why is not None:
                worker.kill()
                raise SandboxUnavailable(f"could not limit the IPC namespace of bwrap worker {slot.index}: {why}")
            ready["ipc_limits"] = True
        if self.backend == "bwrap":
            self._contain(worker, ready)
        self._workers.append(worker)
        return worker

    def _contain(self, worker: _Worker, ready: dict) -> None:
        """The jail's processes first for the OOM killer, and in the slot's memory cgroup (twice: a process forked
        while the first pass ran is caught by the second; later ones inherit both).

        Fail closed: the pool's layers are those of its first worker, so a worker that cannot be contained is
        killed and the start refused (as for the IPC limits), never handed a session without its cgroup.

        Raises:
            SandboxUnavailable: The jail could not get ``oom_score_adj`` 1000 or join its memory cgroup.
        """
        slot, first, cgroup = worker.slot, True, None
        for _ in range(2):
            tree = jail_tree(worker.proc.pid)
            first = oom_first(tree) and first
            if self._cgroups is not None:
                cgroup = self._cgroups.attach(slot.index, tree, self.limits.memory_mb) and cgroup is not False
        if not first or cgroup is False:
            worker.kill()
            what = "oom_score_adj 1000" if not first else f"its memory cgroup under {self._cgroups.base}"
            raise SandboxUnavailable(f"could not give bwrap worker {slot.index}'s jail {what} (see the log); no "
                                     "jail runs without the limits the pool's layers claim. Fix the host, or set "
                                     "MEDAGENTGYM_SANDBOX_CGROUP=off to run without memory cgroups (layers then "
                                     "omit mem-cgroup)")
        ready["oom_first"], ready["mem_cgroup"] = True, cgroup is True

    # -- capacity -----------------------------------------------------------------------------
    def _memory_low(self) -> str | None:
        """Why the pool must not grow now because the host is short of memory, else None."""
        try:
            with open("/proc/meminfo") as fh:
                avail = next(int(line.split()[1]) // 1024 for line in fh if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return None
        reserve = max(512, memory_limit_mb() // 20)
        if avail - WORKER_MB >= reserve:
            return None
        return f"the host has {avail} MiB of memory available and the pool keeps {reserve} MiB in reserve"

    def _to_start(self) -> int:
        """Under ``_cond``: how many more workers to start for the sessions waiting (counted in ``_starting``)."""
        uncovered = len(self._waiters) - self._starting
        room = self.max_workers - (len(self._idle) + self._busy_count + self._starting)
        n = max(0, min(uncovered, room))
        if n and self._memory_low() is not None:
            n = 0
        self._starting += n
        return n

    def _start_more(self, n: int) -> None:
        """Start ``n`` workers (already counted in ``_starting``); each goes to the first waiting session."""
        for _ in range(n):
            try:
                slot = self._new_slot(self.grow_preload)
                fut = self._submit_spawn(slot, priority=2)
            except BaseException as exc:
                self._started(None, exc)
                continue
            fut.add_done_callback(functools.partial(self._grown, slot))

    def _start_wanted(self) -> bool:
        """Whether a queued growth start is still needed; when not, it is dropped (and uncounted) here."""
        with self._cond:
            if len(self._waiters) >= self._starting and not self._closed:
                return True
            self._starting -= 1
            return False

    def _grown(self, slot: Slot, fut: Future) -> None:
        try:
            worker = fut.result()
        except BaseException as exc:
            worker, error = None, exc
        else:
            error = None
        if worker is None:
            with self._spawn_lock:
                self._free_slots.append(slot)
            if error is None:  # dropped by _start_wanted, which uncounted it
                return
        self._started(worker, error)

    def _started(self, worker: _Worker | None, error: BaseException | None) -> None:
        """A growth start ended: hand its worker (or its error) to the first waiting session."""
        with self._cond:
            self._starting -= 1
            if worker is None:
                if self._waiters:
                    ticket = self._waiters.popleft()
                    ticket.error = error
                    ticket.event.set()
                return
        self._handoff(worker, lent=False)

    def _handoff(self, worker: _Worker, lent: bool) -> None:
        """A worker is free (new, or back from a session when ``lent``): give it to the first waiting session, else
        keep it idle."""
        with self._cond:
            if lent:
                self._busy_count -= 1
            if not self._closed:
                if self._waiters:
                    ticket = self._waiters.popleft()
                    ticket.worker = worker
                    self._busy_count += 1
                    ticket.event.set()
                else:
                    self._idle.append(worker)
                    self._idle_since[id(worker)] = time.monotonic()
                self.peak_workers = max(self.peak_workers, len(self._idle) + self._busy_count)
                return
        worker.kill()

    def _enqueue(self) -> _Worker | _Ticket:
        """An idle worker (lent at once), or a ticket in the waiting line (workers start for it when below cap)."""
        with self._cond:
            if self._closed:
                raise SessionClosed("the pool is closed: create a new one with make_pool()")
            if self._idle:
                worker = self._idle.pop()  # the most recently used: the oldest idle ones age out
                self._idle_since.pop(id(worker), None)
                self._busy_count += 1
                return worker
            ticket = _Ticket()
            self._waiters.append(ticket)
            n = self._to_start()
        self._start_more(n)
        return ticket

    def _check_wait(self, ticket: _Ticket, deadline: float) -> float:
        """A waiting session's periodic check: start workers that became possible, and give up (SandboxBusy)
        once it has waited ``acquire_timeout`` seconds with no worker starting for it. Returns the deadline."""
        with self._cond:
            if ticket.event.is_set():
                return deadline
            if self._closed:
                self._waiters.remove(ticket)
                raise SessionClosed("the pool is closed: create a new one with make_pool()")
            n = self._to_start()
            now = time.monotonic()
            expired = False
            if self._waiters.index(ticket) < self._starting:
                deadline = now + self.acquire_timeout  # a worker is starting for it: the clock starts afterwards
            elif now >= deadline:
                self._waiters.remove(ticket)
                expired = True
        self._start_more(n)
        if expired:
            raise self._busy()
        return deadline

    @staticmethod
    def _claim(ticket: _Ticket) -> _Worker:
        if ticket.error is not None:
            raise ticket.error
        return ticket.worker

    def _acquire(self) -> _Worker:
        got = self._enqueue()
        if isinstance(got, _Worker):
            return got
        deadline = time.monotonic() + self.acquire_timeout
        while not got.event.wait(0.05):
            deadline = self._check_wait(got, deadline)
        return self._claim(got)

    async def _aacquire(self) -> _Worker:
        got = self._enqueue()
        if isinstance(got, _Worker):
            return got
        deadline, pause = time.monotonic() + self.acquire_timeout, 0.002
        while not got.event.is_set():
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
            deadline = self._check_wait(got, deadline)
        return self._claim(got)

    def _shrink(self, now: float) -> None:
        """Stop workers idle for ``idle_s`` while more than ``min_workers`` run; their slots are kept for reuse."""
        victims = []
        with self._cond:
            live = len(self._idle) + self._busy_count + self._starting
            for worker in list(self._idle):  # oldest first
                if live <= self.min_workers:
                    break
                if now - self._idle_since.get(id(worker), now) >= self.idle_s:
                    self._idle.remove(worker)
                    self._idle_since.pop(id(worker), None)
                    victims.append(worker)
                    live -= 1
        for worker in victims:
            worker.kill()
            if worker in self._workers:
                self._workers.remove(worker)
            for path in (worker.slot.workspace, worker.slot.tmp, worker.slot.shm):
                _wipe(path, worker.slot.uid, _slot_mode(worker.slot))
            with self._spawn_lock:
                self._free_slots.append(worker.slot)
        if victims:
            log.info("sandbox pool: stopped %d idle worker(s); %d live", len(victims), self.stats()["live"])

    def _replace(self, worker: _Worker) -> _Worker:
        """Kill ``worker``, wipe its slot and start a fresh one in the same slot (same directories and uid).

        A worker is replaced because it died, wedged or replied nonsense: whatever its session wrote may be
        crafted for the next process that starts there, so the slot is never reused dirty.
        """
        worker.kill()
        if worker in self._workers:
            self._workers.remove(worker)
        if self._closed:
            raise SessionClosed("the pool is closed: create a new one with make_pool()")
        for path in (worker.slot.workspace, worker.slot.tmp, worker.slot.shm):
            _wipe(path, worker.slot.uid, _slot_mode(worker.slot))
        log.warning("sandbox worker %d replaced (log: %s)", worker.slot.index, worker.log_path)
        return self._submit_spawn(worker.slot, priority=0).result()

    # -- sessions -----------------------------------------------------------------------------
    def session(self, mounts: dict[str, Path] | None = None, persistent: bool = True,
                limits: Limits | None = None, bridges: dict[int, Path | str] | None = None) -> Session:
        """Borrow a worker for one episode.

        Args:
            mounts: ``{name: host_path}`` shown read-only at ``/data/<name>`` in the jail.
            persistent: Keep one interpreter for the session, so variables survive between calls.
            limits: Default limits of the session's calls (and the ceiling of their rlimits).
            bridges: ``{port: host_unix_socket}``: jailed code reaches that host service at
                ``127.0.0.1:<port>``, and nothing else (see ``medagentgym.sandbox.bridge``; bwrap and local backends).

        Returns:
            An open :class:`Session` (a context manager).

        Raises:
            SessionClosed: The pool is closed.
            SandboxBusy: The pool is at its cap and no worker became free within ``acquire_timeout`` seconds.

        Example:
            >>> with pool.session(mounts={"mimic_iii": Path("/data/mimic_iii")}) as s:
            ...     s.run_python("x = 2"); s.run_python("print(x * 21)").stdout
            '42\\n'
        """
        if self._closed:
            raise SessionClosed("the pool is closed: create a new one with make_pool()")
        wanted = self._wanted_mounts(self._check_mounts(mounts or {}))
        bridges = self._check_bridges(bridges)
        return self._open_session(self._acquire(), wanted, persistent, limits, bridges)

    async def asession(self, mounts: dict[str, Path] | None = None, persistent: bool = True,
                       limits: Limits | None = None, bridges: dict[int, Path | str] | None = None) -> Session:
        """Async form of :meth:`session`: waits for a free worker without holding a thread.

        Example:
            >>> async with await pool.asession() as s:
            ...     res = await s.arun_python("print(1)")
        """
        if self._closed:
            raise SessionClosed("the pool is closed: create a new one with make_pool()")
        wanted = self._wanted_mounts(self._check_mounts(mounts or {}))
        bridges = self._check_bridges(bridges)
        worker = await self._aacquire()
        return await asyncio.to_thread(self._open_session, worker, wanted, persistent, limits, bridges)

    def _check_bridges(self, bridges: dict[int, Path | str] | None) -> dict[int, Path]:
        if bridges and self.backend not in ("bwrap", "local"):
            raise ValueError(f"bridges are supported by the bwrap and local backends, not {self.backend!r}")
        return check_bridges(bridges)

    def _busy(self) -> SandboxBusy:
        with self._cond:
            live = len(self._idle) + self._busy_count + self._starting
        low = self._memory_low() if live < self.max_workers else None
        if low is not None:
            return SandboxBusy(f"no sandbox worker free after {self.acquire_timeout:g}s: all {live} workers are busy "
                               f"and the pool cannot grow because {low}; close finished sessions, free memory, or "
                               f"run episodes on more env servers")
        return SandboxBusy(f"no sandbox worker free after {self.acquire_timeout:g}s: all {self.max_workers} workers "
                           f"are busy, the pool's cap (from {self.cap_source}); close finished sessions, or "
                           f"raise the cap with make_pool(max_workers=N) or {MAX_WORKERS_ENV}=N")

    def _open_session(self, worker: _Worker, wanted: dict[str, Path], persistent: bool,
                      limits: Limits | None, bridges: dict[int, Path] | None = None) -> Session:
        try:
            current = worker.slot.mounts
            missing = {k: v for k, v in wanted.items() if not same_source(current.get(k), v)}
            extra = [k for k in current if k not in wanted]
            if not worker.alive() or ((missing or extra) and not self._sync_mounts(worker, extra, missing)):
                worker.slot.mounts = wanted  # bind mounts are fixed at jail creation: restart with these
                worker = self._replace(worker)
            if self._cgroups is not None:  # the jail as a whole: the session's memory_mb plus the worker's own
                try:
                    self._cgroups.set_limit(worker.slot.index, (limits or self.limits).memory_mb)
                except OSError as exc:  # e.g. lowering it below what the worker uses now (v1: EBUSY)
                    log.warning("slot %s: memory cgroup limit kept: %s", worker.slot.index, exc)
            return Session(self, worker, persistent, limits or self.limits, bridges or {})
        except BaseException:
            worker.slot.mounts = self._wanted_mounts({})  # do not keep retrying a mount that failed
            self._release(worker, broken=True)
            raise

    def _sync_mounts(self, worker: _Worker, extra: list[str], missing: dict[str, Path]) -> bool:
        """Make the running jail's ``/data`` show exactly the session's mounts (root + bwrap), sparing a restart.

        A session sees only what it asked for (plus the pool's own mounts): mounts of earlier sessions are
        detached, since a family may mount per-instance data that other instances must not read.
        """
        if self.backend != "bwrap" or worker.slot.uid is None or not all(os.path.exists(v) for v in missing.values()):
            return False
        detach = [*extra, *(k for k in missing if k in worker.slot.mounts)]
        why = sync_bwrap_mounts(worker.proc.pid, detach, missing)
        if why is not None:
            log.info("sandbox worker %d restarts for new mounts: %s", worker.slot.index, why)
            return False
        kept = {k: v for k, v in worker.slot.mounts.items() if k not in detach}
        worker.slot.mounts = {**kept, **missing}
        return True

    def _release(self, worker: _Worker, broken: bool = False) -> None:
        if self._closed:
            worker.kill()
            return
        try:
            if broken or not worker.alive():
                raise WorkerLost("worker not usable")
            worker.request({"op": "reset"}, timeout=_GRACE_S)
            for path in (worker.slot.workspace, worker.slot.tmp, worker.slot.shm):
                _wipe(path, worker.slot.uid, _slot_mode(worker.slot))
        except (SandboxError, OSError):
            try:
                worker = self._replace(worker)
            except SandboxError as exc:
                log.error("sandbox worker %d could not be replaced: %s", worker.slot.index, exc)
                with self._cond:
                    self._busy_count -= 1
                    n = self._to_start()  # a waiting session may start a worker in the freed capacity
                with self._spawn_lock:
                    self._free_slots.append(worker.slot)
                self._start_more(n)
                return
        self._handoff(worker, lent=True)

    def process_roles(self, timeout: float = 5.0) -> dict[int, str]:
        """Host pid -> role of every worker's own processes (``server``, ``zygote-<kind>``, ``spare-<kind>``,
        ``runner``), for audits and leak checks: anything else running under a jail uid is a call's leftover.

        A worker busy with a call is not interrupted: the roles it reported last are used (they do not change
        during a call). A worker that does not answer is skipped.
        """
        roles: dict[int, str] = {}
        for worker in list(self._workers):
            if worker.lock.locked() and worker.roles is not None:
                jail = worker.roles
            else:
                try:
                    reply = worker.request({"op": "ping", "detail": True}, timeout=timeout)
                except SandboxError:
                    continue
                jail = worker.roles = {int(k): v for k, v in (reply.get("roles") or {}).items()}
            # A container's processes descend from the engine's shim, not from the docker CLI the pool started:
            # its launcher names the container's first process.
            root = self.launcher.jail_root(worker.slot) if hasattr(self.launcher, "jail_root") else None
            for host_pid, jail_pid in _namespace_pids(root or worker.proc.pid).items():
                if jail_pid in jail:
                    roles[host_pid] = jail[jail_pid]
        return roles

    def close(self) -> None:
        """Stop every worker and remove the pool's directories. Safe to call twice."""
        if self._closed:
            return
        with self._spawn_lock:
            self._closed = True
            for _ in self._spawners:
                self._spawn_q.put((9, next(self._spawn_seq), None, None))
        with self._cond:
            waiters, self._waiters = list(self._waiters), collections.deque()
        for ticket in waiters:
            ticket.error = SessionClosed("the pool was closed while this session waited for a worker")
            ticket.event.set()
        self._finalizer()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Session:
    """One episode's view of a worker: a private workspace and (optionally) a persistent interpreter.

    Limits: the session's ``limits`` are the defaults of its calls and the hard ceiling of the rlimits
    (address space, file size, processes) of its interpreter; a call's own ``limits`` may lower those and
    may set any ``wall_s``, ``cpu_s`` and ``output_bytes``. A call that times out or is killed loses the
    persistent namespace; its ``stderr`` says so and the next call starts a fresh interpreter.

    Attributes:
        id: Random identifier of the session.
        workspace: Host path of the session's workspace (``/workspace`` in the jail). Files in it are
            written by untrusted code: open them with care (they may be symlinks).
        bridges: ``{port: host_unix_socket}`` this session's code reaches at ``127.0.0.1:<port>``.
    """

    def __init__(self, pool: Pool, worker: _Worker, persistent: bool, limits: Limits,
                 bridges: dict[int, Path] | None = None) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.bridges = dict(bridges or {})
        self._relays: SessionBridges | None = None
        self.persistent = persistent
        self.limits = limits
        self._pool = pool
        self._worker = worker
        self._lock = threading.Lock()
        self._closed = False
        if self.bridges:  # host relays in the slot's bridge directory, seen only by this slot's jail
            slot_dir = self._worker.slot.bridge
            jail_dir = str(slot_dir) if pool.backend == "local" else JAIL_BRIDGE_DIR
            self._relays = SessionBridges(slot_dir, self.bridges, jail_dir)
        try:
            self._open()
        except BaseException:
            self._stop_relays()
            raise

    def _stop_relays(self) -> None:
        relays, self._relays = self._relays, None
        if relays is not None:
            relays.close()

    @property
    def workspace(self) -> Path:
        """Host path of this session's workspace, the jailed code's ``/workspace``."""
        return self._worker.slot.workspace

    def _open(self) -> None:
        msg = {"op": "open", "persistent": self.persistent, "limits": self.limits.to_dict()}
        if self.bridges:
            msg["bridges"] = self._relays.jail_paths()
        self._worker.request(msg, timeout=_GRACE_S)

    def _run(self, lang: str, source: str, limits: Limits | None, **extra) -> ExecResult:
        if not isinstance(source, str):
            raise TypeError(f"{lang} source must be str, got {type(source).__name__}")
        limits = limits or self.limits
        with self._lock:
            if self._closed:
                raise SessionClosed(f"session {self.id} is closed: open a new one with pool.session()")
            msg = {"op": "run", "lang": lang, "source": source, "limits": limits.to_dict(), **extra}
            start = time.monotonic()
            try:
                # The worker ends a call by its own clock (medagentgym.sandbox._clock), at the latest at the hard cap.
                reply = self._worker.request(msg, timeout=hard_wall_s(limits.wall_s) + _GRACE_S)
                return ExecResult.from_dict(reply["result"])
            except (WorkerLost, WorkerRefused, KeyError, TypeError, ValueError, RecursionError) as exc:
                # Dead, wedged, a call the server could not complete or a reply that does not parse: whatever the
                # call's code did, it is the call's outcome (killed), never an error of the host. Never reuse
                # that worker or its files; only failing to start a fresh one (SandboxUnavailable) is ours.
                why = exc if isinstance(exc, (WorkerLost, WorkerRefused)) else \
                    f"worker {self._worker.slot.index} replied nonsense ({type(exc).__name__})"
                log.warning("sandbox call killed, worker %d replaced: %s", self._worker.slot.index, why)
                self._worker = self._pool._replace(self._worker)
                self._open()
                res = ExecResult.sandbox_error(lang, source, f"{why}; the session continues on a fresh worker "
                                               "(variables from earlier calls are gone)",
                                               time.monotonic() - start)
                res.error_kind = ErrorKind.KILLED
                return res

    def run_python(self, code: str, limits: Limits | None = None) -> ExecResult:
        """Run Python ``code`` (in the session's namespace when persistent).

        Example:
            >>> session.run_python("import pandas as pd; print(pd.__name__)").stdout
            'pandas\\n'
        """
        return self._run("python", code, limits)

    def run_sql(self, query: str, database: str, limits: Limits | None = None, max_rows: int = 100) -> ExecResult:
        """Run one SQL statement on a read-only sqlite connection; rows are printed as a table.

        Args:
            query: The statement.
            database: A path in the jail (``/data/mimic_iii/mimic_iii.db``), a path relative to ``/data``
                (``mimic_iii/mimic_iii.db``), a mount name holding exactly one ``.db`` file, or a path
                relative to the workspace.
            limits: Per-call limits (default: the session's).
            max_rows: Rows printed at most; a footer says when there were more.
        """
        return self._run("sql", query, limits, database=str(database), max_rows=int(max_rows))

    def run_shell(self, command: str, limits: Limits | None = None) -> ExecResult:
        """Run ``command`` with ``/bin/sh -c`` in the workspace; a non-zero exit is ``ErrorKind.SHELL``."""
        return self._run("shell", command, limits)

    async def arun_python(self, code: str, limits: Limits | None = None) -> ExecResult:
        """Async form of :meth:`run_python` (runs in a thread; the event loop stays free)."""
        return await asyncio.to_thread(self.run_python, code, limits)

    async def arun_sql(self, query: str, database: str, limits: Limits | None = None,
                       max_rows: int = 100) -> ExecResult:
        """Async form of :meth:`run_sql`."""
        return await asyncio.to_thread(self.run_sql, query, database, limits, max_rows)

    async def arun_shell(self, command: str, limits: Limits | None = None) -> ExecResult:
        """Async form of :meth:`run_shell`."""
        return await asyncio.to_thread(self.run_shell, command, limits)

    def close(self) -> None:
        """Kill what the session left running, wipe its workspace and /tmp, return the worker. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._pool._release(self._worker)
        finally:
            self._stop_relays()

    async def aclose(self) -> None:
        """Async form of :meth:`close`."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
