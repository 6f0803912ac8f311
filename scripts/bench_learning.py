"""Benchmark learning on CPU: GRPO and PPO x seeds x families, each from a warm start of the tiny model.

    python scripts/bench_learning.py --quick --json        # every rung, seed 0 (QUICK_RUNS), ~12 min on 2 cores
    python scripts/bench_learning.py [--methods grpo ppo] [--families say_number clinic_code toy_lookup toy_choice
        toy_retry]
        [--seeds 5] [--eval-every 10] [--out runs/bench_learning] [--jobs 2] [--json]

Every run (:func:`medagentgym.medcopilot.learning.learning_run`) warm-starts the tiny random Qwen2 on the family's
demonstrations played through the environment, measures success on a fixed evaluation (sampling seeds fixed per
run), trains with the method, and measures again (and every ``--eval-every`` steps, for the curves).
``say_number`` is one turn (submit the number the question shows); ``clinic_code`` is two turns (query a
database, submit the code it holds, the same for every task); ``toy_lookup`` is two turns whose answer exists only
in the observation (run SQL, submit the value it returned): its evaluation runs on held-out records, and its
*control* scores the same policies on copies of those records whose stored value was made wrong
(:func:`medagentgym.medcopilot.learning.decoy_observations`): a policy that submits what it reads scores 0 there, one that
guesses 1/9, so success on the real records above the control's needs the observation.

Writes into ``--out``: ``<method>-<family>-seed<k>.json`` per run (a rerun skips runs already there, so an
interrupted benchmark resumes; a run made with other settings is refused, not mixed in), ``curves.png`` (success
vs step: the median over seeds and the band from the lowest to the highest seed, one panel per family; the
control and chance on ``toy_lookup``'s) and ``summary.json``. Prints a table; with ``--json`` stdout ends with ONE
JSON line::

    {"families": {family: {method: {seeds, seeds_improved, median_gain, min_gain, max_gain, collapsed,
                                    median_before, median_after}}},
     "control": {method: {median_before, median_after, max_after, chance, not_above_chance}},
     "observation_proof": {method: bool}, "per_run": [...], "cpu_s", "cpu_s_total", "wall_s", "curves_png", "quick"}

A run has *collapsed* when its success ends below half of where it started (or below 0.05). The observation
proof holds for a method when at least 4 of 5 seeds improved, the median gain is at least 0.15, none collapsed,
and no seed's control is above chance after RL (1/9 at or above the low end of its 95 % interval).

``toy_choice`` (issue 30) is the query-choice rung: three tables per record, the question names which; the
demonstrations read a table at random. Its runs add query-choice accuracy before and after (chance 1/3), the
paired record-level interval of its change and of success (128 held-out records), and the swapped-cue control
(:func:`medagentgym.medcopilot.learning.swapped_cue`); ``choice_proof`` holds for a method when at least 4 of 5 seeds raise
query-choice accuracy by 0.2 or more with the interval above 0 and no seed's control interval is above 0.
``toy_retry`` is the error-recovery rung (first-retry accuracy on records whose tables were renamed).

``--quick`` runs :data:`QUICK_RUNS`: seed 0 of every rung at the library's defaults, two runs at a time, a curve
point every 20 steps, into ``runs/bench_learning_quick``: GRPO and PPO on toy_lookup (the observation rung), PPO on
toy_choice and toy_retry (PPO's run is the cheaper of the two methods on toy_choice; on toy_retry they cost the
same), toy_retry stopped at 40 steps (:data:`QUICK_STEPS`). Measured end to end in docs/benchmarks.md ("Query
choice and error recovery, sixth round"). It runs every rung end to end on one seed and reports its numbers
(toy_retry's do not rise on seed 0); the proofs need 5 seeds per method (``--families toy_lookup toy_choice
--seeds 5``). ``--methods`` or ``--families`` with
``--quick`` run their product instead (methods default both, families :data:`QUICK_FAMILIES`).
:data:`QUICK_STEPS` cuts say_number and clinic_code to 20 steps when they are asked for with ``--quick``. The full
run (``--seeds 5 --eval-every 10``) is the one the docs' say_number and clinic_code tables quote. ``cpu_s`` in the
JSON line is the runs' own CPU, ``cpu_s_total`` that of this invocation with every process it started.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

# One torch thread per run (set before torch is imported, here and in the worker processes): on a shared 2-core
# machine a second intra-op thread spins and costs several times the CPU (docs/benchmarks.md, "Learning").
for _key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from medagentgym.medcopilot.learning import (  # noqa: E402
    CHOICE,
    CHOICE_METRIC,
    FAMILIES,
    HELD_OUT,
    OBSERVATION,
    RETRY,
    RunResult,
    default_settings,
)

#: Chance on toy_lookup: values are uniform on 1..9.
CHANCE = 1 / 9
#: Query-choice accuracy of a policy that reads one of toy_choice's three tables at random.
CHOICE_CHANCE = 1 / 3
#: What the observation proof asks of each method (issue 20).
PROOF = {"seeds_improved": 4, "median_gain": 0.15}
#: What the query-choice proof asks of each method (issue 30): on at least 4 of 5 seeds query-choice accuracy rises
#: by 0.2 or more with a paired record-level interval excluding 0, and on no seed the swapped-cue control rises
#: (its paired interval's low end above 0).
CHOICE_PROOF = {"seeds": 4, "choice_gain": 0.2}
QUICK = {"eval_episodes": 96, "eval_every": 20, "jobs": 2, "seeds": 1, "out": Path("runs/bench_learning_quick")}
#: The (method, family) runs of ``--quick``, seed 0 (issue 30: every rung inside 15 minutes of a quiet 2-core
#: machine, one invocation): both methods on the observation rung (~160 CPU-s a run), PPO on the query-choice and
#: error-recovery rungs (~410 CPU-s, and ~470 at 40 steps; GRPO's toy_choice run costs ~500). The proofs need 5 seeds per method:
#: ``--families toy_lookup toy_choice --seeds 5`` (docs/benchmarks.md, "Learning").
QUICK_RUNS = (("grpo", OBSERVATION), ("ppo", OBSERVATION), ("ppo", CHOICE), ("ppo", RETRY))
#: Families of ``--quick`` when ``--methods`` is given without ``--families``.
QUICK_FAMILIES = (OBSERVATION, CHOICE, RETRY)
#: RL steps of ``--quick`` on say_number and clinic_code, whose gain both methods make by step 20 (defaults: GRPO
#: 60, PPO 30; docs/benchmarks.md, "Learning"). toy_lookup and toy_choice keep their 60. toy_retry's run is the
#: longest one (~670 CPU-s at 60 steps on a slow day: 14 min 32 s for the whole --quick, measured), and the others
#: run beside it, so --quick stops it at 40 steps (~11 CPU-s a step; the 5-seed runs of docs/benchmarks.md are 60).
QUICK_STEPS = {(method, family): 20 for method in ("grpo", "ppo") for family in ("say_number", "clinic_code")}
QUICK_STEPS[("ppo", RETRY)] = QUICK_STEPS[("grpo", RETRY)] = 40
#: Run settings a stored run must share with this invocation to be reused (and the library's defaults for its
#: method and family, :func:`~medagentgym.medcopilot.learning.default_settings`).
KEYED = ("steps", "lr", "group", "eval_every", "eval_episodes")


def collapsed(run: dict[str, Any]) -> bool:
    """The run ended below half its starting success, or below 0.05."""
    return run["after"] < max(0.05, run["before"] / 2)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Gains over seeds for a list of runs (one method, one family).

    Runs with a paired record-level interval (the held-out families, :func:`medagentgym.medcopilot.learning.paired`) also count
    ``seeds_interval_above_0`` (its low end above 0); toy_choice's add query-choice accuracy before and after,
    ``seeds_choice_proof`` (accuracy +0.2 or more with its paired interval above 0) and
    ``seeds_choice_interval_above_0``; toy_retry's the same for first-retry accuracy.
    """
    gains = [r["gain"] for r in runs]
    out = {"seeds": len(runs), "median_gain": round(statistics.median(gains), 4), "min_gain": round(min(gains), 4),
           "max_gain": round(max(gains), 4), "seeds_improved": sum(g > 0 for g in gains),
           "collapsed": sum(collapsed(r) for r in runs),
           "median_before": round(statistics.median(r["before"] for r in runs), 4),
           "median_after": round(statistics.median(r["after"] for r in runs), 4)}
    if all(r.get("paired_success") for r in runs):
        out["seeds_interval_above_0"] = sum(r["paired_success"]["low"] > 0 for r in runs)
    if all(r.get("paired_choice") for r in runs):
        out.update({"median_choice_before": round(statistics.median(r["choice_before"] for r in runs), 4),
                    "median_choice_after": round(statistics.median(r["choice_after"] for r in runs), 4),
                    "seeds_choice_proof": sum(choice_improved(r) for r in runs),
                    "seeds_choice_interval_above_0": sum(r["paired_choice"]["low"] > 0 for r in runs)})
    return out


def choice_improved(run: dict[str, Any]) -> bool:
    """Query-choice accuracy rose by at least 0.2 and its paired record-level interval excludes 0."""
    return (run["choice_after"] - run["choice_before"] >= CHOICE_PROOF["choice_gain"]
            and run["paired_choice"]["low"] > 0)


def control_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The control of one method's held-out runs: success with every observed value made wrong (toy_lookup), or
    with the cued table's value made wrong (toy_choice; ``flat``: no seed's paired interval above 0)."""
    from medagentgym.medcopilot.learning import wilson

    n = [r["settings"]["eval_episodes"] for r in runs]
    after = [r["control_after"] for r in runs]
    lows = [wilson(a * k, k)[0] for a, k in zip(after, n)]
    out = {"median_before": round(statistics.median(r["control_before"] for r in runs), 4),
           "median_after": round(statistics.median(after), 4), "max_after": round(max(after), 4),
           "chance": round(CHANCE, 4), "not_above_chance": all(low <= CHANCE for low in lows)}
    if all(r.get("paired_control") for r in runs):
        out["flat"] = all(r["paired_control"]["low"] <= 0 for r in runs)
    return out


def choice_proof(summary: dict[str, Any], control: dict[str, Any] | None) -> bool:
    """The query-choice proof for one method (issue 30; see :data:`CHOICE_PROOF`)."""
    return (summary["seeds"] >= 5 and summary.get("seeds_choice_proof", 0) >= CHOICE_PROOF["seeds"]
            and control is not None and bool(control.get("flat")))


def proof(summary: dict[str, Any], control: dict[str, Any] | None) -> bool:
    """The observation proof for one method (see the module doc)."""
    return (summary["seeds"] >= 5 and summary["seeds_improved"] >= PROOF["seeds_improved"]
            and summary["median_gain"] >= PROOF["median_gain"] and summary["collapsed"] == 0
            and control is not None and control["not_above_chance"])


def one_run(job: dict[str, Any]) -> dict[str, Any]:
    """Run one (method, family, seed) in this process; write and return its JSON."""
    from medagentgym.medcopilot.learning import learning_run

    path = Path(job.pop("path"))
    keyed = job.pop("keyed")
    with tempfile.TemporaryDirectory() as work:
        result: RunResult = learning_run(job.pop("method"), job.pop("family"), job.pop("model_dir"), work,
                                         log=lambda line: print(line, flush=True), **job)
    data = {**result.to_dict(), "keyed": keyed}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return data


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Success vs step: per method and family the median over seeds and the lowest-to-highest band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = [f for f in FAMILIES if any(r["family"] == f for r in runs)]
    fig, axes = plt.subplots(1, len(families), figsize=(5.5 * len(families), 4.2), squeeze=False)
    for ax, family in zip(axes[0], families):
        for colour, method in zip(("C0", "C1"), sorted({r["method"] for r in runs if r["family"] == family})):
            group = [r for r in runs if r["family"] == family and r["method"] == method]
            steps = sorted(set.intersection(*[{p[0] for p in r["curve"]} for r in group]))
            values = [[{p[0]: p[1] for p in r["curve"]}[s] for r in group] for s in steps]
            ax.plot(steps, [statistics.median(v) for v in values], marker="o", color=colour,
                    label=f"{method}: median of {len(group)} seeds")
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], color=colour, alpha=0.18)
            if family in HELD_OUT and all(r.get("control_after") is not None for r in group):
                ends = [0, steps[-1]]
                ctrl = [[r["control_before"] for r in group], [r["control_after"] for r in group]]
                ax.errorbar(ends, [statistics.median(c) for c in ctrl],
                            yerr=[[statistics.median(c) - min(c) for c in ctrl],
                                  [max(c) - statistics.median(c) for c in ctrl]],
                            color=colour, linestyle="--", marker="x", capsize=4,
                            label=f"{method}: control ({'cued table wrong' if family == CHOICE else 'observed values wrong'})")
            if all(r.get("choice_curve") for r in group):  # toy_choice's query choice, toy_retry's first retry
                points = sorted(set.intersection(*[{p[0] for p in r["choice_curve"]} for r in group]))
                acc = [[{p[0]: p[1] for p in r["choice_curve"]}[s] for r in group] for s in points]
                ax.plot(points, [statistics.median(v) for v in acc], color=colour, linestyle="-.", marker="s",
                        label=f"{method}: {group[0].get('choice_metric', 'query choice')} (median)")
        if family == OBSERVATION:
            ax.axhline(CHANCE, color="grey", linewidth=1, linestyle=":", label="chance (1/9)")
        if family in CHOICE_METRIC:
            ax.axhline(CHOICE_CHANCE, color="grey", linewidth=1, linestyle=":",
                       label=f"{CHOICE_METRIC[family][0]} at random (1/3)")
        split = "held-out records" if family in HELD_OUT else "training tasks"
        ax.set(title=f"{family} ({FAMILIES[family][0]} turn(s))", xlabel="RL step",
               ylabel=f"success, {split}", ylim=(0, 1))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(runs: list[dict[str, Any]]) -> str:
    """One line per (method, family): gains over seeds, and the control where there is one."""
    lines = [(f"{'method':6} {'family':11} {'seeds':>5} {'before':>7} {'after':>7} {'median gain':>11} "
              f"{'min':>6} {'max':>6} {'improved':>8} {'collapsed':>9} {'control':>13} {'cpu s/run':>9} "
              f"{'choice/retry':>12} {'+0.2':>5}")]
    for family in FAMILIES:
        for method in sorted({r["method"] for r in runs if r["family"] == family}):
            group = [r for r in runs if r["method"] == method and r["family"] == family]
            s = summarize(group)
            ctrl = control_summary(group) if all(r.get("control_after") is not None for r in group) else None
            ctrl_text = f"{ctrl['median_before']:.3f}->{ctrl['median_after']:.3f}" if ctrl else "-"
            lines.append(f"{method:6} {family:11} {s['seeds']:5d} {s['median_before']:7.3f} {s['median_after']:7.3f} "
                         f"{s['median_gain']:+11.3f} {s['min_gain']:+6.3f} {s['max_gain']:+6.3f} "
                         f"{s['seeds_improved']:>5d}/{s['seeds']:<2d} {s['collapsed']:9d} {ctrl_text:>13} "
                         f"{statistics.median(r['cpu_s'] for r in group):9.0f} "
                         + (f"{s['median_choice_before']:.3f}->{s['median_choice_after']:.3f} "
                            f"{s['seeds_choice_proof']:>3d}/{s['seeds']}" if "seeds_choice_proof" in s else ""))
    return "\n".join(lines)


def cpu_seconds() -> float:
    """User + system CPU of this process and of every finished child: the run processes and, through them, their
    sandbox workers (each closed and waited for at the end of its run)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def results(runs: list[dict[str, Any]], *, started: float, cpu0: float, curves: Path,
            quick: bool) -> dict[str, Any]:
    """The JSON line (see the module doc)."""
    methods = sorted({r["method"] for r in runs})

    def group(family: str, method: str) -> list[dict[str, Any]]:
        return [r for r in runs if r["family"] == family and r["method"] == method]

    families = {f: {m: summarize(group(f, m)) for m in methods if group(f, m)} for f in FAMILIES
                if any(r["family"] == f for r in runs)}
    def controls(family: str) -> dict[str, Any]:
        return {m: control_summary(group(family, m)) for m in methods
                if group(family, m) and all(r.get("control_after") is not None for r in group(family, m))}

    control, choice_control = controls(OBSERVATION), controls(CHOICE)
    return {
        "families": families, "control": control, "choice_control": choice_control,
        "observation_proof": {m: proof(s, control.get(m)) for m, s in families.get(OBSERVATION, {}).items()},
        "choice_proof": {m: choice_proof(s, choice_control.get(m)) for m, s in families.get(CHOICE, {}).items()},
        "per_run": [{k: r.get(k) for k in ("method", "family", "seed", "before", "after", "gain", "control_before",
                                           "control_after", "paired_success", "paired_control", "choice_metric",
                                           "choice_before", "choice_after", "paired_choice", "cpu_s")} for r in runs],
        "settings": {f"{r['method']}/{r['family']}": r["settings"] for r in runs},
        "cpu_s": round(sum(r["cpu_s"] for r in runs), 1), "cpu_s_total": round(cpu_seconds() - cpu0, 1),
        "wall_s": round(time.monotonic() - started, 1),
        "curves_png": str(curves), "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"seed 0 of {', '.join('/'.join(r) for r in QUICK_RUNS)}, {QUICK['eval_episodes']}-episode "
                        f"evaluations, a curve point every {QUICK['eval_every']} steps, {QUICK['jobs']} runs at once, "
                        f"into {QUICK['out']} (flags given explicitly win)")
    p.add_argument("--methods", nargs="+", choices=["grpo", "ppo"], default=None,
                   help="RL methods (default: both)")
    p.add_argument("--families", nargs="+", choices=list(FAMILIES), default=None,
                   help=f"families (default: all; with --quick: {' '.join(QUICK_FAMILIES)})")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per method and family; default 5")
    p.add_argument("--first-seed", type=int, default=0, help="first seed; default 0")
    p.add_argument("--steps", type=int, default=None, help="RL steps (default: medagentgym.medcopilot.learning's per method)")
    p.add_argument("--lr", type=float, default=None, help="RL learning rate (default: per method)")
    p.add_argument("--group", type=int, default=None, help="episodes per task in a step (default: per method)")
    p.add_argument("--eval-every", type=int, default=None, help="evaluate every N steps for the curves; default 10")
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes of each evaluation; default 96")
    p.add_argument("--model", default=None, help="tiny model folder (default: build one, seed 0, into --out)")
    p.add_argument("--out", type=Path, default=None, help="results folder (resumable); default runs/bench_learning")
    p.add_argument("--jobs", type=int, default=None, help="runs in parallel (processes); default 1")
    p.add_argument("--summarize", action="store_true",
                   help="run nothing: summarise every run already in --out (all methods, families, seeds)")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line of results")
    args = p.parse_args(argv)
    preset = QUICK if args.quick else {"eval_episodes": 96, "eval_every": 10, "jobs": 1, "seeds": 5,
                                       "out": Path("runs/bench_learning")}
    if args.quick and args.methods is None and args.families is None:
        pairs = list(QUICK_RUNS)
    else:
        pairs = [(method, family) for method in args.methods or ["grpo", "ppo"]
                 for family in args.families or (QUICK_FAMILIES if args.quick else FAMILIES)]
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.seeds < 1 or args.jobs < 1 or args.eval_episodes < 1 or args.eval_every < 0:
        p.error(f"--seeds={args.seeds}, --jobs={args.jobs} and --eval-episodes={args.eval_episodes} must be >= 1, "
                f"--eval-every={args.eval_every} >= 0")
    started, cpu0 = time.monotonic(), cpu_seconds()
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = args.model
    if model_dir is None and not args.summarize:
        from medagentgym.medcopilot.tiny import build_tiny_model

        model_dir = str(build_tiny_model(args.out / "tiny-qwen2", seed=0))
    jobs, runs = [], []
    if args.summarize:
        runs = [json.loads(f.read_text(encoding="utf-8")) for f in sorted(args.out.glob("*-seed*.json"))]
    for method, family in [] if args.summarize else pairs:
        steps = args.steps
        if steps is None and args.quick:
            steps = QUICK_STEPS.get((method, family))
        keyed = {**{k: getattr(args, k) for k in KEYED}, "steps": steps,
                 "defaults": json.loads(json.dumps(default_settings(method, family)))}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            path = args.out / f"{method}-{family}-seed{seed}.json"
            if path.is_file():
                stored = json.loads(path.read_text(encoding="utf-8"))
                if stored.get("keyed") != keyed:
                    p.error(f"{path} was made with other settings ({stored.get('keyed')}, now {keyed}); "
                            f"use another --out or delete it")
                runs.append(stored)
                continue
            jobs.append({"path": str(path), "keyed": keyed, "method": method, "family": family,
                         "model_dir": model_dir, "seed": seed, "steps": steps, "lr": args.lr,
                         "group": args.group, "eval_every": args.eval_every,
                         "eval_episodes": args.eval_episodes})
    print(f"[bench_learning] {len(jobs)} runs to do, {len(runs)} already in {args.out}", flush=True)
    # Longest first, so the processes finish together: held-out families, then by tokens per episode (toy_retry's
    # episodes are the longest), GRPO before PPO (~1.4x PPO's CPU at the same batch).
    jobs.sort(key=lambda j: (j["family"] not in HELD_OUT, -FAMILIES[j["family"]][2], j["method"] != "grpo"))
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
    result = results(runs, started=started, cpu0=cpu0, curves=args.out / "curves.png", quick=args.quick)
    (args.out / "summary.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"[bench_learning] curves: {args.out / 'curves.png'}; summary: {args.out / 'summary.json'}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
