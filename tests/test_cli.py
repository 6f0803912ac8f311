"""The ``medagentgym`` command: subcommands, help, one-line errors, and nothing read from the working directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "medagentgym"  # the console script of this install ([project.scripts])
#: Environment commands: their --help must not need the training stack.
ENVIRONMENT = ("build", "rollout", "eval", "leaderboard", "serve", "import", "sandbox-image", "view")


def test_help_lists_every_command_and_errors_are_one_line(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name}" in out for name in COMMANDS)
    assert main([]) == 2
    assert main(["evl"]) == 2
    assert capsys.readouterr().err.strip() == "medagentgym: error: unknown command 'evl'; did you mean `medagentgym eval`?"


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"info", "train"}))
def test_every_command_has_its_own_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert f"usage: medagentgym {command}" in capsys.readouterr().out


def test_train_help_prints_the_recipe_usage(capsys):
    assert main(["train", "--help"]) == 0
    assert "medagentgym train recipe=sft_tiny --dry-run" in capsys.readouterr().out


def test_help_and_the_environment_commands_never_import_the_training_stack():
    code = ("import sys; from medagentgym.cli import main\n"
            f"for c in {ENVIRONMENT!r}:\n"
            "    try:\n        main([c, '--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'medagentgym.medcopilot') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1200, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def shadowed(tmp_path):
    """A working directory whose folders are named like our packages: regular packages that fail on import, and
    namespace-only folders (data folders without ``__init__.py``)."""
    for name in ("sandbox", "env_client"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('the working directory\\'s {name}/')\n")
    for name in ("rewards", "tasks"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data.csv").write_text("a,b\n")
    return tmp_path


def _where(args: list[str], cwd: Path) -> dict[str, str]:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["packages"]


def test_the_command_and_python_m_read_nothing_from_the_working_directory(shadowed):
    """The console script and ``python -m medagentgym`` import our packages whatever the working directory holds
    (``python -m`` itself imports a ``medagentgym/`` package from there, before our code runs: only the console
    script is immune to that one)."""
    assert CLI.is_file(), f"{CLI} is missing: reinstall the package (make venv)"
    (shadowed / "medagentgym").mkdir()
    (shadowed / "medagentgym" / "__init__.py").write_text("raise ImportError('the working directory')\n")
    where = _where([str(CLI), "info", "--json"], shadowed)
    assert all(str(shadowed) not in path for path in where.values()), where
    (shadowed / "medagentgym" / "__init__.py").unlink()
    (shadowed / "medagentgym").rmdir()
    for args in ([str(CLI), "info", "--json"], [sys.executable, "-m", "medagentgym", "info", "--json"]):
        where = _where(args, shadowed)
        assert all(str(shadowed) not in path for path in where.values()), where
        sandbox_init = where["medagentgym.sandbox"]
        assert sandbox_init == str(ROOT / "medagentgym" / "sandbox" / "__init__.py") or "site-packages" in sandbox_init


def test_a_data_folder_named_like_a_package_does_not_shadow_it(shadowed):
    """``python -c``/pytest put the working directory first; a folder without ``__init__.py`` there must not
    become our ``rewards`` (setuptools' editable finder loses to it, a path entry or a real install does not)."""
    code = "import json, medagentgym.rewards as rewards, medagentgym.sandbox.api; print(json.dumps([rewards.__file__, medagentgym.sandbox.api.__file__]))"
    (shadowed / "sandbox" / "__init__.py").unlink()  # a data folder too, now
    done = subprocess.run([sys.executable, "-c", code], cwd=shadowed, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, (f"a data folder in the working directory shadows our package ({done.stderr[-300:]}); "
                                  "reinstall with `make venv` (editable_mode=compat)")
    rewards_file, api_file = json.loads(done.stdout)
    assert rewards_file and str(shadowed) not in rewards_file and str(shadowed) not in api_file


@pytest.mark.parametrize("command", [["tiny-model", "{tmp}/tiny"], ["demo", "--steps", "1", "--out", "{tmp}/demo"]])
def test_training_commands_on_a_torch_free_install_end_with_one_line(command, tmp_path):
    """No torch (an install without [train]): the command says what to install, in one line, with no traceback."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    code = ("import sys\nfor m in ('torch', 'transformers', 'trl', 'peft'): sys.modules[m] = None\n"
            f"from medagentgym.cli import main\nsys.exit(main({argv!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False,
                          cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"medagentgym {command[0]}: error: 'torch' is not "
                                                            f"installed; this command needs the training stack: "
                                                            f"pip install 'medagentgym[train]'")
