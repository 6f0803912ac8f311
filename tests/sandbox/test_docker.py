"""Docker backend: the command line and the image builder (always), real containers where an engine runs.

The real-engine tests skip without an engine and the image (``make test`` on a clean machine), and FAIL instead
when ``MEDAGENTGYM_TEST_BACKEND=docker`` (``make test-docker``), so that target cannot pass by skipping.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import sandbox
from sandbox import ErrorKind, Limits, SandboxUnavailable, make_pool
from sandbox import docker_image as di
from sandbox._jail import Slot
from sandbox.docker_backend import (
    DEFAULT_IMAGE,
    IMAGE_ABI,
    IMAGE_ABI_LABEL,
    SERVER_CAPS,
    DockerLauncher,
    make_launcher,
    probe,
)

REQUIRED = os.environ.get("MEDAGENTGYM_TEST_BACKEND") == "docker"
CAP_BITS = {"KILL": 5, "SETGID": 6, "SETUID": 7}
SERVER_MASK = sum(1 << CAP_BITS[c] for c in SERVER_CAPS)


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
    assert _option(argv, "--cap-drop") == ["ALL"] and _option(argv, "--cap-add") == ["SETUID", "SETGID", "KILL"]
    assert _option(argv, "--security-opt") == ["no-new-privileges"]
    assert _option(argv, "--user") == ["0:0"] and _option(argv, "--workdir") == ["/"]
    assert _option(argv, "--memory") == ["3072m"] and _option(argv, "--memory-swap") == ["3072m"]
    assert _option(argv, "--pids-limit") == ["128"] and _option(argv, "--cpus") == ["1.5"]
    assert _option(argv, "--pull") == ["never"] and _option(argv, "--log-driver") == ["none"]
    sysctls = dict(s.split("=", 1) for s in _option(argv, "--sysctl"))
    assert sysctls["kernel.shmmax"] == str(32 << 20) and int(sysctls["kernel.shmall"]) * os.sysconf(
        "SC_PAGE_SIZE") == 32 << 20
    assert sysctls["kernel.shm_rmid_forced"] == "1" and sysctls["kernel.msgmni"] == "0"
    assert sysctls["kernel.sem"].split()[3] == "0"  # no semaphore sets
    assert "--privileged" not in head and "--tty" not in head and "-t" not in head
    # One long-lived isolated interpreter speaking the pipe protocol, runners dropped to the slot's uid.
    assert argv[argv.index(DEFAULT_IMAGE) + 1:] == [
        "python", "-I", "-m", "sandbox.worker", "--pidns", "--data", "/data", "--workspace", "/workspace",
        "--preload", "numpy,pandas", "--uid", str(slot.uid), "--gid", str(slot.uid)]


def test_mounts_writable_dirs_data_read_only(slot: Slot):
    launcher = DockerLauncher()
    launcher.prepare(slot)
    mounts = _option(launcher.argv(slot, "pandas"), "--mount")
    for host, target in ((slot.workspace, "/workspace"), (slot.tmp, "/tmp"), (slot.shm, "/dev/shm")):
        assert f"type=bind,source={host},target={target}" in mounts
    for name in ("passwd", "group"):
        assert any(m.endswith(f"target=/etc/{name},readonly") for m in mounts)
    data = next(m for m in mounts if m.endswith("target=/data/mimic_iii,readonly"))
    assert f"source={slot.mounts['mimic_iii']}" in data
    package = Path(sandbox.__file__).resolve().parent
    assert f"type=bind,source={package},target=/opt/medagentgym/sandbox,readonly" in mounts
    assert not any("docker.sock" in m for m in mounts)
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


def test_prepare_gives_each_slot_its_own_runner_uid(tmp_path: Path):
    launcher = DockerLauncher(docker="/nonexistent/docker")
    slots = [Slot(index=i, root=tmp_path / f"w{i}", uid=None) for i in range(2)]
    for s in slots:
        launcher.prepare(s)
        launcher.prepare(s)  # a restart keeps the uid
    uids = [s.uid for s in slots]
    assert len(set(uids)) == 2 and all(u >= 70000 for u in uids)
    passwd = (tmp_path / "1.docker-passwd").read_text()
    assert f"sandbox:x:{uids[1]}:{uids[1]}:" in passwd and str(uids[0]) not in passwd
    if os.geteuid() == 0:
        for sub in (slots[0].workspace, slots[0].tmp, slots[0].shm):
            st = sub.stat()
            assert st.st_uid == uids[0] and stat.S_IMODE(st.st_mode) == 0o700


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
    assert re.search(r'^CMD \["python", "-I", "-m", "sandbox.worker"\]$', text, re.MULTILINE)


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
    """Runs the worker the way the container does, without an engine: PID 1 of a new pid namespace, uid 0
    holding only the server's capabilities (effective, permitted and bounding), an isolated interpreter
    started from ``/``, runners dropped to the slot uid. The system interpreter: the venv may sit in a home
    directory the slot uid cannot read."""

    def argv(self, slot: Slot, preload: str) -> list[str]:
        docker_argv = super().argv(slot, preload)
        os.chmod(slot.root.parent, 0o711)  # docker binds the directories; here the slot uid must traverse them
        caps = ",".join(f"+{c.lower()}" for c in SERVER_CAPS)
        start = ("import sys, runpy; sys.path.insert(0, sys.argv.pop(1)); "
                 "runpy.run_module('sandbox.worker', run_name='__main__', alter_sys=True)")
        return ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "setpriv", "--inh-caps=-all",
                f"--bounding-set=-all,{caps}", "--no-new-privs", "/usr/bin/python3", "-I", "-c", start,
                str(Path(sandbox.__file__).resolve().parent.parent), "--pidns", "--data", str(slot.data),
                "--workspace", str(slot.workspace), "--preload", preload,
                *docker_argv[docker_argv.index("--uid"):]]

    def env(self, slot: Slot) -> dict[str, str]:
        return {**self.container_env(), "HOME": "/tmp", "TMPDIR": str(slot.tmp)}


def _emulation_reason() -> str | None:
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        return "needs root, unshare and setpriv"
    check = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
             "import sys; assert sys.version_info >= (3, 10); import sandbox.worker"]
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
    from sandbox import Pool
    from sandbox.grounding import ground

    with Pool(_ContainerLikeLauncher(), workers=1, limits=Limits(), preload=("sqlite3",)) as pool:
        ready = pool._workers[0].ready
        uid = pool._workers[0].slot.uid
        assert ready["pid"] == 1 and ready["uid"] == 0 and ready["runner_uid"] == uid == pool.jail_uids[0]
        with pool.session() as s:
            assert s.run_python("x = 1\nopen('out.txt', 'w').write('ok')").ok  # workspace writable by the runner
            assert s.run_python("import os; print(os.getuid(), x + 1)").stdout.split() == [str(uid), "2"]
            caps = s.run_shell("grep -h -E '^Cap(Eff|Bnd)' /proc/1/status /proc/self/status").stdout.split()
            assert caps[1::2] == [f"{SERVER_MASK:016x}", f"{SERVER_MASK:016x}", "0" * 16, f"{SERVER_MASK:016x}"]
            killed = s.run_python("import os, signal\nos.kill(1, signal.SIGKILL)")
            assert killed.exception["type"] == "PermissionError"  # the server is not the runner's to signal
            slow = s.run_python("import subprocess\nsubprocess.Popen(['sleep', '60'])\nwhile True:\n    pass",
                                limits=Limits(wall_s=1.0))
            assert slow.timed_out and "wall-clock limit" in ground(slow, wall_limit_s=1.0)
            left = s.run_shell("for p in /proc/[0-9]*; do cat $p/comm; done").stdout.split()
            assert "sleep" not in left  # the pid-namespace kill reached the call's background process


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
    uid = dpool.jail_uids[0]
    with dpool.session() as s:
        assert s.run_python("x = 41").ok
        code = ("import os, socket\nprint(os.getuid(), x + 1, open('/data/notes/note.txt').read().strip())\n"
                "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('net')\n"
                "except OSError:\n    print('no-net')\n"
                "try:\n    open('/etc/evil', 'w')\n    print('rw')\nexcept OSError:\n    print('ro')\n")
        res = s.run_python(code)
        assert res.ok, res.stderr
        assert res.stdout.split() == [str(uid), "42", "hello", "no-net", "ro"]
        failed = s.run_python("import pandas as pd\npd.DataFrame({'age': [1]})['agee']")
        assert failed.exception["context"]["suggestions"] == ["age"]
        ml = s.run_python("from sklearn.linear_model import LogisticRegression\nimport lifelines, statsmodels.api, "
                          "Bio, matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.savefig('p.png'); print('ml ok')")
        assert ml.stdout == "ml ok\n", ml.stderr
        assert "42" in s.run_sql("SELECT n FROM notes", database="notes/notes.db").stdout.split()
        assert s.run_shell("whoami; ls /data/notes; sh -c 'echo $((6*7))' | awk '{print $1}'").stdout.split() == [
            "sandbox", "note.txt", "notes.db", "42"]


# One line per process of the container: pid, uid, CapEff, CapPrm, CapBnd, NoNewPrivs, Seccomp, Seccomp_filters.
STATUS = ("import os\nfor p in sorted(os.listdir('/proc'), key=lambda p: p.zfill(9)):\n    if p.isdigit():\n"
          "        try:\n            lines = open(f'/proc/{p}/status').read().splitlines()\n"
          "        except OSError:\n            continue\n"
          "        s = dict(line.split(':\\t', 1) for line in lines)\n"
          "        print(p, s['Uid'].split()[0], s['CapEff'], s['CapPrm'], s['CapBnd'], s['NoNewPrivs'],"
          " s['Seccomp'], s.get('Seccomp_filters', '-'))\n")


def test_every_listed_layer_is_in_force(dpool):
    expected = {"docker", "uid-drop", "cap-drop", "pidns", "netns", "ipcns", "ipc-limits", "ro-root", "env-scrub",
                "rlimits", "cgroup-memory", "cgroup-pids", "pidns-kill", "docker-seccomp", "seccomp",
                "no-new-privs", "ws-quota"}
    assert set(dpool.layers) == expected  # a new layer needs its check below
    uid = dpool.jail_uids[0]
    name = dpool.launcher.container_name(dpool._workers[0].slot)
    ready = dpool._workers[0].ready
    assert ready["pid"] == 1 and ready["uid"] == 0 and ready["runner_uid"] == uid  # pidns, uid-drop
    host = _docker("inspect", "--format", "{{.HostConfig.Memory}} {{.HostConfig.PidsLimit}} "
                   "{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.NetworkMode}} {{.HostConfig.IpcMode}}", name)
    assert host.split() == [str(768 << 20), "64", "true", "none", "private"]
    with dpool.session() as s:
        rows = [line.split() for line in s.run_python(STATUS).stdout.splitlines()]
        me = s.run_python("import os, resource\nprint(os.getpid(), resource.getrlimit(resource.RLIMIT_AS)[0] >> 20, "
                          "resource.getrlimit(resource.RLIMIT_NPROC)[0], resource.getrlimit(resource.RLIMIT_CORE)[0])")
        net = s.run_shell("cat /proc/net/dev | tail -n +3 | cut -d: -f1; cat /proc/sys/kernel/shmmax "
                          "/proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/msgmni")
        env = s.run_python("import os; print(sorted(os.environ))")
        seccomp = s.run_python("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                               "print(libc.syscall(312, 1, 1, 0, 0, 0), ctypes.get_errno())")  # kcmp
    pid, as_mb, nproc, core = me.stdout.split()
    assert (int(as_mb), int(nproc), int(core)) == (2048, 64, 0)  # rlimits
    by_pid = {r[0]: r for r in rows}
    assert by_pid["1"][1] == "0"
    for row in rows:
        _, owner, eff, prm, bnd, nnp, mode, filters = row
        # no-new-privs; seccomp and docker-seccomp: two filters (kernels before 5.9 do not count them)
        assert nnp == "1" and mode == "2" and filters in ("2", "-"), row
        assert int(bnd, 16) == SERVER_MASK, row  # cap-drop: nothing else can ever be regained
        if owner == "0":
            assert int(eff, 16) == int(prm, 16) == SERVER_MASK, row
        else:
            assert owner == str(uid) and int(eff, 16) == int(prm, 16) == 0, row  # the call's own processes
    assert by_pid[pid][1] == str(uid)
    assert net.stdout.split()[0] == "lo" and len(net.stdout.split()) == 4  # netns: loopback only
    assert net.stdout.split()[1:] == [str(64 << 20), "1", "0"]  # ipc-limits
    assert seccomp.stdout.split() == ["-1", "1"]  # kcmp: allowed by our filter, EPERM under Docker's profile
    assert "PYTHONPATH" not in env.stdout and "DOCKER_HOST" not in env.stdout  # env-scrub
    # ipcns: a segment made in the container is not the host's
    with dpool.session() as s:
        made = s.run_python("import ctypes\nlibc = ctypes.CDLL(None)\nprint(libc.shmget(0x5eed, 4096, 0o1600))\n"
                            "print(open('/proc/sysvipc/shm').read().count('\\n'))")
        assert made.stdout.split() == ["0", "2"], made
        host_keys = [line.split()[0] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
        assert str(0x5EED) not in host_keys


def test_sysv_ipc_is_capped_and_dies_with_its_session(dpool):
    ipc = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "def e(r):\n    return r if r >= 0 else -ctypes.get_errno()\n"
           "print(e(libc.shmget(0, ctypes.c_size_t(128 << 20), 0o1600)), e(libc.shmget(0, ctypes.c_size_t(40 << 20),"
           " 0o1600)), e(libc.shmget(0, ctypes.c_size_t(40 << 20), 0o1600)), e(libc.msgget(0, 0o1600)),"
           " e(libc.semget(0, 1, 0o1600)))")
    with dpool.session() as s:
        first = s.run_python(ipc).stdout.split()
        assert first[0] == "-22" and int(first[1]) >= 0 and first[2:] == ["-28", "-28", "-22"], first
        assert s.run_shell("tail -n +2 /proc/sysvipc/shm | wc -l").stdout.strip() == "1"
    with dpool.session() as s:  # same container: the segment went with the session's runner
        assert s.run_shell("tail -n +2 /proc/sysvipc/shm | wc -l").stdout.strip() == "0"
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


def test_planted_modules_never_reach_a_restarted_worker(dpool, monkeypatch):
    monkeypatch.setenv("SANDBOX_PLANTED_SECRET", "hunter2-planted")  # a restarted container must not see it
    plant = ("import os\nmark = \"open('/workspace/PWNED', 'a').write(__name__ + '\\\\n')\\n\"\n"
             "for name in ['json.py', 'argparse.py', 'numpy.py', 'sandbox/__init__.py', 'sandbox/worker.py']:\n"
             "    os.makedirs(os.path.dirname(name) or '.', exist_ok=True)\n    open(name, 'w').write(mark)\n"
             "print('planted')")
    with dpool.session() as s:
        assert s.run_python(plant).stdout == "planted\n"
        old = _container_pid(dpool)
        _docker("kill", dpool.launcher.container_name(dpool._workers[0].slot))  # the worker dies mid-session
        res = s.run_python("print('the first call after the kill reports it')")
        assert res.error_kind == ErrorKind.KILLED and "fresh worker" in res.stderr, res
        new = _container_pid(dpool)
        assert new != old and os.readlink(f"/proc/{new}/cwd") == os.readlink(f"/proc/{new}/root")  # cwd: /
        cmdline = Path(f"/proc/{new}/cmdline").read_bytes().split(b"\0")
        assert cmdline[:3] == [b"python", b"-I", b"-m"]
        after = s.run_python("import os\nprint(os.path.exists('PWNED'), os.path.exists('json.py'))\n"
                             "print(dict(os.environ))")
        assert after.stdout.splitlines()[0] == "False True", after  # planted, never imported
        assert "hunter2" not in after.stdout and b"hunter2" not in Path(f"/proc/{new}/environ").read_bytes()
    _still_serves(dpool)


def test_a_stale_image_is_refused_with_the_fix(engine):
    bases = _docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "medagentgym-sandbox-base").split()
    if not bases:
        pytest.skip("no base image of scripts/build_sandbox_image.py here (the image came from a registry)")
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
