"""mimic_extract: MedAgentGym's MIMIC-Extract ``test_tasks.jsonl`` -> one instance per task over the user's files.

A record is ``{"task_name", "task_description", "task_category", "feature_label_directory", "model",
"performance"}``; its data comes from MIMIC-Extract run on MIMIC-III (credentialed): pass ``--data DIR`` holding
the record's feature/label folder (``DIR/mortality_los/``, ``DIR/vasopressor_ventilation/``).

* Stay tasks (``mort_icu``, ``mort_hosp``, ``los_3``, ``los_7``): MedAgentGym's files are read —
  ``X_lab_{train,val,test}.pkl`` (rows ``subject_id, hadm_id, icustay_id, hours_in``; (variable, aggregation)
  columns), ``X_static_{train,val,test}.pkl`` and ``{split}_{task}_labels.csv`` — and written in the family's
  CSV layout (train = train + val; columns flattened to ``'<variable>__<agg>'``; test labels hidden).
* Window tasks (``vasopressor``, ``ventilation``): MIMIC-Extract's window files are not converted; a folder
  already in the family's layout is used as is (``X_windows_{train,test}.csv``, ``X_windows_static_{train,test}
  .csv``, ``train_window_labels.csv`` and ``test_window_labels.csv``, the last moved out of the mounted data).

The instance is made by the family itself (it runs its reference model to set the threshold), so grading is the
family's: full test-id coverage, AUROC / macro-F1, hidden labels. Pickles run code when loaded: import only files
you produced with MIMIC-Extract.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from medagentgym.tasks.base import TaskError, write_bytes_atomic
from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record, read_pickle
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport
from medagentgym.tasks.mimic_extract import HALF

__all__ = ["run"]

COHORT = "imported"
_KEYS = ["subject_id", "hadm_id", "icustay_id", "hours_in"]
_WINDOW_FILES = ("X_windows_train.csv", "X_windows_test.csv", "X_windows_static_train.csv",
                 "X_windows_static_test.csv", "train_window_labels.csv", "test_window_labels.csv")


def _flat(df: pd.DataFrame) -> pd.DataFrame:
    """A MIMIC-Extract frame with its row index as columns and (variable, agg) columns as ``variable__agg``."""
    df = df.copy()
    if isinstance(df.columns, pd.MultiIndex):
        df.columns = ["__".join(str(p) for p in col if str(p)) for col in df.columns]
    return df.reset_index() if any(n in _KEYS for n in (df.index.names or [])) else df


def _stay_files(src: Path, tasks: list[str]) -> dict[str, list[str]]:
    need = {t: [f"{s}_{t}_labels.csv" for s in ("train", "val", "test")] for t in tasks}
    common = [f"X_{kind}_{s}.pkl" for kind in ("lab", "static") for s in ("train", "val", "test")]
    return {t: [f for f in common + files if not (src / f).is_file()] for t, files in need.items()}


def _write_stays(src: Path, cohort: Path, hidden: Path, task: str, opts: ImportOptions) -> None:
    """Convert the stay features once, and add ``task``'s labels to train_labels.csv / hidden test labels."""
    out = cohort / "stay" / HALF["stay"]  # the family's layout: a stay instance mounts <cohort>/stay only
    if not (out / "X_lab_test.csv").is_file():
        out.mkdir(parents=True, exist_ok=True)
        for kind in ("lab", "static"):
            frames = {s: _flat(read_pickle(src / f"X_{kind}_{s}.pkl", opts)) for s in ("train", "val", "test")}
            if kind == "lab":  # the first 24 ICU hours only, as the family does: more rows would give away the stay's length
                frames = {s: df[df["hours_in"] < 24] if "hours_in" in df else df for s, df in frames.items()}
            train = pd.concat([frames["train"], frames["val"]], ignore_index=True)
            for split, df in (("train", train), ("test", frames["test"])):
                write_bytes_atomic(out / f"X_{kind}_{split}.csv", df.to_csv(index=False, lineterminator="\n").encode())
    for split, path in (("train", out / "train_labels.csv"), ("test", hidden / "test_labels.csv")):
        parts = [pd.read_csv(src / f"{s}_{task}_labels.csv") for s in (("train", "val") if split == "train" else ("test",))]
        labels = pd.concat(parts, ignore_index=True)[["subject_id", task]].drop_duplicates("subject_id")
        labels[task] = labels[task].astype(str).str.lower().map({"true": 1, "false": 0, "1": 1, "0": 0})
        if path.is_file():
            labels = pd.read_csv(path).drop(columns=[task], errors="ignore").merge(labels, on="subject_id", how="outer")
        write_bytes_atomic(path, labels.to_csv(index=False, lineterminator="\n").encode())


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every task record of ``paths`` over ``opts.data`` (see the module docstring)."""
    from medagentgym.tasks.mimic_extract import STAY_TASKS, TASKS, MimicExtract

    data = Path(opts.data) if opts.data else None
    cohort, hidden = opts.family_dir / COHORT, opts.family_dir / "hidden" / COHORT
    family = MimicExtract(root=opts.family_dir)
    out: list[Imported] = []
    done: set[str] = set()
    for path, line, record in each_record(paths, report):
        task = str(record.get("task_name") or "")
        if task not in TASKS:
            report.reject(str(path), line, "unknown_task", f"task_name {task!r} is not one of {list(TASKS)}")
            continue
        if task in done:
            report.reject(str(path), line, "duplicate", f"task {task} was imported from an earlier line")
            continue
        folder = "mortality_los" if task in STAY_TASKS else "vasopressor_ventilation"
        src = data / folder if data is not None else None
        missing = (_stay_files(src, [task])[task] if task in STAY_TASKS else
                   [f for f in _WINDOW_FILES if not (src / f).is_file()]) if src is not None else ["all"]
        if missing:
            report.need(str(path), line, (
                f"needs MIMIC-Extract files (credentialed MIMIC-III) for {task}: DIR/{folder}/ with "
                + ("X_lab_{train,val,test}.pkl, X_static_{train,val,test}.pkl, {train,val,test}_<task>_labels.csv"
                   if task in STAY_TASKS else ", ".join(_WINDOW_FILES) + " (this project's window layout)")
                + "; pass --data DIR"))
            continue
        try:
            if task in STAY_TASKS:
                _write_stays(src, cohort, hidden, task, opts)
            else:
                mounted = cohort / "window" / HALF["window"]
                mounted.mkdir(parents=True, exist_ok=True)
                hidden.mkdir(parents=True, exist_ok=True)
                for name in _WINDOW_FILES:
                    shutil.copyfile(src / name, (hidden if name == "test_window_labels.csv" else mounted) / name)
            inst = family._instance(opts.family_dir, COHORT, task, split_of(record, path, opts.split), len(out))
        except TaskError:  # the pickle opt-in is missing: the whole import stops with its one line
            raise
        except Exception as exc:  # noqa: BLE001 - a malformed file or a failing reference: reported per record
            report.reject(str(path), line, "bad_data", f"{type(exc).__name__}: {str(exc)[:160]}")
            continue
        done.add(task)
        out.append(Imported(inst.model_copy(update={
            "id": f"mimic_extract/{inst.split}/imported-{task}",
            "metadata": {**inst.metadata, "source": "MIMIC-Extract",
                         "original_performance": record.get("performance")}}), str(path), line))
        report.keep()
    return out
