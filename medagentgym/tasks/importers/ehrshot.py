"""ehrshot: MedAgentGym's EHRSHOT ``task.jsonl`` -> one instance per task over the user's EHRSHOT files.

A record is ``{"task_id", "task_name", "task_description"}``; its data is EHRSHOT's (Stanford, gated): pass
``--data DIR`` holding ``clmbr_train.pkl``, ``clmbr_val.pkl``, ``clmbr_test.pkl`` (dicts with ``data_matrix``,
``patient_ids``, ``labeling_time``: one CLMBR embedding per labelled visit) and ``<task_name>/{train,val,test}
_labels.csv`` (``patient_id, value, label_type, prediction_time``), as MedAgentGym lays them out. Pickles run
code when loaded: import only the files of EHRSHOT's own release.

Each label row is joined to its embedding row by (patient id, labeling time = prediction time). Train = the
train and val rows; test = the test rows, one per patient (the latest; the original grader also kept one value
per patient). The cohort is written in the family's layout (``data/imported/<task>/`` mounted, ``hidden/`` not)
and the instance is made by the family itself, which runs its reference model to set the threshold; a task on
which the reference model does not beat chance is rejected.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medagentgym.tasks.base import write_bytes_atomic
from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record, read_pickle
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport

__all__ = ["load_split", "run"]

NEED = ("needs EHRSHOT's files: clmbr_train.pkl, clmbr_val.pkl, clmbr_test.pkl and <task>/{train,val,test}"
        "_labels.csv in DIR (MedAgentGym's layout); pass --data DIR")


def _pid(value: Any) -> int:
    text = str(value)
    return int(text.split("(")[-1].split(")")[0]) if "tensor" in text else int(float(text))


def _time(value: Any) -> str:
    return pd.Timestamp(value).isoformat()


def _label(value: Any) -> int:
    text = str(value).strip().lower()
    return int(text == "true") if text in ("true", "false") else int(float(text))


def load_split(data: Path, task: str, split: str, opts: ImportOptions) -> tuple[np.ndarray, pd.DataFrame]:
    """``(embeddings, labels frame patient_id/label/time)`` of one split, joined on (patient, time).

    Raises:
        ValueError: A file is missing or malformed (the message names it).
        TaskError: The pickle needs ``opts.allow_pickle`` (``--allow-pickle``).
    """
    features = read_pickle(data / f"clmbr_{split}.pkl", opts)
    if not isinstance(features, dict) or not {"data_matrix", "patient_ids", "labeling_time"} <= set(features):
        raise ValueError(f"clmbr_{split}.pkl is not a dict with data_matrix, patient_ids, labeling_time")
    matrix = np.asarray(features["data_matrix"], dtype=np.float32)
    index = {(_pid(p), _time(t)): k for k, (p, t) in enumerate(zip(features["patient_ids"], features["labeling_time"]))}
    labels = pd.read_csv(data / task / f"{split}_labels.csv")
    rows, keep = [], []
    for pid, value, when in zip(labels["patient_id"], labels["value"], labels["prediction_time"]):
        k = index.get((_pid(pid), _time(when)))
        if k is not None:
            rows.append((_pid(pid), _label(value), _time(when)))
            keep.append(k)
    return matrix[keep], pd.DataFrame(rows, columns=["patient_id", "label", "time"])


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _write_cohort(family_dir: Path, key: str, data: Path, task: str, opts: ImportOptions) -> int:
    """Write the family's cohort files for ``task``; returns the embedding width."""
    parts = [load_split(data, task, s, opts) for s in ("train", "val")]
    x_train = np.concatenate([p[0] for p in parts])
    y_train = pd.concat([p[1] for p in parts], ignore_index=True)
    x_test, y_test = load_split(data, task, "test", opts)
    last = y_test.reset_index().sort_values(["patient_id", "time"]).groupby("patient_id").tail(1).sort_values("index")
    x_test, y_test = x_test[last["index"].to_numpy()], last.reset_index(drop=True)
    if len(y_train) == 0 or len(y_test) == 0:
        raise ValueError(f"no label row of {task} matches an embedding row (patient id and time)")
    out, hidden = family_dir / "data" / key, family_dir / "hidden" / key
    write_bytes_atomic(out / "train_embeddings.npy", _npy(x_train))
    write_bytes_atomic(out / "train_labels.csv", y_train[["patient_id", "label"]].to_csv(index=False).encode())
    write_bytes_atomic(out / "test_embeddings.npy", _npy(x_test))
    write_bytes_atomic(out / "test_ids.csv", y_test[["patient_id"]].to_csv(index=False).encode())
    write_bytes_atomic(hidden / "test_labels.csv", y_test[["patient_id", "label"]].to_csv(index=False).encode())
    return int(x_train.shape[1])


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every task record of ``paths`` over ``opts.data`` (see the module docstring)."""
    from medagentgym.tasks.ehrshot import _BY_NAME, DIMS, EHRShot

    data = Path(opts.data) if opts.data else None
    family = EHRShot(root=opts.family_dir)
    out: list[Imported] = []
    for path, line, record in each_record(paths, report):
        name = str(record.get("task_name") or "")
        if name not in _BY_NAME:
            report.reject(str(path), line, "unknown_task", f"task_name {name!r} is not one of EHRSHOT's 15 tasks")
            continue
        files = [f"clmbr_{s}.pkl" for s in ("train", "val", "test")] + [f"{name}/{s}_labels.csv"
                                                                        for s in ("train", "val", "test")]
        if data is None or not all((data / f).is_file() for f in files):
            report.need(str(path), line, NEED)
            continue
        split = split_of(record, path, opts.split)
        key = f"imported/{name}"
        try:
            dims = _write_cohort(opts.family_dir, key, data, name, opts)
            inst = family._instance(opts.family_dir, key, _BY_NAME[name], "all", split, len(out))
        except (ValueError, KeyError, OSError) as exc:
            report.reject(str(path), line, "bad_data", f"{type(exc).__name__}: {exc}")
            continue
        if inst is None:
            report.reject(str(path), line, "no_lift", "the reference model does not beat chance on this task")
            continue
        inst = inst.model_copy(update={
            "id": f"ehrshot/{split}/imported-{name}", "context": inst.context.replace(f"{DIMS}-dim", f"{dims}-dim"),
            "metadata": {**inst.metadata, "source_id": record.get("task_id"), "source": "EHRSHOT"}})
        out.append(Imported(inst, str(path), line))
        report.keep()
    return out
