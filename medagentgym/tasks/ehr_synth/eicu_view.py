"""The eICU view of a synthetic hospital: raw MIMIC-shaped frames -> raw eICU-CRD-shaped frames.

eICU is ICU-centred: a patient (``uniquepid``) has hospital stays (``patienthealthsystemstayid``), each with unit
stays (``patientunitstayid``), and every event is stored as an offset in minutes from its unit admission. This
module maps one draw into that shape, with eICU's column names and spellings (``diagnosisstring`` paths such as
``pulmonary|respiratory failure|acute respiratory failure``, ``cellpath`` flowsheet paths, upper-case drug
names, ``> 89`` ages, ``Alive``/``Expired``): ICU stays become unit stays, an admission's events go to the unit
stay that was open (or last opened) when they happened, and admissions without an ICU stay are left out. The
eICU importer reads real eICU CSVs into the same shape, so ``eicu_db`` has one input format.
"""

from __future__ import annotations

import random

import pandas as pd

from medagentgym.tasks.ehr_synth import vocab_items as v
from medagentgym.tasks.ehr_synth.hospital import RawHospital
from medagentgym.tasks.ehr_synth.vocab import merged

V = merged()


def _icd_dotted(code: str) -> str:
    if code.startswith("E"):
        return code[:4] + ("." + code[4:] if len(code) > 4 else "")
    return code[:3] + ("." + code[3:] if len(code) > 3 else "")


def _offset(t, t0) -> int:
    return int((pd.Timestamp(t) - pd.Timestamp(t0)).total_seconds() // 60)


def _stay_index(stays: pd.DataFrame) -> dict[int, list[tuple]]:
    by_hadm: dict[int, list[tuple]] = {}
    for r in stays.sort_values("INTIME").itertuples(index=False):
        by_hadm.setdefault(r.HADM_ID, []).append((pd.Timestamp(r.INTIME), r.ICUSTAY_ID))
    return by_hadm


def _assign(by_hadm: dict[int, list[tuple]], hadm, t) -> tuple | None:
    """(unit stay id, unit intime) open or last opened at ``t`` within admission ``hadm``."""
    stays = by_hadm.get(hadm)
    if not stays or pd.isna(t):
        return None
    t = pd.Timestamp(t)
    chosen = stays[0]
    for intime, icu in stays:
        if intime <= t:
            chosen = (intime, icu)
    return chosen[1], chosen[0]


def _patients(raw: RawHospital, rng: random.Random) -> pd.DataFrame:
    t = raw.tables
    pat = t["PATIENTS"].set_index("SUBJECT_ID")
    adm = t["ADMISSIONS"].set_index("HADM_ID")
    chart = t["CHARTEVENTS"]
    first = chart[chart["ITEMID"].isin((762, 920))].drop_duplicates(["ICUSTAY_ID", "ITEMID"]).set_index(["ICUSTAY_ID", "ITEMID"])["VALUENUM"]
    pids = {s: f"{rng.randint(0, 35):03d}-{rng.randint(1000, 99999)}" for s in sorted(pat.index)}
    pids.update(raw.uniquepids)
    hospital = {s: rng.choice((63, 73, 110, 122, 148, 167, 176, 188, 199, 243, 264, 420, 449)) for s in sorted(pat.index)}
    rows = []
    for s in t["ICUSTAYS"].itertuples(index=False):
        a, p = adm.loc[s.HADM_ID], pat.loc[s.SUBJECT_ID]
        intime, admit, disch = pd.Timestamp(s.INTIME), pd.Timestamp(a["ADMITTIME"]), pd.Timestamp(a["DISCHTIME"])
        dob = pd.Timestamp(p["DOB"])
        age = admit.year - dob.year - int((admit.month, admit.day) < (dob.month, dob.day))
        weight = first.get((s.ICUSTAY_ID, 762))
        expired = a["HOSPITAL_EXPIRE_FLAG"] == 1
        rows.append({
            "patientunitstayid": s.ICUSTAY_ID, "patienthealthsystemstayid": s.HADM_ID, "uniquepid": pids[s.SUBJECT_ID],
            "gender": "Male" if p["GENDER"] == "M" else "Female", "age": "> 89" if age > 89 else str(age),
            "ethnicity": v.EICU_ETHNICITY.get(a["ETHNICITY"], "other/unknown").title(),
            "hospitalid": hospital[s.SUBJECT_ID], "wardid": 100 + 7 * int(s.FIRST_WARDID),
            "unittype": v.EICU_UNITTYPE[s.FIRST_CAREUNIT], "admissionheight": first.get((s.ICUSTAY_ID, 920)),
            "admissionweight": weight, "dischargeweight": None if weight is None else round(weight + rng.uniform(-3, 2), 1),
            "hospitaladmittime24": admit.strftime("%H:%M:%S"), "hospitaladmitoffset": _offset(admit, intime),
            "hospitaladmitsource": V.eicu_admit_source.get(a["ADMISSION_LOCATION"], "other").title(),
            "hospitaldischargeyear": disch.year, "hospitaldischargetime24": disch.strftime("%H:%M:%S"),
            "hospitaldischargeoffset": _offset(disch, intime), "hospitaldischargestatus": "Expired" if expired else "Alive",
            "unitadmittime24": intime.strftime("%H:%M:%S"), "unitdischargeoffset": _offset(s.OUTTIME, intime),
            # planned patients keep their hospital admission time (already in EHRSQL's calendar); eICU has no such column
            "pinned_admittime": admit if s.SUBJECT_ID in raw.pinned else None,
        })
    return pd.DataFrame(rows)


def _events(raw: RawHospital, rng: random.Random) -> dict[str, pd.DataFrame]:
    t = raw.tables
    by_hadm = _stay_index(t["ICUSTAYS"])
    short = dict(zip(t["D_ICD_DIAGNOSES"]["ICD9_CODE"], t["D_ICD_DIAGNOSES"]["SHORT_TITLE"]))
    pshort = dict(zip(t["D_ICD_PROCEDURES"]["ICD9_CODE"], t["D_ICD_PROCEDURES"]["SHORT_TITLE"]))
    out: dict[str, list[dict]] = {k: [] for k in ("diagnosis", "treatment", "lab", "medication", "allergy",
                                                  "intakeoutput", "microlab", "vitalperiodic")}
    stays = t["ICUSTAYS"].set_index("ICUSTAY_ID")
    for r in t["DIAGNOSES_ICD"].itertuples(index=False):
        for icu, intime in [(i, it) for it, i in by_hadm.get(r.HADM_ID, [])][:1]:
            los = _offset(stays.loc[icu, "OUTTIME"], intime)
            path = V.dx_paths.get(r.ICD9_CODE, "general|other diagnoses|" + short.get(r.ICD9_CODE, r.ICD9_CODE).lower())
            out["diagnosis"].append({"patientunitstayid": icu, "diagnosisoffset": rng.randint(0, max(1, los)),
                                     "diagnosisstring": path, "icd9code": _icd_dotted(r.ICD9_CODE)})
    for r in t["PROCEDURES_ICD"].itertuples(index=False):
        for icu, intime in [(i, it) for it, i in by_hadm.get(r.HADM_ID, [])][:1]:
            los = _offset(stays.loc[icu, "OUTTIME"], intime)
            path = V.px_paths.get(r.ICD9_CODE, "surgery|procedures|" + pshort.get(r.ICD9_CODE, r.ICD9_CODE).lower())
            out["treatment"].append({"patientunitstayid": icu, "treatmentoffset": rng.randint(0, max(1, los)),
                                     "treatmentstring": path})
    eicu_lab = {lab[0]: lab[11] for lab in V.labs}
    for r in t["LABEVENTS"].dropna(subset=["HADM_ID", "VALUENUM"]).itertuples(index=False):
        hit = _assign(by_hadm, r.HADM_ID, r.CHARTTIME)
        if hit:
            out["lab"].append({"patientunitstayid": hit[0], "labresultoffset": _offset(r.CHARTTIME, hit[1]),
                               "labname": eicu_lab[r.ITEMID], "labresult": r.VALUENUM})
    drugs = {d[0]: d for d in V.drugs}
    canonical = {var: name for name, vs in v.DRUG_CASE_VARIANTS.items() for var in vs}
    for r in t["PRESCRIPTIONS"].itertuples(index=False):
        start = pd.Timestamp(r.STARTDATE) + pd.Timedelta(minutes=rng.randint(0, 1439))
        hit = _assign(by_hadm, r.HADM_ID, start)
        name = canonical.get(r.DRUG, r.DRUG)
        if not hit or name not in drugs:
            continue
        d = drugs[name]
        stop = None if pd.isna(r.ENDDATE) else _offset(r.ENDDATE, hit[1])
        out["medication"].append({
            "patientunitstayid": hit[0], "drugorderoffset": _offset(start, hit[1]) - 5, "drugstartoffset": _offset(start, hit[1]),
            "drugordercancelled": "Yes" if rng.random() < 0.03 else "No", "drugname": d[7].upper() if rng.random() < 0.7 else d[7],
            "dosage": d[8], "routeadmin": d[9].upper() if rng.random() < 0.5 else d[9], "drugstopoffset": stop})
        if name in v.DRUG_TREATMENTS and rng.random() < 0.5:
            out["treatment"].append({"patientunitstayid": hit[0], "treatmentoffset": _offset(start, hit[1]) + 30,
                                     "treatmentstring": v.DRUG_TREATMENTS[name]})
    _io_micro_vitals(raw, by_hadm, rng, out)
    for s in t["ICUSTAYS"].itertuples(index=False):
        for name, drug in raw.allergies[raw.allergies["SUBJECT_ID"] == s.SUBJECT_ID][["ALLERGYNAME", "DRUGNAME"]].itertuples(index=False):
            out["allergy"].append({"patientunitstayid": s.ICUSTAY_ID, "allergyoffset": rng.randint(-60, 240),
                                   "drugname": drug, "allergyname": name})
    return {k: pd.DataFrame(rows) for k, rows in out.items()}


def _io_micro_vitals(raw: RawHospital, by_hadm, rng: random.Random, out: dict[str, list[dict]]) -> None:
    t = raw.tables
    ins = {i[0]: i for i in V.input_items}
    outs = {o[0]: o for o in V.output_items}
    for table, items, col, kind in (("INPUTEVENTS_CV", ins, "AMOUNT", "intake"), ("OUTPUTEVENTS", outs, "VALUE", "output")):
        for r in t[table].dropna(subset=[col]).itertuples(index=False):
            item = items.get(r.ITEMID)
            if item is None or (kind == "intake" and r.AMOUNTUOM != "ml"):
                continue
            label = item[5]
            group = f"{item[6]}|" if kind == "intake" else ""
            out["intakeoutput"].append({
                "patientunitstayid": r.ICUSTAY_ID, "intakeoutputoffset": _offset(r.CHARTTIME, _intime(by_hadm, r)),
                "cellpath": f"flowsheet|flowsheet cell labels|i&o|{kind} (ml)|{group}{label}",
                "celllabel": f"{label} {kind}" if rng.random() < 0.1 else label, "cellvaluenumeric": getattr(r, col)})
            if rng.random() < 0.05:  # the generic total rows, dropped by the builder
                out["intakeoutput"].append({
                    "patientunitstayid": r.ICUSTAY_ID, "intakeoutputoffset": _offset(r.CHARTTIME, _intime(by_hadm, r)),
                    "cellpath": f"flowsheet|flowsheet cell labels|i&o|{kind} (ml)", "celllabel": kind.title(),
                    "cellvaluenumeric": getattr(r, col)})
    sites = {s[0]: s[2] for s in V.specimens}
    orgs = {o[0]: o[2] for o in v.ORGANISMS}
    for r in t["MICROBIOLOGYEVENTS"].itertuples(index=False):
        when = r.CHARTTIME if not pd.isna(r.CHARTTIME) else r.CHARTDATE
        hit = _assign(by_hadm, r.HADM_ID, when)
        if hit:
            out["microlab"].append({"patientunitstayid": hit[0], "culturetakenoffset": _offset(when, hit[1]),
                                    "culturesite": sites[r.SPEC_TYPE_DESC], "organism": orgs[None if pd.isna(r.ORG_NAME) else r.ORG_NAME]})
    chart = t["CHARTEVENTS"]
    cols = {it[0]: it[8] for it in v.VITALS}
    vit = chart[chart["ITEMID"].isin(cols)].drop_duplicates(["ICUSTAY_ID", "CHARTTIME", "ITEMID"])
    wide = vit.pivot(index=["ICUSTAY_ID", "CHARTTIME"], columns="ITEMID", values="VALUENUM").rename(columns=cols)
    intimes = t["ICUSTAYS"].set_index("ICUSTAY_ID")["INTIME"]
    wide = wide.reindex(columns=list(cols.values()))
    for (icu, when), values in zip(wide.index, wide.to_numpy().tolist()):
        row = {"patientunitstayid": icu, "observationoffset": _offset(when, intimes[icu])}
        row.update({c: (None if pd.isna(x) else x) for c, x in zip(wide.columns, values)})
        out["vitalperiodic"].append(row)


def _intime(by_hadm, r):
    for intime, icu in by_hadm[r.HADM_ID]:
        if icu == r.ICUSTAY_ID:
            return intime
    return by_hadm[r.HADM_ID][0][0]


def eicu_view(raw: RawHospital, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Raw eICU-CRD-shaped frames (``patient``, ``diagnosis``, ... ``vitalperiodic``) of one draw.

    Args:
        raw: The synthetic hospital.
        seed: Seeds the few eICU-only draws (ids, hospitals, offsets inside a stay).

    Returns:
        Table name -> frame with eICU column names; ids are added by the builder.
    """
    rng = random.Random(f"eicu-view:{seed}")
    frames = {"patient": _patients(raw, rng)}
    frames.update(_events(raw, rng))
    for name, df in frames.items():
        if name != "patient":
            df.insert(0, f"{name}id", range(len(df)))
    return frames
