"""Test helper kept for ``test_sweep.py``: the learning pieces live in :mod:`medagentgym.medcopilot.learning`."""

from __future__ import annotations

from pathlib import Path

from medagentgym.medcopilot.learning import declare_say_number


def declare_family(root: Path, name: str, questions: list[str]) -> Path:
    """Declare a one-turn submit-7 family ``name`` with ``questions`` under the tasks root ``root``."""
    return declare_say_number(root, tuple(questions), name=name)
