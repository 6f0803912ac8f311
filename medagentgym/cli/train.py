"""Train a Med-Copilot policy from a recipe (``medagentgym train``, or the repository's ``train.py``).

    medagentgym train recipe=sft_tiny --dry-run
    accelerate launch train.py recipe=sft_qwen7b [section.key=value ...]
    accelerate launch -m medagentgym.cli.train recipe=sft_qwen7b     # the same from an installed package
    python train.py recipe=sft_tiny trainer.max_steps=2 output.dir=runs/try2
    python train.py recipe=grpo_qwen14b --dry-run      # print + validate the resolved recipe, load nothing

Reads a bundled recipe by name (the package's ``medcopilot/recipes/``, ``medagentgym.medcopilot.config.RECIPES_DIR``; a clone
links it as ``recipes/``) or a YAML file by path, applies the dotted overrides (values parsed as YAML), prints the
resolved recipe, checks it without loading a model (family names, reward terms, every ``trainer`` value against the
type its TRL / verifier / PPO config declares), prints and checks every input file it reads (task builds: size and
family version; the trajectory store: rows per family; models: ``medagentgym.medcopilot.inputs``) -- what ``--dry-run``
stops after --, saves it to ``<output.dir>/recipe.yaml``, and calls ``medagentgym.medcopilot.trainers.<method>.run(cfg)``. When
``output.push_to_hub`` is set, the final model is exported and uploaded afterwards. Errors are one line and a
non-zero exit; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import json
import os
import sys

USAGE = "usage: [accelerate launch] train.py recipe=<name|path.yaml> [section.key=value ...] [--dry-run] [--debug]"
FLAGS = ("--dry-run", "--debug", "-h", "--help")


def parse_argv(argv: list[str]) -> tuple[str, list[str], set[str]]:
    """Split the command line into the recipe, the overrides and the flags.

    Raises:
        RecipeError: No ``recipe=``, an unknown flag, or an argument that is not ``key=value``.
    """
    from medagentgym.medcopilot.config import RecipeError

    recipe, overrides, flags = None, [], set()
    for arg in argv:
        if arg.startswith("-"):
            if arg not in FLAGS:
                raise RecipeError(f"unknown flag {arg!r}; flags: {', '.join(FLAGS)}")
            flags.add(arg)
        elif arg.startswith("recipe="):
            recipe = arg.partition("=")[2]
        elif "=" in arg:
            overrides.append(arg)
        else:
            raise RecipeError(f"argument {arg!r} is not key=value; {USAGE}")
    if recipe is None and not flags & {"-h", "--help"}:
        raise RecipeError(f"no recipe given; {USAGE}")
    return recipe or "", overrides, flags


def is_main_process() -> bool:
    """True on rank 0 (or when not launched distributed): only it writes shared files."""
    return int(os.environ.get("RANK", "0")) == 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    state: dict = {}
    try:
        return _main(argv, state)
    except KeyboardInterrupt:
        print(f"\ntrain.py: interrupted: {_saved(state.get('cfg'))}", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        name = "" if type(exc).__name__ == "RecipeError" else f"{type(exc).__name__}: "
        print(f"train.py: error: {name}{text} (rerun with --debug for the traceback)", file=sys.stderr)
        return 2


def _saved(cfg) -> str:
    """What an interrupted run left, and how to go on: the newest checkpoint, or that nothing was saved yet."""
    if cfg is None:
        return "nothing was started"
    out = cfg.output.dir
    try:
        steps = sorted(int(name.split("-")[1]) for name in os.listdir(out)
                       if name.startswith("checkpoint-") and name.split("-")[1].isdigit())
    except OSError:
        steps = []
    if not steps:
        return f"no checkpoint saved yet in {out} (one is written every trainer.save_steps steps)"
    return (f"checkpoint-{steps[-1]} saved in {out}; rerun the same command to resume from it")


def check_inputs_or_refuse(cfg, *, dry_run: bool) -> None:
    """Print every input file the recipe reads (task builds, trajectory store, models) and refuse wrong ones.

    Raises:
        RecipeError: A build of another size or family version, a store that does not cover the recipe, or (not
            on a dry run) a missing local model: one line.
    """
    from medagentgym.medcopilot.config import RecipeError
    from medagentgym.medcopilot.inputs import check_inputs

    report = check_inputs(cfg)
    if is_main_process():
        print("\n".join(f"# {line}" for line in report.lines), flush=True)
    refusal = report.refusal(dry_run=dry_run)
    if refusal:
        raise RecipeError(refusal)


def _main(argv: list[str], state: dict) -> int:
    from medagentgym.medcopilot.config import check_recipe, load_recipe

    recipe, overrides, flags = parse_argv(argv)
    if flags & {"-h", "--help"}:
        print(__doc__.strip())
        return 0
    cfg = state["cfg"] = load_recipe(recipe, overrides)
    if is_main_process():
        print(f"# resolved recipe {cfg.name!r}\n{cfg.to_yaml()}", flush=True)
    notes: list[str] = []
    args = check_recipe(cfg, notes=notes)  # families, trainer types, runnability: fail before any model is loaded
    check_inputs_or_refuse(cfg, dry_run="--dry-run" in flags)
    if "--dry-run" in flags:
        owner = f"{type(args).__module__.split('.')[0]}.{type(args).__name__}"
        print("\n".join(f"# {line}" for line in notes), flush=True)
        print(f"# dry run: recipe {cfg.name!r} is valid (families {', '.join(cfg.tasks.families)} found; trainer "
              f"section checked by {owner}); nothing loaded or written", flush=True)
        return 0

    from medagentgym.medcopilot.trainers import get_trainer

    trainer = get_trainer(cfg.method)
    if is_main_process():
        cfg.save()
    summary = trainer.run(cfg) or {}
    if cfg.output.push_to_hub and is_main_process():
        from medagentgym.medcopilot.export import export_model

        export = export_model(cfg.output.dir, os.path.join(cfg.output.dir, "export"), push=cfg.output.push_to_hub)
        summary = {**summary, "pushed_to": cfg.output.push_to_hub, "export_dir": str(export)}
    if is_main_process():
        print(f"# done: {json.dumps(summary, default=str)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
