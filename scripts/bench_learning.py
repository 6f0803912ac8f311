"""Benchmark learning on CPU: GRPO and PPO x seeds x families, each from an oracle warm start of the tiny model.

    python scripts/bench_learning.py [--methods grpo ppo] [--families say_number clinic_code toy_lookup]
        [--seeds 5] [--out runs/bench_learning] [--json]

Every run (:func:`medcopilot.learning.learning_run`) warm-starts the tiny random Qwen2 on the family's oracle
episodes, measures success on a fixed evaluation (>= 96 episodes, sampling seeds fixed per run), trains with the
method, and measures again (and every ``--eval-every`` steps, for the curves). ``say_number`` is one turn (submit
the number the question shows); ``clinic_code`` is two turns (query a database, submit the code it holds, the same
for every task); ``toy_lookup`` is two turns whose answer exists only in the observation (run SQL, submit the value
it returned; also measured on held-out records).

Writes into ``--out``: ``<method>-<family>-seed<k>.json`` per run (a rerun skips runs already there, so an
interrupted benchmark resumes), ``curves.png`` (success vs step, median and min-max band over seeds, one panel per
family) and ``summary.json``. Prints a table; with ``--json`` stdout ends with ONE JSON line:
``per_method: {grpo: {median_gain, seeds_improved, seeds, collapsed, ...}, ppo: {...}}`` (one-turn family),
``multi_turn: {family: {method: {...}}}``, ``multi_turn_gain`` (``clinic_code``: median over seeds and methods,
with ``multi_turn_spread`` [min, max]), ``observation_gain`` (the same for ``toy_lookup``), ``per_run`` and
``cpu_s``. A run has *collapsed* when its success ends below half of where it started (or below 0.05).
Each run takes 1-4 CPU minutes; ``--jobs 2`` runs two at once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from medcopilot.learning import FAMILIES, RunResult

ONE_TURN, MULTI_TURN, OBSERVATION = "say_number", "clinic_code", "toy_lookup"


def collapsed(run: dict[str, Any]) -> bool:
    """The run ended below half its starting success, or below 0.05."""
    return run["after"] < max(0.05, run["before"] / 2)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``per_method`` block for a list of runs (one method, one family)."""
    gains = [r["gain"] for r in runs]
    return {"seeds": len(runs), "median_gain": round(statistics.median(gains), 4), "min_gain": round(min(gains), 4),
            "max_gain": round(max(gains), 4), "seeds_improved": sum(g > 0 for g in gains),
            "collapsed": sum(collapsed(r) for r in runs),
            "median_before": round(statistics.median(r["before"] for r in runs), 4),
            "median_after": round(statistics.median(r["after"] for r in runs), 4)}


def one_run(job: dict[str, Any]) -> dict[str, Any]:
    """Run one (method, family, seed) in this process; write and return its JSON."""
    from medcopilot.learning import learning_run

    path = Path(job.pop("path"))
    with tempfile.TemporaryDirectory() as work:
        result: RunResult = learning_run(job.pop("method"), job.pop("family"), job.pop("model_dir"), work,
                                         log=lambda line: print(line, flush=True), **job)
    data = result.to_dict()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return data


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Success vs step: per method and family the median over seeds and the min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted({r["family"] for r in runs})
    fig, axes = plt.subplots(1, len(families), figsize=(5.5 * len(families), 4), squeeze=False)
    for ax, family in zip(axes[0], families):
        for method in sorted({r["method"] for r in runs if r["family"] == family}):
            group = [r for r in runs if r["family"] == family and r["method"] == method]
            steps = sorted(set.intersection(*[{s for s, _ in r["curve"]} for r in group]))
            values = [[dict(map(tuple, r["curve"]))[s] for r in group] for s in steps]
            ax.plot(steps, [statistics.median(v) for v in values], marker="o", label=f"{method} ({len(group)} seeds)")
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], alpha=0.2)
        ax.set(title=f"{family} ({FAMILIES[family][0]} turn(s))", xlabel="RL step",
               ylabel="success on the fixed evaluation", ylim=(0, 1))
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(runs: list[dict[str, Any]]) -> str:
    """One line per (method, family): gains over seeds."""
    lines = [f"{'method':6} {'family':11} {'seeds':>5} {'before':>7} {'after':>7} {'median gain':>11} "
             f"{'min':>6} {'max':>6} {'improved':>8} {'collapsed':>9} {'cpu s/run':>9}"]
    for method, family in sorted({(r["method"], r["family"]) for r in runs}):
        group = [r for r in runs if r["method"] == method and r["family"] == family]
        s = summarize(group)
        lines.append(f"{method:6} {family:11} {s['seeds']:5d} {s['median_before']:7.3f} {s['median_after']:7.3f} "
                     f"{s['median_gain']:+11.3f} {s['min_gain']:+6.3f} {s['max_gain']:+6.3f} "
                     f"{s['seeds_improved']:>5d}/{s['seeds']:<2d} {s['collapsed']:9d} "
                     f"{statistics.median(r['cpu_s'] for r in group):9.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", choices=["grpo", "ppo"], default=["grpo", "ppo"], help="RL methods")
    p.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=sorted(FAMILIES), help="families")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per method and family; default 5")
    p.add_argument("--first-seed", type=int, default=0, help="first seed; default 0")
    p.add_argument("--steps", type=int, default=None, help="RL steps (default: medcopilot.learning's per method)")
    p.add_argument("--lr", type=float, default=None, help="RL learning rate (default: per method)")
    p.add_argument("--group", type=int, default=None, help="episodes per task in a step (default: per method)")
    p.add_argument("--eval-every", type=int, default=10, help="evaluate every N steps for the curves; default 10")
    p.add_argument("--eval-episodes", type=int, default=96, help="episodes of the fixed evaluation; default 96")
    p.add_argument("--model", default=None, help="tiny model folder (default: build one, seed 0, into a temp dir)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_learning"), help="results folder (resumable)")
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes); default 1")
    p.add_argument("--summarize", action="store_true",
                   help="run nothing: summarise every run already in --out (all methods, families, seeds)")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line of results")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        p.error(f"--seeds={args.seeds} and --jobs={args.jobs} must be >= 1")
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = args.model
    if model_dir is None and not args.summarize:
        from medcopilot.tiny import build_tiny_model

        model_dir = str(build_tiny_model(args.out / "tiny-qwen2", seed=0))
    jobs, runs = [], []
    if args.summarize:
        runs = [json.loads(f.read_text(encoding="utf-8")) for f in sorted(args.out.glob("*-seed*.json"))]
        args.methods = sorted({r["method"] for r in runs})
    for method in [] if args.summarize else args.methods:
        for family in args.families:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                path = args.out / f"{method}-{family}-seed{seed}.json"
                if path.is_file():
                    runs.append(json.loads(path.read_text(encoding="utf-8")))
                    continue
                jobs.append({"path": str(path), "method": method, "family": family, "model_dir": model_dir,
                             "seed": seed, "steps": args.steps, "lr": args.lr, "group": args.group,
                             "eval_every": args.eval_every, "eval_episodes": args.eval_episodes,
                             "heldout": family == OBSERVATION})
    print(f"[bench_learning] {len(jobs)} runs to do, {len(runs)} already in {args.out}", flush=True)
    if args.jobs == 1:
        runs += [one_run(job) for job in jobs]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            runs += list(pool.map(one_run, jobs))
    if not runs:
        print("nothing to summarise", file=sys.stderr)
        return 1
    print(table(runs))
    plot(runs, args.out / "curves.png")
    def group(family: str, method: str | None = None) -> list[dict[str, Any]]:
        return [r for r in runs if r["family"] == family and method in (None, r["method"])]

    def median_and_spread(family: str) -> tuple[float | None, list[float] | None]:
        gains = [r["gain"] for r in group(family)]
        return (round(statistics.median(gains), 4), [round(min(gains), 4), round(max(gains), 4)]) if gains \
            else (None, None)

    multi_gain, multi_spread = median_and_spread(MULTI_TURN)
    observation_gain, observation_spread = median_and_spread(OBSERVATION)
    result = {
        "per_method": {m: summarize(group(ONE_TURN, m)) for m in args.methods if group(ONE_TURN, m)},
        "multi_turn": {f: {m: summarize(group(f, m)) for m in args.methods if group(f, m)}
                       for f in (MULTI_TURN, OBSERVATION) if group(f)},
        "multi_turn_gain": multi_gain, "multi_turn_spread": multi_spread,
        "observation_gain": observation_gain, "observation_spread": observation_spread,
        "per_run": [{k: r[k] for k in ("method", "family", "seed", "before", "after", "gain", "heldout_before",
                                       "heldout_after", "cpu_s")} for r in runs],
        "settings": {f"{r['method']}/{r['family']}": r["settings"] for r in runs},
        "cpu_s": round(sum(r["cpu_s"] for r in runs), 1), "wall_s": round(time.monotonic() - started, 1),
        "curves_png": str(args.out / "curves.png"),
    }
    (args.out / "summary.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"[bench_learning] curves: {args.out / 'curves.png'}; summary: {args.out / 'summary.json'}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
