"""Sweeps of ``train.py`` runs: a grid over recipe keys, or a chain of stages (SFT -> DPO -> GRPO).

A sweep file holds exactly one of ``grid`` (with ``recipe``) or ``stages``:

    # grid: the cartesian product of the values; runs are ranked by ``metric`` and plotted against the first key
    recipe: sft_tiny
    overrides: [trainer.max_steps=5]           # shared by every run (and by every stage of a chain)
    grid: {tasks.limit: [2, 4, 6, 8]}          # any dotted recipe key
    metric: train_loss                         # a key of run_summary.json (top level or "metrics"), or of the log
    mode: min                                  # min or max
    output_root: runs/sweeps/sft_tiny_scaling

    # stages: each stage starts from the previous stage's output (model.name_or_path = previous output.dir)
    stages:
      - {name: sft, recipe: sft_tiny, overrides: [trainer.max_steps=5]}
      - {name: dpo, recipe: dpo_tiny, overrides: ["rollout.policy=oracle+hf:{prev}", "rollout.store={dir}/pairs.jsonl"]}
      - {name: grpo, recipe: grpo_tiny}
    output_root: runs/sweeps/pipeline_tiny

A stage starts from the previous stage unless it names another with ``from: <stage name>`` (an earlier one), so
one file can branch: base -> SFT -> DPO, SFT -> PPO and SFT -> GRPO. With an ``evaluate`` section the base model
and every stage are evaluated on the per-family test sets after training, and the paper's table (the 8
in-distribution families plus the ood suite) is written as Markdown, JSON and PNG (:mod:`medagentgym.medcopilot.sweep_eval`).

Stage overrides are applied after the shared ones and after the chain link, so a stage may still set its own
``model.name_or_path``. In any override, ``{dir}`` is the run's (or stage's) own output dir and ``{prev}`` the
previous stage's. SFT and DPO roll out a missing ``rollout.store`` themselves (with ``rollout.policy``) and then
train on all of it, whatever ``tasks.limit`` says: give each run its own store (``rollout.store={dir}/store.jsonl``)
when the grid varies the data, e.g. ``tasks.limit`` for a train-time scaling curve.

Every run or stage (of any method: SFT, DPO, GRPO, PPO or the verifier, each checked against its own trainer
arguments, as ``train.py --dry-run`` does) is validated before the first starts and runs in its own process (memory is freed between
them), writing to ``<output_root>/<name>``. A run whose ``run_summary.json`` exists (the trainers write it
atomically, last) is finished and skipped, so an interrupted sweep resumes. The results go to
``<output_root>/sweep_results.json`` (atomically); a grid also writes ``<output_root>/sweep_<metric>.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from medagentgym.medcopilot.config import RECIPES_DIR, RecipeError, check_recipe, load_recipe
from medagentgym.medcopilot.inputs import check_inputs
from medagentgym.tasks._files import FileFormatError, load_yaml

SWEEPS_DIR = RECIPES_DIR / "sweeps"
#: What a sweep's subprocess runs after its launcher: ``medagentgym train`` as a module, which an installed package
#: has too (``train.py`` is the repository's copy of the same entry point).
TRAIN_MODULE = ("-m", "medagentgym.cli.train")
SWEEP_KEYS = ("recipe", "overrides", "grid", "stages", "metric", "mode", "output_root", "evaluate")
STAGE_KEYS = ("name", "recipe", "overrides", "from")
SUMMARY = "run_summary.json"
RESULTS = "sweep_results.json"

#: ``launch(recipe, overrides) -> exit status``: runs one train.py invocation.
Launch = Callable[[str, list[str]], int]

__all__ = ["Run", "Stage", "Sweep", "load_sweep", "main", "plan_runs", "plot_grid", "rank", "resolve_sweep_path",
           "run_metric", "stage_rows", "subprocess_launch"]


@dataclass
class Stage:
    """One link of a chain: a recipe and its own overrides."""

    name: str
    recipe: str
    overrides: list[str] = field(default_factory=list)
    start: str | None = None  # the stage this one starts from (``from:``); None = the previous stage


@dataclass
class Sweep:
    """A parsed sweep file (see the module docstring for the fields); ``grid`` or ``stages`` is set."""

    recipe: str
    grid: dict[str, list[Any]]
    metric: str = "train_loss"
    mode: str = "min"
    output_root: str = ""
    overrides: list[str] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    evaluate: dict[str, Any] | None = None  # the chain's evaluation section (medagentgym.medcopilot.sweep_eval.EvalSpec)


@dataclass
class Run:
    """One run of the sweep: its name, recipe, full overrides and output dir (``point``: its grid values)."""

    name: str
    overrides: list[str]
    output_dir: Path
    recipe: str = ""
    point: dict[str, Any] = field(default_factory=dict)
    start: str | None = None  # a chain stage: the stage it starts from (None: the chain's base model)
    base_model: str | None = None  # a chain stage: the full model at the root of its chain

    @property
    def done(self) -> bool:
        """True when the run finished (its ``run_summary.json`` exists)."""
        return (self.output_dir / SUMMARY).is_file()


def resolve_sweep_path(path: str | os.PathLike) -> Path:
    """A sweep file by path, or a bundled sweep by name (``paper_tiny``: ``SWEEPS_DIR/paper_tiny.yaml``).

    Raises:
        RecipeError: Neither exists (the message lists the bundled sweeps).
    """
    file, text = Path(path), str(path)
    if file.is_file():
        return file
    bundled = SWEEPS_DIR / f"{text}.yaml"
    if os.sep not in text and not text.endswith((".yaml", ".yml")) and bundled.is_file():
        return bundled
    raise RecipeError(f"sweep file {text!r} not found; bundled sweeps (by name, or in {SWEEPS_DIR}): "
                      f"{', '.join(sorted(p.stem for p in SWEEPS_DIR.glob('*.yaml')))}")


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read and check a sweep file (a path, or a bundled sweep's name).

    Raises:
        RecipeError: Missing file, unknown keys, both or neither of grid/stages, an empty grid, a bad stage or
            a bad mode (one line each).
    """
    file = resolve_sweep_path(path)
    try:
        data = load_yaml(file) or {}
    except FileFormatError as exc:
        raise RecipeError(str(exc)) from None
    if not isinstance(data, dict):
        raise RecipeError(f"{file}: a sweep file must be a mapping with recipe+grid or stages")
    unknown = sorted(set(data) - set(SWEEP_KEYS))
    if unknown:
        raise RecipeError(f"{file}: unknown sweep key(s) {', '.join(unknown)}; valid keys: {', '.join(SWEEP_KEYS)}")
    if ("grid" in data) == ("stages" in data):
        raise RecipeError(f"{file}: give exactly one of grid (with recipe) or stages (a list of "
                          f"{{name, recipe, overrides}})")
    if data.get("mode", "min") not in ("min", "max"):
        raise RecipeError(f"{file}: mode={data['mode']!r} must be min or max")
    common = {"metric": str(data.get("metric", "train_loss")), "mode": data.get("mode", "min"),
              "output_root": str(data.get("output_root") or f"runs/sweeps/{file.stem}"),
              "overrides": [str(o) for o in data.get("overrides") or []]}
    if "evaluate" in data and "stages" not in data:
        raise RecipeError(f"{file}: evaluate applies to a chain of stages; remove it or use stages")
    if "stages" in data:
        if "recipe" in data:
            raise RecipeError(f"{file}: a chain names its recipes per stage; remove the top-level recipe")
        evaluate = data.get("evaluate")
        if evaluate is not None and not isinstance(evaluate, dict):
            raise RecipeError(f"{file}: evaluate must be a mapping, e.g. evaluate: {{suites: [id, ood]}}")
        return Sweep(recipe="", grid={}, stages=_parse_stages(file, data["stages"]), evaluate=evaluate, **common)
    grid = data.get("grid") or {}
    if not isinstance(grid, dict) or not grid or not all(isinstance(v, list) and v for v in grid.values()):
        raise RecipeError(f"{file}: grid must map dotted keys to non-empty lists, e.g. "
                          f"grid: {{trainer.learning_rate: [1.0e-5, 3.0e-5]}}")
    if "recipe" not in data:
        raise RecipeError(f"{file}: no recipe; add e.g. recipe: sft_tiny")
    return Sweep(recipe=str(data["recipe"]), grid=grid, **common)


def _parse_stages(file: Path, raw: Any) -> list[Stage]:
    if not isinstance(raw, list) or not raw:
        raise RecipeError(f"{file}: stages must be a non-empty list, e.g. stages: [{{recipe: sft_tiny}}]")
    stages = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or "recipe" not in item:
            raise RecipeError(f"{file}: stage {i + 1} must be a mapping with a recipe, e.g. {{recipe: sft_tiny}}")
        bad = sorted(set(item) - set(STAGE_KEYS))
        if bad:
            raise RecipeError(f"{file}: stage {i + 1}: unknown key(s) {', '.join(bad)}; "
                              f"valid keys: {', '.join(STAGE_KEYS)}")
        name = _file_slug(item.get("name") or f"{i + 1}-{item['recipe']}")
        start = item.get("from")
        if start is not None and start not in [s.name for s in stages]:
            raise RecipeError(f"{file}: stage {name!r} starts from {start!r}, which is not an earlier stage; "
                              f"earlier stages: {', '.join(s.name for s in stages) or 'none'}")
        stages.append(Stage(name, str(item["recipe"]), [str(o) for o in item.get("overrides") or []],
                            None if start is None else str(start)))
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise RecipeError(f"{file}: stage names must be unique, got {', '.join(names)}")
    return stages


def plan_runs(sweep: Sweep) -> list[Run]:
    """The sweep's runs (grid points, or stages in chain order); each recipe is resolved and validated now.

    No model is loaded; a later stage's ``model.name_or_path`` need not exist yet.

    Raises:
        RecipeError: If any run's recipe is invalid (naming the run).
    """
    root = Path(sweep.output_root)
    runs = []
    if sweep.stages:
        by_name: dict[str, Run] = {}
        for i, stage in enumerate(sweep.stages):
            out = root / stage.name
            start = stage.start or (sweep.stages[i - 1].name if i > 0 else None)
            prev = by_name[start].output_dir if start is not None else None
            if prev is None and any("{prev}" in o for o in [*sweep.overrides, *stage.overrides]):
                raise RecipeError(f"stage {stage.name!r}: {{prev}} is undefined in the first stage")
            link = [] if prev is None else [f"model.name_or_path={prev}"]
            overrides = _fill([*sweep.overrides, *link, *stage.overrides], out, prev)
            run = Run(stage.name, [*overrides, f"output.dir={out}"], out, stage.recipe, start=start)
            own = load_recipe(run.recipe, run.overrides).model.name_or_path
            # the chain's root model: what vLLM starts from and what the memory arithmetic sizes
            run.base_model = by_name[start].base_model if start is not None and own == str(prev) else own
            runs.append(run)
            by_name[stage.name] = run
    else:
        keys = list(sweep.grid)
        for values in itertools.product(*(sweep.grid[k] for k in keys)):
            point = [f"{k}={_yaml_value(v)}" for k, v in zip(keys, values)]
            name = "_".join(f"{k.rsplit('.', 1)[-1]}{_slug(v)}" for k, v in zip(keys, values))
            out = root / name
            overrides = [*_fill(sweep.overrides, out, None), *point, f"output.dir={out}"]
            runs.append(Run(name, overrides, out, sweep.recipe, dict(zip(keys, values))))
    for run in runs:  # each run against its own method's arguments (TRL config, VerifierConfig or PPOArgs)
        try:
            cfg = load_recipe(run.recipe, run.overrides)
            check_recipe(cfg, base_model=run.base_model)
        except RecipeError as exc:
            raise RecipeError(f"sweep run {run.name!r}: {exc}") from exc
        # its task builds and stores, as train.py checks them (a stage's model may not exist yet: not refused)
        refusal = check_inputs(cfg).refusal(dry_run=True)
        if refusal:
            raise RecipeError(f"sweep run {run.name!r} ({run.recipe}): {refusal}")
    return runs


def _fill(overrides: list[str], out: Path, prev: Path | None) -> list[str]:
    """Substitute ``{dir}`` (the run's output dir) and ``{prev}`` (the previous stage's) in override strings."""
    filled = [o.replace("{dir}", str(out)) for o in overrides]
    return filled if prev is None else [o.replace("{prev}", str(prev)) for o in filled]


def _summary(output_dir: Path) -> dict[str, Any] | None:
    file = output_dir / SUMMARY
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None


def run_metric(output_dir: Path, metric: str) -> float | None:
    """The run's final ``metric``: run_summary.json (top level, then ``metrics``), else the last log entry with it."""
    summary = _summary(output_dir)
    if summary is None:
        return None
    value = summary.get(metric, summary.get("metrics", {}).get(metric))
    state_file = output_dir / "trainer_state.json"
    if value is None and state_file.is_file():
        logs = [e for e in json.loads(state_file.read_text(encoding="utf-8")).get("log_history", []) if metric in e]
        value = logs[-1][metric] if logs else None
    return None if not isinstance(value, (int, float)) else float(value)


def rank(sweep: Sweep, runs: list[Run]) -> list[dict[str, Any]]:
    """Rows ``{name, overrides, output_dir, point, value}``, best first; runs without the metric last."""
    rows = [{"name": r.name, "overrides": r.overrides, "output_dir": str(r.output_dir), "point": r.point,
             "value": run_metric(r.output_dir, sweep.metric)} for r in runs]
    sign = 1 if sweep.mode == "min" else -1
    return sorted(rows, key=lambda row: (row["value"] is None, sign * (row["value"] or 0.0)))


def stage_rows(runs: list[Run], wall_s: dict[str, float]) -> list[dict[str, Any]]:
    """One row per stage from its ``run_summary.json``: method, steps, train loss, reward/success, dir, time.

    Args:
        runs: The chain's stages in order.
        wall_s: Seconds each stage took in this or an earlier invocation (by name); the trainer's
            ``train_runtime`` is used for a stage not in it.
    """
    rows = []
    for run in runs:
        summary = _summary(run.output_dir) or {}
        metrics = summary.get("metrics", {})
        rows.append({
            "stage": run.name, "recipe": run.recipe, "method": summary.get("method"),
            "steps": summary.get("global_step"), "train_loss": metrics.get("train_loss"),
            "reward_first": summary.get("reward_first"), "reward_last": summary.get("reward_last"),
            "success_last": summary.get("success_last"), "done": run.done, "output_dir": str(run.output_dir),
            "wall_s": wall_s.get(run.name, metrics.get("train_runtime")),
        })
    return rows


def plot_grid(sweep: Sweep, ranked: list[dict[str, Any]], path: Path) -> Path | None:
    """Plot ``metric`` against the first grid key (one line per combination of the other keys) into a PNG.

    Returns:
        ``path``, or None when no run has the metric yet.
    """
    points = [r for r in ranked if r["value"] is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key, *others = list(sweep.grid)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sweep.grid[key])
    order = {_yaml_value(v): i for i, v in enumerate(sweep.grid[key])}
    lines: dict[str, list[tuple[Any, float]]] = {}
    for row in points:
        label = ", ".join(f"{k}={_yaml_value(row['point'][k])}" for k in others) or sweep.metric
        x = row["point"][key] if numeric else order[_yaml_value(row["point"][key])]
        lines.setdefault(label, []).append((x, row["value"]))
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for label, xy in sorted(lines.items()):
        xy.sort(key=lambda p: p[0])
        ax.plot([p[0] for p in xy], [p[1] for p in xy], marker="o", label=label)
    if not numeric:
        ax.set_xticks(range(len(order)), list(order))
    else:
        if all(v > 0 for v in sweep.grid[key]) and max(sweep.grid[key]) / min(sweep.grid[key]) >= 100:
            ax.set_xscale("log")
        ax.set_xticks(sorted(set(sweep.grid[key])), [_yaml_value(v) for v in sorted(set(sweep.grid[key]))])
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.margins(y=0.15)
    for xy in lines.values():
        for x, y in xy:
            ax.annotate(f"{y:.4g}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xlabel(key)
    ax.set_ylabel(sweep.metric)
    ax.set_title(f"{sweep.recipe}: {sweep.metric} ({sweep.mode} is best)")
    ax.grid(alpha=0.3)
    if others:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def subprocess_launch(launcher: str = "") -> Launch:
    """A :data:`Launch` running ``[launcher] -m medagentgym.cli.train recipe=<recipe> <overrides>`` in a fresh
    process (``train.py``'s entry point, found the same way in a clone and in an installed package).

    Args:
        launcher: Command before ``-m medagentgym.cli.train``, e.g. ``"accelerate launch"`` (``accelerate launch``,
            ``torchrun`` and ``python`` take ``-m``); empty = this Python interpreter.
    """
    prefix = shlex.split(launcher) or [sys.executable]

    def launch(recipe: str, overrides: list[str]) -> int:
        return subprocess.call([*prefix, *TRAIN_MODULE, f"recipe={recipe}", *overrides])

    return launch


def main(argv: list[str] | None = None, *, launch: Launch | None = None, launch_eval: Any = None) -> int:
    """Parse flags, validate the sweep, run it, print the ranking or the stage table.

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).
        launch: How to run one train.py invocation (default: a subprocess per run, see ``--launcher``).
        launch_eval: How to run one ``medagentgym eval`` invocation (``argv -> exit status``; default a
            subprocess), for a chain with an ``evaluate`` section.

    Returns:
        The exit status: 0, 2 for an invalid sweep, or the status of the first run that failed.
    """
    parser = argparse.ArgumentParser(description="Run a grid or a stage chain of train.py runs from a sweep file.")
    parser.add_argument("sweep", help="sweep YAML file (e.g. recipes/sweeps/pipeline_tiny.yaml), or a bundled "
                                      "sweep's name (pipeline_tiny)")
    parser.add_argument("--dry-run", action="store_true", help="validate every run and print the plan; train nothing")
    parser.add_argument("--launcher", default="",
                        help='command before `-m medagentgym.cli.train` (train.py), e.g. "accelerate launch"')
    parser.add_argument("--output-root", default="", help="write under this folder instead of the file's output_root")
    parser.add_argument("--debug", action="store_true", help="show the traceback on errors")
    args = parser.parse_args(argv)
    try:
        return _run(args, launch, launch_eval)
    except KeyboardInterrupt:
        print("sweep.py: interrupted; finished runs are kept, rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        name = "" if isinstance(exc, RecipeError) else f"{type(exc).__name__}: "
        print(f"sweep.py: error: {name}{' '.join(str(exc).split())} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, launch: Launch | None, launch_eval: Any = None) -> int:
    sweep = load_sweep(args.sweep)
    sweep.output_root = args.output_root or sweep.output_root
    runs = plan_runs(sweep)
    if sweep.evaluate is not None:  # its evaluations' builds too, before anything trains
        from medagentgym.medcopilot.sweep_eval import EvalSpec

        EvalSpec.from_dict(sweep.evaluate).check_builds()
    root = Path(sweep.output_root)
    what = f"a chain of {len(runs)} stages" if sweep.stages else f"{len(runs)} runs of recipe {sweep.recipe!r}"
    print(f"[sweep] {what} into {root}", flush=True)
    previous = _read_json(root / RESULTS).get("wall_s", {})
    wall_s = {k: float(v) for k, v in previous.items() if isinstance(v, (int, float))}
    launch = launch or subprocess_launch(args.launcher)
    for i, run in enumerate(runs):
        done = run.done
        parent = next((r for r in runs if r.name == run.start), None) if sweep.stages else None
        stale = done and parent is not None and parent.done and _mtime(run) < _mtime(parent)
        if stale:
            print(f"sweep.py: error: stage {run.name!r} finished before the stage it starts from "
                  f"({parent.name!r}) was retrained; delete {run.output_dir} and rerun", file=sys.stderr)
            return 2
        print(f"[sweep] {run.name}: {run.recipe} {' '.join(run.overrides)}{'  (done, skipped)' if done else ''}",
              flush=True)
        if args.dry_run or done:
            continue
        started = time.monotonic()
        status = launch(run.recipe, run.overrides)
        if status != 0:
            print(f"sweep.py: error: run {run.name!r} exited with status {status}; rerun to resume", file=sys.stderr)
            return status
        if not run.done:
            print(f"sweep.py: error: run {run.name!r} exited 0 but wrote no {run.output_dir / SUMMARY}; "
                  f"check its log", file=sys.stderr)
            return 1
        wall_s[run.name] = round(time.monotonic() - started, 1)
    if sweep.evaluate is not None:
        from medagentgym.medcopilot.sweep_eval import EvalSpec, evaluate_chain

        spec = EvalSpec.from_dict(sweep.evaluate)
        if args.dry_run:
            for line in spec.plan(runs, root):
                print(f"[sweep] {line}", flush=True)
            return 0
        status = evaluate_chain(spec, runs, root, launch_eval=launch_eval)
        if status != 0:
            return status
    if args.dry_run:
        return 0
    return _report_chain(sweep, runs, wall_s) if sweep.stages else _report_grid(sweep, runs, wall_s)


def _report_chain(sweep: Sweep, runs: list[Run], wall_s: dict[str, float]) -> int:
    rows = stage_rows(runs, wall_s)
    _write_json(Path(sweep.output_root) / RESULTS, {"kind": "stages", "stages": rows, "wall_s": wall_s})
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"stage chain -> {sweep.output_root}")
    for column in ("stage", "method", "steps", "train loss", "reward first→last", "success (last)", "output dir", "time"):
        table.add_column(column, justify="right" if column in ("steps", "train loss", "time") else "left")
    for row in rows:
        reward = "" if row["reward_first"] is None else f"{_fmt(row['reward_first'])}→{_fmt(row['reward_last'])}"
        wall = "" if row["wall_s"] is None else f"{row['wall_s']:.0f} s"
        table.add_row(row["stage"], str(row["method"]), str(row["steps"]), _fmt(row["train_loss"]), reward,
                      _fmt(row["success_last"]), row["output_dir"], wall)
    Console(width=160).print(table)
    return 0


def _report_grid(sweep: Sweep, runs: list[Run], wall_s: dict[str, float]) -> int:
    ranked = rank(sweep, runs)
    root = Path(sweep.output_root)
    plot = plot_grid(sweep, ranked, root / f"sweep_{_file_slug(sweep.metric)}.png")
    _write_json(root / RESULTS, {"kind": "grid", "recipe": sweep.recipe, "metric": sweep.metric,
                                 "mode": sweep.mode, "runs": ranked, "plot": str(plot) if plot else None,
                                 "wall_s": wall_s})
    for row in ranked:
        print(f"[sweep] {sweep.metric}={row['value']}  {row['name']}", flush=True)
    if plot:
        print(f"[sweep] plot: {plot}", flush=True)
    return 0


def _mtime(run: Run) -> float:
    return (run.output_dir / SUMMARY).stat().st_mtime


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(value)).strip("-") or "x"


def _file_slug(value: Any) -> str:
    return re.sub(r"[^\w.+-]+", "-", str(value)).strip("-") or "x"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
