"""A malformed YAML / JSON / JSONL file given to any CLI is one line ``path:line: what; how to fix``, exit 2,
no traceback (``--debug`` shows it); the shared readers in ``medagentgym.tasks._files`` say the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym.cli import COMMANDS
from medagentgym.tasks._files import FileFormatError, iter_jsonl, load_json, load_yaml

ROOT = Path(__file__).resolve().parents[2]
#: "evaluate.py" -> "eval": the command that replaced each script (medagentgym.cli.COMMANDS)
_COMMAND = {f"{module}.py": name for name, (module, _) in COMMANDS.items()}


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medagentgym", _COMMAND[script], *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, proc.stdout, err)
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_readers_point_at_the_line(tmp_path):
    y = tmp_path / "a.yaml"
    y.write_text("a: 1\nb: [2\nc: 3\n")
    with pytest.raises(FileFormatError, match=rf"^{y}:3: .*flow sequence that starts at line 2"):
        load_yaml(y)
    j = tmp_path / "a.json"
    j.write_text('{\n  "a": 1,\n  "b": \n}\n')
    with pytest.raises(FileFormatError, match=rf"^{j}:4: Expecting value \(column 1\); fix the JSON"):
        load_json(j)
    jl = tmp_path / "a.jsonl"
    jl.write_text('{"a": 1}\n\n{"a": 2,}\n')
    rows = iter_jsonl(jl)
    assert next(rows) == (1, {"a": 1})
    with pytest.raises(FileFormatError, match=rf"^{jl}:3: .*each line must be one JSON object"):
        next(rows)
    with pytest.raises(FileFormatError, match="no such file"):
        load_yaml(tmp_path / "missing.yaml")
    (tmp_path / "latin.yaml").write_bytes(b"a: \xe9\n")
    with pytest.raises(FileFormatError, match="not UTF-8"):
        load_yaml(tmp_path / "latin.yaml")


def test_leaderboard_names_the_bad_report_line(tmp_path):
    report = tmp_path / "report.json"
    report.write_text('{"policy": "x",\n "success_rate": 0.5,\n "per_family": {,}}\n')
    err = _one_line_error(_run("leaderboard.py", str(report), "--out", str(tmp_path / "lb")))
    assert f"{report}:3: " in err and "fix the JSON" in err


def test_evaluate_names_the_bad_scores_line(tmp_path):
    scores = tmp_path / "scores.jsonl"
    scores.write_text(json.dumps({"task_id": "toy_sql/test/0000", "sample_idx": 0, "score": 0.5}) + "\n{oops\n")
    from medagentgym.cli import evaluate as module

    with pytest.raises(ValueError, match=rf"^{scores}:2: "):
        module.read_scores(scores)


def test_build_tasks_names_the_bad_family_yaml_line(tmp_path):
    fam = tmp_path / "mine"
    fam.mkdir()
    (fam / "family.yaml").write_text("name: mine\nanswer_type: integer\nactions: [submit_answer\n")
    err = _one_line_error(_run("build_tasks.py", "--families", "mine", "--out", str(tmp_path), "--no-progress"))
    assert f"{fam / 'family.yaml'}:4: " in err and "fix the YAML at that line" in err
    debug = _run("build_tasks.py", "--families", "mine", "--out", str(tmp_path), "--no-progress", "--debug")
    assert debug.returncode == 2 and "Traceback" in debug.stderr
