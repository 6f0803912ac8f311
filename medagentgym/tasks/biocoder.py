"""biocoder: write one bioinformatics function that is spliced into a module and run against hidden tests.

Description:
    BioCoder-style code generation. 45 function kinds written once (reverse complement, translation with a
    codon table, GC content/skew, ORFs, motif and restriction-site search, k-mers, de Bruijn and overlap
    graphs, FASTA/FASTQ/GFF/VCF/SAM/CIGAR parsing, Hamming/edit distance, Needleman-Wunsch and
    Smith-Waterman scores, distance matrices, consensus profiles, intervals, RNA folding counts, simple
    statistics, one class-method kind) x 4 variants each (names, conventions, parameters) = 180 tasks
    (``medagentgym/tasks/bio/kinds_seq.py``, ``medagentgym/tasks/bio/kinds_io.py``). Each task has a module context with the marker
    ``<<insert solution here>>`` (indented inside a class for the class-method kind). An instance is a task
    plus one seeded draw of hidden argument lists; the gold results are computed by EXECUTING the reference
    function at build time. Original BioCoder records (idx, problem, solution, context, signature, code) are
    imported by ``medagentgym import --family biocoder`` (medagentgym/tasks/importers/biocoder.py) as instances graded
    on the program's stdout.

Example instance:
    question: "This is in python\\nReturn the reverse complement of the DNA sequence `seq` ...
               Signature: def reverse_complement(seq)"
    context:  the module (imports, PAIRS table, the marker line, a main() demo)
    answer:   the reference function source           answer_type: "text"    category: "reverse_complement"
    metadata: {"tests": [[...], ...], "expected": [["ok", ...], ...], "target": "reverse_complement", ...}

Allowed actions:
    code_execution, terminal, debugging, submit_answer (the function's source code).

Grading:
    The submission (one surrounding Markdown fence is removed) is dedented, re-indented to the marker's
    column and spliced into the context; the program runs in the episode's sandbox session in a fresh
    namespace (a family-owned one-worker bwrap pool, one process per run, when the grader gets no session),
    the hidden harness calls the target on every hidden argument list and reports the canonical results as
    data. The hidden INPUTS enter the jail; the expected outputs never do: the host compares the reported
    results with the gold it keeps, and every one must be equal (numbers within 1e-6; tuples and lists are the
    same; sets and dicts compare order-free). A syntax error, an exception, a missing function, a timeout
    (10 s), any wrong result, or a result line that is missing, duplicated (the program printed its own) or
    malformed is wrong (reward 0, never an error). Stdout is ignored, except for imported records: their
    module's own ``main()`` demo is run once as shown and once per hidden seed (every seed the demo sets is
    replaced by one derived from a salt the agent never sees, so the demo draws inputs it has not read;
    ``medagentgym/tasks/bio/demo_runs.py``), and each whole stdout must equal the gold captured at import
    (compared on the host). Records whose demo uses no seed (a third of the public file) have no hidden seed
    and are graded on the visible demo alone: a function that special-cases the demo's inputs passes them.

Episode end:
    The graded submit (terminated) or a budget (truncated). Default 10 turns.

Arguments:
    ``tasks.make("biocoder", root=DIR, grader_backend="bwrap")``; ``build(out_dir, size, seed)`` writes
    ``<out_dir>/biocoder/{train,test}.jsonl`` and ``manifest.json``, byte-identical per seed. tiny: variants
    1 and 4 of each kind, one draw (90 instances); default: all 180 tasks x 6 draws (1,080). The last
    variant of each kind is the test split, so test functions are never seen in train.

Version history:
    1: first version (45 kinds x 4 variants, hidden tests executed in the sandbox).
    2: the result line is parsed strictly on the host (one line; missing, duplicated or malformed is a wrong
       answer, not a grader error); the offline fallback pool runs each graded program in a fresh process.
    3: imported records: the demo's determinism is decided in fixed worlds (seeded generators, fixed hash
       seeds, traced entropy use: the same verdict on every import) and graded on hidden seeds as well as the
       visible demo; the public file's scikit-image / pysam / centrosome records import with the [bio] extra.
"""

from __future__ import annotations

from pathlib import Path
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
from medagentgym.tasks.bio import biocoder_build as bb
from medagentgym.tasks.bio import kinds_io, kinds_seq
from medagentgym.tasks.bio.demo_runs import run_salts
from medagentgym.tasks.bio.kinds_base import Kind
from medagentgym.tasks.bio.runner import (
    FallbackPool,
    new_nonce,
    precheck,
    run_graded,
    strip_fence,
)

KINDS: tuple[Kind, ...] = tuple(kinds_seq.KINDS + kinds_io.KINDS)
_SIZES: dict[str, dict[str, Any]] = {"tiny": {"variants": (0, 3), "draws": 1}, "default": {"variants": None, "draws": 6}}
_WALL_S = 10.0
_INSTRUCTIONS = (
    "Write the function in Python. Submit ONLY its source code (the full `def`, plus any imports it needs) with "
    "submit_answer. It is inserted at the line `<<insert solution here>>` of the module shown below (re-indented "
    "to that line) and called by hidden tests; its return value is checked, printed output is ignored."
)


def _task_id(kind: Kind, variant: dict[str, Any]) -> str:
    return f"{kind.id}.{variant['fn']}"


class BioCoder:
    """The biocoder family (see the module docstring for the spec card)."""

    name = "biocoder"
    version = 3
    actions = frozenset({"code_execution", "terminal", "debugging", "submit_answer"})

    def __init__(self, root: Path | str, grader_backend: str = "bwrap") -> None:
        """Bind to the built directory ``root``; ``grader_backend`` is used only when grading without a session."""
        self.root = Path(root)
        self._fallback = FallbackPool(grader_backend)

    @property
    def categories(self) -> list[str]:
        """Kind ids, in a fixed order (plus ``imported`` for records brought in by :func:`import_records`)."""
        return [k.id for k in KINDS] + ["imported"]

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Instance counts for ``size`` without building (every reference passes its own tests)."""
        conf = _SIZES[size]
        per_kind = sum(len(conf["variants"] or k.variants) for k in KINDS)
        return {"categories": len(KINDS), "instances": per_kind * conf["draws"]}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write ``<out_dir>/biocoder/``: instances whose gold results come from executing the references.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` or ``"default"``.
            seed: Seeds the hidden inputs; the same seed gives byte-identical files.

        Returns:
            The manifest (counts per split and category, dropped tasks, sha256 per file).
        """
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        conf = _SIZES[size]
        family_dir = Path(out_dir) / self.name
        family_dir.mkdir(parents=True, exist_ok=True)
        splits: dict[str, list[Instance]] = {"train": [], "test": []}
        dropped: list[str] = []
        for kind in KINDS:
            for v_index, variant in enumerate(kind.variants):
                if conf["variants"] is not None and v_index not in conf["variants"]:
                    continue
                split: Split = "test" if v_index == len(kind.variants) - 1 else "train"
                for draw in range(conf["draws"]):
                    inst = self._instance(kind, variant, split, len(splits[split]), f"biocoder:{seed}:{draw}")
                    if inst is None:
                        dropped.append(f"{_task_id(kind, variant)}#{draw}")
                    else:
                        splits[split].append(inst)
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        return write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed, dropped=dropped,
            counts={s: len(items) for s, items in splits.items()},
            categories={k.id: sum(i.category == k.id for items in splits.values() for i in items) for k in KINDS},
        )

    def _instance(self, kind: Kind, variant: dict[str, Any], split: Split, index: int, seed: str) -> Instance | None:
        task = _task_id(kind, variant)
        solution = kind.fill(kind.code, variant)
        example = bb.hidden_cases(kind, variant, f"{seed}:{task}:example")[0]
        ctx = bb.context(kind, variant, example)
        cases = bb.hidden_cases(kind, variant, f"{seed}:{task}")
        target = bb.target_expr(kind, variant)
        try:  # gold = the executed reference; a reference that fails its own tests is dropped, never kept
            payload = bb.run_in_process(bb.program(ctx, solution, target, cases, "build"), "build")
        except Exception:  # noqa: BLE001 - any failure of the reference drops the task (listed in the manifest)
            return None
        expected = payload["results"]
        if not payload["defined"] or any(r[0] != "ok" for r in expected):
            return None
        sig = bb.signature(kind, variant)
        question = (f"This is in python\n{kind.fill(kind.problem, variant)}\n\nSignature: {sig}\n\n{_INSTRUCTIONS}")
        return Instance(
            id=f"{self.name}/{split}/{index:05d}", family=self.name, category=kind.id, split=split,
            question=question, context=f"Module context (your function replaces the marker):\n\n{ctx}",
            answer=solution, answer_type="text", solution=solution, solution_lang="python",
            metadata={"mode": "tests", "task": task, "group": kind.group, "signature": sig, "target": target,
                      "module": ctx, "tests": cases, "expected": expected},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the module with the reference spliced in (its demo prints), then submit the reference code."""
        demo = bb.splice(instance.metadata["module"], instance.solution or "")
        return run_then_submit("python", demo, instance.solution)

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Splice the submitted function into the module and run the hidden tests in a sandbox session."""
        code = strip_fence(submission or "")
        if not code.strip():
            return Verdict(correct=False, score=0.0, reason="empty submission")
        meta = instance.metadata
        hopeless = precheck(code, [meta["target"].rsplit(".", 1)[-1]])
        if hopeless:
            return Verdict(correct=False, score=0.0, reason=f"program failed: {hopeless}")
        session = ctx.session if ctx is not None and ctx.session is not None else self._fallback.session()
        if meta.get("mode") == "stdout":
            return _grade_stdout(instance, code, session)
        nonce = new_nonce()
        source = bb.program(meta["module"], code, meta["target"], meta["tests"], nonce)
        status, payload, _ = run_graded(session, source, nonce, wall_s=_WALL_S, module_name=bb.GRADED_MODULE)
        if status != "ok" or payload is None:
            return Verdict(correct=False, score=0.0, reason=f"program failed: {status}")
        return _compare(payload, meta["expected"], meta["target"])


def _grade_stdout(instance: Instance, code: str, session: Any) -> Verdict:
    """An imported record: the module's demo runs once visibly and once per hidden seed; every stdout must match.

    The gold stdouts never enter the jail: they are compared here, on the host.
    """
    meta = instance.metadata
    try:
        source = bb.splice(meta["module"], code)
    except ValueError as exc:
        raise GraderError(f"{instance.id}: {exc}") from exc
    salts = list(meta.get("hidden_salts") or [])
    want = [meta["expected_stdout"], *(meta.get("hidden_stdout") or [])]
    if len(want) != len(salts) + 1:
        raise GraderError(f"{instance.id}: {len(salts)} hidden seeds but {len(want) - 1} hidden outputs; re-import")
    status, got = run_salts(session, source, [None, *salts], wall_s=_WALL_S * (1 + len(salts)))
    if status != "ok":
        return Verdict(correct=False, score=0.0, reason=f"program failed: {status}")
    differs = [k for k, (g, w) in enumerate(zip(got, want)) if g.rstrip() != w.rstrip()]
    if not differs:
        return Verdict(correct=True, score=1.0, reason=f"stdout matches (demo and {len(salts)} hidden seed(s))")
    where = "the visible demo" if differs[0] == 0 else f"hidden seed {differs[0]}"
    return Verdict(correct=False, score=0.0, reason=f"stdout differs ({where}; {len(differs)} of {len(want)} runs)")


def _compare(payload: Any, want: list[Any], target: str) -> Verdict:
    """Compare the results the jail reported with the gold kept on the host; any malformed payload is wrong.

    The payload is untrusted (the submission ran in the same process as the harness and may have replaced it),
    so its shape is checked here and nothing in it can make this raise.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("defined"), bool):
        return Verdict(correct=False, score=0.0, reason="malformed result payload (forged?)")
    if not payload["defined"]:
        return Verdict(correct=False, score=0.0, reason=f"function {target} is not defined")
    got = payload.get("results")
    if not isinstance(got, list) or len(got) != len(want):
        return Verdict(correct=False, score=0.0, reason=f"expected {len(want)} hidden-test results, got "
                       f"{len(got) if isinstance(got, list) else type(got).__name__} (forged?)")
    try:
        failed = sum(not (isinstance(g, list) and bb.same(g, w)) for g, w in zip(got, want))
    except RecursionError:
        return Verdict(correct=False, score=0.0, reason="results nested too deeply to compare")
    ok = failed == 0
    return Verdict(correct=ok, score=float(ok), reason="all hidden tests pass" if ok else
                   f"{failed} of {len(want)} hidden tests fail")


# -------------------------------------------------------------------------------------------------------------
# The importer of original BioCoder records lives in medagentgym/tasks/importers/biocoder.py (medagentgym import).
# -------------------------------------------------------------------------------------------------------------


def import_records(path: Path | str, *, split: Split = "test", session: Any = None) -> tuple[list[Instance], list[str]]:
    """The earlier API over :mod:`medagentgym.tasks.importers.biocoder`: ``(instances, dropped)`` for one JSONL file.

    Kept for existing callers; new code uses ``medagentgym import --family biocoder`` (per-record report).
    Reference programs run in ``session`` (a sandbox session) or a one-worker bwrap pool.

    Raises:
        TaskError: A line is not JSON or lacks a field (names the line), as before.
    """
    from medagentgym.tasks.importers.biocoder import _instance, check_record
    from medagentgym.tasks.importers.records import read_records

    pool = None if session is not None else FallbackPool("bwrap")
    out: list[Instance] = []
    dropped: list[str] = []
    try:
        for lineno, rec, error in read_records(path):
            if rec is None:
                raise TaskError(f"{path}:{lineno}: {error}; one BioCoder record per line")
            reason, detail, context, hidden = check_record(rec, session if session is not None else pool.session())
            if reason == "missing_field":
                raise TaskError(f"{path}:{lineno}: {detail}")
            if reason:  # a missing package is where the old API ran the program and saw it fail
                label = "reference fails to import" if reason == "needs_packages" else reason.replace("_", " ")
                dropped.append(f"{rec.get('idx')}: {label}: {detail}")
            else:
                out.append(_instance(rec, context, detail, split, hidden))
    finally:
        if pool is not None:
            pool.close()
    return out, dropped
