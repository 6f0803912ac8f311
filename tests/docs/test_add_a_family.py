"""docs/add_a_family.md, run verbatim: a family in another package, registered by its entry point, end to end.

Every command of the page's ``bash`` blocks runs in order with ``bash -c`` in a copy of the repository, inside a
venv of its own (so installing the example package never touches the interpreter running the tests): that venv
sees this one's packages through a ``site.addsitedir`` line, and holds ``medagentgym`` itself (its console
script, no dependencies installed) and then, by the page's own ``pip install``, the example package. Afterwards the
test checks what each step should have left: the build, the contract report, the oracle at 100 % and the constant
policy at or below its floor, the family's page, and the recipe's dry run naming the bmi build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "add_a_family.md"


def page_commands(text: str) -> list[str]:
    """The commands of every ```` ```bash ```` block, in order: continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            if line.strip() and not line.strip().startswith("#"):
                commands.append(line.strip())
    return commands


def test_the_page_walks_every_step_and_the_example_registers_by_entry_point():
    commands = page_commands(PAGE.read_text(encoding="utf-8"))
    for step in ("pip install --no-build-isolation ./examples/medagentgym_bmi", "medagentgym build --families bmi",
                 "check_family('bmi'",
                 "medagentgym eval --policy oracle", "medagentgym eval --policy constant", "medagentgym pages --only bmi",
                 "medagentgym train recipe=examples/medagentgym_bmi/sft_bmi_tiny.yaml --dry-run"):
        assert any(step in command for command in commands), f"the page no longer runs {step}"
    pyproject = (ROOT / "examples" / "medagentgym_bmi" / "pyproject.toml").read_text(encoding="utf-8")
    assert '[project.entry-points."medagentgym.families"]\nbmi = "medagentgym_bmi:BMI"' in pyproject


def _venv_beside_this_one(path: Path) -> dict[str, str]:
    """A venv that sees this interpreter's packages (``addsitedir``) and has the ``medagentgym`` command."""
    subprocess.run([sys._base_executable, "-m", "venv", str(path)], check=True, timeout=600)
    py = path / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = site.getsitepackages()[0]
    Path(purelib, "_parent_env.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT),
                           "--config-settings", "editable_mode=compat"], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return env


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                    reason="check_family runs reference programs in the bubblewrap sandbox; the copy uses git")
def test_add_a_family_commands_run_verbatim(tmp_path, repo_copy):
    clone = repo_copy(tmp_path / "clone")
    (clone / ".venv").unlink()  # the page's commands run in their own venv, never in the one running the tests
    env = _venv_beside_this_one(tmp_path / "venv")
    ran, outputs = [], []
    for command in page_commands(PAGE.read_text(encoding="utf-8")):
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", command], cwd=clone, env={**env, "PIP_NO_INDEX": "1"},  # offline
                              capture_output=True, text=True, timeout=1200, check=False)
        assert done.returncode == 0, f"`{command}` failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        ran.append(f"{time.monotonic() - started:6.1f} s  {command}")
        outputs.append(done.stdout)
    print("\n".join(ran))
    check_outputs(clone, outputs)


def check_outputs(clone: Path, outputs: list[str]) -> None:
    """What each step should have left in ``clone``, given the commands' stdout in order (also used by
    tests/docs/test_pip_install.py, which runs the page from a pip install)."""
    assert outputs[1].strip() == "True"  # registered by the entry point alone
    assert json.loads((clone / "artifacts" / "tasks" / "bmi" / "manifest.json").read_text())["version"] == 1
    contract = json.loads(outputs[3].strip().splitlines()[-1])
    assert contract["oracle"] == 1.0 and contract["reference_runs"] == 5 and contract["shotgun"] == 0.0
    oracle = json.loads((clone / "runs" / "eval" / "bmi_oracle" / "report.json").read_text())
    constant = json.loads((clone / "runs" / "eval" / "bmi_constant" / "report.json").read_text())
    assert oracle["success_rate"] == 1.0 and oracle["ci95"][0] < 1.0
    floor = constant["per_family"]["bmi"]["floor"]
    assert constant["success_rate"] <= floor["floor"] <= floor["bound"]
    page = (clone / "runs" / "bmi_pages" / "bmi.md").read_text()
    assert "bmi" in page.splitlines()[0] and "body-mass index" in page
    assert "# input tasks bmi: artifacts/tasks/bmi (tiny build, version 1, test 30, train 30)" in outputs[-1]
    assert "is valid (families bmi found" in outputs[-1]
