"""docs/adapters.md names the library versions the adapters are tested with: this fails when an installed version
differs from its table (update the table, or the environment), so the page stays true."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"


def test_the_versions_table_matches_what_is_installed():
    section = DOC.read_text(encoding="utf-8").split("## Versions tested", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| ([a-z][a-z0-9-]*) \| ([0-9][^ |]*) \|", section, flags=re.MULTILINE))
    assert set(rows) == {"openenv-core", "fastmcp", "trl", "verifiers", "skyrl-gym", "gymnasium"}
    installed = {name: importlib.metadata.version(name) for name in rows}
    assert rows == installed, f"docs/adapters.md says {rows}, installed: {installed}"
