"""The ``make demo`` job: a tiny model learns, by GRPO in the sandbox, to read a value out of a tool's output.

    .venv/bin/medagentgym demo
    .venv/bin/medagentgym demo --json --steps 12 --sandbox local --out runs/demo2

1. Builds ``artifacts/tasks/toy_lookup`` (48 training and 16 held-out records, each a one-row SQLite database
   with a value from 1 to 9; the question names the record, never the value), ``artifacts/tasks/toy_sql`` (for the
   ``*_tiny`` recipes) and ``artifacts/tiny-qwen2`` (a tiny random Qwen2 with a real tokenizer), reusing them
   when present.
2. Warm start, supervised on demonstrations played through the environment at token level (the sandbox runs the
   SQL; observations masked out of the loss): first the exact demonstrator, which teaches the model to copy the
   value the query returned, then a noisy one that submits it only one time in four, so the model starts barely
   above chance (1/9) on records it has never seen.
3. Success on a fixed evaluation of 96 sampled episodes on the held-out records (sampling seeds fixed).
4. GRPO (TRL's ``GRPOTrainer`` with ``medagentgym.medcopilot.rollout_func.EnvRolloutFunc``): two-turn episodes in the
   bubblewrap sandbox, exact token ids, environment tokens masked, the oracle grader's reward; ``--steps`` steps of
   16 episodes on the training records, the held-out evaluation every ``--eval-every`` steps.
5. The control: the warm and the trained policy scored on copies of the held-out records whose stored value was
   made wrong. A policy that submits what it reads scores 0 there and one that guesses 1/9, so held-out success
   above the control's is success that needs the tool's output.
6. ``<out>/reward_curve.png`` (every held-out evaluation with its 95 % interval, each step's training reward,
   the control), ``<out>/summary.json`` and the trained model in ``<out>/model``.

Takes about 3 CPU minutes (docs/benchmarks.md, "Learning"). ``--json`` ends stdout with one JSON object:
``learned`` (one sentence, from the numbers), ``success_before``, ``success_after``, ``control_before``,
``control_after``, ``chance``, ``steps``, ``curve``, ``sandbox_layers``, ``wall_s``, ``cpu_s`` (this process and its
sandbox workers). The run directory is replaced on each run. Ctrl-C ends with one line
saying what is kept for the rerun (exit 130).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from medagentgym.env_client.argtypes import nonneg_int, positive_int

FAMILY = "toy_lookup"
CHANCE = 1 / 9
#: GRPO steps (``medagentgym.medcopilot.learning.GRPO_DEFAULTS``): on toy_lookup the held-out gain builds up after step 20.
STEPS = 60


def build_inputs(tasks_root: Path, model_dir: Path) -> None:
    """Build toy_lookup, toy_sql (the tiny recipes use it) and the tiny model, unless already there."""
    from medagentgym import tasks
    from medagentgym.medcopilot.tiny import build_tiny_model

    for name in (FAMILY, "toy_sql"):
        if (tasks_root / name / "manifest.json").is_file():
            print(f"[demo] tasks: reusing {tasks_root / name}", flush=True)
        else:
            counts = tasks.make(name, root=tasks_root).build(tasks_root, size="tiny", seed=0)["counts"]
            print(f"[demo] tasks: built {name} into {tasks_root} {counts}", flush=True)
    if (model_dir / "config.json").is_file() and (model_dir / "tokenizer_config.json").is_file():
        print(f"[demo] model: reusing {model_dir}", flush=True)
    else:
        build_tiny_model(model_dir, seed=0)
        print(f"[demo] model: built the tiny Qwen2 into {model_dir}", flush=True)


def plot(run, group: int, path: Path) -> None:
    """Write :func:`figure` to ``path``."""
    import matplotlib.pyplot as plt

    fig = figure(run, group)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(run, group: int):
    """Every held-out evaluation with its 95 % interval, each step's training reward with its interval, and the
    control before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from medagentgym.medcopilot.learning import wilson

    n = run.settings["eval_episodes"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    steps, rewards = [s for s, _ in run.train_rewards], [r for _, r in run.train_rewards]
    bands = [wilson(r * group, group) for r in rewards]
    ax.plot(steps, rewards, color="C0", alpha=0.5, label=f"training reward (each step's {group} episodes)")
    ax.fill_between(steps, [lo for lo, _ in bands], [hi for _, hi in bands], color="C0", alpha=0.1)
    ax.errorbar([p[0] for p in run.curve], [p[1] for p in run.curve],
                yerr=[[p[1] - p[2] for p in run.curve], [p[3] - p[1] for p in run.curve]],
                color="C1", marker="o", linewidth=2, capsize=4, label=f"held-out success ({n} episodes, 95 % CI)")
    if run.control_after is not None:
        ends = [run.curve[0][0], run.curve[-1][0]]
        ctrl = [run.control_before, run.control_after]
        ci = [wilson(c * n, n) for c in ctrl]
        ax.errorbar(ends, ctrl, yerr=[[c - lo for c, (lo, _) in zip(ctrl, ci)], [hi - c for c, (_, hi) in zip(ctrl, ci)]],
                    color="C2", marker="x", linestyle="--", capsize=4, label="control: observed values wrong")
    ax.axhline(CHANCE, color="grey", linestyle=":", linewidth=1, label="chance (1/9)")
    ax.set(xlabel="GRPO step", ylabel="success = reward", ylim=(0, 1),
           title=f"{FAMILY}: run SQL, submit the value it returned")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def verdict(summary: dict) -> str:
    """What the run learnt, in one sentence, from its numbers (never claimed when they do not show it)."""
    before, after, ctrl = summary["success_before"], summary["success_after"], summary["control_after"]
    low_after, _ = wilson_of(after, summary["eval_episodes"])
    _, high_before = wilson_of(before, summary["eval_episodes"])
    if ctrl is None:
        return "no control measured"
    if after > before and low_after > high_before:
        if low_after > wilson_of(ctrl, summary["eval_episodes"])[1]:  # above the control beyond both intervals
            return (f"to read the tool's output: held-out success rose by {after - before:+.3f} and is "
                    f"{after - ctrl:.3f} above the same policy's when the observed value is wrong")
        return (f"held-out success rose by {after - before:+.3f}, but not clearly above the same policy's with the "
                f"observed value wrong (control {ctrl:.3f}): not shown to come from reading the tool's output")
    if after > before:
        return (f"held-out success rose by {after - before:+.3f}, inside the evaluation's noise at this seed and "
                f"budget (rerun with --seed or more --steps)")
    return f"nothing measurable at this seed and budget (held-out success {before:.3f} -> {after:.3f})"


def cpu_seconds() -> float:
    """User + system CPU of this process and of every finished child (the sandbox's workers, once closed)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def wilson_of(share: float, n: int) -> tuple[float, float]:
    from medagentgym.medcopilot.learning import wilson

    return wilson(share * n, n)


def report(summary: dict) -> str:
    """The closing summary, a few lines."""
    def fmt(value: object) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    return "\n".join([
        "[demo] summary",
        f"  family           {FAMILY} (2 turns: run SQL on the record's database, submit the value it returned)",
        f"  learned          {verdict(summary)}",
        f"  GRPO steps       {summary['steps']} (each {summary['group']} episodes of one training record)",
        (f"  held-out success {fmt(summary['success_before'])} -> {fmt(summary['success_after'])}   "
         f"({summary['heldout_records']} records never trained on, {summary['eval_episodes']} episodes)"),
        (f"  control          {fmt(summary['control_before'])} -> {fmt(summary['control_after'])}   "
         f"(the same policies when the observed value is wrong; chance {summary['chance']:.3f})"),
        f"  sandbox layers   {', '.join(summary['sandbox_layers']) or 'none (unisolated)'}",
        f"  time             {summary['wall_s']:.0f} s ({summary['cpu_s']:.0f} s CPU)",
        f"  curve            {summary['curve_png']}",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="artifacts/tasks", help="tasks root (toy_lookup, toy_sql; reused)")
    parser.add_argument("--model", default="artifacts/tiny-qwen2", help="tiny model folder to build (reused)")
    parser.add_argument("--out", default="runs/demo", help="run directory (replaced on each run)")
    parser.add_argument("--steps", type=positive_int, default=STEPS,
                        help=f"GRPO steps (one generation round of --group episodes each); default {STEPS}")
    parser.add_argument("--group", type=positive_int, default=16, help="episodes per generation round (one task); default 16")
    parser.add_argument("--eval-every", type=nonneg_int, default=10, help="held-out evaluation every N steps; default 10")
    parser.add_argument("--seed", type=nonneg_int, default=0, help="seeds the warm start, sampling and evaluation")
    parser.add_argument("--sandbox", default="bwrap", choices=["bwrap", "local"],
                        help="sandbox backend; 'local' has no isolation (development only)")
    parser.add_argument("--json", action="store_true", help="end stdout with one JSON object of results")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.group < 2 or args.eval_every < 0:
        parser.error(f"--steps={args.steps} must be >= 1, --group={args.group} >= 2, --eval-every >= 0")
    for key, value in {"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                       "OMP_NUM_THREADS": "1"}.items():
        os.environ.setdefault(key, value)
    from medagentgym.medcopilot.learning import learning_run

    started, cpu0 = time.monotonic(), cpu_seconds()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)  # a fresh run each time: the demo never resumes a half-finished one
    out.mkdir(parents=True)
    try:
        build_inputs(Path(args.tasks), Path(args.model))
        run = learning_run("grpo", FAMILY, args.model, out, seed=args.seed, steps=args.steps, group=args.group,
                           eval_every=args.eval_every, sandbox=args.sandbox, tasks_root=args.tasks,
                           save_to=out / "model", log=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        tasks_dir, model_dir = Path(args.tasks), Path(args.model)
        kept = [str(tasks_dir / name) for name in (FAMILY, "toy_sql") if (tasks_dir / name / "manifest.json").is_file()]
        if all((model_dir / name).is_file() for name in ("config.json", "tokenizer_config.json")):
            kept.append(str(model_dir))
        print(f"\ninterrupted: kept {' and '.join(kept) or 'nothing'} (reused by a rerun); the run in {out} "
              f"starts over: rerun the same command", file=sys.stderr)
        return 130
    plot(run, args.group, out / "reward_curve.png")
    from medagentgym import tasks

    summary = {"family": FAMILY, "success_before": run.before, "success_after": run.after,
               "control_before": run.control_before, "control_after": run.control_after, "chance": round(CHANCE, 4),
               "reward_before": run.reward_before, "reward_after": run.reward_after, "steps": run.settings["steps"],
               "group": run.settings["group"], "eval_episodes": run.settings["eval_episodes"],
               "heldout_records": len(tasks.make(FAMILY, root=args.tasks).instances("test")),
               "curve": run.curve, "train_rewards": run.train_rewards, "sandbox_layers": run.sandbox_layers,
               "wall_s": round(time.monotonic() - started, 1), "cpu_s": round(cpu_seconds() - cpu0, 1),
               "curve_png": str(out / "reward_curve.png"), "model": str(out / "model")}
    summary["learned"] = verdict(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(report(summary), flush=True)
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
