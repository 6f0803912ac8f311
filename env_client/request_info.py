"""The ``request_info`` action: look at an episode's data (SQLite tables, CSV/TSV files) without running code.

It reads the family's built data on the host, read-only, and only the tables the episode mounts; a target is
resolved against that catalogue, never used as a path. Every answer is bounded (values, characters), and so is
the host CPU one request may use: a keyterm of at most :data:`MAX_TERM_CHARS` characters, close values ranked
by difflib's cheap upper bounds first, and :data:`INFO_CPU_S` seconds of this thread's CPU time per request;
a request past its budget gets an :class:`InfoError` (the episode's error, shown to the agent), never a stall.

Example:
    >>> cat = Catalogue({"toy_sql.db": Path("artifacts/tasks/toy_sql/toy_sql.db")})
    >>> print(cat.answer("column_names", target="patients"))
    patients: patient_id, name, sex, birth_year, city
"""

from __future__ import annotations

import csv
import difflib
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Catalogue", "InfoError"]

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
TABLE_SUFFIXES = (".csv", ".tsv")
MAX_VALUES = 10  # distinct values listed by column_values
MAX_CLOSE = 5  # close matches listed by term
MAX_SCAN_ROWS = 200_000  # rows scanned per table by term / column_values
MAX_TABLES = 200
MAX_TERM_CHARS = 200  # longest keyterm compared with cells (difflib costs grow with its length)
INFO_CPU_S = 2.0  # CPU seconds (this thread's) one request may use on the host
_CLOSE_CUTOFF = 0.5


class InfoError(ValueError):
    """A request the data cannot answer (unknown table or column, missing keyterm); the message says what to do."""


@dataclass(frozen=True)
class _Table:
    name: str  # as shown to the agent: a SQLite table name or "<mount>/<file>"
    kind: str  # "sqlite" or "csv"
    path: Path  # host path of the database or the file
    table: str = ""  # SQLite table name


def _csv_reader(path: Path) -> Iterator[list[str]]:
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        yield from csv.reader(fh, delimiter="\t" if path.suffix == ".tsv" else ",")


class Catalogue:
    """The tables visible to one episode, built from its mounts (name under /data -> host path)."""

    def __init__(self, mounts: dict[str, Path]) -> None:
        self.tables: list[_Table] = []
        for mount, host in sorted(mounts.items()):
            host = Path(host)
            files = [host] if host.is_file() else sorted(p for p in host.rglob("*") if p.is_file())
            for path in files:
                if len(self.tables) >= MAX_TABLES:
                    break
                if path.suffix.lower() in SQLITE_SUFFIXES:
                    self._add_sqlite(path)
                elif path.suffix.lower() in TABLE_SUFFIXES:
                    rel = mount if path == host else f"{mount}/{path.relative_to(host).as_posix()}"
                    self.tables.append(_Table(name=rel, kind="csv", path=path))

    def _add_sqlite(self, path: Path) -> None:
        with self._connect(path) as con:
            for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view') ORDER BY name"):
                self.tables.append(_Table(name=table, kind="sqlite", path=path, table=table))

    @staticmethod
    def _connect(path: Path) -> closing[sqlite3.Connection]:
        # closing(): a sqlite3 connection's own context manager commits but never closes.
        return closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True))

    # -- lookups -------------------------------------------------------------------------------------------
    def resolve(self, target: str) -> _Table:
        """The table named by ``target`` (table name, file name, stem, or a /data/... path; case-insensitive)."""
        want = target.strip().removeprefix("/data/").strip("/").lower()
        wanted = {want, want.rsplit("/", 1)[-1]}  # "toy_sql.db/patients" names the table "patients"
        for table in self.tables:
            name = table.name.lower()
            base = name.rsplit("/", 1)[-1]
            if wanted & {name, base, base.rsplit(".", 1)[0]}:
                return table
        names = [t.name for t in self.tables]
        close = difflib.get_close_matches(target, names, n=1, cutoff=0.4)
        hint = f"did you mean {close[0]!r}?" if close else f"available: {', '.join(names[:20]) or '(none)'}"
        raise InfoError(f"no table or file {target!r}; {hint}")

    def columns(self, table: _Table) -> list[str]:
        """Column names of ``table``."""
        if table.kind == "sqlite":
            with self._connect(table.path) as con:
                return [row[1] for row in con.execute(f'PRAGMA table_info("{table.table}")')]
        return next(_csv_reader(table.path), [])

    def _rows(self, table: _Table, column: str | None = None) -> Iterator[tuple[str, ...]]:
        """Rows (or one column's values) as strings, at most MAX_SCAN_ROWS."""
        if table.kind == "sqlite":
            cols = f'"{column}"' if column else "*"
            with self._connect(table.path) as con:
                for row in con.execute(f'SELECT {cols} FROM "{table.table}" LIMIT {MAX_SCAN_ROWS}'):
                    yield tuple("" if v is None else str(v) for v in row)
            return
        reader = _csv_reader(table.path)
        header = next(reader, [])
        index = header.index(column) if column else None
        for n, row in enumerate(reader):
            if n >= MAX_SCAN_ROWS:
                break
            yield (row[index] if index is not None and index < len(row) else "",) if index is not None else tuple(row)

    def _column(self, table: _Table, keyterm: str | None) -> str:
        if not keyterm:
            raise InfoError("column_values needs `keyterm` = the column name")
        cols = self.columns(table)
        exact = [c for c in cols if c.lower() == keyterm.strip().lower()]
        if exact:
            return exact[0]
        close = difflib.get_close_matches(keyterm, cols, n=1, cutoff=0.4)
        hint = f"did you mean {close[0]!r}?" if close else f"columns: {', '.join(cols)}"
        raise InfoError(f"{table.name} has no column {keyterm!r}; {hint}")

    # -- the four info types ------------------------------------------------------------------------------
    def answer(self, info_type: str, *, target: str | None = None, keyterm: str | None = None) -> str:
        """Answer one request; raises :class:`InfoError` for a request the data cannot answer or one that runs
        past :data:`INFO_CPU_S` seconds of CPU."""
        self._deadline = time.thread_time() + INFO_CPU_S
        if not self.tables:
            raise InfoError("this task has no tabular data to describe; use code_execution or terminal instead")
        if info_type == "schema":
            tables = [self.resolve(target)] if target else self.tables
            return "\n".join(f"{t.name}({', '.join(self.columns(t))})" for t in tables)
        if info_type == "column_names":
            if not target:
                raise InfoError("column_names needs `target` = a table or file name; see info_type 'schema'")
            table = self.resolve(target)
            return f"{table.name}: {', '.join(self.columns(table))}"
        if info_type == "column_values":
            if not target:
                raise InfoError("column_values needs `target` (table) and `keyterm` (column)")
            return self._column_values(self.resolve(target), keyterm)
        if info_type == "term":
            if not keyterm or not keyterm.strip():
                raise InfoError("term needs `keyterm` = the value to look for")
            return self._term(keyterm.strip(), [self.resolve(target)] if target else self.tables)
        raise InfoError(f"unknown info_type {info_type!r}; use schema, column_names, column_values or term")

    def _column_values(self, table: _Table, keyterm: str | None) -> str:
        column = self._column(table, keyterm)
        distinct: dict[str, None] = {}
        for n, (value,) in enumerate(self._rows(table, column)):
            if n % 4096 == 0:
                self._check_budget()
            distinct.setdefault(value)
        values = sorted(distinct)
        if len(values) <= MAX_VALUES:
            return f"{table.name}.{column}: {len(values)} distinct values: {values}"
        return (f"{table.name}.{column}: {len(values)} distinct values (too many to list; use info_type 'term' "
                f"to look for one); first {MAX_VALUES}: {values[:MAX_VALUES]}")

    def _check_budget(self) -> None:
        if time.thread_time() > getattr(self, "_deadline", float("inf")):
            raise InfoError(f"the request used its {INFO_CPU_S:g} s of CPU before it finished; name a table "
                            "(target) and a shorter keyterm, or look the value up with code")

    def _term(self, term: str, tables: list[_Table]) -> str:
        if len(term) > MAX_TERM_CHARS:
            raise InfoError(f"term keyterm has {len(term)} characters; look for a value of at most "
                            f"{MAX_TERM_CHARS}")
        want = term.lower()
        hits: dict[str, int] = {}
        seen: set[str] = set()
        for table in tables:
            cols = self.columns(table)
            for n, row in enumerate(self._rows(table)):
                if n % 1024 == 0:
                    self._check_budget()
                for col, cell in zip(cols, row):
                    if cell.lower() == want:
                        key = f"{table.name}.{col} = {cell!r}"
                        hits[key] = hits.get(key, 0) + 1
                    elif len(seen) < 50_000 and cell and not cell.replace(".", "", 1).isdigit():
                        seen.add(cell)
        if hits:
            lines = [f"{k} ({n} row{'s' if n > 1 else ''})" for k, n in list(hits.items())[:20]]
            return f"Exact matches for {term!r}:\n" + "\n".join(lines)
        matcher, scored = difflib.SequenceMatcher(None), []
        matcher.set_seq2(want)  # difflib caches what it learns about the second sequence
        for n, cell in enumerate(seen):
            if n % 256 == 0:
                self._check_budget()
            matcher.set_seq1(cell.lower())
            if matcher.real_quick_ratio() >= _CLOSE_CUTOFF and matcher.quick_ratio() >= _CLOSE_CUTOFF:
                ratio = matcher.ratio()
                if ratio >= _CLOSE_CUTOFF:
                    scored.append((-ratio, cell))
        close = [c for _, c in sorted(scored)]
        if not close:
            return f"No cell equals {term!r} and no close value was found."
        return f"No cell equals {term!r}. Close values: {close[:MAX_CLOSE]}"
