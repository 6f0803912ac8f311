"""biodsbench: cancer-genomics analyses in Python over cBioPortal-format studies, checked by hidden asserts.

Description:
    BioDSBench-style data science. Four seeded synthetic studies in cBioPortal export format
    (``data_clinical_patient``, ``data_clinical_sample``, ``data_mutations`` (MAF columns), ``data_cna``,
    ``data_sv``, ``data_timeline_treatment``; CSV under ``/data/biodsbench/<study>/``; see
    ``tasks/bio/cbioportal.py``) and 28 analysis kinds (``tasks/bio/ds_kinds.py``): cohort counts, subtype
    counts, mutation frequencies, top-N mutated genes, variant classes, TMB t-tests, Kaplan-Meier medians,
    log-rank tests, Cox hazard ratios, chi-square and Fisher tests, CNA and SV summaries, treatment
    exposure, and three plots (KM curves, bar chart, histogram) checked by file type and figure properties.
    Each kind names its output variables; the asserted values come from EXECUTING the reference code on
    the built data. ``import_records`` turns original BioDSBench records (queries, dataframes, test_cases,
    reference_answer, code_histories, study_ids, ...) into instances over a copy of their tables.

Example instance:
    question: "Compare overall survival (OS_MONTHS) of TP53-mutant and wild-type patients. ... store the
               median OS of each group in `median_os_mut` and `median_os_wt`."
    context:  the tables (path, DataFrame name, shape, head())
    answer:   the reference code            answer_type: "text"       category: "km_median_os_by_gene"
    metadata: {"asserts": "assert abs(float(median_os_mut) - 9.87) <= ...", "study": "egc_synth_2020", ...}

Allowed actions:
    code_execution, terminal, debugging, submit_answer (the analysis code).

Grading:
    In the episode's sandbox session (or a family-owned one-worker bwrap pool when the grader gets no
    session), in a fresh namespace and an empty working directory: the record's earlier cells (imported
    records only), then the submitted code, then the hidden asserts, as ONE program. Correct only if the
    program finishes and every assert passes (floats within 1e-6 relative; ints, strings, lists and dicts
    exactly). Any exception, a missing variable, a wrong value or a timeout (120 s) is wrong. For built
    instances the asserted variables are also read back as JSON and compared on the host, so shadowed
    builtins or objects with a lenient ``__eq__`` cannot pass the checks (imported records: asserts only).

Episode end:
    The graded submit (terminated) or a budget (truncated). Default 10 turns.

Arguments:
    ``tasks.make("biodsbench", root=DIR, grader_backend="bwrap")``; ``build(out_dir, size, seed)`` writes
    ``<out_dir>/biodsbench/{studies/<study>/*.csv, train.jsonl, test.jsonl, manifest.json}``, byte-identical
    per seed. tiny: one study, the first parameter set of each kind (28 instances); default: four studies x
    75 tasks (300 instances). An instance is in test when (study + kind + parameter index) % 4 == 0.

Version history:
    1: first version (4 studies, 28 kinds, asserts executed after the agent's code).
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

from tasks.base import (
    GradeContext,
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
from tasks.bio.biocoder_build import same
from tasks.bio.cbioportal import STUDIES, Study, write_study
from tasks.bio.ds_kinds import _READ, KINDS, DSKind
from tasks.bio.runner import (
    PAYLOAD_VAR,
    FallbackPool,
    new_nonce,
    precheck,
    run_graded,
    strip_fence,
)

MOUNT = "biodsbench"
DATA_DIR = "studies"
_SIZES: dict[str, dict[str, Any]] = {"tiny": {"studies": 1, "params": 1}, "default": {"studies": len(STUDIES), "params": None}}
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


def _num(name: str, value: float) -> str:
    return f"assert abs(float({name}) - {value!r}) <= {_REL_TOL} * max(1.0, abs({value!r})), {name!r}\n"


def assert_lines(name: str, value: Any) -> str:
    """Hidden assert lines checking variable ``name`` against the executed reference ``value``.

    Raises:
        TaskError: A value that cannot be asserted (non-finite number, unsupported type).
    """
    value = _plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise TaskError(f"{name} is not finite ({value})")
    if isinstance(value, bool):
        return f"assert bool({name}) is {value}, {name!r}\n"
    if isinstance(value, int):
        return f"assert int({name}) == {value!r}, {name!r}\n"
    if isinstance(value, float):
        return _num(name, value)
    if isinstance(value, str):
        return f"assert str({name}) == {value!r}, {name!r}\n"
    if isinstance(value, list) and all(isinstance(v, (str, int)) for v in value):
        return f"assert [v if isinstance(v, str) else int(v) for v in list({name})] == {value!r}, {name!r}\n"
    if isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
        return (f"assert len(list({name})) == {len(value)}, {name!r}\n" +
                "".join(_num(f"list({name})[{i}]", float(v)) for i, v in enumerate(value)))
    if isinstance(value, dict):
        keys = sorted(str(k) for k in value)
        out = f"assert sorted(str(k) for k in dict({name})) == {keys!r}, {name!r}\n"
        for k, v in sorted(value.items(), key=lambda kv: str(kv[0])):
            item = f"{{str(k): v for k, v in dict({name}).items()}}[{str(k)!r}]"
            out += assert_lines(item, v).replace(f", {item!r}\n", f", {name!r}\n")
        return out
    raise TaskError(f"{name}: cannot assert a value of type {type(value).__name__}")


def extract_expr(name: str, value: Any) -> str:
    """An expression turning variable ``name`` into plain JSON data shaped like the gold ``value``.

    The extracted values travel back as JSON and are compared on the host, so nothing the submitted code does
    inside the sandbox (shadowed builtins, str subclasses with a lenient ``__eq__``) can make them match.
    """
    value = _plain(value)
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


def _run_reference(code: str, checks: str, outputs: tuple[str, ...], cwd: Path) -> dict[str, Any]:
    """Execute trusted reference code (+ its fixed checks) in a fresh namespace; return the outputs."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    here = os.getcwd()
    try:
        os.chdir(cwd)
        exec(compile(code + "\n" + checks, "<reference>", "exec"), ns)  # noqa: S102 - our reference, build time
    finally:
        os.chdir(here)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    return {name: ns[name] for name in outputs}


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
    version = 1
    actions = frozenset({"code_execution", "terminal", "debugging", "submit_answer"})

    def __init__(self, root: Path | str, grader_backend: str = "bwrap") -> None:
        """Bind to the built directory ``root``; ``grader_backend`` is used only when grading without a session."""
        self.root = Path(root)
        self._fallback = FallbackPool(grader_backend)

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
                        split: Split = "test" if (s_index + p_index + k_index) % 4 == 0 else "train"
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
        outputs = _run_reference(fill(code, str(data_dir / study.study_id)),
                                 fill(kind.checks, str(data_dir / study.study_id)), kind.outputs, cwd)
        exprs = dict(kind.exprs)
        asserts = "".join(assert_lines(exprs.get(name, name), value) for name, value in outputs.items())
        asserts += fill(kind.checks, jail_root)
        extract = {name: extract_expr(exprs.get(name, name), value) for name, value in outputs.items()}
        question = (f"Study {study.study_id} ({study.title}); tables in {jail_root}/.\n"
                    f"{Template(kind.question).substitute(values)}\n\n{_INSTRUCTIONS}")
        tables = "\n\n".join(f"{jail_root}/{_TABLE_OF[t][0]}\n{heads[t]}" for t in kind.tables)
        solution = fill(code, jail_root)
        return Instance(
            id=f"{self.name}/{split}/{index:05d}", family=self.name, category=kind.id, split=split,
            question=question, context=f"Tables:\n\n{tables}", answer=solution, answer_type="text",
            solution=solution, solution_lang="python", data={MOUNT: DATA_DIR},
            metadata={"study": study.study_id, "params": params, "asserts": asserts,
                      "outputs": [name for name in kind.outputs if name not in exprs],
                      "required": [n for n in kind.outputs if n not in exprs] + (["fig"] if "fig" in kind.checks else []),
                      "prelude": "", "extract": extract,
                      "values": json.loads(json.dumps(_plain(outputs), default=str))},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the reference code once (exploration), then submit it."""
        return run_then_submit("python", instance.solution, instance.solution)

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Run prelude + submitted code + hidden asserts as one program in a fresh namespace; all must pass."""
        code = strip_fence(submission or "")
        if not code.strip():
            return Verdict(correct=False, score=0.0, reason="empty submission")
        hopeless = precheck(code, instance.metadata.get("required", []))
        if hopeless:
            return Verdict(correct=False, score=0.0, reason=f"checks fail: {hopeless}")
        if ctx is not None and ctx.session is not None:
            session = ctx.session
        else:
            session = self._fallback.session({k: self.root / v for k, v in instance.data.items()})
        nonce = new_nonce()
        meta = instance.metadata
        extract = ", ".join(f"{name!r}: {expr}" for name, expr in meta.get("extract", {}).items())
        program = (f"{meta.get('prelude', '')}\n{code}\n\n# hidden checks\n{meta['asserts']}\n"
                   f"{PAYLOAD_VAR.format(nonce=nonce)} = {{'passed': True, 'values': {{{extract}}}}}\n")
        status, payload, _ = run_graded(session, program, nonce, wall_s=_WALL_S)
        if status != "ok" or not isinstance(payload, dict) or payload.get("passed") is not True:
            return Verdict(correct=False, score=0.0, reason=f"checks fail: {status}")
        wrong = [k for k, v in meta.get("values", {}).items() if k in meta.get("extract", {}) and
                 not same(payload.get("values", {}).get(k), v, _REL_TOL)]
        if wrong:  # the in-sandbox asserts passed but the values read back differ: the checks were subverted
            return Verdict(correct=False, score=0.0, reason=f"values differ on the host: {wrong}")
        return Verdict(correct=True, score=1.0, reason="all checks pass")


# -------------------------------------------------------------------------------------------------------------
# The importer of original BioDSBench records lives in tasks/importers/biodsbench.py (scripts/import_tasks.py).
# -------------------------------------------------------------------------------------------------------------


def import_records(path: Path | str, data_root: Path | str, family_dir: Path | str, *, split: Split = "test",
                   session: Any = None) -> tuple[list[Instance], list[str]]:
    """The earlier API over :mod:`tasks.importers.biodsbench`: ``(instances, dropped)`` for one JSONL file.

    Kept for existing callers; new code uses ``scripts/import_tasks.py --family biodsbench --data DIR``. Each
    study's tables are copied under ``<family_dir>/imported/``; with ``session`` (one session, or a callable
    ``study_id -> session`` whose ``/data/workdir`` is that study's copy) failing references are dropped.

    Raises:
        TaskError: A malformed line, or a study without its tables (names what to provide), as before.
    """
    from tasks.importers.biodsbench import record_instance
    from tasks.importers.records import read_records

    out: list[Instance] = []
    dropped: list[str] = []
    for lineno, rec, error in read_records(path):
        if rec is None:
            raise TaskError(f"{path}:{lineno}: {error}; one BioDSBench record per line")
        try:
            inst = record_instance(rec, Path(data_root), Path(family_dir), split=split)
        except ValueError as exc:
            raise TaskError(f"{path}:{lineno}: {str(exc).partition(': ')[2]}") from None
        if session is not None:
            sess = session(inst.metadata["study"]) if callable(session) else session
            verdict = BioDSBench(root=family_dir).grade(inst, inst.solution or "", GradeContext(session=sess))
            if not verdict.correct:
                dropped.append(f"{inst.metadata['study']}/{inst.metadata['question_id']}: reference fails its "
                               f"tests ({verdict.reason})")
                continue
        out.append(inst)
    return out, dropped
