"""A seeded synthetic ICU cohort in the MIMIC-Extract layout (hourly count/mean/std features, statics, outcomes).

Every stay has a latent severity ``s`` and an hourly instability ``u_t = s + e_t`` (``e_t`` an AR(1) process).
Vitals and labs are measured at random hours with values ``mean + coef * u_t + noise`` and summarised per hour
as MIMIC-Extract does: ``count``, ``mean``, ``std`` per variable (forward-filled, then filled with the normal
value; ``std`` 0 where fewer than two measurements). Outcomes follow logistic models of the severity (and
age), so a model trained on the first 24 hours can learn them: ICU and hospital mortality, ICU stay longer
than 3 and 7 days. Vasopressors and ventilation are hourly on/off Markov chains whose switching hazards
depend on ``u_t``; while on, they shift the blood pressure / respiratory rate and saturation. Each stay has
ONE window at a fixed place: 6 h input (hours 18-23, the end of the first 24 h), 6 h gap, 4 h prediction,
labelled CONTROL, ON_INTERVENTION, ONSET or WEAN (a switch inside the gap, or a stay that ends before the
prediction window: no window), as in the MIMIC-Extract baselines. One window per stay at a fixed hour means
the windows say nothing about the length of stay (sliding windows over the whole stay did: their number per
stay is the length of stay). Nothing here is real patient data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: name, normal mean, noise sd, shift per unit of instability, probability of a measurement in an hour.
VARIABLES: tuple[tuple[str, float, float, float, float], ...] = (
    ("heart rate", 86, 10, 9, 0.95), ("systolic blood pressure", 121, 14, -9, 0.9),
    ("diastolic blood pressure", 62, 9, -5, 0.9), ("mean blood pressure", 80, 10, -7, 0.9),
    ("respiratory rate", 18, 3.5, 2.5, 0.9), ("temperature", 37.0, 0.5, 0.35, 0.3),
    ("oxygen saturation", 97, 1.8, -1.6, 0.9), ("glucose", 135, 30, 14, 0.25),
    ("creatinine", 1.1, 0.35, 0.45, 0.08), ("lactate", 1.6, 0.5, 0.9, 0.1),
    ("white blood cell count", 9.5, 3, 2.5, 0.08), ("hemoglobin", 10.8, 1.4, -0.8, 0.08),
    ("sodium", 139, 3, 0.8, 0.08), ("potassium", 4.1, 0.4, 0.15, 0.08), ("bicarbonate", 24, 3, -2.2, 0.08),
)
AGGS = ("count", "mean", "std")
STAY_TASKS = ("mort_icu", "mort_hosp", "los_3", "los_7")
WINDOW_TASKS = ("vasopressor", "ventilation")
CLASSES = ("CONTROL", "ON_INTERVENTION", "ONSET", "WEAN")
ETHNICITIES = ("AMERICAN INDIAN", "ASIAN", "BLACK", "HISPANIC", "OTHER", "WHITE")
CAREUNITS = ("CCU", "CSRU", "MICU", "SICU", "TSICU")
MAX_HOURS = 96
INPUT_H, GAP_H, PRED_H = 6, 6, 4
#: First input hour of every stay's one window: the input is the last 6 h of the first 24 h.
WINDOW_START = 24 - INPUT_H
KEYS = ["subject_id", "hadm_id", "icustay_id"]


def column(variable: str, agg: str) -> str:
    """Flattened column name of the (variable, agg) MultiIndex: ``'<variable>__<agg>'``."""
    return f"{variable}__{agg}"


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _switching(rng: np.random.Generator, u: np.ndarray, start: np.ndarray, on: tuple[float, float],
               off: tuple[float, float]) -> np.ndarray:
    """Hourly 0/1 states: off -> on with hazard sigmoid(a + b u), on -> off with sigmoid(c - d u)."""
    state = np.zeros(u.shape, dtype=np.int8)
    state[:, 0] = start
    draws = rng.random(u.shape)
    for t in range(1, u.shape[1]):
        prev = state[:, t - 1]
        p_on, p_off = _sigmoid(on[0] + on[1] * u[:, t]), _sigmoid(off[0] - off[1] * u[:, t])
        state[:, t] = np.where(prev == 1, draws[:, t] >= p_off, draws[:, t] < p_on)
    return state


def _hourly(rng: np.random.Generator, u: np.ndarray, vaso: np.ndarray, vent: np.ndarray) -> dict[str, np.ndarray]:
    """Hourly count/mean/std arrays (n, hours) per flattened column, imputed like MIMIC-Extract."""
    out: dict[str, np.ndarray] = {}
    effect = {"systolic blood pressure": 10 * vaso, "mean blood pressure": 7 * vaso,
              "diastolic blood pressure": 4 * vaso, "respiratory rate": -4 * vent, "oxygen saturation": 1.5 * vent}
    for name, mean, sd, coef, prob in VARIABLES:
        count = (rng.random(u.shape) < prob).astype(np.int64) * (1 + (rng.random(u.shape) < 0.25))
        centre = mean + coef * u + effect.get(name, 0)
        first = centre + sd * rng.standard_normal(u.shape)
        second = centre + sd * rng.standard_normal(u.shape)
        hour_mean = np.where(count == 2, (first + second) / 2, first)
        hour_std = np.where(count == 2, np.abs(first - second) / np.sqrt(2), 0.0)
        frame = pd.DataFrame(np.where(count > 0, hour_mean, np.nan))
        filled = frame.ffill(axis=1).fillna(mean).to_numpy()
        out[column(name, "count")] = count
        out[column(name, "mean")] = np.round(filled, 3)
        out[column(name, "std")] = np.round(hour_std, 3)
    return out


def _window_class(state: np.ndarray, start: int) -> str | None:
    """Class of the window starting at ``start`` (None when the state switches inside the gap)."""
    last_in = start + INPUT_H - 1
    gap = state[last_in:start + INPUT_H + GAP_H]
    if gap.min() != gap.max():
        return None
    pred = state[start + INPUT_H + GAP_H:start + INPUT_H + GAP_H + PRED_H]
    x = state[last_in]
    if x == 0:
        return "CONTROL" if pred.max() == 0 else "ONSET"
    return "ON_INTERVENTION" if pred.min() == 1 else "WEAN"


def draw_cohort(n: int, seed: int) -> dict[str, pd.DataFrame]:
    """One cohort of ``n`` ICU stays (one per subject).

    Returns:
        ``static`` (keys, gender, age, ethnicity, first care unit, intime hour, one-hot columns),
        ``outcomes`` (keys + the four stay tasks), ``hourly`` (keys, ``hours_in`` and flattened features for
        every hour of the stay, at most 96), ``windows`` (``subject_id``, ``start`` = :data:`WINDOW_START` and the
        two window classes; at most one per stay).
    """
    rng = np.random.default_rng([seed, 77])
    subject = np.sort(rng.choice(np.arange(10000, 99999), size=n, replace=False))
    keys = pd.DataFrame({"subject_id": subject, "hadm_id": 100000 + np.arange(n) * 7 + rng.integers(0, 7, n),
                         "icustay_id": 200000 + np.arange(n) * 5 + rng.integers(0, 5, n)})
    age = np.clip(rng.normal(64, 16, n), 18, 95).round(1)
    severity = rng.standard_normal(n) + 0.015 * (age - 64)
    e = np.zeros((n, MAX_HOURS))
    e[:, 0] = rng.normal(0, 0.7, n)
    for t in range(1, MAX_HOURS):
        e[:, t] = 0.9 * e[:, t - 1] + rng.normal(0, 0.3, n)
    u = severity[:, None] + e
    los = 1.3 + np.exp(rng.normal(0.9 + 0.6 * severity, 0.5))
    mort_icu = rng.random(n) < _sigmoid(-2.8 + 2.0 * severity + 0.02 * (age - 64))
    mort_hosp = mort_icu | (rng.random(n) < _sigmoid(-3.2 + 1.6 * severity))
    hours = np.minimum((los * 24).astype(int), MAX_HOURS)
    vaso = _switching(rng, u, (rng.random(n) < _sigmoid(-1.8 + 1.2 * severity)).astype(np.int8), (-4.0, 1.4), (-1.6, 1.0))
    vent = _switching(rng, u, (rng.random(n) < _sigmoid(-1.2 + 1.0 * severity)).astype(np.int8), (-4.4, 1.2), (-2.2, 0.8))
    feats = _hourly(rng, u, vaso, vent)
    static = keys.copy()
    static["gender"] = np.where(rng.random(n) < 0.45, "F", "M")
    static["age"] = age
    static["ethnicity"] = rng.choice(ETHNICITIES, n, p=[0.01, 0.04, 0.1, 0.05, 0.1, 0.7])
    static["first_careunit"] = rng.choice(CAREUNITS, n)
    static["intime"] = rng.integers(0, 24, n)
    for g in ("F", "M"):
        static[f"gender_{g}"] = (static["gender"] == g).astype(int)
    bins = np.digitize(age, [30, 50, 70]) + 1
    for b in range(1, 5):
        static[f"age_{b}"] = (bins == b).astype(int)
    for eth in ETHNICITIES:
        static[f"ethnicity_{eth}"] = (static["ethnicity"] == eth).astype(int)
    for unit in CAREUNITS:
        static[f"first_careunit_{unit}"] = (static["first_careunit"] == unit).astype(int)
    outcomes = keys.copy()
    outcomes["mort_icu"], outcomes["mort_hosp"] = mort_icu.astype(int), mort_hosp.astype(int)
    outcomes["los_3"], outcomes["los_7"] = (los > 3).astype(int), (los > 7).astype(int)
    stay, hour = np.nonzero(np.arange(MAX_HOURS)[None, :] < hours[:, None])
    hourly = keys.iloc[stay].reset_index(drop=True)
    hourly["hours_in"] = hour
    for name, values in feats.items():
        hourly[name] = values[stay, hour]
    rows = []
    span = INPUT_H + GAP_H + PRED_H
    for i in range(n):
        if hours[i] < WINDOW_START + span:  # the stay ends before the prediction window
            continue
        labels = [_window_class(vaso[i], WINDOW_START), _window_class(vent[i], WINDOW_START)]
        if None not in labels:
            rows.append((int(subject[i]), WINDOW_START, labels[0], labels[1]))
    windows = pd.DataFrame(rows, columns=["subject_id", "start", "vasopressor", "ventilation"])
    return {"static": static, "outcomes": outcomes, "hourly": hourly, "windows": windows}


def reference_predictions(data: str, task: str) -> pd.DataFrame:
    """The reference model: a standardised logistic regression on per-stay (or per-window) mean and last values.

    Self-contained (its source is shipped as the episode's reference solution and runs in the sandbox).

    Args:
        data: The cohort directory (``/data/mimic_extract`` inside an episode).
        task: One of ``mort_icu, mort_hosp, los_3, los_7, vasopressor, ventilation``.

    Returns:
        Frame ``id, prediction`` for every test id: the positive-class probability (stay tasks) or the class.
    """
    import pandas as pd
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    stay = task not in ("vasopressor", "ventilation")
    sub, key = ("mortality_los", "subject_id") if stay else ("vasopressor_ventilation", "id")

    def features(split: str) -> pd.DataFrame:
        lab = pd.read_csv(f"{data}/{sub}/" + (f"X_lab_{split}.csv" if stay else f"X_windows_{split}.csv"))
        static = pd.read_csv(f"{data}/{sub}/" + (f"X_static_{split}.csv" if stay else f"X_windows_static_{split}.csv"))
        cols = [c for c in lab.columns if c.endswith("__mean")]
        agg = lab.sort_values([key, "hours_in"]).groupby(key)[cols].agg(["mean", "last"])
        agg.columns = [f"{a}|{b}" for a, b in agg.columns]
        onehot = [c for c in static.columns if c.startswith(("gender_", "age_", "ethnicity_", "first_careunit_"))]
        return agg.join(static.set_index(key)[onehot]).sort_index()

    x_train, x_test = features("train"), features("test")
    labels = f"{data}/mortality_los/train_labels.csv" if stay else f"{data}/{sub}/train_window_labels.csv"
    y = pd.read_csv(labels).set_index(key)[task]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=0.5,
                                                               class_weight=None if stay else "balanced"))
    model.fit(x_train.to_numpy(), y.loc[x_train.index].to_numpy())
    pred = model.predict_proba(x_test.to_numpy())[:, 1].round(6) if stay else model.predict(x_test.to_numpy())
    return pd.DataFrame({"id": x_test.index, "prediction": pred})
