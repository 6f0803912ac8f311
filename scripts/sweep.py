"""Run a grid of train.py runs from a sweep file and rank them by a final metric.

    python scripts/sweep.py recipes/sweeps/sft_tiny_lr.yaml --dry-run     # validate every run, print the plan
    python scripts/sweep.py recipes/sweeps/sft_tiny_lr.yaml               # run them one after another
    python scripts/sweep.py recipes/sweeps/grpo_qwen7b_lr.yaml \
        --launcher "accelerate launch --config_file recipes/accelerate/single_gpu.yaml"

A sweep file names a recipe, overrides shared by every run, and a grid (the cartesian product of its values):

    recipe: sft_tiny
    overrides: [trainer.max_steps=5]
    grid: {trainer.learning_rate: [1.0e-4, 1.0e-3], model.lora.r: [4, 8]}
    metric: train_loss          # a key of run_summary.json "metrics" (or of the last trainer log entry)
    mode: min                   # min or max
    output_root: runs/sweeps/sft_tiny_lr

Every run's recipe is resolved and validated before the first one starts. Each run is a separate process (GPU
memory is freed between runs) writing to ``<output_root>/<run name>``; a run whose ``run_summary.json`` exists is
skipped, so an interrupted sweep resumes. Writes ``<output_root>/sweep_results.json`` (all runs, ranked).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from medcopilot.config import RecipeError, load_recipe

REPO = Path(__file__).resolve().parent.parent
SWEEP_KEYS = ("recipe", "overrides", "grid", "metric", "mode", "output_root")


@dataclass
class Sweep:
    """A parsed sweep file (see the module docstring for the fields)."""

    recipe: str
    grid: dict[str, list[Any]]
    metric: str = "train_loss"
    mode: str = "min"
    output_root: str = ""
    overrides: list[str] = field(default_factory=list)


@dataclass
class Run:
    """One point of the grid: its name, its overrides (shared + grid values) and its output dir."""

    name: str
    overrides: list[str]
    output_dir: Path


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read and check a sweep file.

    Raises:
        RecipeError: Missing file, unknown keys, an empty grid or a bad mode (one line each).
    """
    file = Path(path)
    if not file.is_file():
        raise RecipeError(f"sweep file {str(file)!r} not found; bundled sweeps: "
                          f"{', '.join(sorted(p.name for p in (REPO / 'recipes' / 'sweeps').glob('*.yaml')))}")
    data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    unknown = sorted(set(data) - set(SWEEP_KEYS))
    if unknown:
        raise RecipeError(f"{file}: unknown sweep key(s) {', '.join(unknown)}; valid keys: {', '.join(SWEEP_KEYS)}")
    grid = data.get("grid") or {}
    if not isinstance(grid, dict) or not grid or not all(isinstance(v, list) and v for v in grid.values()):
        raise RecipeError(f"{file}: grid must map dotted keys to non-empty lists, e.g. "
                          f"grid: {{trainer.learning_rate: [1.0e-5, 3.0e-5]}}")
    if data.get("mode", "min") not in ("min", "max"):
        raise RecipeError(f"{file}: mode={data['mode']!r} must be min or max")
    if "recipe" not in data:
        raise RecipeError(f"{file}: no recipe; add e.g. recipe: sft_tiny")
    return Sweep(recipe=str(data["recipe"]), grid=grid, metric=str(data.get("metric", "train_loss")),
                 mode=data.get("mode", "min"), output_root=str(data.get("output_root") or f"runs/sweeps/{file.stem}"),
                 overrides=[str(o) for o in data.get("overrides") or []])


def plan_runs(sweep: Sweep) -> list[Run]:
    """The grid's runs in a stable order; each recipe is resolved and validated now (no model is loaded).

    Raises:
        RecipeError: If any run's recipe is invalid (naming the run).
    """
    keys = list(sweep.grid)
    runs = []
    for values in itertools.product(*(sweep.grid[k] for k in keys)):
        point = [f"{k}={_yaml_value(v)}" for k, v in zip(keys, values)]
        name = "_".join(f"{k.rsplit('.', 1)[-1]}{_slug(v)}" for k, v in zip(keys, values))
        out = Path(sweep.output_root) / name
        overrides = [*sweep.overrides, *point, f"output.dir={out}"]
        try:
            load_recipe(sweep.recipe, overrides).trainer_args()
        except RecipeError as exc:
            raise RecipeError(f"sweep run {name!r}: {exc}") from exc
        runs.append(Run(name, overrides, out))
    return runs


def run_metric(output_dir: Path, metric: str) -> float | None:
    """The run's final value of ``metric`` (run_summary.json metrics, else the last trainer log entry with it)."""
    summary_file = output_dir / "run_summary.json"
    if not summary_file.is_file():
        return None
    value = json.loads(summary_file.read_text(encoding="utf-8")).get("metrics", {}).get(metric)
    state_file = output_dir / "trainer_state.json"
    if value is None and state_file.is_file():
        logs = [e for e in json.loads(state_file.read_text(encoding="utf-8")).get("log_history", []) if metric in e]
        value = logs[-1][metric] if logs else None
    return None if value is None else float(value)


def rank(sweep: Sweep, runs: list[Run]) -> list[dict[str, Any]]:
    """Rows ``{name, overrides, output_dir, value}``, best first; runs without the metric last."""
    rows = [{"name": r.name, "overrides": r.overrides, "output_dir": str(r.output_dir),
             "value": run_metric(r.output_dir, sweep.metric)} for r in runs]
    sign = 1 if sweep.mode == "min" else -1
    return sorted(rows, key=lambda row: (row["value"] is None, sign * (row["value"] or 0.0)))


def main(argv: list[str] | None = None) -> int:
    """Parse flags, validate the grid, run it, print the ranking."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="sweep YAML file (e.g. recipes/sweeps/sft_tiny_lr.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="validate every run and print the plan; train nothing")
    parser.add_argument("--launcher", default="", help='command before train.py, e.g. "accelerate launch"')
    parser.add_argument("--debug", action="store_true", help="show the traceback on errors")
    args = parser.parse_args(argv)
    try:
        sweep = load_sweep(args.sweep)
        runs = plan_runs(sweep)
    except RecipeError as exc:
        if args.debug:
            raise
        print(f"sweep.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"[sweep] {len(runs)} runs of recipe {sweep.recipe!r} into {sweep.output_root}", flush=True)
    for run in runs:
        done = (run.output_dir / "run_summary.json").is_file()
        print(f"[sweep] {run.name}: {' '.join(run.overrides)}{'  (done, skipped)' if done else ''}", flush=True)
        if args.dry_run or done:
            continue
        launcher = shlex.split(args.launcher) or [sys.executable]
        status = subprocess.call([*launcher, str(REPO / "train.py"), f"recipe={sweep.recipe}", *run.overrides])
        if status != 0:
            print(f"sweep.py: error: run {run.name!r} exited with status {status}; rerun to resume", file=sys.stderr)
            return status
    if args.dry_run:
        return 0
    ranked = rank(sweep, runs)
    _write_json(Path(sweep.output_root) / "sweep_results.json",
                {"recipe": sweep.recipe, "metric": sweep.metric, "mode": sweep.mode, "runs": ranked})
    for row in ranked:
        print(f"[sweep] {sweep.metric}={row['value']}  {row['name']}", flush=True)
    return 0


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(value)).strip("-") or "x"


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
