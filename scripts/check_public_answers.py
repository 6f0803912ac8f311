"""Import public task files under the ``public`` answer convention and check that their published answers grade
right, in the formats the benchmarks write them, and that known-wrong answers grade wrong.

    python scripts/check_public_answers.py --mimic-iii train_tasks.jsonl valid_tasks.jsonl \\
        --eicu eicu/train_tasks.jsonl eicu/valid_tasks.jsonl --treqs treqs/*.jsonl --npowerai npowerai/*.jsonl

For each family: records read, records imported, records set aside (by reason: ``gold_wall_clock``,
``gold_first_row``, ``gold_constant`` ... see ``medagentgym.tasks.importers.public``), the share of imported
records whose published answer grades right in every format (the file's JSON list, Python's repr, sqlite3's rows,
the bare value; N-PowerAI's number as published and as printed), and the share of known-wrong submissions
(perturbed values, another record's answer, a missing or extra value, two candidates, a shotgun) that grade
wrong. The EHR answers refer to the credentialed databases; the check grades without one (a tiny synthetic
database is mounted). Nothing is written unless ``--json-out`` is given. The public files are not part of this
repository; point at your own copies.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from medagentgym.tasks.base import TaskError

_FAMILIES = ("mimic_iii", "eicu", "treqs", "npowerai")


def check(family: str, paths: list[Path]) -> dict:
    """Import ``paths`` into a scratch root under the ``public`` convention and check every imported record."""
    from medagentgym import tasks
    from medagentgym.tasks.importers import import_files
    from medagentgym.tasks.importers.public import check_public_answers

    with tempfile.TemporaryDirectory(prefix="check_public_answers_") as tmp:
        manifest, report = import_files(family, paths, Path(tmp), answers="public", size="tiny")
        row = {"records": report.records, "imported": report.kept, "set_aside": report.by_reason,
               "notes": dict(report.notes)}
        if manifest is None:
            return {**row, "instances": 0, "correct_pct": 0.0, "graded_wrong_pct": 0.0, "failures": []}
        fam = tasks.make(family, root=Path(tmp))
        instances = fam.instances("train") + fam.instances("test")
        return {**row, **check_public_answers(fam, instances)}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (1 when a check falls short: < 98 % right or a wrong answer passes)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for family in _FAMILIES:
        ap.add_argument(f"--{family.replace('_', '-')}", dest=family, nargs="+", type=Path, default=[],
                        help=f"public {family} task files (MedAgentGym JSONL)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    ap.add_argument("--json-out", type=Path, help="also write the JSON summary to this file")
    args = ap.parse_args(argv)
    chosen = {f: getattr(args, f) for f in _FAMILIES if getattr(args, f)}
    if not chosen:
        ap.error("give at least one of " + ", ".join(f"--{f.replace('_', '-')}" for f in _FAMILIES))
    summary = {}
    try:
        for family, paths in chosen.items():
            summary[family] = check(family, paths)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{'family':<10} {'records':>7} {'imported':>8} {'right':>8} {'wrong->wrong':>13}  set aside")
    ok = True
    for family, row in summary.items():
        aside = ", ".join(f"{k} {v}" for k, v in row["set_aside"].items()) or "none"
        print(f"{family:<10} {row['records']:>7} {row['imported']:>8} {row['correct_pct']:>7.2f}% "
              f"{row['graded_wrong_pct']:>12.2f}%  {aside}")
        for failure in row["failures"][:5]:
            print(f"{'':<10} {failure}")
        ok = ok and row["correct_pct"] >= 98.0 and row.get("graded_wrong") == row.get("wrong_submissions")
    text = json.dumps(summary, sort_keys=True, default=str)
    if args.json_out:
        args.json_out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
