"""Layering: the environment packages never pull in the training stack, and sandbox never imports upward."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ENV_PACKAGES = ("medagentgym.tasks", "medagentgym.sandbox", "medagentgym.env_client", "medagentgym.rewards")
FORBIDDEN = ("torch", "transformers", "trl", "peft", "accelerate", "medagentgym.medcopilot")
ROOT = Path(__file__).resolve().parents[1]
#: The deprecated top-level names (issue #33), aliases of the medagentgym.* packages: a module loaded under either
#: name counts as the same layer (medagentgym/_compat.py maps them to one module object).
OLD_NAMES = {"sandbox": "medagentgym.sandbox", "rewards": "medagentgym.rewards", "env_client": "medagentgym.env_client",
             "medcopilot": "medagentgym.medcopilot"}


def canonical(module: str) -> str:
    """``medagentgym.sandbox.pool`` for ``medagentgym.sandbox.pool`` (and itself for a new name)."""
    top, dot, rest = module.partition(".")
    return OLD_NAMES[top] + dot + rest if top in OLD_NAMES else module


def _in(module: str, layers) -> bool:
    """Whether ``module`` (by its old or new name) is one of ``layers`` or inside one."""
    name = canonical(module)
    return any(name == layer or name.startswith(layer + ".") for layer in layers)


def _modules(package: str) -> list[str]:
    """The package and every module inside it, found on disk (no import needed)."""
    pkg_dir = ROOT.joinpath(*package.split("."))
    found = [package]
    for info in pkgutil.walk_packages([str(pkg_dir)], prefix=f"{package}."):
        found.append(info.name)
    return sorted(found)


def _loaded_after_import(modules: list[str]) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("package", ENV_PACKAGES)
def test_env_packages_do_not_import_the_training_stack(package):
    loaded = _loaded_after_import(_modules(package))
    bad = sorted(m for m in loaded if _in(m, FORBIDDEN))
    assert not bad, f"importing {package} pulled in {bad[:10]}"


UPWARD_OF_SANDBOX = ("medagentgym.env_client", "medagentgym.medcopilot", "medagentgym.tasks", "medagentgym.adapters")


def test_sandbox_does_not_import_upward():
    loaded = _loaded_after_import(_modules("medagentgym.sandbox"))
    bad = sorted(m for m in loaded if _in(m, UPWARD_OF_SANDBOX))
    assert not bad, f"sandbox imported {bad[:10]}"


def test_rewards_does_not_import_env_client_or_medcopilot():
    loaded = _loaded_after_import(_modules("medagentgym.rewards"))
    assert not [m for m in loaded if _in(m, ("medagentgym.env_client", "medagentgym.medcopilot"))]


#: What each layer's source may not import, by either name (read from the files: also an import inside a function,
#: or one a test run never reaches).
STATIC_RULES = {
    "medagentgym.sandbox": ("torch", "transformers", "trl", *UPWARD_OF_SANDBOX, "medagentgym.cli"),
    "medagentgym.rewards": ("torch", "transformers", "trl", "medagentgym.env_client", "medagentgym.medcopilot",
                            "medagentgym.cli", "medagentgym.adapters"),
    "medagentgym.tasks": ("torch", "transformers", "trl", "medagentgym.medcopilot", "medagentgym.cli",
                          "medagentgym.adapters"),
    "medagentgym.env_client": ("medagentgym.medcopilot", "medagentgym.cli", "medagentgym.adapters"),
    # medagentgym.medcopilot.sweep_eval runs `medagentgym <command>` stages through medagentgym.cli inside a function (a sweep's
    # evaluation stage): the CLI is not forbidden to it here
    "medagentgym.medcopilot": ("medagentgym.adapters",),
}


def imported_names(path: Path, package: str) -> list[str]:
    """The absolute names a source file imports (``from . import x`` resolved against ``package``), canonical."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [canonical(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = canonical(node.module or "")
            names.append(module)
            if not node.level and node.module in ("medagentgym",):
                names += [canonical(f"medagentgym.{alias.name}") for alias in node.names]
    return names


def static_violations(layer: str, forbidden) -> list[str]:
    folder = ROOT.joinpath(*layer.split("."))
    bad = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        package = ".".join([layer, *rel.parts[:-1]])  # the package a relative import starts from
        bad += [f"{path.relative_to(ROOT)} imports {name}" for name in imported_names(path, package)
                if _in(name, forbidden)]
    return bad


@pytest.mark.parametrize("layer", sorted(STATIC_RULES))
def test_no_layer_imports_what_it_may_not_by_either_name(layer):
    bad = static_violations(layer, STATIC_RULES[layer])
    assert not bad, bad[:10]


def test_the_static_rule_sees_old_and_new_names(tmp_path, monkeypatch):
    """The check is not vacuous: an upward import in sandbox/ under the old name, the new name, or via
    ``from medagentgym import ...`` is each caught."""
    fake = tmp_path / "medagentgym" / "sandbox"
    fake.mkdir(parents=True)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    for line in ("import medagentgym.env_client.rollout", "from medagentgym.medcopilot import load_recipe",
                 "from medagentgym.env_client import Env", "from medagentgym import medcopilot",
                 "import medagentgym.cli"):
        (fake / "bad.py").write_text(line + "\n")
        assert static_violations("medagentgym.sandbox", STATIC_RULES["medagentgym.sandbox"]), line
    (fake / "bad.py").write_text("from . import pool\nimport medagentgym.sandbox.api\nimport medagentgym.sandbox.api\n")
    assert not static_violations("medagentgym.sandbox", STATIC_RULES["medagentgym.sandbox"])
