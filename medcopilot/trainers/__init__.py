"""Trainers, one module per method: ``sft``, ``dpo``, ``grpo`` (TRL), ``ppo`` (in house) and ``verifier``.

The contract ``train.py`` relies on, for every ``medagentgym.medcopilot.trainers.<method>``:

* ``run(cfg: RecipeConfig) -> dict``: trains, resuming from the newest ``checkpoint-*`` under ``cfg.output.dir``
  when there is one; saves the final model (or LoRA adapter) and tokenizer to ``cfg.output.dir``, plus
  ``trainer_state.json`` and ``train_results.json``; returns a JSON-able summary with at least ``output_dir``
  and ``global_step`` (see :func:`medagentgym.medcopilot.trainers._common.finish_run`).
* ``train.py`` saves the resolved recipe to ``<output.dir>/recipe.yaml`` before calling ``run`` and pushes to the
  Hub after it when ``output.push_to_hub`` is set; ``run`` does neither.

Example:
    >>> summary = get_trainer("sft").run(load_recipe("sft_tiny"))   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from types import ModuleType

from medagentgym.medcopilot.config import RecipeError

#: Method name -> module path. Modules are imported on demand (they import torch and TRL).
METHODS = {m: f"medagentgym.medcopilot.trainers.{m}" for m in ("sft", "dpo", "grpo", "ppo", "verifier")}

__all__ = ["METHODS", "get_trainer"]


def get_trainer(method: str) -> ModuleType:
    """Import the trainer module of ``method`` (it exposes ``run(cfg)``).

    Raises:
        RecipeError: For an unknown method, or a module that is not installed or has no ``run``.
    """
    if method not in METHODS:
        raise RecipeError(f"method={method!r} is unknown; choose one of {', '.join(METHODS)}")
    try:
        module = importlib.import_module(METHODS[method])
    except ModuleNotFoundError as exc:
        if exc.name != METHODS[method]:
            raise
        raise RecipeError(f"method={method!r}: {METHODS[method]} is not available in this checkout") from exc
    if not callable(getattr(module, "run", None)):
        raise RecipeError(f"{METHODS[method]} has no run(cfg) function")
    return module
