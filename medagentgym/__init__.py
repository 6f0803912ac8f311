"""MedAgentGym: an executable training ground for code-using biomedical LLM agents.

The task families live in :mod:`medagentgym.tasks` and the adapters to other RL libraries in
:mod:`medagentgym.adapters`. ``import medagentgym`` imports nothing else: every public name below is loaded on first
use, so importing a task family never pulls in the episode or server layers above it (and never torch).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> "module:attribute", imported on first access (PEP 562)
_LAZY = {
    "make": "medagentgym.tasks:make",
    "names": "medagentgym.tasks:names",
    "register": "medagentgym.tasks:register",
    "check_family": "medagentgym.tasks:check_family",
    "SUITES": "medagentgym.tasks:SUITES",
    "Env": "env_client:Env",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'medagentgym' has no attribute {name!r}")
    module, attr = target.split(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
