"""README.md's "Using it" commands, run verbatim, in order, from a clone-like copy of the repository.

The commands are parsed from README.md, so the test fails when README drifts from what works: every line of the
section's fenced block that starts with ``.venv/bin/medagentgym`` or ``.venv/bin/python`` runs (continuation lines joined), except those whose
comment says they need a GPU. A command with ``--port N`` is a server: it must answer ``/health``, then it is
stopped with Ctrl-C (SIGINT). The copy holds the tracked and untracked-but-not-ignored files, as a clone would,
and ``.venv`` links to the interpreter running the tests; relative paths (``artifacts/tasks``, ``runs/...``)
land in the copy.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Using it"


def readme_commands(text: str) -> list[tuple[str, str]]:
    """``(command, comment)`` for each ``.venv/bin/medagentgym`` or ``.venv/bin/python`` line of the first fenced
    block under "Using it"."""
    section = text.split(SECTION, 1)[1]
    block = re.search(r"```(?:bash|sh|console)?\n(.*?)```", section, re.DOTALL).group(1)
    joined = re.sub(r"\\\n\s*", "", block)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if not line.startswith((".venv/bin/python", ".venv/bin/medagentgym")):
            continue
        words = shlex.split(line, comments=True)
        command = shlex.join(words)
        comment = line[line.index("#") + 1:].strip() if " #" in line else ""
        found.append((command, comment))
    return found


def test_readme_parser_joins_continuations_and_keeps_comments():
    text = ("intro\n## Using it\n\n```bash\n.venv/bin/python a.py --x 1 \\\n    --y 2   # note\n"
            "accelerate launch train.py   # on a GPU\n.venv/bin/python b.py   # on a GPU\n```\n")
    assert readme_commands(text) == [(".venv/bin/python a.py --x 1 --y 2", "note"),
                                     (".venv/bin/python b.py", "on a GPU")]
    assert readme_commands((ROOT / "README.md").read_text(encoding="utf-8")), "README has no commands to run"


def test_no_readme_command_writes_where_a_real_recipe_reads():
    """Examples and smoke runs never write the stores the 7B/14B recipes train on (a smoke collection there made
    the flagship SFT train on 16 rows). Task builds may share a root: a real recipe refuses a build of another
    size (medagentgym.medcopilot.inputs)."""
    from medagentgym.medcopilot.config import RECIPES_DIR, load_recipe

    reads = set()
    for path in RECIPES_DIR.glob("*_qwen*.yaml"):
        cfg = load_recipe(path.stem)
        if cfg.rollout.store:
            reads |= {Path(cfg.rollout.store), Path(cfg.rollout.store).parent}
    assert reads
    for command, _ in readme_commands((ROOT / "README.md").read_text(encoding="utf-8")):
        words = shlex.split(command)
        if "--out" in words and words[:2] != [".venv/bin/medagentgym", "build"]:
            out = Path(words[words.index("--out") + 1])
            assert out not in reads and not any(r.is_relative_to(out) for r in reads), (command, sorted(reads))


def _free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def free_port() -> int:
    """A port nobody listens on now (a shared machine: someone else may hold the README's)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(command: str, cwd: Path, port: int, env: dict[str, str] | None = None) -> None:
    """Start a server command, wait for /health, stop it with SIGINT; fail with its output if it never answers."""
    proc = subprocess.Popen(shlex.split(command), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            proc.kill()
            pytest.fail(f"`{command}` never answered /health:\n{proc.communicate(timeout=30)[0][-3000:]}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(5400)
@pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                    reason="the commands use the bubblewrap sandbox; the copy is made from git's file list")
def test_readme_commands_run_verbatim_from_a_fresh_copy(tmp_path, repo_copy):
    clone = repo_copy(tmp_path / "clone")
    # The one file a user supplies (a public MedAgentGym task file, never in the repository): a small fixture
    # in the same format stands in for it.
    shutil.copy(ROOT / "tests" / "fixtures" / "import_ehr" / "eicu_valid_tasks.jsonl", clone / "valid_tasks.jsonl")
    ran = []
    for command, comment in readme_commands((ROOT / "README.md").read_text(encoding="utf-8")):
        if "gpu" in comment.lower():
            continue
        port = re.search(r"--port[ =](\d+)", command)
        started = time.monotonic()
        if port:
            wanted = int(port.group(1))
            if not _free(wanted):  # a shared machine: someone else holds the README's port
                wanted = free_port()
                command = command.replace(port.group(0), f"--port {wanted}")
            _serve(command, clone, wanted)
        else:
            done = subprocess.run(shlex.split(command), cwd=clone, capture_output=True, text=True, timeout=1800,
                                  check=False)
            assert done.returncode == 0, f"`{command}` failed ({done.returncode}):\n{done.stderr[-4000:]}"
        ran.append(f"{time.monotonic() - started:6.1f} s  {command}")
        _check_outputs(command, clone)
    print("\n".join(ran))
    assert ran


def _check_outputs(command: str, clone: Path) -> None:
    """What a command's exit status does not show: the oracle really scores every family; the card loads."""
    words = shlex.split(command)
    out = Path(clone, words[words.index("--out") + 1]) if "--out" in words else None
    command_name = words[1] if words[0].endswith("/medagentgym") else None
    if command_name == "eval" and words[words.index("--policy") + 1] == "oracle":
        import json

        from medagentgym import tasks

        report = json.loads((out / "report.json").read_text())
        assert report["success_rate"] == 1.0, report["per_family"]
        if words[words.index("--families") + 1] == "all":
            assert sorted(report["per_family"]) == tasks.names()
    if command_name == "export":
        from huggingface_hub import ModelCard

        card = ModelCard.load(out / "README.md")
        assert "## Intended use" in card.text and (card.data.eval_results or "--eval" not in words)
