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
answer fills more than a third of its category (a family's ``answer_share`` of the category as built:
:func:`spread_answers`), and no answer fills more than :data:`MAX_ANSWER_SHARE` of a split
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
    """The answer from executed rows, or None when the instance is degenerate (nothing found: see
    :func:`nothing_answer`; a numeric 1, which would also answer every "yes" where a bare 1 is a yes)."""
    if template.type == "list" and rows and len(rows[0]) > 1:  # one row of several columns ("X and Y of ...")
        distinct = {tuple(r) for r in rows}
        if len(distinct) != 1 or any(v is None or v == "" for v in next(iter(distinct))):
            return None
        return list(next(iter(distinct)))
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


#: A "nothing found" answer is not degenerate: it is the answer (``nothing_answer``).
NOTHING = object()


def nothing_answer(template: Template, rows: list[tuple]) -> Any:
    """The "nothing found" answer of executed rows (0 for a count, None for a value, [] for a set), or
    :data:`NOTHING` when the rows hold something (or the template is yes/no, which always has an answer).

    Example:
        >>> nothing_answer(Template("t", "integer", "", "", ""), [(0,)]), nothing_answer(Template("t", "set", "", "", ""), [])
        (0, [])
    """
    if template.type == "boolean":
        return NOTHING
    values = [v for r in rows for v in r if v is not None and v != ""]
    if template.type in ("set", "list"):
        return [] if not values else NOTHING
    if not values:
        return None
    if template.type in ("integer", "number") and len(rows) == 1 and len(values) == 1:
        try:
            if float(values[0]) == 0.0:
                return 0
        except (TypeError, ValueError):
            return NOTHING
    return NOTHING


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

    def _rows(self, template: Template, flt: Filter) -> list[dict[str, Any]]:
        """Pool rows the filter can be asked about (its anchor period, its patients)."""
        rows = self.pool(template.pool)
        if flt.anchor:
            rows = [r for r in rows if str(r.get("t") or "").startswith(flt.anchor)]
        if flt.patients and rows and "patient_id" in rows[0]:
            allowed = {r[next(iter(r))] for r in self.pool(flt.patients)}
            rows = [r for r in rows if r["patient_id"] in allowed]
        return rows

    def nothing(self, template: Template, variant: str, n: int, exclude: set[str] | frozenset[str] = frozenset()
                ) -> list[tuple[dict[str, Any], str, str, Any]]:
        """Up to ``n`` distinct (slots, question, sql, answer) of one category whose answer is "nothing found"
        (:func:`nothing_answer`: 0, None or []).

        Slot values are crossed between pool rows (one row's patient with another row's drug, or another row's
        time window), as public question sets draw values that need not co-occur; only crossings whose executed
        gold SQL finds nothing are kept. Yes/no templates have none (they always answer yes or no).
        """
        flt = self.filters[variant]
        n = min(n, template.cap) if template.cap else n
        rows = self._rows(template, flt)
        if n <= 0 or template.type == "boolean" or len(rows) < 2:
            return []
        rng = random.Random(f"{self.family}:{self.seed}:{template.id}.{variant}:nothing")
        out: list[tuple[dict[str, Any], str, str, Any]] = []
        seen: set[str] = set(exclude)
        tried = 0
        for _ in range(max(n * 4, 60)):
            if len(out) >= n or (tried >= 30 and not out):  # crossings that never find nothing: stop early
                break
            row, donor = dict(rng.choice(rows)), rng.choice(rows)
            key = rng.choice(sorted(row))
            row[key] = donor[key]
            drawn = self._draw(template, variant, row, rng, seen)
            if drawn is None:
                continue
            tried += 1
            slots, question, sql, result = drawn
            answer = nothing_answer(template, result)
            if answer is not NOTHING:
                out.append((slots, question, sql, answer))
        return out

    def _draw(self, template: Template, variant: str, row: dict[str, Any], rng: random.Random, seen: set[str]
              ) -> tuple[dict[str, Any], str, str, list[tuple]] | None:
        """(slots, question, sql, executed rows) of one pool row, or None when its SQL was drawn before."""
        slots = {k: v for k, v in row.items() if k != "t"}
        slots.update(_time_slots(row.get("t"), rng))
        question, sql = render(template, self.filters[variant], slots)
        if sql in seen:
            return None
        seen.add(sql)
        try:
            result = self.con.execute(sql).fetchmany(template.max_items + 1)
        except sqlite3.Error as exc:
            raise TaskError(f"{self.family}: gold SQL of {template.id}.{variant} failed ({exc}): {sql}") from None
        return slots, question, sql, result

    def category(self, template: Template, variant: str, n: int) -> list[tuple[dict[str, Any], str, str, Any]]:
        """Up to ``n`` distinct (slots, question, sql, answer) for one category."""
        flt = self.filters[variant]
        n = min(n, template.cap) if template.cap else n
        rows = self._rows(template, flt)
        rng = random.Random(f"{self.family}:{self.seed}:{template.id}.{variant}")
        out: list[tuple[dict[str, Any], str, str, Any]] = []
        seen: set[str] = set()
        by_answer: dict[Any, int] = {}
        for _ in range(max(n * 15, 600)):
            if len(out) >= n or not rows:
                break
            drawn = self._draw(template, variant, dict(rng.choice(rows)), rng, seen)
            if drawn is None:
                continue
            slots, question, sql, result = drawn
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


def cap_answer_share(items: list[Instance], max_share: float = MAX_ANSWER_SHARE,
                     elsewhere: frozenset[str] | set[str] = frozenset()) -> list[Instance]:
    """``items`` without the instances that let one answer exceed ``max_share`` of them.

    Excess instances of an over-common answer are dropped from the categories that hold most of it, latest
    first, never a category's last instance (a category with nothing left would vanish) unless the category is in
    ``elsewhere`` (it has instances in the other split). Deterministic.

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
            if rendered[k] == answer and (per_cat[keep[k].category] > 1 or keep[k].category in elsewhere):
                per_cat[keep[k].category] -= 1
                del keep[k], rendered[k]
                dropped += 1
        if dropped == 0:
            blocked.add(answer)


def plan_mix(categories: list[tuple[frozenset[str], int, dict[str, int]]], target: dict[str, float]
             ) -> list[tuple[int, dict[str, int]]]:
    """How many meaningful and nothing-found instances (per kind) each category keeps to approach ``target``.

    First the category sizes: :func:`~medagentgym.tasks.ehr_synth.mix.quotas` fits the question-type shares, each
    category offering its meaningful instances plus at most half as many nothing-found ones (every category keeps
    one), and gives the categories that can hold a third of a kind's nothing-found answers ("can_<kind>") 3.3
    times that kind's target share, so that the target is reachable. Then, kind by kind (``zero``, ``none``,
    ``empty``), nothing-found instances take the same share ``r`` of every category that has them (``r`` found
    by bisection to reach the kind's target share of the whole family), never more than a third of a category
    beyond what its meaningful instances leave open. A scarce kind falls short of its target instead of shrinking
    the build.

    Args:
        categories: ``(question features, meaningful instances, {kind: nothing-found instances})`` per category.
        target: Feature -> share (0-1), question features and ``nothing_<kind>``.

    Returns:
        ``(meaningful kept, {kind: nothing-found kept})`` per category.
    """
    from medagentgym.tasks.ehr_synth.mix import quotas

    kinds_order = ("zero", "none", "empty")
    cells = [(features | {f"can_{k}" for k, n in kinds.items() if n >= max(1, items // 2)},
              items + min(sum(kinds.values()), items // 2 if items else 1)) for features, items, kinds in categories]
    fit = {k: v for k, v in target.items() if not k.startswith("nothing_")}
    fit.update({f"can_{k[8:]}": min(0.95, 3.3 * v) for k, v in target.items() if k.startswith("nothing_")})
    sizes = quotas(cells, fit, floor=[1 if a else 0 for _f, a in cells])
    total = sum(sizes)
    want = {k: round(target.get(f"nothing_{k}", 0.0) * total) for k in kinds_order}
    taken: list[dict[str, int]] = [{} for _ in categories]
    have = dict.fromkeys(kinds_order, 0)
    # A category whose size exceeds its meaningful instances takes nothing-found ones first, of the kinds furthest
    # below their targets.
    for i, (_f, items, kinds) in enumerate(categories):
        short = sizes[i] - items
        while short > 0:
            open_kinds = [k for k in kinds_order if kinds.get(k, 0) > taken[i].get(k, 0)]
            if not open_kinds:
                break
            kind = max(open_kinds, key=lambda k: want[k] - have[k])
            taken[i][kind] = taken[i].get(kind, 0) + 1
            have[kind] += 1
            short -= 1
    room = [max(min(size // 3, size - 1), 0) for size in sizes]
    for kind in kinds_order:
        if want[kind] - have[kind] <= 0:
            continue

        def allot(r: float, kind: str = kind) -> list[int]:
            return [max(0, min(kinds.get(kind, 0) - taken[i].get(kind, 0), room[i] - sum(taken[i].values()),
                               int(r * sizes[i]) - taken[i].get(kind, 0)))
                    for i, (_f, _items, kinds) in enumerate(categories)]

        lo, hi = 0.0, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sum(allot(mid)) < want[kind] - have[kind] else (lo, mid)
        for i, n in enumerate(allot(hi)):
            if n > 0:
                taken[i][kind] = taken[i].get(kind, 0) + n
                have[kind] += n
    return [(max(0, min(items, sizes[i] - sum(taken[i].values()))), taken[i])
            for i, (_f, items, _kinds) in enumerate(categories)]


def spread_answers(items: list[tuple[dict[str, Any], str, str, Any]], keep: int, others: int,
                   max_share: float) -> list[tuple[dict[str, Any], str, str, Any]]:
    """At most ``keep`` of one category's meaningful ``items``, chosen so that no answer holds more than
    ``max_share`` of the category (the kept items plus its ``others`` nothing-found instances).

    Items are taken round-robin over their answers (each answer's items in draw order, answers in order of first
    draw), so trimming a category keeps its answers varied; then the most common answer loses its last items until
    it holds at most ``max_share`` of what is left (at least one item of it stays). A per-template constant learned
    on a few train instances then rarely finds an answer that repeats (issue 34: a count of 2 held half of a
    small category, because the draw's cap was a third of ``per_category``, not of what the category kept).

    Example:
        >>> drawn = [({}, "q", f"s{k}", a) for k, a in enumerate([2, 2, 2, 2, 5, 6, 7, 8, 9])]
        >>> [a for *_, a in spread_answers(drawn, 9, 0, 1 / 3)]  # 2 keeps 2 of 7
        [2, 5, 6, 7, 8, 9, 2]
        >>> [a for *_, a in spread_answers(drawn, 4, 0, 1 / 3)]  # trimmed: one 2, not four
        [2, 5, 6, 7]
    """
    groups: dict[str, list[tuple[dict[str, Any], str, str, Any]]] = {}
    for item in items:
        groups.setdefault(str(item[3]), []).append(item)
    ordered = [group[k] for k in range(max(map(len, groups.values()), default=0)) for group in groups.values()
               if k < len(group)]
    kept = ordered[:max(0, keep)]
    while kept:
        counts: dict[str, int] = {}
        for item in kept:
            counts[str(item[3])] = counts.get(str(item[3]), 0) + 1
        answer, n = max(counts.items(), key=lambda kv: kv[1])
        if n <= max(1, int(max_share * (len(kept) + others))):
            break
        last = max(k for k, item in enumerate(kept) if str(item[3]) == answer)
        del kept[last]
    return kept


def make_instances(inst: Instantiator, *, per_category: int, test_fraction: float, context: str,
                   data: dict[str, str], db_name: str, target: dict[str, float] | None = None,
                   grading: dict[str, dict[str, Any]] | None = None,
                   answer_share: float | None = None) -> dict[Split, list[Instance]]:
    """All instances of a family, ``test_fraction`` of each category to test.

    With a ``target`` mix (feature -> share, ``medagentgym.tasks.ehr_synth.mix``), each category also draws up to
    ``per_category`` "nothing found" instances (:meth:`Instantiator.nothing`), and
    :func:`~medagentgym.tasks.ehr_synth.mix.quotas` decides how many of each category's meaningful and
    nothing-found instances are kept (:func:`plan_mix`), so that the family's question-type and answer mix
    approach the target (every category keeps at least one instance; nothing-found ones are at most a third of a
    category).

    Which of a category's instances go to test is chosen to spread answers: each pick is the one whose answer the
    test split holds least so far (ties: the earliest drawn), so a count of 2 does not pile up in a small test
    split; nothing-found instances go to test in the same proportion as the rest. Then each split is capped so
    that no answer exceeds :data:`MAX_ANSWER_SHARE` of it (:func:`cap_answer_share`).

    Args:
        grading: Answer type -> grader options added to every instance of that type (template options win).
        answer_share: When set, no meaningful answer holds more than this share of a (non yes/no) category, as
            built (:func:`spread_answers`); else a third of ``per_category`` as drawn (:meth:`Instantiator.category`).
    """
    from collections import Counter

    from medagentgym.tasks.ehr_synth.mix import nothing_kind, question_features
    from medagentgym.tasks.graders import render_answer

    def keep(template: Template, items: list, n: int, others: int) -> list:
        """The ``n`` meaningful items a category keeps: the first drawn, or spread over answers with
        ``answer_share`` (yes/no categories are balanced already)."""
        if answer_share is None or template.type == "boolean":
            return items[:n]
        return spread_answers(items, n, others, answer_share)

    drawn = []
    for template in inst.templates:
        for variant in template.variants:
            items = inst.category(template, variant, per_category)
            nothing = inst.nothing(template, variant, per_category, {sql for _s, _q, sql, _a in items}) if target else []
            drawn.append((template, variant, items, nothing))
    if target:
        shape = []
        for template, _variant, items, nothing in drawn:
            some = (items or nothing)[:1]
            kinds = Counter(nothing_kind(x[3], template.type) for x in nothing)
            shape.append((frozenset(question_features(some[0][2], template.type) if some else ()), len(items),
                          {k: n for k, n in kinds.items() if k}))
        trimmed = []
        for (template, variant, items, nothing), (n_items, by_kind) in zip(drawn, plan_mix(shape, target)):
            used: Counter = Counter()
            chosen_nothing = []
            for x in nothing:
                kind = nothing_kind(x[3], template.type)
                if used[kind] < by_kind.get(kind, 0):
                    used[kind] += 1
                    chosen_nothing.append(x)
            trimmed.append((template, variant, keep(template, items, n_items, len(chosen_nothing)), chosen_nothing))
        drawn = trimmed
    elif answer_share is not None:
        drawn = [(template, variant, keep(template, items, len(items), len(nothing)), nothing)
                 for template, variant, items, nothing in drawn]

    splits: dict[Split, list[Instance]] = {"train": [], "test": []}
    in_test: Counter = Counter()
    for template, variant, items, nothing in drawn:
        total = len(items) + len(nothing)
        n_test = round(total * test_fraction) if total > 1 else 0
        n_test_nothing = min(len(nothing), round(len(nothing) * test_fraction))
        n_test_items = min(len(items), n_test - n_test_nothing)
        rendered = [render_answer(template.type, answer) for *_, answer in items]
        chosen: set[int] = set()
        for _ in range(max(0, n_test_items)):
            pick = min((k for k in range(len(items)) if k not in chosen), key=lambda k: (in_test[rendered[k]], k))
            chosen.add(pick)
            in_test[rendered[pick]] += 1
        chosen |= {len(items) + k for k in range(n_test_nothing)}
        options = {**(grading or {}).get(template.type, {}), **template.grading}
        for k, (slots, question, sql, answer) in enumerate(items + nothing):
            split: Split = "test" if k in chosen else "train"
            splits[split].append(Instance(
                id=f"{inst.family}/{split}/{len(splits[split]):06d}", family=inst.family,
                category=f"{template.id}.{variant}", split=split, question=question, context=context,
                answer=answer, answer_type=template.type, solution=sql, solution_lang="sql", data=dict(data),
                metadata={"slots": {k2: v for k2, v in slots.items()}, "template": template.id, "variant": variant,
                          "sql_database": db_name, "grading": dict(options)},
            ))
    for split, other in (("train", "test"), ("test", "train")):  # a category may leave one split, not both
        capped = cap_answer_share(splits[split], elsewhere={i.category for i in splits[other]})
        splits[split] = [item.model_copy(update={"id": f"{inst.family}/{split}/{k:06d}"})
                         for k, item in enumerate(capped)]
    return splits
