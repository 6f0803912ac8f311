"""ehrshot: train a model on patient embeddings and predict 15 EHRSHOT outcomes (synthetic, labels hidden).

Description:
    The 15 EHRSHOT tasks (operational outcomes guo_los/guo_readmission/guo_icu, five anticipated lab results
    lab_* with 4 severity classes, six new diagnoses new_*, and 14 CheXpert findings as a 14-bit integer; names,
    meanings and label types from EHRSHOT, medagentgym/tasks/data/ehrshot/tasks.json). Each instance mounts ONLY its own
    cohort folder at /data/ehrshot/: CLMBR-like dense patient embeddings (64 float32 dims, ``.npy``) with
    labels for its (k-shot) training patients and ids only for the test patients. Instances of one task share
    patients (the k-shot draws are subsets of the "all" cohort), so a k-shot instance must not see the other
    cohorts' folders: they hold the full label set of its training patients. Labels come from a hidden model
    of the latent patient state plus noise, so they are learnable from the embeddings. Few-shot instances
    follow EHRSHOT's setting: only k labelled training examples per class (per finding for chexpert) are given,
    k in {all, 128, 32, 8}. Each instance's chance baseline is measured by permutation when it is built
    (``medagentgym.tasks.floors.null_metric``, 200 draws of each predictor that reads no feature: constants,
    uniform and train-proportional random output, the test labels permuted, the reference model's predictions
    permuted across patients): ``chance`` is the best such predictor's mean metric and ``null_high`` the largest
    mean + 3 standard deviations. An instance is kept only when the reference model clears ``null_high`` by
    max(0.03, one standard deviation); a few-shot draw that does not is redrawn (up to 5 times), else the
    instance is dropped (listed in the manifest). The test labels live under ``hidden/`` in the built
    directory, which is never mounted. All data are synthetic.

Example instance:
    question: "EHRSHOT task guo_los (operational outcomes): predict whether the hospital visit lasts at least 7
               days ... Write predictions.csv ... columns id,prediction ... Metric: AUROC."
    answer:   "predictions.csv"   answer_type: "text"   category: "guo_los"
    solution: "import numpy as np ... LogisticRegression ... to_csv('predictions.csv', index=False)"

Allowed actions:
    code_execution (python), terminal, debugging, submit_answer (the original's set; no database to query).

Grading:
    Outside the sandbox, after the agent submits the text ``predictions.csv``: the file in the episode
    workspace is read through ``medagentgym.sandbox.hostio`` (never by name: a symlink, FIFO, hard link, directory or a
    file over 20 MB is a wrong answer) and must be a CSV with columns ``id`` (or ``patient_id``) and
    ``prediction`` and exactly one row per test id (missing, duplicate, unknown or non-integral ids such as
    ``1e999`` score 0; the original scored only the ids the agent chose to predict). Metric: AUROC of the
    predicted probability (boolean tasks); balanced accuracy of the predicted class 0-3 (lab tasks; plain
    accuracy, the original's metric, lets a constant "normal" earn the majority share, so it is only
    reported); macro-F1 over the 14 findings decoded from the predicted integer (chexpert).
    ``Verdict.score`` = the share of the reference model's lift above the no-information spread that the
    submission recovers, clip((metric - null_high) / (reference - null_high), 0, 1), where ``null_high`` (see
    above) is what predictions reading no feature reach with probability ~0.1 %, and the reference is the
    scikit-learn logistic regression of the reference solution (its metric is in ``metadata["reference_metric"]``).
    ``correct`` = score >= 0.8, i.e. metric >= ``metadata["correct_threshold"]`` = null_high + 0.8 (reference -
    null_high). Random predictions therefore earn nothing, not the half of the chance-to-reference gap they
    reached by luck when the zero point was the chance mean.

Episode end:
    The graded submit (terminated), or a budget (turns, tokens, wall time: truncated). Default 12 turns.

Arguments:
    ``tasks.make("ehrshot", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/ehrshot/{data/, hidden/, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed.
    tiny: 300 train / 400 test patients per cohort, k in {all, 32} (up to 60 instances); default: 1,500 / 600
    patients, k in {all, 128, 32, 8} (up to 120 instances). Train and test instances use different cohorts.

Version history:
    1: first version (15 tasks, hidden labels, full-coverage scoring, normalised partial credit).
    2: each instance mounts only its own cohort folder (a k-shot instance could read the full labels of its
       training patients); predictions read through ``medagentgym.sandbox.hostio``; malformed ids are wrong answers.
    3: chance measured by permutation over every no-information predictor; instances kept only above its
       spread, partial credit and the pass threshold measured from mean + 3 sd (random predictions earned full
       reward on a few-shot hyperkalemia instance in 19.7 % of draws); hyperkalemia's potassium sd 0.8 -> 1.0
       (a severe class of 4 test patients made its balanced accuracy pure noise); tiny test cohorts 200 -> 400.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from medagentgym.sandbox.hostio import UnsafeWorkspaceFile, read_workspace_file
from medagentgym.tasks.base import (
    GradeContext,
    GraderError,
    Instance,
    Size,
    Split,
    TaskError,
    Verdict,
    load_instances,
    run_then_submit,
    write_bytes_atomic,
    write_instances,
    write_manifest,
)
from medagentgym.tasks.graders import looks_like_error

__all__ = ["TASKS", "EHRShot", "run_reference", "score_predictions", "solution_code"]

TASKS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "ehrshot" / "tasks.json").read_text(encoding="utf-8"))["tasks"]
_BY_NAME = {t["name"]: t for t in TASKS}
_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"train": 300, "test": 400, "ks": ("all", 32)},
    "default": {"train": 1500, "test": 600, "ks": ("all", 128, 32, 8)},
}
DIMS, LATENT = 64, 16
MOUNT = "ehrshot"
PREDICTIONS = "predictions.csv"
CORRECT_SHARE = 0.8
#: The reference model must beat the no-information spread (``null_high``) by this much and by one standard
#: deviation of it (else the few-shot sample is redrawn, up to _DRAWS times; an "all" cohort is dropped).
_MIN_LIFT, _DRAWS = 0.03, 5
#: Permutations per no-information predictor when an instance's chance baseline is measured.
NULL_PERMUTATIONS = 200
_MAX_FILE_BYTES = 20 << 20
_ACCEPTED_SUBMISSIONS = {PREDICTIONS, f"./{PREDICTIONS}", f"/workspace/{PREDICTIONS}"}
_METRIC = {"boolean": "AUROC", "categorical": "balanced accuracy", "multilabel": "macro-F1 over the 14 findings"}
_PREDICTION = {
    "boolean": "the predicted probability that the label is true (any real score; only the ranking matters)",
    "categorical": "the predicted class, an integer 0-3",
    "multilabel": "the predicted findings as one 14-bit integer (No Finding is the most significant bit)",
}


# -- synthetic cohorts ---------------------------------------------------------------------------------------
def _encoder(seed: int) -> np.ndarray:
    """The fixed 'CLMBR' map from the latent patient state to embedding space (shared by every task)."""
    return np.random.default_rng([seed, 7]).normal(size=(LATENT, DIMS)) / math.sqrt(LATENT)


def _labels(task: dict[str, Any], z: np.ndarray, rng: np.random.Generator, task_rng: np.random.Generator
            ) -> np.ndarray:
    """Labels from a hidden model of the latent state ``z`` (task directions from ``task_rng``) plus noise."""
    def score(direction: np.ndarray) -> np.ndarray:
        return z @ (direction / np.linalg.norm(direction))

    if task["label_type"] == "boolean":
        u = 2.5 * score(task_rng.normal(size=LATENT)) + rng.logistic(size=len(z))
        return (u > np.quantile(u, 1 - task["prevalence"])).astype(int)
    if task["label_type"] == "categorical":
        lab = task["lab"]
        value = lab["mean"] + lab["sd"] * (0.9 * score(task_rng.normal(size=LATENT)) + 0.45 * rng.normal(size=len(z)))
        cuts = np.asarray(lab["cuts"], float)
        if lab["low_is_abnormal"]:
            return (value[:, None] < cuts[None, :]).sum(axis=1)
        return (value[:, None] > cuts[None, :]).sum(axis=1)
    shared = task_rng.normal(size=LATENT)
    bits = np.zeros((len(z), 14), dtype=np.int64)
    for j, prevalence in enumerate(task["finding_prevalence"][1:], start=1):
        u = 2.5 * score(shared + task_rng.normal(size=LATENT)) + rng.logistic(size=len(z))
        bits[:, j] = u > np.quantile(u, 1 - prevalence)
    bits[:, 0] = bits[:, 1:].sum(axis=1) == 0
    return bits @ (1 << np.arange(13, -1, -1))


def _cohort(task: dict[str, Any], n: int, seed: int, split: Split, encoder: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, embeddings float32, labels)`` of one task's cohort for one instance split."""
    rng = np.random.default_rng([seed, TASKS.index(task), 0 if split == "train" else 1])
    task_rng = np.random.default_rng([seed, TASKS.index(task), 2])  # the hidden model is the same in both splits
    z = rng.normal(size=(n, LATENT))
    x = np.tanh(z @ encoder) + 0.3 * rng.normal(size=(n, DIMS))
    ids = rng.permutation(n) + (100_000 if split == "train" else 500_000) + 1_000_000 * TASKS.index(task)
    return ids, x.astype(np.float32), _labels(task, z, rng, task_rng)


def _strata(task: dict[str, Any], y: np.ndarray) -> list[np.ndarray]:
    """Index groups a k-shot sample draws k from: classes, or patients positive for each finding."""
    if task["label_type"] != "multilabel":
        return [np.flatnonzero(y == c) for c in np.unique(y)]
    return [np.flatnonzero((y >> (13 - j)) & 1) for j in range(14)]


def _k_shot(task: dict[str, Any], y: np.ndarray, k: int | str, rng: np.random.Generator) -> np.ndarray:
    if k == "all":
        return np.arange(len(y))
    chosen: set[int] = set()
    for group in _strata(task, y):
        free = np.asarray(sorted(set(group.tolist()) - chosen), dtype=int)
        chosen.update(rng.choice(free, size=min(k, len(free)), replace=False).tolist())
    return np.asarray(sorted(chosen), dtype=int)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _csv(header: str, rows: Any) -> bytes:
    return (header + "\n" + "".join(",".join(str(v) for v in row) + "\n" for row in rows)).encode()


# -- reference solution and scoring ---------------------------------------------------------------------------
def solution_code(label_type: str, data_dir: str = f"/data/{MOUNT}", out_path: str = PREDICTIONS) -> str:
    """The reference program: standardise, fit scikit-learn logistic regression, write the predictions CSV.

    Args:
        label_type: ``"boolean"``, ``"categorical"`` or ``"multilabel"``.
        data_dir: Where the cohort is mounted (``/data/ehrshot`` in the sandbox).
        out_path: Where to write the predictions (``predictions.csv`` in the workspace).
    """
    head = f'''import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

DATA = {data_dir!r}
X_train = np.load(f"{{DATA}}/train_embeddings.npy")
y_train = pd.read_csv(f"{{DATA}}/train_labels.csv")["label"].to_numpy()
X_test = np.load(f"{{DATA}}/test_embeddings.npy")
test_ids = pd.read_csv(f"{{DATA}}/test_ids.csv")["patient_id"].to_numpy()


def fit(y, **kw):
    return make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000, **kw)).fit(X_train, y)

'''
    if label_type == "boolean":
        body = "prediction = fit(y_train).predict_proba(X_test)[:, 1]\n"
    elif label_type == "categorical":
        body = "prediction = fit(y_train, class_weight='balanced').predict(X_test)\n"
    else:
        body = '''bits = (y_train[:, None] >> np.arange(13, -1, -1)) & 1  # column 0 = No Finding (most significant bit)
predicted = np.zeros((len(X_test), 14), dtype=np.int64)
for j in range(14):
    if bits[:, j].min() == bits[:, j].max():  # a finding never (or always) seen: predict the constant
        predicted[:, j] = bits[0, j]
    else:
        predicted[:, j] = fit(bits[:, j], class_weight="balanced").predict(X_test)
prediction = predicted @ (1 << np.arange(13, -1, -1))
'''
    tail = f'pd.DataFrame({{"id": test_ids, "prediction": prediction}}).to_csv({out_path!r}, index=False)\n'
    return head + body + tail


def _auroc(y: np.ndarray, score: np.ndarray) -> float:
    from scipy.stats import rankdata

    ranks = rankdata(score)
    pos = y == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _macro_f1(truth: np.ndarray, pred: np.ndarray) -> tuple[float, float]:
    """Macro-F1 over findings that occur in ``truth``, and the same for predicting every finding."""
    t = (truth[:, None] >> np.arange(13, -1, -1)) & 1
    p = (pred[:, None] >> np.arange(13, -1, -1)) & 1
    present = t.sum(axis=0) > 0
    tp = (t & p).sum(axis=0)
    f1 = 2 * tp / np.maximum(t.sum(axis=0) + p.sum(axis=0), 1)
    prev = t.mean(axis=0)
    return float(f1[present].mean()), float((2 * prev / (1 + prev))[present].mean())


def _read_predictions(workspace: Path, label_type: str) -> tuple[dict[int, float] | None, str]:
    """Read and parse ``<workspace>/predictions.csv`` (through ``medagentgym.sandbox.hostio``); ``(None, why)`` when malformed."""
    try:
        data = read_workspace_file(workspace, PREDICTIONS, max_bytes=_MAX_FILE_BYTES)
    except UnsafeWorkspaceFile as exc:
        return None, str(exc)
    try:
        rows = list(csv.reader(data.decode("utf-8", errors="replace").splitlines()))
    except csv.Error as exc:
        return None, f"{PREDICTIONS} is not a readable CSV ({exc})"
    header = [h.strip().lower() for h in rows[0]] if rows else []
    id_col = "id" if "id" in header else "patient_id" if "patient_id" in header else None
    if id_col is None or "prediction" not in header:
        return None, f"{PREDICTIONS} needs a header with columns id (or patient_id) and prediction, got {header[:4]}"
    i, j = header.index(id_col), header.index("prediction")
    out: dict[int, float] = {}
    for n, row in enumerate(rows[1:], start=2):
        try:
            key, value = float(row[i]), float(row[j])
        except (ValueError, IndexError):
            return None, f"{PREDICTIONS} line {n}: id and prediction must be numbers, got {[c[:20] for c in row[:3]]}"
        if not math.isfinite(key) or key != int(key):
            return None, f"{PREDICTIONS} line {n}: id {row[i][:20]!r} is not an integer patient id"
        if not math.isfinite(value):
            return None, f"{PREDICTIONS} line {n}: prediction {row[j][:20]!r} is not finite"
        if label_type != "boolean" and value != int(value):
            return None, f"{PREDICTIONS} line {n}: prediction {row[j][:20]!r} must be an integer for this task"
        if int(key) in out:
            return None, f"{PREDICTIONS}: id {int(key)} appears twice"
        out[int(key)] = value
    return out, ""


def metric_of(label_type: str, y: np.ndarray, p: np.ndarray) -> float:
    """The task metric of predictions ``p`` against labels ``y`` (both ordered by patient id)."""
    if label_type == "boolean":
        return _auroc(y, p)
    if label_type == "categorical":
        return float(np.mean([(p[y == c] == c).mean() for c in np.unique(y)]))
    return _macro_f1(y, p.astype(np.int64))[0]


def score_predictions(label_type: str, workspace: Path, truth: dict[int, int]) -> tuple[float | None, str]:
    """``(metric, reason)`` of ``<workspace>/predictions.csv`` against the hidden labels; metric None when the
    file is invalid (the reason says why)."""
    predicted, why = _read_predictions(workspace, label_type)
    if predicted is None:
        return None, why
    missing, extra = set(truth) - set(predicted), set(predicted) - set(truth)
    if missing or extra:
        return None, (f"predictions must cover exactly the {len(truth)} test ids: {len(missing)} missing, "
                      f"{len(extra)} unknown")
    ids = sorted(truth)
    y = np.asarray([truth[i] for i in ids], dtype=np.int64)
    p = np.asarray([predicted[i] for i in ids], dtype=float)
    if label_type == "categorical":
        return metric_of(label_type, y, p), f"(plain accuracy {float((p == y).mean()):.3f})"
    if label_type == "multilabel" and ((p < 0) | (p >= 1 << 14)).any():
        return None, "chexpert predictions must be integers in [0, 16383]"
    return metric_of(label_type, y, p), ""


def _bits(y: np.ndarray) -> np.ndarray:
    return (np.asarray(y, dtype=np.int64)[:, None] >> np.arange(13, -1, -1)) & 1


def _from_bits(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.int64) @ (1 << np.arange(13, -1, -1))


def _null_predictors(label_type: str, train_y: np.ndarray, n: int) -> dict[str, Any]:
    """Predictors that read no feature, for ``n`` test patients: constants, uniform and train-proportional
    random draws (``draw(rng) -> predictions``). The labels' own permutation is added by the caller."""
    from medagentgym.tasks.floors import constant_predictor

    if label_type == "boolean":
        return {"constant 0.5": constant_predictor(np.full(n, 0.5)), "uniform random": lambda rng: rng.random(n)}
    if label_type == "categorical":
        classes, counts = np.unique(train_y, return_counts=True)
        out: dict[str, Any] = {f"constant {c}": constant_predictor(np.full(n, float(c))) for c in classes}
        out["uniform random class"] = lambda rng: rng.choice(classes, n).astype(float)
        out["train-proportional random"] = lambda rng: rng.choice(classes, n, p=counts / counts.sum()).astype(float)
        return out
    prevalence = _bits(train_y).mean(axis=0)
    majority = _from_bits((prevalence >= 0.5).astype(np.int64)[None, :])[0]
    return {"constant every finding": constant_predictor(np.full(n, float((1 << 14) - 1))),
            "constant train majority": constant_predictor(np.full(n, float(majority))),
            "train-prevalence random": lambda rng: _from_bits(rng.random((n, 14)) < prevalence).astype(float)}


def null_baseline(label_type: str, y: np.ndarray, reference: np.ndarray, train_y: np.ndarray, seed: Any
                  ) -> dict[str, Any]:
    """The instance's chance baseline by permutation (``medagentgym.tasks.floors.null_metric``): constants,
    uniform and train-proportional random predictions, the test labels permuted (class-proportional random with
    the test shares) and the reference model's predictions permuted across patients."""
    from medagentgym.tasks.floors import null_metric

    predictors = _null_predictors(label_type, train_y, len(y))
    predictors["permuted labels"] = lambda rng: rng.permutation(y).astype(float)
    predictors["permuted reference"] = lambda rng: rng.permutation(reference)
    return null_metric(lambda p: metric_of(label_type, y, p), predictors, draws=NULL_PERMUTATIONS, seed=seed)


def _read_truth(path: Path) -> dict[int, int]:
    rows = list(csv.reader(path.read_text(encoding="utf-8").splitlines()))[1:]
    return {int(r[0]): int(r[1]) for r in rows}


def run_reference(code: str) -> None:
    """Execute a reference program in-process with one BLAS/OpenMP thread (the sandbox's setting).

    Threaded BLAS makes these small fits several times slower on a busy machine and can change the last bits
    of the fitted weights between hosts.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        namespace = {"__name__": "__ehrshot_reference__"}
        exec(compile(code, "<ehrshot-reference>", "exec"), namespace)  # noqa: S102 - our reference, not agent code


class EHRShot:
    """The ehrshot family (see the module docstring for the spec card)."""

    name = "ehrshot"
    version = 3
    #: Grading reads predictions.csv from the episode workspace, so contract checks replay in a real sandbox.
    needs_sandbox = True
    actions = frozenset({"code_execution", "terminal", "debugging", "submit_answer"})

    def __init__(self, root: Path | str) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/ehrshot``)."""
        self.root = Path(root)

    @property
    def categories(self) -> list[str]:
        """The 15 EHRSHOT task names, in EHRSHOT's order."""
        return [t["name"] for t in TASKS]

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Instance counts for ``size`` without building: tasks x k values x 2 splits."""
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        return {"categories": len(TASKS), "instances": len(TASKS) * len(_SIZES[size]["ks"]) * 2}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write cohorts (mounted data + hidden labels), run the reference model, write instances and a manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` (tests) or ``"default"``.
            seed: Seeds cohorts, hidden models and k-shot draws; the same seed gives byte-identical files.

        Returns:
            The manifest (counts, seed, size, version, reference metrics, sha256 per file).

        Raises:
            TaskError: Unknown size. A cohort whose reference does not clear the no-information spread (after
                redrawing a few-shot sample) is dropped and listed under ``dropped``, not an error.
        """
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        family_dir = Path(out_dir) / self.name
        conf, encoder = _SIZES[size], _encoder(seed)
        splits: dict[str, list[Instance]] = {"train": [], "test": []}
        dropped: list[str] = []
        for split in ("train", "test"):
            for task in TASKS:
                for k in conf["ks"]:
                    key = f"{split}/{task['name']}_k{k}"
                    for attempt in range(1 if k == "all" else _DRAWS):
                        self._write_cohort(family_dir, key, task, k, conf, seed, split, encoder, attempt)
                        inst = self._instance(family_dir, key, task, k, split, len(splits[split]))
                        if inst is not None:
                            splits[split].append(inst)
                            break
                    else:  # the reference never cleared the no-information spread: no instance, no files
                        dropped.append(f"{key}: the reference model does not clear the no-information spread "
                                       "(mean + 3 sd of predictions that read no feature) by its margin")
                        for part in ("data", "hidden"):
                            shutil.rmtree(family_dir / part / key)
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        return write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed, dropped=dropped,
            counts={split: len(items) for split, items in splits.items()},
            reference_metric={i.id: i.metadata["reference_metric"] for items in splits.values() for i in items},
        )

    def _write_cohort(self, family_dir: Path, key: str, task: dict[str, Any], k: int | str, conf: dict[str, Any],
                      seed: int, split: Split, encoder: np.ndarray, attempt: int) -> None:
        n_train, n_test = conf["train"], conf["test"]
        ids, x, y = _cohort(task, n_train + n_test, seed, split, encoder)
        rng = np.random.default_rng([seed, TASKS.index(task), 3, 0 if k == "all" else int(k), attempt])
        keep = _k_shot(task, y[:n_train], k, rng)
        data, hidden = family_dir / "data" / key, family_dir / "hidden" / key
        write_bytes_atomic(data / "train_embeddings.npy", _npy(x[:n_train][keep]))
        write_bytes_atomic(data / "train_labels.csv", _csv("patient_id,label", zip(ids[keep], y[keep])))
        write_bytes_atomic(data / "test_embeddings.npy", _npy(x[n_train:]))
        write_bytes_atomic(data / "test_ids.csv", _csv("patient_id", ((i,) for i in ids[n_train:])))
        write_bytes_atomic(hidden / "test_labels.csv", _csv("patient_id,label", zip(ids[n_train:], y[n_train:])))

    def _instance(self, family_dir: Path, key: str, task: dict[str, Any], k: int | str, split: Split,
                  index: int) -> Instance | None:
        import tempfile

        label_type = task["label_type"]
        truth = _read_truth(family_dir / "hidden" / key / "test_labels.csv")
        with tempfile.TemporaryDirectory() as tmp:  # EXECUTE the reference solution on the host copy of the mount
            out = Path(tmp) / PREDICTIONS
            run_reference(solution_code(label_type, str(family_dir / "data" / key), str(out)))
            metric, why = score_predictions(label_type, Path(tmp), truth)
            predicted, _ = _read_predictions(Path(tmp), label_type)
        if metric is None or predicted is None:
            raise TaskError(f"ehrshot {key}: the reference predictions are invalid ({why})")
        ids = sorted(truth)
        train_y = np.asarray(list(_read_truth(family_dir / "data" / key / "train_labels.csv").values()))
        null = null_baseline(label_type, np.asarray([truth[i] for i in ids]),
                             np.asarray([predicted[i] for i in ids]), train_y,
                             seed=int(hashlib.sha256(key.encode()).hexdigest()[:8], 16))
        # Kept only when the reference clears what no-information predictions reach (mean + 3 sd), by a margin.
        if metric - null["high"] < max(_MIN_LIFT, null["sd"]):
            return None
        shots = ("all labelled training patients are given" if k == "all" else
                 f"few-shot setting: only k = {k} labelled training examples per "
                 f"{'finding' if label_type == 'multilabel' else 'class'} are given")
        question = (
            f"EHRSHOT task {task['name']} ({task['group']}): predict {task['description']}. Train a model on the "
            f"patient embeddings and labels in /data/{MOUNT}/ ({shots}), predict every test patient, and write "
            f"{PREDICTIONS} in your working directory with columns id,prediction: one row per id in test_ids.csv, "
            f"prediction = {_PREDICTION[label_type]}. Then submit the text {PREDICTIONS}. Metric: "
            f"{_METRIC[label_type]}.")
        context = (
            f"Files in /data/{MOUNT}/ (read-only): train_embeddings.npy (float32, one {DIMS}-dim CLMBR-style "
            "embedding per row), train_labels.csv (patient_id,label; row i labels row i of train_embeddings.npy), "
            "test_embeddings.npy, test_ids.csv (patient_id; row i is row i of test_embeddings.npy). Test labels "
            "are hidden; the file is scored after you submit. numpy, pandas, scipy and scikit-learn are available.")
        return Instance(
            id=f"{self.name}/{split}/{index:04d}", family=self.name, category=task["name"], split=split,
            question=question, context=context, answer=PREDICTIONS, answer_type="text",
            solution=solution_code(label_type, f"/data/{MOUNT}"), solution_lang="python",
            # Only this cohort, under the family's one mount name: a worker that served another cohort restarts
            # with this one instead of keeping both (a new NAME would stay attached for later sessions).
            data={MOUNT: f"data/{key}"},
            metadata={"cohort": key, "label_type": label_type, "k": k, "hidden_labels": f"hidden/{key}/test_labels.csv",
                      "metric": _METRIC[label_type], "reference_metric": metric, "chance": null["chance"],
                      "chance_by": null["chance_by"], "null_high": null["high"], "null_sd": null["sd"],
                      "correct_threshold": null["high"] + CORRECT_SHARE * (metric - null["high"]),
                      "reference_model": "StandardScaler + LogisticRegression(C=0.1)"},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def null_submissions(self, instance: Instance, rng: np.random.Generator) -> list[tuple[str, str, dict[str, bytes]]]:
        """Predictions that read no feature, for the reward floor (``medagentgym.tasks.floors``): one
        ``(predictor, answer, {"predictions.csv": bytes})`` per no-information predictor (constants, uniform and
        train-proportional random), every test id covered, drawn with ``rng``."""
        data = Path(self.root) / instance.data[MOUNT]
        ids = [int(r[0]) for r in csv.reader((data / "test_ids.csv").read_text(encoding="utf-8").splitlines()[1:])]
        train_y = np.asarray(list(_read_truth(data / "train_labels.csv").values()))
        out = []
        for name, draw in _null_predictors(instance.metadata["label_type"], train_y, len(ids)).items():
            values = draw(rng)
            text = [f"{i},{int(v) if instance.metadata['label_type'] != 'boolean' else float(v)!r}"
                    for i, v in zip(ids, values)]
            out.append((name, PREDICTIONS, {PREDICTIONS: ("id,prediction\n" + "\n".join(text) + "\n").encode()}))
        return out

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Train the logistic regression and write predictions.csv in the workspace, then submit its name."""
        return run_then_submit("python", instance.solution, PREDICTIONS)

    def replay(self, instance: Instance, steps: list[dict[str, Any]]) -> float:
        """Replay reference steps without a sandbox: the score of their final submission (for ``check_family``).

        Only the instance's own reference program is executed (in-process, with the mount mapped to its host
        directory and the output into a fresh temporary workspace); any other code is refused, because this
        path has no isolation. Steps without code (e.g. a bare submission) are graded on an empty workspace.

        Raises:
            TaskError: A step carries code other than the instance's reference program.
        """
        import tempfile

        with tempfile.TemporaryDirectory() as ws:
            for step in steps[:-1]:
                code = step.get("params", {}).get("code")
                if step.get("action") != "code_execution" or code != instance.solution:
                    raise TaskError(f"{instance.id}: replay runs only the reference program, not {code!r:.60}")
                run_reference(solution_code(instance.metadata["label_type"],
                                            str(self.root / instance.data[MOUNT]),
                                            str(Path(ws) / PREDICTIONS)))
            ctx = GradeContext(workspace=Path(ws), family_dir=self.root)
            return self.grade(instance, steps[-1]["params"]["answer"], ctx).score

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Score ``predictions.csv`` from the episode workspace against the hidden labels (see the spec card).

        Raises:
            GraderError: No workspace in ``ctx`` (the file cannot be read), the hidden labels are missing, or the
                instance comes from a v1 build (rebuild). All are infrastructure failures (reward None).
        """
        text = (submission or "").strip()
        if not text or looks_like_error(text) or text not in _ACCEPTED_SUBMISSIONS:
            return Verdict(correct=False, score=0.0,
                           reason=f"submit exactly the text {PREDICTIONS} after writing the file, got {text[:40]!r}")
        if ctx is None or ctx.workspace is None:
            raise GraderError("ehrshot grades predictions.csv in the episode workspace; pass "
                              "GradeContext(workspace=<host path of the workspace>)")
        if instance.data.get(MOUNT) == "data":  # v1 mounted every cohort: its episodes could read other labels
            raise GraderError(f"{instance.id} was built by ehrshot v1 (whole data folder mounted); rebuild the family")
        labels = Path(ctx.family_dir or self.root) / instance.metadata["hidden_labels"]
        if not labels.is_file():
            raise GraderError(f"hidden labels of {instance.id} are missing ({labels}); rebuild the family")
        meta = instance.metadata
        metric, why = score_predictions(meta["label_type"], Path(ctx.workspace), _read_truth(labels))
        if metric is None:
            return Verdict(correct=False, score=0.0, reason=why)
        reference = meta["reference_metric"]
        zero = meta.get("null_high", meta["chance"])  # v2 instances: the plain chance level
        share = 1.0 if metric >= reference else max(0.0, (metric - zero) / (reference - zero))
        return Verdict(correct=share >= CORRECT_SHARE, score=share,
                       reason=(f"{meta['metric']} {metric:.4f} (reference {reference:.4f}, no-information level "
                               f"{zero:.4f}) {why}"))
