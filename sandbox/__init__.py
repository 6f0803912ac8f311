"""Isolated execution of untrusted, model-written code: warm workers, sessions, per-call limits.

Example:
    >>> from medagentgym.sandbox import make_pool
    >>> with make_pool(workers=2) as pool, pool.session() as s:
    ...     s.run_python("x = 6 * 7")
    ...     print(s.run_python("print(x)").stdout)
    42

Backends:
    ``bwrap`` (default): pre-forked workers inside bubblewrap. Layers (``pool.layers``): ``bwrap``;
    ``uid-drop`` (as root, every worker's code runs as its own unprivileged host uid, 100000+, leased
    host-wide: see ``medagentgym.sandbox._uids``) or ``userns``
    (not root); ``pidns``, ``netns`` (no network at all, not even the host's loopback), ``ipcns``;
    ``ro-root`` (only /usr, /lib*, a few /etc files, the Python prefix, the venv and this package are
    bound, read-only); ``env-scrub`` (the caller's environment never reaches the jail); ``rlimits``
    (CPU, address space, processes, file size, open files, no core dumps, no POSIX message queues);
    ``pidns-kill`` (after each call and on timeout every other process of the jail is killed);
    ``isolated-path`` (the worker server starts in ``/`` as ``python -I``: nothing the jailed code writes
    is ever on a privileged process's ``sys.path``); ``seccomp`` (ptrace, mount, namespaces, bpf, kexec,
    keyring, module loading, io_uring, POSIX message queues, exotic socket families denied; loaded by bwrap
    before the interpreter starts); ``no-new-privs``; ``caps`` (the server holds only CAP_KILL effective,
    its bounding set narrowed to KILL/SETUID/SETGID/SETPCAP; zygotes hold none effective; runners drop
    every capability, the bounding set included, and their uid at fork: see ``medagentgym.sandbox._caps``);
    ``ipc-limits`` (System V shared memory, message queues and semaphores capped per jail and removed
    between sessions); ``ws-quota`` (workspace, /tmp and /dev/shm on a size-limited tmpfs).
    A session sees exactly the data mounts it asked for (plus the pool's own), bound from hard-linked
    copies in the pool's directory, so the jail's mountinfo never shows the tasks root.
    ``docker``: the same worker inside a container (``medagentgym.sandbox.docker_backend``).
    ``local``: the same worker as a plain process. NO isolation; refused unless ``allow_unisolated=True``.

The channel from the code back to the host is untrusted: the runner that executes the code writes its
reply on a pipe the code can write to as well. The server reads it without blocking, under the call's
deadline, skips frames that carry another call's number, kills a runner whose frames are oversized or
malformed, and passes on only typed fields; the host replaces (and wipes) a worker that wedges, dies or
answers nonsense, and never reuses a slot dirty. A session can therefore forge the *status* of its own calls
(exit code, error kind), never anything on the host: graders must trust only data they parse and compare
on the host side.

What this sandbox does NOT protect against:
    * Kernel exploits: the jail shares the host kernel; seccomp only trims the attack surface.
    * Side channels (timing, cache, Spectre-class) and covert channels between sessions of one pool.
    * Reading the data mounts and the runtime (Python prefix, venv, this package): they are visible by
      design. Anything placed in a mounted directory is readable by the jailed code of the sessions that
      mount it. The jail's mountinfo shows the paths of the runtime (Python prefix, venv) and of the pool's
      staging directory.
    * Memory pressure on the host: the limit is RLIMIT_AS per process (plus the IPC caps), not a cgroup;
      many processes of a call can together use ``processes x memory_mb``. Disk use is capped only where
      ``ws-quota`` is active.
    * CPU contention: limits bound a call's CPU time and its time not spent waiting for a CPU (``medagentgym.sandbox._clock``),
      not its share; a call may use a full core until its limits hit, and a starved one ends at the hard cap.
    * Files the jailed code writes to the workspace: they may be symlinks, FIFOs, hard links or huge; the
      host must read them with care (``medagentgym.sandbox.hostio``, ``Session.workspace``).
    * The status fields of a session's own calls (see above).
    * The ``local`` backend: none of the above layers except rlimits, env scrubbing and process-group
      kills; the code runs with the caller's rights.
    * Without root (``userns`` instead of ``uid-drop``) the user code shares a uid with its worker server,
      so it can kill its own worker (the pool then replaces it), RLIMIT_NPROC is shared by all workers, the
      IPC limits are not set (objects are still removed between sessions) and mounts change by restarting.
"""

from __future__ import annotations

if not __name__.startswith("medagentgym."):  # the deprecated top-level name: an alias (medagentgym/_compat.py)
    import medagentgym._compat

    medagentgym._compat.redirect(__name__)

import difflib
import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .api import ErrorKind, ExecResult, Limits
from .errors import SandboxBusy, SandboxError, SandboxUnavailable, SessionClosed, WorkerLost, WorkerRefused

if TYPE_CHECKING:
    from .pool import Pool, Session

__all__ = [
    "ErrorKind",
    "ExecResult",
    "Limits",
    "Pool",
    "SandboxBusy",
    "SandboxError",
    "SandboxUnavailable",
    "Session",
    "SessionClosed",
    "WorkerLost",
    "WorkerRefused",
    "make_pool",
]

BACKENDS = ("bwrap", "docker", "local")
log = logging.getLogger("sandbox")


def __getattr__(name: str) -> Any:
    # The pool (and asyncio under it) is imported on first use, not with the package: the in-jail worker and
    # its runners import ``medagentgym.sandbox._runner`` and must stay small, since every session forks one of them.
    if name in ("Pool", "Session"):
        from . import pool

        return getattr(pool, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: What a pool's warm workers import before forking runners when the caller names nothing (``make_pool(preload=None)``).
DEFAULT_PRELOAD: tuple[str, ...] = ("numpy", "pandas", "sqlite3")


def make_pool(backend: str = "bwrap", *, workers: int | None = None, limits: Limits = Limits(),
              data_root: Path | None = None, mounts: dict[str, Path] | None = None,
              allow_unisolated: bool = False, workspace_mb: int = 512,
              preload: tuple[str, ...] | None = None, start_timeout: float = 120.0,
              acquire_timeout: float = 30.0, sysv_shm_mb: int = 64, max_workers: int | None = None,
              idle_s: float = 60.0, grow_preload: tuple[str, ...] | None = ("sqlite3",), **backend_options) -> Pool:
    """Start a pool of warm sandbox workers that grows with the sessions open, up to a cap.

    One worker serves one session at a time (its jail keeps the session's files and, when persistent, its
    interpreter); a session open that finds no idle worker starts another, up to ``max_workers``. Workers idle
    for ``idle_s`` beyond the ``workers`` floor are stopped. At the cap, an open waits for a session to close and
    fails after ``acquire_timeout`` seconds with one line naming the cap and how to raise it.

    Args:
        backend: ``"bwrap"`` (default), ``"docker"`` or ``"local"`` (unisolated, development only).
        workers: Warm workers started now and kept when idle (the floor); default: the number of CPUs.
        max_workers: Most workers (concurrent sessions) the pool grows to. Default: ``$MEDAGENTGYM_SANDBOX_
            MAX_WORKERS``, else half the host's (or cgroup's) memory at ``medagentgym.sandbox.pool.WORKER_MB`` MiB per
            worker (``pool.max_workers``, ``pool.cap_source``). Raised to ``workers`` when lower.
        idle_s: Seconds a worker above the floor may stay idle before it is stopped.
        limits: Default per-call limits.
        data_root: Every entry of this host directory appears read-only at ``/data/<name>``.
        mounts: Extra ``{name: host_path}`` shown read-only at ``/data/<name>`` in every session.
        allow_unisolated: Required to use ``backend="local"``.
        workspace_mb: Size of each worker's workspace + /tmp tmpfs (when the host allows mounting).
        preload: Modules each warm worker imports once, before forking runners; ``None``: :data:`DEFAULT_PRELOAD`
            (numpy, pandas, sqlite3). A pool for families that run SQL alone passes ``("sqlite3",)``
            (``medagentgym.env_client.rollout.family_preload`` reads what families declare).
        grow_preload: What workers started on demand (beyond ``workers``) preload. The default, sqlite3 only,
            makes them lean (no zygotes; ~25 MiB per idle session instead of ~80): their sessions import numpy,
            pandas or scikit-learn on first use. ``None``: the same as ``preload``.
        start_timeout: Seconds a worker may take to start.
        acquire_timeout: Seconds ``pool.session()`` waits at the cap for a session to close before raising
            ``SandboxBusy`` (time a worker spends starting for it is not counted).
        sysv_shm_mb: System V shared memory a jail may hold in all (its IPC namespace's limit).
        **backend_options: Passed to the docker backend's launcher.

    Returns:
        A started :class:`Pool`; ``pool.layers`` lists the isolation layers in force.

    Raises:
        SandboxUnavailable: The backend cannot run here (the message names the fix).
        ValueError: Unknown backend or bad argument (``max_workers``, ``idle_s``, ``$MEDAGENTGYM_SANDBOX_MAX_WORKERS``).

    Example:
        >>> pool = make_pool("bwrap", workers=2, data_root=Path("data"))
    """
    from . import _jail
    from .pool import Pool

    if backend not in BACKENDS:
        near = difflib.get_close_matches(str(backend), BACKENDS, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ValueError(f"unknown sandbox backend {backend!r}: {hint}choose one of {', '.join(BACKENDS)}")
    if backend == "local":
        if not allow_unisolated:
            raise SandboxUnavailable("backend='local' runs untrusted code WITHOUT isolation: pass "
                                     "allow_unisolated=True to accept that, or use backend='bwrap'")
        message = ("sandbox backend 'local' is UNISOLATED: model-written code runs with your user's rights, "
                   "network and files. Use it only for development.")
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        log.warning(message)
        launcher = _jail.LocalLauncher()
    elif backend == "docker":
        try:
            from . import docker_backend
        except ImportError as exc:
            raise SandboxUnavailable(f"the docker backend is not available ({exc}): use backend='bwrap'") from None
        launcher = docker_backend.make_launcher(**{"ipc_mb": sysv_shm_mb, **backend_options})
    else:
        if backend_options:
            raise ValueError(f"unexpected option(s) {sorted(backend_options)} for backend 'bwrap'")
        launcher = _jail.BwrapLauncher()
    return Pool(launcher, workers=workers or os.cpu_count() or 2, limits=limits, data_root=data_root,
                mounts=mounts, workspace_mb=workspace_mb, preload=tuple(DEFAULT_PRELOAD if preload is None else preload), start_timeout=start_timeout,
                acquire_timeout=acquire_timeout, sysv_shm_mb=sysv_shm_mb, max_workers=max_workers, idle_s=idle_s,
                grow_preload=None if grow_preload is None else tuple(grow_preload))
