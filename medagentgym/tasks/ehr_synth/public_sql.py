"""How much of the public EHRSQL / MIMICSQL gold SQL gives a meaningful answer on our databases.

The public question files (EHRSQL's ``{valid,test}.json``, MedAgentGym's ``{mimic_iii,eicu,treqs}`` task JSONL,
MIMICSQL's ``mimicsql_natural_v2/*.json``) are read as they are; each answerable gold query is post-processed the
way EHRSQL's evaluator does (lower-case, fixed current time, vital-sign placeholders, ``%y``/``%j``), MIMICSQL's
upper-case SQL lower-cased as MedAgentGym did, and EXECUTED on our database. Outcomes:

* ``error``: SQLite refused it (or it ran past the time limit): the schema is wrong;
* ``empty``: no row;
* ``null_or_zero``: every returned value is NULL, an empty string or the number 0;
* ``meaningful``: anything else (the issue's definition, applied after post-processing).

Two diagnostics say why a query is not meaningful: the share of distinct ``table.column = 'literal'`` values that
exist in our column (value coverage), and the share of named patients that exist (id coverage).

Example:
    >>> from medagentgym.tasks.ehr_synth.public_sql import outcome
    >>> outcome([(0,)]), outcome([("heparin",)]), outcome([])
    ('null_or_zero', 'meaningful', 'empty')
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import TaskError
from medagentgym.tasks.ehr_synth.conventions import CURRENT_TIME

DATASETS = ("mimic_iii", "eicu", "mimicsql")
#: EHRSQL's normal ranges for the vital-sign placeholders (``heart_rate_lower`` ...), from its evaluator.
VITAL_RANGES = {"temperature": (35.5, 38.1), "sao2": (95.0, 100.0), "heart_rate": (60.0, 100.0),
                "respiration": (12.0, 18.0), "systolic_bp": (90.0, 120.0), "diastolic_bp": (60.0, 90.0),
                "mean_bp": (60.0, 110.0)}
#: ``table.column = 'literal'`` in lower-cased gold SQL (EHRSQL writes ``t.c``, MedAgentGym's MIMICSQL ``t.'c'``).
#: (MIMICSQL's original SQL quotes columns and values with double quotes: ``diagnoses."icd9_code" = "53190"``.)
LITERAL = re.compile(r"\b(\w+)\.['\"]?(\w+)['\"]?\s*=\s*(?:'((?:[^']|'')*)'|\"([^\"]*)\")")
_SUBJECT = re.compile(r"\b\w+\.['\"]?subject_id['\"]?\s*=\s*['\"]?(\d+)['\"]?")
_UNIQUEPID = re.compile(r"\bpatient\.uniquepid\s*=\s*'([^']+)'")
#: Columns that name a patient or a stay: counted by id coverage, not value coverage.
_ID_COLUMNS = frozenset({"subject_id", "hadm_id", "icustay_id", "uniquepid", "patienthealthsystemstayid",
                         "patientunitstayid", "name"})
_NAME = re.compile(r"\bdemographic\.['\"]?name['\"]?\s*=\s*['\"]([^'\"]+)['\"]")


def load_records(path: Path | str) -> list[dict[str, Any]]:
    """Question records of one public file (a JSON list, or JSON lines).

    Args:
        path: EHRSQL JSON, MedAgentGym task JSONL or MIMICSQL JSON lines.

    Returns:
        The records as dicts, unchanged.

    Raises:
        TaskError: the file is missing or is not JSON / JSON lines (the message names the line).
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such question file; pass the public EHRSQL/MedAgentGym/MIMICSQL file")
    text = path.read_text(encoding="utf-8").strip()
    if text.startswith("["):
        try:
            return list(json.loads(text))
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}: not valid JSON ({exc}); expected a list of question records") from None
    records = []
    for k, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path}:{k}: not a JSON object ({exc}); expected one record per line") from None
    return records


def add_file_arguments(ap) -> None:
    """Add ``--mimic-iii`` / ``--eicu`` / ``--mimicsql`` (question files per dataset) to an argparse parser."""
    ap.add_argument("--mimic-iii", nargs="+", type=Path, default=[], help="EHRSQL MIMIC-III question files")
    ap.add_argument("--eicu", nargs="+", type=Path, default=[], help="EHRSQL eICU question files")
    ap.add_argument("--mimicsql", nargs="+", type=Path, default=[], help="MIMICSQL / MedAgentGym treqs files")


def files_from_arguments(args) -> dict[str, list[Path]]:
    """dataset -> question files given with :func:`add_file_arguments` (datasets without files left out)."""
    return {k: v for k, v in (("mimic_iii", args.mimic_iii), ("eicu", args.eicu), ("mimicsql", args.mimicsql)) if v}


def postprocess_ehrsql(query: str) -> str:
    """EHRSQL's evaluator rewriting: lower-case, fixed current time, vital placeholders, ``%y``/``%j`` fixes.

    Example:
        >>> postprocess_ehrsql("SELECT 1 WHERE t < = current_time")
        "select 1 where t <= '2105-12-31 23:59:00'"
    """
    q = query.lower()
    q = q.replace("current_time", f"'{CURRENT_TIME}'")
    for name, (low, high) in VITAL_RANGES.items():
        if f"{name}_lower" in q and f"{name}_upper" in q:
            q = q.replace(f"{name}_lower", str(low)).replace(f"{name}_upper", str(high))
    q = q.replace("''", "'").replace("< =", "<=").replace("%y", "%Y").replace("%j", "%J")
    return q.replace("'now'", f"'{CURRENT_TIME}'")


def gold_sql(record: dict[str, Any], dataset: str) -> str | None:
    """The executable gold SQL of a record, or None when it is unanswerable (``is_impossible`` / ``nan``)."""
    raw = record.get("query", record.get("sql"))
    if record.get("is_impossible") or not isinstance(raw, str) or raw.strip().lower() in ("", "nan", "null", "none"):
        return None
    if dataset == "mimicsql":
        return raw.lower()  # MedAgentGym's MIMICSQL rows are lower-cased; the original upper-case SQL becomes the same
    return postprocess_ehrsql(raw)


def outcome(rows: list[tuple] | None) -> str:
    """``empty``, ``null_or_zero`` or ``meaningful`` for executed rows (``None`` = error)."""
    if rows is None:
        return "error"
    if not rows:
        return "empty"
    values = [v for row in rows for v in row]
    if all(v is None or v == "" or (isinstance(v, (int, float)) and v == 0) for v in values):
        return "null_or_zero"
    return "meaningful"


#: What SQL from a file (a question file's gold query, a template) may do on the host: read and compute.
#: ATTACH, PRAGMA and every write are refused, so such a file cannot make the host open or create another
#: database file (the main one is opened read-only). Every host-side reader of file SQL uses this authorizer
#: (:func:`connect_read_only`, ``importers._slots``); model-written SQL runs only in the jail.
READ_ONLY_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                               sqlite3.SQLITE_RECURSIVE})
_ALLOWED = READ_ONLY_ACTIONS


def authorize_read_only(action: int, *_args) -> int:
    """A ``sqlite3`` authorizer that allows :data:`READ_ONLY_ACTIONS` only."""
    return sqlite3.SQLITE_OK if action in READ_ONLY_ACTIONS else sqlite3.SQLITE_DENY


_authorize = authorize_read_only


def connect_read_only(db_path: Path | str) -> sqlite3.Connection:
    """A read-only connection that refuses anything but reading (see :data:`READ_ONLY_ACTIONS`)."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    con.set_authorizer(_authorize)
    return con


def execute(con: sqlite3.Connection, sql: str, *, timeout_s: float = 30.0, limit: int = 100) -> list[tuple] | None:
    """The first ``limit`` rows of ``sql``, or None when it fails or runs past ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    con.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        return con.execute(sql).fetchmany(limit)
    except sqlite3.Error:
        return None
    finally:
        con.set_progress_handler(None, 0)


def literals(sql: str) -> set[tuple[str, str, str]]:
    """Distinct ``(table, column, value)`` compared with ``=`` in lower-cased gold SQL (ids and times left out)."""
    out = set()
    for table, column, single, double in LITERAL.findall(sql):
        value = single if single or not double else double
        if column not in _ID_COLUMNS and not re.fullmatch(r"\d{4}(-\d\d){0,2}( [\d:]+)?", value):
            out.add((table, column, value.replace("''", "'")))
    return out


def patient_keys(sql: str) -> set[tuple[str, str]]:
    """Patients a gold query names: ``("subject_id", "273")``, ``("uniquepid", "028-61375")``, ``("name", ...)``."""
    keys = {("subject_id", m) for m in _SUBJECT.findall(sql)}
    keys |= {("uniquepid", m) for m in _UNIQUEPID.findall(sql)}
    keys |= {("name", m) for m in _NAME.findall(sql)}
    return keys


@dataclass
class Report:
    """Per-dataset results of :func:`check`."""

    dataset: str
    records: int = 0
    answerable: int = 0
    outcomes: Counter = field(default_factory=Counter)
    literals_found: int = 0
    literals_total: int = 0
    patients_found: int = 0
    patients_total: int = 0
    missing_literals: Counter = field(default_factory=Counter)

    def pct(self, key: str) -> float:
        """Share of answerable queries with outcome ``key`` (``executed`` = every outcome but ``error``), in %."""
        n = self.answerable - self.outcomes["error"] if key == "executed" else self.outcomes[key]
        return round(100.0 * n / self.answerable, 1) if self.answerable else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "dataset": self.dataset, "records": self.records, "answerable": self.answerable,
            "executed_pct": self.pct("executed"), "meaningful_pct": self.pct("meaningful"),
            "outcomes": dict(self.outcomes),
            "value_coverage_pct": round(100.0 * self.literals_found / max(1, self.literals_total), 1),
            "literals": [self.literals_found, self.literals_total],
            "id_coverage_pct": round(100.0 * self.patients_found / max(1, self.patients_total), 1),
            "patients": [self.patients_found, self.patients_total],
            "top_missing_columns": dict(self.missing_literals.most_common(8)),
        }


#: Question-mix features of gold SQL, as the issue measured them on the public files.
_MIX = {
    "time_window": re.compile(r"strftime\(|datetime\("),
    "top_n": re.compile(r"dense_rank"),
    "event_after_event": re.compile(r"\bt1\b.*\bt2\b", re.DOTALL),
}


def question_mix(pairs: Iterable[tuple[str, str]]) -> dict[str, float]:
    """Shares (%) of (question, gold SQL) pairs with a time window, a top-N ranking, an event-after-event join,
    and the mean question length in words.

    Example:
        >>> question_mix([("how many?", "select count(*) from t where strftime('%Y', x) = '2105'")])["time_window"]
        100.0
    """
    n, counts, words = 0, Counter(), 0
    for question, sql in pairs:
        n += 1
        words += len(str(question).split())
        counts.update(k for k, rx in _MIX.items() if rx.search(str(sql).lower()))
    out = {k: round(100.0 * counts[k] / n, 1) if n else 0.0 for k in _MIX}
    out["question_words"] = round(words / n, 1) if n else 0.0
    out["n"] = n
    return out


def _exists(con: sqlite3.Connection, table: str, column: str, value: str) -> bool:
    try:
        return con.execute(f"select 1 from {table} where {column} = ? limit 1", (value,)).fetchone() is not None
    except sqlite3.Error:
        return False


def _patient_exists(con: sqlite3.Connection, dataset: str, kind: str, value: str) -> bool:
    table = {"mimic_iii": "patients", "eicu": "patient", "mimicsql": "demographic"}[dataset]
    return _exists(con, table, kind, value if dataset != "mimic_iii" else int(value))


def check(records: Iterable[dict[str, Any]], db_path: Path | str, dataset: str, *, timeout_s: float = 30.0) -> Report:
    """Execute every answerable gold query of ``records`` on ``db_path`` and count the outcomes.

    Args:
        records: Public question records (see :func:`load_records`).
        db_path: Our SQLite database of the matching schema.
        dataset: ``mimic_iii``, ``eicu`` or ``mimicsql``.
        timeout_s: Per-query limit; a query past it counts as ``error`` (EHRSQL's evaluator allows 60 s).

    Returns:
        A :class:`Report` (outcome counts, value and id coverage).

    Raises:
        TaskError: unknown dataset or missing database.
    """
    if dataset not in DATASETS:
        raise TaskError(f"dataset {dataset!r} is not one of {DATASETS}")
    if not Path(db_path).is_file():
        raise TaskError(f"{db_path}: no database; build it with medagentgym build --size default")
    report = Report(dataset)
    con = connect_read_only(db_path)
    seen_lits: dict[tuple[str, str, str], bool] = {}
    seen_pats: dict[tuple[str, str], bool] = {}
    try:
        for rec in records:
            report.records += 1
            sql = gold_sql(rec, dataset)
            if sql is None:
                continue
            report.answerable += 1
            report.outcomes[outcome(execute(con, sql, timeout_s=timeout_s))] += 1
            for lit in literals(sql):
                if lit not in seen_lits:
                    seen_lits[lit] = _exists(con, *lit)
            for key in patient_keys(sql):
                if key not in seen_pats:
                    seen_pats[key] = _patient_exists(con, dataset, *key)
    finally:
        con.close()
    report.literals_total, report.literals_found = len(seen_lits), sum(seen_lits.values())
    report.patients_total, report.patients_found = len(seen_pats), sum(seen_pats.values())
    report.missing_literals = Counter(f"{t}.{c}" for (t, c, _v), ok in seen_lits.items() if not ok)
    return report
