"""Shared parts of the importers: the options every importer receives, and writing a built family atomically."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from medagentgym.tasks.base import (
    Instance,
    TaskError,
    write_bytes_atomic,
    write_instances,
    write_manifest,
)
from medagentgym.tasks.importers.report import ImportReport

__all__ = ["ImportOptions", "Imported", "each_record", "read_pickle", "reject", "short_hash", "write_family"]


class Imported(NamedTuple):
    """One instance an importer made, with the record's file and line (for duplicate-id messages)."""

    instance: Instance
    path: str
    line: int


@dataclass
class ImportOptions:
    """What the CLI passes to a family's importer.

    Attributes:
        family: The family imported into.
        family_dir: The staging directory the importer may write data files into (becomes ``<out>/<family>``).
        db: A target SQLite database (EHR SQL families); None builds the family's synthetic one.
        data: A folder of user-supplied data (study tables, credentialed databases, feature pickles).
        fhir_url: Base URL of a MedAgentBench FHIR server holding the benchmark's patients.
        split: Put every record in this split (None: the record's ``split`` field, else the file name).
        seed: Seeds slot re-instantiation and any synthetic database built for the import.
        size: Size of the synthetic database built when ``db`` is None (``tiny`` or ``default``).
        verify: Run reference programs (BioCoder, BioDSBench) in a sandbox and drop records whose reference fails.
        backend: Sandbox backend for ``verify`` (``bwrap``, or ``local`` for trusted files only).
        answers: ``recompute`` (answers recomputed on the target database / from the question) or ``public``
            (the record's published answer, graded as the benchmark's scorer grades it; records whose published
            answer is defective are set aside: ``medagentgym.tasks.importers.public``). EHR SQL families and
            npowerai.
        question_field: EHR SQL families: which record field the question shown comes from: ``question`` (the
            paraphrased question, EHRSQL's and MIMICSQL's own choice; default) or ``template`` (EHRSQL's canonical
            question before paraphrase, what MedAgentGym's harness shows for mimic_iii and eicu). A record without
            the chosen field falls back to the other; the import report counts both.
        allow_pickle: Unpickle the pickle files of ``data`` (EHRSHOT's ``clmbr_*.pkl``, MIMIC-Extract's
            ``X_*.pkl``). Off by default: unpickling runs whatever code a file holds, as the importing user.
    """

    family: str
    family_dir: Path
    db: Path | None = None
    data: Path | None = None
    fhir_url: str | None = None
    split: str | None = None
    seed: int = 0
    size: str = "default"
    verify: bool = True
    backend: str = "bwrap"
    answers: str = "recompute"
    question_field: str = "question"
    allow_pickle: bool = False


def read_pickle(path: Path, opts: ImportOptions) -> Any:
    """``pandas.read_pickle(path)``, only under ``opts.allow_pickle`` (see :class:`ImportOptions`).

    Raises:
        TaskError: The opt-in is missing (one line: what would run and the flag).
    """
    if not opts.allow_pickle:
        raise TaskError(f"{opts.family}: {path} is a pickle, and unpickling a file runs any code it holds (as this "
                        "user, on the host); pass --allow-pickle only if you trust the files of --data (e.g. you "
                        "downloaded them from the dataset's own site)")
    import pandas as pd

    return pd.read_pickle(path)


def each_record(paths: list[Path], report: ImportReport) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    """``(path, line, record)`` for every readable record of ``paths``; counts each in ``report`` and rejects the
    unreadable ones (``not_json``) there, so an importer only sees records."""
    from medagentgym.tasks.importers.records import read_records

    for path in paths:
        for line, record, error in read_records(path):
            report.seen()
            if record is None:
                report.reject(str(path), line, "not_json", error or "")
            else:
                yield Path(path), line, record


def reject(report: ImportReport, path: Path, line: int, exc: Exception) -> None:
    """Record ``exc`` (``ValueError("<reason>: <detail>")``) as the rejection of one record; ``needs_data``
    reasons also go to :attr:`ImportReport.needs`."""
    reason, _, detail = str(exc).partition(": ")
    if reason == "needs_data":
        report.need(str(path), line, detail)
    else:
        report.reject(str(path), line, reason, detail)


def short_hash(text: str, n: int = 12) -> str:
    """A stable short id for records without one (first ``n`` hex digits of sha256)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def _dedupe(instances: list[Instance], report: ImportReport, lines: dict[str, tuple[str, int]]) -> list[Instance]:
    seen: dict[str, Instance] = {}
    for inst in instances:
        if inst.id in seen:
            path, line = lines.get(inst.id, ("?", 0))
            report.kept -= 1
            report.reject(path, line, "duplicate_id", f"instance id {inst.id} was already imported")
            continue
        seen[inst.id] = inst
    return list(seen.values())


def write_family(opts: ImportOptions, instances: list[Instance], report: ImportReport, out_root: Path, *,
                 version: int, sources: list[Path], force: bool = False,
                 lines: dict[str, tuple[str, int]] | None = None) -> dict[str, Any]:
    """Write the staged family (``train.jsonl``, ``test.jsonl``, ``import_report.json``, manifest) and move it
    to ``<out_root>/<family>`` in one rename, so a reader never sees half an import.

    Args:
        opts: The import's options (``opts.family_dir`` is the staging directory the importer wrote data into).
        instances: The imported instances (ids unique; a repeated id is rejected as ``duplicate_id``).
        report: The import's report (written beside the instances).
        out_root: The tasks root.
        version: The family's version (recorded in the manifest).
        sources: The files imported (their sha256 goes into the manifest).
        force: Replace an existing ``<out_root>/<family>``.
        lines: ``instance id -> (path, line)`` for duplicate-id messages.

    Returns:
        The manifest written.

    Raises:
        TaskError: ``<out_root>/<family>`` exists and ``force`` is False.
    """
    final = Path(out_root) / opts.family
    if final.exists() and not force:
        raise TaskError(f"{final} already exists; pass --force to replace it, or another --out")
    instances = _dedupe(instances, report, lines or {})
    staged = opts.family_dir
    splits = {s: [i for i in instances if i.split == s] for s in ("train", "test")}
    report.splits = {s: len(v) for s, v in splits.items()}
    for split, items in splits.items():
        write_instances(staged, split, items)
    write_bytes_atomic(staged / "import_report.json",
                       (json.dumps(report.to_dict(), indent=1, sort_keys=True, default=str) + "\n").encode())
    categories: dict[str, int] = {}
    for inst in instances:
        categories[inst.category] = categories.get(inst.category, 0) + 1
    manifest = write_manifest(
        staged, family=opts.family, version=version, source="import", seed=opts.seed,
        imported_from={Path(p).name: _sha(Path(p)) for p in sources},
        counts=report.splits, categories=dict(sorted(categories.items())),
        records=report.records, rejected=report.by_reason, answers=opts.answers,
    )
    if final.exists():
        trash = final.with_name(f".{opts.family}.replaced")
        shutil.rmtree(trash, ignore_errors=True)
        final.rename(trash)
        staged.rename(final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        staged.rename(final)
    opts.family_dir = final
    return manifest


def _sha(path: Path) -> str:
    from medagentgym.tasks.base import sha256_file

    return sha256_file(path) if path.is_file() else ""
