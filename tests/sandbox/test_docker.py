"""Docker backend: the ``docker run`` command line (always), and a real container where an engine runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import sandbox
from sandbox import SandboxUnavailable, make_pool
from sandbox._jail import Slot
from sandbox.docker_backend import DEFAULT_IMAGE, DockerLauncher, make_launcher, probe


def _option(argv: list[str], flag: str) -> list[str]:
    """Every value given to ``flag`` in ``argv`` (before the image name)."""
    head = argv[: argv.index(DEFAULT_IMAGE)]
    return [head[i + 1] for i, arg in enumerate(head) if arg == flag]


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    data = tmp_path / "mimic_iii"
    data.mkdir()
    s = Slot(index=3, root=tmp_path / "w3", uid=None, mounts={"mimic_iii": data})
    for sub in (s.workspace, s.tmp, s.data):
        sub.mkdir(parents=True)
    return s


def test_run_command_is_locked_down(slot: Slot):
    launcher = DockerLauncher(memory_mb=3072, pids=128, cpus=1.5)
    argv = launcher.argv(slot, "numpy,pandas")
    assert argv[:3] == ["docker", "run", "--interactive"]
    head = argv[: argv.index(DEFAULT_IMAGE)]
    for flag in ("--rm", "--read-only"):
        assert flag in head
    assert _option(argv, "--network") == ["none"]
    assert _option(argv, "--cap-drop") == ["ALL"]
    assert _option(argv, "--security-opt") == ["no-new-privileges"]
    assert _option(argv, "--user") == ["65534:65534"]
    assert _option(argv, "--memory") == ["3072m"] and _option(argv, "--memory-swap") == ["3072m"]
    assert _option(argv, "--pids-limit") == ["128"] and _option(argv, "--cpus") == ["1.5"]
    assert _option(argv, "--pull") == ["never"]
    assert "--privileged" not in head and "--tty" not in head and "-t" not in head
    # One long-lived worker speaking the pipe protocol, never a per-call command.
    assert argv[argv.index(DEFAULT_IMAGE) + 1:] == [
        "python", "-s", "-m", "sandbox.worker", "--pidns", "--data", "/data", "--workspace", "/workspace",
        "--preload", "numpy,pandas"]


def test_mounts_workspace_writable_data_read_only(slot: Slot):
    mounts = _option(DockerLauncher().argv(slot, "pandas"), "--mount")
    assert f"type=bind,source={slot.workspace},target=/workspace" in mounts
    assert f"type=bind,source={slot.tmp},target=/tmp" in mounts
    data = next(m for m in mounts if m.endswith("target=/data/mimic_iii,readonly"))
    assert f"source={slot.mounts['mimic_iii']}" in data
    package = Path(sandbox.__file__).resolve().parent
    assert f"type=bind,source={package},target=/opt/medagentgym/sandbox,readonly" in mounts
    assert not any("docker.sock" in m for m in mounts)
    assert len(_option(DockerLauncher(mount_package=False).argv(slot, "pandas"), "--mount")) == len(mounts) - 1


def test_environment_is_explicit_and_host_env_stays_out(slot: Slot, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    launcher = DockerLauncher()
    argv = launcher.argv(slot, "pandas")
    env = dict(item.split("=", 1) for item in _option(argv, "--env"))
    assert env["PYTHONPATH"] == "/opt/medagentgym" and env["OPENBLAS_NUM_THREADS"] == "1"
    assert "OPENAI_API_KEY" not in env and not any("sk-secret" in a for a in argv)
    client_env = launcher.env(slot)
    assert "OPENAI_API_KEY" not in client_env and set(client_env) <= {
        "PATH", "HOME", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
        "DOCKER_TLS_VERIFY", "XDG_RUNTIME_DIR"}


def test_container_names_are_stable_per_slot_and_unique_per_launcher(slot: Slot):
    a, b = DockerLauncher(), DockerLauncher()
    assert a.container_name(slot) == a.container_name(slot) != b.container_name(slot)
    assert _option(a.argv(slot, ""), "--name") == [a.container_name(slot)]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the container uid needs root")
def test_prepare_hands_the_slot_directories_to_the_container_uid(slot: Slot):
    DockerLauncher(docker="/nonexistent/docker").prepare(slot)
    assert slot.workspace.stat().st_uid == 65534 and slot.tmp.stat().st_uid == 65534


@pytest.mark.parametrize("kwargs, fragment", [
    ({"memory_mb": 10}, "memory_mb=10"),
    ({"pids": 2}, "pids=2"),
    ({"cpus": 0}, "cpus=0"),
    ({"user": "0:0"}, "non-root"),
    ({"user": "nobody"}, "'nobody'"),
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


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI to parse the command line")
def test_the_docker_cli_accepts_the_command_line(slot: Slot, tmp_path: Path):
    # The CLI parses every flag (mount specs, memory sizes, ulimits) before it contacts an engine, so with
    # DOCKER_HOST pointing at a socket that does not exist the only possible error is the connection.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    argv = DockerLauncher(cpus=1).argv(slot, "numpy,pandas")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=30,
                          check=False)
    assert proc.returncode != 0 and "no-engine.sock" in proc.stderr, proc.stderr
    broken = argv[:3] + ["--mount", "type=bind,sorce=/x,target=/y"] + argv[3:]
    proc = subprocess.run(broken, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=30,
                          check=False)
    assert "sorce" in proc.stderr and "no-engine.sock" not in proc.stderr


def _engine_reason() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI"
    try:
        ok = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return "`docker info` timed out"
    if not ok:
        return "no docker engine is running (`docker info` fails)"
    return probe()


def test_end_to_end_in_a_real_container(tmp_path: Path):
    reason = _engine_reason()
    if reason is not None:
        pytest.skip(f"docker end-to-end test needs an engine and the {DEFAULT_IMAGE} image: {reason}")
    data = tmp_path / "data"
    data.mkdir()
    (data / "note.txt").write_text("hello\n")
    os.chmod(data, 0o755)
    os.chmod(data / "note.txt", 0o644)
    with make_pool("docker", workers=1, mounts={"notes": data}) as pool, pool.session() as s:
        assert "docker" in pool.layers
        assert s.run_python("x = 41").ok
        probe_code = ("import os, socket\nprint(os.getuid(), x + 1, open('/data/notes/note.txt').read().strip())\n"
                      "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('net')\n"
                      "except OSError:\n    print('no-net')\n"
                      "try:\n    open('/etc/evil', 'w')\n    print('rw')\nexcept OSError:\n    print('ro')\n")
        res = s.run_python(probe_code)
        assert res.ok, res.stderr
        assert res.stdout.split() == ["65534", "42", "hello", "no-net", "ro"]
        failed = s.run_python("import pandas as pd\npd.DataFrame({'age': [1]})['agee']")
        assert failed.exception["context"]["suggestions"] == ["age"]


class _ContainerLikeLauncher(DockerLauncher):
    """Runs the worker the way the container does, without an engine: PID 1 of a new pid namespace,
    uid 65534, no capabilities, no ``--uid`` drop, the system interpreter (the venv may sit in a home
    directory uid 65534 cannot read)."""

    def argv(self, slot: Slot, preload: str) -> list[str]:
        assert "--network" in super().argv(slot, preload)
        os.chmod(slot.root.parent, 0o711)  # docker binds the directories; here uid 65534 must traverse them
        return ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "setpriv", "--reuid=65534",
                "--regid=65534", "--clear-groups", "--no-new-privs", "/usr/bin/python3", "-s", "-m",
                "sandbox.worker", "--pidns", "--data", str(slot.data), "--workspace", str(slot.workspace),
                "--preload", preload]

    def env(self, slot: Slot) -> dict[str, str]:
        env = self.container_env()
        env.update(PYTHONPATH=str(Path(sandbox.__file__).resolve().parent.parent), HOME="/tmp",
                   TMPDIR=str(slot.tmp))
        return env


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
    return None if ok else "uid 65534 cannot run /usr/bin/python3 (>= 3.10) with this checkout's sandbox package"


def test_container_process_model_without_an_engine():
    reason = _emulation_reason()
    if reason is not None:
        pytest.skip(f"container emulation: {reason}")
    from sandbox import Limits, Pool
    from sandbox.grounding import ground

    with Pool(_ContainerLikeLauncher(), workers=1, limits=Limits(), preload=("sqlite3",)) as pool:
        ready = pool._workers[0].ready
        assert ready["pid"] == 1 and ready["uid"] == 65534 and ready["runner_uid"] is None
        with pool.session() as s:
            assert s.run_python("x = 1\nopen('out.txt', 'w').write('ok')").ok  # workspace writable by 65534
            assert s.run_python("import os; print(os.getuid(), x + 1)").stdout.split() == ["65534", "2"]
            slow = s.run_python("import subprocess\nsubprocess.Popen(['sleep', '60'])\nwhile True:\n    pass",
                                limits=Limits(wall_s=1.0))
            assert slow.timed_out and "wall-clock limit" in ground(slow, wall_limit_s=1.0)
            left = s.run_shell("for p in /proc/[0-9]*; do cat $p/comm; done").stdout.split()
            assert "sleep" not in left  # the pid-namespace kill reached the call's background process
