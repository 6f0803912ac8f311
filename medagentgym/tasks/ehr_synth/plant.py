"""Patients that public question files name, planned so their questions have something to ask about.

``build(..., public_questions=[files])`` (or ``draw_hospital(..., plan=plan_from_files(files))``) reads EHRSQL /
MedAgentGym / MIMICSQL question files and plans one synthetic patient per patient the gold SQL names (MIMIC
``subject_id``, eICU ``uniquepid``, MIMICSQL ``subject_id`` or ``name``) and, with ``anonymous=True``, one more per
question that names none. A planned patient's history is drawn like any other (the same admissions, labs, vitals,
orders), in EHRSQL's calendar (2100-2105, no time shift), plus what their questions compare against:

* every drug, lab, diagnosis, procedure, input/output item, culture, care unit the gold SQL names, as an event of
  the patient (resolved to the raw item whose MIMIC or eICU spelling the question uses);
* at a time the question's time filter accepts: year / month / day windows (``strftime``), ``this year`` /
  ``last month`` (``start of``), ``since / until N days ago``, month-of-year and day-of-month refinements, exact
  timestamps; diagnoses at an admission's start and procedures at its end, as EHRSQL dates them;
* in the stay the question is about: the current hospital / ICU stay (open at ``2105-12-31 23:59:00``) when the SQL
  asks for a NULL discharge, discharged stays when it asks for a non-NULL one, every stay otherwise; events named
  in one question follow each other in the order the SQL names them (event-after-event questions).

Nothing about a planned patient is copied from real data: the files contribute ids, names and the values their
own questions compare against. The same files and seed give the same databases.

Example:
    >>> plan = plan_from_records([{"db_id": "mimic_iii", "query": "select count(*) from admissions "
    ...     "where admissions.subject_id = 273 and admissions.dischtime is null"}])
    >>> plan.patients[0].subject_id, plan.patients[0].current
    (273, True)
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medagentgym.tasks.ehr_synth import vocab_items as v
from medagentgym.tasks.ehr_synth.public_sql import gold_sql, load_records, patient_keys
from medagentgym.tasks.ehr_synth.public_vocab import _kinds
from medagentgym.tasks.ehr_synth.vocab import merged

NOW = dt.datetime(2105, 12, 31, 23, 59)
START = dt.datetime(2100, 1, 1)
_UNITS = {"year": 12, "month": 1}
_STRFTIME = re.compile(r"strftime\('%y(-%m)?(-%d)?',\s*[\w.]+\)\s*(=|>=|<=|>|<)\s*'(\d{4}(?:-\d\d){0,2})'", re.IGNORECASE)
_START_OF = re.compile(r"datetime\([\w.]+,\s*'start of (year|month|day)'\)\s*=\s*datetime\('[\d :-]+',\s*"
                       r"'start of \1',\s*'-(\d+) \1'\)")
_RELATIVE = re.compile(r"datetime\([\w.]+\)\s*(>=|<=)\s*datetime\('[\d :-]+',\s*'-(\d+) (year|month|day)'\)")
_MONTH = re.compile(r"strftime\('%m',\s*[\w.]+\)\s*=\s*'(\d\d)'")
_MONTH_DAY = re.compile(r"strftime\('%m-%d',\s*[\w.]+\)\s*=\s*'(\d\d)-(\d\d)'")
_DAY_OF_MONTH = re.compile(r"strftime\('%d',\s*[\w.]+\)\s*=\s*'(\d\d)'")
_EXACT = re.compile(r"\b\w+\.\w+\s*=\s*'(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)'")
_OPEN = re.compile(r"(dischtime|outtime|unitdischargetime|hospitaldischargetime) is null")
_CLOSED = re.compile(r"(dischtime|outtime|unitdischargetime|hospitaldischargetime) is not null")
_CAREUNIT = re.compile(r"\b(?:transfers\.careunit|icustays\.first_careunit|icustays\.last_careunit)\s*=\s*'(\w+)'")
_VITAL = re.compile(r"d_items\.label\s*=\s*'([^']+)'\s+and\s+d_items\.linksto\s*=\s*'chartevents'")


@dataclass
class Need:
    """One event a question needs: ``kind`` (drug, lab, dx, px, input, output, specimen, vital) and the raw item."""

    kind: str
    item: Any
    lo: dt.datetime = START
    hi: dt.datetime = NOW
    scope: str = "any"  # any | current | discharged
    order: int = 0
    at: dt.datetime | None = None


@dataclass
class PatientPlan:
    """One planned patient (ids from the question files; ``needs`` from their questions)."""

    subject_id: int | None = None
    uniquepid: str | None = None
    name: str | None = None
    current: bool = False
    careunit: str | None = None
    needs: list[Need] = field(default_factory=list)


@dataclass
class Plan:
    """Planned patients, in first-mention order."""

    patients: list[PatientPlan]

    def subject_ids(self) -> set[int]:
        """Subject ids the files name (random patients avoid them)."""
        return {p.subject_id for p in self.patients if p.subject_id is not None}


def _month_end(year: int, month: int) -> dt.datetime:
    nxt = dt.datetime(year + (month == 12), month % 12 + 1, 1)
    return nxt - dt.timedelta(minutes=1)


def _period(text: str) -> tuple[dt.datetime, dt.datetime]:
    parts = [int(p) for p in text.split("-")]
    if len(parts) == 1:
        return dt.datetime(parts[0], 1, 1), dt.datetime(parts[0], 12, 31, 23, 59)
    if len(parts) == 2:
        return dt.datetime(parts[0], parts[1], 1), _month_end(parts[0], parts[1])
    day = dt.datetime(parts[0], parts[1], parts[2])
    return day, day + dt.timedelta(hours=23, minutes=59)


def _back(unit: str, n: int) -> dt.datetime:
    if unit == "day":
        return NOW - dt.timedelta(days=n)
    months = NOW.year * 12 + NOW.month - 1 - n * _UNITS[unit]
    return NOW.replace(year=months // 12, month=months % 12 + 1, day=min(NOW.day, 28))


def window(sql: str) -> tuple[dt.datetime, dt.datetime] | None:
    """The time window a post-processed gold query's filters accept (their intersection), or None if it is empty
    or names an impossible date (an EHRSQL eICU test query compares with ``2105-12-00``).

    Example:
        >>> window("... strftime('%Y', prescriptions.startdate) = '2104' ...")[0].year
        2104
    """
    try:
        return _window(sql)
    except ValueError:
        return None


def _window(sql: str) -> tuple[dt.datetime, dt.datetime] | None:
    lo, hi = START, NOW
    for _m, _d, op, value in _STRFTIME.findall(sql):
        p_lo, p_hi = _period(value)
        if op == "=":
            lo, hi = max(lo, p_lo), min(hi, p_hi)
        elif op in (">=", ">"):
            lo = max(lo, p_lo if op == ">=" else p_hi)
        else:
            hi = min(hi, p_hi if op == "<=" else p_lo)
    for unit, n in _START_OF.findall(sql):
        if unit == "day":
            day = dt.datetime.combine((NOW - dt.timedelta(days=int(n))).date(), dt.time())
            p_lo, p_hi = day, day + dt.timedelta(hours=23, minutes=59)
        elif unit == "month":
            first = _back("month", int(n))
            p_lo, p_hi = dt.datetime(first.year, first.month, 1), _month_end(first.year, first.month)
        else:
            p_lo, p_hi = _period(str(NOW.year - int(n)))
        lo, hi = max(lo, p_lo), min(hi, p_hi)
    for op, n, unit in _RELATIVE.findall(sql):
        if op == ">=":
            lo = max(lo, _back(unit, int(n)))
        else:
            hi = min(hi, _back(unit, int(n)))
    if (m := _MONTH_DAY.search(sql)) and lo.year == hi.year:
        lo, hi = max(lo, dt.datetime(lo.year, int(m[1]), int(m[2]))), min(hi, dt.datetime(lo.year, int(m[1]), int(m[2]), 23, 59))
    elif (m := _MONTH.search(sql)) and lo.year == hi.year:
        lo, hi = max(lo, dt.datetime(lo.year, int(m[1]), 1)), min(hi, _month_end(lo.year, int(m[1])))
    if (m := _DAY_OF_MONTH.search(sql)) and (lo.year, lo.month) == (hi.year, hi.month):
        day = dt.datetime(lo.year, lo.month, min(int(m[1]), 28))
        lo, hi = max(lo, day), min(hi, day + dt.timedelta(hours=23, minutes=59))
    return (lo, hi) if lo <= hi else None


class _Resolver:
    """Public spellings -> raw items of the merged vocabulary."""

    def __init__(self) -> None:
        V = merged()
        low = str.lower
        self.maps: dict[tuple[str, str], dict[str, tuple[str, Any]]] = {
            ("mimic_iii", "drug"): {low(d[0].strip()): ("drug", d) for d in reversed(V.drugs)},
            ("mimic_iii", "lab"): {low(lab[1]): ("lab", lab) for lab in reversed(V.labs)},
            ("mimic_iii", "dx_short"): {low(d[1]): ("dx", d[0]) for d in reversed(V.diagnoses)},
            ("mimic_iii", "px_short"): {low(p[1]): ("px", p[0]) for p in reversed(V.procedures)},
            ("mimic_iii", "input_item"): {low(i[1]): ("input", i) for i in reversed(V.input_items)},
            ("mimic_iii", "output_item"): {low(o[1]): ("output", o) for o in reversed(V.output_items)},
            ("mimic_iii", "specimen"): {low(s[0]): ("specimen", s) for s in reversed(V.specimens)},
            ("eicu", "drug"): {low(d[7]): ("drug", d) for d in reversed(V.drugs)},
            ("eicu", "lab"): {low(lab[11]): ("lab", lab) for lab in reversed(V.labs)},
            ("eicu", "diagnosis"): {" - ".join(p.split("|")[2:4]): ("dx", c) for c, p in V.dx_paths.items()},
            ("eicu", "treatment"): {" - ".join(p.split("|")[2:4]): ("px", c) for c, p in V.px_paths.items()},
            ("eicu", "culture"): {low(s[2]): ("specimen", s) for s in reversed(V.specimens)},
            ("mimicsql", "drug"): {low(d[0].strip()): ("drug", d) for d in reversed(V.drugs)},
            ("mimicsql", "formulary_drug_cd"): {low(d[2]): ("drug", d) for d in reversed(V.drugs)},
            ("mimicsql", "lab_label"): {low(lab[1]): ("lab", lab) for lab in reversed(V.labs)},
            ("mimicsql", "lab_itemid"): {str(lab[0]): ("lab", lab) for lab in V.labs},
            ("mimicsql", "dx_icd9_code"): {low(d[0]): ("dx", d[0]) for d in V.diagnoses},
            ("mimicsql", "dx_short_title"): {low(d[1]): ("dx", d[0]) for d in reversed(V.diagnoses)},
            ("mimicsql", "dx_long_title"): {low(d[2]): ("dx", d[0]) for d in reversed(V.diagnoses)},
            ("mimicsql", "px_icd9_code"): {p[0].lstrip("0") or "0": ("px", p[0]) for p in V.procedures},
            ("mimicsql", "px_short_title"): {low(p[1]): ("px", p[0]) for p in reversed(V.procedures)},
            ("mimicsql", "px_long_title"): {low(p[2]): ("px", p[0]) for p in reversed(V.procedures)},
        }
        io = {}
        for item in reversed(V.input_items):
            io[low(item[5])] = ("input", item)
        for item in reversed(V.output_items):
            io[low(item[5])] = ("output", item)
        for kind in ("intake", "input", "output"):
            self.maps[("eicu", kind)] = io
        self.vitals = {low(it[1]): it[0] for it in v.VITALS}

    def needs(self, dataset: str, sql: str) -> list[tuple[str, Any]]:
        out = []
        for kind, value in _kinds(dataset, sql):
            hit = self.maps.get((dataset, kind), {}).get(value.lower())
            if hit:
                out.append(hit)
        if dataset == "mimic_iii":
            out += [("vital", self.vitals[name]) for name in _VITAL.findall(sql) if name in self.vitals]
        return out


def _dataset(record: dict[str, Any]) -> str | None:
    db = str(record.get("db_id", "")).lower()
    if db in ("mimic_iii", "eicu"):
        return db
    if db in ("treqs", "mimicsql") or "question_refine" in record or "sql" in record:
        return "mimicsql"
    return None


def plan_from_records(records: Iterable[dict[str, Any]], *, anonymous: bool = False) -> Plan:
    """Plan the patients of question records (see the module docstring).

    Args:
        records: EHRSQL / MedAgentGym / MIMICSQL records (``db_id`` or MIMICSQL keys tell the dataset).
        anonymous: Also plan one unnamed patient per question that names none, carrying its events.

    Returns:
        The plan (patients keyed by the ids / names the SQL names).
    """
    resolver = _Resolver()
    by_key: dict[tuple[str, str], PatientPlan] = {}
    anon: list[PatientPlan] = []
    for rec in records:
        dataset = _dataset(rec)
        sql = gold_sql(rec, dataset) if dataset else None
        if not sql:
            continue
        found = resolver.needs(dataset, sql)
        span = window(sql)
        scope = "current" if _OPEN.search(sql) else "discharged" if _CLOSED.search(sql) else "any"
        at = max((dt.datetime.fromisoformat(t) for t in _EXACT.findall(sql)), default=None)
        careunit = next(iter(_CAREUNIT.findall(sql)), None)
        keys = sorted(patient_keys(sql))
        targets = []
        for kind, value in keys:
            key = ("eicu" if kind == "uniquepid" else kind, value)
            if key not in by_key:
                by_key[key] = PatientPlan(subject_id=int(value) if kind == "subject_id" else None,
                                          uniquepid=value if kind == "uniquepid" else None,
                                          name=value if kind == "name" else None)
            targets.append(by_key[key])
        if not targets and anonymous and (found or span != (START, NOW)):
            anon.append(PatientPlan())
            targets.append(anon[-1])
        for plan in targets:
            plan.current |= scope == "current"
            plan.careunit = plan.careunit or (careunit.upper() if careunit else None)
            if span is None:
                continue
            for order, (kind, item) in enumerate(found):
                plan.needs.append(Need(kind, item, span[0], span[1], scope, order, at))
    return Plan(list(by_key.values()) + anon)


@dataclass(frozen=True)
class PublicIds:
    """Patient ids public question files name, for ORDINARY patients to carry: the ids exist, their histories are
    drawn by the generator like everyone else's (nothing shaped by a question, unlike :class:`Plan`)."""

    subject_ids: tuple[int, ...] = ()
    uniquepids: tuple[str, ...] = ()
    names: tuple[str, ...] = ()


def public_ids_from_files(paths: Sequence[Path | str]) -> PublicIds:
    """The MIMIC subject ids, eICU ``uniquepid``s and MIMICSQL names the files' gold SQL names, first mention first.

    Example:
        >>> public_ids_from_records([{"db_id": "eicu", "query": "... patient.uniquepid = '027-1' ..."}]).uniquepids
        ('027-1',)
    """
    return public_ids_from_records([r for p in paths for r in load_records(p)])


def public_ids_from_records(records: Iterable[dict[str, Any]]) -> PublicIds:
    """:func:`public_ids_from_files` over records."""
    found: dict[str, dict[str, None]] = {"subject_id": {}, "uniquepid": {}, "name": {}}
    for rec in records:
        dataset = _dataset(rec)
        sql = gold_sql(rec, dataset) if dataset else None
        for kind, value in sorted(patient_keys(sql or "")):
            found[kind][value] = None
    return PublicIds(tuple(int(v) for v in found["subject_id"]), tuple(found["uniquepid"]), tuple(found["name"]))


def plan_from_files(paths: Sequence[Path | str], *, anonymous: bool = False) -> Plan:
    """:func:`plan_from_records` over the records of every file (JSON list or JSON lines)."""
    return plan_from_records([r for p in paths for r in load_records(p)], anonymous=anonymous)


# ---------------------------------------------------------------------------------------------------------------
# Drawing planned patients (called by hospital.draw_hospital with its drawer)

_HOUR = dt.timedelta(hours=1)
_DAY = dt.timedelta(days=1)
_ICU_KINDS = frozenset({"input", "output", "vital"})


def _fits(need: Need, admit: dt.datetime, disch: dt.datetime, current: bool) -> bool:
    """Whether an admission can carry the need's event (EHRSQL dates diagnoses at admission, procedures at discharge)."""
    if (need.scope == "current") != current and need.scope != "any":
        return False
    if need.at is not None:
        return admit + _HOUR <= need.at <= min(disch, NOW) - _HOUR
    if need.kind == "dx":
        return need.lo <= admit <= need.hi
    if need.kind == "px":
        return not current and need.lo <= disch <= need.hi
    return max(need.lo, admit + _HOUR) <= min(need.hi, min(disch, NOW) - _HOUR)


def _free(adms: list[tuple], admit: dt.datetime, disch: dt.datetime) -> bool:
    return admit >= START + _DAY and all(disch + _DAY < a or admit > d + _DAY for a, d, _c in adms)


def _place(need: Need, rng, adms: list[tuple]) -> tuple | None:
    """A new admission (admit, disch, current) that can carry ``need``, or None."""
    has_current = any(c for *_x, c in adms)
    for _ in range(8):
        los = dt.timedelta(days=rng.uniform(2.0, 4.0))
        if need.at is not None:
            admit = need.at - dt.timedelta(hours=rng.uniform(3, 20))
        elif need.kind == "px":
            admit = need.lo + (need.hi - need.lo) * rng.random() - los
        else:
            t = need.lo + (need.hi - need.lo) * rng.random()
            admit = t if need.kind == "dx" else t - los * rng.uniform(0.2, 0.8)
        admit = admit.replace(second=0, microsecond=0)
        disch = admit + los
        current = disch >= NOW - _HOUR
        if current:
            if has_current or need.scope == "discharged" or need.kind == "px":
                continue
            disch = NOW + dt.timedelta(days=rng.uniform(1, 3))
        if _free(adms, admit, disch) and _fits(need, admit, disch, current):
            return admit, disch.replace(second=0, microsecond=0), current
    return None


def _schedule(plan: PatientPlan, rng) -> list[tuple]:
    """Admissions (admit, disch, current) of a planned patient, oldest first."""
    adms: list[tuple] = []
    if plan.current:
        admit = (NOW - dt.timedelta(days=rng.uniform(2, 5))).replace(second=0, microsecond=0)
        adms.append((admit, (NOW + dt.timedelta(days=rng.uniform(1, 4))).replace(second=0, microsecond=0), True))
    for need in sorted(plan.needs, key=lambda n: (n.hi - n.lo, n.order)):
        if not any(_fits(need, *a) for a in adms):
            new = _place(need, rng, adms)
            if new:
                adms.append(new)
    for _ in range(30):  # at least two discharged stays, so first / last / second visits exist
        if sum(not c for *_x, c in adms) >= 2:
            break
        admit = START + dt.timedelta(days=rng.uniform(10, 365 * 6 - 45))
        admit = admit.replace(second=0, microsecond=0)
        disch = (admit + dt.timedelta(days=rng.uniform(2, 6))).replace(second=0, microsecond=0)
        if _free(adms, admit, disch):
            adms.append((admit, disch, False))
    return sorted(adms)


def _event_time(need: Need, admit: dt.datetime, disch: dt.datetime) -> dt.datetime | None:
    if need.at is not None:
        return need.at
    lo, hi = max(need.lo, admit + _HOUR), min(need.hi, min(disch, NOW) - _HOUR)
    if lo > hi:
        return None
    # events one question names follow each other a day apart, in the order the SQL names them
    base = admit + 2 * _HOUR + need.order * dt.timedelta(hours=26)
    return min(max(base, lo), hi).replace(second=0, microsecond=0)


def _plant(drawer, subject_id: int, hadm: int, icu: int, need: Need, t: dt.datetime) -> None:
    rows = drawer.rows
    V = merged()
    if need.kind == "dx":
        rows["DIAGNOSES_ICD"].append((len(rows["DIAGNOSES_ICD"]), subject_id, hadm, 99, need.item))
    elif need.kind == "px":
        rows["PROCEDURES_ICD"].append((len(rows["PROCEDURES_ICD"]), subject_id, hadm, 99, need.item))
    elif need.kind == "drug":
        name, dtype, form, dose, unit, route = need.item[:6]
        start = dt.datetime.combine(t.date(), dt.time())
        if start < need.lo:
            start += _DAY
        dose = dose if dose.isdigit() else "1"  # EHRSQL keeps integer doses only
        rows["PRESCRIPTIONS"].append((len(rows["PRESCRIPTIONS"]), subject_id, hadm, None, start, start + 2 * _DAY,
                                      dtype, name, name, name, form, None, dose, unit, route))
    elif need.kind == "lab":
        itemid, _label, _f, _c, _l, unit, mean, sd, low, high, dec = need.item[:11]
        value = round(min(high, max(low, drawer.rng.gauss(mean, sd))), dec)
        rows["LABEVENTS"].append((len(rows["LABEVENTS"]), subject_id, hadm, itemid, t, str(value), value,
                                  unit or "ratio", None))
    elif need.kind in ("input", "output"):
        table = "INPUTEVENTS_CV" if need.kind == "input" else "OUTPUTEVENTS"
        amount = round(max(1.0, drawer.rng.gauss(need.item[2], need.item[3])), 0)
        rows[table].append((len(rows[table]), subject_id, hadm, icu, t, need.item[0], amount, "ml"))
    elif need.kind == "specimen":
        org = drawer.rng.choice([o[0] for o in v.ORGANISMS if o[0]])
        spec_id = 70000 + [s[0] for s in V.specimens].index(need.item[0])
        org_id = 80000 + [o[0] for o in v.ORGANISMS].index(org)
        rows["MICROBIOLOGYEVENTS"].append((len(rows["MICROBIOLOGYEVENTS"]), subject_id, hadm,
                                           dt.datetime.combine(t.date(), dt.time()), t, spec_id, need.item[0], org_id, org))
    elif need.kind == "vital":
        spec = next(it for it in v.VITALS if it[0] == need.item)
        value = round(min(spec[6], max(spec[5], drawer.rng.gauss(spec[3], spec[4]))), spec[7])
        rows["CHARTEVENTS"].append((len(rows["CHARTEVENTS"]), subject_id, hadm, icu, need.item, t, str(value),
                                    value, spec[2]))


def _draw_patient(drawer, subject_id: int, plan: PatientPlan) -> None:
    rng = drawer.rng
    adms = _schedule(plan, rng)
    gender = "M" if rng.random() < 0.56 else "F"
    first = adms[0][0]
    dob = (first - dt.timedelta(days=int(rng.uniform(25, 85) * 365.25))).replace(hour=0, minute=0)
    for admit, disch, current in adms:
        drawer.admission(subject_id, admit, dies_here=False, disch=disch, icu_unit=plan.careunit or "")
        hadm = drawer.rows["ADMISSIONS"][-1][2]
        icu = drawer.rows["ICUSTAYS"][-1][3]
        for need in plan.needs:
            if _fits(need, admit, disch, current):
                t = _event_time(need, admit, disch)
                if t is not None:
                    _plant(drawer, subject_id, hadm, icu, need, t)
    drawer.rows["PATIENTS"].append((len(drawer.rows["PATIENTS"]), subject_id, gender, dob, None, None, 0))
    for _ in range(rng.choice((1, 1, 2))):  # eICU questions ask named patients about their allergies
        name, drug, _w = rng.choices(v.ALLERGIES, weights=[a[2] for a in v.ALLERGIES])[0]
        drawer.rows["ALLERGIES"].append((subject_id, name, drug))


def draw_planned(drawer, plan: Plan, taken: set[int]) -> tuple[dict[int, str], dict[int, str], frozenset[int]]:
    """Draw every planned patient with ``drawer`` (``hospital._Drawer``).

    Args:
        drawer: The hospital's drawer, after its random patients.
        plan: The plan.
        taken: Subject ids already used (planned patients without a subject id get fresh ones above 100000).

    Returns:
        (eICU uniquepid per subject id, MIMICSQL name per subject id, the planned subject ids).
    """
    used = set(taken) | plan.subject_ids()
    fresh = (k for k in range(100000, 10**7) if k not in used)
    pids, names, pinned = {}, {}, set()
    for patient in plan.patients:
        subject_id = patient.subject_id if patient.subject_id is not None else next(fresh)
        _draw_patient(drawer, subject_id, patient)
        pinned.add(subject_id)
        if patient.uniquepid:
            pids[subject_id] = patient.uniquepid
        if patient.name:
            names[subject_id] = patient.name
    return pids, names, frozenset(pinned)
