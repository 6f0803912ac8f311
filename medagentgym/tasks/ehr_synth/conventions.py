"""EHRSQL database conventions shared by the MIMIC-III and eICU builders.

* the fixed current time ``2105-12-31 23:59:00``; timestamps after it become NULL;
* per-patient time shift: the first admission lands in 2100-2105 (weights 1:2:3:4:5:6, later years likelier),
  by whole 365-day years; 10 % of patients are "current": their last stay spans the current time;
* every text cell lower-cased and stripped; timestamps rendered ``YYYY-MM-DD HH:MM:SS``;
* cost rows: one per event, a price per distinct code drawn around a per-event-type Poisson(10) mean.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

CURRENT_TIME = "2105-12-31 23:59:00"
CURRENT_TS = pd.Timestamp(CURRENT_TIME)
START_TS = pd.Timestamp("2100-01-01 00:00:00")
SHIFT_YEARS = (2100, 2101, 2102, 2103, 2104, 2105)
SHIFT_WEIGHTS = np.array([1, 2, 3, 4, 5, 6], dtype=float) / 21.0
CURRENT_SHARE = 0.10
TIME_FMT = "%Y-%m-%d %H:%M:%S"


def patient_shifts(first_start: pd.Series, last_start: pd.Series, last_end: pd.Series,
                   rng: np.random.Generator, pinned: frozenset = frozenset()) -> pd.Series:
    """Time shift (``Timedelta``) per patient id.

    Args:
        first_start: Per patient (index), the first stay's start time.
        last_start: Per patient, the last stay's start time.
        last_end: Per patient, the last stay's end time (NaT if unknown).
        rng: Seeded generator (draw order = index order).
        pinned: Patients already drawn in EHRSQL's calendar (planned from question files): shift 0, and they
            are not counted when the 10 % current patients are chosen.

    Returns:
        Shift per patient. "Current" patients (exactly 10 %, at least one) are placed so the current time falls inside their last
        stay; the others get a whole-year shift putting the first stay in 2100-2105, pulled back a year at a
        time while the last stay would still be open at the current time.
    """
    n = len(first_start)
    current = np.zeros(n, dtype=bool)
    free = n - sum(pid in pinned for pid in first_start.index)
    current[rng.permutation(n)[: max(1, round(CURRENT_SHARE * free))]] = True
    years = rng.choice(SHIFT_YEARS, size=n, p=SHIFT_WEIGHTS)
    frac = rng.uniform(0.15, 0.85, size=n)
    out = []
    for k, pid in enumerate(first_start.index):
        if pid in pinned:
            out.append(pd.Timedelta(0))
            continue
        start, end, last = first_start[pid], last_end[pid], last_start[pid]
        if current[k] and not pd.isna(end) and end > last:
            anchor = last + (end - last) * frac[k]
            out.append((CURRENT_TS - anchor).floor("min"))
            continue
        shift_years = int(years[k]) - start.year
        while shift_years > 2100 - start.year and not pd.isna(end) and end + pd.Timedelta(days=365 * shift_years) >= CURRENT_TS:
            shift_years -= 1
        out.append(pd.Timedelta(days=365 * shift_years))
    return pd.Series(out, index=first_start.index)


def shift_times(df: pd.DataFrame, columns: Iterable[str], shifts: pd.Series, key: str) -> pd.DataFrame:
    """Add the shift of each row's patient (``df[key]``) to ``columns``; times after the current time -> NaT."""
    df = df.copy()
    delta = df[key].map(shifts)
    for col in columns:
        moved = pd.to_datetime(df[col]) + delta
        df[col] = moved.where(moved <= CURRENT_TS)
    return df


def lower_text(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """Lower-case and strip text columns (NULLs stay NULL)."""
    df = df.copy()
    for col in columns:
        df[col] = df[col].map(lambda x: x.strip().lower() if isinstance(x, str) else x)
    return df


def fmt_time(value) -> str | None:
    """``YYYY-MM-DD HH:MM:SS`` or None."""
    if value is None or pd.isna(value):
        return None
    return pd.Timestamp(value).strftime(TIME_FMT)


def to_rows(df: pd.DataFrame, columns: list[str], times: Iterable[str] = ()) -> list[tuple]:
    """Row tuples in ``columns`` order with plain Python values (NaN -> None, times formatted)."""
    time_cols = set(times)
    cols = []
    for col in columns:
        series = df[col]
        if col in time_cols:
            stamps = pd.to_datetime(series)
            cols.append(stamps.dt.strftime(TIME_FMT).astype(object).where(stamps.notna(), None).tolist())
        elif series.dtype.kind in "iuf":
            cols.append(series.astype(object).where(series.notna(), None).tolist())
        else:
            cols.append([_plain(x) for x in series.tolist()])
    return list(zip(*cols)) if cols else []


def _plain(x):
    if x is None or x is pd.NA or x is pd.NaT:
        return None
    if isinstance(x, float) and np.isnan(x):
        return None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return None if np.isnan(x) else float(x)
    return x


def price_table(keys: Iterable, mean: float, rng: np.random.Generator) -> dict:
    """A fixed price per distinct key: round(Normal(mean, 1), 2), keys visited in sorted order."""
    uniq = sorted({k for k in keys if k is not None}, key=str)
    values = rng.normal(mean, 1.0, size=len(uniq))
    return {k: round(float(p), 2) for k, p in zip(uniq, values)}


def permute_jointly(df: pd.DataFrame, columns: list[str], rng: np.random.Generator,
                    pinned: frozenset = frozenset(), key: str = "SUBJECT_ID") -> pd.DataFrame:
    """EHRSQL's de-identification: permute the value columns together across rows (row keys stay).

    Rows whose ``key`` is in ``pinned`` (planned patients, whose values their questions name) stay in place;
    the others are permuted among themselves.
    """
    if len(df) < 2:
        return df
    df = df.copy()
    keep = df[key].isin(pinned) if pinned else None
    if keep is None or not keep.any():
        order = rng.permutation(len(df))
        df[columns] = df[columns].iloc[order].to_numpy()
        return df
    free = np.flatnonzero(~keep.to_numpy())
    moved = df[columns].iloc[free].iloc[rng.permutation(len(free))].to_numpy()
    for k, col in enumerate(columns):
        values = df[col].to_numpy(dtype=object).copy()
        values[free] = moved[:, k]
        df[col] = pd.Series(values, index=df.index).infer_objects()
    return df


def shuffle_rows(df: pd.DataFrame, seed: int, table: str) -> pd.DataFrame:
    """``df``'s rows in a seeded random order, so that stored order (and the ids renumbered from it) says nothing
    about time: in a real database "first" and "last" need ``ORDER BY``, and so they do here.

    The order is drawn from its own generator (``seed``, ``table``), so the values of every row stay as before.
    """
    return df.iloc[row_order(len(df), seed, table)].reset_index(drop=True)


def row_order(n: int, seed: int, table: str) -> np.ndarray:
    """The seeded random permutation of ``n`` rows of ``table`` (:func:`shuffle_rows`)."""
    digest = int.from_bytes(table.encode("utf-8"), "big") % (2**31)
    return np.random.default_rng([seed, 17, digest]).permutation(n)
