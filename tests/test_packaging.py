"""Packaging: the base install is the environment without torch; declared dependencies match what the code imports.

* Every third-party module imported by ``sandbox``, ``medagentgym.tasks``, ``env_client``, ``rewards`` and
  ``medagentgym``'s own modules (its API and command dispatcher) is a base dependency; ``medcopilot`` and
  ``train.py`` may also use ``[train]``; a command module (``medagentgym/cli/``) or a script may use ``[train]``
  only if it imports ``medcopilot``; tests may use any extra. The few optional imports of the environment packages are listed
  in :data:`OPTIONAL` with their extra, and must sit inside a function (imported only when used).
* Every base and ``[train]`` dependency is imported somewhere, or listed in :data:`NOT_IMPORTED` with the reason.
* The slow test installs the base package into a fresh venv (``pip install <clone>``, no torch pinned anywhere),
  checks that no training-stack package came with it, that ``medagentgym --help`` and ``import medagentgym`` work
  without torch, runs the oracle on toy_sql in the bubblewrap sandbox through the ``medagentgym`` command from a
  folder whose ``sandbox/``, ``tasks/``, ``env_client/`` and ``rewards/`` would shadow our packages if anything
  resolved from the working directory, then installs AdapterHub's ``adapters`` beside it and checks that both
  import as themselves.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
ENV_PACKAGES = ("sandbox", "medagentgym/__init__.py", "medagentgym/__main__.py", "medagentgym/cli/__init__.py",
                "medagentgym/tasks", "env_client", "rewards")
#: Never in the base install (the environment): the training stack and the GPU/cluster extras.
TRAINING_STACK = {"torch", "transformers", "trl", "peft", "accelerate", "datasets", "wandb", "safetensors",
                  "tokenizers", "huggingface-hub", "vllm", "ray", "deepspeed"}
#: Optional imports of the environment packages: (package, module) -> the extra that provides the module.
OPTIONAL = {
    ("env_client", "torch"): "train",         # medagentgym.env_client.tokens: token-level trajectories built for the trainers
    ("env_client", "transformers"): "train",  # the hf:PATH policy
    ("env_client", "huggingface_hub"): "train",  # the hf:PATH policy: is a Hub id in the local cache?
    ("env_client", "vllm"): "gpu",            # the vllm:PATH policy
    ("env_client", "ray"): "ray",             # the ray rollout backend
    ("scripts/bench_scale.py", "ray"): "ray",  # --scale-out's two-node Ray cluster
}
#: Declared but never imported by our code, and why they are declared anyway.
NOT_IMPORTED = {
    "lifelines": "the agents' code in the sandbox (the ml zygote preloads it by name)",
    "biopython": "the agents' code in the sandbox (biocoder/biodsbench-style analyses import Bio)",
    "wandb": "TRL and accelerate import it when trainer.report_to names it (the GPU recipes do)",
}


def _norm(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(requirement: str) -> str:
    return _norm(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


@pytest.fixture(scope="module")
def declared() -> dict[str, set[str]]:
    """``{"base": names, "<extra>": names}`` from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    groups = {"base": {_req_name(r) for r in project["dependencies"]}}
    groups.update({extra: {_req_name(r) for r in reqs}
                   for extra, reqs in project.get("optional-dependencies", {}).items()})
    return groups


def _python_files(scope: str) -> list[Path]:
    path = ROOT / scope
    return [path] if path.is_file() else sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)


def _local_names() -> set[str]:
    names = {"scripts", "train", "tests", "medagentgym", "sandbox", "env_client", "rewards", "medcopilot",
             "medagentgym_verifiers", "medagentgym_env"}  # medagentgym_env: integrations/openenv's package
    names |= {p.stem for p in (ROOT / "tests").rglob("*.py")}  # test helpers imported by their bare name
    return names


def _imports(files: list[Path]) -> dict[str, list[tuple[Path, bool]]]:
    """``top-level module -> [(file, inside_a_function)]`` for the absolute third-party imports in ``files``."""
    local, std = _local_names(), set(sys.stdlib_module_names)
    found: dict[str, list[tuple[Path, bool]]] = {}

    def visit(node: ast.AST, path: Path, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            modules = []
            if isinstance(child, ast.Import):
                modules = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                modules = [child.module]
            for module in modules:
                top = module.split(".")[0]
                if top not in std and top not in local:
                    found.setdefault(top, []).append((path, in_function))
            visit(child, path, nested)

    for path in files:
        visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), path, False)
    return found


@functools.cache
def _module_owners() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # scans every installed distribution: once


def _distributions(module: str) -> set[str]:
    """Distributions that provide ``module`` when installed; else its own name (e.g. vllm on a CPU machine). An
    installed distribution named like the module counts too (fastmcp 4 installs its module through fastmcp-slim)."""
    owners = {_norm(d) for d in _module_owners().get(module, [])}
    if owners and _norm(module) not in owners:
        try:
            importlib.metadata.distribution(module)
            owners.add(_norm(module))
        except importlib.metadata.PackageNotFoundError:
            pass
    return owners or {_norm(module)}


def _undeclared(scope: str, allowed: set[str], declared: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, uses in sorted(_imports(_python_files(scope)).items()):
        dists = _distributions(module)
        if dists & allowed:
            continue
        extra = OPTIONAL.get((scope, module))
        where = ", ".join(sorted({os.path.relpath(p, ROOT) for p, _ in uses}))
        if extra is None:
            problems.append(f"{module} ({where}) is not declared for {scope}: add {min(dists)} to "
                            f"pyproject.toml, or list it in OPTIONAL with its extra")
        elif not dists & declared.get(extra, set()):
            problems.append(f"{module} ({where}) is listed as optional in [{extra}], which does not declare it")
        elif not all(in_function for _, in_function in uses):
            problems.append(f"{module} ({where}) is optional ([{extra}]) but imported at module level")
    return problems


def test_environment_packages_import_only_base_dependencies(declared):
    problems = [p for scope in ENV_PACKAGES for p in _undeclared(scope, declared["base"], declared)]
    assert not problems, "\n".join(problems)


def test_policy_side_and_scripts_import_only_what_their_extra_declares(declared):
    train = declared["base"] | declared["train"]
    problems = _undeclared("medcopilot", train, declared) + _undeclared("train.py", train, declared)
    commands = sorted((ROOT / "medagentgym" / "cli").glob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
    for script in commands:
        tree = ast.parse(script.read_text(encoding="utf-8"))
        uses_policy_side = any(isinstance(n, (ast.Import, ast.ImportFrom)) and "medcopilot" in ast.dump(n)
                               for n in ast.walk(tree))
        # A command of the environment (build, rollout, eval, serve) must run on the base install.
        scope = script.relative_to(ROOT).as_posix()
        problems += _undeclared(scope, train if uses_policy_side else declared["base"], declared)
    # The adapters (outer ring) may use the environment, the training stack (TRL's environment_factory) and the
    # libraries of their own extras.
    adapter_extras = ("openenv", "gymnasium", "skyrl", "verifiers")
    problems += _undeclared("medagentgym/adapters", train.union(*(declared[e] for e in adapter_extras)), declared)
    everything = set().union(*declared.values())
    problems += _undeclared("tests", everything, declared)
    assert not problems, "\n".join(problems)


def test_every_base_and_train_dependency_is_used(declared):
    imported = set()
    for scope in (*ENV_PACKAGES, "medcopilot", "medagentgym/cli", "scripts", "train.py"):
        for module in _imports(_python_files(scope)):
            imported |= _distributions(module)
    unused = sorted((declared["base"] | declared["train"]) - imported - set(NOT_IMPORTED))
    assert not unused, f"declared but never imported (drop them, or say why in NOT_IMPORTED): {unused}"
    stale = sorted(set(NOT_IMPORTED) & imported)
    assert not stale, f"NOT_IMPORTED lists packages the code does import: {stale}"


def test_base_install_has_no_training_stack_and_train_extra_has_it(declared):
    assert not declared["base"] & TRAINING_STACK, sorted(declared["base"] & TRAINING_STACK)
    assert {"torch", "transformers", "trl", "peft", "accelerate", "datasets"} <= declared["train"]
    # The installed metadata (what pip resolves for `pip install medagentgym`) agrees with pyproject.toml.
    requires = importlib.metadata.requires("medagentgym") or []
    base = {_req_name(r) for r in requires if "extra ==" not in r}
    train = {_req_name(r) for r in requires if re.search(r"extra\s*==\s*['\"]train['\"]", r)}
    assert (base, train) == (declared["base"], declared["train"]), (
        "the installed medagentgym metadata differs from pyproject.toml; reinstall with `make venv`")


def test_dependency_check_catches_an_undeclared_import(tmp_path, monkeypatch, declared):
    """The checker itself: a module-level import of an undeclared or optional package is reported."""
    probe = tmp_path / "probe.py"
    probe.write_text("import threadpoolctl\nimport torch\n\ndef f():\n    import transformers\n")
    monkeypatch.setattr(sys.modules[__name__], "_python_files", lambda scope: [probe])
    base_without = declared["base"] - {"threadpoolctl"}
    problems = _undeclared("env_client", base_without, declared)
    assert len(problems) == 2
    assert problems[0].startswith("threadpoolctl (") and "is not declared for env_client" in problems[0]
    assert problems[1].startswith("torch (") and "imported at module level" in problems[1]


# ---------------------------------------------------------------------------------------------- a fresh venv
def _copy_sources(dest: Path) -> None:
    """What a clone holds for installing the package: pyproject, README and the packages."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("medagentgym", "sandbox", "env_client", "rewards", "medcopilot"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)


#: Folders named like our packages in the working directory, each of whose import fails loudly.
_SHADOWS = ("sandbox", "tasks", "env_client", "rewards", "medagentgym")


def _shadowing_folders(work: Path) -> None:
    for name in _SHADOWS:
        (work / name).mkdir()
        (work / name / "__init__.py").write_text(f'raise ImportError("the working directory has {name}/")\n')


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the oracle episode runs in the bubblewrap sandbox")
def test_pip_install_gives_the_medagentgym_command_without_torch_beside_adapterhub(tmp_path):
    """``pip install <clone>`` into a new venv: the command and the API without torch, nothing read from the working
    directory, then AdapterHub's ``adapters`` installed beside it with both importing as themselves.

    Uses the pip configuration of the machine (local wheels and indexes first); takes minutes the first time.
    """
    src = tmp_path / "src"
    src.mkdir()
    _copy_sources(src)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    started = time.monotonic()
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=600)
    py, cli = str(venv / "bin" / "python"), str(venv / "bin" / "medagentgym")
    install = subprocess.run([py, "-m", "pip", "install", "-q", str(src)], capture_output=True, text=True,
                             env=env, timeout=1200, check=False)
    assert install.returncode == 0, install.stderr[-3000:]
    installed = json.loads(subprocess.run([py, "-m", "pip", "list", "--format", "json"], capture_output=True,
                                          text=True, env=env, check=True).stdout)
    names = {_norm(row["name"]) for row in installed}
    print(f"fresh base install: {len(names)} distributions in {time.monotonic() - started:.0f} s: "
          f"{', '.join(sorted(names))}")
    assert "medagentgym" in names and not names & TRAINING_STACK, sorted(names & TRAINING_STACK)

    work = tmp_path / "work"  # not the source copy, and full of folders named like our packages
    work.mkdir()
    _shadowing_folders(work)

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True, timeout=600,
                              check=False)
        assert (done.returncode == 0) == ok, f"{args}: {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    helped = run(cli, "--help").stdout
    assert "usage: medagentgym <command>" in helped and "eval" in helped and "train" in helped
    api = run(py, "-P", "-c", "import sys, medagentgym as m; m.make; m.EnvSpec; m.evaluate; m.rollout; "
                              "print(sorted(x for x in ('torch', 'transformers', 'medagentgym.medcopilot') if x in sys.modules))")
    assert api.stdout.strip() == "[]"
    where = json.loads(run(cli, "info", "--json").stdout)["packages"]
    assert all(str(venv) in path and str(work) not in path for path in where.values()), where
    run(cli, "build", "--families", "toy_sql", "--size", "tiny", "--out", "built", "--no-progress")
    play = run(cli, "rollout", "--tasks-root", "built", "--families", "toy_sql", "--policy", "oracle", "--limit", "3",
               "--sandbox", "bwrap", "--json", "--no-progress")
    summary = json.loads(play.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 3 and summary["success_rate"] == 1.0
    # `python -m medagentgym` imports medagentgym itself before our code runs (runpy), so a medagentgym/ folder in
    # the working directory is beyond any package's reach there; the others it drops from sys.path
    shutil.rmtree(work / "medagentgym")
    module = run(py, "-m", "medagentgym", "info", "--json")
    assert json.loads(module.stdout)["packages"] == where
    no_torch = run(py, "-c", "import torch", ok=False)
    assert "No module named 'torch'" in no_torch.stderr

    # AdapterHub's `adapters` (a PEFT library) beside it: torch first from the local CPU wheel, as `make venv` does
    extra = subprocess.run([py, "-m", "pip", "install", "-q", "torch==2.13.0", "adapters"], capture_output=True,
                           text=True, env=env, timeout=1800, check=False)
    assert extra.returncode == 0, extra.stderr[-3000:]
    both = run(py, "-P", "-c", "import adapters, medagentgym.adapters as ours, medagentgym; "
                               "from adapters import AutoAdapterModel; "
                               "print(adapters.__file__); print(ours.__file__); print(medagentgym.__version__)")
    theirs, ours, _ = both.stdout.strip().splitlines()
    assert theirs.endswith("site-packages/adapters/__init__.py"), theirs
    assert ours.endswith("site-packages/medagentgym/adapters/__init__.py"), ours
    assert "usage: medagentgym <command>" in run(cli, "--help").stdout
    assert json.loads(run(cli, "info", "--json").stdout)["packages"] == where


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_installed_train_extra_runs_bundled_recipes_and_sweeps_by_name_from_any_folder(tmp_path):
    """``pip install '<clone>[train]'`` (not editable) into a new venv, then, from a folder that is no clone:
    ``medagentgym train recipe=sft_tiny --dry-run`` and ``medagentgym sweep pipeline_tiny --dry-run`` find the bundled
    recipes and sweeps in the installed package (package data; the copy has no repository-root ``recipes/``), a
    ``recipes/`` folder in the working directory is never read for a name, and a user's own recipe file is read by its
    path. Installs the CPU torch first, as ``make venv`` does (minutes the first time)."""
    src = tmp_path / "src"
    src.mkdir()
    _copy_sources(src)
    shutil.copy2(ROOT / "constraints.txt", src / "constraints.txt")
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=600)
    py, cli = str(venv / "bin" / "python"), str(venv / "bin" / "medagentgym")
    for args in (["torch==2.13.0"], ["-c", str(src / "constraints.txt"), f"{src}[train]"]):
        install = subprocess.run([py, "-m", "pip", "install", "-q", *args], capture_output=True, text=True, env=env,
                                 timeout=1800, check=False)
        assert install.returncode == 0, install.stderr[-3000:]

    work = tmp_path / "work"
    (work / "recipes" / "sweeps").mkdir(parents=True)  # decoys: a name never resolves from the working directory
    (work / "recipes" / "sft_tiny.yaml").write_text("method: not_a_method\n")
    (work / "recipes" / "sweeps" / "pipeline_tiny.yaml").write_text("stages: 3\n")

    def run(*args: str) -> str:
        done = subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    bundled = Path(run(py, "-P", "-c", "from medagentgym.medcopilot.config import RECIPES_DIR; print(RECIPES_DIR)").strip())
    assert bundled.is_relative_to(venv) and "site-packages" in str(bundled), bundled
    assert (bundled / "accelerate" / "zero2.yaml").is_file() and (bundled / "sweeps" / "paper_tiny.yaml").is_file()
    assert "dry run: recipe 'sft_tiny' is valid" in run(cli, "train", "recipe=sft_tiny", "--dry-run")
    assert "a chain of 3 stages" in run(cli, "sweep", "pipeline_tiny", "--dry-run")
    own = (bundled / "sft_tiny.yaml").read_text().replace("max_steps: 5", "max_steps: 3")
    (work / "mine.yaml").write_text(own)
    assert "max_steps: 3" in run(cli, "train", "recipe=mine.yaml", "--dry-run")


def test_the_wheel_build_trims_exactly_the_deprecated_names():
    """setup.py ships only ``__init__.py`` of the old top-level packages: its list is medagentgym/_compat.py's."""
    import ast

    from medagentgym._compat import ALIASES

    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    (names,) = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["OLD_NAMES"]]
    assert sorted(names) == sorted(ALIASES)
