"""In-jail worker server: ``python -m medagentgym.sandbox.worker [options]``, channel = its stdin/stdout.

The same script runs inside bubblewrap (``bwrap`` backend), as a plain process (``local`` backend) and inside a
container (``docker`` backend). It depends on the standard library only (plus the modules it preloads).

Protocol (host <-> server): each message is one frame, a 4-byte big-endian length followed by that many bytes
of UTF-8 JSON (an object). Frames are strictly request/response, one request in flight per worker.

* Server -> host at start: ``{"op": "ready", "pid", "uid", "runner_uid", "seccomp", "no_new_privs",
  "preloaded": [...], "python": "3.11.7", "light_zygote": pid or null}`` once the preload and the seccomp filter
  are done.
* ``{"op": "open", "persistent": bool, "limits": {...}, "bridges": {port: socket}}`` starts a session:
  leftover processes are killed; the limits are the session's hard ceiling; each bridge makes the runner
  listen on 127.0.0.1:<port> and forward to the Unix socket (``medagentgym.sandbox.bridge``). Reply ``{"ok": true}``.
* ``{"op": "run", "lang": "python"|"sql"|"shell", "source": str, "database": str, "max_rows": int,
  "limits": {...}}``. Reply ``{"ok": true, "result": <ExecResult.to_dict()>}``.
* ``{"op": "reset"}`` ends the session (runner and leftovers killed). ``{"op": "ping"}``. Both reply ``{"ok": true}``;
  ``{"op": "ping", "detail": true}`` adds ``"roles": {pid: "server"|"zygote-<kind>"|"spare-<kind>"|"runner"}``.
* Any failure of the server itself: ``{"ok": false, "error": "one line"}``.

Processes inside: the server (this module) preloads heavy modules once, loads the seccomp filter once, and
forks a *runner* (``medagentgym.sandbox._runner``) per session (persistent) or per call. Before its preload it forks a
*light zygote* (:class:`Zygote`: stdlib and sqlite3 only) that forks the runners of sessions whose first
call is SQL or shell, several times cheaper to fork and tear down than a copy of the pandas-loaded server;
sessions whose first Python call imports scikit-learn, SciPy, statsmodels or lifelines fork from an *ml zygote*
that has them loaded.
A spare runner of the kind the last session started (of each kind before the first session) is forked ahead of
need after a reply (in a persistent session, once the host has been quiet for a few milliseconds), so the fork is
off the critical path of the next session's open and first call; one runner is forked per session. The runner drops to the unprivileged ``--uid`` (when given), sets rlimits and executes user code with its
stdout/stderr on pipes that the server drains concurrently, keeping head and tail up to the cap. On timeout the
server kills every process of the jail except itself (``--pidns``: the jail has its own pid namespace) or the
runner's process group (no pid namespace), so nothing a call started survives it.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fcntl
import gc
import json
import math
import os
import re
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

from medagentgym.sandbox import _caps
from medagentgym.sandbox._clock import CallClock

_HDR = struct.Struct(">I")
MAX_FRAME = 256 << 20
_SPARE_IDLE_S = 0.005  # quiet time after a reply, mid-session, before the spare runner is forked
_ZYGOTE_WAIT_S = 10.0  # how long a session waits for a zygote's imports before forking from the server
_MARKER = "\n...[sandbox: {omitted} bytes omitted from the middle; {total} bytes in total]...\n"


def write_frame(fd: int, obj: Any) -> None:
    """Write one length-prefixed JSON frame to ``fd`` (blocking)."""
    data = json.dumps(obj, default=str).encode("utf-8")
    view = memoryview(_HDR.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_within(fd: int, obj: Any, deadline: float) -> bool:
    """Write one frame to the pipe ``fd`` before ``deadline`` (monotonic); False when the reader was too slow.

    Raises:
        OSError: The reader is gone.
    """
    data = json.dumps(obj, default=str).encode("utf-8")
    view = memoryview(_HDR.pack(len(data)) + data)
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                return False
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
        return True
    finally:
        os.set_blocking(fd, blocking)


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> Any:
    """Read one frame from ``fd`` (blocking). Returns None at EOF; raises ValueError on a bad frame."""
    head = _read_exact(fd, _HDR.size)
    if head is None:
        return None
    (size,) = _HDR.unpack(head)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return json.loads(body)


#: Largest reply frame a runner may send (its exception report with grounding context); more is a lie.
MAX_REPLY = 4 << 20
_KINDS = ("ok", "python_error", "syntax_error", "sql_error", "shell_error", "timeout", "memory", "killed",
          "sandbox_error")


class ReplyReader:
    """Incremental, non-blocking reader of a runner's reply pipe, for the reply to call number ``seq``.

    The user's code can write to that pipe too. Frames carrying another call number (a reply left over from an
    earlier call, or a forgery) are skipped, so the session's calls cannot be shifted against their replies. The
    number is random per call; code that digs it out of the runner's own frames can forge the reply of the call
    it runs in, and only that one, with fields the host then types (:func:`_clean_reply`).
    """

    def __init__(self, fd: int, seq: int) -> None:
        self.fd, self.seq, self.buf, self.closed = fd, seq, bytearray(), False

    def feed(self) -> dict | None:
        """Read what is available. Returns the reply once complete, else None (``closed`` is set at EOF).

        Raises:
            ValueError: A frame is larger than :data:`MAX_REPLY`, not JSON (or nested past the decoder's depth), or
                not a JSON object.
        """
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                self.closed = True
                break
            self.buf += chunk
            if len(self.buf) > 2 * (MAX_REPLY + _HDR.size):
                raise ValueError(f"more than {2 * MAX_REPLY} bytes of replies")
        while len(self.buf) >= _HDR.size:
            (size,) = _HDR.unpack(self.buf[:_HDR.size])
            if size > MAX_REPLY:
                raise ValueError(f"reply frame of {size} bytes announced")
            if len(self.buf) < _HDR.size + size:
                return None
            try:
                reply = json.loads(bytes(self.buf[_HDR.size:_HDR.size + size]))
            except RecursionError:  # nesting past the decoder's depth: as unreadable as bad JSON
                raise ValueError("reply frame nested too deeply") from None
            del self.buf[:_HDR.size + size]
            if not isinstance(reply, dict):
                raise ValueError("reply is not a JSON object")
            if reply.get("seq") == self.seq:
                return reply
        return None


def _clean_reply(reply: dict) -> tuple[int | None, int | None, str, dict | None]:
    """The typed fields of a runner's reply: whatever the user's code wrote there, the host gets sane types.

    The user's code can rewrite any module of the runner it runs in (what it reports as error context, say), so
    every field is rebuilt from scratch: ints in range, strings only where strings belong (anything else, however
    deeply nested, becomes its type's name, without ever being converted), and the context through
    ``medagentgym.sandbox.grounding.clean_context`` (documented keys and shapes only).
    """
    def small_int(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) and -(1 << 31) <= value < 1 << 31 \
            else None

    def text(value: Any, cap: int) -> str:
        return value[:cap] if isinstance(value, str) else "" if value is None else f"<{type(value).__name__}>"

    kind = reply.get("error_kind")
    kind = kind if isinstance(kind, str) and kind in _KINDS else "python_error"
    exc = reply.get("exception")
    exception = None
    if isinstance(exc, dict):
        exception = {"type": text(exc.get("type"), 200), "message": text(exc.get("message"), 4000),
                     "lineno": small_int(exc.get("lineno")), "traceback": text(exc.get("traceback"), 20000),
                     "context": _clean_context(exc.get("context"))}
        if "offset" in exc:
            exception["offset"] = small_int(exc.get("offset"))
    return small_int(reply.get("exit_code")), small_int(reply.get("signal")), kind, exception


def _clean_context(ctx: Any) -> dict | None:
    try:
        from medagentgym.sandbox.grounding import clean_context
    except Exception:  # the optional grounding module is unavailable: no context at all
        return None
    return clean_context(ctx)


class Capture:
    """Keeps the first and last ``cap // 2`` bytes of a stream and counts the total."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 4 * self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self.head_cap + self.tail_cap

    def text(self) -> str:
        if not self.truncated:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
        tail = bytes(self.tail[-self.tail_cap:])
        omitted = self.total - len(self.head) - len(tail)
        return (bytes(self.head).decode("utf-8", errors="replace")
                + _MARKER.format(omitted=omitted, total=self.total)
                + tail.decode("utf-8", errors="replace"))


# -- process bookkeeping -------------------------------------------------------------------------
def _proc_table(skip: set) -> list[tuple[int, int, int, str]]:
    """(pid, ppid, pgid, state) of every process visible in /proc, except the pids in ``skip``.

    Skipping matters for speed: reading the stat file of a process that is being killed waits for the
    teardown of its whole address space.
    """
    rows = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        rows.append((int(name), int(fields[1]), int(fields[2]), fields[0].decode()))
    return rows


#: Capabilities of the worker server (see ``medagentgym.sandbox._caps``): it kills a call's leftovers, which run as another
#: uid, and its children need SETUID/SETGID/SETPCAP to drop every privilege before they serve a session.
SERVER_PERMITTED = frozenset({_caps.CAP_KILL, _caps.CAP_SETUID, _caps.CAP_SETGID, _caps.CAP_SETPCAP})
SERVER_EFFECTIVE = frozenset({_caps.CAP_KILL})
ZYGOTE_PERMITTED = frozenset({_caps.CAP_SETUID, _caps.CAP_SETGID, _caps.CAP_SETPCAP})


def _harden(args: argparse.Namespace) -> dict[str, Any]:
    """First thing the server does, before any import or fork: capabilities, seccomp, no-new-privs, cwd.

    bwrap loads the seccomp filter itself before it starts the interpreter (``--seccomp``) and says so with
    ``--seccomp-preloaded`` (as does the Docker backend's first stage); otherwise it is loaded here, on top of any
    filter already in force. Either way it is in force before the preload and before any runner exists.

    Returns:
        The facts the ready frame reports: ``seccomp``, ``no_new_privs``, ``caps_bounded``.
    """
    bounded = _caps.restrict(set(SERVER_PERMITTED), set(SERVER_EFFECTIVE))
    if args.seccomp_preloaded:  # the launcher loaded seccomp_filter() before exec (bwrap --seccomp, docker stage)
        seccomp = "on" if _seccomp_mode() == 2 else "off: the launcher's filter is not in force"
    else:
        seccomp = "off: disabled" if args.no_seccomp else _load_seccomp()
    libc = ctypes.CDLL(None, use_errno=True)
    nnp = libc.prctl(38, 1, 0, 0, 0) == 0 or libc.prctl(39, 0, 0, 0, 0) == 1  # PR_SET/GET_NO_NEW_PRIVS
    os.chdir("/")  # never a directory the jailed code can write (it is not on sys.path either: python -I)
    return {"seccomp": seccomp, "no_new_privs": bool(nnp), "caps_bounded": bounded}


def _seccomp_mode() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Seccomp:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def seccomp_filter():
    """The deny-list filter every jailed process runs under (a ``pyseccomp.SyscallFilter``).

    Loaded in-process by :func:`_load_seccomp`, or exported as BPF by the host for bwrap's ``--seccomp``.

    Raises:
        ImportError: pyseccomp is not installed.
    """
    import pyseccomp as sc

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = ["ptrace", "mount", "umount2", "unshare", "setns", "pivot_root", "chroot", "kexec_load",
            "kexec_file_load", "bpf", "keyctl", "add_key", "request_key", "perf_event_open", "init_module",
            "finit_module", "delete_module", "reboot", "swapon", "swapoff", "process_vm_readv",
            "process_vm_writev", "userfaultfd", "open_by_handle_at", "name_to_handle_at", "acct",
            "quotactl", "syslog", "personality", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig",
            "fspick", "mount_setattr", "io_uring_setup", "io_uring_enter", "io_uring_register",
            "lookup_dcookie", "vhangup", "kcmp", "pidfd_getfd", "fanotify_init", "mq_open", "iopl", "ioperm"]
    for name in deny:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except Exception:
            pass  # syscall unknown on this architecture
    # Only AF_UNIX(1), AF_INET(2), AF_INET6(10) and AF_NETLINK(16) sockets; the netns has no route anyway.
    for family in [*range(3, 10), *range(11, 16)]:
        f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GE, 17))
    for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x08000000, 0x04000000, 0x02000000):
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # its flags live in memory; glibc falls back to clone
    return f


def _load_seccomp() -> str:
    """Install :func:`seccomp_filter` in this process (inherited by every child). Returns "on" or why not."""
    try:
        seccomp_filter().load()
    except Exception as exc:  # the layer is reported as absent; the jail still works
        return f"off: {type(exc).__name__}: {exc}"
    return "on"


def runner_uids(args: argparse.Namespace) -> list[int | None]:
    """The uids runners take turns with, one per session (``--uid`` and, when given, ``--alt-uid``)."""
    return [args.uid] if args.alt_uid is None else [args.uid, args.alt_uid]


def spawn_runner(args: argparse.Namespace, turn: int = 0) -> dict:
    """Fork a runner child of this process (uid ``runner_uids(args)[turn]``); returns its pipes' host ends."""
    pipes = [os.pipe() for _ in range(4)]  # req, resp, out, err
    (req_r, req_w), (resp_r, resp_w), (out_r, out_w), (err_r, err_w) = pipes
    pid = os.fork()
    if pid == 0:
        try:
            become_runner(args, req_r, resp_w, out_w, err_w, turn)
        finally:
            os._exit(70)
    for fd in (req_r, resp_w, out_w, err_w):
        os.close(fd)
    return _runner_handle(pid, req_w, resp_r, out_r, err_r, turn)


def _runner_handle(pid: int, req: int, resp: int, out: int, err: int, turn: int = 0) -> dict:
    for fd in (resp, out, err):
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    return {"pid": pid, "req": req, "resp": resp, "out": out, "err": err, "turn": turn}


def become_runner(args: argparse.Namespace, req_r: int, resp_w: int, out_w: int, err_w: int,
                  turn: int = 0) -> None:
    """In a freshly forked child: drop every privilege at once, wait for the session's configuration, serve.

    The privileges go before anything else: the bounding set, every capability, then the uid for good (a
    failure exits), so a spare runner waiting for its session holds nothing either. The uid is the one of the
    session the runner is forked for (``turn``, see :class:`Server`).
    """
    import resource

    from medagentgym.sandbox._runner import REQ_FD, Runner

    uids = runner_uids(args)
    try:
        _caps.drop_to_uid(uids[turn % len(uids)], args.gid)
    except OSError as exc:
        print(f"medagentgym.sandbox.worker: runner could not drop privileges: {exc}", file=sys.stderr)
        os._exit(71)
    os.setpgid(0, 0)
    devnull = os.open("/dev/null", os.O_RDWR)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (devnull, out_w, err_w, req_r, resp_w)]
    for target, fd in enumerate(high):
        os.dup2(fd, target, inheritable=True)
    os.closerange(5, 1 << 16)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    runner = Runner(args.data, args.workspace)  # built ahead: it reads no session state
    config = read_frame(REQ_FD)  # the spare waits here until a session takes it
    if config is None:
        os._exit(0)
    lim = config.get("limits") or {}
    mb = 1 << 20
    hard = {
        resource.RLIMIT_AS: int(lim.get("memory_mb", 2048)) * mb,
        resource.RLIMIT_FSIZE: int(lim.get("file_size_mb", 64)) * mb,
        resource.RLIMIT_NPROC: int(lim.get("processes", 64)),
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_MSGQUEUE: 0,  # no POSIX message queues (their memory is outside RLIMIT_AS)
        resource.RLIMIT_NOFILE: min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]),
    }
    if not config.get("persistent", True):
        hard[resource.RLIMIT_CPU] = int(float(lim.get("cpu_s", 30.0))) + 2
    for res, value in hard.items():
        resource.setrlimit(res, (value, value))
    os.chdir(args.workspace)
    # Like a notebook kernel, the session's code may import modules it wrote to its workspace. Only this
    # unprivileged process looks there: the server and the zygotes run with an isolated sys.path (python -I).
    sys.path.insert(0, args.workspace)
    if config.get("bridges"):
        runner.notes.extend(_start_bridges(config["bridges"]))
    runner.serve(read_frame, write_frame)


#: Modules the ``ml`` zygote imports on top of the server's preload; a session whose first Python call imports
#: one of these packages forks from it (scikit-learn, SciPy, statsmodels and lifelines: 2-4 s to import).
ML_PRELOAD = ("scipy.stats", "sklearn.linear_model", "sklearn.ensemble", "sklearn.metrics",
              "sklearn.model_selection", "sklearn.pipeline", "sklearn.preprocessing", "statsmodels.api",
              "statsmodels.stats.power", "lifelines", "lifelines.statistics")
_ML_IMPORT = re.compile(r"^[ \t]*(?:from|import)[ \t]+(?:scipy|sklearn|statsmodels|lifelines)\b", re.MULTILINE)


def is_lean(preload: str) -> bool:
    """Whether a worker with this ``--preload`` is lean (neither numpy nor pandas preloaded: no zygotes)."""
    return not {"numpy", "pandas"} & {name.strip() for name in preload.split(",")}


def runner_kind(lang: str | None, source: str | None) -> str:
    """Which runner a session's first call starts: ``light`` (SQL, shell), ``ml`` or ``full`` (Python)."""
    if lang in ("sql", "shell"):
        return "light"
    return "ml" if _ML_IMPORT.search(source or "") else "full"


class Zygote:
    """A child of the server that forks runners from its own, differently loaded, memory.

    * ``light``: forked before the server's preload (stdlib and sqlite3 only). Forking a process costs in
      proportion to its mapped memory, and so does tearing the child down: a runner forked from the
      pandas-loaded server costs ~10 ms of CPU per session, one forked from here a fraction of that.
    * ``ml``: forked from the loaded server on first demand, then imports :data:`ML_PRELOAD` (2-4 s, once per
      worker). The first session waits for it (up to half its call's wall-clock limit, at most
      ``_ZYGOTE_WAIT_S``); a session that cannot wait forks from the server and imports what it needs itself.

    Each runner is forked through a short-lived intermediate child that exits at once, so the runner is
    re-parented to the server (a child subreaper), which waits for it, kills it and reads its status exactly as
    for the runners it forks itself. The runner's pipes travel to the server over a Unix socket.
    """

    def __init__(self, kind: str, pid: int, sock: socket.socket) -> None:
        self.kind, self.pid, self.sock = kind, pid, sock
        self._ready = False

    @classmethod
    def start(cls, kind: str, args: argparse.Namespace) -> Zygote | None:
        """Fork the zygote; returns None (sessions then fork from the server) when that fails."""
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            pid = os.fork()
        except OSError as exc:
            print(f"medagentgym.sandbox.worker: {kind} zygote unavailable: {exc}", file=sys.stderr)
            return None
        if pid == 0:
            try:  # keep stdio (stderr is the worker's log) and our socket; the server's channel and pipes go
                os.closerange(3, theirs.fileno())
                os.closerange(theirs.fileno() + 1, 1 << 16)
                cls._serve(kind, args, theirs)
            finally:
                os._exit(0)
        theirs.close()
        return cls(kind, pid, ours)

    @staticmethod
    def _serve(kind: str, args: argparse.Namespace, sock: socket.socket) -> None:
        # Seccomp and no-new-privs are inherited from the server; a zygote kills nothing, so CAP_KILL goes.
        _caps.restrict(set(ZYGOTE_PERMITTED), set())
        if kind == "light":  # forked before the server's preload: stdlib, sqlite3 and the runner only
            import sqlite3  # noqa: F401  (what SQL sessions need, loaded once)
            import subprocess  # noqa: F401

            import medagentgym.sandbox._runner
            import medagentgym.sandbox.grounding  # noqa: F401
        else:  # forked from the loaded server
            for name in ML_PRELOAD:
                try:
                    __import__(name)
                except Exception as exc:
                    print(f"medagentgym.sandbox.worker: ml preload of {name} failed: {exc}", file=sys.stderr)
        # Objects of the preloaded modules go to the permanent generation: the garbage collector of a forked
        # runner then never writes to their pages, so they stay shared instead of being copied on write.
        gc.freeze()
        sock.sendall(b"r")
        while request := sock.recv(1):  # one byte per runner: b"0" + its turn
            Zygote._fork_runner(args, sock, request[0] - ord("0"))

    @staticmethod
    def _fork_runner(args: argparse.Namespace, sock: socket.socket, turn: int = 0) -> None:
        pipes = [os.pipe() for _ in range(4)]
        (req_r, req_w), (resp_r, resp_w), (out_r, out_w), (err_r, err_w) = pipes
        pid_r, pid_w = os.pipe()
        middle = os.fork()
        if middle == 0:
            try:
                runner = os.fork()
                if runner == 0:
                    become_runner(args, req_r, resp_w, out_w, err_w, turn)
                else:
                    os.write(pid_w, _HDR.pack(runner))
            finally:
                os._exit(70)
        os.waitpid(middle, 0)  # once it is gone, the runner's parent is the server
        packed = os.read(pid_r, _HDR.size)
        for fd in (req_r, resp_w, out_w, err_w, pid_r, pid_w):
            os.close(fd)
        socket.send_fds(sock, [packed or b"\0\0\0\0"], [req_w, resp_r, out_r, err_r])
        for fd in (req_w, resp_r, out_r, err_r):
            os.close(fd)

    def ready(self, wait_s: float = 0.0) -> bool:
        """True once the zygote has finished its imports, waiting up to ``wait_s`` seconds for that."""
        if not self._ready and select.select([self.sock], [], [], wait_s)[0]:
            try:
                self._ready = self.sock.recv(1) == b"r"
            except OSError:
                return False
        return self._ready

    def spawn(self, turn: int = 0) -> dict | None:
        """A new runner (uid of ``turn``) forked by the zygote, or None when the zygote is gone."""
        try:
            if not self.ready():
                return None
            self.sock.sendall(bytes([ord("0") + turn]))
            packed, fds, _, _ = socket.recv_fds(self.sock, _HDR.size, 4)
        except OSError:
            return None
        (pid,) = _HDR.unpack(packed) if len(packed) == _HDR.size else (0,)
        if len(fds) != 4 or pid <= 0:
            for fd in fds:
                os.close(fd)
            return None
        return _runner_handle(pid, *fds, turn)

    def stop(self, kill: bool = True) -> None:
        """Close the channel (the zygote exits on EOF) and, with ``kill``, SIGKILL it."""
        self.sock.close()
        if kill:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass


_SYSV = {"shm": "shmctl", "msg": "msgctl", "sem": "semctl"}


def _sysv_ids() -> dict[str, list[int]]:
    """Ids of the System V IPC objects of this IPC namespace, by kind (``/proc/sysvipc``)."""
    found: dict[str, list[int]] = {}
    for kind in _SYSV:
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        ids = [int(row.split()[1]) for row in rows if len(row.split()) > 1]
        if ids:
            found[kind] = ids
    return found


def _remove_sysv_ipc(args: argparse.Namespace) -> None:
    """Remove every System V shared-memory segment, message queue and semaphore set of this IPC namespace.

    Their memory is outside every per-process limit and they outlive their creator, so a session could leave
    memory behind or pass data to the next session. Only their creator (the runner uid) or CAP_IPC_OWNER may
    remove them, so a short-lived child drops to the runner uid first. Every process of the session is already
    dead, so segments are destroyed at once. Costs nothing when there are none (the usual case).

    Raises:
        RuntimeError: Objects remain afterwards.
    """
    for uid in runner_uids(args):  # the objects of each session uid are removable by that uid only
        if not _sysv_ids():
            return
        pid = os.fork()
        if pid == 0:
            try:
                _caps.drop_to_uid(uid, args.gid)
                libc = ctypes.CDLL(None, use_errno=True)
                for kind, ids in _sysv_ids().items():
                    call = getattr(libc, _SYSV[kind])
                    for ident in ids:
                        call(ident, 0, 0, None) if kind == "sem" else call(ident, 0, None)  # IPC_RMID = 0
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    left = _sysv_ids()
    if left:
        raise RuntimeError(f"System V IPC objects remain after cleanup: {left}")


class Server:
    """The worker server: one session at a time, one call at a time.

    A *spare* runner is forked ahead of need (after each reply), so a session's first call does not pay
    for the fork. A runner drops every privilege and its uid at fork, and sessions take turns between two uids
    (``--uid`` and ``--alt-uid``): a spare forked while a session's code is alive (mid-session, for the next
    session) runs as the *other* uid, so that code can neither signal it (SIGSTOP would make the next session's
    first call time out) nor lower its limits (prlimit). A spare is only handed to a session of its own uid; a
    one-shot session's spares (its own uid, forked between its calls) are dropped when it ends.

    A persistent session keeps the spare forked for it until its first call takes one; at that moment, before any
    of its code runs, every other spare of its uid is dropped (:meth:`_took_runner`), so no process its code could
    reach outlives it into a later session of the same uid. Spares are forked only of the kind the last session
    started (``light``, ``full`` or ``ml``; every kind before the first session): a spare of another kind would be
    dropped unused by the next session (a fork of the pandas-loaded server and its teardown: ~7 ms of CPU per
    session), and a session of another kind forks its runner on its first call instead.
    """

    def __init__(self, args: argparse.Namespace, chan_in: int, chan_out: int,
                 light: Zygote | None = None, lean: bool = False) -> None:
        self.args = args
        self.lean = lean  # no zygotes: every runner is a fork of this (small) process
        self.chan_in, self.chan_out = chan_in, chan_out
        self.persistent = True
        self.session_limits: dict = {}
        self.bridges: dict[str, str] = {}  # in-jail port -> Unix socket path (medagentgym.sandbox.bridge)
        self.runner: dict | None = None
        #: Spare runners forked ahead of need: ``full`` from this process, the others from their zygote.
        self.spares: dict[str, dict | None] = {"full": None} if lean else {"full": None, "light": None}
        #: Zygotes by kind; None once one died (its kind then forks from this process).
        self.zygotes: dict[str, Zygote | None] = {"light": light} if light else {}
        self.status: dict[int, int] = {}  # wait status of the current runner, once reaped
        #: Number of the call in flight, drawn at random for each call; the runner echoes it in its reply. Random,
        #: not counted: the user's code of one call cannot forge the reply of the next (its number is not drawn
        #: yet), and guessing the current one takes 2**62 tries.
        self.seq = 0
        #: True while no process of ours but the spare exists: nothing ran since the last full cleanup,
        #: so a session's ``open`` need not scan /proc again.
        self.clean = False
        #: Sessions counted since start: session ``turn`` runs its code as ``runner_uids(args)[turn % 2]``.
        self.turn = 0
        self.in_session = False
        #: Whether this (persistent) session's code has started: its first call took a runner.
        self.started = False
        #: The kind of runner the last session started with: the kind spares are forked of (None: every kind).
        self.next_kind: str | None = None
        #: Runners this server forked (from itself or a zygote), for tests that count per-session mechanics.
        self.forks = 0

    def _spare_turn(self) -> int:
        """The turn spares are forked for now: a one-shot session's own calls, a persistent session's first call
        (its spare, forked before it opened), else the next session."""
        if self.in_session and (not self.persistent or not self.started):
            return self.turn
        return self.turn + 1

    def _kind_wanted(self, kind: str) -> bool:
        return self.next_kind is None or kind == self.next_kind

    def _took_runner(self, kind: str) -> None:
        """A session's runner of ``kind`` was just taken, before its code runs: predict the next session's kind
        and, for a persistent session, drop every other spare of its uid (its code could signal or prlimit them)."""
        self.next_kind = kind
        if not self.persistent:
            return
        self.started = True
        for other, spare in self.spares.items():
            if spare is not None and self._same_uid(spare["turn"], self.turn):
                self._discard(spare)
                self.spares[other] = None

    def _same_uid(self, a: int, b: int) -> bool:
        n = len(runner_uids(self.args))
        return a % n == b % n

    # -- runner lifecycle ---------------------------------------------------------------------
    def _spawn_runner(self, kind: str = "full", wait_s: float = _ZYGOTE_WAIT_S, turn: int | None = None) -> dict:
        """Fork a runner for session ``turn`` (default: the current one): from this process (``full``: the
        preloaded modules) or from the zygote of ``kind``."""
        turn = self.turn if turn is None else turn
        turn %= len(runner_uids(self.args))
        self.forks += 1
        zygote = self.zygotes.get(kind)
        if kind == "ml" and "ml" not in self.zygotes:  # first demand: start it and wait for its imports (~2 s
            zygote = self.zygotes["ml"] = Zygote.start("ml", self.args)  # once; cheaper than importing twice)
        if zygote is not None and zygote.ready(wait_s):
            runner = zygote.spawn(turn)
            if runner is not None:
                return runner
            self._lose_zygote(kind)
        return spawn_runner(self.args, turn)

    def _lose_zygote(self, kind: str, reaped: bool = False) -> None:
        """Forget a dead zygote: sessions of its kind fork from this process from now on.

        A zygote already reaped is not signalled: its pid may belong to another process by now.
        """
        zygote = self.zygotes.pop(kind, None)
        if zygote is not None:
            zygote.stop(kill=not reaped)
        self.zygotes[kind] = None  # do not start it again

    def _take_runner(self, kind: str, wait_s: float = _ZYGOTE_WAIT_S) -> dict:
        """Hand the spare of ``kind`` (or a fresh runner) its configuration; it then drops privileges."""
        for _ in range(2):
            runner = self.spares.get(kind)
            if runner is not None and not self._same_uid(runner["turn"], self.turn):
                runner = None  # forked for the next session's uid: it stays that session's spare
            elif kind in self.spares:
                self.spares[kind] = None
            if runner is None:
                runner = self._spawn_runner(kind, wait_s)
            try:
                write_frame(runner["req"], {"persistent": self.persistent, "limits": self.session_limits,
                                            "bridges": self.bridges})
                return runner
            except OSError:
                self._discard(runner)
        raise RuntimeError("could not start a runner process")

    def _track_ml(self) -> None:
        ml = self.zygotes.get("ml")
        if "ml" not in self.spares and ml is not None and ml.ready():
            self.spares["ml"] = None  # the ml zygote is up: spares of it may be forked from now on

    def _prepare_spare(self) -> None:
        self._track_ml()
        turn = self._spare_turn()
        for kind, spare in self.spares.items():
            if spare is not None and not self._same_uid(spare["turn"], turn):
                self._discard(spare)  # e.g. a one-shot session's spare once it ended: its code had that uid
                spare = self.spares[kind] = None
            if spare is None and self._kind_wanted(kind):
                self.spares[kind] = self._spawn_runner(kind, turn=turn)

    def _discard(self, runner: dict) -> None:
        try:
            os.kill(runner["pid"], signal.SIGKILL)
        except OSError:
            pass
        for key in ("req", "resp", "out", "err"):
            try:
                os.close(runner[key])
            except OSError:
                pass

    def _close_runner(self) -> None:
        if self.runner is not None:
            self._discard(self.runner)
            self.runner = None
        self.status.clear()

    def _reap(self) -> None:
        """Collect exited children without blocking; keep only the current runner's status."""
        current = self.runner["pid"] if self.runner else None
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == current:
                self.status[pid] = status
            else:
                for kind, zygote in list(self.zygotes.items()):
                    if zygote is not None and pid == zygote.pid:
                        self._lose_zygote(kind, reaped=True)

    def _status_of(self, pid: int) -> int:
        """Wait for the current runner ``pid`` and return its wait status."""
        if pid not in self.status:
            try:
                _, status = os.waitpid(pid, 0)
                self.status[pid] = status
            except ChildProcessError:
                self.status.setdefault(pid, 0)
        return self.status.pop(pid)

    def kill_strays(self, keep: int | None) -> None:
        """SIGKILL every process a call left behind, rescanning until no new one appears (fork bombs).

        With ``--pidns`` that is every process of the namespace but us, its init, the spare and ``keep``;
        without, the runner's process group. Killed processes are reaped later (we are a child subreaper),
        so their teardown does not delay the reply.
        """
        spared = {os.getpid(), keep, 1 if self.args.pidns else None}
        spared.update(spare["pid"] for spare in self.spares.values() if spare)
        spared.update(zygote.pid for zygote in self.zygotes.values() if zygote)
        runner_pgid = self.runner["pid"] if self.runner else None
        killed: set[int] = set()
        for attempt in range(2000):
            victims = []
            for pid, _ppid, pgid, state in _proc_table(spared | killed):
                if state in ("Z", "X"):
                    continue
                if self.args.pidns or (runner_pgid is not None and pgid == runner_pgid):
                    victims.append(pid)
            if not victims:
                break
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            killed.update(victims)
            if attempt > 10:
                time.sleep(0.001)
        self._reap()

    def _request_within(self, seconds: float) -> bool:
        """True when a request arrives on the channel within ``seconds`` (nothing is read)."""
        return bool(select.select([self.chan_in], [], [], seconds)[0])

    # -- requests -----------------------------------------------------------------------------
    def handle(self, req: dict) -> dict:
        self._reap()
        op = req.get("op")
        if op == "ping":
            if not req.get("detail"):
                return {"ok": True}
            # Who is who in this jail (pids as the jail sees them), for audits and tests.
            roles = {str(os.getpid()): "server"}
            roles.update({str(z.pid): f"zygote-{k}" for k, z in self.zygotes.items() if z is not None})
            roles.update({str(r["pid"]): f"spare-{k}" for k, r in self.spares.items() if r is not None})
            if self.runner is not None:
                roles[str(self.runner["pid"])] = "runner"
            return {"ok": True, "roles": roles, "forks": self.forks, "sessions": self.turn}
        if op in ("open", "reset"):
            if not (self.clean and self.runner is None):
                self.kill_strays(keep=None)
                self._close_runner()
                if self.args.ipcns:
                    _remove_sysv_ipc(self.args)  # raises when objects remain: the host then replaces us
                self.clean = True
            self.in_session = op == "open"
            if op == "open":
                self.turn += 1  # this session's code runs as the uid no process alive now has
                self.started = False
                self.persistent = bool(req.get("persistent", True))
                self.session_limits = dict(req.get("limits") or {})
                self.bridges = {str(k): str(v) for k, v in (req.get("bridges") or {}).items()}
            return {"ok": True}
        if op == "run":
            return {"ok": True, "result": self.run(req)}
        return {"ok": False, "error": f"unknown op {op!r}: expected open, run, reset or ping"}

    def _call_pids(self) -> list[int]:
        """Pids of the call in flight: every process of the jail but ours (server, zygotes, spares), or without a
        pid namespace the runner's process group."""
        if self.args.pidns:
            skip = {os.getpid(), *(z.pid for z in self.zygotes.values() if z is not None),
                    *(r["pid"] for r in self.spares.values() if r is not None)}
            return [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in skip]
        pgid = self.runner["pid"] if self.runner else None
        return [pid for pid, _ppid, group, _state in _proc_table({os.getpid()}) if group == pgid]

    def run(self, req: dict) -> dict:
        """Execute one call in the runner, draining its output, enforcing its time limits (``medagentgym.sandbox._clock``)."""
        limits = dict(self.session_limits)
        limits.update(req.get("limits") or {})
        wall = float(limits.get("wall_s", 30.0))
        cap = int(limits.get("output_bytes", 65536))
        out, err = Capture(cap), Capture(cap)
        start = time.monotonic()
        if self.runner is None:
            self.clean = False
            # SQL and shell sessions start in a runner of the light zygote (no numpy/pandas in its memory:
            # several times cheaper to fork and to tear down); Python sessions get the preloaded modules, plus
            # scikit-learn/SciPy/statsmodels when the first call imports one of them. A later call needing more
            # than its runner holds still works: its imports just load on demand.
            # A zygote still importing may take up to half the call's wall-clock budget.
            kind = "full" if self.lean else runner_kind(req.get("lang"), req.get("source"))
            self.runner = self._take_runner(kind, wait_s=min(_ZYGOTE_WAIT_S, wall / 2))
            self._took_runner(kind)
        runner = self.runner
        for fd in (runner["resp"], runner["out"], runner["err"]):
            self._drain(fd, None)  # bytes a killed straggler (or a thread of the session) wrote since the last call
        call = {k: req.get(k) for k in ("lang", "source", "database", "max_rows")}
        self.seq = int.from_bytes(os.urandom(8), "big") >> 2
        call.update(limits=limits, once=not self.persistent, seq=self.seq)
        reply, died, timed_out = None, False, False
        clock = CallClock(wall, float(limits.get("cpu_s", 30.0)), time.monotonic(), self._call_pids,
                          baseline=(runner["pid"],))
        verdict = None
        try:
            # A runner that does not read (its code holds the GIL in a thread, say) must not wedge the server.
            timed_out = not _write_within(runner["req"], call, start + wall)
        except OSError:
            died = True
        poller = select.poll()
        for fd in (runner["resp"], runner["out"], runner["err"]):
            poller.register(fd, select.POLLIN)
        sinks = {runner["out"]: out, runner["err"]: err}
        # The reply pipe is written by the process that runs the user's code, so the user's code can write to it
        # too: read it without blocking, under the call's deadline, and treat a frame that is too large, not
        # JSON or not an object as a lie (the runner is killed and the call reported as such).
        frame = ReplyReader(runner["resp"], self.seq)
        while not died and not timed_out and reply is None:
            now = time.monotonic()
            verdict = clock.check(now)
            if verdict is not None:
                timed_out = True
                break
            for fd, _ in poller.poll(math.ceil(clock.timeout_s(now) * 1000)):
                if fd == runner["resp"]:
                    try:
                        reply = frame.feed()
                    except Exception as exc:  # noqa: BLE001 - anything unreadable is a lie, never our failure
                        died, lied = True, str(exc)
                        err.feed(f"\n[sandbox] the call's reply channel was corrupted ({lied}); its process "
                                 f"was killed\n".encode())
                    else:
                        died = reply is None and frame.closed
                elif not self._drain(fd, sinks[fd], once=True):
                    poller.unregister(fd)
        alive = not (died or timed_out) and self.persistent
        self.kill_strays(keep=runner["pid"] if alive else None)
        for fd, sink in sinks.items():
            self._drain(fd, sink)
        status = None
        if not alive:
            if reply is None:
                status = self._status_of(runner["pid"])
            self._close_runner()
        note = clock.note(verdict, time.monotonic()) if verdict else None
        return self._result(req, limits, reply, status, timed_out, out, err, time.monotonic() - start, note)

    @staticmethod
    def _drain(fd: int, sink: Capture | None, once: bool = False) -> bool:
        """Read what is available from a non-blocking pipe. Returns False at EOF."""
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            if sink is not None:
                sink.feed(data)
            if once:
                return True

    def _result(self, req: dict, limits: dict, reply: dict | None, status: int | None,
                timed_out: bool, out: Capture, err: Capture, duration: float, clock_note: str | None = None) -> dict:
        lang = req.get("lang", "python")
        exit_code, sig, exception = None, None, None
        notes = []
        if reply is not None:
            exit_code, sig, kind, exception = _clean_reply(reply)
        elif timed_out:
            kind = "timeout"
            sig = signal.SIGKILL
            notes.append(clock_note or f"wall-clock limit of {limits.get('wall_s')} s reached; every process of the "
                         f"call was killed")
        else:
            if status is not None and os.WIFEXITED(status):
                exit_code = os.WEXITSTATUS(status)
                kind = "ok" if exit_code == 0 else f"{'python' if lang == 'python' else lang}_error"
                kind = kind if kind in ("ok", "python_error", "sql_error", "shell_error") else "python_error"
            else:
                sig = os.WTERMSIG(status) if status is not None else signal.SIGKILL
                if sig in (signal.SIGXCPU, getattr(signal, "SIGXFSZ", -1)):
                    kind = "timeout" if sig == signal.SIGXCPU else "killed"
                    timed_out = sig == signal.SIGXCPU
                    notes.append(f"killed by {signal.Signals(sig).name}"
                                 + (f": CPU limit of {limits.get('cpu_s')} s" if timed_out else ": file size limit"))
                else:
                    kind = "killed"
                    notes.append(f"killed by signal {sig}")
        if self.persistent and reply is None:
            notes.append("the session's interpreter was restarted; variables from earlier calls are gone")
        for note in notes:
            err.feed(f"\n[sandbox] {note}\n".encode())
        return {"lang": lang, "source": req.get("source", ""), "stdout": out.text(), "stderr": err.text(),
                "exit_code": exit_code, "signal": sig, "timed_out": timed_out,
                "truncated": out.truncated or err.truncated, "stdout_bytes": out.total,
                "stderr_bytes": err.total, "duration_s": round(duration, 6), "error_kind": kind,
                "exception": exception}

    def serve(self) -> None:
        """Answer requests from the host until the channel closes."""
        self._prepare_spare()
        while True:
            try:
                req = read_frame(self.chan_in)
            except ValueError as exc:
                write_frame(self.chan_out, {"ok": False, "error": f"bad frame: {exc}"})
                return
            if req is None or req.get("op") == "exit":
                for kind, spare in self.spares.items():
                    if spare:
                        self._discard(spare)
                        self.spares[kind] = None
                for zygote in self.zygotes.values():
                    if zygote is not None:
                        zygote.stop()
                self.zygotes.clear()
                self.kill_strays(keep=None)
                return
            try:
                reply = self.handle(req)
            except Exception as exc:  # report, keep serving: the host decides whether to replace us
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            write_frame(self.chan_out, reply)
            # Fork while the host is busy elsewhere: between sessions (and calls of a one-shot session) at
            # once; in a persistent session once the host has been quiet for a moment (an agent thinking),
            # so back-to-back calls do not wait for the fork and the next session finds a spare ready.
            if self._spares_wanted() and (self.runner is None or not self._request_within(_SPARE_IDLE_S)):
                self._prepare_spare()

    def _spares_wanted(self) -> bool:
        self._track_ml()
        turn = self._spare_turn()
        return any((s is None and self._kind_wanted(k)) or (s is not None and not self._same_uid(s["turn"], turn))
                   for k, s in self.spares.items())


_BRIDGES: list = []  # the runner's bridge forwarders (threads); kept referenced for the runner's lifetime


def _start_bridges(bridges: dict) -> list[str]:
    """In a runner: listen on 127.0.0.1:<port> for each bridge (threads of this long-lived process).

    Returns:
        Notes for the session's next call's stderr (why a bridge is unavailable); empty when all listen.
    """
    from medagentgym.sandbox.bridge import jail_forwarders

    try:
        _BRIDGES.extend(jail_forwarders(bridges))
    except OSError as exc:
        return [f"[sandbox] the bridge to port(s) {', '.join(sorted(bridges))} is unavailable: {exc}"]
    return []


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m medagentgym.sandbox.worker", description=__doc__.split("\n")[0])
    p.add_argument("--uid", type=int, default=None, help="uid the runners drop to (needs CAP_SETUID)")
    p.add_argument("--gid", type=int, default=None, help="gid the runners drop to (default: --uid)")
    p.add_argument("--alt-uid", type=int, default=None,
                   help="second runner uid: sessions alternate between --uid and this one (needs CAP_SETUID)")
    p.add_argument("--pidns", action="store_true", help="the worker owns its pid namespace: kill all on cleanup")
    p.add_argument("--ipcns", action="store_true",
                   help="the worker owns its IPC namespace: remove every System V IPC object between sessions")
    p.add_argument("--data", default="/data", help="where the read-only data mounts are")
    p.add_argument("--workspace", default="/workspace", help="the session's writable working directory")
    p.add_argument("--preload", default="numpy,pandas,sqlite3", help="comma-separated modules to import once")
    p.add_argument("--no-seccomp", action="store_true", help="do not install the seccomp filter")
    p.add_argument("--seccomp-preloaded", action="store_true",
                   help="the launcher loaded the seccomp filter before starting us (bwrap --seccomp)")
    args = p.parse_args(argv)
    if args.gid is None:
        args.gid = args.uid
    return args


def main(argv: list[str] | None = None) -> None:
    """Entry point: lock down, set up the channel, preload, then serve until stdin closes."""
    args = _parse(argv)
    hardening = _harden(args)  # before any import a planted file could shadow, before any fork
    # python -I keeps the current directory and user site off sys.path; drop such entries anyway, in case a
    # launcher started us without it: no directory the jailed code can write may ever be on this path. In a
    # jail (its own pid namespace) that is the workspace and the jail's temporary directories; the local
    # backend isolates nothing, so there only the workspace and the slot's TMPDIR count (a venv in a clone under
    # /tmp must stay importable).
    writable = [args.workspace, os.environ.get("TMPDIR", "")]
    if args.pidns:
        writable += ["/tmp", "/dev/shm", "/var/tmp"]
    writable = [w.rstrip("/") for w in writable if w and w.strip("/")]
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and not any(
        p == w or p.startswith(w + "/") for w in writable)]
    chan_in, chan_out = os.dup(0), os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    sys.stdout = sys.stderr
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of a call come back to us to be reaped
    # A lean worker (its preload leaves out numpy and pandas: the pool's workers started on demand) is small
    # itself, so it keeps no zygote: every runner forks from the server and a session imports what it uses, which
    # it frees when it ends (an idle lean worker holds ~15 MiB instead of ~80; see medagentgym.sandbox.pool.Pool).
    lean = is_lean(args.preload)
    light = None if lean else Zygote.start("light", args)  # before the preload: it stays small
    preloaded = []
    for name in filter(None, args.preload.split(",")):
        try:
            __import__(name)
            preloaded.append(name)
        except Exception as exc:
            print(f"medagentgym.sandbox.worker: preload of {name} failed: {exc}", file=sys.stderr)
    import subprocess  # noqa: F401  (used by runners; imported once here)

    import medagentgym.sandbox._runner  # noqa: F401
    try:
        import medagentgym.sandbox.grounding  # noqa: F401  (optional; runners use it when user code fails)
    except Exception as exc:
        print(f"medagentgym.sandbox.worker: medagentgym.sandbox.grounding unavailable: {exc}", file=sys.stderr)
    gc.freeze()  # see Zygote._serve
    caps = _caps.read_status()
    write_frame(chan_out, {"op": "ready", "pid": os.getpid(), "uid": os.getuid(), "runner_uid": args.uid, "alt_uid": args.alt_uid,
                           **hardening, "caps": {k: caps[k] for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")},
                           "preloaded": preloaded, "python": sys.version.split()[0],
                           "light_zygote": light.pid if light else None})
    Server(args, chan_in, chan_out, light, lean=lean).serve()


if __name__ == "__main__":
    main()
