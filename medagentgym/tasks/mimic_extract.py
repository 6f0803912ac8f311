"""mimic_extract: train a model on MIMIC-Extract-style hourly ICU features; predictions scored on hidden labels.

Description:
    The six MIMIC-Extract benchmark tasks over a seeded synthetic ICU cohort (``medagentgym.tasks.ehr_synth.extract``; no
    credentialed data): ICU mortality (``mort_icu``), hospital mortality (``mort_hosp``), ICU stay > 3 days
    (``los_3``) and > 7 days (``los_7``) from the first 24 hours; vasopressor and ventilation window classes
    (CONTROL, ON_INTERVENTION, ONSET, WEAN of a 4 h prediction window after a 6 h gap, from a 6 h input slice).
    Features follow MIMIC-Extract's ``vitals_labs`` layout: one row per (stay, hour) with ``count``, ``mean``,
    ``std`` per variable, the (variable, agg) MultiIndex flattened as ``'<variable>__<agg>'`` in CSV files, plus
    static features (gender, age bins, ethnicity, first care unit one-hots). Outcomes are logistic functions of
    a latent severity that the features reflect, so a real model learns them. The agent trains on the train
    split (features and labels mounted read-only) and writes ``predictions.csv`` (``id,prediction``) for every
    test id into its workspace. Test labels live under ``<family_dir>/hidden/``, which is never mounted; the
    score is computed outside the sandbox. Each (cohort, task) is one instance; each task is one category.
    No leaks by construction: every stay contributes exactly 24 hourly rows to the stay tasks and at most one
    window, always at the same hours (input 18-23, prediction 30-33), to the window tasks, so row counts say
    nothing about the length of stay; and an instance mounts only its own half of the cohort (stay tasks see
    ``mortality_los/``, window tasks ``vasopressor_ventilation/``), so the two can never be joined.

Example instance:
    question: "Task mort_icu: predict whether each ICU stay ends in death in the ICU ... write
               predictions.csv with columns id,prediction (id = subject_id, prediction = a probability) ..."
    answer: "done"   answer_type: "text"   category: "mort_icu"
    solution: Python that fits a standardised logistic regression on per-stay mean/last features and writes
              predictions.csv (its test AUROC is ``metadata["reference_metric"]``).

Allowed actions:
    request_info, code_execution (python), terminal, debugging, submit_answer.

Grading:
    On submit (any non-empty text that is not a traceback), ``<workspace>/predictions.csv`` is read on the host
    through ``medagentgym.sandbox.hostio`` (never by name: a symlink, FIFO, hard link, directory or a file over 20 MB is a
    wrong answer with the reason; header exactly ``id,prediction``). It must cover the test ids exactly: a
    missing, extra or duplicate id, or an unparsable prediction, scores 0 with the reason. Metric: AUROC of the
    predicted probabilities (stay tasks) or macro-F1 of the predicted classes (window tasks). Chance is measured
    by permutation when the instance is built (``medagentgym.tasks.floors.null_metric``, 200 draws of each
    predictor that reads no feature: constants, uniform and train-proportional random output, the test labels
    permuted, the reference's predictions permuted): ``chance`` = the best mean (class-proportional random
    beats every constant on macro-F1), ``null_high`` = the largest mean + 3 sd. ``correct`` when the metric
    reaches ``metadata["threshold"]`` = max(reference - margin, chance + 0.05, null_high + sd) (margin 0.03
    AUROC, 0.05 macro-F1); an instance whose reference does not reach it is dropped (listed in the manifest).
    ``score`` = 1 when correct, else clip((metric - null_high) / (1 - null_high), 0, 1): predictions that read
    no feature score 0 (the original graded accuracy over the ids the agent chose).

Episode end:
    The graded submit (terminated) or a budget (turns, tokens, wall time: truncated). 15 turns.

Arguments:
    ``tasks.make("mimic_extract", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/mimic_extract/{cohort_<k>/{stay,window}/..., hidden/cohort_<k>/..., train.jsonl, test.jsonl,
    manifest.json}``. tiny: 2 cohorts of 1,000 stays (1 train, 1 test instance set); default: 5 cohorts of
    1,500 stays (3 train, 2 test). 70 % of each cohort's subjects are its train split. Byte-identical per seed.

Version history:
    1: first version (hidden labels, full id coverage, AUROC / macro-F1, reference logistic regression).
    2: leaks closed: one window per stay at fixed hours (sliding windows gave away the length of stay and the
       next window's state), per-task-type mounts; predictions.csv read through ``medagentgym.sandbox.hostio``; larger
       cohorts (600 / 1,500 stays) for the fewer windows.
    3: chance by permutation over every no-information predictor (random class-proportional predictions beat
       the best constant's macro-F1 on every window instance, so they always earned partial credit); threshold
       and partial credit start above mean + 3 sd; tiny cohorts 600 -> 1,000 stays (the window tasks' reference
       did not clear that spread on 180 test windows).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import f1_score, roc_auc_score

from medagentgym.sandbox.hostio import UnsafeWorkspaceFile, read_workspace_file
from medagentgym.tasks.base import (
    GradeContext,
    InfraError,
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
from medagentgym.tasks.ehr_synth.extract import (
    CLASSES,
    INPUT_H,
    KEYS,
    STAY_TASKS,
    WINDOW_TASKS,
    draw_cohort,
    reference_predictions,
)
from medagentgym.tasks.graders import looks_like_error

TASKS = STAY_TASKS + WINDOW_TASKS
ACTIONS = frozenset({"request_info", "code_execution", "terminal", "debugging", "submit_answer"})
PREDICTIONS = "predictions.csv"
MAX_PREDICTION_BYTES = 20 << 20
MOUNT = "mimic_extract"
#: (stays per cohort, cohorts for the train instances, cohorts for the test instances) by size.
SIZES: dict[str, tuple[int, int, int]] = {"tiny": (1000, 1, 1), "default": (1500, 3, 2)}
#: The mounted half of a cohort per task type (a stay-task instance never sees windows, and vice versa).
HALF = {"stay": "mortality_los", "window": "vasopressor_ventilation"}
TRAIN_FRACTION = 0.7
MARGIN = {"auroc": 0.03, "macro_f1": 0.05}
#: The threshold is at least this far above the best constant prediction.
MIN_LIFT = 0.05
#: Permutations per no-information predictor when an instance's chance baseline is measured.
NULL_PERMUTATIONS = 200
_DESCRIBE = {
    "mort_icu": "whether each ICU stay ends with death in the ICU",
    "mort_hosp": "whether each patient dies in hospital",
    "los_3": "whether each ICU stay lasts longer than 3 days",
    "los_7": "whether each ICU stay lasts longer than 7 days",
    "vasopressor": "the vasopressor class of each window",
    "ventilation": "the mechanical ventilation class of each window",
}
CONTEXT = {
    "stay": (
        f"Data (read-only) under /data/{MOUNT}/mortality_los/: X_lab_{{train,test}}.csv (one row per subject_id, "
        "hadm_id, icustay_id, hours_in for the first 24 ICU hours; per variable the columns '<variable>__count', "
        "'<variable>__mean', '<variable>__std' (MIMIC-Extract's (variable, agg) MultiIndex, flattened; imputed)), "
        "X_static_{train,test}.csv (keys, gender_F/M, age_1-4, ethnicity_*, first_careunit_* one-hots, intime "
        "hour), train_labels.csv (subject_id, mort_icu, mort_hosp, los_3, los_7). Test labels are not available. "
        f"Write /workspace/{PREDICTIONS} with columns id,prediction covering EVERY test id exactly once, then "
        "submit_answer 'done'."),
    "window": (
        f"Data (read-only) under /data/{MOUNT}/vasopressor_ventilation/: X_windows_{{train,test}}.csv (one row per "
        "window id and hours_in 0-5 of its 6 h input slice, the last 6 h of the stay's first 24 h; per variable "
        "the columns '<variable>__count', '<variable>__mean', '<variable>__std' (MIMIC-Extract's (variable, agg) "
        "MultiIndex, flattened; imputed)), X_windows_static_{train,test}.csv (id + gender_F/M, age_1-4, "
        "ethnicity_*, first_careunit_* one-hots, intime hour), train_window_labels.csv (id, vasopressor, "
        "ventilation; classes CONTROL, ON_INTERVENTION, ONSET, WEAN for the 4 h window after a 6 h gap). One "
        f"window per stay. Test labels are not available. Write /workspace/{PREDICTIONS} with columns "
        "id,prediction covering EVERY test id exactly once, then submit_answer 'done'."),
}


def task_type(task: str) -> str:
    """``"stay"`` for the four stay tasks, ``"window"`` for the two window tasks."""
    return "stay" if task in STAY_TASKS else "window"


def solution_code(data: str, task: str, out: str) -> str:
    """The reference solution shipped to the episode: the reference model's source, then a call writing ``out``."""
    return (f"import pandas as pd\n\n\n{inspect.getsource(reference_predictions)}\n\n"
            f"pred = reference_predictions({data!r}, {task!r})\npred.to_csv({out!r}, index=False)\n"
            f"print(f'wrote {{len(pred)}} predictions to {out}')\n")


def _csv(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False, lineterminator="\n").encode("utf-8")


def write_cohort(cohort_dir: Path, hidden_dir: Path, n: int, seed: int) -> dict[str, int]:
    """Write one cohort's mounted files (``stay/mortality_los/``, ``window/vasopressor_ventilation/``: mounted
    apart) and its hidden test labels; returns row counts."""
    c = draw_cohort(n, seed)
    rng = np.random.default_rng([seed, 5])
    subjects = c["static"]["subject_id"].to_numpy()
    train_ids = set(rng.permutation(subjects)[: round(len(subjects) * TRAIN_FRACTION)].tolist())
    windows = c["windows"].iloc[rng.permutation(len(c["windows"]))].reset_index(drop=True)
    windows.insert(0, "id", [f"w{k:06d}" for k in range(len(windows))])  # opaque: no link between windows
    hourly = c["hourly"]
    static = c["static"].drop(columns=["gender", "ethnicity", "first_careunit"])
    stay_dir, window_dir = cohort_dir / "stay" / HALF["stay"], cohort_dir / "window" / HALF["window"]
    feats = [col for col in hourly.columns if "__" in col]
    files: dict[Path, pd.DataFrame] = {}
    for split in ("train", "test"):
        is_split = hourly["subject_id"].isin(train_ids) == (split == "train")
        stay_lab = hourly[is_split & (hourly["hours_in"] < 24)]
        files[stay_dir / f"X_lab_{split}.csv"] = stay_lab
        files[stay_dir / f"X_static_{split}.csv"] = static[
            static["subject_id"].isin(train_ids) == (split == "train")]
        win = windows[windows["subject_id"].isin(train_ids) == (split == "train")]
        slices = win[["id", "subject_id", "start"]].merge(hourly[["subject_id", "hours_in"] + feats], on="subject_id")
        slices = slices[(slices["hours_in"] >= slices["start"]) & (slices["hours_in"] < slices["start"] + INPUT_H)]
        slices = slices.assign(hours_in=slices["hours_in"] - slices["start"]).sort_values(["id", "hours_in"])
        files[window_dir / f"X_windows_{split}.csv"] = slices[["id", "hours_in"] + feats]
        files[window_dir / f"X_windows_static_{split}.csv"] = (
            win[["id", "subject_id"]].merge(static.drop(columns=KEYS[1:]), on="subject_id").drop(columns="subject_id"))
        outcomes = c["outcomes"][c["outcomes"]["subject_id"].isin(train_ids) == (split == "train")]
        labels = outcomes[["subject_id", *STAY_TASKS]]
        wlabels = win[["id", *WINDOW_TASKS]].sort_values("id")
        if split == "train":
            files[stay_dir / "train_labels.csv"] = labels
            files[window_dir / "train_window_labels.csv"] = wlabels
        else:
            files[hidden_dir / "test_labels.csv"] = labels
            files[hidden_dir / "test_window_labels.csv"] = wlabels
    for path, df in files.items():
        write_bytes_atomic(path, _csv(df))
    return {f"{p.parent.name}/{p.name}": len(df) for p, df in files.items()}


def load_hidden_labels(hidden_dir: Path, task: str) -> pd.Series:
    """The hidden test labels of ``task`` indexed by id (string)."""
    stay = task in STAY_TASKS
    df = pd.read_csv(hidden_dir / ("test_labels.csv" if stay else "test_window_labels.csv"), dtype=str)
    s = df.set_index("subject_id" if stay else "id")[task]
    return s.astype(int) if stay else s


def parse_predictions(data: bytes) -> tuple[pd.Series | None, str]:
    """The bytes of ``predictions.csv`` as a string-indexed Series, or (None, why) when malformed."""
    try:
        df = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"{PREDICTIONS} is not a readable CSV ({str(exc).splitlines()[0][:80]})"
    if list(df.columns) != ["id", "prediction"]:
        return None, f"{PREDICTIONS} header must be exactly id,prediction, got {[c[:30] for c in df.columns[:4]]}"
    if df["id"].duplicated().any():
        return None, f"{PREDICTIONS} repeats id {df['id'][df['id'].duplicated()].iloc[0][:40]!r}"
    return df.set_index("id")["prediction"], ""


def read_predictions(workspace: Path) -> tuple[pd.Series | None, str]:
    """``<workspace>/predictions.csv`` read through ``medagentgym.sandbox.hostio`` (never by name), then parsed."""
    try:
        data = read_workspace_file(workspace, PREDICTIONS, max_bytes=MAX_PREDICTION_BYTES)
    except UnsafeWorkspaceFile as exc:
        return None, str(exc)
    return parse_predictions(data)


def evaluate(task: str, gold: pd.Series, pred: pd.Series) -> tuple[float | None, str]:
    """The task metric of ``pred`` against ``gold`` (None and the reason when coverage or parsing fails)."""
    missing, extra = gold.index.difference(pred.index), pred.index.difference(gold.index)
    if len(missing) or len(extra):
        return None, f"id coverage: {len(missing)} test ids missing, {len(extra)} unknown ids (need all {len(gold)})"
    pred = pred.loc[gold.index]
    if task in STAY_TASKS:
        values = pd.to_numeric(pred, errors="coerce")
        if values.isna().any() or not np.isfinite(values.to_numpy()).all():
            return None, "stay-task predictions must be finite numbers (probabilities or scores)"
        return float(roc_auc_score(gold.to_numpy(), values.to_numpy())), "auroc"
    bad = sorted(set(pred) - set(CLASSES))
    if bad:
        return None, f"window predictions must be one of {', '.join(CLASSES)}; got {bad[0][:30]!r}"
    return float(f1_score(gold, pred, labels=list(CLASSES), average="macro", zero_division=0)), "macro_f1"


def chance(task: str, gold: pd.Series) -> float:
    """The metric of the best constant prediction (0.5 AUROC; the best single class's macro-F1)."""
    if task in STAY_TASKS:
        return 0.5
    return max(float(f1_score(gold, pd.Series(c, index=gold.index), labels=list(CLASSES), average="macro",
                              zero_division=0)) for c in CLASSES)


def _null_predictors(task: str, train_labels: pd.Series, n: int) -> dict[str, Any]:
    """Predictions for ``n`` test ids that read no feature (``draw(rng) -> array``): constants, uniformly
    random output and (window tasks) classes drawn with the train labels' shares."""
    from medagentgym.tasks.floors import constant_predictor

    if task in STAY_TASKS:
        return {"constant 0.5": constant_predictor(np.full(n, 0.5)), "uniform random": lambda rng: rng.random(n)}
    shares = train_labels.value_counts(normalize=True).reindex(list(CLASSES), fill_value=0.0).to_numpy()
    out: dict[str, Any] = {f"constant {c}": constant_predictor(np.full(n, c, dtype=object)) for c in CLASSES}
    out["uniform random class"] = lambda rng: rng.choice(np.asarray(CLASSES, dtype=object), n)
    out["train-proportional random"] = lambda rng: rng.choice(np.asarray(CLASSES, dtype=object), n, p=shares)
    return out


def null_baseline(task: str, gold: pd.Series, reference: pd.Series, train_labels: pd.Series, seed: Any
                  ) -> dict[str, Any]:
    """The instance's chance baseline by permutation (``medagentgym.tasks.floors.null_metric``): constants,
    uniform and train-proportional random predictions, the test labels permuted (class-proportional random with
    the test shares) and the reference model's predictions permuted across ids."""
    from medagentgym.tasks.floors import null_metric

    ref = reference.loc[gold.index].to_numpy()
    predictors = _null_predictors(task, train_labels, len(gold))
    predictors["permuted labels"] = lambda rng: rng.permutation(gold.to_numpy())
    predictors["permuted reference"] = lambda rng: rng.permutation(ref)

    if task in STAY_TASKS:
        y = gold.to_numpy()

        def metric(values: Any) -> float:
            return float(roc_auc_score(y, np.asarray(values, dtype=float)))
    else:  # macro-F1 over CLASSES with zero_division=0, as evaluate() computes it, without sklearn's overhead
        codes = {c: k for k, c in enumerate(CLASSES)}
        y = np.asarray([codes[c] for c in gold.to_numpy()])
        truth = np.bincount(y, minlength=len(CLASSES))

        def metric(values: Any) -> float:
            p = np.asarray([codes[c] for c in values])
            tp = np.bincount(y[p == y], minlength=len(CLASSES))
            predicted = np.bincount(p, minlength=len(CLASSES))
            denom = truth + predicted
            return float(np.mean(np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)))

    return null_metric(metric, predictors, draws=NULL_PERMUTATIONS, seed=seed)


def load_train_labels(kind_dir: Path, task: str) -> pd.Series:
    """The train labels of ``task`` from the mounted half of a cohort (``<cohort>/<stay|window>``)."""
    stay = task in STAY_TASKS
    path = kind_dir / HALF[task_type(task)] / ("train_labels.csv" if stay else "train_window_labels.csv")
    df = pd.read_csv(path, dtype=str)
    return df[task].astype(int) if stay else df[task]


def host_play(family: MimicExtract, instance: Instance, steps: list[dict[str, Any]]) -> float:
    """Replay TRUSTED steps on the host for ``tasks.check_family(..., play=host_play)``; returns the score.

    Python ``code_execution`` steps run in-process with ``/data/mimic_extract`` mapped to the cohort directory
    and ``/workspace`` to a fresh temporary workspace; then the submit is graded against that workspace. Only
    for the family's own reference solutions and the contract's canned submissions, never for agent code.
    """
    with tempfile.TemporaryDirectory() as ws:
        answer = ""
        for step in steps:
            params = step["params"]
            if step["action"] == "code_execution" and params.get("lang") == "python":
                code = params["code"].replace(f"/data/{MOUNT}", str(Path(family.root) / instance.data[MOUNT]))
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(code.replace("/workspace", ws), "<step>", "exec"), {"__name__": "__step__"})  # noqa: S102
            elif step["action"] == "submit_answer":
                answer = params["answer"]
        ctx = GradeContext(workspace=Path(ws), family_dir=Path(family.root))
        return family.grade(instance, answer, ctx).score


class MimicExtract:
    """The mimic_extract family (see the module docstring for the spec card)."""

    name = "mimic_extract"
    version = 3
    actions = ACTIONS
    #: Grading reads predictions.csv from the episode workspace, so contract checks replay in a real sandbox.
    needs_sandbox = True

    def __init__(self, root: Path | str | None = None) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/mimic_extract``)."""
        self.root = Path(root) if root is not None else None

    @property
    def categories(self) -> list[str]:
        """The six MIMIC-Extract tasks."""
        return list(TASKS)

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Categories and instances (tasks x cohorts) without building."""
        if size not in SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(SIZES)}; use 'tiny' or 'default'")
        _n, n_train, n_test = SIZES[size]
        return {"categories": len(TASKS), "instances": len(TASKS) * (n_train + n_test)}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write cohorts, hidden labels, instances (with the executed reference model's metric) and a manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` or ``"default"`` (stays per cohort, cohorts per split).
            seed: Seeds every cohort (cohort ``k`` uses seed ``seed * 100 + k``); byte-identical per seed.

        Returns:
            The manifest (counts, reference metrics, rows per file, sha256 per file).
        """
        self.counts(size)
        started = time.perf_counter()
        family_dir = Path(out_dir) / self.name
        n, n_train, n_test = SIZES[size]
        splits: dict[Split, list[Instance]] = {"train": [], "test": []}
        rows, refs = {}, {}
        dropped: list[str] = []
        for k in range(n_train + n_test):
            split: Split = "train" if k < n_train else "test"
            cohort = f"cohort_{k}"
            rows[cohort] = write_cohort(family_dir / cohort, family_dir / "hidden" / cohort, n, seed * 100 + k)
            for task in TASKS:
                inst = self._instance(family_dir, cohort, task, split, len(splits[split]))
                if inst is None:  # the reference does not clear the no-information spread here
                    dropped.append(f"{cohort}/{task}: the reference model does not clear the no-information "
                                   "spread (mean + 3 sd of predictions that read no feature) by one sd")
                    continue
                refs[f"{cohort}/{task}"] = inst.metadata["reference_metric"]
                splits[split].append(inst)
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        manifest = write_manifest(family_dir, family=self.name, version=self.version, size=size, seed=seed,
                                  counts={s: len(v) for s, v in splits.items()}, rows=rows, reference_metrics=refs,
                                  dropped=dropped)
        manifest["build_seconds"] = round(time.perf_counter() - started, 2)  # returned only, not written
        return manifest

    def _instance(self, family_dir: Path, cohort: str, task: str, split: Split, index: int) -> Instance | None:
        """One (cohort, task) instance; runs the reference model on the host to record its metric and measures the
        no-information spread by permutation. None when the reference does not clear it (the build drops it)."""
        hidden = family_dir / "hidden" / cohort
        gold = load_hidden_labels(hidden, task)
        kind_dir = family_dir / cohort / task_type(task)
        with tempfile.TemporaryDirectory() as tmp:  # the same bytes an agent's file would have, read the same way
            reference_predictions(str(kind_dir), task).to_csv(Path(tmp) / PREDICTIONS, index=False)
            pred, why = read_predictions(Path(tmp))
        metric, kind = evaluate(task, gold, pred) if pred is not None else (None, why)
        if metric is None:
            raise TaskError(f"{self.name}: the reference model's predictions for {cohort}/{task} fail: {kind}")
        null = null_baseline(task, gold, pred, load_train_labels(kind_dir, task),
                             seed=int(hashlib.sha256(f"{cohort}/{task}".encode()).hexdigest()[:8], 16))
        base, high = null["chance"], null["high"]
        # The pass threshold sits above what no-information predictions reach (mean + 3 sd, by permutation).
        threshold = round(max(metric - MARGIN[kind], base + MIN_LIFT, high + null["sd"]), 6)
        if metric < threshold:  # kept only when the reference beats that spread by a margin (one more sd)
            return None
        stay = task in STAY_TASKS
        question = (f"Task {task}: predict {_DESCRIBE[task]} in the TEST split. Train any model on the train split "
                    f"(features and labels under /data/{MOUNT}/"
                    f"{'mortality_los' if stay else 'vasopressor_ventilation'}/), then write /workspace/{PREDICTIONS} "
                    f"with columns id,prediction: id = {'subject_id' if stay else 'window id'} of every test "
                    f"{'stay' if stay else 'window'} ({len(gold)} ids), prediction = "
                    f"{'the predicted probability of the positive class' if stay else 'one of ' + ', '.join(CLASSES)}"
                    f". Scored by {'AUROC' if stay else 'macro-F1'} on hidden labels. Then submit_answer 'done'.")
        return Instance(
            id=f"{self.name}/{split}/{index:06d}", family=self.name, category=task, split=split, question=question,
            context=CONTEXT[task_type(task)], answer="done", answer_type="text",
            solution=solution_code(f"/data/{MOUNT}", task, f"/workspace/{PREDICTIONS}"),
            solution_lang="python", data={MOUNT: f"{cohort}/{task_type(task)}"},
            metadata={"task": task, "cohort": cohort, "metric": kind, "reference_metric": round(metric, 6),
                      "chance": round(base, 6), "chance_by": null["chance_by"], "null_high": high,
                      "null_sd": null["sd"], "threshold": threshold, "n_test": len(gold),
                      "hidden_labels": f"hidden/{cohort}"},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Train the reference logistic regression and write predictions, then submit 'done'."""
        return run_then_submit("python", instance.solution, "done")

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Score ``<workspace>/predictions.csv`` on the hidden test labels (see Grading in the module docstring)."""
        text = (submission or "").strip()
        if not text or looks_like_error(text):
            return Verdict(correct=False, score=0.0, reason="empty or error submission")
        if ctx is None or ctx.workspace is None:
            raise InfraError(f"{self.name} grades {PREDICTIONS} in the episode workspace; pass "
                             "GradeContext(workspace=<host path of the workspace>)")
        family_dir = Path(ctx.family_dir) if ctx.family_dir is not None else self.root
        if family_dir is None:
            raise InfraError(f"{self.name}: grading needs the built family directory (GradeContext.family_dir)")
        task, meta = instance.metadata["task"], instance.metadata
        if not instance.data.get(MOUNT, "").endswith(f"/{task_type(task)}"):  # v1 mounted the whole cohort
            raise InfraError(f"{instance.id} was built by mimic_extract v1 (leaky mounts); rebuild the family")
        pred, why = read_predictions(Path(ctx.workspace))
        if pred is None:
            return Verdict(correct=False, score=0.0, reason=why)
        try:
            gold = load_hidden_labels(family_dir / meta["hidden_labels"], task)
        except OSError as exc:
            raise InfraError(f"hidden labels of {instance.id} cannot be read ({exc}); rebuild the family") from exc
        metric, kind = evaluate(task, gold, pred)
        if metric is None:
            return Verdict(correct=False, score=0.0, reason=kind)
        correct = metric >= meta["threshold"]
        zero = meta.get("null_high", meta["chance"])  # v1/v2 instances: the best constant's metric
        partial = float(np.clip((metric - zero) / (1 - zero), 0.0, 1.0))
        return Verdict(correct=correct, score=1.0 if correct else partial,
                       reason=(f"{kind} {metric:.4f} (threshold {meta['threshold']:.4f}, no-information level "
                               f"{zero:.4f})"))

    def null_submissions(self, instance: Instance, rng: np.random.Generator) -> list[tuple[str, str, dict[str, bytes]]]:
        """Predictions that read no feature, for the reward floor (``medagentgym.tasks.floors``): one
        ``(predictor, "done", {"predictions.csv": bytes})`` per no-information predictor (constants, uniform and
        train-proportional random), every test id covered (ids read from the test file, nothing else)."""
        task = instance.metadata["task"]
        kind_dir = Path(self.root) / instance.data[MOUNT]
        stay = task in STAY_TASKS
        half = kind_dir / HALF[task_type(task)]
        ids = pd.read_csv(half / ("X_static_test.csv" if stay else "X_windows_static_test.csv"), dtype=str,
                          usecols=["subject_id" if stay else "id"]).iloc[:, 0].drop_duplicates()
        out = []
        for name, draw in _null_predictors(task, load_train_labels(kind_dir, task), len(ids)).items():
            frame = pd.DataFrame({"id": ids.to_numpy(), "prediction": draw(rng)})
            out.append((name, "done", {PREDICTIONS: _csv(frame)}))
        return out
