"""One seeded synthetic hospital, drawn in the shape of the raw MIMIC-III v1.4 CSV files.

:func:`draw_hospital` returns a :class:`RawHospital`: one pandas frame per MIMIC-III table, keyed by the real
file stem (``PATIENTS``, ``ADMISSIONS``, ...), with the real upper-case column names (a subset of each file's
columns: the ones the EHRSQL, MIMICSQL and eICU builders read), MIMIC's raw value spelling and casing, and
times in MIMIC's own shifted calendar (years 2100-2200; patients older than 89 have a date of birth 300 years
back). Everything is synthetic: distributions are plausible shapes, not statistics of real patients.

Realistic noise is part of the draw, because the builders' cleaning rules must have something to do:
lab rows without a unit or a numeric value, labs outside any admission, prescriptions with non-integer or
range doses, missing end dates, a second dose unit for some drugs, case variants of drug names, duplicate
chart times, input rows in non-ml units, cultures without a chart time, stays longer than four weeks.

The same frames feed every builder (``mimic_iii_db``, ``treqs_db``, ``eicu_view``), and the importers read
real CSVs into exactly this shape, so synthetic and real data share one code path.

Items come from ``vocab.merged()``: the hand-made core plus every value the public EHRSQL / MIMICSQL questions
compare against (``medagentgym/tasks/data/ehr_vocab``), so those questions find their drugs, labs, items, codes and categories
(3 % of patients are newborns; some normal labs carry MIMIC's ``delta`` flag). ``draw_hospital(...,
public_ids=...)`` gives ordinary patients the ids public question files name; ``draw_hospital(..., plan=...)``
adds patients shaped by those questions (``plant``: a schema/coverage smoke option, never for reported numbers).
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import random
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from medagentgym.tasks.ehr_synth import vocab_items as v
from medagentgym.tasks.ehr_synth.plant import Plan, PublicIds, draw_planned, plan_from_files, public_ids_from_files
from medagentgym.tasks.ehr_synth.vocab import merged

#: Patients per size.
SIZES: dict[str, int] = {"tiny": 30, "default": 1000}

_MIN = dt.timedelta(minutes=1)
V = merged()
_LAB_RATE = np.array([lab[-1] for lab in V.labs])
#: Share of patients who are newborns (admission type NEWBORN, age 0: MIMICSQL keeps them, EHRSQL's age filter drops them).
NEWBORN_SHARE = 0.03
#: Share of lab rows that are not abnormal but flagged ``delta`` (a large change from the previous value).
DELTA_SHARE = 0.04


@dataclass
class RawHospital:
    """Raw MIMIC-III-shaped tables (``tables[stem]``) plus patient allergies (not a MIMIC table; eICU view only).

    Patients planned from public question files (``plant``) are ``pinned``: drawn in EHRSQL's calendar already, so
    the builders neither shift their times nor shuffle their values; ``uniquepids`` / ``names`` give the eICU id
    and MIMICSQL name their questions use.
    """

    tables: dict[str, pd.DataFrame]
    allergies: pd.DataFrame
    pinned: frozenset[int] = frozenset()
    uniquepids: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)


DIAGNOSES = list(V.diagnoses)
PROCEDURES = list(V.procedures)
_DRUG_CUM = list(itertools.accumulate(d[6] for d in V.drugs))
_INPUT_CUM = list(itertools.accumulate(i[4] for i in V.input_items))
_OUTPUT_CUM = list(itertools.accumulate(o[4] for o in V.output_items))


def _wchoice(rng: random.Random, pairs: tuple[tuple, ...]):
    return rng.choices([p[0] for p in pairs], weights=[p[-1] for p in pairs])[0]


def _minute(t: dt.datetime) -> dt.datetime:
    return t.replace(second=0, microsecond=0)


class _Drawer:
    """Accumulates rows table by table while walking patients in order."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.rows: dict[str, list[tuple]] = {k: [] for k in (
            "PATIENTS", "ADMISSIONS", "ICUSTAYS", "TRANSFERS", "DIAGNOSES_ICD", "PROCEDURES_ICD", "LABEVENTS",
            "PRESCRIPTIONS", "CHARTEVENTS", "INPUTEVENTS_CV", "OUTPUTEVENTS", "MICROBIOLOGYEVENTS", "ALLERGIES")}
        self.next_hadm = 100000 + self.rng.randrange(1000)
        self.next_icu = 200000 + self.rng.randrange(1000)
        self.dx_codes = [d[0] for d in DIAGNOSES]
        self.dx_w = [d[3] for d in DIAGNOSES]
        self.px_codes = [p[0] for p in PROCEDURES]
        self.px_w = [p[3] for p in PROCEDURES]

    # -- patients and admissions -----------------------------------------------------------------------------
    def patient(self, subject_id: int) -> None:
        rng = self.rng
        gender = "M" if rng.random() < 0.56 else "F"
        first_admit = dt.datetime(rng.randint(2100, 2195), rng.randint(1, 12), rng.randint(1, 28),
                                  rng.randint(0, 23), rng.randint(0, 59))
        newborn = rng.random() < NEWBORN_SHARE
        if newborn:
            age_days = 0
        elif rng.random() < 0.05:
            age_days = int((300 + rng.uniform(0.1, 0.9)) * 365.25)  # MIMIC's shifted > 89 year olds
        else:
            age_days = int(min(88.9, max(18.2, rng.gauss(64, 15))) * 365.25)
        dob = (first_admit - dt.timedelta(days=age_days)).replace(hour=0, minute=0)
        n_adm = 1 if newborn else rng.choices([1, 2, 3, 4, 5], weights=[66, 19, 8, 4, 3])[0]
        admit = first_admit
        dies = rng.random() < (0.01 if newborn else 0.22)
        last_disch = None
        for k in range(n_adm):
            last = k == n_adm - 1
            last_disch = self.admission(subject_id, admit, dies_here=last and dies and rng.random() < 0.5,
                                        newborn=newborn)
            admit = _minute(last_disch + dt.timedelta(days=rng.uniform(20, 700), minutes=rng.randint(0, 1440)))
        dod = None
        if dies:
            died_in_hosp = self.rows["ADMISSIONS"][-1][5] is not None
            dod = (last_disch if died_in_hosp else last_disch + dt.timedelta(days=rng.uniform(5, 900)))
            dod = dod.replace(hour=0, minute=0)
        self.rows["PATIENTS"].append((len(self.rows["PATIENTS"]), subject_id, gender, dob, dod, dod,
                                      int(dod is not None)))
        for _ in range(rng.choices([0, 1, 2, 3], weights=[55, 28, 12, 5])[0]):
            name, drug, _w = rng.choices(v.ALLERGIES, weights=[a[2] for a in v.ALLERGIES])[0]
            self.rows["ALLERGIES"].append((subject_id, name, drug))

    def admission(self, subject_id: int, admit: dt.datetime, *, dies_here: bool, newborn: bool = False,
                  disch: dt.datetime | None = None, icu_unit: str | None = None) -> dt.datetime:
        """Draw one admission and its events; ``disch`` / ``icu_unit`` (one ICU stay over the whole admission,
        ``""`` = any unit) are set for planned patients."""
        rng = self.rng
        hadm = self.next_hadm
        self.next_hadm += rng.randint(1, 40)
        if disch is None:
            los_days = min(45.0, max(0.6, rng.lognormvariate(1.75, 0.65)))
            disch = _minute(admit + dt.timedelta(days=los_days))
        adm_type = "NEWBORN" if newborn else _wchoice(rng, v.ADMISSION_TYPES)
        location = ("PHYS REFERRAL/NORMAL DELI" if adm_type in ("ELECTIVE", "NEWBORN")
                    else _wchoice(rng, V.admission_locations))
        disch_loc = "DEAD/EXPIRED" if dies_here else _wchoice(rng, V.discharge_locations)
        self.rows["ADMISSIONS"].append((
            len(self.rows["ADMISSIONS"]), subject_id, hadm, admit, disch, disch if dies_here else None, adm_type,
            location, disch_loc, _wchoice(rng, V.insurance), _wchoice(rng, V.languages), _wchoice(rng, V.religions),
            _wchoice(rng, V.marital), _wchoice(rng, V.ethnicities), rng.choice(V.admit_diagnoses), int(dies_here)))
        stays = [] if newborn else self.icu_stays(subject_id, hadm, admit, disch, whole=icu_unit)
        self.transfers(subject_id, hadm, admit, disch, stays)
        self.codes(subject_id, hadm, bool(stays))
        self.prescriptions(subject_id, hadm, admit, disch)
        self.labs(subject_id, hadm, admit, disch)
        self.micro(subject_id, hadm, admit, disch)
        for stay in stays:
            self.chart(subject_id, hadm, stay)
            self.io(subject_id, hadm, stay)
        return disch

    def icu_stays(self, subject_id: int, hadm: int, admit: dt.datetime, disch: dt.datetime,
                  whole: str | None = None) -> list[tuple]:
        rng = self.rng
        if whole is None and rng.random() > 0.8:
            return []
        stays = []
        n = 2 if whole is None and rng.random() < 0.1 and (disch - admit).days >= 6 else 1
        span = (disch - admit) / n
        for k in range(n):
            lo = admit + span * k
            intime = _minute(lo + dt.timedelta(minutes=rng.randint(5, max(10, int(span.total_seconds() / 240)))))
            outtime = _minute(min(disch - 10 * _MIN, intime + dt.timedelta(hours=rng.uniform(12, 24 * 6))))
            outtime = max(intime + dt.timedelta(hours=4), outtime)
            unit = rng.choices(list(v.CAREUNIT_WEIGHTS), weights=list(v.CAREUNIT_WEIGHTS.values()))[0]
            if whole is not None:  # a planned patient: the stay spans the admission, in the unit asked about
                intime, outtime = _minute(admit + 20 * _MIN), _minute(disch - 20 * _MIN)
                unit = whole or unit
            last_unit = unit if rng.random() < 0.9 else rng.choice(list(v.CAREUNITS))
            ward, last_ward = rng.choice(v.CAREUNITS[unit]), rng.choice(v.CAREUNITS[last_unit])
            icu = self.next_icu
            self.next_icu += rng.randint(1, 30)
            los = round((outtime - intime).total_seconds() / 86400, 4)
            self.rows["ICUSTAYS"].append((len(self.rows["ICUSTAYS"]), subject_id, hadm, icu, "carevue", unit,
                                          last_unit, ward, last_ward, intime, outtime, los))
            stays.append((icu, unit, last_unit, ward, last_ward, intime, outtime))
        return stays

    def transfers(self, subject_id: int, hadm: int, admit: dt.datetime, disch: dt.datetime, stays: list[tuple]) -> None:
        rows = self.rows["TRANSFERS"]
        cursor, prev_unit, prev_ward = admit, None, None
        segments: list[tuple] = []
        for icu, unit, last_unit, ward, last_ward, intime, outtime in stays:
            if intime > cursor:
                segments.append((None, None, self.rng.choice(v.WARDS_GENERAL), cursor, intime))
            if last_unit != unit or last_ward != ward:
                mid = intime + (outtime - intime) / 2
                segments.append((icu, unit, ward, intime, _minute(mid)))
                segments.append((icu, last_unit, last_ward, _minute(mid), outtime))
            else:
                segments.append((icu, unit, ward, intime, outtime))
            cursor = outtime
        if cursor < disch:
            segments.append((None, None, self.rng.choice(v.WARDS_GENERAL), cursor, disch))
        for k, (icu, unit, ward, t_in, t_out) in enumerate(segments):
            event = "admit" if k == 0 else "transfer"
            los = round((t_out - t_in).total_seconds() / 3600, 2)
            rows.append((len(rows), subject_id, hadm, icu, event, prev_unit, unit, prev_ward, ward, t_in, t_out, los))
            prev_unit, prev_ward = unit, ward
        rows.append((len(rows), subject_id, hadm, None, "discharge", prev_unit, None, prev_ward, None, disch, None, None))

    def codes(self, subject_id: int, hadm: int, icu: bool) -> None:
        rng = self.rng
        n_dx = rng.randint(3, 16)
        chosen: list[str] = []
        while len(chosen) < n_dx:
            code = rng.choices(self.dx_codes, weights=self.dx_w)[0]
            if code not in chosen:
                chosen.append(code)
        for seq, code in enumerate(chosen, 1):
            self.rows["DIAGNOSES_ICD"].append((len(self.rows["DIAGNOSES_ICD"]), subject_id, hadm, seq, code))
        n_px = rng.randint(1, 7) if icu else rng.randint(0, 2)
        picked: list[str] = []
        while len(picked) < n_px:
            code = rng.choices(self.px_codes, weights=self.px_w)[0]
            if code not in picked:
                picked.append(code)
        for seq, code in enumerate(picked, 1):
            self.rows["PROCEDURES_ICD"].append((len(self.rows["PROCEDURES_ICD"]), subject_id, hadm, seq, code))

    # -- orders and measurements -----------------------------------------------------------------------------
    def prescriptions(self, subject_id: int, hadm: int, admit: dt.datetime, disch: dt.datetime) -> None:
        rng = self.rng
        rows = self.rows["PRESCRIPTIONS"]
        days = max(1, (disch.date() - admit.date()).days)
        for _ in range(rng.randint(4, 10 + 2 * min(days, 10))):
            name, dtype, form, dose, unit, route = rng.choices(V.drugs, cum_weights=_DRUG_CUM)[0][:6]
            start = dt.datetime.combine(admit.date() + dt.timedelta(days=rng.randint(0, days)), dt.time())
            end = start + dt.timedelta(days=rng.randint(1, 6))
            if rng.random() < 0.12 and name in v.DRUG_CASE_VARIANTS:
                name = rng.choice(v.DRUG_CASE_VARIANTS[name])
            if rng.random() < 0.05 and dose.isdigit() and int(dose) > 1:
                dose = f"{int(dose) // 2}-{dose}"  # range doses are real and dropped by EHRSQL
            if rng.random() < 0.04:
                unit = "mL" if unit != "mL" else "mg"  # a minority unit per drug
            if dose.isdigit() and int(dose) >= 1000 and rng.random() < 0.3:
                dose = f"{int(dose):,}"  # thousands separators, which EHRSQL strips
            end_out = None if rng.random() < 0.02 else end
            rows.append((len(rows), subject_id, hadm, None, start, end_out, dtype, name, name, name, form, None,
                         dose, unit, route))

    def labs(self, subject_id: int, hadm: int, admit: dt.datetime, disch: dt.datetime) -> None:
        rng, gen = self.rng, self.np
        rows = self.rows["LABEVENTS"]
        days = max(1, int((disch - admit).total_seconds() // 86400) + 1)
        shift = gen.normal(0, 0.5, size=len(V.labs))
        for day in range(days):
            base = admit + dt.timedelta(days=day)
            for draw_no in range(2 if rng.random() < 0.3 else 1):
                t = _minute(base + dt.timedelta(hours=rng.uniform(0.2, 20)))
                if t >= disch:
                    continue
                keep = gen.random(len(V.labs)) < _LAB_RATE * (0.4 if draw_no == 0 else 0.15)
                z = shift + gen.normal(0, 0.8, size=len(V.labs))
                for k in np.flatnonzero(keep):
                    itemid, label, _f, _c, _l, unit, mean, sd, low, high, dec, _e, _p = V.labs[k]
                    value = round(float(min(high, max(low, mean + sd * z[k]))), dec)
                    flag = "abnormal" if abs(value - mean) > 1.3 * sd else ("delta" if rng.random() < DELTA_SHARE else None)
                    uom = None if unit == "" or (label in v.LAB_UNIT_SOMETIMES_MISSING and rng.random() < 0.3) else unit
                    if rng.random() < 0.004:
                        rows.append((len(rows), subject_id, hadm, itemid, t, "HEMOLYZED", None, uom, None))
                        continue
                    text = f"{value:.{dec}f}" if dec else str(int(value))
                    rows.append((len(rows), subject_id, hadm, itemid, t, text, value, uom, flag))
        if rng.random() < 0.2:  # outpatient labs: no HADM_ID, dropped by the EHRSQL builder
            lab = rng.choice(V.labs)
            rows.append((len(rows), subject_id, None, lab[0], admit - dt.timedelta(days=rng.randint(3, 60)),
                         str(lab[6]), float(lab[6]), lab[5] or None, None))

    def micro(self, subject_id: int, hadm: int, admit: dt.datetime, disch: dt.datetime) -> None:
        rng = self.rng
        rows = self.rows["MICROBIOLOGYEVENTS"]
        for _ in range(rng.choices([0, 1, 2, 3, 4], weights=[35, 30, 18, 10, 7])[0]):
            t = _minute(admit + (disch - admit) * rng.random())
            spec = _wchoice(rng, tuple((s[0], s[1]) for s in V.specimens))
            spec_id = 70000 + [s[0] for s in V.specimens].index(spec)
            org = _wchoice(rng, tuple((o[0], o[1]) for o in v.ORGANISMS))
            org_id = None if org is None else 80000 + [o[0] for o in v.ORGANISMS].index(org)
            charttime = None if rng.random() < 0.1 else t
            rows.append((len(rows), subject_id, hadm, dt.datetime.combine(t.date(), dt.time()), charttime,
                         spec_id, spec, org_id, org))

    def chart(self, subject_id: int, hadm: int, stay: tuple) -> None:
        rng, gen = self.rng, self.np
        icu, _u, _lu, _w, _lw, intime, outtime = stay
        rows = self.rows["CHARTEVENTS"]
        hours = (outtime - intime).total_seconds() / 3600
        t_h, times = rng.uniform(0.1, 1.0), []
        while t_h < hours:
            times.append(t_h)
            t_h += rng.choice((1.0, 2.0, 2.0, 3.0, 4.0, 4.0))
        weight = round(min(160.0, max(40.0, gen.normal(80, 18))), 1)
        height = round(min(200.0, max(145.0, gen.normal(170, 10))), 0)
        t0 = _minute(intime + dt.timedelta(minutes=rng.randint(5, 90)))
        rows.append((len(rows), subject_id, hadm, icu, 762, t0, str(weight), weight, "kg"))
        if rng.random() < 0.6:
            rows.append((len(rows), subject_id, hadm, icu, 920, t0, str(height), height, "cm"))
        for itemid, _label, unit, mean, sd, low, high, dec, _col in v.VITALS:
            level = gen.normal(0, 0.6)
            noise = gen.normal(0, 0.55, size=len(times))
            for k, h in enumerate(times):
                if itemid == 677 and k % 4:
                    continue  # temperature every ~4 charted hours
                if itemid in (51, 8368, 52) and rng.random() < 0.1:
                    continue
                value = round(float(min(high, max(low, mean + sd * (level + noise[k])))), dec)
                t = _minute(intime + dt.timedelta(hours=h))
                rows.append((len(rows), subject_id, hadm, icu, itemid, t, str(value), value, unit))
                if rng.random() < 0.004:  # a re-charted value at the same time
                    rows.append((len(rows), subject_id, hadm, icu, itemid, t, str(value), value, unit))
        other = rng.choice(v.OTHER_CHART_ITEMS)
        rows.append((len(rows), subject_id, hadm, icu, other[0], t0, str(other[3]), other[3], other[2]))

    def io(self, subject_id: int, hadm: int, stay: tuple) -> None:
        rng = self.rng
        icu, *_x, intime, outtime = stay
        hours = (outtime - intime).total_seconds() / 3600
        ins, outs = self.rows["INPUTEVENTS_CV"], self.rows["OUTPUTEVENTS"]
        h = rng.uniform(0.2, 2.0)
        while h < hours:
            t = _minute(intime + dt.timedelta(hours=h))
            item = rng.choices(V.input_items, cum_weights=_INPUT_CUM)[0]
            amount = round(max(1.0, rng.gauss(item[2], item[3])), 1 if item[2] < 20 else 0)
            uom = "ml" if rng.random() > 0.05 else rng.choice(("mg", "units"))
            ins.append((len(ins), subject_id, hadm, icu, t, item[0], amount, uom))
            out = rng.choices(V.output_items, cum_weights=_OUTPUT_CUM)[0]
            value = None if rng.random() < 0.01 else round(max(0.0, rng.gauss(out[2], out[3])), 0)
            outs.append((len(outs), subject_id, hadm, icu, t + dt.timedelta(minutes=rng.randint(0, 50)), out[0],
                         value, "ml"))
            h += rng.uniform(1.0, 5.0)


_COLUMNS: dict[str, tuple[str, ...]] = {
    "PATIENTS": ("ROW_ID", "SUBJECT_ID", "GENDER", "DOB", "DOD", "DOD_HOSP", "EXPIRE_FLAG"),
    "ADMISSIONS": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "ADMITTIME", "DISCHTIME", "DEATHTIME", "ADMISSION_TYPE",
                   "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "INSURANCE", "LANGUAGE", "RELIGION", "MARITAL_STATUS",
                   "ETHNICITY", "DIAGNOSIS", "HOSPITAL_EXPIRE_FLAG"),
    "ICUSTAYS": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "DBSOURCE", "FIRST_CAREUNIT", "LAST_CAREUNIT",
                 "FIRST_WARDID", "LAST_WARDID", "INTIME", "OUTTIME", "LOS"),
    "TRANSFERS": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "EVENTTYPE", "PREV_CAREUNIT", "CURR_CAREUNIT",
                  "PREV_WARDID", "CURR_WARDID", "INTIME", "OUTTIME", "LOS"),
    "DIAGNOSES_ICD": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "SEQ_NUM", "ICD9_CODE"),
    "PROCEDURES_ICD": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "SEQ_NUM", "ICD9_CODE"),
    "LABEVENTS": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "ITEMID", "CHARTTIME", "VALUE", "VALUENUM", "VALUEUOM", "FLAG"),
    "PRESCRIPTIONS": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "STARTDATE", "ENDDATE", "DRUG_TYPE", "DRUG",
                      "DRUG_NAME_POE", "DRUG_NAME_GENERIC", "FORMULARY_DRUG_CD", "NDC", "DOSE_VAL_RX", "DOSE_UNIT_RX",
                      "ROUTE"),
    "CHARTEVENTS": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "ITEMID", "CHARTTIME", "VALUE", "VALUENUM",
                    "VALUEUOM"),
    "INPUTEVENTS_CV": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "CHARTTIME", "ITEMID", "AMOUNT", "AMOUNTUOM"),
    "OUTPUTEVENTS": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "CHARTTIME", "ITEMID", "VALUE", "VALUEUOM"),
    "MICROBIOLOGYEVENTS": ("ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "SPEC_ITEMID",
                           "SPEC_TYPE_DESC", "ORG_ITEMID", "ORG_NAME"),
}


def _dictionaries() -> dict[str, pd.DataFrame]:
    d_dx = pd.DataFrame([(i, c, s, l) for i, (c, s, l, _w) in enumerate(DIAGNOSES)],
                        columns=["ROW_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"])
    d_px = pd.DataFrame([(i, c, s, l) for i, (c, s, l, _w) in enumerate(PROCEDURES)],
                        columns=["ROW_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"])
    d_lab = pd.DataFrame([(i, lab[0], lab[1], lab[2], lab[3], lab[4]) for i, lab in enumerate(V.labs)],
                         columns=["ROW_ID", "ITEMID", "LABEL", "FLUID", "CATEGORY", "LOINC_CODE"])
    items = [(it[0], it[1], "chartevents", it[2]) for it in v.VITALS]
    items += [(v.ADMIT_WEIGHT[0], v.ADMIT_WEIGHT[1], "chartevents", "kg"), (v.ADMIT_HEIGHT[0], v.ADMIT_HEIGHT[1], "chartevents", "cm")]
    items += [(it[0], it[1], "chartevents", it[2]) for it in v.OTHER_CHART_ITEMS]
    items += [(it[0], it[1], "inputevents_cv", "ml") for it in V.input_items]
    items += [(it[0], it[1], "outputevents", "ml") for it in V.output_items]
    items += [(70000 + k, s[0], "microbiologyevents", None) for k, s in enumerate(V.specimens)]
    items += [(80000 + k, o[0], "microbiologyevents", None) for k, o in enumerate(v.ORGANISMS) if o[0]]
    items += [(227457, "Platelet Count", "datetimeevents", None)]
    d_items = pd.DataFrame([(i, *row[:3], "carevue", row[3]) for i, row in enumerate(items)],
                           columns=["ROW_ID", "ITEMID", "LABEL", "LINKSTO", "DBSOURCE", "UNITNAME"])
    return {"D_ICD_DIAGNOSES": d_dx, "D_ICD_PROCEDURES": d_px, "D_LABITEMS": d_lab, "D_ITEMS": d_items}


def draw_hospital(n_patients: int, seed: int = 0, plan: Plan | None = None,
                  public_ids: PublicIds | None = None) -> RawHospital:
    """Draw one synthetic hospital.

    Args:
        n_patients: Number of patients (``SIZES["tiny"]`` = 30 for tests, ``SIZES["default"]`` = 1,000).
        seed: Seed of every random draw; the same seed gives identical frames.
        plan: Patients planned from public question files (``plant.plan_from_files``), drawn after the
            ``n_patients`` random ones (whose ids then avoid the planned ids). A schema/coverage smoke option.
        public_ids: Ids public question files name (``plant.public_ids_from_files``), given to the first random
            patients (subject ids, eICU ``uniquepid``s, MIMICSQL names; at most ``n_patients`` of each). Their
            histories are the ordinary draw: the same as without ids.

    Returns:
        The raw tables (MIMIC-III CSV shape) and the allergy list.

    Example:
        >>> raw = draw_hospital(30, seed=0)
        >>> sorted(raw.tables)[:3]
        ['ADMISSIONS', 'CHARTEVENTS', 'D_ICD_DIAGNOSES']
    """
    if n_patients < 1:
        raise ValueError(f"n_patients={n_patients} must be >= 1; use e.g. SIZES['tiny'] (30)")
    drawer = _Drawer(seed)
    if plan is None:
        ids = drawer.rng.sample(range(100, 99999), n_patients)
    else:
        taken = plan.subject_ids()
        ids = [i for i in drawer.rng.sample(range(100, 99999), n_patients + len(taken)) if i not in taken][:n_patients]
    if public_ids is not None:
        named = [i for i in dict.fromkeys(public_ids.subject_ids) if plan is None or i not in plan.subject_ids()]
        named = named[:n_patients]
        ids = named + [i for i in ids if i not in set(named)][:n_patients - len(named)]
    for subject_id in ids:
        drawer.patient(subject_id)
    planted = draw_planned(drawer, plan, set(ids)) if plan is not None else ({}, {}, frozenset())
    if public_ids is not None:
        planted = ({**dict(zip(ids, public_ids.uniquepids)), **planted[0]},
                   {**dict(zip(ids, public_ids.names)), **planted[1]}, planted[2])
    tables = {name: pd.DataFrame(drawer.rows[name], columns=list(cols)) for name, cols in _COLUMNS.items()}
    tables.update(_dictionaries())
    allergies = pd.DataFrame(drawer.rows["ALLERGIES"], columns=["SUBJECT_ID", "ALLERGYNAME", "DRUGNAME"])
    return RawHospital(tables=tables, allergies=allergies, uniquepids=planted[0], names=planted[1], pinned=planted[2])


@functools.lru_cache(maxsize=2)
def cached_draw(n_patients: int, seed: int = 0, public_questions: tuple[str, ...] = (),
                anonymous: bool = True, public_id_files: tuple[str, ...] = ()) -> RawHospital:
    """:func:`draw_hospital`, memoised per process (the three families of one build share one draw).

    ``public_questions`` (question file paths) plans the patients they name, and with ``anonymous`` one more per
    question that names none (``plant.plan_from_files``): a schema/coverage smoke option, an answer key.
    ``public_id_files`` only gives ordinary patients the ids those files name (``plant.public_ids_from_files``).

    Callers must not mutate the returned frames (the builders copy before changing anything).
    """
    plan = plan_from_files(public_questions, anonymous=anonymous) if public_questions else None
    ids = public_ids_from_files(public_id_files) if public_id_files else None
    return draw_hospital(n_patients, seed, plan, ids)
