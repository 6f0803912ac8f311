"""Layering: the environment packages never pull in the training stack, and sandbox never imports upward."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ENV_PACKAGES = ("medagentgym.tasks", "sandbox", "env_client", "rewards")
FORBIDDEN = ("torch", "transformers", "trl", "peft", "accelerate", "medcopilot")
ROOT = Path(__file__).resolve().parents[1]


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
    bad = sorted(m for m in loaded if m.split(".")[0] in FORBIDDEN)
    assert not bad, f"importing {package} pulled in {bad[:10]}"


def test_sandbox_does_not_import_upward():
    loaded = _loaded_after_import(_modules("sandbox"))
    bad = sorted(m for m in loaded
                 if m.split(".")[0] in {"env_client", "medcopilot"} or m.startswith(("medagentgym.tasks", "medagentgym.adapters")))
    assert not bad, f"sandbox imported {bad[:10]}"


def test_rewards_does_not_import_env_client_or_medcopilot():
    loaded = _loaded_after_import(_modules("rewards"))
    assert not [m for m in loaded if m.split(".")[0] in {"env_client", "medcopilot"}]
