"""Host-side launch recipes: the command line that starts one worker, per backend.

A launcher turns a worker slot (its host directories, its uid, the data mounts) into an argv and an
environment. ``BwrapLauncher`` builds the bubblewrap jail; ``LocalLauncher`` runs the same worker unjailed.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import sandbox

from .errors import SandboxUnavailable

JAIL_WORKSPACE = "/workspace"
JAIL_DATA = "/data"
JAIL_TMP = "/tmp"
JAIL_BRIDGE_DIR = "/run/bridge"  # same as sandbox.bridge.JAIL_BRIDGE_DIR
#: Where the venv and this package appear in the jail. Fixed paths, because their host paths may lie under a
#: directory the jail replaces with a private one (a clone under /tmp has its venv at /tmp/<clone>/.venv).
JAIL_VENV = "/opt/sandbox/venv"
JAIL_LIB = "/opt/sandbox/lib"
_PRIVATE_DIRS = ("/tmp", "/workspace", "/data", "/dev", "/proc", "/run", "/opt/sandbox")
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "nsswitch.conf",
              "ssl", "ca-certificates", "mime.types", "fonts")
BWRAP_FIX = ("install it with `apt-get install bubblewrap`, or run unisolated for development with "
             "make_pool(backend='local', allow_unisolated=True)")


@dataclass
class Slot:
    """Host-side resources of one worker: its directories and its unprivileged uid."""

    index: int
    root: Path
    uid: int | None
    mounts: dict[str, Path] = field(default_factory=dict)

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
        """Host directory of the slot's bridge sockets (``/run/bridge`` in a bwrap jail; see sandbox.bridge)."""
        return self.root / "bridge"


def package_parent() -> Path:
    """The directory that contains the ``sandbox`` package (put on the jail's PYTHONPATH)."""
    return Path(sandbox.__file__).resolve().parent.parent


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


def python_paths() -> list[Path]:
    """Directories the jailed interpreter needs: base prefix, venv, site-packages (deduplicated)."""
    found: list[Path] = []
    candidates = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    candidates += [p for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")]
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
        return [sys.executable, "-s", "-m", "sandbox.worker", "--data", str(slot.data),
                "--workspace", str(slot.workspace), "--preload", preload, "--no-seccomp"]

    def env(self, slot: Slot) -> dict[str, str]:
        env = jail_env(str(package_parent()))
        env.update(HOME=str(slot.workspace), TMPDIR=str(slot.tmp), MPLCONFIGDIR=str(slot.tmp / "matplotlib"))
        return env


class BwrapLauncher:
    """Runs the worker inside bubblewrap: new pid/net/ipc/uts namespaces, read-only runtime, private dirs.

    As root, bwrap runs without a user namespace and grants the worker server only CAP_SETUID, CAP_SETGID
    and CAP_KILL; runners drop to the slot's unprivileged uid before any user code runs, so the code is
    really that uid on the host. Not as root, bwrap uses an unprivileged user namespace instead.
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
                       "ro-root", "env-scrub", "rlimits", "pidns-kill"]

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
        args += ["--ro-bind", str(Path(sandbox.__file__).resolve().parent), f"{JAIL_LIB}/sandbox"]
        return args

    def argv(self, slot: Slot, preload: str) -> list[str]:
        args = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
                "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
        if self.as_root:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
        else:
            args += ["--unshare-user", "--disable-userns"]
        args += self._runtime_binds()
        for name in ("passwd", "group"):
            args += ["--ro-bind", str(slot.root.parent / f"{slot.index}.{name}"), f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev", "--bind", str(slot.shm), "/dev/shm", "--tmpfs", "/run",
                 "--bind", str(slot.workspace), JAIL_WORKSPACE, "--bind", str(slot.tmp), JAIL_TMP,
                 "--perms", "0755", "--tmpfs", JAIL_DATA]
        if slot.bridge.is_dir():
            args += ["--ro-bind", str(slot.bridge), JAIL_BRIDGE_DIR]
        for name, host in sorted(slot.mounts.items()):
            if os.path.exists(host):  # a mount of an earlier session may be gone by now
                args += ["--ro-bind", str(host), f"{JAIL_DATA}/{name}"]
        args = self._with_parent_dirs(args)
        args += ["--remount-ro", JAIL_DATA, "--remount-ro", "/", "--chdir", JAIL_WORKSPACE, "--",
                 self.python, "-s", "-m", "sandbox.worker", "--pidns", "--preload", preload]
        if self.as_root and slot.uid is not None:
            args += ["--uid", str(slot.uid), "--gid", str(slot.uid)]
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
        files = {
            "passwd": (f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                       f"sandbox:x:{uid}:{uid}:sandbox:{JAIL_WORKSPACE}:/bin/sh\n"),
            "group": f"root:x:0:\nsandbox:x:{uid}:\n",
        }
        for name, text in files.items():
            path = slot.root.parent / f"{slot.index}.{name}"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)


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


# Runs in a short-lived helper process (setns needs a single-threaded caller): clone each host path as a
# detached read-only tree, enter the jail's mount namespace, create the mount point under the read-only
# /data (made writable only for that moment; it is root-owned 0755, so the jail cannot write to it anyway)
# and attach the tree there. argv: jail_pid, then name, host path pairs. Linux >= 5.12 (mount_setattr); the
# numbers of these newer syscalls are the same on every architecture but alpha. Any failure: the caller restarts.
_ADD_MOUNTS = r"""
import ctypes, os, sys
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

pid, pairs = sys.argv[1], list(zip(sys.argv[2::2], sys.argv[3::2]))
trees = []
for name, host in pairs:
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


def add_bwrap_mounts(bwrap_pid: int, mounts: dict[str, Path], timeout: float = 10.0) -> str | None:
    """Attach ``mounts`` read-only at ``/data/<name>`` in a running bwrap jail (root only), no restart.

    Args:
        bwrap_pid: Host pid of the jail's outer bwrap process (its child is the jail's init).
        mounts: ``{name: host_path}`` with names not yet mounted in that jail.
        timeout: Seconds the helper may take.

    Returns:
        None on success, else one line saying why (the caller then restarts the worker with the mounts).
    """
    if os.geteuid() != 0:
        return "attaching mounts to a running jail needs root"
    try:
        with open(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children") as fh:
            children = fh.read().split()
    except OSError as exc:
        return f"jail of bwrap pid {bwrap_pid} not found: {exc}"
    if len(children) != 1:
        return f"bwrap pid {bwrap_pid} has {len(children)} children, expected the jail's init"
    argv = [sys.executable, "-S", "-c", _ADD_MOUNTS, children[0]]
    for name, host in mounts.items():
        argv += [name, str(host)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mount helper failed: {exc}"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        return f"mount helper failed: {lines[-1]}"
    return None
