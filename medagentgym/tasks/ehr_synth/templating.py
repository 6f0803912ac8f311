"""Question templates as data, instantiated over a built database by executing their gold SQL.

A template file (``medagentgym/tasks/data/<family>/templates.yaml``) has optional ``macros`` (``<name>`` in SQL is replaced
by the macro's text before anything else), ``lower_questions`` (MIMICSQL's lower-cased questions), ``filters`` (time/visit filters: question phrase,
SQL condition, and an optional anchor rule) and ``templates``. A template names:

* ``id``, ``type`` (a ``medagentgym.tasks.graders`` answer type), ``q`` (question with ``{slot}`` and ``{time}``),
  ``sql`` (gold SQL with the same slots; string slots are escaped for SQL; ``{time}`` takes the filter's SQL);
* ``pool``: SQL whose rows are candidate slot values (column names = slot names; an optional column ``t`` is the
  time anchor from which ``{year}``, ``{month}``, ``{day}``, ``{ndays}``, ``{nyears}``, ``{nyears_since}`` and
  ``{nmonths_since}`` are derived);
* ``tcol`` / ``hcol``: the time column and the admission-id column the filters apply to;
* ``variants``: filter ids; each (template, variant) pair is one category (``<id>.<variant>``);
* optional ``type``-specific ``max_items`` (largest set kept) and ``cap`` (instances per category, for gold SQL
  that scans a large table).

Slot draws come from the pool with a per-category seeded RNG; the gold SQL runs on ONE read-only connection;
instances whose result is empty, NULL, a bare 0 or 1 for numeric answers, ambiguous (several rows for a
scalar) or too long (sets over ``max_items``) are dropped; boolean categories are kept balanced, no other
answer fills more than a third of its category, and no answer fills more than :data:`MAX_ANSWER_SHARE` of a split
(:func:`cap_answer_share`), so one constant answer, such as a count of 2 or "yes", scores little anywhere.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from medagentgym.tasks.base import Instance, Split, TaskError
from medagentgym.tasks.ehr_synth.public_sql import authorize_read_only

NOW = "2105-12-31 23:59:00"
_NOW_DT = dt.datetime(2105, 12, 31, 23, 59)
_SCALAR = {"integer", "number", "text", "datetime", "date", "boolean"}


@dataclass(frozen=True)
class Filter:
    """One time/visit filter: question phrase, SQL condition, and the anchor prefix ``t`` must start with."""

    id: str
    phrase: str
    sql: str
    anchor: str | None = None
    #: SQL returning the patient ids the filter can be true for (e.g. patients in hospital now): pool rows of
    #: other patients are skipped instead of being tried and rejected.
    patients: str | None = None


@dataclass(frozen=True)
class Template:
    """One question template (see the module docstring)."""

    id: str
    type: str
    q: str
    sql: str
    pool: str
    variants: tuple[str, ...] = ("none",)
    tcol: str = ""
    hcol: str = ""
    icol: str = ""
    max_items: int = 10
    #: At most this many instances per category (for templates whose gold SQL scans a large table).
    cap: int | None = None
    lower_q: bool = False
    grading: dict[str, Any] = field(default_factory=dict)


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser: ~10x faster, same results


def load_templates(path: Path) -> tuple[dict[str, Filter], list[Template]]:
    """Read a template file; raises ``TaskError`` naming the bad template."""
    doc = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    macros = doc.get("macros") or {}

    def expand(text: str) -> str:
        for name, body in macros.items():
            text = text.replace(f"<{name}>", body)
        return text

    filters = {fid: Filter(fid, f.get("q", ""), expand(f.get("sql", "")), f.get("anchor"), f.get("patients"))
               for fid, f in doc["filters"].items()}
    templates = []
    for raw in doc["templates"]:
        raw = {k: expand(v) if k in ("sql", "pool") else v for k, v in raw.items()}
        raw.setdefault("lower_q", bool(doc.get("lower_questions", False)))
        try:
            tpl = Template(**{**raw, "variants": tuple(raw.get("variants", ("none",)))})
        except TypeError as exc:
            raise TaskError(f"{path}: template {raw.get('id')!r} is malformed: {exc}") from None
        unknown = [v for v in tpl.variants if v not in filters]
        if unknown:
            raise TaskError(f"{path}: template {tpl.id!r} uses unknown filters {unknown}; known: {sorted(filters)}")
        templates.append(tpl)
    ids = [t.id for t in templates]
    if len(ids) != len(set(ids)):
        raise TaskError(f"{path}: duplicate template ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return filters, templates


def categories(templates: list[Template]) -> list[str]:
    """Category ids ``<template>.<variant>`` in file order."""
    return [f"{t.id}.{v}" for t in templates for v in t.variants]


def _sql_value(value: Any) -> str:
    return str(value).replace("'", "''") if isinstance(value, str) else str(value)


def _time_slots(t: str | None, rng: random.Random) -> dict[str, Any]:
    if not t:
        return {}
    s = str(t)  # 'YYYY-MM-DD HH:MM:SS' (sliced by hand: strptime dominated the build's Python time)
    when = dt.datetime(int(s[0:4]), int(s[5:7]), int(s[8:10]), int(s[11:13] or 0), int(s[14:16] or 0))
    days = (_NOW_DT - when).days
    # "since N years / months ago" must reach back past the anchor: calendar months are at least 28 days
    return {"year": when.strftime("%Y"), "month": when.strftime("%Y-%m"), "day": when.strftime("%Y-%m-%d"),
            "ndays": days + rng.randint(1, 60), "nyears": max(1, days // 365), "nyears_since": days // 365 + 1,
            "nmonths_since": days // 28 + 1}


def render(template: Template, flt: Filter, slots: dict[str, Any]) -> tuple[str, str]:
    """(question, gold SQL) for one slot assignment."""
    sql_slots = {k: _sql_value(v) for k, v in slots.items()}
    ctx = {"tcol": template.tcol, "hcol": template.hcol, "icol": template.icol, "now": NOW}
    time_sql = flt.sql.format(**ctx, **sql_slots) if flt.sql else ""
    time_q = flt.phrase.format(**slots) if flt.phrase else ""
    question = template.q.format(**slots, time=time_q)
    if template.lower_q:
        question = question.lower()
    sql = template.sql.format(**sql_slots, time=(" " + time_sql) if time_sql else "", now=NOW)
    return question, sql


def gold_answer(template: Template, rows: list[tuple]) -> Any:
    """The answer from executed rows, or None when the instance is degenerate."""
    if template.type in ("set", "list"):
        values = [r[0] for r in rows if r and r[0] is not None]
        if not values or len(values) > template.max_items:
            return None
        return sorted(set(values), key=str) if template.type == "set" else values
    values = {r[0] for r in rows}
    if len(values) != 1:
        return None
    value = next(iter(values))
    if value is None or value == "":
        return None
    if template.type == "boolean":
        return bool(value)
    if template.type in ("integer", "number"):
        # A bare "0"/"1" also answers every yes/no item, so numeric answers of 0 or 1 would let one constant
        # submission beat the base rate; such instances are not kept (zero counts are degenerate anyway).
        number = float(value)
        if number in (0.0, 1.0):
            return None
        return int(number) if template.type == "integer" else round(number, 4)
    return value


class Instantiator:
    """Draws instances of every category over one database (one cached read-only connection)."""

    def __init__(self, db: Path, filters: dict[str, Filter], templates: list[Template], *, family: str, seed: int) -> None:
        self.con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        self.con.set_authorizer(authorize_read_only)  # template SQL comes from a file: read-only, no ATTACH
        self.filters, self.templates, self.family, self.seed = filters, templates, family, seed
        self._pools: dict[str, list[dict[str, Any]]] = {}

    def close(self) -> None:
        """Close the connection."""
        self.con.close()

    def pool(self, sql: str) -> list[dict[str, Any]]:
        """Rows of a pool query as dicts (cached)."""
        if sql not in self._pools:
            try:
                cur = self.con.execute(sql)
            except sqlite3.Error as exc:
                raise TaskError(f"{self.family}: pool query failed ({exc}): {sql}") from None
            names = [d[0].lower() for d in cur.description]
            self._pools[sql] = [dict(zip(names, row)) for row in cur.fetchall()]
        return self._pools[sql]

    def category(self, template: Template, variant: str, n: int) -> list[tuple[dict[str, Any], str, str, Any]]:
        """Up to ``n`` distinct (slots, question, sql, answer) for one category."""
        flt = self.filters[variant]
        n = min(n, template.cap) if template.cap else n
        rows = self.pool(template.pool)
        if flt.anchor:
            rows = [r for r in rows if str(r.get("t") or "").startswith(flt.anchor)]
        if flt.patients and rows and "patient_id" in rows[0]:
            allowed = {r[next(iter(r))] for r in self.pool(flt.patients)}
            rows = [r for r in rows if r["patient_id"] in allowed]
        rng = random.Random(f"{self.family}:{self.seed}:{template.id}.{variant}")
        out: list[tuple[dict[str, Any], str, str, Any]] = []
        seen: set[str] = set()
        by_answer: dict[Any, int] = {}
        for _ in range(max(n * 15, 600)):
            if len(out) >= n or not rows:
                break
            row = dict(rng.choice(rows))
            slots = {k: v for k, v in row.items() if k != "t"}
            slots.update(_time_slots(row.get("t"), rng))
            question, sql = render(template, flt, slots)
            if sql in seen:
                continue
            seen.add(sql)
            try:
                result = self.con.execute(sql).fetchmany(template.max_items + 1)
            except sqlite3.Error as exc:
                raise TaskError(f"{self.family}: gold SQL of {template.id}.{variant} failed ({exc}): {sql}") from None
            answer = gold_answer(template, result)
            if answer is None:
                continue
            if template.type == "boolean":
                if by_answer.get(answer, 0) > by_answer.get(not answer, 0) + 1:
                    continue
            elif by_answer.get(str(answer), 0) >= max(1, n // 3):
                continue  # one answer (a small count such as 2) may not fill a category: constant answers stay weak
            key = answer if template.type == "boolean" else str(answer)
            by_answer[key] = by_answer.get(key, 0) + 1
            out.append((slots, question, sql, answer))
        return out


#: The largest share of a split one rendered answer may hold (the reward floor of a constant answer stays
#: under the 10 % every non-binary family is held to, with a margin for answers the grader treats as equal).
MAX_ANSWER_SHARE = 0.08


def cap_answer_share(items: list[Instance], max_share: float = MAX_ANSWER_SHARE) -> list[Instance]:
    """``items`` without the instances that let one answer exceed ``max_share`` of them.

    Excess instances of an over-common answer are dropped from the categories that hold most of it, latest
    first, never a category's last instance (a category with nothing left would vanish). Deterministic.

    Example:
        >>> counts = Counter(render_answer(i.answer_type, i.answer) for i in cap_answer_share(items))
        >>> max(counts.values()) <= 0.08 * sum(counts.values())  # unless only last-of-category ones remain
    """
    from collections import Counter

    from medagentgym.tasks.graders import render_answer

    keep = list(items)
    rendered = [render_answer(i.answer_type, i.answer) for i in keep]
    blocked: set[str] = set()  # answers that cannot drop further without emptying a category
    while True:
        counts = Counter(r for r in rendered if r not in blocked)
        if not counts:
            return keep
        answer, n = counts.most_common(1)[0]
        limit = int(max_share * len(keep))
        if n <= max(limit, 1):
            return keep
        excess = -(-(n - max_share * len(keep)) // (1 - max_share))  # dropping shrinks the split too
        per_cat = Counter(i.category for i in keep)
        dropped = 0
        for k in range(len(keep) - 1, -1, -1):
            if dropped >= excess:
                break
            if rendered[k] == answer and per_cat[keep[k].category] > 1:
                per_cat[keep[k].category] -= 1
                del keep[k], rendered[k]
                dropped += 1
        if dropped == 0:
            blocked.add(answer)


def make_instances(inst: Instantiator, *, per_category: int, test_fraction: float, context: str,
                   data: dict[str, str], db_name: str) -> dict[Split, list[Instance]]:
    """All instances of a family, ``test_fraction`` of each category to test.

    Which of a category's instances go to test is chosen to spread answers: each pick is the one whose answer the
    test split holds least so far (ties: the earliest drawn), so a count of 2 does not pile up in a small test
    split. Then each split is capped so that no answer exceeds :data:`MAX_ANSWER_SHARE` of it
    (:func:`cap_answer_share`).
    """
    from collections import Counter

    from medagentgym.tasks.graders import render_answer

    splits: dict[Split, list[Instance]] = {"train": [], "test": []}
    in_test: Counter = Counter()
    for template in inst.templates:
        for variant in template.variants:
            items = inst.category(template, variant, per_category)
            n_test = round(len(items) * test_fraction) if len(items) > 1 else 0
            rendered = [render_answer(template.type, answer) for *_, answer in items]
            chosen: set[int] = set()
            for _ in range(n_test):
                pick = min((k for k in range(len(items)) if k not in chosen), key=lambda k: (in_test[rendered[k]], k))
                chosen.add(pick)
                in_test[rendered[pick]] += 1
            for k, (slots, question, sql, answer) in enumerate(items):
                split: Split = "test" if k in chosen else "train"
                splits[split].append(Instance(
                    id=f"{inst.family}/{split}/{len(splits[split]):06d}", family=inst.family,
                    category=f"{template.id}.{variant}", split=split, question=question, context=context,
                    answer=answer, answer_type=template.type, solution=sql, solution_lang="sql", data=dict(data),
                    metadata={"slots": {k2: v for k2, v in slots.items()}, "template": template.id, "variant": variant,
                              "sql_database": db_name, "grading": dict(template.grading)},
                ))
    for split, items in splits.items():
        splits[split] = [item.model_copy(update={"id": f"{inst.family}/{split}/{k:06d}"})
                         for k, item in enumerate(cap_answer_share(items))]
    return splits
