"""Med-Copilot: the policy side of MedAgentGym (recipes, model loading, trainers, export).

Importing this package is cheap: torch, transformers and TRL are imported inside the functions that need them,
so ``train.py --dry-run`` can resolve and validate a recipe without touching a model.

Example:
    >>> from medagentgym.medcopilot import load_recipe
    >>> cfg = load_recipe("sft_tiny", overrides=["trainer.max_steps=2"])
"""

if not __name__.startswith("medagentgym."):  # the deprecated top-level name: an alias (medagentgym/_compat.py)
    import medagentgym._compat

    medagentgym._compat.redirect(__name__)

from medagentgym.medcopilot.config import RecipeConfig, RecipeError, load_recipe

__all__ = ["RecipeConfig", "RecipeError", "build_tiny_model", "load_recipe"]


def build_tiny_model(out_dir, *, seed: int = 0):
    """Build the tiny random Qwen2 test model; see :func:`medagentgym.medcopilot.tiny.build_tiny_model`."""
    from medagentgym.medcopilot.tiny import build_tiny_model as _build

    return _build(out_dir, seed=seed)
