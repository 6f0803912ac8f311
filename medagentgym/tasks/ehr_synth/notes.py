"""Clinical notes rendered from an EHRSQL MIMIC-III database, with injected, recorded inconsistencies (EHRCon).

For one admission, :func:`admission_mentions` picks entities from its rows (labs, vitals, prescriptions,
diagnoses, procedures) and states each as a *claim* (entity, value, unit, time, dose, route), naming the entity
by its database label or by the clinical shorthand a note would use (``Hct``, ``BUN``, ``HR``, ``SBP``:
:data:`SHORTHAND`). Some claims are deliberately falsified, and the kind of falsification is recorded:

* ``value``: a lab/vital number that no row of that entity at that time has;
* ``unit``: another unit than the row's;
* ``time``: a chart time (or prescription start date) moved by hours (days);
* ``dose``: a prescription dose multiplied or increased;
* ``absent``: an entity the admission has no row of at all (a lab, vital, drug, diagnosis or procedure).

:func:`check_sql` turns a claim into a reference check (SQL returning ``'true'`` when the claim has no matching
row, i.e. the note is inconsistent). :func:`render_notes` writes the claims into NOTEEVENTS-shaped rows
(discharge summary, nursing and physician notes) whose text a reader must parse to recover each claim.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
from dataclasses import dataclass, field
from typing import Any

#: Entity tables and the inconsistency kinds each can carry ("none" = a faithful mention).
KINDS: dict[str, tuple[str, ...]] = {
    "lab": ("none", "value", "unit", "time", "absent"),
    "vital": ("none", "value", "unit", "time", "absent"),
    "rx": ("none", "dose", "unit", "time", "absent"),
    "dx": ("none", "absent"),
    "px": ("none", "absent"),
}
#: Mentions per admission and table (at most).
PER_TABLE = {"lab": 2, "vital": 2, "rx": 2, "dx": 1, "px": 1}
#: Which note each table's mentions go into.
NOTE_OF = {"lab": "physician", "vital": "nursing", "rx": "discharge", "dx": "discharge", "px": "discharge"}
NOTE_COLUMNS = ["ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "STORETIME", "CATEGORY", "DESCRIPTION",
                "CGID", "ISERROR", "TEXT", "ADMITTIME"]
_FMT = "%Y-%m-%d %H:%M:%S"


#: Clinical shorthand real notes use for a database label (MIMIC-III ``d_labitems`` / ``d_items`` / routes, as the
#: EHRSQL vocabularies spell them). A note names an entity by its label or by one of these, and EHRCon's question
#: names it the way the note does, so matching a note's "Hct" to ``hematocrit`` is part of the task.
SHORTHAND: dict[str, tuple[str, ...]] = {
    "glucose": ("BG", "gluc"), "sodium": ("Na",), "potassium": ("K",), "chloride": ("Cl",),
    "bicarbonate": ("HCO3", "bicarb"), "platelet count": ("plt", "PLT"), "white blood cells": ("WBC",),
    "hematocrit": ("Hct", "HCT"), "hemoglobin": ("Hgb", "Hb"), "urea nitrogen": ("BUN",), "creatinine": ("Cr", "Creat"),
    "magnesium": ("Mg",), "calcium, total": ("Ca",), "phosphate": ("Phos",), "anion gap": ("AG",), "ptt": ("PTT",),
    "pt": ("PT",), "inr(pt)": ("INR",), "po2": ("pO2",), "pco2": ("pCO2",), "ph": ("pH",), "lactate": ("lactate",),
    "alanine aminotransferase (alt)": ("ALT",), "asparate aminotransferase (ast)": ("AST",),
    "bilirubin, total": ("T bili", "tbili"), "alkaline phosphatase": ("alk phos",), "troponin t": ("TropT", "trop"),
    "creatine kinase (ck)": ("CK",), "red blood cells": ("RBC",), "calculated total co2": ("TCO2",),
    "base excess": ("BE",), "oxygen saturation": ("O2 sat",), "red cell distribution width": ("RDW",),
    "heart rate": ("HR",), "sao2": ("SaO2", "sats"), "respiratory rate": ("RR",), "arterial bp [systolic]": ("SBP",),
    "arterial bp [diastolic]": ("DBP",), "arterial bp mean": ("MAP",), "temperature c (calc)": ("temp",),
    "admit wt": ("wt",), "admit ht": ("ht",),
}
#: Share of mentions written in shorthand when the label has one.
SHORTHAND_SHARE = 0.6


@dataclass
class Mention:
    """One entity stated in a note: what is claimed, and the recorded injection (``kind``).

    ``entity`` is the database label the reference check matches; ``surface`` is how the note writes it (the
    label, or clinical shorthand such as ``Hct``), which is what EHRCon's question names.
    """

    table: str
    entity: str
    kind: str
    claim: dict[str, Any] = field(default_factory=dict)
    surface: str = ""

    def __post_init__(self) -> None:
        self.surface = self.surface or self.entity

    @property
    def inconsistent(self) -> bool:
        """True when an inconsistency was injected."""
        return self.kind != "none"


def _q(text: str) -> str:
    return str(text).replace("'", "''")


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def check_sql(hadm_id: int, table: str, claim: dict[str, Any]) -> str:
    """SQL that returns ``'true'`` when no row of admission ``hadm_id`` matches ``claim`` (inconsistent)."""
    if table in ("lab", "vital"):
        events, items = ("labevents", "d_labitems") if table == "lab" else ("chartevents", "d_items")
        link = "" if table == "lab" else " and d_items.linksto = 'chartevents'"
        cond = (f"{events}.itemid in ( select {items}.itemid from {items} where {items}.label = '{_q(claim['entity'])}'"
                f"{link} ) and {events}.charttime = '{claim['time']}:00' and abs( {events}.valuenum - {claim['value']} )"
                f" < 1e-6 and {events}.valueuom = '{_q(claim['unit'])}'")
    elif table == "rx":
        events = "prescriptions"
        cond = (f"prescriptions.drug = '{_q(claim['entity'])}' and cast( prescriptions.dose_val_rx as real ) = "
                f"{claim['dose']} and prescriptions.dose_unit_rx = '{_q(claim['unit'])}' and prescriptions.route = "
                f"'{_q(claim['route'])}' and date( prescriptions.startdate ) = '{claim['date']}'")
    elif table in ("dx", "px"):
        events, d = ("diagnoses_icd", "d_icd_diagnoses") if table == "dx" else ("procedures_icd", "d_icd_procedures")
        cond = f"{events}.icd9_code in ( select {d}.icd9_code from {d} where {d}.short_title = '{_q(claim['entity'])}' )"
    else:
        raise ValueError(f"unknown entity table {table!r}; use one of {sorted(KINDS)}")
    return (f"select case when count( * ) = 0 then 'true' else 'false' end from {events} "
            f"where {events}.hadm_id = {int(hadm_id)} and {cond}")


def _rows(con: sqlite3.Connection, sql: str, *args: Any) -> list[tuple]:
    return con.execute(sql, args).fetchall()


class Vocab:
    """Database-wide candidates for absent entities and swapped units (read once per build)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.labs = _rows(con, "select d.label, min(l.valuenum), max(l.valuenum), min(l.valueuom) from labevents l "
                               "join d_labitems d on l.itemid = d.itemid group by d.label order by d.label")
        self.vitals = _rows(con, "select d.label, min(c.valuenum), max(c.valuenum), min(c.valueuom) from chartevents c "
                                 "join d_items d on c.itemid = d.itemid group by d.label order by d.label")
        self.drugs = _rows(con, "select drug, min(cast(dose_val_rx as integer)), min(dose_unit_rx), min(route) "
                                "from prescriptions group by drug order by drug")
        self.dx = [r[0] for r in _rows(con, "select distinct short_title from d_icd_diagnoses order by 1")]
        self.px = [r[0] for r in _rows(con, "select distinct short_title from d_icd_procedures order by 1")]
        self.units = {
            "lab": sorted({r[0] for r in _rows(con, "select distinct valueuom from labevents")}),
            "vital": sorted({r[0] for r in _rows(con, "select distinct valueuom from chartevents")}
                            | {"mmhg", "bpm", "kg", "%", "cm", "deg. c", "breaths/min"}),
            "rx": sorted({r[0] for r in _rows(con, "select distinct dose_unit_rx from prescriptions")}
                         | {"mg", "g", "mcg", "units", "ml", "meq"}),
        }


def _event_rows(con: sqlite3.Connection, table: str, hadm: int) -> list[tuple]:
    if table == "lab":
        return _rows(con, "select d.label, l.charttime, l.valuenum, l.valueuom from labevents l join d_labitems d "
                          "on l.itemid = d.itemid where l.hadm_id = ? order by l.row_id", hadm)
    if table == "vital":
        return _rows(con, "select d.label, c.charttime, c.valuenum, c.valueuom from chartevents c join d_items d "
                          "on c.itemid = d.itemid where c.hadm_id = ? order by c.row_id", hadm)
    if table == "rx":
        return _rows(con, "select drug, startdate, dose_val_rx, dose_unit_rx, route from prescriptions "
                          "where hadm_id = ? order by row_id", hadm)
    events, d = ("diagnoses_icd", "d_icd_diagnoses") if table == "dx" else ("procedures_icd", "d_icd_procedures")
    return _rows(con, f"select distinct d.short_title from {events} e join {d} d on e.icd9_code = d.icd9_code "
                      f"where e.hadm_id = ? order by 1", hadm)


def _falsify(rng: random.Random, table: str, kind: str, claim: dict[str, Any], vocab: Vocab) -> dict[str, Any]:
    """A copy of a faithful claim with one field falsified."""
    claim = dict(claim)
    if kind == "value":
        factor = rng.choice((0.5, 0.7, 1.3, 1.6, 2.0))
        claim["value"] = _num(float(claim["value"]) * factor + rng.choice((1, 2, 3)))
    elif kind == "unit":
        claim["unit"] = rng.choice([u for u in vocab.units[table] if u != claim["unit"]])
    elif kind == "time" and table == "rx":
        day = dt.date.fromisoformat(claim["date"]) + dt.timedelta(days=rng.choice((-3, -2, -1, 1, 2, 3, 4)))
        claim["date"] = day.isoformat()
    elif kind == "time":
        when = dt.datetime.strptime(claim["time"], "%Y-%m-%d %H:%M")
        claim["time"] = (when + dt.timedelta(hours=rng.choice((-30, -12, -6, -3, 3, 5, 8, 20)))).strftime("%Y-%m-%d %H:%M")
    elif kind == "dose":
        dose = int(claim["dose"])
        claim["dose"] = str(rng.choice((dose * 2, dose * 3, dose + rng.randint(1, 5) * max(1, dose // 2))))
    return claim


def _absent(rng: random.Random, table: str, present: set[str], vocab: Vocab, when: str) -> dict[str, Any] | None:
    """A claim about an entity the admission has no row of (or None when every candidate is present)."""
    if table in ("dx", "px"):
        choices = [t for t in (vocab.dx if table == "dx" else vocab.px) if t not in present]
        return {"entity": rng.choice(choices)} if choices else None
    if table == "rx":
        choices = [r for r in vocab.drugs if r[0] not in present and r[1]]
        if not choices:
            return None
        drug, dose, unit, route = rng.choice(choices)
        return {"entity": drug, "dose": str(dose), "unit": unit, "route": route, "date": when[:10]}
    choices = [r for r in (vocab.labs if table == "lab" else vocab.vitals) if r[0] not in present]
    if not choices:
        return None
    label, low, high, unit = rng.choice(choices)
    return {"entity": label, "value": _num(rng.uniform(low, high)), "unit": unit, "time": when[:16]}


#: Chance that a mention is falsified when drawn (the build then balances each table to the public share).
FALSIFY = 0.4


def _surface(entity: str, rng: random.Random, taken: set[str]) -> str:
    """How a note writes ``entity``: its shorthand about :data:`SHORTHAND_SHARE` of the time, never a form another
    entity of the admission already uses (compared case-insensitively)."""
    forms = [f for f in SHORTHAND.get(entity, ()) if f.lower() not in taken]
    if forms and rng.random() < SHORTHAND_SHARE:
        return rng.choice(forms)
    return entity


def admission_mentions(con: sqlite3.Connection, hadm: int, admit: str, rng: random.Random,
                       vocab: Vocab) -> list[Mention]:
    """Entities of one admission stated as claims, some falsified (kind recorded), each named by its label or
    its clinical shorthand (unique within the admission)."""
    mentions: list[Mention] = []
    used: set[str] = set()
    forms: set[str] = set()
    for table, n in PER_TABLE.items():
        rows = _event_rows(con, table, hadm)
        present = {r[0] for r in rows}
        names = sorted(present - used)
        rng.shuffle(names)
        for name in names[:n]:
            kind = "none" if rng.random() >= FALSIFY else rng.choice(KINDS[table][1:])
            if kind == "absent":
                claim = _absent(rng, table, present | used, vocab, admit)
                if claim is None:
                    continue
            else:
                candidates = [r for r in rows if r[0] == name]
                row = rng.choice(candidates)
                if table in ("lab", "vital"):
                    claim = {"entity": name, "time": row[1][:16], "value": _num(row[2]), "unit": row[3]}
                elif table == "rx":
                    claim = {"entity": name, "date": row[1][:10], "dose": row[2], "unit": row[3], "route": row[4]}
                else:
                    claim = {"entity": name}
                if kind != "none":
                    claim = _falsify(rng, table, kind, claim, vocab)
            if claim["entity"] in used or claim["entity"].lower() in forms:
                continue
            used.add(claim["entity"])
            surface = _surface(claim["entity"], rng, forms | {u.lower() for u in used})
            forms.add(surface.lower())
            mentions.append(Mention(table=table, entity=claim["entity"], kind=kind, claim=claim, surface=surface))
    return mentions


def _sentence(m: Mention, rng: random.Random) -> str:
    c, e = m.claim, m.surface
    if m.table == "lab":
        return rng.choice(("{e} was {v} {u} at {t}.", "labs at {t} showed {e} {v} {u}.", "{e} resulted {v} {u} ({t}).",
                           "{t} labs: {e} {v} {u}.", "{e} {v}{u} @ {t}.")).format(e=e, v=c["value"], u=c["unit"],
                                                                                 t=c["time"])
    if m.table == "vital":
        return rng.choice(("{e} {v} {u} at {t}.", "at {t} the {e} was {v} {u}.", "{e} charted as {v} {u} at {t}.",
                           "VS @ {t}: {e} {v} {u}.", "{e} {v}{u} @ {t}, resting comfortably.")).format(
            e=e, v=c["value"], u=c["unit"], t=c["time"])
    if m.table == "rx":
        return rng.choice(("{e} {d} {u} {r} was started on {t}.", "started {e} {d} {u} ({r}) on {t}.",
                           "{t}: started {e} {d}{u} {r}.", "was started on {e} {d} {u} {r} {t}.")).format(
            e=e, d=c["dose"], u=c["unit"], r=c["route"], t=c["date"])
    if m.table == "dx":
        return rng.choice(("diagnosis this admission: {e}.", "patient was diagnosed with {e}.", "dx: {e}.",
                           "found to have {e} this adm.")).format(e=e)
    return rng.choice(("procedure performed: {e}.", "underwent {e} during this stay.", "s/p {e} this adm.")).format(e=e)


#: Filler lines of a note that claim nothing checkable (shorthand as nurses and physicians chart it).
_FILLER = {
    "discharge": ("tolerated diet, ambulating w/ assist.", "d/w patient and family, questions answered.",
                  "f/u w/ pcp in 1-2 wks.", "afebrile overnight, no acute events.", "pain well controlled on current regimen."),
    "nursing": ("alert and oriented x3, calm and cooperative.", "skin intact, turned q2h.", "voiding qs, no c/o pain.",
                "resp: lungs clear bilat, no distress.", "family at bedside, updated on poc.", "will cont to monitor."),
    "physician": ("a/p: cont current mgmt, trend labs.", "no acute overnight events.", "exam unchanged from yesterday.",
                  "d/w attending, plan as above.", "consider d/c planning in am."),
}


_OPENINGS = {
    "discharge": ("discharge summary", "admission date: {admit}. brief hospital course follows.",
                  "discharge instructions: follow up with primary care in one week."),
    "nursing": ("nursing progress note", "alert, resting in bed. vitals reviewed.", "will continue to monitor."),
    "physician": ("physician progress note", "assessment and plan reviewed with team. pertinent results:",
                  "continue current management."),
}


def render_notes(hadm: int, subject: int, admit: str, disch: str | None, mentions: list[Mention],
                 rng: random.Random, first_row_id: int) -> list[list[Any]]:
    """NOTEEVENTS rows (columns :data:`NOTE_COLUMNS`) for one admission: one note per note type with mentions."""
    out = []
    for k, note in enumerate(("discharge", "nursing", "physician")):
        mine = [m for m in mentions if NOTE_OF[m.table] == note]
        if not mine:
            continue
        description, opening, closing = _OPENINGS[note]
        body = [opening.format(admit=admit[:10])] + [_sentence(m, rng) for m in mine]
        filler = list(_FILLER[note])
        rng.shuffle(filler)
        for line in filler[: rng.randint(1, 3)]:
            body.insert(rng.randint(1, len(body)), line)
        body.append(closing)
        when = disch or admit
        out.append([first_row_id + len(out), subject, hadm, when[:10], when if note != "discharge" else "", when,
                    note if note != "discharge" else "discharge summary", description, 14000 + k, "",
                    "\n".join(body), admit])
    return out
