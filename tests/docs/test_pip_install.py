"""The documented commands from a ``pip install``: the project's wheel, installed into a fresh venv, run from an
empty folder outside the repository.

The other doc tests run README's "Using it", docs/tutorial.md and docs/add_a_family.md in a copy of the
repository (a clone). Here the same commands, parsed from the same markdown by those tests' own parsers (so the
docs and the tests cannot drift), run as a ``pip install`` user runs them: the wheel (``pip wheel --no-deps
--no-build-isolation``, offline) goes into a new venv with ``pip install --no-index --no-deps``; that venv finds
the dependencies through a ``.pth`` of plain directory lines naming the running interpreter's site-packages
(plain lines: an editable install's ``.pth`` there, which would put a clone on ``sys.path``, is never
processed), and the commands run in an empty temporary folder, the repository nowhere on ``sys.path``.

A pip user types ``medagentgym`` and ``python`` for the clone's ``.venv/bin/medagentgym`` and
``.venv/bin/python``, and ``medagentgym train`` for the clone's ``train.py`` (:func:`pip_user_command`, as the
docs say); ``make`` targets and ``scripts/`` come with a clone only and are skipped (the docs say so too). Files a
user supplies stand beside them as in the clone tests (the public task file of README's import; the example
family package of add_a_family.md, which a user writes or copies). After the commands, each doc test's own
output checks run on the folder.

The fast test checks the wheel's file list: every file in the packages' source folders (the code's modules and
every data file it opens: family assets, vocabularies, recipes, sweeps, the sandbox's Dockerfile) is in it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The packages the wheel ships (pyproject.toml's [tool.setuptools] packages).
PACKAGES = ("medagentgym", "medcopilot", "env_client", "sandbox", "rewards", "medagentgym_verifiers")
#: The deprecated top-level names (medagentgym/_compat.py): their folders are medagentgym/<name> in the wheel.
OLD_NAMES = ("sandbox", "rewards", "env_client", "medcopilot")


def _builds_wheels() -> bool:
    """Whether this interpreter builds a wheel offline: setuptools has ``bdist_wheel`` itself (70.1+) or through
    the ``wheel`` package (the [dev] extra)."""
    import setuptools

    version = tuple(int(part) for part in re.findall(r"\d+", setuptools.__version__)[:2])
    return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


needs_wheel_build = pytest.mark.skipif(
    shutil.which("git") is None or not _builds_wheels(),
    reason="building the wheel offline needs git (the copy) and setuptools>=70.1 or `wheel` ([dev]: make venv)")


def _doc_test(relative: str):
    """A doc test module, loaded by its path under a private name: its parser and its output checks."""
    spec = importlib.util.spec_from_file_location(f"_pip_{Path(relative).stem}", ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pip_user_command(command: str) -> tuple[str | None, str]:
    """``(the command a pip user runs, "")`` for a documented command of a clone, or ``(None, why)`` for one that
    needs a clone.

    Example:
        >>> pip_user_command(".venv/bin/python train.py recipe=sft_tiny --dry-run")
        ('medagentgym train recipe=sft_tiny --dry-run', '')
    """
    if command.split()[0] == "make":
        return None, "a make target: the clone's Makefile"
    if re.search(r"(^|\s)scripts/", command):
        return None, "scripts/ come with a clone, not with the package"
    command = re.sub(r"^\.venv/bin/python train\.py(?=\s|$)", "medagentgym train", command)
    return re.sub(r"^\.venv/bin/(medagentgym|python)(?=\s|$)", r"\1", command), ""


def test_pip_user_commands():
    assert pip_user_command(".venv/bin/medagentgym eval --policy oracle") == ("medagentgym eval --policy oracle", "")
    assert pip_user_command('.venv/bin/python -c "import medagentgym"') == ('python -c "import medagentgym"', "")
    assert pip_user_command(".venv/bin/python train.py recipe=ppo_tiny")[0] == "medagentgym train recipe=ppo_tiny"
    assert pip_user_command("medagentgym build --families bmi") == ("medagentgym build --families bmi", "")
    assert pip_user_command("make venv")[0] is None
    assert pip_user_command(".venv/bin/python scripts/bench_sandbox.py --quick")[0] is None
    assert pip_user_command(".venv/bin/python train_more.py")[0] == "python train_more.py"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory, repo_copy) -> Path:
    """The project's wheel, built offline from a clone-like copy (never in the working tree: no build/ left)."""
    src = repo_copy(tmp_path_factory.mktemp("wheel") / "src")
    (src / ".venv").unlink()
    dist = src.parent / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(dist), str(src)], capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = dist.glob("medagentgym-*.whl")
    return built


@needs_wheel_build
def test_the_wheel_holds_every_module_and_data_file_of_the_packages(wheel):
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "--",
                             *PACKAGES], capture_output=True, text=True, check=True).stdout.split()
    files = [rel for rel in listed if (ROOT / rel).is_file() and "__pycache__" not in rel]
    assert any(rel.endswith(".tsv") for rel in files) and "medcopilot/recipes/sweeps/paper_tiny.yaml" in files
    shipped = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(rel for rel in files if rel not in shipped and f"medagentgym/{rel}" not in shipped)
    assert not missing, f"not in the wheel (add them to pyproject.toml's package-data): {missing}"
    # the deprecated top-level names ship as their __init__.py alone (setup.py): no module is in the wheel twice
    old = sorted(name for name in shipped if name.split("/")[0] in OLD_NAMES)
    assert old == sorted(f"{name}/__init__.py" for name in OLD_NAMES), old


@needs_wheel_build
def test_the_old_import_names_work_from_the_wheel_alone(wheel, tmp_path):
    """The deprecated names (sandbox, rewards, env_client, medcopilot) and their submodules, from the unpacked
    wheel, the repository nowhere on sys.path (``-S``: no .pth runs): the same module objects as the new names,
    every file loaded from the wheel's medagentgym/ folder."""
    site_dir, work = tmp_path / "site", tmp_path / "work"
    zipfile.ZipFile(wheel).extractall(site_dir)
    work.mkdir()
    probe = textwrap.dedent("""
        import importlib, importlib.util, json, sys
        old = dict(arg.split(":") for arg in sys.argv[1:])  # old name -> a submodule (imported by the old name)
        origins = [importlib.util.find_spec(name).origin for name in old]
        same = []
        for name, sub in old.items():
            module = importlib.import_module(f"{name}.{sub}")
            same += [module is importlib.import_module(f"medagentgym.{name}.{sub}"),
                     importlib.import_module(name) is importlib.import_module(f"medagentgym.{name}")]
        first = next(iter(old))  # sandbox: a name its __init__ defines, through the old name
        same.append(importlib.import_module(first).Limits is importlib.import_module(f"medagentgym.{first}").Limits)
        files = sorted({m.__file__ for n, m in list(sys.modules.items()) if getattr(m, "__file__", None)
                        and n.split(".")[0] in ("medagentgym", *old)})
        print(json.dumps({"origins": origins, "files": files, "same": same}))
    """)
    submodules = [f"{name}:{sub}" for name, sub in zip(OLD_NAMES, ("api", "oracle", "trajectory", "trainers.grpo"))]
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site_dir), *deps])
    done = subprocess.run([sys.executable, "-S", "-W", "ignore::DeprecationWarning", "-c", probe, *submodules],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(result["same"]), result["same"]
    assert result["origins"] == [str(site_dir / name / "__init__.py") for name in OLD_NAMES], result["origins"]
    assert result["files"] and all(Path(f).is_relative_to(site_dir / "medagentgym") for f in result["files"]), [
        f for f in result["files"] if not Path(f).is_relative_to(site_dir / "medagentgym")]


@pytest.fixture
def pip_user(wheel, tmp_path) -> dict[str, str]:
    """The environment of a user who ran ``pip install medagentgym``: a fresh venv holding the wheel, finding the
    dependencies through plain path lines; checked to import every package from that venv alone. One per test:
    add_a_family.md installs a family package into it, which ``--families all`` of README would then include."""
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=600)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    Path(purelib, "_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = ("import sys, medagentgym, medagentgym.medcopilot as medcopilot, medagentgym.env_client as env_client, medagentgym.sandbox as sandbox, medagentgym.rewards as rewards, medagentgym.cli.view as v; "
             "print('\\n'.join(m.__file__ for m in (medagentgym, medcopilot, env_client, sandbox, rewards, v))); "
             "print('\\n'.join('PATH ' + p for p in sys.path))")
    lines = subprocess.run([str(py), "-c", probe], cwd=venv.parent, env=env, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    for line in lines:
        if line.startswith("PATH "):
            path = Path(line[5:] or venv.parent).resolve()
            assert not (path / "medagentgym" / "cli").is_dir() or path.is_relative_to(venv), f"a clone on sys.path: {path}"
        else:
            assert Path(line).resolve().is_relative_to(venv.resolve()), f"not from the installed wheel: {line}"
    return env


def _run(command: str, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=1800,
                          check=False)
    assert done.returncode == 0, f"`{command}` failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    print(f"{time.monotonic() - started:6.1f} s  {command}")
    return done


def pip_doc_test(test):
    """A slow test that runs a page's commands from the pip install (in the bubblewrap sandbox)."""
    for mark in (pytest.mark.slow, pytest.mark.timeout(3600), needs_wheel_build,
                 pytest.mark.skipif(shutil.which("bwrap") is None, reason="the commands use the bubblewrap sandbox")):
        test = mark(test)
    return test


@pip_doc_test
def test_the_tutorial_runs_from_a_pip_install(pip_user, tmp_path):
    doc = _doc_test("tests/docs/test_tutorial.py")
    work = tmp_path / "work"
    work.mkdir()
    skipped = []
    for command in doc.tutorial_commands((ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")):
        mine, why = pip_user_command(command)
        if mine is None:
            skipped.append(f"{command}: {why}")
            continue
        _run(mine, work, pip_user)
    assert skipped == ["make venv: a make target: the clone's Makefile"], skipped
    doc._check_outputs(work)


@pip_doc_test
def test_add_a_family_runs_from_a_pip_install(pip_user, tmp_path):
    doc = _doc_test("tests/docs/test_add_a_family.py")
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples" / "medagentgym_bmi", work / "examples" / "medagentgym_bmi",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))  # the user's own package
    outputs = []
    for command in doc.page_commands((ROOT / "docs" / "add_a_family.md").read_text(encoding="utf-8")):
        mine, why = pip_user_command(command)
        assert mine == command, f"add_a_family.md is written for a pip user; `{command}` is not ({why})"
        outputs.append(_run(mine, work, {**pip_user, "PIP_NO_INDEX": "1"}).stdout)  # offline: no package index
    doc.check_outputs(work, outputs)


@pip_doc_test
def test_readme_commands_run_from_a_pip_install(pip_user, tmp_path):
    doc = _doc_test("tests/scripts/test_readme_commands.py")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "tests" / "fixtures" / "import_ehr" / "eicu_valid_tasks.jsonl", work / "valid_tasks.jsonl")
    ran = 0
    for command, comment in doc.readme_commands((ROOT / "README.md").read_text(encoding="utf-8")):
        mine, _ = pip_user_command(command)
        if mine is None or "gpu" in comment.lower():
            continue
        if re.search(r"--port[ =](\d+)", mine):
            port = doc.free_port()
            doc._serve(re.sub(r"--port[ =]\d+", f"--port {port}", mine), work, port, env=pip_user)
        else:
            _run(shlex.join(shlex.split(mine)), work, pip_user)
        doc._check_outputs(command, work)
        ran += 1
    assert ran >= 10
