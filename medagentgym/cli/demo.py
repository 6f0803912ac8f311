"""The ``make demo`` job: a tiny model learns a two-turn task (query a database in the sandbox, then submit) by GRPO.

    .venv/bin/medagentgym demo
    .venv/bin/medagentgym demo --json --steps 12 --sandbox local --out runs/demo2

1. Declares ``artifacts/tasks/clinic_code`` (four phrasings of "query the clinic database for the protocol code,
   then submit it"), builds ``artifacts/tasks/toy_sql`` (for the ``*_tiny`` recipes) and ``artifacts/tiny-qwen2``
   (a tiny random Qwen2 with a real tokenizer), reusing them when present.
2. SFT warm start: demonstrations played through the environment at token level (the sandbox runs the SQL) train
   the model on its own tokens only (observations masked). The demonstrator is noisy: it submits the right code
   one time in two, so the warm model is right at most that often.
3. Success on a fixed evaluation (96 sampled episodes, sampling seeds fixed).
4. GRPO (TRL's ``GRPOTrainer`` with ``medcopilot.rollout_func.EnvRolloutFunc``): multi-turn episodes in the
   bubblewrap sandbox, exact token ids, environment tokens masked, the oracle grader's reward; 30 steps of 16
   episodes, the learning rate warmed up over the first 5.
5. The same evaluation after; ``<out>/reward_curve.png`` (each step's mean reward, and the fixed evaluation
   before and after), ``<out>/summary.json`` and the trained model in ``<out>/model``.

Every task of ``clinic_code`` has the same answer: a 140k-parameter model learns that in minutes, while reading a
per-task answer out of an observation (``toy_lookup``) is beyond it at this budget (docs/benchmarks.md, Learning).
Takes about 2 minutes on 2 CPU cores. ``--json`` ends stdout with one JSON object: ``reward_before``,
``reward_after``, ``success_before``, ``success_after``, ``steps``, ``curve``, ``sandbox_layers``, ``wall_s``.
The run directory is replaced on each run. Ctrl-C ends with one line saying what is kept for the rerun (exit 130).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

FAMILY = "clinic_code"


def build_inputs(tasks_root: Path, model_dir: Path) -> None:
    """Declare clinic_code, build toy_sql (the tiny recipes use it) and the tiny model, unless already there."""
    from medagentgym import tasks
    from medcopilot.learning import declare_clinic_code
    from medcopilot.tiny import build_tiny_model

    declare_clinic_code(tasks_root)
    print(f"[demo] tasks: declared {FAMILY} in {tasks_root / FAMILY}", flush=True)
    if (tasks_root / "toy_sql" / "manifest.json").is_file():
        print(f"[demo] tasks: reusing {tasks_root / 'toy_sql'}", flush=True)
    else:
        counts = tasks.make("toy_sql", root=tasks_root).build(tasks_root, size="tiny", seed=0)["counts"]
        print(f"[demo] tasks: built toy_sql into {tasks_root} {counts}", flush=True)
    if (model_dir / "config.json").is_file() and (model_dir / "tokenizer_config.json").is_file():
        print(f"[demo] model: reusing {model_dir}", flush=True)
    else:
        build_tiny_model(model_dir, seed=0)
        print(f"[demo] model: built the tiny Qwen2 into {model_dir}", flush=True)


def plot(curve: list[tuple[int, float]], train_rewards: list[tuple[int, float]], path: Path) -> None:
    """The mean reward of each GRPO step's episodes, and success on the fixed evaluation before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([s for s, _ in train_rewards], [r for _, r in train_rewards], alpha=0.6,
            label="reward of the step's 16 episodes")
    ax.plot([s for s, _ in curve], [v for _, v in curve], marker="o", linewidth=2,
            label="success on the fixed evaluation (96 episodes)")
    ax.set(xlabel="GRPO step", ylabel="reward = success", ylim=(0, 1),
           title=f"{FAMILY}: query the database, then submit the code")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(summary: dict) -> str:
    """The closing summary, a few lines."""
    def fmt(value: object) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    return "\n".join([
        "[demo] summary",
        f"  family           {FAMILY} (2 turns: run SQL in the sandbox, then submit the code)",
        f"  GRPO steps       {summary['steps']} (each {summary['group']} episodes of one task)",
        (f"  reward           {fmt(summary['reward_before'])} -> {fmt(summary['reward_after'])}   "
         f"(fixed evaluation, {summary['eval_episodes']} episodes)"),
        f"  success          {fmt(summary['success_before'])} -> {fmt(summary['success_after'])}",
        f"  sandbox layers   {', '.join(summary['sandbox_layers']) or 'none (unisolated)'}",
        f"  time             {summary['wall_s']:.0f} s",
        f"  curve            {summary['curve_png']}",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="artifacts/tasks", help="tasks root (clinic_code, toy_sql; reused)")
    parser.add_argument("--model", default="artifacts/tiny-qwen2", help="tiny model folder to build (reused)")
    parser.add_argument("--out", default="runs/demo", help="run directory (replaced on each run)")
    parser.add_argument("--steps", type=int, default=30,
                        help="GRPO steps (one generation round of --group episodes each); default 30")
    parser.add_argument("--group", type=int, default=16, help="episodes per generation round (one task); default 16")
    parser.add_argument("--seed", type=int, default=0, help="seeds the warm start, sampling and evaluation")
    parser.add_argument("--sandbox", default="bwrap", choices=["bwrap", "local"],
                        help="sandbox backend; 'local' has no isolation (development only)")
    parser.add_argument("--json", action="store_true", help="end stdout with one JSON object of results")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.group < 2:
        parser.error(f"--steps={args.steps} must be >= 1 and --group={args.group} >= 2")
    for key, value in {"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                       "OMP_NUM_THREADS": "1"}.items():
        os.environ.setdefault(key, value)
    from medcopilot.learning import learning_run

    started = time.monotonic()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)  # a fresh run each time: the demo never resumes a half-finished one
    out.mkdir(parents=True)
    try:
        build_inputs(Path(args.tasks), Path(args.model))
        # One update per generation round and GRPO_DEFAULTS' warm-up: two updates per round learnt faster on
        # some seeds but collapsed others (docs/benchmarks.md, "Learning").
        run = learning_run("grpo", FAMILY, args.model, out, seed=args.seed, steps=args.steps, group=args.group,
                           sandbox=args.sandbox, tasks_root=args.tasks, save_to=out / "model",
                           log=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        tasks_dir, model_dir = Path(args.tasks), Path(args.model)
        kept = [str(tasks_dir / name) for name in (FAMILY, "toy_sql")
                if (tasks_dir / name / ("family.yaml" if name == FAMILY else "manifest.json")).is_file()]
        if all((model_dir / name).is_file() for name in ("config.json", "tokenizer_config.json")):
            kept.append(str(model_dir))
        print(f"\ninterrupted: kept {' and '.join(kept) or 'nothing'} (reused by a rerun); the run in {out} "
              f"starts over: rerun the same command", file=sys.stderr)
        return 130
    plot(run.curve, run.train_rewards, out / "reward_curve.png")
    summary = {"reward_before": run.reward_before, "reward_after": run.reward_after, "success_before": run.before,
               "success_after": run.after, "steps": run.settings["steps"], "group": run.settings["group"],
               "eval_episodes": run.settings["eval_episodes"], "curve": run.curve,
               "sandbox_layers": run.sandbox_layers, "wall_s": round(time.monotonic() - started, 1),
               "curve_png": str(out / "reward_curve.png"), "model": str(out / "model")}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(report(summary), flush=True)
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
