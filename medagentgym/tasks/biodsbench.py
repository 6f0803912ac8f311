"""biodsbench: cancer-genomics analyses in Python over cBioPortal-format studies, checked by hidden asserts.

Description:
    BioDSBench-style data science. Four seeded synthetic studies in cBioPortal export format
    (``data_clinical_patient``, ``data_clinical_sample``, ``data_mutations`` (MAF columns), ``data_cna``,
    ``data_sv``, ``data_timeline_treatment``; CSV under ``/data/biodsbench/<study>/``; see
    ``medagentgym/tasks/bio/cbioportal.py``) and 28 analysis kinds (``medagentgym/tasks/bio/ds_kinds.py``): cohort counts, subtype
    counts, mutation frequencies, top-N mutated genes, variant classes, TMB t-tests, Kaplan-Meier medians,
    log-rank tests, Cox hazard ratios, chi-square and Fisher tests, CNA and SV summaries, treatment
    exposure, and three plots (KM curves, bar chart, histogram) checked by file type, labels and the plotted
    data. Each kind names its output variables; the gold values come from EXECUTING the reference code on
    the built data. ``import_records`` turns original BioDSBench records (queries, dataframes, test_cases,
    reference_answer, code_histories, study_ids, ...) into instances over a copy of their tables.

Example instance:
    question: "Compare overall survival (OS_MONTHS) of TP53-mutant and wild-type patients. ... store the
               median OS of each group in `median_os_mut` and `median_os_wt`."
    context:  the tables (path, DataFrame name, shape, head())
    answer:   the reference code            answer_type: "text"       category: "km_median_os_by_gene"
    metadata: {"values": {"median_os_mut": 9.87, ...}, "extract": {"median_os_mut": "float(median_os_mut)"},
               "study": "egc_synth_2020", ...}

Allowed actions:
    code_execution, terminal, debugging, submit_answer (the analysis code).

Grading:
    The submission runs in the episode's sandbox session (or a family-owned one-worker bwrap pool, one process
    per run, when the grader gets no session), in a fresh namespace and an empty working directory; the
    record's earlier cells (imported records only) run first. No hidden check and no gold value ever enters
    that jail: what leaves it is DATA, one tagged result line holding the requested variables (converted to
    plain JSON by fixed expressions) and, for plot kinds, what the figure ``fig`` draws (axis labels, every
    line's x/y data and draw style, every bar) plus the magic bytes of the saved file. The host compares:
    floats within 1e-6 relative, ints, strings, lists and dicts exactly; plot labels exactly; plotted
    Kaplan-Meier curves against the reference survival functions (lifelines, computed at build time;
    evaluated as step functions), bar heights and histogram bins against the reference (see
    ``medagentgym/tasks/bio/plots.py``). Any exception, a missing variable, a wrong value, a timeout (120 s), or a result
    line that is missing, duplicated or malformed is wrong (reward 0, never an error). Imported records' own
    assert lines hold the gold, so they run in a second, grader-only jail over the submission's variables
    carried as JSON (``medagentgym/tasks/bio/values.py``); values the transfer cannot carry (e.g. figures) fail them.

Episode end:
    The graded submit (terminated) or a budget (truncated). Default 10 turns.

Arguments:
    ``tasks.make("biodsbench", root=DIR, grader_backend="bwrap")``; ``build(out_dir, size, seed)`` writes
    ``<out_dir>/biodsbench/{studies/<study>/*.csv, train.jsonl, test.jsonl, manifest.json}``, byte-identical
    per seed. tiny: one study, the first parameter set of each kind (28 instances); default: four studies x
    75 tasks (300 instances). An instance is in test when (study + kind + parameter index) % 4 == 0 (tiny: % 2,
    so its test split holds 14 instances).

Version history:
    1: first version (4 studies, 28 kinds, asserts executed after the agent's code).
    2: no gold in the jail: values are compared on the host only; plot checks compare the plotted data with
       the reference (KM curves, bar heights, histogram bins); imported records' asserts run in a separate
       grader-only jail; a malformed or forged result line is a wrong answer. tiny builds put every second
       instance in test (14, was 7: one instance's own program then held 14 % of the split, over the 10 %
       constant-answer floor bound).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from string import Template
from typing import Any

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
    write_instances,
    write_manifest,
)
from medagentgym.tasks.bio.biocoder_build import same
from medagentgym.tasks.bio.cbioportal import STUDIES, Study, write_study
from medagentgym.tasks.bio.ds_kinds import _READ, KINDS, DSKind
from medagentgym.tasks.bio.plots import check_plot, extraction_source
from medagentgym.tasks.bio.runner import (
    PAYLOAD_VAR,
    FallbackPool,
    new_nonce,
    precheck,
    run_graded,
    strip_fence,
)
from medagentgym.tasks.bio.values import decoder_source, encoder_source

MOUNT = "biodsbench"
DATA_DIR = "studies"
#: ``test_every``: every n-th instance goes to test. tiny uses 2 so its test split (14) is large enough that one
#: constant answer cannot reach the 10 % reward-floor bound by holding a single instance's answer.
_SIZES: dict[str, dict[str, Any]] = {"tiny": {"studies": 1, "params": 1, "test_every": 2},
                                     "default": {"studies": len(STUDIES), "params": None, "test_every": 4}}
_WALL_S = 120.0
_REL_TOL = 1e-6
_TABLE_OF = {"pat": ("data_clinical_patient.csv", "patients"), "smp": ("data_clinical_sample.csv", "samples"),
             "mut": ("data_mutations.csv", "mut"), "cna": ("data_cna.csv", "cna"), "sv": ("data_sv.csv", "sv"),
             "tl": ("data_timeline_treatment.csv", "timeline")}
_INSTRUCTIONS = (
    "Write Python code (pandas, scipy, lifelines, matplotlib are available) that reads the tables from the paths "
    "given and leaves the requested variables defined. Submit the complete code with submit_answer: it is run on "
    "its own, in a fresh namespace and an empty working directory, and hidden checks then read the variables "
    "(and files) it produced."
)


def _plain(value: Any) -> Any:
    """numpy/pandas scalars and containers -> plain Python (for asserts and JSON)."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not hasattr(value, "__len__"):
        return value.item()
    return value


def extract_expr(name: str, value: Any) -> str:
    """An expression turning variable ``name`` into plain JSON data shaped like the gold ``value``.

    The extracted values travel back as JSON and are compared on the host, so nothing the submitted code does
    inside the sandbox (shadowed builtins, str subclasses with a lenient ``__eq__``) can make them match.

    Raises:
        TaskError: A gold value that cannot be compared (non-finite number, unsupported type).
    """
    value = _plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise TaskError(f"{name} is not finite ({value})")
    if isinstance(value, bool):
        return f"bool({name})"
    if isinstance(value, (int, float, str)):
        return f"{type(value).__name__}({name})"
    if isinstance(value, list):
        conv = "str(v) if isinstance(v, str) else int(v)" if all(isinstance(v, (str, int)) for v in value) else "float(v)"
        return f"[{conv} for v in list({name})]"
    if isinstance(value, dict):
        kinds = {type(v) for v in value.values()}
        conv = {frozenset({int}): "int(v)", frozenset({str}): "str(v)"}.get(frozenset(kinds), "float(v)")
        return f"{{str(k): {conv} for k, v in dict({name}).items()}}"
    raise TaskError(f"{name}: cannot extract a value of type {type(value).__name__}")


def _run_reference(code: str, plot_gold: str, outputs: tuple[str, ...], cwd: Path
                   ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Execute trusted reference code in a fresh namespace; return its outputs and its plot's reference data."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    here = os.getcwd()
    try:
        os.chdir(cwd)
        exec(compile(code + "\n" + plot_gold, "<reference>", "exec"), ns)  # noqa: S102 - our reference, build time
    finally:
        os.chdir(here)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    return {name: ns[name] for name in outputs}, ns.get("plot_gold") if plot_gold else None


def _head(path: Path, name: str) -> str:
    import pandas as pd

    df = pd.read_csv(path)
    shown = df.iloc[:, :8] if df.shape[1] > 12 else df
    note = f"; first 8 of {df.shape[1]} columns shown" if shown is not df else ""
    columns = ", ".join(map(str, df.columns[:40])) + (", ..." if df.shape[1] > 40 else "")
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        return (f"DataFrame `{name}` from {path.name}: shape {df.shape}{note}\ncolumns: {columns}\n"
                f"{shown.head(3).to_string()}")


class BioDSBench:
    """The biodsbench family (see the module docstring for the spec card)."""

    name = "biodsbench"
    version = 2
    actions = frozenset({"code_execution", "terminal", "debugging", "submit_answer"})

    def __init__(self, root: Path | str, grader_backend: str = "bwrap") -> None:
        """Bind to ``root``; ``grader_backend`` runs submissions graded without a session, and imported records'
        asserts (always in a grader-only jail)."""
        self.root = Path(root)
        self._fallback = FallbackPool(grader_backend)
        self._checker = FallbackPool(grader_backend)  # imported records' asserts: never runs agent code

    @property
    def categories(self) -> list[str]:
        """Kind ids (plus ``imported`` for records brought in by :func:`import_records`)."""
        return [k.id for k in KINDS] + ["imported"]

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Instance counts for ``size`` without building."""
        conf = _SIZES[size]
        n = sum(min(len(k.params(st)), conf["params"] or 10 ** 6) for st in STUDIES[: conf["studies"]] for k in KINDS)
        return {"categories": len(KINDS), "instances": n}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write the studies' tables and the instances (asserts from executing every reference).

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` or ``"default"``.
            seed: Seeds the synthetic studies; the same seed gives byte-identical files.

        Returns:
            The manifest (counts, dropped tasks, sha256 per file).
        """
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        conf = _SIZES[size]
        family_dir = Path(out_dir) / self.name
        data_dir = family_dir / DATA_DIR
        splits: dict[str, list[Instance]] = {"train": [], "test": []}
        dropped: list[str] = []
        with tempfile.TemporaryDirectory() as scratch:
            for s_index, study in enumerate(STUDIES[: conf["studies"]]):
                write_study(study, data_dir / study.study_id, seed)
                heads = {key: _head(data_dir / study.study_id / f, var) for key, (f, var) in _TABLE_OF.items()}
                for k_index, kind in enumerate(KINDS):
                    for p_index, params in enumerate(kind.params(study)[: conf["params"]]):
                        split: Split = "test" if (s_index + p_index + k_index) % conf["test_every"] == 0 else "train"
                        try:
                            inst = self._instance(kind, study, params, heads, data_dir, Path(scratch), split,
                                                  len(splits[split]))
                        except Exception as exc:  # noqa: BLE001 - a failing reference is dropped and listed
                            dropped.append(f"{study.study_id}:{kind.id}:{p_index}: {type(exc).__name__}: {exc}")
                            continue
                        splits[split].append(inst)
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        return write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed, dropped=dropped,
            counts={s: len(items) for s, items in splits.items()},
            categories={k.id: sum(i.category == k.id for items in splits.values() for i in items) for k in KINDS},
        )

    def _instance(self, kind: DSKind, study: Study, params: dict[str, Any], heads: dict[str, str], data_dir: Path,
                  scratch: Path, split: Split, index: int) -> Instance:
        jail_root = f"/data/{MOUNT}/{study.study_id}"
        values = {k: str(v) for k, v in params.items()}
        fill = (lambda text, root: Template(text).substitute({**values, "root": root}))
        reads = "".join(_READ[t] for t in kind.tables)
        code = kind.imports + reads + kind.code
        cwd = Path(tempfile.mkdtemp(dir=scratch))
        outputs, plot_gold = _run_reference(fill(code, str(data_dir / study.study_id)), fill(kind.plot_gold, ""),
                                            kind.outputs, cwd)
        extract = {name: extract_expr(name, value) for name, value in outputs.items()}
        plot = None
        if kind.plot is not None:
            labels = {key: Template(text).substitute(values) for key, text in kind.plot.labels}
            plot = {"file": Template(kind.plot.file).substitute(values), "file_type": kind.plot.file_type,
                    "labels": labels, "gold": plot_gold}
            if not (cwd / plot["file"]).is_file():
                raise TaskError(f"{kind.id}: the reference did not write {plot['file']}")
        question = (f"Study {study.study_id} ({study.title}); tables in {jail_root}/.\n"
                    f"{Template(kind.question).substitute(values)}\n\n{_INSTRUCTIONS}")
        tables = "\n\n".join(f"{jail_root}/{_TABLE_OF[t][0]}\n{heads[t]}" for t in kind.tables)
        solution = fill(code, jail_root)
        return Instance(
            id=f"{self.name}/{split}/{index:05d}", family=self.name, category=kind.id, split=split,
            question=question, context=f"Tables:\n\n{tables}", answer=solution, answer_type="text",
            solution=solution, solution_lang="python", data={MOUNT: DATA_DIR},
            metadata={"study": study.study_id, "params": params, "outputs": list(kind.outputs),
                      "required": list(kind.outputs) + (["fig"] if plot else []), "prelude": "", "extract": extract,
                      "values": json.loads(json.dumps(_plain(outputs), default=str)), "plot": plot},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the reference code once (exploration), then submit it."""
        return run_then_submit("python", instance.solution, instance.solution)

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Run prelude + submitted code in the jail; compare the data it reports with the gold on the host."""
        code = strip_fence(submission or "")
        if not code.strip():
            return _wrong("empty submission")
        meta = instance.metadata
        if "checks" not in meta and "plot" not in meta:  # v1 instances kept their gold in jail-side asserts
            raise GraderError(f"{instance.id} was built by biodsbench v1; rebuild the family (medagentgym build)")
        hopeless = precheck(code, meta.get("required", []))
        if hopeless:
            return _wrong(f"checks fail: {hopeless}")
        mounts = {k: self.root / v for k, v in instance.data.items()}
        session = ctx.session if ctx is not None and ctx.session is not None else self._fallback.session(mounts)
        nonce = new_nonce()
        program = f"{meta.get('prelude', '')}\n{code}\n\n# read back (data only)\n{_harness(meta, nonce)}"
        status, payload, _ = run_graded(session, program, nonce, wall_s=_WALL_S)
        if status != "ok" or not isinstance(payload, dict):
            return _wrong(f"checks fail: {status}")
        if "checks" in meta:  # an imported record: its own asserts, in a jail no agent code has run in
            return self._run_checks(meta, payload.get("names"), mounts)
        why = _compare_values(meta, payload.get("values"))
        if why is None and meta.get("plot"):
            plot = meta["plot"]
            why = check_plot(plot, plot["gold"], payload.get("figure"), payload.get("file_head"))
        return _wrong(f"checks fail: {why}") if why else Verdict(correct=True, score=1.0, reason="all checks pass")

    def close(self) -> None:
        """Stop the family's own grading pools (idempotent; they also stop at exit)."""
        self._fallback.close()
        self._checker.close()

    def _run_checks(self, meta: dict[str, Any], names: Any, mounts: dict[str, Path]) -> Verdict:
        """Imported record: rebuild the variables from JSON in a grader-only one-shot jail and run its asserts."""
        if not isinstance(names, dict) or not all(isinstance(k, str) for k in names):
            return _wrong("checks fail: malformed variables payload (forged?)")
        nonce = new_nonce()
        program = (f"{decoder_source()}\nimport json as _json\n"
                   f"globals().update({{k: mg_decode(v) for k, v in _json.loads({json.dumps(names)!r}).items()}})\n"
                   f"{meta['checks']}\n{PAYLOAD_VAR.format(nonce=nonce)} = {{'passed': True}}\n")
        status, payload, _ = run_graded(self._checker.session(mounts), program, nonce, wall_s=_WALL_S)
        if status != "ok" or payload != {"passed": True}:
            return _wrong(f"checks fail: {status}")
        return Verdict(correct=True, score=1.0, reason="all checks pass")


def _wrong(reason: str) -> Verdict:
    return Verdict(correct=False, score=0.0, reason=reason)


def _harness(meta: dict[str, Any], nonce: str) -> str:
    """Jail-side code after the submission: assign the payload of DATA the host checks (no gold in it)."""
    var = PAYLOAD_VAR.format(nonce=nonce)
    if "checks" in meta:
        return (f"{encoder_source()}\n{var} = {{'names': {{__n: mg_encode(globals()[__n]) for __n in "
                f"{meta['check_names']!r} if __n in globals()}}}}\n")
    extract = ", ".join(f"{name!r}: {expr}" for name, expr in meta.get("extract", {}).items())
    plot = meta.get("plot")
    if not plot:
        return f"{var} = {{'values': {{{extract}}}}}\n"
    return (f"{extraction_source()}\n{var} = {{'values': {{{extract}}}, 'figure': mg_figure(fig), "
            f"'file_head': mg_file_head({plot['file']!r})}}\n")


def _compare_values(meta: dict[str, Any], got: Any) -> str | None:
    """Why the reported variables differ from the gold kept on the host (None when all match)."""
    gold = meta.get("values", {})
    if not isinstance(got, dict):
        return "malformed values payload (forged?)"
    try:
        wrong = [name for name, want in gold.items() if name not in got or not same(got[name], want, _REL_TOL)]
    except RecursionError:
        return "values nested too deeply to compare"
    return f"wrong value of {', '.join(wrong)}" if wrong else None


# -------------------------------------------------------------------------------------------------------------
# The importer of original BioDSBench records lives in medagentgym/tasks/importers/biodsbench.py (medagentgym import).
# -------------------------------------------------------------------------------------------------------------


def import_records(path: Path | str, data_root: Path | str, family_dir: Path | str, *, split: Split = "test",
                   session: Any = None, grader_backend: str = "bwrap") -> tuple[list[Instance], list[str]]:
    """The earlier API over :mod:`medagentgym.tasks.importers.biodsbench`: ``(instances, dropped)`` for one JSONL file.

    Kept for existing callers; new code uses ``medagentgym import --family biodsbench --data DIR``. Each
    study's tables are copied under ``<family_dir>/imported/``; with ``session`` (one session, or a callable
    ``study_id -> session`` whose ``/data/workdir`` is that study's copy) failing references are dropped. The
    records' asserts run in a grader-only jail of ``grader_backend`` (never in the session).

    Raises:
        TaskError: A malformed line, or a study without its tables (names what to provide), as before.
    """
    from medagentgym.tasks.importers.biodsbench import record_instance
    from medagentgym.tasks.importers.records import read_records

    out: list[Instance] = []
    dropped: list[str] = []
    checker = BioDSBench(root=family_dir, grader_backend=grader_backend) if session is not None else None
    try:
        for lineno, rec, error in read_records(path):
            if rec is None:
                raise TaskError(f"{path}:{lineno}: {error}; one BioDSBench record per line")
            try:
                inst = record_instance(rec, Path(data_root), Path(family_dir), split=split)
            except ValueError as exc:
                reason, _, detail = str(exc).partition(": ")
                if reason == "bad_tests":
                    dropped.append(f"{rec.get('study_ids')}/{rec.get('question_ids')}: {detail}")
                    continue
                raise TaskError(f"{path}:{lineno}: {detail}") from None
            if checker is not None:
                sess = session(inst.metadata["study"]) if callable(session) else session
                verdict = checker.grade(inst, inst.solution or "", GradeContext(session=sess))
                if not verdict.correct:
                    dropped.append(f"{inst.metadata['study']}/{inst.metadata['question_id']}: reference fails its "
                                   f"tests ({verdict.reason})")
                    continue
            out.append(inst)
    finally:
        if checker is not None:
            checker.close()
    return out, dropped
