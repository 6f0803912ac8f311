"""The OpenEnv environment package (integrations/openenv, distribution ``openenv-medagentgym-env``): installed with
pip, openenv-core's AutoEnv discovers it from its ``openenv.yaml`` and connects its typed client; the env-server
image's files and command are real (no container engine here: the image's command runs as a process, and
``from_docker_image`` is driven through openenv-core's provider interface by a provider that starts that process)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

pytest.importorskip("openenv", reason="openenv-core is not installed (pip install '.[openenv]')")

from medagentgym.env_client.server_app import background_server
from medagentgym import tasks

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "integrations" / "openenv"
DOCKERFILE = PACKAGE / "server" / "Dockerfile"
TOKEN = "package-test-token-7f3a"


def build_openenv_app(*args, **kwargs):
    """``medagentgym.adapters.openenv.build_openenv_app``, imported on first use: openenv-core's server pulls in
    gradio (~8 s of CPU), which test collection should not pay (issue #29)."""
    from medagentgym.adapters.openenv import build_openenv_app as build

    return build(*args, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """``pip install`` of the package (from a copy: a build writes next to its sources) into a target folder."""
    tmp = tmp_path_factory.mktemp("openenv_pkg")
    source = tmp / "src"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--target", str(tmp / "site"), str(source)], capture_output=True, text=True, timeout=600,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return tmp / "site"


def _env(installed: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The process environment with the package importable (and its metadata visible) and a private temp dir
    (AutoEnv caches discovery in $TMPDIR)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(ROOT)]), "TMPDIR": str(tmp_path),
            **extra}


def test_autoenv_discovers_the_package_and_plays_an_episode(installed, toy_root, make_test_pool, oracle_answer,
                                                            tmp_path):
    pool = make_test_pool(1)
    task = "toy_sql/test/0005"
    script = f"""
import json, sys
from openenv import AutoAction, AutoEnv
env = AutoEnv.from_env("medagentgym", base_url=sys.argv[1])
action_cls = AutoAction.from_env("medagentgym")
with env.sync() as client:
    first = client.reset(task_id={task!r})
    done = client.step(action_cls(typed={{"action": "submit_answer", "answer": sys.argv[2]}}))
print(json.dumps({{"client": type(env).__name__, "action": action_cls.__name__, "kind": first.observation.kind,
                  "reward": done.reward, "done": done.done, "observation": type(done.observation).__name__}}))
"""
    try:
        with background_server(build_openenv_app(toy_root, pool=pool, families=["toy_sql"])) as url:
            out = subprocess.run([sys.executable, "-c", script, url, oracle_answer(task)], capture_output=True,
                                 text=True, timeout=1200, env=_env(installed, tmp_path), cwd=tmp_path, check=False)
    finally:
        pool.close()
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"client": "MedagentgymEnv", "action": "MedAction", "kind": "task", "reward": 1.0, "done": True,
                   "observation": "MedObservation"}


def test_the_manifest_names_what_discovery_derives():
    import yaml

    manifest = yaml.safe_load((PACKAGE / "openenv.yaml").read_text())
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    # openenv-core: distribution openenv-<x> -> module <x with _>; manifest name -> <Name>Env client class
    assert project["name"] == "openenv-medagentgym-env" and manifest["name"] == "medagentgym"
    from openenv.auto._discovery import _infer_class_name

    assert _infer_class_name("medagentgym_env", "client") == "MedagentgymEnv"
    assert manifest["action"] == "MedAction" and manifest["observation"] == "MedObservation"
    client_source = (PACKAGE / "client.py").read_text()
    assert "class MedagentgymEnv(" in client_source
    assert "class MedAction(Action)" in client_source and "class MedObservation(Observation)" in client_source

def _docker_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_dockerfile_uses_real_paths_and_commands(tmp_path):
    """What `docker build -f integrations/openenv/server/Dockerfile .` copies exists; what it runs parses and
    works here (the task build with its own flags and families); its command is the package's console script and
    the environment it sets is what that script reads."""
    steps = _docker_instructions()
    copies = [args.split()[0] for op, args in steps if op == "COPY"]
    assert copies and all((ROOT / src).exists() for src in copies), copies
    runs = " ".join(args for op, args in steps if op == "RUN")
    assert "./integrations/openenv" in runs and "'.[openenv]'" in runs
    args = dict(re.findall(r"ARG (\w+)=(\S+)", DOCKERFILE.read_text()))
    build = next(args_ for op, args_ in steps if op == "RUN" and "medagentgym build" in args_)
    assert set(args["FAMILIES"].split(",")) <= set(tasks.names())
    command = build.replace("${FAMILIES}", args["FAMILIES"]).replace("${SIZE}", "tiny").replace(
        "/opt/medagentgym/tasks", str(tmp_path / "tasks")).split()
    assert command[:2] == ["medagentgym", "build"]
    out = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert all((tmp_path / "tasks" / fam / "manifest.json").is_file() for fam in args["FAMILIES"].split(","))
    cmd = json.loads(next(args_ for op, args_ in steps if op == "CMD"))
    scripts = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]["scripts"]
    assert cmd == ["server"] and scripts["server"] == "medagentgym_env.server.app:main"
    env = next(args_ for op, args_ in steps if op == "ENV")
    app_source = (PACKAGE / "server" / "app.py").read_text()
    for name in re.findall(r"(\w+)=", env):
        if name.startswith(("MEDAGENTGYM_", "HOST", "PORT")):
            assert f'"{name}"' in app_source, name
    assert "EXPOSE 8000" in DOCKERFILE.read_text() and "8000" in (PACKAGE / "openenv.yaml").read_text()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _ProcessProvider:
    """openenv-core's container-provider interface, running the image's command as a local process (this machine
    has no container engine): what ``from_docker_image`` hands the image (its environment) is what it gets."""

    def __init__(self, installed: Path, tmp_path: Path, tasks_root: Path, backend: str) -> None:
        self.installed, self.tmp_path, self.tasks_root, self.backend = installed, tmp_path, tasks_root, backend
        self.proc: subprocess.Popen | None = None
        self.env_vars: dict[str, str] = {}

    def start_container(self, image: str, port: int | None = None, env_vars: dict | None = None, **_: object) -> str:
        self.port = port = port or _free_port()
        self.env_vars = dict(env_vars or {})
        env = _env(self.installed, self.tmp_path, MEDAGENTGYM_TASKS_ROOT=str(self.tasks_root), HOST="127.0.0.1",
                   PORT=str(port), MEDAGENTGYM_SANDBOX=self.backend, MEDAGENTGYM_ALLOW_UNISOLATED="1",
                   **self.env_vars)
        self.proc = subprocess.Popen([str(self.installed / "bin" / "server")], env=env, cwd=self.tmp_path,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return f"http://127.0.0.1:{port}"

    def wait_for_ready(self, base_url: str, timeout_s: float = 30.0) -> None:
        import httpx

        deadline = time.monotonic() + max(timeout_s, 240)
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read()[-2000:]
            try:
                if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise TimeoutError(base_url)

    def stop_container(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


def test_from_docker_image_starts_the_server_with_a_token_and_connects(installed, toy_root, sandbox_backend,
                                                                       oracle_answer, tmp_path, monkeypatch):
    """``MedagentgymEnv.from_docker_image`` gives the image a fresh token and connects with it; the server it
    starts (the image's command) refuses clients without it."""
    import asyncio

    import httpx

    monkeypatch.syspath_prepend(str(installed))
    from medagentgym_env.client import MedagentgymEnv

    provider = _ProcessProvider(installed, tmp_path, toy_root, sandbox_backend)

    async def play() -> float:
        env = await MedagentgymEnv.from_docker_image("medagentgym-env:latest", provider=provider)
        try:
            await env.reset(task_id="toy_sql/test/0006")
            reward = (await env.step({"typed": {"action": "submit_answer",
                                                "answer": oracle_answer("toy_sql/test/0006")}})).reward
            anonymous = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{provider.port}/metadata", timeout=10)
            assert anonymous.status_code == 401  # the server it started lets no one in without the token
            return reward
        finally:
            await env.close()  # also stops the "container" (the client owns its provider)

    try:
        assert asyncio.run(play()) == 1.0
        assert len(provider.env_vars["MEDAGENTGYM_ENV_TOKEN"]) == 32
    finally:
        provider.stop_container()


def test_the_jail_provider_runs_docker_with_the_jail_options(monkeypatch, installed):
    """The docker command openenv-core's provider would run, plus what bubblewrap needs inside the container."""
    monkeypatch.syspath_prepend(str(installed))
    from medagentgym_env.client import JAIL_DOCKER_OPTIONS, JailDockerProvider

    seen: list[list[str]] = []

    def fake_run(command, **_):
        seen.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="c0ffee\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    provider = JailDockerProvider.__new__(JailDockerProvider)  # skip the engine check of its __init__
    url = provider.start_container("medagentgym-env:latest", port=18123, env_vars={"MEDAGENTGYM_ENV_TOKEN": "t0k3n"})
    [command] = seen
    assert url == "http://127.0.0.1:18123" and command[:3] == ["docker", "run", "-d"]
    assert "127.0.0.1:18123:8000" in command and command[-1] == "medagentgym-env:latest"
    assert " ".join(JAIL_DOCKER_OPTIONS) in " ".join(command) and "MEDAGENTGYM_ENV_TOKEN=t0k3n" in command


def test_the_server_refuses_an_open_port_without_a_token_in_one_line(monkeypatch, capsys):
    """The server's ``main`` in this process (the installed ``server`` script doing the same is the slow test below;
    the tests above start that script)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("openenv_server_app_main", PACKAGE / "server" / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    monkeypatch.delenv("MEDAGENTGYM_ENV_TOKEN", raising=False)
    monkeypatch.setattr(app, "build", lambda *a, **k: pytest.fail("built the app although the port is open"))
    assert app.main(["--host", "0.0.0.0", "--port", str(_free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "MEDAGENTGYM_ENV_TOKEN is not set" in err and "listen on 127.0.0.1" in err


@pytest.mark.slow
def test_the_server_refuses_an_open_port_without_a_token(installed, toy_root, tmp_path):
    env = _env(installed, tmp_path, MEDAGENTGYM_TASKS_ROOT=str(toy_root), HOST="0.0.0.0", PORT=str(_free_port()))
    env.pop("MEDAGENTGYM_ENV_TOKEN", None)
    out = subprocess.run([str(installed / "bin" / "server")], env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "MEDAGENTGYM_ENV_TOKEN is not set" in out.stderr


def test_the_client_is_light_pydantic_and_openenv_core_only(installed, tmp_path):
    """The client imports neither MedAgentGym (sandbox, families, env server) nor needs it installed: its package
    depends on openenv-core and pydantic (the server on the [server] extra); its wire types are the server's."""
    meta = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    assert not any(dep.startswith("medagentgym") for dep in meta["dependencies"]), meta["dependencies"]
    assert meta["optional-dependencies"]["server"] == ["medagentgym[openenv]"]
    script = """
import json, sys
import medagentgym_env
from medagentgym_env.client import MAX_ACTION_CHARS, MedAction, MedObservation
ours = sorted(m for m in sys.modules if m.split(".")[0] in ("medagentgym", "env_client", "sandbox", "rewards"))
print(json.dumps({"ours": ours, "action": MedAction.model_json_schema(), "obs": MedObservation.model_json_schema(),
                  "max": MAX_ACTION_CHARS}))
"""
    env = {**os.environ, "PYTHONPATH": str(installed), "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["ours"] == [], f"the client imported {found['ours']}"
    from medagentgym.env_client.server_app import MAX_ACTION_CHARS
    from medagentgym.adapters.openenv import MedAction, MedObservation

    def wire(schema):  # what travels: the fields, their types and limits (not the class docstring)
        return {k: v for k, v in schema.items() if k != "description"}

    assert wire(found["action"]) == wire(MedAction.model_json_schema())
    assert wire(found["obs"]) == wire(MedObservation.model_json_schema())
    assert found["max"] == MAX_ACTION_CHARS
