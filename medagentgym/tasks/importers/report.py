"""What an import did: kept records, rejected records with ``path:line: reason``, and files the user must supply.

Every importer fills one :class:`ImportReport` while it reads a file. A rejected record never aborts the file:
it is recorded with its line and a short reason *key* (``missing_field``, ``degenerate``, ``needs_data`` ...) and a
detail, so the CLI can print one line per record and a per-reason summary. Records that need data the project
cannot ship (credentialed databases, benchmark data folders) are rejected with reason ``needs_data`` and a
one-line statement of exactly which files to supply and how to pass them (:meth:`ImportReport.need`).

Example:
    >>> report = ImportReport(family="ehrcon", sources=["test_tasks.jsonl"])
    >>> report.reject("test_tasks.jsonl", 3, "missing_field", "lacks 'Has error'")
    >>> report.lines()[0]
    'test_tasks.jsonl:3: missing_field: lacks \\'Has error\\''
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ImportReport", "Rejection"]


@dataclass(frozen=True)
class Rejection:
    """One record that was not imported.

    Attributes:
        path: The file it came from.
        line: Its 1-based line (JSONL) or the line where its object starts (JSON array).
        reason: A short key for the summary (``missing_field``, ``not_json``, ``degenerate`` ...).
        detail: What exactly was wrong, for this record.
    """

    path: str
    line: int
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}: {self.detail}"


@dataclass
class ImportReport:
    """Counts and per-record outcomes of importing public task files into one family.

    Attributes:
        family: The family the records are imported into.
        sources: The files read.
        records: Records seen (kept + rejected).
        kept: Records that became instances.
        rejected: Every rejected record, in file order.
        needs: ``statement -> reason``: each distinct "supply these files / packages, pass them with ..." line.
        notes: Counters of things done to kept records (``reinstantiated``, ``recomputed``, ``case_fixed`` ...).
        splits: Instances per split.
        warnings: Lines about the import as a whole (e.g. public answers kept without the database they refer to).
        questions: EHR SQL families: which record field the shown questions come from, and how to show the other
            (``--question-field``); empty for other families.
    """

    family: str
    sources: list[str] = field(default_factory=list)
    records: int = 0
    kept: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    needs: dict[str, str] = field(default_factory=dict)
    notes: Counter = field(default_factory=Counter)
    splits: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    questions: str = ""

    def seen(self) -> None:
        """Count one record read (call once per record, kept or not)."""
        self.records += 1

    def keep(self, *notes: str) -> None:
        """Count one kept record and the things done to it (e.g. ``"reinstantiated"``)."""
        self.kept += 1
        self.notes.update(notes)

    def reject(self, path: str, line: int, reason: str, detail: str) -> None:
        """Record one rejected record."""
        self.rejected.append(Rejection(str(path), int(line), reason, " ".join(str(detail).split())))

    def warn(self, line: str) -> None:
        """Record one warning about the whole import (printed once by the CLI)."""
        if line not in self.warnings:
            self.warnings.append(line)

    def need(self, path: str, line: int, what: str, reason: str = "needs_data") -> None:
        """Reject a record that needs something the user must supply; ``what`` says which and how to pass it.

        The first statement per distinct ``what`` is kept in :attr:`needs` (printed once by the CLI).
        """
        self.needs.setdefault(what, reason)
        self.reject(path, line, reason, what)

    @property
    def by_reason(self) -> dict[str, int]:
        """Rejected records per reason key, most common first."""
        return dict(Counter(r.reason for r in self.rejected).most_common())

    @property
    def share(self) -> float:
        """Kept records / records seen (0 when nothing was read)."""
        return self.kept / self.records if self.records else 0.0

    def lines(self, limit: int | None = None) -> list[str]:
        """``path:line: reason: detail`` per rejected record (the first ``limit`` when given)."""
        return [str(r) for r in self.rejected[:limit]]

    def summary(self) -> str:
        """One line: kept / records, share, and the rejections per reason."""
        reasons = ", ".join(f"{k} {v}" for k, v in self.by_reason.items()) or "none"
        done = ", ".join(f"{k} {v}" for k, v in sorted(self.notes.items()))
        return (f"{self.family}: imported {self.kept}/{self.records} records ({self.share:.1%}); rejected: {reasons}"
                + (f"; {done}" if done else ""))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written as ``import_report.json`` beside the instances)."""
        out = asdict(self)
        out["notes"] = dict(sorted(self.notes.items()))
        out["by_reason"] = self.by_reason
        out["share"] = round(self.share, 6)
        return out
