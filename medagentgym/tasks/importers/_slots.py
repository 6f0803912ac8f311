"""Slot values of public EHR questions, and their re-instantiation against the target database.

A public question (EHRSQL, MIMICSQL) names values of the credentialed database: patient ids, drug, lab, item,
diagnosis and procedure names, care units. Most do not exist in another database. Here each value the gold SQL
compares a column with (``prescriptions.drug = 'heparin'``, ``demographic.'subject_id' = '2560'``) is a
:class:`Slot`. :class:`Reinstantiator` keeps values that exist (fixing only their letter case when the database
stores them differently), and draws replacements for the others from the rows of ONE anchor entity (a patient,
or an admission for MIMICSQL), so that the drawn values co-occur: the patient id, the drug and the lab of a
question all come from the same patient's records. A draw is accepted when the rewritten gold SQL, EXECUTED on
the database, returns a meaningful answer (not empty, not only NULL, not a bare numeric 0 or 1, not a set too long to grade);
yes/no questions are steered towards a 50/50 mix (each towards the answer kept less often so far) so that a
constant "yes" or "no" does not win.
"""

from __future__ import annotations

import random
import re
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from medagentgym.tasks.ehr_synth.importers import _answer
from medagentgym.tasks.ehr_synth.public_sql import READ_ONLY_ACTIONS

__all__ = ["DIALECTS", "Dialect", "Draw", "Reinstantiator", "Slot", "find_slots", "replace_in_text", "result_of",
           "rewrite_sql", "stated"]

#: A set answer longer than this is not a question one can grade (EHRSQL's own answers are short lists).
MAX_SET = 20
_READ_ACTIONS = READ_ONLY_ACTIONS  # the one authorizer set for SQL from files (ehr_synth.public_sql)
_INDEX_ACTIONS = {sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_READ,
                  sqlite3.SQLITE_REINDEX, sqlite3.SQLITE_PRAGMA}
#: Rows read from one execution (distinct values are counted after reading).
FETCH_ROWS = 5000
#: Seconds one execution of a gold query may take on the target database.
QUERY_SECONDS = 3.0

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_COMPARISON = re.compile(
    rf"(?P<table>{_IDENT})\s*\.\s*(?P<q>[\"'`]?)(?P<col>{_IDENT})(?P=q)\s*(?P<op>=|==|!=|<>)\s*"
    r"(?P<lit>'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|-?\d+(?:\.\d+)?(?![\w.]))")
_YES_NO = re.compile(r"count\s*\(\s*\*\s*\)\s*>\s*0", re.IGNORECASE)
#: ``select ( select ... ) < ( select ... )``: EHRSQL's comparison questions, answered 0/1 by SQLite.
_COMPARISON_QUERY = re.compile(r"\s*select\s*\(.*\)\s*(?:<=|>=|<>|!=|<|>|=)\s*\(", re.IGNORECASE | re.DOTALL)
#: A query with its literals blanked: records of one template share it.
_SHAPE = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\b\d+(?:\.\d+)?\b")
_NULL_TEST = re.compile(rf"(?P<table>{_IDENT})\s*\.\s*(?P<col>{_IDENT})\s+is\s+(?P<neg>not\s+)?null\b", re.IGNORECASE)
#: Columns compared with structural constants (which d_items table an item links to), never slots.
_STRUCTURAL = {"linksto", "dbsource", "event_type", "eventtype"}


@dataclass(frozen=True)
class Dialect:
    """How entities hang together in one schema.

    Attributes:
        anchor: The column naming the anchor entity (a patient or an admission).
        anchor_table: The table listing anchors (it has the ``anchor`` column).
        stay: A column linking fact tables to ``anchor_table`` when they lack ``anchor`` (eICU's stay id).
        links: Dictionary table -> ``[(fact table, key)]``: its rows belong to an anchor through a fact table.
        db_file: The database file name of the family.
    """

    anchor: str
    anchor_table: str
    db_file: str
    stay: str = ""
    links: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)


_MIMIC_LINKS = {
    "d_labitems": (("labevents", "itemid"),),
    "d_items": (("chartevents", "itemid"), ("inputevents_cv", "itemid"), ("outputevents", "itemid")),
    "d_icd_diagnoses": (("diagnoses_icd", "icd9_code"),),
    "d_icd_procedures": (("procedures_icd", "icd9_code"),),
}
DIALECTS = {
    "mimic_iii": Dialect("subject_id", "admissions", "mimic_iii.db", links=_MIMIC_LINKS),
    "ehr_seqsql": Dialect("subject_id", "admissions", "mimic_iii.db", links=_MIMIC_LINKS),
    "eicu": Dialect("uniquepid", "patient", "eicu.db", stay="patientunitstayid"),
    "treqs": Dialect("hadm_id", "demographic", "treqs.db"),
}


@dataclass
class Slot:
    """One compared value of the gold SQL.

    Attributes:
        name: The record's slot name (``drug_name``) or ``table.column`` when the record names none.
        table, column: What the SQL compares it with (lower-case).
        value: The value as given (str, int or float).
        spans: Character spans of its literal in the SQL (all occurrences compared with this column).
        quote: The literal's quote character (``'``, ``"`` or empty for a number).
    """

    name: str
    table: str
    column: str
    value: Any
    spans: list[tuple[int, int]]
    quote: str


def _literal_value(text: str) -> tuple[Any, str]:
    if text[0] in "'\"":
        return text[1:-1].replace(text[0] * 2, text[0]), text[0]
    return (float(text) if "." in text else int(text)), ""


def result_of(rows: list[tuple], sql: str) -> tuple[Any, str, str]:
    """``(answer, answer_type, why_degenerate)`` of executed rows; the type is empty when degenerate.

    One column: a scalar (boolean for ``count(*) > 0`` and comparisons of two subqueries, integer, number,
    datetime, text) or, over several rows,
    the set of distinct values. Several columns: the row as a list, or the set of distinct rows. Degenerate:
    nothing but NULLs, a bare numeric 0 or 1, or more than :data:`MAX_SET` distinct values.

    Example:
        >>> result_of([("po",), ("po",), ("iv",)], "select route from prescriptions")
        (['iv', 'po'], 'set', '')
    """
    rows = [r for r in rows if r and any(v is not None for v in r)]
    if not rows:
        return None, "", "empty or NULL result"
    if len(rows[0]) > 1:
        distinct = sorted({tuple(r) for r in rows}, key=str)
        if len(distinct) > MAX_SET:
            return None, "", f"{len(distinct)} distinct rows"
        return (list(distinct[0]), "list", "") if len(distinct) == 1 else ([list(r) for r in distinct], "set", "")
    if len({r[0] for r in rows}) > MAX_SET:
        return None, "", f"more than {MAX_SET} distinct values"
    got = _answer(rows if len({r[0] for r in rows}) > 1 else rows[:1], sql)
    if got is None:
        return None, "", "empty or NULL result"
    value, kind = got
    if kind == "integer" and value in (0, 1) and _COMPARISON_QUERY.match(sql):
        value, kind = bool(value), "boolean"  # "is the last value less than the first?": a yes/no question
    if kind in ("integer", "number") and value in (0, 1):
        # 0 is "nothing found"; a bare 1 also answers every yes/no item, so a constant "1" would collect both
        # (the generated families drop numeric 0/1 answers for the same reason).
        return None, "", f"the answer is {value}"
    return value, kind, ""


def _weak(answer: Any, kind: str, target: bool) -> bool:
    """A draw kept only when no better one is found: a yes/no answer off the 50/50 target."""
    return kind == "boolean" and bool(answer) != target


def _canon(value: Any) -> str:
    """Comparable form of a slot value: ``12``, ``12.0`` and ``'12'`` are the same ward."""
    text = str(value).strip().lower()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else str(number)


def find_slots(sql: str, names: dict[str, Any] | None = None) -> list[Slot]:
    """The slots of ``sql``: equality comparisons of a column with a literal.

    Args:
        sql: The gold SQL.
        names: The record's slot values (EHRSQL ``value``); when given, only comparisons with one of these values
            are slots (named after them); otherwise every non-structural equality is a slot named ``table.column``.

    Example:
        >>> [(s.table, s.column, s.value) for s in find_slots("select 1 from t where t.drug = 'asa' and t.x = 2")]
        [('t', 'drug', 'asa'), ('t', 'x', 2)]
    """
    wanted = {_canon(v): k for k, v in (names or {}).items() if str(v).strip()}
    slots: dict[tuple[str, str, str], Slot] = {}
    for m in _COMPARISON.finditer(sql):
        table, col = m["table"].lower(), m["col"].lower()
        value, quote = _literal_value(m["lit"])
        if col in _STRUCTURAL:
            continue
        if names is not None:
            name = wanted.get(_canon(value))
            if name is None:
                continue
        else:
            name = f"{table}.{col}"
        key = (table, col, str(value).lower())
        if key in slots:
            slots[key].spans.append(m.span("lit"))
        else:
            slots[key] = Slot(name, table, col, value, [m.span("lit")], quote)
    return list(slots.values())


def _render(value: Any, quote: str) -> str:
    if not quote:
        return str(value)
    return quote + str(value).replace(quote, quote * 2) + quote


def rewrite_sql(sql: str, slots: list[Slot], values: dict[int, Any]) -> str:
    """``sql`` with slot ``k``'s literals replaced by ``values[k]`` (slots not in ``values`` unchanged)."""
    edits = sorted(((span, _render(values[k], slots[k].quote if isinstance(values[k], str) or slots[k].quote
                                   else "")) for k in values for span in slots[k].spans), reverse=True)
    for (start, end), text in edits:
        sql = sql[:start] + text + sql[end:]
    return sql


def _pattern(value: Any) -> re.Pattern[str]:
    return re.compile(r"(?<![\w])" + re.escape(str(value)) + r"(?![\w])", re.IGNORECASE)


def stated(text: str, value: Any) -> bool:
    """Whether ``value`` appears in ``text`` as a whole word (ignoring case)."""
    return bool(str(value).strip()) and _pattern(value).search(text) is not None


def replace_in_text(text: str, changes: dict[Any, Any]) -> str:
    """``text`` with every whole-word occurrence of each old value replaced by its new value, in one pass.

    Longer old values win over shorter ones they contain; a lower-case occurrence gets the new value in lower
    case (public questions are lower-cased, some databases are not).

    Example:
        >>> replace_in_text("has patient 1001 had heparin?", {1001: 42, "heparin": "Warfarin"})
        'has patient 42 had warfarin?'
    """
    spans: list[tuple[int, int, str]] = []
    for old in sorted(changes, key=lambda v: -len(str(v))):
        for m in _pattern(old).finditer(text):
            if any(m.start() < end and start < m.end() for start, end, _ in spans):
                continue
            new = str(changes[old])
            spans.append((m.start(), m.end(), new.lower() if m.group(0).islower() else new))
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


@dataclass
class Draw:
    """The outcome of re-instantiating one question."""

    sql: str
    question: str
    answer: Any = None
    answer_type: str = ""
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    case_fixed: int = 0
    reason: str = ""
    detail: str = ""
    anchor: Any = None

    @property
    def ok(self) -> bool:
        return self.answer_type != ""


class Reinstantiator:
    """Re-instantiates questions over one database (an indexed in-memory copy; the file is never written).

    Args:
        db_path: The target SQLite database.
        dialect: How the schema's entities link (:data:`DIALECTS`).
        seed: Seeds every draw (per record, with its id), so an import is reproducible.
        attempts: Draws tried per question before it is reported degenerate.
    """

    def __init__(self, db_path: Any, dialect: Dialect, *, seed: int = 0, attempts: int = 60) -> None:
        src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        self.con = sqlite3.connect(":memory:")
        src.backup(self.con)
        src.close()
        self.dialect, self.seed, self.attempts = dialect, seed, attempts
        self.columns = {t: {c[1].lower() for c in self.con.execute(f"pragma table_info({t})")} for (t,) in
                        self.con.execute("select lower(name) from sqlite_master where type = 'table'")}
        self._indexed: set[tuple[str, str]] = set()
        for table, cols in self.columns.items():
            for col in (dialect.anchor, dialect.stay, "hadm_id", "itemid", "icd9_code"):
                if col and col in cols:
                    self._index(table, col)
        self._indexing = False
        self.con.set_authorizer(self._authorize)
        self._anchors: dict[tuple[str, str], list[Any]] = {}
        self._used: dict[str, set[Any]] = {}  # query shape -> anchors already drawn for it
        self._answered = {True: 0, False: 0}  # yes/no answers kept so far
        self._deadline = 0.0
        self.con.set_progress_handler(self._tick, 20_000)

    def close(self) -> None:
        """Release the in-memory copy."""
        self.con.close()

    def _authorize(self, action: int, *_: Any) -> int:
        """Public gold SQL may only read: no ATTACH (it would create host files), no writes to the copy."""
        if action in _READ_ACTIONS or (self._indexing and action in _INDEX_ACTIONS):
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    def _tick(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def _index(self, table: str, col: str) -> None:
        if (table, col) not in self._indexed and col in self.columns.get(table, ()):
            self._deadline = time.monotonic() + 600  # building an index is never cut short
            self._indexing = True
            try:
                self.con.execute(f"create index if not exists imp_{table}_{col} on {table}({col})")
            finally:
                self._indexing = False
            self._indexed.add((table, col))

    def execute(self, sql: str, params: tuple = (), limit: int = MAX_SET + 2) -> list[tuple]:
        """Run ``sql`` with a time limit; raises ``sqlite3.Error`` (``interrupted`` on timeout)."""
        self._deadline = time.monotonic() + QUERY_SECONDS
        return self.con.execute(sql, params).fetchmany(limit)

    # -- where a value lives --------------------------------------------------------------------------
    def known(self, slot: Slot) -> bool:
        """Whether the slot's table and column exist in this database."""
        return slot.column in self.columns.get(slot.table, ())

    def lookup(self, slot: Slot, value: Any) -> Any:
        """The stored value equal to ``value`` (exactly, else ignoring case); None when absent."""
        self._index(slot.table, slot.column)
        t, c = slot.table, slot.column
        rows = self.execute(f"select {c} from {t} where {c} = ? limit 1", (value,))
        if not rows and isinstance(value, (int, float)):
            rows = self.execute(f"select {c} from {t} where {c} = ? limit 1", (str(value),))
        if not rows and isinstance(value, str):
            rows = self.execute(f"select {c} from {t} where lower({c}) = lower(?) limit 1", (value,))
        return rows[0][0] if rows else None

    def _scope(self, table: str) -> str | None:
        """SQL (one ``?`` = the anchor) selecting the rows of ``table`` that belong to one anchor, or None."""
        d, cols = self.dialect, self.columns.get(table, set())
        if d.anchor in cols:
            return f"{table}.{d.anchor} = ?"
        if d.stay and d.stay in cols:
            return f"{table}.{d.stay} in (select {d.stay} from {d.anchor_table} where {d.anchor} = ?)"
        return None

    def _scoped_values(self, slot: Slot, anchor: Any, fact: str | None) -> list[Any]:
        t, c = slot.table, slot.column
        where = self._scope(t)
        if where is not None:
            return [r[0] for r in self.execute(f"select distinct {c} from {t} where {where} and {c} is not null "
                                               "order by 1", (anchor,), 500)]
        for fact_table, key in self.dialect.links.get(t, ()):
            if fact is not None and fact_table != fact:
                continue
            fact_where = self._scope(fact_table)
            if fact_where is None:
                continue
            rows = self.execute(f"select distinct {t}.{c} from {t} where {t}.{key} in (select {fact_table}.{key} "
                                f"from {fact_table} where {fact_where}) and {t}.{c} is not null order by 1",
                                (anchor,), 500)
            if rows:
                return [r[0] for r in rows]
        return []

    def _anchor_expr(self, table: str, fact: str | None) -> tuple[str, str] | None:
        """``(select list, from clause)`` listing the anchors that own rows of ``table``."""
        d, cols = self.dialect, self.columns.get(table, set())
        if d.anchor in cols:
            return f"{table}.{d.anchor}", table
        if d.stay and d.stay in cols:
            return f"{d.anchor_table}.{d.anchor}", f"{table} join {d.anchor_table} using ({d.stay})"
        for fact_table, key in d.links.get(table, ()):
            if (fact is None or fact_table == fact) and d.anchor in self.columns.get(fact_table, ()):
                return f"{fact_table}.{d.anchor}", f"{table} join {fact_table} using ({key})"
        return None

    def anchors(self, slot: Slot, fact: str | None, value: Any = None) -> set[Any] | None:
        """Anchors owning rows of the slot's table (holding ``value`` when given); None when not anchored."""
        expr = self._anchor_expr(slot.table, fact)
        if expr is None:
            return None
        key = (f"{slot.table}|{fact}", "" if value is None else f"{slot.column}={value!r}")
        if key not in self._anchors:
            sel, src = expr
            where = "" if value is None else f" where {slot.table}.{slot.column} = ?"
            self._deadline = time.monotonic() + QUERY_SECONDS * 5
            rows = self.con.execute(f"select distinct {sel} from {src}{where}",
                                    () if value is None else (value,)).fetchall()
            self._anchors[key] = sorted((r[0] for r in rows if r[0] is not None), key=str)
        return set(self._anchors[key])

    def _fact(self, slot: Slot, sql: str) -> str | None:
        """The fact table a dictionary slot is reached through in ``sql`` (e.g. d_items via inputevents_cv)."""
        for fact_table, _key in self.dialect.links.get(slot.table, ()):
            if re.search(rf"\b{fact_table}\b", sql, re.IGNORECASE):
                return fact_table
        return None

    # -- one question -----------------------------------------------------------------------------------
    def answer_of(self, sql: str) -> tuple[Any, str, str]:
        """``(answer, answer_type, why_degenerate)`` of executing ``sql``; the type is empty when degenerate."""
        try:
            rows = self.execute(sql, limit=FETCH_ROWS)
        except sqlite3.Error as exc:
            return None, "", f"sql_error: {str(exc)[:80]}"
        return result_of(rows, sql)

    def _global_values(self, slot: Slot) -> list[Any]:
        key = (f"{slot.table}|*", slot.column)
        if key not in self._anchors:
            self._deadline = time.monotonic() + QUERY_SECONDS * 5
            self._anchors[key] = [r[0] for r in self.con.execute(
                f"select distinct {slot.column} from {slot.table} where {slot.column} is not null order by 1")]
        return self._anchors[key]

    def _pool(self, slots: list[Slot], redraw: list[int], keep: dict[int, Any], sql: str, *,
              holding: bool = True) -> list[Any] | None:
        """Anchors owning rows for every redrawn slot and (``holding``) holding every kept value; None: no slot
        is anchored. A yes/no question aiming at "no" must not require the kept value (that forces "yes")."""
        pool: set[Any] | None = None
        for k, slot in enumerate(slots):
            if k not in redraw and (k not in keep or not holding):
                continue
            found = self.anchors(slot, self._fact(slot, sql), None if k in redraw else keep[k])
            if found is not None:
                pool = found if pool is None else pool & found
        if pool is not None:
            for m in _NULL_TEST.finditer(sql):  # "current visit" (dischtime is null): only anchors that have one
                found = self._anchors_where(m["table"].lower(), f"{m['col']} is {m['neg'] or ''}null")
                if found is not None:
                    pool &= found
        return None if pool is None else sorted(pool, key=str)

    def _anchors_where(self, table: str, condition: str) -> set[Any] | None:
        expr = self._anchor_expr(table, None) if condition.split()[0] in self.columns.get(table, ()) else None
        if expr is None:
            return None
        key = (f"{table}|where", condition)
        if key not in self._anchors:
            self._deadline = time.monotonic() + QUERY_SECONDS * 5
            rows = self.con.execute(f"select distinct {expr[0]} from {expr[1]} where {table}.{condition}").fetchall()
            self._anchors[key] = [r[0] for r in rows if r[0] is not None]
        return set(self._anchors[key])

    def _search(self, rng: random.Random, sql: str, text: str, slots: list[Slot], redraw: list[int],
                keep: dict[int, Any], target: bool) -> Draw | None:
        """Try ``attempts`` draws of the ``redraw`` slots; the first meaningful one (a yes/no answer equal to
        ``target`` preferred), or None."""
        yes_no = _YES_NO.search(sql) is not None or _COMPARISON_QUERY.match(sql) is not None
        pool = self._pool(slots, redraw, keep, sql, holding=not (yes_no and not target))
        if pool == []:
            return None
        shape = _SHAPE.sub("?", sql)
        fresh = [a for a in pool if a not in self._used.get(shape, ())] if pool else pool
        pool = fresh or pool  # another record of the same template already asked about these anchors
        fallback: Draw | None = None
        for _ in range(self.attempts):
            anchor = rng.choice(pool) if pool else None
            values, used = dict(keep), set()
            for k in redraw:
                slot = slots[k]
                anchored = anchor is not None and self._anchor_expr(slot.table, self._fact(slot, sql)) is not None
                cands = (self._scoped_values(slot, anchor, self._fact(slot, sql)) if anchored
                         else self._global_values(slot))
                cands = [c for c in cands if (slot.column, c) not in used]
                if not cands:
                    break
                values[k] = rng.choice(cands)
                used.add((slot.column, values[k]))
            else:
                new_sql = rewrite_sql(sql, slots, {k: v for k, v in values.items() if v != slots[k].value})
                answer, kind, _why = self.answer_of(new_sql)
                if not kind:
                    continue
                changes = {slots[k].value: values[k] for k in redraw if values[k] != slots[k].value}
                draw = Draw(new_sql, replace_in_text(text, changes), answer, kind,
                            changed={slots[k].name: (slots[k].value, values[k]) for k in redraw})
                draw.anchor = anchor
                if not _weak(answer, kind, target):
                    break
                fallback = fallback or draw
        else:
            draw = fallback
        if draw is not None and draw.anchor is not None:
            self._used.setdefault(shape, set()).add(draw.anchor)
        return draw

    def reinstantiate(self, key: str, sql: str, texts: list[str], slots: list[Slot]) -> Draw:
        """Re-instantiate one question so that its values exist and its answer is meaningful.

        Order: (1) the given values, letter case fixed to the stored one; (2) keep the values that exist and
        draw the missing ones from one anchor's rows; (3) redraw every value stated in the question. Values can
        only change when the question text states them (else the question would no longer match its SQL).

        Args:
            key: The record's id (seeds its draws).
            sql: The gold SQL (already post-processed).
            texts: Candidate question texts, preferred first (the question, then its template).
            slots: :func:`find_slots` of ``sql``.

        Returns:
            A :class:`Draw`; ``draw.ok`` is False with ``reason``/``detail`` when the record stays degenerate.
        """
        rng = random.Random(f"{self.seed}:{key}")
        target = self._answered[True] <= self._answered[False]  # steer yes/no answers to the rarer one so far
        # A comparison on a subquery alias (``t1.valuenum = 3.2``) is a threshold, not an entity value: kept as is.
        slots = [s for s in slots if s.table in self.columns]
        for slot in slots:
            if not self.known(slot):
                return Draw(sql, texts[0], reason="schema_mismatch",
                            detail=f"{slot.table}.{slot.column} is not a column of the target database")
        stored = {k: self.lookup(s, s.value) for k, s in enumerate(slots)}
        keep = {k: v for k, v in stored.items() if v is not None}
        missing = [k for k, v in stored.items() if v is None]
        case_fixed = sum(str(v) != str(slots[k].value) for k, v in keep.items())
        base = rewrite_sql(sql, slots, {k: v for k, v in keep.items() if v != slots[k].value})
        answer, kind, why = self.answer_of(base)
        if not missing and kind:
            return self._count(Draw(base, texts[0], answer, kind, case_fixed=case_fixed))
        if why.startswith("sql_error"):
            return Draw(base, texts[0], reason="sql_error", detail=why.split(": ", 1)[-1])
        stating = next((t for t in texts if t and all(stated(t, slots[k].value) for k in missing)), None)
        draw = None
        if stating is not None and missing:
            draw = self._search(rng, sql, stating, slots, missing, keep, target)
        if draw is None:
            text = max((t for t in texts if t), key=lambda t: sum(stated(t, s.value) for s in slots), default="")
            movable = [k for k, s in enumerate(slots) if stated(text, s.value)]
            if movable and all(k in movable for k in missing):
                draw = self._search(rng, sql, text, slots, movable,
                                    {k: v for k, v in keep.items() if k not in movable}, target)
        if draw is None:
            if stating is None:
                names = ", ".join(f"{slots[k].name}={slots[k].value!r}" for k in missing)
                return Draw(base, texts[0], reason="unstated_value",
                            detail=f"{names} absent from the database and not stated in the question text")
            return Draw(base, texts[0], reason="degenerate",
                        detail=f"{why or 'no meaningful answer'} after {self.attempts} draws per strategy")
        draw.case_fixed = case_fixed
        return self._count(draw)

    def _count(self, draw: Draw) -> Draw:
        if draw.answer_type == "boolean":
            self._answered[bool(draw.answer)] += 1
        return draw
