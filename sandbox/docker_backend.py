"""Docker backend: the same worker, one long-lived locked-down container per pool worker.

``make_pool("docker", image=..., memory_mb=...)`` builds a :class:`DockerLauncher` through
:func:`make_launcher`. The pool starts each worker as ``docker run -i --rm ... python -m sandbox.worker``
and speaks the worker's framed JSON protocol over the container's stdin/stdout (attached through the docker
CLI); a container is started per worker, never per call. Everything else (sessions, limits, timeouts,
output capture, error grounding) is the pool's and the worker's, exactly as with bubblewrap.

Each container runs with: no network (``--network none``), a read-only root, every capability dropped,
``no-new-privileges``, uid/gid 65534, a cgroup memory limit (swap included) and a pids limit, no core
dumps, a private IPC namespace and pid namespace (the worker kills every other process of the container
after each call), the slot's workspace at ``/workspace`` and its (per-session wiped) temp directory at
``/tmp``, each data mount read-only under ``/data/<name>``. Inside, the worker adds its seccomp filter and
per-call rlimits. Build the image first::

    docker build -f sandbox/Dockerfile -t medagentgym-sandbox:latest .

What this backend does NOT protect against, beyond the list in ``sandbox/__init__.py``: the docker daemon
runs as root, so anyone who can start containers controls the host; the containers share the host kernel;
the worker server and the user code share uid 65534 inside the container, so the code can disturb its own
worker (the pool then replaces it), as with bubblewrap when not run as root.

Example:
    >>> from sandbox import make_pool
    >>> with make_pool("docker", workers=2, memory_mb=4096) as pool, pool.session() as s:  # doctest: +SKIP
    ...     print(s.run_python("import os; print(os.getuid())").stdout)
    65534
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import sandbox

from ._jail import JAIL_DATA, JAIL_TMP, JAIL_WORKSPACE, Slot, jail_env
from .errors import SandboxUnavailable

__all__ = ["DEFAULT_IMAGE", "DockerLauncher", "make_launcher"]

DEFAULT_IMAGE = "medagentgym-sandbox:latest"
NOBODY = 65534
IMAGE_PACKAGE_PARENT = "/opt/medagentgym"  # where the Dockerfile copies the sandbox package
BUILD_HINT = "build it with `docker build -f sandbox/Dockerfile -t {image} .` from the repository root"
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
        user: ``uid:gid`` the container runs as; default 65534:65534 (nobody).
        mount_package: Bind the host's ``sandbox`` package over the image's copy (read-only), so the
            worker always speaks the host's protocol version even when the image is older than the code.

    Attributes:
        backend: ``"docker"``.
        layers: Isolation layers in force (the pool adds ``seccomp`` / ``no-new-privs`` from the worker).
    """

    backend = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, *, docker: str = "docker", memory_mb: int = 4096,
                 pids: int = 256, cpus: float | None = None, tmpfs_mb: int = 64,
                 user: str = f"{NOBODY}:{NOBODY}", mount_package: bool = True) -> None:
        if not isinstance(image, str) or not image.strip():
            raise ValueError(f"image={image!r} is invalid: name a local image, e.g. {DEFAULT_IMAGE!r}")
        if not isinstance(memory_mb, int) or memory_mb < 256:
            raise ValueError(f"memory_mb={memory_mb!r} is invalid: use an integer >= 256 (MiB per container)")
        if not isinstance(pids, int) or pids < 16:
            raise ValueError(f"pids={pids!r} is invalid: use an integer >= 16")
        if cpus is not None and (not isinstance(cpus, (int, float)) or cpus <= 0):
            raise ValueError(f"cpus={cpus!r} is invalid: use a positive number or None")
        if not isinstance(tmpfs_mb, int) or tmpfs_mb < 1:
            raise ValueError(f"tmpfs_mb={tmpfs_mb!r} is invalid: use a positive integer (MiB)")
        uid, _, gid = str(user).partition(":")
        if not (uid.isdigit() and (gid or uid).isdigit()) or int(uid) == 0:
            raise ValueError(f"user={user!r} is invalid: use a numeric non-root 'uid:gid', e.g. '65534:65534'")
        self.image = image
        self.docker = docker
        self.memory_mb = memory_mb
        self.pids = pids
        self.cpus = cpus
        self.tmpfs_mb = tmpfs_mb
        self.uid, self.gid = int(uid), int(gid or uid)
        self.mount_package = mount_package
        self.run_id = uuid.uuid4().hex[:8]
        self.layers = ["docker", "uid-drop", "pidns", "netns", "ipcns", "ro-root", "cap-drop", "env-scrub",
                       "rlimits", "cgroup-memory", "cgroup-pids", "pidns-kill"]
        self._started: set[str] = set()
        atexit.register(self.remove_all)

    def container_name(self, slot: Slot) -> str:
        """Name of the container of ``slot`` (unique per launcher, stable across worker restarts)."""
        return f"medagentgym-sbx-{os.getpid()}-{self.run_id}-{slot.index}"

    def prepare(self, slot: Slot) -> None:
        """Make the slot's directories writable by the container's uid; remove a previous container.

        Called by the pool before each (re)start of the slot's worker.
        """
        for path in (slot.workspace, slot.tmp):
            path.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                os.chown(path, self.uid, self.gid)
            elif os.getuid() != self.uid:
                os.chmod(path, 0o1777)  # rootless or docker-group caller: the container uid is not ours
        name = self.container_name(slot)
        if name in self._started:
            self._remove([name])

    def argv(self, slot: Slot, preload: str) -> list[str]:
        """The ``docker run`` command that starts ``slot``'s worker with stdin/stdout attached."""
        name = self.container_name(slot)
        self._started.add(name)
        args = [
            self.docker, "run", "--interactive", "--rm", "--pull", "never", "--name", name,
            "--label", f"medagentgym.sandbox={self.run_id}",
            "--network", "none", "--read-only", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--ipc", "private", "--hostname", "sandbox",
            "--user", f"{self.uid}:{self.gid}",
            "--memory", f"{self.memory_mb}m", "--memory-swap", f"{self.memory_mb}m",
            "--pids-limit", str(self.pids), "--ulimit", "core=0",
            "--tmpfs", f"/run:rw,nosuid,nodev,noexec,size={self.tmpfs_mb}m",
            "--tmpfs", f"/var/tmp:rw,nosuid,nodev,size={self.tmpfs_mb}m",
            "--mount", _bind(slot.workspace, JAIL_WORKSPACE, readonly=False),
            "--mount", _bind(slot.tmp, JAIL_TMP, readonly=False),
            "--workdir", JAIL_WORKSPACE,
        ]
        if self.cpus is not None:
            args += ["--cpus", f"{self.cpus:g}"]
        for name_, host in sorted(slot.mounts.items()):
            args += ["--mount", _bind(Path(host), f"{JAIL_DATA}/{name_}", readonly=True)]
        if self.mount_package:
            package = Path(sandbox.__file__).resolve().parent
            args += ["--mount", _bind(package, f"{IMAGE_PACKAGE_PARENT}/sandbox", readonly=True)]
        for key, value in self.container_env().items():
            args += ["--env", f"{key}={value}"]
        args += [self.image, "python", "-s", "-m", "sandbox.worker", "--pidns", "--data", JAIL_DATA,
                 "--workspace", JAIL_WORKSPACE, "--preload", preload]
        return args

    @staticmethod
    def container_env() -> dict[str, str]:
        """Environment inside the container: the jail's, with the image's package location."""
        return jail_env(IMAGE_PACKAGE_PARENT)

    def env(self, slot: Slot) -> dict[str, str]:
        """Environment of the docker CLI process on the host (it never reaches the container)."""
        return {k: os.environ[k] for k in _CLIENT_ENV if k in os.environ}

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


def _bind(source: Path, target: str, *, readonly: bool) -> str:
    text = str(source)
    if "," in text or "=" in text:
        raise ValueError(f"host path {text!r} cannot be bind-mounted by docker: it contains ',' or '='")
    return f"type=bind,source={text},target={target}" + (",readonly" if readonly else "")


def probe(docker: str = "docker", image: str = DEFAULT_IMAGE, timeout: float = 20.0) -> str | None:
    """Return None when ``docker`` reaches an engine that has ``image``, else the reason it cannot run."""
    path = shutil.which(docker)
    if path is None:
        return f"the docker CLI ({docker!r}) is not installed; install docker or use backend='bwrap'"
    try:
        info = subprocess.run([path, "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              text=True, timeout=timeout, check=False)
        if info.returncode != 0 or not info.stdout.strip():
            last = (info.stderr.strip().splitlines() or ["no answer"])[-1]
            return f"no docker engine is reachable ({last}); start one or use backend='bwrap'"
        found = subprocess.run([path, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                               text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"`{docker} info` did not answer in {timeout:.0f} s; check the docker engine"
    if found.returncode != 0:
        return f"the image {image!r} is missing: {BUILD_HINT.format(image=image)}"
    return None


def make_launcher(image: str = DEFAULT_IMAGE, *, docker: str = "docker", check: bool = True,
                  **options) -> DockerLauncher:
    """Build the docker launcher for :func:`sandbox.make_pool`, after checking the engine and the image.

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
    return launcher
