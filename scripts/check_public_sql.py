"""Run the public EHRSQL / MIMICSQL gold SQL on our databases and say how much of it gives a meaningful answer.

    python scripts/check_public_sql.py --mimic-iii valid_tasks.jsonl train_tasks.jsonl \\
        --eicu eicu/valid_tasks.jsonl --mimicsql treqs/test_tasks.jsonl --tasks-root artifacts/tasks
    python scripts/check_public_sql.py --mimic-iii FILE --size default --seed 0 --plant --json

Prints, per dataset, how many answerable gold queries execute and how many return a meaningful answer (not
empty, not only NULL / 0 / ''), after EHRSQL's post-processing (``medagentgym.tasks.ehr_synth.public_sql``), plus value
coverage (distinct compared literals present in our columns), id coverage (named patients present) and the
question mix of the public file beside our generated instances' (time windows, top-N, event-after-event, words).
Databases come from ``--tasks-root`` (``<root>/{mimic_iii,eicu,treqs}/*.db``, built by medagentgym build;
its instances give "our" question mix) or, without it, only the databases are built into a scratch folder at
``--size`` / ``--seed``; ``--plant`` builds them with the given question files as input (``public_questions=``),
so the patients they name exist. Nothing is written unless
``--json-out`` is given. The public files are not part of this repository; point at your own copies.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from medagentgym.tasks.base import TaskError
from medagentgym.tasks.ehr_synth.public_sql import (
    add_file_arguments,
    check,
    files_from_arguments,
    gold_sql,
    load_records,
    question_mix,
)

#: dataset -> (family, database file)
_DBS = {"mimic_iii": ("mimic_iii", "mimic_iii.db"), "eicu": ("eicu", "eicu.db"), "mimicsql": ("treqs", "treqs.db")}


def _build(root: Path, files: dict[str, list[Path]], *, size: str, seed: int, plant: bool,
           anonymous: bool = True) -> dict[str, float]:
    """Write the databases the files need under ``root`` (no instances); returns seconds per database, the
    shared hospital draw counted in the first."""
    from medagentgym import tasks
    from medagentgym.tasks.ehr_synth.hospital import SIZES, cached_draw

    public = tuple(str(p) for paths in files.values() for p in paths) if plant else ()
    seconds = {}
    for dataset in files:
        family_name, db = _DBS[dataset]
        family = tasks.make(family_name, root=root / family_name)
        started = time.perf_counter()
        (root / family_name).mkdir(parents=True, exist_ok=True)
        type(family).write_database(cached_draw(SIZES[size], seed, public, anonymous), root / family_name / db, seed)
        seconds[family_name] = round(time.perf_counter() - started, 1)
    return seconds


def _our_pairs(family_dir: Path) -> list[tuple[str, str]]:
    """(question, gold SQL) of the built family's instances (train and test)."""
    pairs = []
    for split in ("train", "test"):
        path = family_dir / f"{split}.jsonl"
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    rec = json.loads(line)
                    pairs.append((rec.get("question", ""), rec.get("solution", "")))
    return pairs


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_file_arguments(ap)
    ap.add_argument("--tasks-root", type=Path, help="built tasks root to check (default: build into a scratch dir)")
    ap.add_argument("--size", default="default", choices=("tiny", "default"), help="size to build without --tasks-root")
    ap.add_argument("--seed", type=int, default=0, help="seed to build without --tasks-root")
    ap.add_argument("--plant", action="store_true", help="build with the question files as input (named ids exist)")
    ap.add_argument("--named-only", action="store_true",
                    help="with --plant: plan only the patients the files name, not one per question naming nobody")
    ap.add_argument("--timeout", type=float, default=30.0, help="per-query limit in seconds (EHRSQL allows 60)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    ap.add_argument("--json-out", type=Path, help="also write the JSON summary to this file")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    args = ap.parse_args(argv)
    files = files_from_arguments(args)
    if not files:
        ap.error("give at least one of --mimic-iii, --eicu, --mimicsql")
    if args.tasks_root and args.plant:
        ap.error("--plant builds the databases; leave out --tasks-root")
    try:
        with tempfile.TemporaryDirectory(prefix="check_public_sql_") as tmp:
            root = args.tasks_root
            built = {}
            if root is None:
                root = Path(tmp)
                built = _build(root, files, size=args.size, seed=args.seed, plant=args.plant,
                               anonymous=not args.named_only)
            summary = {"tasks_root": str(args.tasks_root) if args.tasks_root else None, "size": args.size,
                       "seed": args.seed, "plant": args.plant, "named_only": args.named_only,
                       "build_seconds": built, "datasets": {}}
            for dataset, paths in files.items():
                records = [r for p in paths for r in load_records(p)]
                family_name, db = _DBS[dataset]
                report = check(records, root / family_name / db, dataset, timeout_s=args.timeout)
                summary["datasets"][dataset] = report.as_dict()
                summary["datasets"][dataset]["mix_public"] = question_mix(
                    (r.get("question", r.get("question_refine", "")), gold_sql(r, dataset) or "") for r in records
                    if gold_sql(r, dataset))
                summary["datasets"][dataset]["mix_ours"] = question_mix(_our_pairs(root / family_name))
    except TaskError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{'dataset':<10} {'answerable':>10} {'executes':>9} {'meaningful':>11} {'values':>8} {'ids':>8}")
    for dataset, d in summary["datasets"].items():
        print(f"{dataset:<10} {d['answerable']:>10} {d['executed_pct']:>8.1f}% {d['meaningful_pct']:>10.1f}% "
              f"{d['value_coverage_pct']:>7.1f}% {d['id_coverage_pct']:>7.1f}%")
        if d["top_missing_columns"]:
            print(f"{'':<10} missing literals by column: {d['top_missing_columns']}")
        for side in ("public", "ours"):
            m = d[f"mix_{side}"]
            if not m["n"]:
                continue
            print(f"{'':<10} mix {side:<6}: time windows {m['time_window']}%, top-N {m['top_n']}%, "
                  f"event-after-event {m['event_after_event']}%, {m['question_words']} words (n={m['n']})")
    if built:
        print(f"build seconds: {built}")
    text = json.dumps(summary, sort_keys=True)
    if args.json_out:
        args.json_out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # one line, not a traceback; 130 = killed by SIGINT, as shells report it
        print("\ninterrupted: nothing saved "
              "(the summary and --json-out are written only at the end); rerun the same command",
              file=sys.stderr)
        sys.exit(130)
