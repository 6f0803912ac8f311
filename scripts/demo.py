"""The ``make demo`` job: build tiny tasks and a tiny model, run a short GRPO in the sandbox, print a summary.

    .venv/bin/python scripts/demo.py
    .venv/bin/python scripts/demo.py --steps 2 --sandbox local --out runs/demo2

Writes ``artifacts/tasks/toy_sql/`` (tiny toy_sql task set, seed 0), ``artifacts/tiny-qwen2/`` (a tiny random
Qwen2 with a real tokenizer) and ``runs/demo/`` (the GRPO run of ``recipes/grpo_tiny.yaml``: model, recipe,
``trainer_state.json``, ``run_summary.json``). Existing artifacts are reused, the run directory is replaced, so
running it twice gives the same result. Takes a few minutes on 2 CPU cores; the random model earns reward 0 (it
cannot yet emit a valid tool call); the point is the whole loop: multi-turn episodes in the bubblewrap sandbox,
exact token ids with the environment masked, TRL's GRPO update, the per-step environment metrics. Ctrl-C ends
with one line saying what is kept for the rerun (exit 130).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_inputs(tasks_root: Path, model_dir: Path) -> None:
    """Build the toy_sql task set and the tiny model unless they are already there."""
    import tasks
    from medcopilot.tiny import build_tiny_model

    if (tasks_root / "toy_sql" / "manifest.json").is_file():
        print(f"[demo] tasks: reusing {tasks_root / 'toy_sql'}", flush=True)
    else:
        counts = tasks.make("toy_sql", root=tasks_root).build(tasks_root, size="tiny", seed=0).get("counts")
        print(f"[demo] tasks: built toy_sql into {tasks_root} {counts or ''}", flush=True)
    if (model_dir / "config.json").is_file() and (model_dir / "tokenizer_config.json").is_file():
        print(f"[demo] model: reusing {model_dir}", flush=True)
    else:
        build_tiny_model(model_dir, seed=0)
        print(f"[demo] model: built the tiny Qwen2 into {model_dir}", flush=True)


def train(args: argparse.Namespace) -> dict:
    """Run ``train.py recipe=grpo_tiny`` in-process (its real entry point) and return the run summary."""
    import importlib.util

    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)  # a fresh run each time: the demo never resumes a half-finished one
    spec = importlib.util.spec_from_file_location("medcopilot_train_entry", REPO / "train.py")
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    argv = ["recipe=grpo_tiny", f"model.name_or_path={args.model}", f"tasks.root={args.tasks}",
            f"env.sandbox={args.sandbox}", f"trainer.max_steps={args.steps}", f"output.dir={out}"]
    status = entry.main(argv)
    if status == 130:  # train.py caught Ctrl-C and said what it saved; the demo adds what a rerun reuses
        raise KeyboardInterrupt
    if status != 0:
        raise SystemExit(status)
    return json.loads((out / "run_summary.json").read_text(encoding="utf-8"))


def report(summary: dict, wall_s: float) -> str:
    """The closing summary, a few lines."""
    def fmt(value: object) -> str:
        return "n/a" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    state = json.loads((Path(summary["output_dir"]) / "trainer_state.json").read_text(encoding="utf-8"))
    steps = [row for row in state["log_history"] if "loss" in row]
    last = steps[-1] if steps else {}
    lines = [
        "[demo] summary",
        f"  steps            {summary['global_step']}",
        f"  reward           {fmt(summary.get('reward_first'))} -> {fmt(summary.get('reward_last'))}",
        f"  success rate     {fmt(summary.get('success_first'))} -> {fmt(summary.get('success_last'))}",
        (f"  turns / episode  {fmt(last.get('env/turns_mean'))}   tool failure rate "
         f"{fmt(last.get('env/tool_failure_rate'))}   truncation rate {fmt(last.get('env/truncation_rate'))}"),
        f"  sandbox layers   {', '.join(summary.get('sandbox_layers') or []) or 'none (unisolated)'}",
        f"  time             {wall_s:.0f} s (training run {summary.get('wall_s', 0):.0f} s)",
        f"  output           {summary['output_dir']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="artifacts/tasks", help="tasks root to build toy_sql into (reused)")
    parser.add_argument("--model", default="artifacts/tiny-qwen2", help="tiny model folder to build (reused)")
    parser.add_argument("--out", default="runs/demo", help="run directory (replaced on each run)")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps (8 episodes each)")
    parser.add_argument("--sandbox", default="bwrap", choices=["bwrap", "local"],
                        help="sandbox backend; 'local' has no isolation (development only)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps={args.steps} must be >= 1")
    for key, value in {"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
        os.environ.setdefault(key, value)
    started = time.monotonic()
    try:
        build_inputs(Path(args.tasks), Path(args.model))
        summary = train(args)
    except KeyboardInterrupt:
        tasks_dir, model_dir = Path(args.tasks) / "toy_sql", Path(args.model)
        kept = [str(tasks_dir)] if (tasks_dir / "manifest.json").is_file() else []
        model_done = all((model_dir / name).is_file() for name in ("config.json", "tokenizer_config.json"))
        kept += [str(model_dir)] if model_done else []
        print(f"\ninterrupted: kept {' and '.join(kept) or 'nothing'} (reused by a rerun); the GRPO run in {args.out} "
              f"starts over: rerun the same command", file=sys.stderr)
        return 130
    print(report(summary, time.monotonic() - started), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
