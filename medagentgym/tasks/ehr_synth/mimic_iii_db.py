"""Build EHRSQL's MIMIC-III database (17 tables) from raw MIMIC-III-shaped frames.

The input is a :class:`~medagentgym.tasks.ehr_synth.hospital.RawHospital` (synthetic draw, or real CSVs read by
``importers.read_mimic_csv_dir``); the output follows EHRSQL's builder conventions (see ``conventions`` and the
fact sheet): AGE on ADMISSIONS with 10 < AGE < 90 and stays shorter than the 95th percentile, per-patient time
shift into 2100-2105 with 10 % current patients, NULL after ``2105-12-31 23:59:00``, lower-cased text,
DIAGNOSES_ICD.CHARTTIME = admission time and PROCEDURES_ICD.CHARTTIME = discharge time, labs with a numeric
value and unit, integer prescription doses with each drug's most frequent unit, inputs/outputs in ml, the nine
vital items in CHARTEVENTS, culture time falling back to the culture date, value columns permuted jointly,
rows stored in a seeded random order (never time order: "first"/"last" need ORDER BY), ROW_IDs renumbered in that
order, and a COST table generated from the events.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from medagentgym.tasks.ehr_synth import conventions as cv
from medagentgym.tasks.ehr_synth.hospital import RawHospital
from medagentgym.tasks.ehr_synth.schemas import MIMIC_III, write_sqlite

VITAL_ITEMIDS = (677, 834, 211, 618, 51, 8368, 52, 762, 920)
_TEXT = {
    "ADMISSIONS": ["ADMISSION_TYPE", "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "INSURANCE", "LANGUAGE",
                   "MARITAL_STATUS", "ETHNICITY"],
    "PATIENTS": ["GENDER"], "D_ICD_DIAGNOSES": ["ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"],
    "D_ICD_PROCEDURES": ["ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"], "D_LABITEMS": ["LABEL"], "D_ITEMS": ["LABEL", "LINKSTO"],
    "DIAGNOSES_ICD": ["ICD9_CODE"], "PROCEDURES_ICD": ["ICD9_CODE"], "LABEVENTS": ["VALUEUOM"],
    "PRESCRIPTIONS": ["DRUG", "DOSE_VAL_RX", "DOSE_UNIT_RX", "ROUTE"], "CHARTEVENTS": ["VALUEUOM"],
    "MICROBIOLOGYEVENTS": ["SPEC_TYPE_DESC", "ORG_NAME"], "ICUSTAYS": ["FIRST_CAREUNIT", "LAST_CAREUNIT"],
    "TRANSFERS": ["EVENTTYPE", "CAREUNIT"],
}
_TIMES = {t: [c for c, typ in cols if typ.startswith("TIMESTAMP")] for t, cols in MIMIC_III.items()}


def _cohort(raw: RawHospital) -> pd.DataFrame:
    """Admissions with AGE, filtered like EHRSQL (10 < AGE < 90, stay below the 95th percentile)."""
    adm = raw.tables["ADMISSIONS"].copy()
    pat = raw.tables["PATIENTS"].set_index("SUBJECT_ID")
    for col in ("ADMITTIME", "DISCHTIME"):
        adm[col] = pd.to_datetime(adm[col])
    dob = pd.to_datetime(adm["SUBJECT_ID"].map(pat["DOB"]))
    # seconds resolution: MIMIC's shifted > 89 year olds are ~300 years old, beyond nanosecond timedeltas
    secs = adm["ADMITTIME"].to_numpy("datetime64[s]") - dob.to_numpy("datetime64[s]")
    adm["AGE"] = np.floor(secs.astype("int64") / 86400 // 1 / 365.25).astype("int64")
    stay = (adm["DISCHTIME"] - adm["ADMITTIME"]).dt.total_seconds()
    cutoff = stay.quantile(0.95)
    keep = (adm["AGE"] > 10) & (adm["AGE"] < 90) & (stay < cutoff)
    return adm[keep.fillna(False)].reset_index(drop=True)


def _keep_events(df: pd.DataFrame, hadms: set, key_time: str | None) -> pd.DataFrame:
    """Rows of kept admissions whose key time is known and not before 2100."""
    out = df[df["HADM_ID"].isin(hadms)]
    if key_time:
        t = out[key_time]
        out = out[t.notna() & (t >= cv.START_TS)]
    return out


def _prescriptions(rx: pd.DataFrame) -> pd.DataFrame:
    rx = rx.dropna(subset=["STARTDATE", "ENDDATE", "DOSE_VAL_RX", "DOSE_UNIT_RX", "ROUTE"]).copy()
    dose = rx["DOSE_VAL_RX"].astype(str).str.replace(",", "", regex=False).str.strip()
    rx = rx[dose.str.fullmatch(r"\d+")].copy()
    rx["DOSE_VAL_RX"] = dose[rx.index]
    key = rx["DRUG"].str.strip().str.lower()
    unit = rx["DOSE_UNIT_RX"].str.strip().str.lower()
    counts = pd.DataFrame({"d": key, "u": unit}).value_counts().reset_index(name="n")
    counts = counts.sort_values(["d", "n", "u"], ascending=[True, False, True]).drop_duplicates("d")
    top = dict(zip(counts["d"], counts["u"]))
    return rx[unit == key.map(top)]


def _cost(tables: dict[str, pd.DataFrame], rng: np.random.Generator) -> pd.DataFrame:
    """One cost row per diagnosis, lab, procedure and prescription row (in that order)."""
    blocks = []
    for table, etype, time_col, price_key in (
        ("DIAGNOSES_ICD", "diagnoses_icd", "CHARTTIME", "ICD9_CODE"), ("LABEVENTS", "labevents", "CHARTTIME", "ITEMID"),
        ("PROCEDURES_ICD", "procedures_icd", "CHARTTIME", "ICD9_CODE"), ("PRESCRIPTIONS", "prescriptions", "STARTDATE", "DRUG"),
    ):
        df = tables[table]
        prices = cv.price_table(df[price_key].tolist(), float(rng.poisson(10)), rng)
        blocks.append(pd.DataFrame({
            "SUBJECT_ID": df["SUBJECT_ID"].to_numpy(), "HADM_ID": df["HADM_ID"].to_numpy(), "EVENT_TYPE": etype,
            "EVENT_ID": df["ROW_ID"].to_numpy(), "CHARGETIME": df[time_col].to_numpy(),
            "COST": df[price_key].map(prices).to_numpy(),
        }))
    cost = pd.concat(blocks, ignore_index=True)
    cost.insert(0, "ROW_ID", np.arange(len(cost)))
    return cost


def mimic_tables(raw: RawHospital, seed: int = 0) -> dict[str, pd.DataFrame]:
    """The 17 EHRSQL tables as frames (columns exactly as in :data:`schemas.MIMIC_III`).

    Args:
        raw: Raw MIMIC-III-shaped tables.
        seed: Seeds the time shifts, the de-identification permutations and the prices.

    Returns:
        Table name -> frame, times as ``Timestamp``/NaT, text lower-cased.
    """
    rng = np.random.default_rng([seed, 3])
    t = raw.tables
    adm = _cohort(raw)
    grouped = adm.sort_values("ADMITTIME").groupby("SUBJECT_ID", sort=True)
    shifts = cv.patient_shifts(grouped["ADMITTIME"].min(), grouped["ADMITTIME"].max(),
                               grouped.apply(lambda g: g["DISCHTIME"].iloc[-1], include_groups=False), rng, raw.pinned)
    subjects = set(shifts.index)

    def shifted(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
        return cv.shift_times(df[df["SUBJECT_ID"].isin(subjects)], cols, shifts, "SUBJECT_ID")

    adm = shifted(adm, ["ADMITTIME", "DISCHTIME"])
    adm = adm[adm["ADMITTIME"].notna() & (adm["ADMITTIME"] >= cv.START_TS)]
    hadms = set(adm["HADM_ID"])
    out: dict[str, pd.DataFrame] = {}
    pat = shifted(t["PATIENTS"], ["DOB", "DOD"])
    out["PATIENTS"] = pat[pat["SUBJECT_ID"].isin(set(adm["SUBJECT_ID"]))]
    out["ADMISSIONS"] = adm
    out["D_ICD_DIAGNOSES"] = t["D_ICD_DIAGNOSES"]
    out["D_ICD_PROCEDURES"] = t["D_ICD_PROCEDURES"]
    out["D_LABITEMS"] = t["D_LABITEMS"]
    d_items = t["D_ITEMS"]
    out["D_ITEMS"] = d_items[d_items["LINKSTO"].str.lower().isin({"chartevents", "inputevents_cv", "outputevents"})]
    admit_at = adm.set_index("HADM_ID")["ADMITTIME"]
    disch_at = adm.set_index("HADM_ID")["DISCHTIME"]
    for table, at in (("DIAGNOSES_ICD", admit_at), ("PROCEDURES_ICD", disch_at)):
        df = t[table][t[table]["HADM_ID"].isin(hadms)].copy()
        df["CHARTTIME"] = df["HADM_ID"].map(at)
        out[table] = cv.permute_jointly(_keep_events(df, hadms, "CHARTTIME"), ["ICD9_CODE"], rng, raw.pinned)
    labs = t["LABEVENTS"].dropna(subset=["HADM_ID", "VALUENUM", "VALUEUOM"])
    labs = labs[labs["ITEMID"].isin(set(out["D_LABITEMS"]["ITEMID"]))]
    labs = _keep_events(shifted(labs, ["CHARTTIME"]), hadms, "CHARTTIME")
    out["LABEVENTS"] = cv.permute_jointly(labs, ["ITEMID", "VALUENUM", "VALUEUOM"], rng, raw.pinned)
    rx = _keep_events(shifted(_prescriptions(t["PRESCRIPTIONS"]), ["STARTDATE", "ENDDATE"]), hadms, "STARTDATE")
    out["PRESCRIPTIONS"] = cv.permute_jointly(rx, ["DRUG", "DOSE_VAL_RX", "DOSE_UNIT_RX", "ROUTE"], rng, raw.pinned)
    chart = t["CHARTEVENTS"][t["CHARTEVENTS"]["ITEMID"].isin(VITAL_ITEMIDS)]
    chart = _keep_events(shifted(chart, ["CHARTTIME"]), hadms, "CHARTTIME")
    chart = chart.dropna(subset=["SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "ITEMID", "CHARTTIME", "VALUENUM", "VALUEUOM"])
    out["CHARTEVENTS"] = cv.permute_jointly(chart, ["ITEMID", "VALUENUM", "VALUEUOM"], rng, raw.pinned)
    item_ids = set(out["D_ITEMS"]["ITEMID"])
    ins = t["INPUTEVENTS_CV"]
    ins = ins[(ins["AMOUNTUOM"].str.lower() == "ml") & ins["ITEMID"].isin(item_ids)]
    out["INPUTEVENTS_CV"] = cv.permute_jointly(_keep_events(shifted(ins, ["CHARTTIME"]), hadms, "CHARTTIME"),
                                               ["ITEMID", "AMOUNT"], rng, raw.pinned)
    outs = t["OUTPUTEVENTS"]
    outs = outs[(outs["VALUEUOM"].str.lower() == "ml") & outs["ITEMID"].isin(item_ids)]
    out["OUTPUTEVENTS"] = cv.permute_jointly(_keep_events(shifted(outs, ["CHARTTIME"]), hadms, "CHARTTIME"),
                                             ["ITEMID", "VALUE"], rng, raw.pinned)
    micro = t["MICROBIOLOGYEVENTS"].copy()
    micro["CHARTTIME"] = micro["CHARTTIME"].where(micro["CHARTTIME"].notna(), micro["CHARTDATE"])
    micro = _keep_events(shifted(micro, ["CHARTTIME"]), hadms, "CHARTTIME")
    out["MICROBIOLOGYEVENTS"] = cv.permute_jointly(micro, ["SPEC_TYPE_DESC", "ORG_NAME"], rng, raw.pinned)
    out["ICUSTAYS"] = _keep_events(shifted(t["ICUSTAYS"], ["INTIME", "OUTTIME"]), hadms, "INTIME")
    tr = t["TRANSFERS"].rename(columns={"CURR_CAREUNIT": "CAREUNIT", "CURR_WARDID": "WARDID"})
    out["TRANSFERS"] = _keep_events(shifted(tr, ["INTIME", "OUTTIME"]), hadms, "INTIME")
    for table, cols in _TEXT.items():
        out[table] = cv.lower_text(out[table], cols)
    for table, df in list(out.items()):
        out[table] = df.reset_index(drop=True) if table.startswith("D_") else cv.shuffle_rows(df, seed, table)
        out[table]["ROW_ID"] = np.arange(len(df))
    out["COST"] = _cost(out, rng)
    return {table: out[table][[c for c, _ in MIMIC_III[table]]] for table in MIMIC_III}


def build_mimic_iii(raw: RawHospital, path: Path, *, seed: int = 0) -> dict[str, int]:
    """Write ``path`` (SQLite) with the 17 EHRSQL MIMIC-III tables; returns row counts per table."""
    tables = mimic_tables(raw, seed=seed)
    rows = {name: cv.to_rows(df, list(df.columns), _TIMES[name]) for name, df in tables.items()}
    return write_sqlite(path, MIMIC_III, rows, db_name="mimic_iii", primary_keys={t: "ROW_ID" for t in MIMIC_III})
