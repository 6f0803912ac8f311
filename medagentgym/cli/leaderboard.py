"""Merge several evaluation reports into one Markdown leaderboard and one PNG plot.

    medagentgym leaderboard runs/eval/oracle runs/eval/constant runs/eval/qwen7b/report.json \
        --out runs/eval/leaderboard

Each argument is a ``report.json`` written by ``medagentgym eval`` (or its directory). Writes
``<out>/leaderboard.md`` (one row per report, best overall success first; columns: episodes, success, Pass@1
and success per family) and ``<out>/leaderboard.png`` (grouped bars of success per family), and prints the
table. ``--json`` ends stdout with one JSON object: ``{"rows": [{"policy", "success_rate"}, ...], "md", "png"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from medagentgym.env_client.evaluation import EvalError, leaderboard, load_reports


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+", type=Path, help="report.json files (or directories holding one)")
    p.add_argument("--out", type=Path, default=Path("runs/eval/leaderboard"),
                   help="directory for leaderboard.md and leaderboard.png (default runs/eval/leaderboard)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plot")
    p.add_argument("--json", action="store_true", help="end stdout with a JSON summary line")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = p.parse_args(argv)
    try:
        reports = load_reports(args.reports)
        args.out.mkdir(parents=True, exist_ok=True)
        png = None if args.no_plot else args.out / "leaderboard.png"
        table = leaderboard(reports, png)
        md = args.out / "leaderboard.md"
        tmp = md.with_name(f".{md.name}.tmp{os.getpid()}")
        tmp.write_text("# Leaderboard\n\n" + table)
        os.replace(tmp, md)
    except (EvalError, OSError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table, end="")
    if args.json:
        rows = [{"policy": r["policy"], "success_rate": r["success_rate"]}
                for r in sorted(reports, key=lambda r: -r["success_rate"])]
        print(json.dumps({"rows": rows, "md": str(md), "png": str(png) if png else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
