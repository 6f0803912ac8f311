"""MedAgentGym: an executable training ground for code-using biomedical LLM agents.

The public API, without torch::

    import medagentgym as mag

    fam = mag.make("toy_sql", root="artifacts/tasks")           # a task family (medagentgym.tasks)
    fam.build("artifacts/tasks", size="tiny", seed=0)
    spec = mag.EnvSpec(tasks_root="artifacts/tasks")             # episodes in the bubblewrap sandbox
    result = mag.rollout(fam.instances("test")[:5], "oracle", spec, k=2)
    report = mag.evaluate(result.trajectories)                   # success, intervals, Pass@K, errors
    mag.write_report(report, "runs/eval/oracle")                 # report.md, report.json, plots

The task families live in :mod:`medagentgym.tasks`, the adapters to other RL libraries in
:mod:`medagentgym.adapters`, the command line (``medagentgym build | eval | train ...``) in
:mod:`medagentgym.cli`. ``import medagentgym`` imports nothing else: every public name below is loaded on first
use, so importing a task family never pulls in the episode or server layers above it (and never torch). Third-party
families register through the ``medagentgym.families`` entry point group (docs/add_a_family.md).
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
    "build": "medagentgym.tasks.registry:build_families",
    "check_build": "medagentgym.tasks.builds:check_build",
    "Instance": "medagentgym.tasks.base:Instance",
    "Env": "medagentgym.env_client:Env",
    "EnvConfig": "medagentgym.env_client.episode:EnvConfig",
    "EnvSpec": "medagentgym.env_client.rollout:EnvSpec",
    "rollout": "medagentgym.env_client.rollout:rollout",
    "make_policy": "medagentgym.env_client.policies:make_policy",
    "evaluate": "medagentgym.env_client.evaluation:evaluate",
    "write_report": "medagentgym.env_client.evaluation:write_report",
    "leaderboard": "medagentgym.env_client.evaluation:leaderboard",
    "Trajectory": "medagentgym.env_client.trajectory:Trajectory",
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
