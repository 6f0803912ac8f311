"""medcalcbench: MedCalc-Bench rows (the benchmark's CSV/JSONL, or MedAgentGym's ``test_tasks.jsonl``) -> instances.

Each row goes through ``medagentgym.tasks.medcalcbench.import_rows`` on its own (the row's note, its gold and its
[Lower Limit, Upper Limit] band), so one bad row is reported with its line and the rest of the file goes on.
"""

from __future__ import annotations

from pathlib import Path

from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport

__all__ = ["run"]


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every row of ``paths``; rejected rows go to ``report``."""
    from medagentgym.tasks.medcalcbench import import_rows

    out: list[Imported] = []
    for path, line, record in each_record(paths, report):
        record.setdefault("Row Number", f"{path.stem}-{line}")
        try:
            (inst,) = import_rows([record], split=split_of(record, path, opts.split))
        except (ValueError, KeyError, TypeError) as exc:
            report.reject(str(path), line, "bad_row", str(exc))
            continue
        report.keep()
        out.append(Imported(inst, str(path), line))
    return out
