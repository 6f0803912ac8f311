"""Ctrl-C in the long CLIs: one closing line that says what was saved and how a rerun goes on, exit 130.

The signal goes to the command's whole process group, as a terminal's Ctrl-C does (worker processes get it too).
Two commands are interrupted for real, mid-run: ``medagentgym build`` between two families, and ``medagentgym serve``
while it serves. The message logic of the others is checked in process.

The signal is sent when the command has reached the point to interrupt (a marker file written by the second
family's build, which then waits; ``/health`` answering), never after a delay: the tests hold on a machine of any
speed or load (issue #29). The only clock here is a hang guard of 600 s for the command to stop after Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _interrupt(proc: subprocess.Popen) -> tuple[int, str]:
    """Send SIGINT to ``proc``'s process group; return its exit status and its last stderr line."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=600)  # a hang guard: stopping takes well under a second when quiet
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the command did not stop within 600 s of Ctrl-C")
    lines = [line for line in err.splitlines() if line.strip()]
    return proc.returncode, lines[-1] if lines else ""


def _start(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=env)


def _wait_running(proc: subprocess.Popen, reached) -> None:
    """Poll until ``reached()`` is true; the command must stay alive meanwhile (pytest-timeout guards a hang)."""
    while not reached():
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.05)


#: A family (installed as a plugin distribution) whose build marks that it started, then waits to be interrupted.
_HELD = '''
import os
import time
from pathlib import Path

from medagentgym.tasks.toy_sql import ToySQL


class HeldSQL(ToySQL):
    name = "held_sql"

    def build(self, out_dir, *, size="tiny", seed=0):
        Path(os.environ["HELD_SQL_STARTED"]).write_text("building")
        while True:
            time.sleep(1)
'''


def test_build_tasks_interrupted_between_families_names_the_rest(tmp_path):
    # Families build one after the other (--jobs 1): once held_sql's build has started, toy_sql is finished and
    # held_sql is not; the signal lands inside the second build whatever the machine's speed.
    plugin = tmp_path / "plugin"
    info = plugin / "held_pkg-0.1.dist-info"
    info.mkdir(parents=True)
    (plugin / "held_pkg.py").write_text(_HELD)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: held-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[medagentgym.families]\nheld_sql = held_pkg:HeldSQL\n")
    out, started = tmp_path / "tasks", tmp_path / "held_sql.started"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin), os.environ.get("PYTHONPATH")])),
           "HELD_SQL_STARTED": str(started)}
    proc = _start(["-m", "medagentgym", "build", "--families", "toy_sql,held_sql", "--size", "tiny",
                   "--out", str(out), "--jobs", "1", "--no-progress"], tmp_path, env)
    _wait_running(proc, started.is_file)
    assert (out / "toy_sql" / "manifest.json").is_file()
    status, last = _interrupt(proc)
    assert status == 130, last
    assert last == (f"interrupted: 1 of 2 families built in {out} (toy_sql); rerun with --families held_sql "
                    f"to build the rest (their folders may be half written)")
    assert "Traceback" not in last


def test_serve_env_interrupted_stops_with_one_line(tmp_path):
    from medagentgym import tasks

    tasks.make("toy_sql", root=tmp_path).build(tmp_path, size="tiny", seed=0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = _start(["-m", "medagentgym", "serve", "--tasks-root", str(tmp_path), "--port", str(port),
                   "--workers", "1", "--sandbox", "local", "--allow-unisolated", "--log-level", "warning"], tmp_path)

    def healthy() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    _wait_running(proc, healthy)
    status, last = _interrupt(proc)
    assert status == 130, last
    assert last.startswith("interrupted: server stopped, open sessions closed;"), last


def test_build_tasks_line_when_nothing_or_everything_finished(load_script, tmp_path):
    build = load_script("build_tasks")
    since = time.time() - 1.0
    assert build.interrupted_line(["toy_sql"], tmp_path, since) == (
        f"interrupted: no family finished building in {tmp_path}; rerun the same command")
    (tmp_path / "toy_sql").mkdir()
    (tmp_path / "toy_sql" / "manifest.json").write_text("{}")
    assert build.interrupted_line(["toy_sql"], tmp_path, since) == (
        f"interrupted: every family named (toy_sql) was built in {tmp_path}; nothing is left to do")
    # a manifest from an earlier build does not count as finished by this one
    assert build.interrupted_line(["toy_sql"], tmp_path, time.time() + 60).startswith("interrupted: no family")


def test_import_and_export_lines_say_whether_the_output_exists(load_script, tmp_path):
    importer, export = load_script("import_tasks"), load_script("export_hf")
    since = time.time() - 1.0
    family_dir, out = tmp_path / "treqs", tmp_path / "export"
    assert importer.interrupted_line(family_dir, since, checking=True).startswith(
        f"interrupted: nothing written to {family_dir}")
    assert export.interrupted_line(str(out), "org/name", since).startswith(f"interrupted: no new export in {out}")
    family_dir.mkdir()
    (family_dir / "manifest.json").write_text("{}")
    out.mkdir()
    (out / "config.json").write_text("{}")
    assert "--check replay did not finish; rerun with --force" in importer.interrupted_line(
        family_dir, since, checking=True)
    assert export.interrupted_line(str(out), "org/name", since) == (
        f"interrupted: the export is complete in {out}, the upload did not finish; retry it alone with "
        f"--upload {out} --push org/name")
    assert export.interrupted_line(str(out), None, since).endswith("nothing is left to do")
