"""Docker backend: the command line and the image builder (always), real containers where an engine runs.

The real-engine tests skip without an engine and the image (``make test`` on a clean machine), and FAIL instead
when ``MEDAGENTGYM_TEST_BACKEND=docker`` (``make test-docker``), so that target cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from medagentgym import sandbox
from medagentgym.sandbox import ErrorKind, Limits, SandboxUnavailable, _caps, _uids, make_pool
from medagentgym.sandbox import docker_image as di
from medagentgym.sandbox import pool as _pool
from medagentgym.sandbox._jail import Slot, ipc_limits, worker_command
from medagentgym.sandbox.docker_backend import (
    DEFAULT_IMAGE,
    IMAGE_ABI,
    IMAGE_ABI_LABEL,
    SERVER_CAPS,
    DockerLauncher,
    container_command,
    make_launcher,
    probe,
)

REQUIRED = os.environ.get("MEDAGENTGYM_TEST_BACKEND") == "docker"
SERVER = _caps.mask({_caps.CAP_KILL, _caps.CAP_SETUID, _caps.CAP_SETGID, _caps.CAP_SETPCAP})
ZYGOTE = _caps.mask({_caps.CAP_SETUID, _caps.CAP_SETGID, _caps.CAP_SETPCAP})
#: role -> (CapEff, CapPrm, CapBnd) of every process in a container (medagentgym.sandbox._caps); "user": what a call started.
CAPS = {"server": (_caps.mask({_caps.CAP_KILL}), SERVER, SERVER), "zygote": (0, ZYGOTE, ZYGOTE),
        "spare": (0, 0, 0), "runner": (0, 0, 0), "user": (0, 0, 0)}


def _option(argv: list[str], flag: str) -> list[str]:
    """Every value given to ``flag`` in ``argv`` (before the image name)."""
    head = argv[: argv.index(DEFAULT_IMAGE)]
    return [head[i + 1] for i, arg in enumerate(head) if arg == flag]


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    data = tmp_path / "mimic_iii"
    data.mkdir()
    s = Slot(index=3, root=tmp_path / "w3", uid=None, mounts={"mimic_iii": data})
    for sub in (s.workspace, s.tmp, s.shm, s.data):
        sub.mkdir(parents=True)
    return s


# -- the command line ---------------------------------------------------------------------------------------
def test_run_command_is_locked_down(slot: Slot):
    launcher = DockerLauncher(memory_mb=3072, pids=128, cpus=1.5, ipc_mb=32)
    launcher.prepare(slot)
    argv = launcher.argv(slot, "numpy,pandas")
    assert argv[:3] == ["docker", "run", "--interactive"]
    head = argv[: argv.index(DEFAULT_IMAGE)]
    for flag in ("--rm", "--read-only"):
        assert flag in head
    assert _option(argv, "--network") == ["none"] and _option(argv, "--ipc") == ["private"]
    assert _option(argv, "--cap-drop") == ["ALL"]
    assert _option(argv, "--cap-add") == ["KILL", "SETGID", "SETUID", "SETPCAP"] == list(SERVER_CAPS)
    assert _option(argv, "--security-opt") == ["no-new-privileges"]
    assert _option(argv, "--user") == ["0:0"] and _option(argv, "--workdir") == ["/"]
    assert _option(argv, "--memory") == ["3072m"] and _option(argv, "--memory-swap") == ["3072m"]
    assert _option(argv, "--pids-limit") == ["128"] and _option(argv, "--cpus") == ["1.5"]
    assert _option(argv, "--pull") == ["never"] and _option(argv, "--log-driver") == ["none"]
    sysctls = dict(s.split("=", 1) for s in _option(argv, "--sysctl"))
    # the bwrap jail's IPC limits, as namespaced sysctls, and shared memory that goes with its last user
    assert sysctls == {**{k.replace("/", "."): v for k, v in ipc_limits(32).items()}, "kernel.shm_rmid_forced": "1"}
    assert sysctls["kernel.shmmax"] == str(32 << 20)
    assert "--privileged" not in head and "--tty" not in head and "-t" not in head
    # One long-lived isolated interpreter speaking the pipe protocol, runners dropped to the slot's uid.
    assert argv[argv.index(DEFAULT_IMAGE) + 1:] == [
        *container_command(), "--pidns", "--ipcns", "--data", "/data", "--workspace", "/workspace",
        "--preload", "numpy,pandas", "--uid", str(slot.uid), "--gid", str(slot.uid), "--alt-uid", str(slot.alt_uid)]
    # both stages are isolated interpreters; the second is exactly the bwrap backend's worker command
    first, worker = container_command(), worker_command("python", "/opt/medagentgym")
    assert first[:4] == ["python", "-I", "-B", "-c"] and repr(worker[1:]) in first[4]


def test_mounts_writable_dirs_data_read_only(slot: Slot):
    launcher = DockerLauncher()
    launcher.prepare(slot)
    mounts = _option(launcher.argv(slot, "pandas"), "--mount")
    for host, target in ((slot.workspace, "/workspace"), (slot.tmp, "/tmp"), (slot.shm, "/dev/shm")):
        assert f"type=bind,source={host},target={target}" in mounts
    for name in ("passwd", "group"):  # from the slot's own folder (its tmpfs), like the package copy
        assert f"type=bind,source={slot.root}/etc-{name},target=/etc/{name},readonly" in mounts
    data = next(m for m in mounts if m.endswith("target=/data/mimic_iii,readonly"))
    assert f"source={slot.mounts['mimic_iii']}" in data
    assert f"type=bind,source={slot.root}/lib/medagentgym,target=/opt/medagentgym/medagentgym,readonly" in mounts
    package = Path(sandbox.__file__).resolve().parent
    assert (slot.root / "lib" / "medagentgym" / "__init__.py").is_file()  # the package's parent, nothing else of it
    assert sorted(p.name for p in (slot.root / "lib" / "medagentgym").iterdir()) == ["__init__.py", "sandbox"]
    copied = sorted(p.name for p in (slot.root / "lib" / "medagentgym" / "sandbox").glob("*.py"))
    assert copied == sorted(p.name for p in package.glob("*.py")) and "worker.py" in copied
    assert not any("docker.sock" in m or str(package) in m for m in mounts)
    unbound = DockerLauncher(mount_package=False)
    assert len(_option(unbound.argv(slot, "pandas"), "--mount")) == len(mounts) - 1


def test_environment_is_explicit_and_host_env_stays_out(slot: Slot, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    launcher = DockerLauncher()
    launcher.prepare(slot)
    argv = launcher.argv(slot, "pandas")
    env = dict(item.split("=", 1) for item in _option(argv, "--env"))
    assert env["OPENBLAS_NUM_THREADS"] == "1" and "PYTHONPATH" not in env  # `python -I` would ignore it anyway
    assert "OPENAI_API_KEY" not in env and not any("sk-secret" in a for a in argv)
    client_env = launcher.env(slot)
    assert "OPENAI_API_KEY" not in client_env and set(client_env) <= {
        "PATH", "HOME", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
        "DOCKER_TLS_VERIFY", "XDG_RUNTIME_DIR"}


def test_container_names_are_stable_per_slot_and_unique_per_launcher(slot: Slot):
    a, b = DockerLauncher(), DockerLauncher()
    assert a.container_name(slot) == a.container_name(slot) != b.container_name(slot)
    a.prepare(slot)
    assert _option(a.argv(slot, ""), "--name") == [a.container_name(slot)]


def test_argv_needs_the_slot_uid_from_prepare(slot: Slot):
    with pytest.raises(ValueError, match="prepare"):
        DockerLauncher().argv(slot, "")


def _held_elsewhere(uids: list[int]) -> list[bool]:
    """For each uid: whether another process finds its host-wide lease (``medagentgym.sandbox._uids``) taken."""
    probe = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "for byte in map(int, sys.argv[2:]):\n"
             "    try:\n"
             "        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, byte, 0)\n"
             "    except OSError:\n"
             "        print('held')\n"
             "    else:\n"
             "        fcntl.lockf(fd, fcntl.LOCK_UN, 1, byte, 0)\n"
             "        print('free')\n")
    argv = [sys.executable, "-c", probe, _uids._lock_file_path(), *(str(u - _uids.BASE) for u in uids)]
    return [word == "held" for word in subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()]


def test_prepare_leases_each_slot_two_host_wide_uids_that_the_pool_gives_back(tmp_path: Path):
    launcher = DockerLauncher(docker="/nonexistent/docker")
    slots = [Slot(index=i, root=tmp_path / f"w{i}", uid=None) for i in range(2)]
    for s in slots:
        launcher.prepare(s)
        launcher.prepare(s)  # a restart keeps the uids
    uids = [s.uid for s in slots]
    every = [u for s in slots for u in s.uids]  # sessions alternate between two uids per slot
    try:
        # the bwrap pool's leases: no slot of any process on this host gets these uids while the pool holds them
        assert len(set(every)) == 4 and all(_uids.BASE <= u < _uids.BASE + _uids.COUNT for u in every), every
        assert _held_elsewhere(every) == [True] * 4
        assert set(every) <= _uids._held  # nor to this process's other pools
        passwd = (slots[1].root / "etc-passwd").read_text()
        assert f"sandbox:x:{uids[1]}:{uids[1]}:" in passwd and str(uids[0]) not in passwd
        assert f"sandbox2:x:{slots[1].alt_uid}:{uids[1]}:" in passwd
        if os.geteuid() == 0:
            for sub in (slots[0].workspace, slots[0].tmp, slots[0].shm):
                st = sub.stat()  # owner and group: the slot uid, which is both runner uids' group
                assert st.st_uid == st.st_gid == uids[0] and stat.S_IMODE(st.st_mode) == 0o770
    finally:
        # what a pool does at close (or at exit) with its slots, whoever leased their uids
        _pool._cleanup(tmp_path / "pool", [], [], slots)
    assert _held_elsewhere(every) == [False] * 4


@pytest.mark.parametrize("kwargs, fragment", [
    ({"memory_mb": 10}, "memory_mb=10"),
    ({"pids": 2}, "pids=2"),
    ({"cpus": 0}, "cpus=0"),
    ({"ipc_mb": 0}, "ipc_mb=0"),
    ({"tmpfs_mb": "8"}, "tmpfs_mb='8'"),
    ({"image": " "}, "image=' '"),
])
def test_bad_options_are_refused_with_the_fix(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        DockerLauncher(**kwargs)


def test_missing_cli_is_reported_as_unavailable():
    assert "not installed" in probe(docker="/nonexistent/docker")
    with pytest.raises(SandboxUnavailable, match="docker backend unavailable"):
        make_launcher(docker="/nonexistent/docker")
    with pytest.raises(SandboxUnavailable, match="not installed"):
        make_pool("docker", workers=1, docker="/nonexistent/docker")


def test_dockerfile_sets_the_abi_the_launcher_expects():
    text = (Path(sandbox.__file__).parent / "Dockerfile").read_text()
    assert re.search(rf'^LABEL {re.escape(IMAGE_ABI_LABEL)}="{IMAGE_ABI}"$', text, re.MULTILINE)
    cmd = re.search(r"^CMD (\[.*\])$", text, re.MULTILINE)
    assert cmd and json.loads(cmd.group(1)) == container_command()


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI to parse the command line")
def test_the_docker_cli_accepts_the_command_line(slot: Slot, tmp_path: Path):
    # The CLI parses every flag (mount specs, memory sizes, ulimits) before it contacts an engine, so with
    # DOCKER_HOST pointing at a socket that does not exist the only possible error is the connection.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    launcher = DockerLauncher(cpus=1)
    launcher.prepare(slot)
    argv = launcher.argv(slot, "numpy,pandas")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=30,
                          check=False)
    assert proc.returncode != 0 and "no-engine.sock" in proc.stderr, proc.stderr
    broken = argv[:3] + ["--mount", "type=bind,sorce=/x,target=/y"] + argv[3:]
    proc = subprocess.run(broken, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=30,
                          check=False)
    assert "sorce" in proc.stderr and "no-engine.sock" not in proc.stderr


# -- the image builder --------------------------------------------------------------------------------------
def test_image_distributions_close_over_requirements_without_the_training_stack():
    names = {d.metadata["Name"].lower().replace("_", "-") for d in di.distribution_closure()}
    assert {"numpy", "pandas", "scipy", "scikit-learn", "joblib", "threadpoolctl", "pyseccomp"} <= names
    assert not names & {"torch", "transformers", "trl", "accelerate", "pytest"}
    with pytest.raises(LookupError, match="not-a-distribution-xyz"):
        di.distribution_closure(("not-a-distribution-xyz",))


def test_python_files_move_the_interpreter_and_leave_out_tests():
    files = di.python_files(di.distribution_closure(("pyseccomp", "threadpoolctl")))
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    assert Path(files[f"/usr/local/bin/{version}"]).resolve() == Path(sys.executable).resolve()
    assert f"/usr/local/lib/{version}/os.py" in files
    assert any(d.startswith(f"/usr/local/lib/{version}/lib-dynload/_sqlite3") for d in files)
    assert f"/usr/local/lib/{version}/site-packages/pyseccomp.py" in files
    assert not any("/test/" in d or "/tests/" in d or "tkinter" in d or "/config-" in d for d in files)
    assert not any("site-packages/numpy" in d for d in files)  # only what was asked for (and its requirements)


def test_materialize_keeps_links_and_drops_set_id_bits(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    tool = src / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o6775)
    (src / "alias").symlink_to("tool")
    rootfs = tmp_path / "rootfs"
    di.materialize({"/usr/bin/tool": tool, "/usr/bin/alias": src / "alias"}, rootfs)
    assert stat.S_IMODE((rootfs / "usr/bin/tool").stat().st_mode) == 0o755
    assert os.readlink(rootfs / "usr/bin/alias") == "tool"


@pytest.mark.skipif(shutil.which("ldd") is None, reason="no ldd (not a glibc host)")
def test_library_closure_adds_the_shared_libraries_a_binary_needs():
    python = Path(sys.executable).resolve()
    extra = di.library_closure({"/usr/local/bin/python3": python}, provided=[])
    assert any(re.search(r"/libc\.so\.6$", dest) for dest in extra)
    with pytest.raises(RuntimeError, match="belongs to no distribution"):
        di.library_closure({"/usr/local/bin/python3": python}, provided=[Path("/")])


# -- the container process model, without an engine ---------------------------------------------------------
class _ContainerLikeLauncher(DockerLauncher):
    """Runs the worker the way the container does, without an engine: PID 1 of new pid and IPC namespaces, uid
    0 holding only the container's capabilities (permitted and bounding), the worker command of the image,
    runners dropped to the slot uid. The system interpreter: the venv may sit in a home directory the slot uid
    cannot read."""

    def argv(self, slot: Slot, preload: str) -> list[str]:
        docker_argv = super().argv(slot, preload)
        os.chmod(slot.root.parent, 0o711)  # docker binds the directories; here the slot uid must traverse them
        caps = ",".join(f"+{c.lower()}" for c in SERVER_CAPS)
        return ["unshare", "--pid", "--ipc", "--fork", "--mount-proc", "--kill-child", "setpriv",
                "--inh-caps=-all", f"--bounding-set=-all,{caps}", "--no-new-privs",
                *worker_command("/usr/bin/python3", str(slot.root / "lib")), "--pidns", "--ipcns",
                "--data", str(slot.data), "--workspace", str(slot.workspace), "--preload", preload,
                *docker_argv[docker_argv.index("--uid"):]]

    def env(self, slot: Slot) -> dict[str, str]:
        return {**self.container_env(), "HOME": "/tmp", "TMPDIR": str(slot.tmp)}


def _emulation_reason() -> str | None:
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        return "needs root, unshare and setpriv"
    check = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
             "import sys; assert sys.version_info >= (3, 10); import medagentgym.sandbox.worker"]
    env = {"PYTHONPATH": str(Path(sandbox.__file__).resolve().parent.parent), "PATH": "/usr/bin:/bin"}
    try:
        ok = subprocess.run(check, env=env, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return None if ok else "an unprivileged uid cannot run /usr/bin/python3 (>= 3.10) with this checkout's package"


def test_container_process_model_without_an_engine():
    reason = _emulation_reason()
    if reason is not None:
        pytest.skip(f"container emulation: {reason}")
    from medagentgym.sandbox import Pool
    from medagentgym.sandbox.grounding import ground

    with Pool(_ContainerLikeLauncher(), workers=1, limits=Limits(), preload=("sqlite3",)) as pool:
        ready = pool._workers[0].ready
        slot = pool._workers[0].slot
        assert ready["pid"] == 1 and ready["uid"] == 0 and ready["runner_uid"] == slot.uid == pool.jail_uids[0]
        assert ready["alt_uid"] == slot.alt_uid and pool.jail_uids == slot.uids
        uid = slot.alt_uid  # sessions alternate between the two; the first one runs as the second uid
        assert "caps" in pool.layers  # the server could narrow its bounding set with the container's caps
        with pool.session() as s:
            assert s.run_python("x = 1\nopen('out.txt', 'w').write('ok')").ok  # workspace writable by the runner
            assert s.run_python("import os; print(os.getuid(), x + 1)").stdout.split() == [str(uid), "2"]
            caps = s.run_shell("grep -h -E '^Cap(Eff|Prm|Bnd)' /proc/1/status /proc/self/status").stdout.split()
            eff, prm, bnd = CAPS["server"]
            assert [int(v, 16) for v in caps[1::2]] == [prm, eff, bnd, 0, 0, 0]  # status order: Prm, Eff, Bnd
            killed = s.run_python("import os, signal\nos.kill(1, signal.SIGKILL)")
            assert killed.exception["type"] == "PermissionError"  # the server is not the runner's to signal
            slow = s.run_python("import subprocess\nsubprocess.Popen(['sleep', '60'])\nwhile True:\n    pass",
                                limits=Limits(wall_s=1.0))
            assert slow.timed_out and "wall-clock limit" in ground(slow, wall_limit_s=1.0)
            # The pid-namespace kill reached the call's background process. A killed process is reaped after
            # the reply (and takes a moment to exit on a loaded machine): zombies do not count, and the check
            # looks again for a few seconds.
            listing = ("for p in /proc/[0-9]*; do grep -q '^State:.*Z' $p/status 2>/dev/null || cat $p/comm "
                       "2>/dev/null; done")
            deadline = time.monotonic() + 10
            while "sleep" in (left := s.run_shell(listing).stdout.split()) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "sleep" not in left
        assert _held_elsewhere(slot.uids) == [True, True]  # leased host-wide while the pool runs
    assert _held_elsewhere(slot.uids) == [False, False]  # and given back when it closes


# -- real containers ---------------------------------------------------------------------------------------
def _docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=False)
    assert not check or proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def engine():
    """Skips (fails under ``make test-docker``) unless an engine runs and has the image."""
    reason = probe()
    if reason is not None:
        message = f"docker tests need an engine and the {DEFAULT_IMAGE} image: {reason}"
        if REQUIRED:
            pytest.fail(message + " (MEDAGENTGYM_TEST_BACKEND=docker requires them)")
        pytest.skip(message)


@pytest.fixture(scope="module")
def dpool(engine, tmp_path_factory, leftovers, container_leftovers):
    """One docker worker (so consecutive sessions share its container) with tight cgroup limits."""
    data = tmp_path_factory.mktemp("docker_data")
    (data / "note.txt").write_text("hello\n")
    with sqlite3.connect(data / "notes.db") as conn:
        conn.execute("CREATE TABLE notes (n INTEGER)")
        conn.execute("INSERT INTO notes VALUES (42)")
    conn.close()
    for path in (data, data / "note.txt", data / "notes.db"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    pool = make_pool("docker", workers=1, memory_mb=768, pids=64, mounts={"notes": data},
                     limits=Limits(wall_s=20.0, memory_mb=2048, processes=64))
    yield pool
    uids = list(pool.jail_uids)
    pool.close()
    assert leftovers(uids) == [] and container_leftovers(pool.launcher) == []


def _container_pid(pool) -> int:
    return int(_docker("inspect", "--format", "{{.State.Pid}}", pool.launcher.container_name(pool._workers[0].slot)))


def _still_serves(pool) -> None:
    with pool.session() as s:
        res = s.run_python("print(6 * 7)")
        assert res.ok and res.stdout == "42\n", res


def test_end_to_end_in_a_real_container(dpool):
    uids = dpool._workers[0].slot.uids  # sessions take turns between the slot's two uids
    with dpool.session() as s:
        assert s.run_python("x = 41").ok
        code = ("import os, socket\nprint(os.getuid(), x + 1, open('/data/notes/note.txt').read().strip())\n"
                "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('net')\n"
                "except OSError:\n    print('no-net')\n"
                "try:\n    open('/etc/evil', 'w')\n    print('rw')\nexcept OSError:\n    print('ro')\n")
        res = s.run_python(code)
        assert res.ok, res.stderr
        uid, *rest = res.stdout.split()
        assert int(uid) in uids and len(uids) == 2 and 0 not in uids, (uid, uids)
        assert rest == ["42", "hello", "no-net", "ro"]
        failed = s.run_python("import pandas as pd\npd.DataFrame({'age': [1]})['agee']")
        assert failed.exception["context"]["suggestions"] == ["age"]
        ml = s.run_python("from sklearn.linear_model import LogisticRegression\nimport lifelines, statsmodels.api, "
                          "Bio, matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.savefig('p.png'); print('ml ok')")
        assert ml.stdout == "ml ok\n", ml.stderr
        assert "42" in s.run_sql("SELECT n FROM notes", database="notes/notes.db").stdout.split()
        assert s.run_shell("whoami; ls /data/notes; sh -c 'echo $((6*7))' | awk '{print $1}'").stdout.split() == [
            "sandbox" if int(uid) == uids[0] else "sandbox2", "note.txt", "notes.db", "42"]


# One line per process of the container: pid, uid, CapEff, CapPrm, CapBnd, NoNewPrivs, Seccomp, Seccomp_filters.
STATUS = ("import os\nfor p in sorted(os.listdir('/proc'), key=lambda p: p.zfill(9)):\n    if p.isdigit():\n"
          "        try:\n            lines = open(f'/proc/{p}/status').read().splitlines()\n"
          "        except OSError:\n            continue\n"
          "        s = dict(line.split(':\\t', 1) for line in lines)\n"
          "        print(p, s['Uid'].split()[0], s['CapEff'], s['CapPrm'], s['CapBnd'], s['NoNewPrivs'],"
          " s['Seccomp'], s.get('Seccomp_filters', '-'))\n")


def test_every_listed_layer_is_in_force(dpool):
    expected = {"docker", "uid-drop", "cap-drop", "caps", "pidns", "netns", "ipcns", "ipc-limits", "ro-root",
                "env-scrub", "rlimits", "cgroup-memory", "cgroup-pids", "pidns-kill", "isolated-path",
                "docker-seccomp", "seccomp", "no-new-privs", "ws-quota"}
    assert set(dpool.layers) == expected  # a new layer needs its check below
    worker, uid = dpool._workers[0], dpool.jail_uids[0]
    ready = worker.ready
    assert ready["pid"] == 1 and ready["uid"] == 0 and ready["runner_uid"] == uid  # pidns, uid-drop
    host = _docker("inspect", "--format", "{{.HostConfig.Memory}} {{.HostConfig.PidsLimit}} "
                   "{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.NetworkMode}} {{.HostConfig.IpcMode}}",
                   dpool.launcher.container_name(worker.slot))
    assert host.split() == [str(768 << 20), "64", "true", "none", "private"]  # cgroups, ro-root, netns, ipcns
    with dpool.session() as s:
        s.run_python("import sklearn.linear_model")  # the ml zygote starts too
        dpool.process_roles()  # the worker's own account of its processes (pids as the container sees them)
        roles = {str(pid): role for pid, role in (worker.roles or {}).items()}
        rows = [line.split() for line in s.run_python(STATUS).stdout.splitlines()]
        me = s.run_python("import json, os, resource, sys\nlim = resource.getrlimit\n"
                          "print(os.getpid(), lim(resource.RLIMIT_AS)[0] >> 20, lim(resource.RLIMIT_NPROC)[0], "
                          "lim(resource.RLIMIT_CORE)[0], sys.flags.isolated, os.getuid())\n"
                          "print(json.dumps(sys.path))")
        net = s.run_shell("cat /proc/net/dev | tail -n +3 | cut -d: -f1; cat /proc/sys/kernel/shmmax "
                          "/proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/msgmni /proc/sys/fs/mqueue/queues_max")
        env = s.run_python("import os; print(sorted(os.environ))")
        seccomp = s.run_python("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"  # get_mempolicy
                               "print(libc.syscall(239, None, None, 0, None, 0), ctypes.get_errno())")
        server_cmdline = s.run_shell("tr '\\0' ' ' < /proc/1/cmdline").stdout
    pid, as_mb, nproc, core, isolated, session_uid = me.stdout.splitlines()[0].split()
    assert int(session_uid) in worker.slot.uids and int(session_uid) != 0  # this session's turn of the slot's two
    assert (int(as_mb), int(nproc), int(core)) == (2048, 64, 0)  # rlimits
    assert roles[pid] == "runner" and roles["1"] == "server"
    assert {"server", "zygote-light", "zygote-ml", "runner"} <= set(roles.values()), roles
    for row in rows:
        jail_pid, owner, eff, prm, bnd, nnp, mode, filters = row
        kind = roles.get(jail_pid, "user").split("-")[0]
        assert (int(eff, 16), int(prm, 16), int(bnd, 16)) == CAPS[kind], row  # caps, cap-drop
        # uid-drop: the server and zygotes are the container's root; the runner is this session's uid, and any other
        # process (the call's, or a spare forked for the next session) one of the slot's two
        if kind in ("server", "zygote"):
            assert owner == "0", row
        else:
            assert (owner == session_uid) if jail_pid == pid else (int(owner) in worker.slot.uids), row
        # no-new-privs; seccomp and docker-seccomp: two filters (kernels before 5.9 do not count them)
        assert nnp == "1" and mode == "2" and filters in ("2", "-"), row
    # isolated-path: the server is `python -I` started in /; a runner's path has its workspace first, nothing
    # else writable (it inherited the server's path)
    assert " -I " in f" {server_cmdline} " and isolated == "1"
    path = json.loads(me.stdout.splitlines()[1])
    assert path[0] == "/workspace" and not any(p.startswith(("/workspace", "/tmp", "/dev/shm")) for p in path[1:])
    server = _container_pid(dpool)
    assert os.readlink(f"/proc/{server}/cwd") == os.readlink(f"/proc/{server}/root")  # started in its /
    assert net.stdout.split()[0] == "lo" and len(net.stdout.split()) == 5  # netns: loopback only
    assert net.stdout.split()[1:] == [str(64 << 20), "1", "16", "0"]  # ipc-limits (medagentgym.sandbox._jail.ipc_limits)
    # get_mempolicy: allowed by the worker's filter and on the host; Docker's profile refuses it (EPERM)
    assert seccomp.stdout.split() == ["-1", "1"], seccomp
    assert "PYTHONPATH" not in env.stdout and "DOCKER_HOST" not in env.stdout  # env-scrub
    with dpool.session() as s:  # ipcns: a segment made in the container is not the host's
        made = s.run_python("import ctypes\nlibc = ctypes.CDLL(None)\nprint(libc.shmget(0x5eed, 4096, 0o1600))\n"
                            "print(open('/proc/sysvipc/shm').read().count('\\n'))")
        assert int(made.stdout.split()[0]) >= 0 and made.stdout.split()[1] == "2", made
        host_keys = [line.split()[0] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
        assert str(0x5EED) not in host_keys


def test_sysv_ipc_is_capped_and_gone_after_its_session(dpool):
    ipc = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "def e(r):\n    return r if r >= 0 else -ctypes.get_errno()\n"
           "print(e(libc.shmget(0, ctypes.c_size_t(128 << 20), 0o1600)), e(libc.shmget(0, ctypes.c_size_t(40 << 20),"
           " 0o1600)), e(libc.shmget(0, ctypes.c_size_t(40 << 20), 0o1600)), e(libc.msgget(0x5ec2e7, 0o1600)),"
           " e(libc.semget(0x5ec2e8, 1, 0o1600)))")
    with dpool.session() as s:
        big, first, second, queue, sem = (int(x) for x in s.run_python(ipc).stdout.split())
        assert big == -22 and first >= 0 and second == -28, (big, first, second)  # shmmax, then shmall
        assert queue >= 0 and sem >= 0  # a few small queues and semaphore sets are allowed, as with bwrap
        assert s.run_shell("tail -q -n +2 /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem | wc -l"
                           ).stdout.strip() == "3"
    with dpool.session() as s:  # same container: the worker removed them between the sessions
        assert s.run_shell("tail -q -n +2 /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem | wc -l"
                           ).stdout.strip() == "0"
    _still_serves(dpool)


def test_dev_shm_tmp_and_workspace_are_wiped_between_sessions(dpool):
    slot = dpool._workers[0].slot
    with dpool.session() as s:
        made = s.run_shell("echo a > /dev/shm/x && echo b > /tmp/x && echo c > /workspace/x && echo made")
        assert made.stdout == "made\n", made
        assert (slot.shm / "x").read_text() == "a\n"  # /dev/shm is the slot's folder: the pool wipes it
    with dpool.session() as s:
        assert s.run_shell("ls -A /dev/shm /tmp /workspace | grep -c x").stdout.strip() == "0"


def test_cgroup_limits_stop_what_the_rlimits_allow(dpool):
    with dpool.session() as s:
        forks = s.run_python("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                             "            time.sleep(60)\n        n += 1\nexcept OSError as e:\n    print(n, e.errno)",
                             limits=Limits(processes=4096, wall_s=20))
        n, errno_ = forks.stdout.split()
        assert int(n) < 64 and errno_ == "11", forks  # cgroup-pids (RLIMIT_NPROC was 4096)
        hog = s.run_python("b = bytearray(1200 << 20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint('alive')",
                           limits=Limits(memory_mb=4096, wall_s=30))
        assert hog.error_kind == ErrorKind.KILLED and "alive" not in hog.stdout, hog  # cgroup-memory OOM kill
        assert s.run_python("print('after')").stdout == "after\n"
    _still_serves(dpool)


def test_a_restarted_container_runs_no_planted_module_and_sees_no_host_env(dpool, monkeypatch):
    monkeypatch.setenv("SANDBOX_PLANTED_SECRET", "hunter2-planted")  # in the pool's process when it restarts
    marker = "PLANTED-MODULE-RAN"
    plant = ("import os\n"
             f"body = \"import sys; sys.stderr.write('{marker}\\\\n')\\n\"\n"
             "for where in ('/workspace', '/tmp', '/dev/shm'):\n"
             "    for rel in ('json.py', 'argparse.py', 'numpy.py', 'sitecustomize.py', 'sandbox/__init__.py',"
             " 'sandbox/worker.py', 'encodings/__init__.py'):\n"
             "        path = os.path.join(where, rel)\n"
             "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
             "        open(path, 'w').write(body)\n"
             "print('planted')")
    with dpool.session() as s:
        assert s.run_python(plant).stdout == "planted\n"
        old = _container_pid(dpool)
        _docker("kill", dpool.launcher.container_name(dpool._workers[0].slot))  # the worker dies mid-session
        res = s.run_python("print('the first call after the kill reports it')")
        assert res.error_kind == ErrorKind.KILLED and "fresh worker" in res.stderr, res
        new = _container_pid(dpool)
        after = s.run_python("import os, numpy\nprint(numpy.__file__)\nprint(dict(os.environ))")
    assert new != old and after.stdout.startswith("/usr/local/lib/"), after
    assert "hunter2" not in after.stdout and b"hunter2" not in Path(f"/proc/{new}/environ").read_bytes()
    assert marker not in "".join(w.log_path.read_text(errors="replace") for w in dpool._workers)
    _still_serves(dpool)


def test_a_session_sees_only_its_own_mounts_and_no_host_path(dpool, tmp_path):
    labels = tmp_path / "tasks-root-marker" / "labels"
    labels.mkdir(parents=True)
    (labels / "labels.csv").write_text("patient,label\n1,0\n")
    for path in (labels.parent, labels):
        path.chmod(0o755)
    (labels / "labels.csv").chmod(0o644)
    with dpool.session(mounts={"labels": labels}) as s:  # a new mount: the container restarts with it
        assert s.run_python("print(open('/data/labels/labels.csv').read())").stdout.startswith("patient")
        info = s.run_shell("cat /proc/self/mountinfo").stdout
    root = str(Path(sandbox.__file__).resolve().parent.parent)
    for host_path in (str(tmp_path), "tasks-root-marker", root):  # no test, task or repository path shows
        assert host_path not in info, (host_path, info)
    with dpool.session() as s:  # the next session on the same worker does not see it
        assert s.run_shell("ls /data").stdout.split() == ["notes"]
    _still_serves(dpool)


def test_a_lying_or_deaf_runner_is_killed_not_waited_for(dpool):
    with dpool.session() as s:
        start = time.monotonic()
        lie = s.run_python("import os, time\nos.write(4, b'\\x00\\x00\\x10\\x00{\"exit_')\ntime.sleep(60)",
                           limits=Limits(wall_s=3.0))
        assert not lie.ok and lie.error_kind in (ErrorKind.KILLED, ErrorKind.TIMEOUT) and time.monotonic() - start < 8
        assert s.run_python("import medagentgym.sandbox.worker as w, time\nw._read_exact = lambda fd, size: time.sleep(3600)").ok
        start = time.monotonic()
        deaf = s.run_python("x = 1\n" + "# padding\n" * 20000, limits=Limits(wall_s=2.0))  # more than a pipe holds
        assert deaf.timed_out and time.monotonic() - start < 8, deaf
        assert s.run_python("print('fresh runner')").stdout == "fresh runner\n"
    _still_serves(dpool)


def test_bench_docker_times_both_backends_interleaved(engine, load_script, capsys):
    bench = load_script("bench_docker")
    assert bench.main(["--calls", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name in ("print", "pandas", "sql", "oneshot_print"):
        docker, bwrap = result[f"{name}_docker_p50_ms"], result[f"{name}_bwrap_p50_ms"]
        assert docker > 0 and bwrap > 0 and result[f"{name}_ratio"] == round(docker / bwrap, 2)


def test_a_stale_image_is_refused_with_the_fix(engine):
    bases = _docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "medagentgym-sandbox-base").split()
    if not bases:
        pytest.skip("no base image of medagentgym sandbox-image here (the image came from a registry)")
    assert "built for another version" in probe(image=bases[0])  # the base carries no ABI label
    assert "is missing" in probe(image="medagentgym-sandbox:no-such-tag")


def test_closing_the_pool_leaves_no_container(engine, leftovers, container_leftovers):
    pool = make_pool("docker", workers=1)
    uids = list(pool.jail_uids)
    session = pool.session()
    assert session.run_python("x = 1").ok
    pool.close()  # with the session still open
    session.close()
    assert leftovers(uids, settle_s=5.0) == [] and container_leftovers(pool.launcher) == []
