"""Import public benchmark task files as a built family that rollouts, evaluation and training use as-is.

    medagentgym import --family mimic_iii --from valid_tasks.jsonl --db artifacts/tasks/mimic_iii/mimic_iii.db --out artifacts/imported
    medagentgym import --family treqs --from test_tasks.jsonl --from train_tasks.jsonl --out artifacts/imported
    medagentgym import --family npowerai --from test_tasks.jsonl --out artifacts/imported --check
    medagentgym import --family biodsbench --from test_tasks.jsonl --data ~/cbioportal --out artifacts/imported
    medagentgym import --family medagentbench --from test_tasks.jsonl --fhir-url http://localhost:8080/fhir/ --out artifacts/imported

Writes ``<out>/<family>/`` (``train.jsonl``, ``test.jsonl``, data files, ``import_report.json``, ``manifest.json``)
so that ``tasks.make(family, root=out)``, ``medagentgym rollout --tasks-root out`` and ``medagentgym eval
--tasks-root out`` use it like a generated build. Formats: EHRSQL JSON, MIMICSQL, MedAgentGym task JSONL of every
family, MedCalc-Bench rows (see ``medagentgym/tasks/importers/``). One bad record never stops a file: each rejected record is
printed as ``path:line: reason: detail`` (the first ``--show``), then a count per reason, the files or packages
the user must supply and how to pass them, and the summary. SQL families re-instantiate slot values absent from
the target database (``--db``, or the family's synthetic database built at ``--size``) and recompute answers by
executing the rewritten gold SQL; ``--answers public`` keeps the published answers instead (MedAgentGym's EHR
answers, N-PowerAI's numbers), graded as the benchmark's scorer grades them, and sets aside records whose
published answer is defective (``gold_*`` reasons). Exit status: 0 when something was imported (and, with ``--strict``, nothing
rejected), 1 otherwise, 2 on bad arguments, 130 on Ctrl-C (one line says whether the import was written).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from medagentgym.env_client.argtypes import nonneg_int
from medagentgym.tasks.base import TaskError
from medagentgym.tasks.importers import IMPORTERS, check_import, import_files


def interrupted_line(family_dir: Path, since: float, *, checking: bool) -> str:
    """What an interrupted import left: the family folder is written in one step, at the end, or not at all.

    Example:
        >>> interrupted_line(Path("artifacts/imported/treqs"), time.time(), checking=False)
        'interrupted: nothing written to artifacts/imported/treqs (...); rerun the same command'
    """
    try:
        written = (family_dir / "manifest.json").stat().st_mtime >= since
    except OSError:
        written = False
    if not written:
        return (f"interrupted: nothing written to {family_dir} (an import is written whole, at the end); rerun "
                f"the same command")
    if checking:
        return (f"interrupted: the import was written to {family_dir} but its --check replay did not finish; "
                f"rerun with --force to redo both")
    return f"interrupted: the import was written to {family_dir}; nothing is left to do"


def announce_synthetic_db(family: str, db: Path | None, size: str) -> None:
    """Say on stderr, before it starts, that an SQL family without ``--db`` first builds its synthetic database
    (minutes at the default size, with nothing else printed meanwhile), and how to avoid it."""
    from medagentgym.tasks.ehr_synth.hospital import SIZES
    from medagentgym.tasks.importers._slots import DIALECTS

    if db is not None or family not in DIALECTS:
        return
    minutes = "a few minutes" if size == "default" else "seconds"
    print(f"import: no --db given: building {family}'s synthetic database first ({SIZES[size]} patients, --size "
          f"{size}: {minutes}) to run the questions on; pass --db with a built one (e.g. artifacts/tasks/{family}/"
          f"{DIALECTS[family].db_file}) to skip this", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", required=True, choices=sorted(IMPORTERS), help="family to import into")
    p.add_argument("--from", dest="files", type=Path, action="append", required=True,
                   help="a public task file (.jsonl, .json or .csv); repeat for several files")
    p.add_argument("--out", type=Path, required=True, help="tasks root to write <out>/<family>/ into")
    p.add_argument("--db", type=Path, default=None,
                   help="SQL families: target SQLite database (default: build the family's synthetic one)")
    p.add_argument("--data", type=Path, default=None,
                   help="folder of user-supplied data (study tables, EHRCon/EHRSHOT/MIMIC-Extract files)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="ehrshot, mimic_extract: unpickle the .pkl files of --data (unpickling runs any code a file "
                        "holds: only for files you trust)")
    p.add_argument("--fhir-url", default=None, help="medagentbench: base URL of a FHIR server with the benchmark's patients")
    p.add_argument("--split", choices=["train", "test"], default=None,
                   help="put every record in this split (default: the record's split field, else the file name)")
    p.add_argument("--size", choices=["tiny", "default"], default="default",
                   help="size of the synthetic database built when --db is not given (default: default)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seeds slot re-instantiation and any synthetic build (default 0)")
    p.add_argument("--sandbox", choices=["bwrap", "local"], default="bwrap",
                   help="where reference programs run (biocoder, biodsbench); 'local' only for trusted files")
    p.add_argument("--no-verify", action="store_true", help="biodsbench: keep records without running their references")
    p.add_argument("--answers", choices=["recompute", "public"], default="recompute",
                   help="recompute answers on the target database / from the question (default), or keep the "
                        "benchmark's published answers, graded as its own scorer grades them; records whose "
                        "published answer is defective are set aside (mimic_iii, eicu, treqs, npowerai)")
    p.add_argument("--question-field", choices=["question", "template"], default="question",
                   help="EHR SQL families: show each record's paraphrased 'question' (default) or EHRSQL's canonical "
                        "'template' (what MedAgentGym's harness shows for mimic_iii and eicu); the report says which")
    p.add_argument("--force", action="store_true", help="replace an existing <out>/<family>/")
    p.add_argument("--strict", action="store_true", help="exit 1 when any record was rejected")
    p.add_argument("--check", action="store_true",
                   help="then replay the reference solutions of the import (oracle must score 1, empty/shotgun 0)")
    p.add_argument("--show", type=nonneg_int, default=20, help="rejected records to print (default 20)")
    p.add_argument("--json", action="store_true", help="end stdout with the report as one JSON line")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = p.parse_args(argv)
    started = time.time() - 1.0  # a manifest written by this run is newer (mtimes may be coarse)
    try:
        if all(f.is_file() for f in args.files):  # a missing file is refused at once, before any build
            announce_synthetic_db(args.family, args.db, args.size)
        manifest, report = import_files(
            args.family, args.files, args.out, force=args.force, db=args.db, data=args.data, fhir_url=args.fhir_url,
            split=args.split, seed=args.seed, size=args.size, verify=not args.no_verify, backend=args.sandbox,
            answers=args.answers, question_field=args.question_field, allow_pickle=args.allow_pickle)
        check = check_import(args.family, args.out, backend=args.sandbox) if args.check and manifest else None
    except KeyboardInterrupt:
        print(f"\n{interrupted_line(args.out / args.family, started, checking=args.check)}", file=sys.stderr)
        return 130
    except (TaskError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    for line in report.lines(args.show):
        print(line)
    if len(report.rejected) > args.show:
        where = "import_report.json lists all" if manifest else "--show N prints more"
        print(f"... {len(report.rejected) - args.show} more rejected records ({where})")
    for reason, n in report.by_reason.items():
        print(f"rejected {n:>5}  {reason}")
    for what in report.needs:
        print(f"to import the rest: {what}")
    for line in report.warnings:
        print(f"warning: {line}")
    if report.questions:
        print(report.questions)
    print(report.summary() + (f"; written to {args.out / args.family}" if manifest else "; nothing written"))
    if check is not None:
        print(f"check: {json.dumps(check, sort_keys=True)}")
    if args.json:
        print(json.dumps({**report.to_dict(), "rejected": len(report.rejected), "check": check}, sort_keys=True,
                         default=str))
    ok = manifest is not None and not (args.strict and report.rejected)
    if check is not None:
        ok = ok and all(row.get("oracle", 1.0) == 1.0 for row in check.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
