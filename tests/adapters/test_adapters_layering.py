"""medagentgym/adapters/ is the outer ring: no inner package imports it, and importing the package itself pulls in none of the
optional libraries (each adapter module imports its own, with an error naming the extra when it is missing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INNER = ["medagentgym.tasks", "medagentgym.sandbox", "medagentgym.env_client", "medagentgym.env_client.server_app",
         "medagentgym.env_client.http_client", "medagentgym.rewards", "medagentgym.medcopilot.config",
         "medagentgym.medcopilot.sweep"]
OPTIONAL = ("openenv", "gymnasium", "skyrl_gym", "verifiers", "trl", "torch")


def _loaded(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_inner_packages_never_import_adapters():
    loaded = _loaded(f"import importlib\nfor m in {INNER!r}: importlib.import_module(m)")
    assert not [m for m in loaded if m.startswith("medagentgym.adapters")]


def test_the_package_and_its_common_module_import_no_optional_library():
    loaded = _loaded("import medagentgym.adapters, medagentgym.adapters._common")
    assert not [m for m in loaded if m.split(".")[0] in OPTIONAL]
