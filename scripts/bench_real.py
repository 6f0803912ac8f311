"""The paper's table in miniature on a real model, on CPU: zero-shot -> SFT -> GRPO / PPO on SmolLM2-135M-Instruct.

    .venv/bin/medagentgym real-model                           # once: artifacts/smollm2-135m (bf16)
    .venv/bin/python scripts/bench_real.py --quick --json      # writes runs/bench_real/{table.md,result.json,table.png}
    .venv/bin/python scripts/bench_real.py --out runs/bench_real_full   # full mode

Runs :func:`medagentgym.medcopilot.real_pipeline.run_pipeline` (the families, stages and settings are documented there) and
writes ``table.md`` (per family and method: success, n, 95 % Wilson interval, difference to zero-shot; RL per
seed and pooled), ``result.json`` and ``table.png``. ``--json`` ends stdout with one JSON object: ``rows``,
``cost`` (CPU seconds per stage), ``settings``, ``speed`` (the before/after generation probe,
``medagentgym.medcopilot.real_pipeline.generation_speed``), ``threads``, ``cpu_s``, ``wall_s``. The run folder is replaced on each run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from medagentgym.medcopilot.real_pipeline import FULL, ID, OOD, QUICK, run_pipeline, table_rows


def markdown(rows: list[dict]) -> str:
    """The table as Markdown, one line per family and method."""
    lines = ["| family | split | method | success | n | 95 % CI | Δ vs zero-shot |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['split']} | {r['method']} | {r['success']:.3f} | {r['n']} | "
                     f"{r['ci95'][0]:.3f}-{r['ci95'][1]:.3f} | {r['delta']:+.3f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    """Success with its interval per family (groups) and method (bars); RL seeds pooled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if "seed " not in r["method"]]
    families = list(dict.fromkeys(r["family"] for r in shown))
    methods = list(dict.fromkeys(r["method"] for r in shown))
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(8, 4))
    for m, method in enumerate(methods):
        xs, ys, lo, hi = [], [], [], []
        for f, family in enumerate(families):
            r = next(r for r in shown if r["family"] == family and r["method"] == method)
            xs.append(f + m * width)
            ys.append(r["success"])
            lo.append(r["success"] - r["ci95"][0])
            hi.append(r["ci95"][1] - r["success"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=method)
    ax.set_xticks([f + 0.4 - width / 2 for f in range(len(families))],
                  [f"{f}\n({next(r['split'] for r in shown if r['family'] == f)})" for f in families], fontsize=8)
    ax.set(ylabel="success (95 % CI)", ylim=(0, 1), title="SmolLM2-135M-Instruct: zero-shot -> SFT -> RL (CPU)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="artifacts/smollm2-135m", help="the converted checkpoint (medagentgym real-model)")
    parser.add_argument("--out", default="runs/bench_real", help="run folder (replaced)")
    parser.add_argument("--quick", action="store_true", help="the quick settings (medagentgym.medcopilot.real_pipeline.QUICK)")
    parser.add_argument("--families", default=",".join(ID), help=f"in-distribution families (default {','.join(ID)})")
    parser.add_argument("--held-out", default=",".join(OOD), help=f"held-out families (default {','.join(OOD)})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting, e.g. --set rl_steps=2 --set seeds=[0] (JSON values)")
    parser.add_argument("--sandbox", default="bwrap", choices=["bwrap", "local"],
                        help="sandbox backend; 'local' has no isolation (development only)")
    parser.add_argument("--json", action="store_true", help="end stdout with one JSON object of results")
    args = parser.parse_args(argv)
    settings = dict(QUICK if args.quick else FULL)
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in settings:
            parser.error(f"--set {item!r}: unknown setting {key!r}; known: {', '.join(settings)}")
        settings[key] = json.loads(value)
    pick = {**ID, **OOD}
    unknown = [n for n in (args.families + "," + args.held_out).split(",") if n and n not in pick]
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {', '.join(pick)}")
    if not (Path(args.model) / "config.json").is_file():
        print(f"bench_real: error: no checkpoint at {args.model}; run `medagentgym real-model` first", file=sys.stderr)
        return 2
    for key, value in {"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
        os.environ.setdefault(key, value)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    started, cpu0 = time.monotonic(), time.process_time()
    result = run_pipeline(args.model, out, settings,
                          families={n: pick[n] for n in args.families.split(",") if n},
                          held_out={n: pick[n] for n in args.held_out.split(",") if n}, sandbox=args.sandbox,
                          log=lambda line: print(line, flush=True))
    rows = table_rows(result)
    result.update(rows=rows, cpu_s=round(time.process_time() - cpu0, 1), wall_s=round(time.monotonic() - started, 1))
    (out / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "table.md").write_text(markdown(rows), encoding="utf-8")
    plot(rows, out / "table.png")
    print(markdown(rows), flush=True)
    if result["speed"]:
        speed = result["speed"]
        print(f"generation speed ({speed['rows']} rows): before {speed['before']['per_cpu_s']} / after "
              f"{speed['after']['per_cpu_s']} positions per CPU s: x{speed['ratio_cpu']} (x{speed['ratio_wall']} per "
              f"wall s)", flush=True)
    if args.json:
        print(json.dumps({k: result[k] for k in ("rows", "cost", "settings", "speed", "threads", "cpu_s", "wall_s")},
                         default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
