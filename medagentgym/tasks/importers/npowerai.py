"""npowerai: N-PowerAI / MedAgentGym ``npowerai`` task JSONL -> instances with answers recomputed from the question.

Each record's raw quantities (means, SDs, proportions, hazard ratio, alpha, power or size) are read from its
question and the family's reference snippet is executed on them (``medagentgym.tasks.power.importer``); the original answer
is only kept in metadata. The public files reuse ``task_id`` within a group, so instance ids carry the record's
file and line.
"""

from __future__ import annotations

from pathlib import Path

from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record, reject
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport
from medagentgym.tasks.power.importer import record_instance

__all__ = ["run"]


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every record of ``paths``; rejected records go to ``report`` (see the module docstring)."""
    out: list[Imported] = []
    for path, line, record in each_record(paths, report):
        try:
            inst = record_instance(record, split=split_of(record, path, opts.split), key=f"{path.stem}-{line}")
        except ValueError as exc:
            reject(report, path, line, exc)
            continue
        report.keep("recomputed", *(["matches_original"] if inst.metadata["matches_original"] else []),
                    *(["resized"] if "reinstantiated" in inst.metadata else []))
        out.append(Imported(inst, str(path), line))
    return out
