"""Host-side launch recipes: the command line that starts one worker, per backend.

A launcher turns a worker slot (its host directories, its uid, the data mounts) into an argv and an
environment. ``BwrapLauncher`` builds the bubblewrap jail; ``LocalLauncher`` runs the same worker unjailed.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from medagentgym import sandbox

from .errors import SandboxUnavailable

JAIL_WORKSPACE = "/workspace"
JAIL_DATA = "/data"
JAIL_TMP = "/tmp"
JAIL_BRIDGE_DIR = "/run/bridge"  # same as medagentgym.sandbox.bridge.JAIL_BRIDGE_DIR
#: Where the venv and this package appear in the jail. Fixed paths, because their host paths may lie under a
#: directory the jail replaces with a private one (a clone under /tmp has its venv at /tmp/<clone>/.venv).
JAIL_VENV = "/opt/sandbox/venv"
JAIL_LIB = "/opt/sandbox/lib"
_PRIVATE_DIRS = ("/tmp", "/workspace", "/data", "/dev", "/proc", "/run", "/opt/sandbox")
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "nsswitch.conf",
              "ssl", "ca-certificates", "mime.types", "fonts")
BWRAP_FIX = ("install it with `apt-get install bubblewrap`, or run unisolated for development with "
             "make_pool(backend='local', allow_unisolated=True)")


def passwd_text(uid: int, alt_uid: int | None) -> str:
    """The jail's /etc/passwd: root and the slot's runner uids (``sandbox``, ``sandbox2``), group ``uid``."""
    text = f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:sandbox:{JAIL_WORKSPACE}:/bin/sh\n"
    if alt_uid is not None:
        text += f"sandbox2:x:{alt_uid}:{uid}:sandbox:{JAIL_WORKSPACE}:/bin/sh\n"
    return text


@dataclass
class Slot:
    """Host-side resources of one worker: its directories and its unprivileged uids.

    Sessions take turns between ``uid`` and ``alt_uid`` (see ``medagentgym.sandbox.worker.Server``); both share the group
    ``uid``, which owns the slot's writable directories.
    """

    index: int
    root: Path
    uid: int | None
    mounts: dict[str, Path] = field(default_factory=dict)
    alt_uid: int | None = None

    @property
    def uids(self) -> list[int]:
        """Every uid the slot's code may run as."""
        return [u for u in (self.uid, self.alt_uid) if u is not None]

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def shm(self) -> Path:
        return self.root / "shm"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def bridge(self) -> Path:
        """Host directory of the slot's bridge sockets (``/run/bridge`` in a bwrap jail; see medagentgym.sandbox.bridge)."""
        return self.root / "bridge"


def package_parent() -> Path:
    """The directory that contains the ``medagentgym`` package, whose ``medagentgym.sandbox`` the worker imports
    (put on the worker's ``sys.path``): the clone's root, or the site-packages of an installed wheel."""
    import medagentgym

    return Path(medagentgym.__file__).resolve().parent.parent


def package_files() -> dict[str, Path]:
    """What the jail binds at ``JAIL_LIB`` (and the Docker backend copies): ``{path below the lib dir: host path}``.
    Only ``medagentgym/__init__.py`` (it imports nothing) and the ``medagentgym.sandbox`` folder, never the rest
    of the package (task families, graders); ``resolve()`` reads through a clone's ``medagentgym/sandbox`` symlink."""
    import medagentgym

    return {"medagentgym/__init__.py": Path(medagentgym.__file__).resolve(),
            "medagentgym/sandbox": Path(sandbox.__file__).resolve().parent}


def jail_env(extra_path: str) -> dict[str, str]:
    """The complete environment of a worker: nothing of the caller's environment is passed on."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": JAIL_WORKSPACE,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": JAIL_TMP,
        "PYTHONPATH": extra_path,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{JAIL_TMP}/matplotlib",
    }


def worker_command(python: str, lib_dir: str) -> list[str]:
    """The command that starts the worker server: an isolated interpreter that imports only from fixed paths.

    ``-I`` keeps the current directory, the script's directory, ``PYTHON*`` variables and the user site off
    ``sys.path``, so no file the jailed code writes can be imported by the privileged server, its zygotes or
    a runner before it drops privileges; the ``medagentgym`` package's parent is put on the path explicitly.
    ``-B``: no bytecode writes (the runtime is read-only anyway).
    """
    boot = f"import sys; sys.path.insert(0, {lib_dir!r}); from medagentgym.sandbox.worker import main; main()"
    return [python, "-I", "-B", "-c", boot]


def python_paths() -> list[Path]:
    """Directories the jailed interpreter needs: base prefix, venv, site-packages (deduplicated).

    A ``site-packages`` directory another venv's ``.pth`` file added to ``sys.path`` (a light venv layered on a full
    one) counts too, so the jail imports the same packages as the host; no other ``sys.path`` entry does (a source
    checkout on the path may hold built tasks with their answers), nor the user site (``python -I`` skips it).
    """
    import site

    found: list[Path] = []
    candidates = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    candidates += [p for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")]
    user_site = site.getusersitepackages()
    candidates += [p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")
                   and os.path.isabs(p) and p != user_site]
    for raw in candidates:
        path = Path(raw).resolve()
        if path.is_dir() and not any(path == p or p in path.parents for p in found):
            found = [p for p in found if path not in p.parents] + [path]
    return found


class LocalLauncher:
    """Runs the worker as a plain child process: NO isolation (development only)."""

    backend = "local"
    layers = ["rlimits", "pgroup-kill", "env-scrub"]

    def argv(self, slot: Slot, preload: str) -> list[str]:
        return [*worker_command(sys.executable, str(package_parent())), "--data", str(slot.data),
                "--workspace", str(slot.workspace), "--preload", preload, "--no-seccomp"]

    def env(self, slot: Slot) -> dict[str, str]:
        env = jail_env(str(package_parent()))
        env.update(HOME=str(slot.workspace), TMPDIR=str(slot.tmp), MPLCONFIGDIR=str(slot.tmp / "matplotlib"))
        return env


class BwrapLauncher:
    """Runs the worker inside bubblewrap: new pid/net/ipc/uts namespaces, read-only runtime, private dirs.

    As root, bwrap runs without a user namespace and grants the worker server only CAP_KILL, CAP_SETUID,
    CAP_SETGID and CAP_SETPCAP (every other capability dropped, the bounding set narrowed by the server at
    start: ``medagentgym.sandbox._caps``); runners drop every capability and then the slot's unprivileged uid at fork,
    before any user code runs, so the code is really that uid on the host. The seccomp filter is loaded by
    bwrap before the interpreter starts; the server is the namespace's pid 1 (no bwrap reaper in the jail)
    and starts in ``/`` with an isolated ``sys.path``. Not as root, bwrap uses an unprivileged user namespace.
    """

    backend = "bwrap"
    args_via_fd = True

    def __init__(self, bwrap: str | None = None) -> None:
        self.bwrap = bwrap or shutil.which("bwrap") or "/usr/bin/bwrap"
        if not os.access(self.bwrap, os.X_OK):
            raise SandboxUnavailable(f"bubblewrap is not installed (no executable {self.bwrap}): {BWRAP_FIX}")
        self.as_root = os.geteuid() == 0
        self.runtime = python_paths()
        self.venv = Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None
        for path in self.runtime:
            if path != self.venv and any(str(path) == d or str(path).startswith(d + "/") for d in _PRIVATE_DIRS):
                raise SandboxUnavailable(f"the Python runtime at {path} lies under a directory the jail makes "
                                         f"private ({', '.join(_PRIVATE_DIRS)}); install Python elsewhere")
        self.python = f"{JAIL_VENV}/bin/{Path(sys.executable).name}" if self.venv else sys.executable
        self.layers = ["bwrap", "uid-drop" if self.as_root else "userns", "pidns", "netns", "ipcns",
                       "ro-root", "env-scrub", "rlimits", "pidns-kill", "isolated-path"]
        self.seccomp_bpf = _export_seccomp()

    def _runtime_binds(self) -> list[str]:
        args = ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        for name in _ETC_FILES:
            if os.path.exists(f"/etc/{name}"):
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        for path in self.runtime:
            if path == self.venv:
                args += ["--ro-bind", str(path), JAIL_VENV]
            elif not str(path).startswith("/usr/"):
                args += ["--ro-bind", str(path), str(path)]
        for below, host in package_files().items():
            args += ["--ro-bind", str(host), f"{JAIL_LIB}/{below}"]
        return args

    def argv(self, slot: Slot, preload: str) -> list[str]:
        args = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--as-pid-1", "--unshare-net",
                "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
        if self.as_root:
            args += ["--cap-drop", "ALL"]
            for cap in ("CAP_KILL", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
                args += ["--cap-add", cap]
        else:
            args += ["--unshare-user", "--disable-userns"]
        args += self._runtime_binds()
        for name in ("passwd", "group"):
            args += ["--ro-bind", str(_etc_file(slot, name)), f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev", "--bind", str(slot.shm), "/dev/shm", "--tmpfs", "/run",
                 "--bind", str(slot.workspace), JAIL_WORKSPACE, "--bind", str(slot.tmp), JAIL_TMP,
                 "--perms", "0755", "--tmpfs", JAIL_DATA]
        if slot.bridge.is_dir():
            args += ["--ro-bind", str(slot.bridge), JAIL_BRIDGE_DIR]
        for name, host in sorted(slot.mounts.items()):
            if os.path.exists(host):  # a mount of an earlier session may be gone by now
                args += ["--ro-bind", str(host), f"{JAIL_DATA}/{name}"]
        args = self._with_parent_dirs(args)
        args += ["--remount-ro", JAIL_DATA, "--remount-ro", "/", "--chdir", "/", "--",
                 *worker_command(self.python, JAIL_LIB), "--pidns", "--ipcns", "--preload", preload]
        if self.seccomp_bpf:  # the pool hands it to bwrap (--seccomp): in force before the interpreter starts
            args.append("--seccomp-preloaded")
        if self.as_root and slot.uid is not None:
            args += ["--uid", str(slot.uid), "--gid", str(slot.uid)]
            if slot.alt_uid is not None:
                args += ["--alt-uid", str(slot.alt_uid)]
        return args

    def env(self, slot: Slot) -> dict[str, str]:
        return jail_env(JAIL_LIB)

    @staticmethod
    def _with_parent_dirs(args: list[str]) -> list[str]:
        """Create every parent of a mount point first with mode 0755 (bwrap would make them 0700,
        which the unprivileged uid could not traverse)."""
        width = {"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--tmpfs": 1, "--proc": 1, "--dev": 1}
        dests = [args[i + width[a]] for i, a in enumerate(args) if a in width]
        parents = sorted({str(p) for d in dests for p in Path(d).parents if str(p) != "/"},
                         key=lambda p: (p.count("/"), p))
        head = args.index("--ro-bind")
        dirs = [x for p in parents for x in ("--perms", "0755", "--dir", p)]
        return args[:head] + dirs + args[head:]

    def prepare(self, slot: Slot) -> None:
        """Write the slot's /etc/passwd and /etc/group (names for the jail's uids)."""
        uid = slot.uid if slot.uid is not None else os.getuid()
        files = {"passwd": passwd_text(uid, slot.alt_uid), "group": f"root:x:0:\nsandbox:x:{uid}:\n"}
        for name, text in files.items():
            path = _etc_file(slot, name)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)


def _etc_file(slot: Slot, name: str) -> Path:
    """The host file bound at ``/etc/<name>`` in the slot's jail: inside the slot's own (tmpfs) directory, so
    the jail's mountinfo shows a path relative to that tmpfs, not the pool's host directory."""
    return slot.root / f"etc-{name}"


def _export_seccomp() -> bytes | None:
    """The worker's seccomp filter as BPF for ``bwrap --seccomp`` (None without pyseccomp: the worker then
    reports the layer as off)."""
    import tempfile

    from .worker import seccomp_filter

    try:
        with tempfile.TemporaryFile() as fh:
            seccomp_filter().export_bpf(fh)
            fh.seek(0)
            return fh.read()
    except Exception:  # noqa: BLE001 - reported by the worker as 'seccomp off'
        return None


def mount_tmpfs(path: Path, size_mb: int) -> bool:
    """Mount a size-limited tmpfs on ``path`` (the workspace quota). False where not permitted."""
    if os.geteuid() != 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"size={size_mb}m,mode=0755".encode()
    return libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", 0, opts) == 0


def umount(path: Path) -> None:
    """Lazily unmount ``path`` (MNT_DETACH); errors are ignored."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(str(path).encode(), 2)  # MNT_DETACH


# Runs in a short-lived helper process (setns needs a single-threaded caller). argv: jail_pid, then a JSON
# object {"detach": [names], "attach": [[name, host path], ...]}. Clones each host path as a detached read-only
# tree (in the host's namespace), enters the jail's mount namespace, makes the read-only /data writable for that
# moment (it is root-owned 0755, so the jail cannot write to it anyway), detaches the named mounts and removes
# their mount points, attaches the new trees, and makes /data read-only again. Linux >= 5.12 (mount_setattr);
# the numbers of these newer syscalls are the same on every architecture but alpha. Any failure: the caller
# restarts the worker with the wanted mounts.
_SYNC_MOUNTS = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
OPEN_TREE, MOVE_MOUNT, MOUNT_SETATTR = 428, 429, 442
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
RDONLY, NOSUID, NODEV, PRIVATE = 0x1, 0x2, 0x4, 1 << 18

class Attr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

def sys_(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *args)
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return r

def setattr_(dirfd, path, flags, attr):
    sys_(MOUNT_SETATTR, ctypes.c_int(dirfd), ctypes.c_char_p(path), ctypes.c_uint(flags),
         ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))

pid, plan = sys.argv[1], json.loads(sys.argv[2])
trees = []
for name, host in plan["attach"]:
    fd = sys_(OPEN_TREE, ctypes.c_int(AT_FDCWD), ctypes.c_char_p(host.encode()),
              ctypes.c_uint(1 | os.O_CLOEXEC | AT_RECURSIVE))
    setattr_(fd, b"", AT_EMPTY_PATH | AT_RECURSIVE, Attr(RDONLY | NOSUID | NODEV, 0, PRIVATE, 0))
    trees.append((name, fd, os.path.isdir(host)))
ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
if libc.setns(ns, 0x00020000) != 0:
    raise OSError(ctypes.get_errno(), "setns")
os.chdir("/")
setattr_(AT_FDCWD, b"/data", 0, Attr(0, RDONLY, 0, 0))
try:
    for name in plan["detach"]:
        target = f"/data/{name}"
        if libc.umount2(target.encode(), 2) != 0:  # MNT_DETACH
            raise OSError(ctypes.get_errno(), f"umount {target}")
        os.rmdir(target) if os.path.isdir(target) and not os.path.islink(target) else os.unlink(target)
    for name, fd, is_dir in trees:
        target = f"/data/{name}"
        if is_dir:
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        sys_(MOVE_MOUNT, ctypes.c_int(fd), ctypes.c_char_p(b""), ctypes.c_int(AT_FDCWD),
             ctypes.c_char_p(target.encode()), ctypes.c_uint(0x4))
finally:
    setattr_(AT_FDCWD, b"/data", 0, Attr(RDONLY, 0, 0, 0))
"""

# Runs in a short-lived helper process: enter the jail's IPC namespace and write its System V / POSIX message
# queue limits (these sysctls are per IPC namespace). argv: jail_pid, then "key=value" pairs under /proc/sys.
_SET_IPC_LIMITS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
ns = os.open(f"/proc/{sys.argv[1]}/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
if libc.setns(ns, 0x08000000) != 0:
    raise OSError(ctypes.get_errno(), "setns")
for pair in sys.argv[2:]:
    key, _, value = pair.partition("=")
    with open(f"/proc/sys/{key}", "w") as fh:
        fh.write(value)
"""


def ipc_limits(shm_mb: int) -> dict[str, str]:
    """Per-IPC-namespace limits of a jail: at most ``shm_mb`` MiB of System V shared memory in all, a few small
    message queues and semaphore sets, and no POSIX message queues. None of this memory counts against a
    process's RLIMIT_AS, and all of it outlives its creator, so it is capped here and removed between sessions."""
    shm_bytes = int(shm_mb) << 20
    return {"kernel/shmmax": str(shm_bytes), "kernel/shmall": str(max(1, shm_bytes // 4096)),
            "kernel/shmmni": "32", "kernel/msgmni": "16", "kernel/msgmnb": "65536", "kernel/msgmax": "8192",
            "kernel/sem": "32 256 32 16", "fs/mqueue/queues_max": "0",
            "kernel/shm_rmid_forced": "1"}  # a segment goes with its last user, even without IPC_RMID


def _jail_pid(bwrap_pid: int) -> tuple[str | None, str | None]:
    """The host pid of the process bwrap started (the jail's pid 1), or ``(None, why)``."""
    try:
        with open(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children") as fh:
            children = fh.read().split()
    except OSError as exc:
        return None, f"jail of bwrap pid {bwrap_pid} not found: {exc}"
    if len(children) != 1:
        return None, f"bwrap pid {bwrap_pid} has {len(children)} children, expected one"
    return children[0], None


def _run_helper(script: str, argv: list[str], timeout: float) -> str | None:
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", script, *argv], capture_output=True, text=True,
                              timeout=timeout, env={}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"helper failed: {exc}"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        return f"helper failed: {lines[-1]}"
    return None


def set_bwrap_ipc_limits(bwrap_pid: int, limits: dict[str, str], timeout: float = 10.0) -> str | None:
    """Write ``limits`` (:func:`ipc_limits`) into a running jail's IPC namespace (root only).

    Returns:
        None on success, else one line saying why.
    """
    if os.geteuid() != 0:
        return "setting a jail's IPC limits needs root"
    pid, why = _jail_pid(bwrap_pid)
    if pid is None:
        return why
    return _run_helper(_SET_IPC_LIMITS, [pid, *(f"{k}={v}" for k, v in limits.items())], timeout)


def sync_bwrap_mounts(bwrap_pid: int, detach: list[str], attach: dict[str, Path],
                      timeout: float = 10.0) -> str | None:
    """Make a running bwrap jail's ``/data`` match a session: detach ``detach``, attach ``attach`` read-only.

    Args:
        bwrap_pid: Host pid of the jail's outer bwrap process.
        detach: Names now under ``/data`` that the session must not see.
        attach: ``{name: host_path}`` with names not mounted in that jail.
        timeout: Seconds the helper may take.

    Returns:
        None on success, else one line saying why (the caller then restarts the worker with the mounts).
    """
    if os.geteuid() != 0:
        return "changing the mounts of a running jail needs root"
    pid, why = _jail_pid(bwrap_pid)
    if pid is None:
        return why
    plan = {"detach": list(detach), "attach": [[name, str(host)] for name, host in attach.items()]}
    return _run_helper(_SYNC_MOUNTS, [pid, json.dumps(plan)], timeout)
