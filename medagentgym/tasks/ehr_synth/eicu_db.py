"""Build EHRSQL's eICU database (10 tables) from raw eICU-CRD-shaped frames.

Input: ``eicu_view.eicu_view(raw)`` (synthetic) or ``importers.read_eicu_csv_dir`` (real CSVs); both give frames
with eICU's own columns (offsets in minutes from unit admission, ``hospitaladmittime24``, ``hospitaldischargeyear``).
Conventions applied (EHRSQL's builder, per the fact sheet): each hospital stay gets a random date in 2100-2105
(weights 1:2:3:4:5:6 per patient, later stays keep their year offset), offsets become absolute times, 10 % of
patients are current (their last stay spans ``2105-12-31 23:59:00``) and times after it are NULL; age is an
integer in text (``> 89`` -> ``90``); diagnosis and treatment names are levels 3-4 of the path joined by
`` - ``; cancelled medication orders are dropped; intake/output keeps ``intake (ml)``/``output (ml)`` paths,
drops the generic labels and strips a trailing ``intake``/``output`` word; discharge status and weight are NULL
while the discharge time is; text lower-cased; value columns permuted jointly; ids renumbered; a cost table.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from medagentgym.tasks.ehr_synth import conventions as cv
from medagentgym.tasks.ehr_synth.schemas import EICU, write_sqlite

_TIMES = {t: [c for c, typ in cols if typ.startswith("TIMESTAMP")] for t, cols in EICU.items()}
#: table -> (offset column, time column, value columns permuted jointly)
_EVENTS = {
    "diagnosis": ("diagnosisoffset", "diagnosistime", ["diagnosisname", "icd9code"]),
    "treatment": ("treatmentoffset", "treatmenttime", ["treatmentname"]),
    "lab": ("labresultoffset", "labresulttime", ["labname", "labresult"]),
    "medication": ("drugstartoffset", "drugstarttime", ["drugname", "dosage", "routeadmin"]),
    "allergy": ("allergyoffset", "allergytime", ["allergyname", "drugname"]),
    "intakeoutput": ("intakeoutputoffset", "intakeoutputtime", ["celllabel", "cellpath", "cellvaluenumeric"]),
    "microlab": ("culturetakenoffset", "culturetakentime", ["culturesite", "organism"]),
    "vitalperiodic": ("observationoffset", "observationtime", []),
}


def _path_name(path: str) -> str:
    parts = str(path).split("|")
    return " - ".join(p.strip() for p in parts[2:4])


def _age(text) -> str:
    digits = re.sub(r"\D", "", str(text))
    if ">" in str(text) or (digits and int(digits) > 89):
        return "90"
    return digits or "0"


def _anchor_stays(pat: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Absolute hospital admission time per unit stay (see the module docstring)."""
    pat = pat.copy()
    first_year = pat.groupby("uniquepid")["hospitaldischargeyear"].transform("min")
    pids = sorted(pat["uniquepid"].unique())
    base = dict(zip(pids, rng.choice(cv.SHIFT_YEARS, size=len(pids), p=cv.SHIFT_WEIGHTS)))
    planned = pat["pinned_admittime"].notna() if "pinned_admittime" in pat else pd.Series(False, index=pat.index)
    n_free = pat.loc[~planned, "uniquepid"].nunique()
    chosen = set(rng.permutation(len(pids))[: max(1, round(cv.CURRENT_SHARE * n_free))].tolist())
    current = {pid: k in chosen for k, pid in enumerate(pids)}
    day = rng.integers(0, 330, size=len(pat))
    frac = rng.uniform(0.15, 0.85, size=len(pat))
    hosp_span = (pat["hospitaldischargeoffset"] - pat["hospitaladmitoffset"]).to_numpy()
    in_last_year = pat.groupby("uniquepid")["hospitaldischargeyear"].transform("max") == pat["hospitaldischargeyear"]
    last_rows = set(pat[in_last_year].groupby("uniquepid").tail(1).index)
    last_stay = pd.Series([i in last_rows for i in pat.index], index=pat.index)
    admits = []
    for k, r in enumerate(pat.itertuples(index=False)):
        if planned.iloc[k]:  # a planned patient: its times are EHRSQL's already
            admits.append(pd.Timestamp(pat["pinned_admittime"].iloc[k]))
            continue
        if current[r.uniquepid] and last_stay.iloc[k]:
            # the current time falls inside the unit stay, so both the unit and the hospital stay are open
            unit_admit = cv.CURRENT_TS - pd.Timedelta(minutes=int(frac[k] * r.unitdischargeoffset))
            admits.append((unit_admit + pd.Timedelta(minutes=int(r.hospitaladmitoffset))).floor("min"))
            continue
        year = int(base[r.uniquepid]) + int(r.hospitaldischargeyear - first_year.iloc[k])
        t = pd.Timestamp(f"{min(year, 2105)}-01-01 {r.hospitaladmittime24}") + pd.Timedelta(days=int(day[k]))
        while t + pd.Timedelta(minutes=int(hosp_span[k])) >= cv.CURRENT_TS and t.year > 2100:
            t -= pd.Timedelta(days=365)
        admits.append(t)
    pat["hospitaladmittime"] = admits
    pat["unitadmittime"] = pat["hospitaladmittime"] - pd.to_timedelta(pat["hospitaladmitoffset"], unit="min")
    pat["unitdischargetime"] = pat["unitadmittime"] + pd.to_timedelta(pat["unitdischargeoffset"], unit="min")
    pat["hospitaldischargetime"] = pat["unitadmittime"] + pd.to_timedelta(pat["hospitaldischargeoffset"], unit="min")
    for col in ("hospitaladmittime", "unitadmittime", "unitdischargetime", "hospitaldischargetime"):
        pat[col] = pat[col].where(pat[col] <= cv.CURRENT_TS)
    open_stay = pat["hospitaldischargetime"].isna()
    pat.loc[open_stay, "hospitaldischargestatus"] = None
    pat.loc[open_stay, "dischargeweight"] = None
    pat["age"] = pat["age"].map(_age)
    return pat[pat["unitadmittime"].notna() & (pat["unitadmittime"] >= cv.START_TS)]


def _cost(tables: dict[str, pd.DataFrame], pat: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    stay = pat.set_index("patientunitstayid")
    blocks = []
    diag_mean = float(rng.poisson(10))
    for table, etype, id_col, time_col, key in (
        ("diagnosis", "diagnosis", "diagnosisid", "diagnosistime", "diagnosisname"),
        ("lab", "lab", "labid", "labresulttime", "labname"),
        ("treatment", "treatment", "treatmentid", "treatmenttime", "treatmentname"),
        ("medication", "medication", "medicationid", "drugstarttime", "drugname"),
    ):
        df = tables[table]
        mean = diag_mean if etype in ("diagnosis", "lab") else float(rng.poisson(10))  # EHRSQL's lab-price quirk
        prices = cv.price_table(df[key].tolist(), mean, rng)
        blocks.append(pd.DataFrame({
            "uniquepid": df["patientunitstayid"].map(stay["uniquepid"]).to_numpy(),
            "patienthealthsystemstayid": df["patientunitstayid"].map(stay["patienthealthsystemstayid"]).to_numpy(),
            "eventtype": etype, "eventid": df[id_col].to_numpy(), "chargetime": df[time_col].to_numpy(),
            "cost": df[key].map(prices).to_numpy()}))
    cost = pd.concat(blocks, ignore_index=True)
    cost.insert(0, "costid", np.arange(len(cost)))
    return cost


def _clean_io(io: pd.DataFrame) -> pd.DataFrame:
    path = io["cellpath"].str.lower()
    io = io[path.str.contains("intake (ml)", regex=False) | path.str.contains("output (ml)", regex=False)].copy()
    label = io["celllabel"].str.strip().str.lower()
    io = io[~label.isin({"intake", "output"})].copy()
    io["celllabel"] = label[io.index].str.replace(r"\s+(intake|output)$", "", regex=True)
    return io


def eicu_tables(raw: dict[str, pd.DataFrame], seed: int = 0) -> dict[str, pd.DataFrame]:
    """The 10 EHRSQL eICU tables as frames (columns exactly as in :data:`schemas.EICU`)."""
    rng = np.random.default_rng([seed, 5])
    pat = _anchor_stays(raw["patient"], rng)
    unit_in = pat.set_index("patientunitstayid")["unitadmittime"]
    pinned = frozenset(pat.loc[pat["pinned_admittime"].notna(), "patientunitstayid"]) if "pinned_admittime" in pat else frozenset()
    out: dict[str, pd.DataFrame] = {}
    for table, (offset, time_col, values) in _EVENTS.items():
        df = raw[table]
        df = df[df["patientunitstayid"].isin(unit_in.index)].copy()
        if table in ("diagnosis", "treatment"):
            src = "diagnosisstring" if table == "diagnosis" else "treatmentstring"
            df[f"{table}name"] = df[src].map(_path_name)
        if table == "medication":
            df = df[df["drugordercancelled"].astype(str).str.lower() != "yes"].copy()
            stop = df["patientunitstayid"].map(unit_in) + pd.to_timedelta(df["drugstopoffset"], unit="min")
            df["drugstoptime"] = stop.where(stop <= cv.CURRENT_TS)
        if table == "intakeoutput":
            df = _clean_io(df)
        when = df["patientunitstayid"].map(unit_in) + pd.to_timedelta(df[offset], unit="min")
        df[time_col] = when.where(when <= cv.CURRENT_TS)
        df = df[df[time_col].notna() & (df[time_col] >= cv.START_TS)]
        text = [c for c, typ in EICU[table] if typ.startswith("VARCHAR")]
        df = cv.lower_text(df, text).reset_index(drop=True)
        if values:
            df = cv.permute_jointly(df, values, rng, pinned, key="patientunitstayid")
        df = cv.shuffle_rows(df, seed, table)  # stored order says nothing about time
        df[f"{table}id"] = np.arange(len(df))
        out[table] = df
    pat = cv.lower_text(pat, [c for c, typ in EICU["patient"] if typ.startswith("VARCHAR")])
    out["patient"] = cv.shuffle_rows(pat, seed, "patient")
    out["cost"] = _cost(out, out["patient"], rng)
    return {table: out[table][[c for c, _ in EICU[table]]] for table in EICU}


def build_eicu(raw: dict[str, pd.DataFrame], path: Path, *, seed: int = 0) -> dict[str, int]:
    """Write ``path`` (SQLite) with the 10 EHRSQL eICU tables; returns row counts per table."""
    tables = eicu_tables(raw, seed=seed)
    rows = {name: cv.to_rows(df, list(df.columns), _TIMES[name]) for name, df in tables.items()}
    pks = {t: cols[0][0] for t, cols in EICU.items() if t != "patient"}
    pks["patient"] = "patientunitstayid"
    return write_sqlite(path, EICU, rows, db_name="eicu", primary_keys=pks)
