"""Docker backend: the same worker, one long-lived locked-down container per pool worker.

``make_pool("docker", image=..., memory_mb=...)`` builds a :class:`DockerLauncher` through
:func:`make_launcher`. The pool starts each worker as ``docker run -i --rm ... python -I -B -c <boot>`` and
speaks the worker's framed JSON protocol over the container's stdin/stdout (attached through the docker CLI); a
container is started per worker, never per call. Everything else (sessions, limits, timeouts,
output capture, error grounding) is the pool's and the worker's, exactly as with bubblewrap.

Each container runs with (``pool.layers`` names them):

* ``uid-drop``: the worker server is uid 0 of the container with ``--cap-drop ALL`` plus only CAP_KILL,
  CAP_SETUID, CAP_SETGID and CAP_SETPCAP (``cap-drop``; the bounding set is those four), exactly what the bwrap
  backend grants: the server narrows itself to CAP_KILL effective and each runner drops every capability, its
  bounding set included, and then becomes one of the slot's two unprivileged uids at fork (``caps``,
  ``medagentgym.sandbox._caps``): sessions alternate between them, and both are leased host-wide from ``medagentgym.sandbox._uids``
  like the bwrap pool's (the same uids on the host: no user namespace). The code of a call therefore holds no
  capability, cannot signal, trace or read the memory of the server or the zygotes, and RLIMIT_NPROC stops a
  fork bomb within its own worker. (The alternative, everything as one uid 65534 without any capability,
  would let a call kill its server and write into the memory of the process that serves the next session.)
* ``netns`` (``--network none``: a private loopback only), ``pidns`` (the server is PID 1 and kills every
  other process of the container after each call: ``pidns-kill``), ``ipcns`` (``--ipc private``) with
  ``ipc-limits``: the bwrap jail's per-namespace limits (``medagentgym.sandbox._jail.ipc_limits``: SysV shared memory
  capped at ``ipc_mb`` in total, a few small message queues and semaphore sets, no POSIX message queues), set
  as namespaced sysctls, plus ``kernel.shm_rmid_forced`` (a segment goes with its last user); the worker
  removes every SysV object between sessions (``--ipcns``);
* ``ro-root`` (``--read-only``; the image holds only the runtime and this package, never the repository, so
  task data and gold answers are out of reach); writable: ``/workspace``, ``/tmp`` and ``/dev/shm``, bound
  from the slot's host folders, which the pool wipes between sessions and keeps on a size-limited tmpfs
  (``ws-quota``), plus small tmpfs at ``/run`` and ``/var/tmp``; data mounts read-only under ``/data/<name>``
  (the pool's hard-linked copies); the slot's ``/etc/passwd`` and a copy of the host's ``sandbox`` package come
  from the slot's own tmpfs, so the container's mountinfo shows no path of the repository or the tasks root;
* ``cgroup-memory`` (``--memory``, swap included) and ``cgroup-pids`` (``--pids-limit``) for the whole
  container, on top of the per-call ``rlimits``; no core dumps;
* ``docker-seccomp`` (Docker's default profile) under the worker's own filter (``seccomp``), and
  ``no-new-privileges``; ``env-scrub``: the container's environment is built from scratch.

The worker starts as the bwrap backend's isolated interpreter (``medagentgym.sandbox._jail.worker_command``: ``python -I``,
no PYTHONPATH, no user site, no current directory on ``sys.path``, the package's folder put on it explicitly)
from ``/`` (read-only), so nothing a call writes can be imported by it (``isolated-path``). Build the image
first (``make test-docker`` does)::

    .venv/bin/medagentgym sandbox-image          # from local files only, no registry
    docker build -f sandbox/Dockerfile -t medagentgym-sandbox:latest sandbox     # from Docker Hub + PyPI

What this backend does NOT protect against, beyond the list in ``sandbox/__init__.py``: the docker daemon
runs as root, so anyone who can start containers controls the host; the containers share the host kernel;
bridges (``pool.session(bridges=...)``, MedAgentBench's FHIR server) are not supported; a session whose mounts
differ from its worker's restarts that worker's container (about a second), since mounts cannot be changed in a
running container.

Example:
    >>> from medagentgym.sandbox import make_pool
    >>> with make_pool("docker", workers=2, memory_mb=4096) as pool, pool.session() as s:  # doctest: +SKIP
    ...     print(s.run_python("import os; print(os.getuid() >= 100_000)").stdout)
    True
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from . import _uids
from ._caps import CAP_KILL, CAP_SETGID, CAP_SETPCAP, CAP_SETUID
from ._jail import (
    JAIL_DATA,
    JAIL_TMP,
    JAIL_WORKSPACE,
    Slot,
    ipc_limits,
    jail_env,
    package_files,
    passwd_text,
    worker_command,
)
from .errors import SandboxUnavailable
from .worker import SERVER_PERMITTED

__all__ = ["DEFAULT_IMAGE", "DockerLauncher", "make_launcher"]

DEFAULT_IMAGE = "medagentgym-sandbox:latest"
#: The label ``sandbox/Dockerfile`` sets; bumped when what the launcher expects of the image changes.
IMAGE_ABI_LABEL = "org.medagentgym.sandbox.abi"
IMAGE_ABI = "5"  # 4: the worker takes --alt-uid (sessions alternate runner uids); 5: medagentgym.sandbox (#33)
IMAGE_PACKAGE_PARENT = "/opt/medagentgym"  # the Dockerfile copies the package to <this>/medagentgym/sandbox
_CAP_NAMES = {CAP_KILL: "KILL", CAP_SETGID: "SETGID", CAP_SETUID: "SETUID", CAP_SETPCAP: "SETPCAP"}
#: The container's only capabilities: the worker server's permitted set (it narrows itself and its children).
SERVER_CAPS = tuple(_CAP_NAMES[cap] for cap in sorted(SERVER_PERMITTED))
BUILD_HINT = ("build it with `.venv/bin/medagentgym sandbox-image` (local files only) or "
              "`docker build -f sandbox/Dockerfile -t {image} sandbox` from the repository root")
# Host variables the docker CLI itself may need; nothing else of the caller's environment is passed on.
_CLIENT_ENV = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
               "DOCKER_TLS_VERIFY", "XDG_RUNTIME_DIR")


class DockerLauncher:
    """Builds the ``docker run`` command line of one worker container (the pool's launcher interface).

    Args:
        image: Image holding Python, the task libraries and the ``sandbox`` package (``sandbox/Dockerfile``).
        docker: The docker CLI (a name on PATH or a path).
        memory_mb: Memory limit of each container in MiB (cgroup, swap included). It must cover the
            worker's preloaded modules plus one call's ``Limits.memory_mb``.
        pids: Maximum number of processes and threads in each container.
        cpus: CPU share of each container (``--cpus``); None leaves it unlimited.
        tmpfs_mb: Size of the tmpfs mounted at ``/run`` and ``/var/tmp``.
        ipc_mb: Total SysV shared memory a container may hold (``kernel.shmmax`` and ``kernel.shmall``).
        mount_package: Bind a copy of the host's ``sandbox`` package (made in the slot's folder at each start)
            over the image's copy, read-only, so the worker always runs this checkout's code even when the
            image is older.

    Attributes:
        backend: ``"docker"``.
        layers: Isolation layers in force (the pool adds ``seccomp``, ``no-new-privs``, ``caps`` and
            ``ws-quota`` from what the worker reports).
    """

    backend = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, *, docker: str = "docker", memory_mb: int = 4096,
                 pids: int = 256, cpus: float | None = None, tmpfs_mb: int = 64, ipc_mb: int = 64,
                 mount_package: bool = True) -> None:
        if not isinstance(image, str) or not image.strip():
            raise ValueError(f"image={image!r} is invalid: name a local image, e.g. {DEFAULT_IMAGE!r}")
        if not isinstance(memory_mb, int) or memory_mb < 256:
            raise ValueError(f"memory_mb={memory_mb!r} is invalid: use an integer >= 256 (MiB per container)")
        if not isinstance(pids, int) or pids < 16:
            raise ValueError(f"pids={pids!r} is invalid: use an integer >= 16")
        if cpus is not None and (not isinstance(cpus, (int, float)) or cpus <= 0):
            raise ValueError(f"cpus={cpus!r} is invalid: use a positive number or None")
        for name, value in (("tmpfs_mb", tmpfs_mb), ("ipc_mb", ipc_mb)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: use a positive integer (MiB)")
        self.image = image
        self.docker = docker
        self.memory_mb = memory_mb
        self.pids = pids
        self.cpus = cpus
        self.tmpfs_mb = tmpfs_mb
        self.ipc_mb = ipc_mb
        self.mount_package = mount_package
        self.run_id = uuid.uuid4().hex[:8]
        self.layers = ["docker", "uid-drop", "cap-drop", "pidns", "netns", "ipcns", "ipc-limits", "ro-root",
                       "env-scrub", "rlimits", "cgroup-memory", "cgroup-pids", "pidns-kill", "isolated-path",
                       "docker-seccomp"]
        self._started: set[str] = set()
        atexit.register(self.remove_all)

    def container_name(self, slot: Slot) -> str:
        """Name of the container of ``slot`` (unique per launcher, stable across worker restarts)."""
        return f"medagentgym-sbx-{os.getpid()}-{self.run_id}-{slot.index}"

    def prepare(self, slot: Slot) -> None:
        """Give the slot its two runner uids (once), hand it the slot's writable folders, write its /etc/passwd and
        package copy, and remove the slot's previous container. Called by the pool before each (re)start.

        The uids are host-wide leases (``medagentgym.sandbox._uids``, the bwrap pool's): no other slot of any process on this
        host runs code as them until the pool that owns the slot closes (it gives back every uid of its slots) or
        this process exits. Sessions alternate between the two (see ``medagentgym.sandbox.worker.Server``).
        """
        if slot.uid is None:
            slot.uid = _uids.lease()
        if slot.alt_uid is None:
            slot.alt_uid = _uids.lease()
        for path in (slot.workspace, slot.tmp, slot.shm):
            path.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                os.chown(path, slot.uid, slot.uid)
                os.chmod(path, 0o770)  # both runner uids are in the group slot.uid
            else:
                os.chmod(path, 0o1777)  # rootless or docker-group caller: the runner uid is not ours
        texts = {"passwd": passwd_text(slot.uid, slot.alt_uid), "group": f"root:x:0:\nsandbox:x:{slot.uid}:\n"}
        for name, text in texts.items():
            path = _slot_file(slot, f"etc-{name}")
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        if self.mount_package:  # a fresh copy each start: the code of this checkout, never a stale one
            lib = _slot_file(slot, "lib")
            shutil.rmtree(lib, ignore_errors=True)
            for below, host in package_files().items():  # medagentgym/__init__.py and medagentgym/sandbox
                if host.is_dir():
                    shutil.copytree(host, lib / below, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    (lib / below).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(host, lib / below)
            for root, dirs, files in os.walk(lib):
                for entry in (*dirs, *files):
                    os.chmod(os.path.join(root, entry), 0o755 if entry in dirs else 0o644)
            os.chmod(lib, 0o755)
        name = self.container_name(slot)
        if name in self._started:
            self._remove([name])

    def argv(self, slot: Slot, preload: str) -> list[str]:
        """The ``docker run`` command that starts ``slot``'s worker with stdin/stdout attached."""
        if slot.uid is None:
            raise ValueError(f"slot {slot.index} has no runner uid: call prepare(slot) first")
        name = self.container_name(slot)
        self._started.add(name)
        sysctls = {key.replace("/", "."): value for key, value in ipc_limits(self.ipc_mb).items()}
        sysctls["kernel.shm_rmid_forced"] = "1"
        args = [
            self.docker, "run", "--interactive", "--rm", "--pull", "never", "--name", name,
            "--label", f"medagentgym.sandbox={self.run_id}", "--log-driver", "none",
            "--network", "none", "--read-only", "--cap-drop", "ALL",
            *[x for cap in SERVER_CAPS for x in ("--cap-add", cap)],
            "--security-opt", "no-new-privileges", "--ipc", "private", "--hostname", "sandbox",
            "--user", "0:0", "--workdir", "/",
            "--memory", f"{self.memory_mb}m", "--memory-swap", f"{self.memory_mb}m",
            "--pids-limit", str(self.pids), "--ulimit", "core=0",
            *[x for key, value in sysctls.items() for x in ("--sysctl", f"{key}={value}")],
            "--tmpfs", f"/run:rw,nosuid,nodev,noexec,size={self.tmpfs_mb}m",
            "--tmpfs", f"/var/tmp:rw,nosuid,nodev,size={self.tmpfs_mb}m",
            "--mount", _bind(slot.workspace, JAIL_WORKSPACE, readonly=False),
            "--mount", _bind(slot.tmp, JAIL_TMP, readonly=False),
            "--mount", _bind(slot.shm, "/dev/shm", readonly=False),
            "--mount", _bind(_slot_file(slot, "etc-passwd"), "/etc/passwd", readonly=True),
            "--mount", _bind(_slot_file(slot, "etc-group"), "/etc/group", readonly=True),
        ]
        if self.cpus is not None:
            args += ["--cpus", f"{self.cpus:g}"]
        for name_, host in sorted(slot.mounts.items()):
            args += ["--mount", _bind(Path(host), f"{JAIL_DATA}/{name_}", readonly=True)]
        if self.mount_package:
            args += ["--mount", _bind(_slot_file(slot, "lib") / "medagentgym", f"{IMAGE_PACKAGE_PARENT}/medagentgym",
                                      readonly=True)]
        for key, value in self.container_env().items():
            args += ["--env", f"{key}={value}"]
        args += [self.image, *container_command(), "--pidns", "--ipcns",
                 "--data", JAIL_DATA, "--workspace", JAIL_WORKSPACE, "--preload", preload,
                 "--uid", str(slot.uid), "--gid", str(slot.uid), "--alt-uid", str(slot.alt_uid)]
        return args

    @staticmethod
    def container_env() -> dict[str, str]:
        """Environment inside the container: the jail's, without PYTHONPATH (``python -I`` ignores it and the
        worker command names the package's folder itself)."""
        env = jail_env(IMAGE_PACKAGE_PARENT)
        env.pop("PYTHONPATH", None)
        return env

    def env(self, slot: Slot) -> dict[str, str]:
        """Environment of the docker CLI process on the host (it never reaches the container)."""
        return {k: os.environ[k] for k in _CLIENT_ENV if k in os.environ}

    def jail_root(self, slot: Slot) -> int | None:
        """Host pid of the slot's container's first process (the worker server), None when it is not running.

        The container's processes descend from the engine's shim, not from the docker CLI the pool started, so
        this is where a walk of the worker's processes (``Pool.process_roles``) must begin.

        Example:
            >>> launcher.jail_root(pool._workers[0].slot)  # doctest: +SKIP
            48213
        """
        try:
            out = subprocess.run([self.docker, "inspect", "--format", "{{.State.Pid}}", self.container_name(slot)],
                                 capture_output=True, text=True, timeout=30, check=False).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return None
        return int(out) if out.isdigit() and int(out) > 0 else None

    def containers(self) -> list[str]:
        """Names of this launcher's containers that the engine still has (running or not)."""
        try:
            out = subprocess.run([self.docker, "ps", "--all", "--format", "{{.Names}}", "--filter",
                                  f"label=medagentgym.sandbox={self.run_id}"], capture_output=True, text=True,
                                 timeout=30, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return []
        return sorted(out.split())

    def _remove(self, names: list[str]) -> None:
        if not names:
            return
        try:
            subprocess.run([self.docker, "rm", "--force", *names], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def remove_all(self) -> None:
        """Force-remove every container this launcher started (normally gone already: ``--rm``)."""
        names, self._started = sorted(self._started), set()
        self._remove(names)

    close = remove_all


def container_command(python: str = "python", lib_dir: str = IMAGE_PACKAGE_PARENT) -> list[str]:
    """The container's command: load the worker's seccomp filter, then exec the worker (``worker_command``).

    An isolated interpreter started in ``/`` loads the worker's filter on top of Docker's default profile, then
    replaces itself with the worker (telling it ``--seccomp-preloaded``, as bwrap's launcher does), so both
    filters hold for every process of the container from the worker's first instruction. Its arguments pass
    through; a filter that cannot load stops the container (the pool then reports the worker's start as failed).

    Args:
        python: The image's interpreter.
        lib_dir: The folder holding the image's ``medagentgym/sandbox`` package.

    Returns:
        The argv to put after the image name, before the worker's own options.

    Example:
        >>> container_command()[:4]
        ['python', '-I', '-B', '-c']
    """
    worker = worker_command(python, lib_dir)
    boot = (f"import os, sys; sys.path.insert(0, {lib_dir!r}); from medagentgym.sandbox.worker import seccomp_filter; "
            f"seccomp_filter().load(); os.execv(sys.executable, [sys.executable, *{worker[1:]!r}, "
            f"'--seccomp-preloaded', *sys.argv[1:]])")
    return [python, "-I", "-B", "-c", boot]


def _slot_file(slot: Slot, name: str) -> Path:
    """A launcher file of ``slot`` inside the slot's own (tmpfs) folder: the container's mountinfo then shows a
    path relative to that tmpfs, not the pool's or the repository's host path."""
    return slot.root / name


def _bind(source: Path, target: str, *, readonly: bool) -> str:
    text = str(source)
    if "," in text or "=" in text:
        raise ValueError(f"host path {text!r} cannot be bind-mounted by docker: it contains ',' or '='")
    return f"type=bind,source={text},target={target}" + (",readonly" if readonly else "")


def probe(docker: str = "docker", image: str = DEFAULT_IMAGE, timeout: float = 20.0) -> str | None:
    """Whether the docker backend can run here.

    Args:
        docker: The docker CLI.
        image: The image the containers would run.
        timeout: Seconds each query of the engine may take.

    Returns:
        None when ``docker`` reaches an engine that has ``image`` built for this code (its ABI label), else one
        line saying why not and what to do.

    Example:
        >>> probe(docker="/nonexistent/docker")
        "the docker CLI ('/nonexistent/docker') is not installed; install docker or use backend='bwrap'"
    """
    path = shutil.which(docker)
    if path is None:
        return f"the docker CLI ({docker!r}) is not installed; install docker or use backend='bwrap'"
    try:
        info = subprocess.run([path, "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              text=True, timeout=timeout, check=False)
        if info.returncode != 0 or not info.stdout.strip():
            last = (info.stderr.strip().splitlines() or ["no answer"])[-1]
            return f"no docker engine is reachable ({last}); start one or use backend='bwrap'"
        found = subprocess.run([path, "image", "inspect", "--format",
                                f'{{{{index .Config.Labels "{IMAGE_ABI_LABEL}"}}}}', image],
                               capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"`{docker} info` did not answer in {timeout:.0f} s; check the docker engine"
    if found.returncode != 0:
        return f"the image {image!r} is missing: {BUILD_HINT.format(image=image)}"
    if found.stdout.strip() != IMAGE_ABI:
        return (f"the image {image!r} was built for another version of this code (label {IMAGE_ABI_LABEL}="
                f"{found.stdout.strip() or 'none'}, expected {IMAGE_ABI}): rebuild it; "
                + BUILD_HINT.format(image=image))
    return None


def make_launcher(image: str = DEFAULT_IMAGE, *, docker: str = "docker", check: bool = True,
                  **options) -> DockerLauncher:
    """Build the docker launcher for :func:`medagentgym.sandbox.make_pool`, after checking the engine and the image.

    Args:
        image: Local image to run (never pulled).
        docker: The docker CLI.
        check: Probe the engine and the image first (a clear error instead of a failed worker start).
        **options: Further :class:`DockerLauncher` arguments (``memory_mb``, ``pids``, ``cpus``, ...).

    Returns:
        A :class:`DockerLauncher`.

    Raises:
        SandboxUnavailable: No docker CLI, no reachable engine, or no such image (the message says what to do).
        ValueError: A bad option (the message names the valid form).
    """
    launcher = DockerLauncher(image, docker=docker, **options)
    if check:
        reason = probe(docker, image)
        if reason is not None:
            raise SandboxUnavailable(f"docker backend unavailable: {reason}")
        if not _engine_applies_seccomp(docker):  # an engine configured without its default profile
            launcher.layers.remove("docker-seccomp")
    return launcher


def _engine_applies_seccomp(docker: str) -> bool:
    try:
        out = subprocess.run([docker, "info", "--format", "{{json .SecurityOptions}}"], capture_output=True,
                             text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "name=seccomp" in out and "profile=unconfined" not in out
