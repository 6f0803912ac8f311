"""Importers: public benchmark task files -> a built family that rollouts, evaluation and training use as-is.

One module per family kind turns records of a public file (EHRSQL JSON, MIMICSQL, MedAgentGym task JSONL,
MedCalc-Bench rows, N-PowerAI, BioCoder, BioDSBench, MedAgentBench, EHRCon, EHRSHOT, MIMIC-Extract) into
instances; :func:`import_files` writes them as ``<out>/<family>/`` with the same manifest conventions as a
generated build, so ``tasks.make(family, root=out)`` loads them. A record that cannot be imported is reported
(``path:line: reason``) and the rest of the file goes on; records that need data the user must supply name the
files and the flag to pass them. ``medagentgym import`` is the command line.

Example:
    >>> manifest, report = import_files("mimic_iii", [Path("valid_tasks.jsonl")], Path("artifacts/imported"),
    ...                                 db=Path("artifacts/tasks/mimic_iii/mimic_iii.db"))
    >>> report.summary()
    'mimic_iii: imported 575/581 records (99.0%); rejected: degenerate 6; reinstantiated 410'
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import TaskError
from medagentgym.tasks.importers._common import ImportOptions
from medagentgym.tasks.importers.report import ImportReport, Rejection

__all__ = ["IMPORTERS", "ImportOptions", "ImportReport", "Rejection", "check_import", "import_files"]

#: family -> module implementing ``run(paths, opts, report) -> list[Imported]``.
IMPORTERS = {
    "mimic_iii": "medagentgym.tasks.importers.ehrsql",
    "eicu": "medagentgym.tasks.importers.ehrsql",
    "treqs": "medagentgym.tasks.importers.ehrsql",
    "ehr_seqsql": "medagentgym.tasks.importers.ehrsql",
    "medcalcbench": "medagentgym.tasks.importers.medcalc",
    "npowerai": "medagentgym.tasks.importers.npowerai",
    "biocoder": "medagentgym.tasks.importers.biocoder",
    "biodsbench": "medagentgym.tasks.importers.biodsbench",
    "medagentbench": "medagentgym.tasks.importers.medagentbench",
    "ehrcon": "medagentgym.tasks.importers.ehrcon",
    "ehrshot": "medagentgym.tasks.importers.ehrshot",
    "mimic_extract": "medagentgym.tasks.importers.mimic_extract",
}


def import_files(family: str, paths: list[Path], out_root: Path, *, force: bool = False,
                 **options: Any) -> tuple[dict[str, Any] | None, ImportReport]:
    """Import public task files into ``<out_root>/<family>/``.

    Args:
        family: A family with an importer (:data:`IMPORTERS`).
        paths: The public files (records of several files are merged; each record's split comes from
            ``options["split"]``, its ``split`` field, or its file name).
        out_root: The tasks root to write into.
        force: Replace an existing ``<out_root>/<family>``.
        **options: :class:`ImportOptions` fields (``db``, ``data``, ``fhir_url``, ``split``, ``seed``, ``size``,
            ``verify``, ``backend``, ``answers``).

    Returns:
        ``(manifest, report)``; the manifest is None (nothing written) when no record was imported.

    Raises:
        TaskError: Unknown family, a missing file, or an existing output without ``force`` (one line each).
    """
    from medagentgym import tasks

    if family not in IMPORTERS:
        tasks.registry.spec(family)  # an unknown name raises UnknownTask with "did you mean"
        raise TaskError(f"family {family!r} has no importer; importable: {', '.join(sorted(IMPORTERS))}")
    from medagentgym.tasks.importers.public import CONVENTIONS, FAMILIES

    answers = options.get("answers", "recompute")
    if answers not in CONVENTIONS:
        raise TaskError(f"answers={answers!r} is not one of {', '.join(CONVENTIONS)}")
    if answers == "public" and family not in FAMILIES:
        raise TaskError(f"--answers public keeps a benchmark's published answers; {family} has none to keep "
                        f"(families with published answers: {', '.join(FAMILIES)})")
    for path in paths:  # before any work: an importer may first build its target database (~10 CPU-s for treqs)
        if not Path(path).is_file():
            raise TaskError(f"no task file at {path}; pass --from FILE (a .jsonl, .json or .csv of public records)")
    out_root = Path(out_root)
    if (out_root / family).exists() and not force:
        raise TaskError(f"{out_root / family} already exists; pass --force to replace it, or another --out")
    staging = out_root / f".{family}.importing"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    opts = ImportOptions(family=family, family_dir=staging, **options)
    report = ImportReport(family=family, sources=[str(p) for p in paths])
    try:
        module = importlib.import_module(IMPORTERS[family])
        imported = module.run([Path(p) for p in paths], opts, report)
        if not imported:
            shutil.rmtree(staging, ignore_errors=True)
            return None, report
        from medagentgym.tasks.importers._common import write_family

        manifest = write_family(opts, [i.instance for i in imported], report, out_root,
                                version=tasks.registry.family_class(family).version, sources=list(paths),
                                force=force, lines={i.instance.id: (i.path, i.line) for i in imported})
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest, report


def check_import(family: str, root: Path, *, limit: int | None = None, backend: str = "bwrap") -> dict[str, Any]:
    """Replay the reference solution of imported instances and grade it, plus empty and shotgun submissions.

    This is ``tasks.check_family`` for a directory that was imported rather than built (nothing is rebuilt).
    Families graded on the episode's workspace (``needs_sandbox``) replay in a real sandbox session.

    Args:
        family: The family name.
        root: The tasks root holding ``<root>/<family>/``.
        limit: At most this many instances per split.
        backend: Sandbox backend for families that need one.

    Returns:
        ``{split: {"instances", "oracle", "empty", "shotgun"}}`` (scores are means over the instances).
    """
    import contextlib
    import functools

    from medagentgym import tasks
    from medagentgym.tasks.base import GradeContext
    from medagentgym.tasks.registry import _SHOTGUN, sandbox_play

    fam = tasks.make(family, root=root)

    def direct(family_obj: Any, inst: Any, steps: list[dict[str, Any]]) -> float:
        return family_obj.grade(inst, steps[-1]["params"]["answer"], GradeContext(family_dir=Path(family_obj.root))).score

    report: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        play = direct
        if getattr(fam, "needs_sandbox", False):
            from medagentgym import sandbox

            pool = stack.enter_context(sandbox.make_pool(backend, workers=1, allow_unisolated=backend == "local"))
            play = functools.partial(sandbox_play, pool)
        for split in ("train", "test"):
            items = fam.instances(split)[:limit] if limit else fam.instances(split)
            row: dict[str, Any] = {"instances": len(items)}
            if items:
                row["oracle"] = sum(play(fam, i, fam.reference_solution(i)) for i in items) / len(items)
                for label, text in (("empty", ""), ("shotgun", _SHOTGUN)):
                    steps = [{"action": "submit_answer", "params": {"answer": text}}]
                    row[label] = sum(play(fam, i, steps) for i in items) / len(items)
            report[split] = row
    return report
