"""Build task families into a tasks root.

    medagentgym build --families toy_sql --size tiny --seed 0 --out artifacts/tasks
    medagentgym build --families all --size default --out artifacts/tasks
    medagentgym build --list --json

Writes ``<out>/<family>/`` for each family (data, ``train.jsonl``, ``test.jsonl``, ``manifest.json``) and prints
a summary; the same seed gives byte-identical files. ``--list`` prints per-family categories, instance counts at
the default size and versions without writing anything (``--json``: one JSON object on the last line).

A build that drops instances (a reference solution that fails) prints one ``warning:`` line per family on stderr
with how many and why; the manifest lists each. A family whose build fails, or leaves its train or test split
empty, makes the command exit 1 with one ``error:`` line (the other families are still built). ``--out`` may be
relative to the current directory. Ctrl-C ends with one line naming the families finished so far and the
``--families`` list that builds the rest (exit 130).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from medagentgym.env_client.argtypes import nonneg_int, positive_int
from medagentgym.tasks.builds import DEFAULT_SIZE, SIZES
from medagentgym import tasks
from medagentgym.tasks.base import SupportsCounts, TaskError
from medagentgym.tasks.registry import DEFAULT_ROOT


def _select(spec: str, root: Path) -> list[str]:
    known = tasks.names(root)
    if spec.strip() == "all":
        return known
    chosen = [name.strip() for name in spec.split(",") if name.strip()]
    if not chosen:
        raise TaskError("--families is empty; pass names separated by commas, or 'all'")
    for name in chosen:
        tasks.registry.spec(name, root=root)  # raises UnknownTask with "did you mean"
    return chosen


def family_counts(name: str, root: Path, size: str = "default") -> dict[str, Any]:
    """``{"categories", "instances", "version"}`` of one family at ``size``, cheaply when it can count."""
    family = tasks.make(name, root=root)
    if isinstance(family, SupportsCounts):
        counts = dict(family.counts(size))
    else:  # no cheap count: build into a scratch directory and count what was written
        with tempfile.TemporaryDirectory() as tmp:
            scratch = type(family)(root=Path(tmp) / name)
            manifest = scratch.build(Path(tmp), size=size, seed=0)
            counts = {"categories": len(scratch.categories), "instances": sum(manifest.get("counts", {}).values())}
    return {"categories": counts["categories"], "instances": counts["instances"], "version": family.version}


def build(names: list[str], out: Path, *, size: str, seed: int, progress: bool = True, jobs: int = 1,
          keep_going: bool = True) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Build each family under ``out`` (``jobs`` at a time, in processes).

    Args:
        keep_going: Record a family that fails (or is left with an empty split) and build the others; False
            raises the first failure with its traceback (``--debug``).

    Returns:
        ``({name: manifest}, {name: "ExcType: why"})``: the families built, and those that failed.
    """
    return tasks.registry.build_families(names, out, size=size, seed=seed, jobs=jobs, progress=progress,
                                         skip_errors=keep_going)


def interrupted_line(names: list[str], out: Path, since: float) -> str:
    """What an interrupted build left: the families whose manifest was written since ``since``, and the rest.

    A family's manifest is written last, so a family with a fresh one is complete; the others may be half written.

    Example:
        >>> interrupted_line(["toy_sql"], Path("artifacts/tasks"), time.time())
        'interrupted: no family finished building in artifacts/tasks; rerun the same command'
    """
    def finished(name: str) -> bool:
        try:
            return (out / name / "manifest.json").stat().st_mtime >= since
        except OSError:
            return False

    done = [name for name in names if finished(name)]
    rest = [name for name in names if name not in done]
    if not done:
        return f"interrupted: no family finished building in {out}; rerun the same command"
    if not rest:
        return f"interrupted: every family named ({', '.join(done)}) was built in {out}; nothing is left to do"
    return (f"interrupted: {len(done)} of {len(names)} families built in {out} ({', '.join(done)}); rerun with "
            f"--families {','.join(rest)} to build the rest (their folders may be half written)")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default="all", help="comma-separated family names, or 'all' (default)")
    parser.add_argument("--size", choices=SIZES, default=DEFAULT_SIZE,
                        help=f"instance count preset (default {DEFAULT_SIZE}, as medagentgym eval and the recipes; "
                             f"the paper's recipes and sweeps need default)")
    parser.add_argument("--seed", type=nonneg_int, default=0, help="seed of data and instance generation (default 0)")
    parser.add_argument("--out", type=Path, default=DEFAULT_ROOT, help=f"tasks root to write (default {DEFAULT_ROOT})")
    parser.add_argument("--list", action="store_true", help="print families, categories, counts, versions; no build")
    parser.add_argument("--json", action="store_true", help="with --list: print one JSON object on the last line")
    parser.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                        help="families built at once, in separate processes (default: the number of cores)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = parser.parse_args(argv)
    names: list[str] = []
    started = time.time() - 1.0  # mtimes may be coarser than time.time(); a manifest from before is older anyway
    try:
        names = _select(args.families, args.out)
        if args.list:
            listing = {name: family_counts(name, args.out) for name in names}
            if args.json:
                print(json.dumps(listing, sort_keys=True))
            else:
                for name, row in listing.items():
                    print(f"{name:16s} v{row['version']:<3d} {row['categories']:4d} categories "
                          f"{row['instances']:7d} instances (default size)")
            return 0
        manifests, failed = build(names, args.out, size=args.size, seed=args.seed, progress=not args.no_progress,
                                  jobs=args.jobs, keep_going=not args.debug)
    except KeyboardInterrupt:
        line = ("interrupted: --list writes nothing; rerun the same command" if args.list
                else interrupted_line(names, args.out, started))
        print(f"\n{line}", file=sys.stderr)
        return 130
    except (TaskError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, manifest in manifests.items():
        counts = manifest.get("counts", {})
        split_text = ", ".join(f"{split} {n}" for split, n in sorted(counts.items()))
        print(f"{name}: {split_text} ({len(manifest.get('files', {}))} files) -> {args.out / name}")
    if failed:
        why = "; ".join(f"{name}: {error.removeprefix('TaskError: ')}" for name, error in failed.items())
        print(f"error: {len(failed)} of {len(names)} families failed to build: {why}", file=sys.stderr)
        return 1
    print(f"built {len(manifests)} family(ies) at size={args.size} seed={args.seed} into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
