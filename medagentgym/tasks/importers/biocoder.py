"""biocoder: BioCoder / MedAgentGym ``biocoder`` task JSONL -> instances graded on the reference program's stdout.

A record has ``idx``, ``problem``, ``solution`` (the reference function), ``context`` (its module with the marker
line ``<<insert solution here>>``), ``signature`` and ``code``. The gold is the stdout of the module's ``main()``
demo with the reference spliced in, run in a sandbox session (bubblewrap by default). Before running anything,
the module's imports are checked against the sandbox's Python environment; a record importing a package that is
not installed is rejected with the ``pip install`` line that fixes it (the ``[bio]`` extra holds what the public
file needs: scikit-image, pysam, centrosome). The demo then runs in three fixed *worlds*
(:mod:`medagentgym.tasks.bio.demo_runs`: seeded global generators, a fixed ``PYTHONHASHSEED`` per fresh
interpreter, unseeded generators and ``os.urandom`` drawn from the world, entropy use traced): a record whose demo
fails, prints nothing, prints differently between worlds, or draws entropy it never seeded is rejected with the
reason, and the verdict is the same on every import (not a two-run coin flip). Each of :data:`HIDDEN_SALTS`
hidden seeds whose demo output is deterministic and differs from the visible one becomes a hidden test (the
grader runs the submission under it too). A marker written as a comment (``# <<insert solution here>>``) is
accepted, and NumPy 1.x names the modules use (removed in NumPy 2) are defined again (:func:`normalise_context`).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import Instance
from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport

__all__ = ["FIELDS", "PIP_NAMES", "missing_modules", "normalise_context", "run"]

FIELDS = ("idx", "problem", "solution", "context", "signature")
#: Import name -> the distribution to ``pip install`` (when they differ).
PIP_NAMES = {"skimage": "scikit-image", "sklearn": "scikit-learn", "Bio": "biopython", "PIL": "pillow",
             "cv2": "opencv-python", "yaml": "pyyaml"}
_COMMENTED_MARKER = re.compile(r"^(?P<indent>[ \t]*)#\s*(?P<marker><<insert solution here>>)\s*$", re.MULTILINE)
#: Seconds for the reference's runs in the grader's runtime (BioCoder modules import scipy / scikit-image: several
#: seconds on a busy machine), and for the whole determinism probe (three fresh interpreters).
WALL_S = 60.0
PROBE_WALL_S = 240.0
#: Hidden seeds tried per record; each that changes the demo's output becomes a hidden test.
HIDDEN_SALTS = 2


#: NumPy 1.x names BioCoder modules still use, removed in NumPy 2 (the pinned stack), with their replacements.
_NUMPY1 = {"asfarray": "lambda a, dtype=float: _np1.asarray(a, dtype=dtype)", "float_": "_np1.float64",
           "complex_": "_np1.complex128", "NaN": "_np1.nan", "Inf": "_np1.inf", "infty": "_np1.inf",
           "product": "_np1.prod", "cumproduct": "_np1.cumprod", "alltrue": "_np1.all", "sometrue": "_np1.any",
           "round_": "_np1.round", "unicode_": "_np1.str_", "string_": "_np1.bytes_"}
_NUMPY1_USE = re.compile(r"\b(?:np|numpy)\.(" + "|".join(_NUMPY1) + r")\b")
_FIRST_IMPORT = re.compile(r"^(?:import|from)\s+(?!__future__)", re.MULTILINE)


def normalise_context(context: str, solution: str = "") -> str:
    """The context made runnable on this stack, without changing what it computes.

    A commented marker line (``# <<insert solution here>>``) becomes the marker line; NumPy 1.x names the module
    or its reference ``solution`` uses that NumPy 2 removed (``np.asfarray``, ``np.float_`` ...) are defined again
    as their NumPy 2 equivalents by a short block before the module's first import (it also serves the spliced
    function).
    """
    from medagentgym.tasks.bio.biocoder_build import MARKER

    if not any(line.strip() == MARKER for line in context.splitlines()):
        context = _COMMENTED_MARKER.sub(lambda m: m["indent"] + m["marker"], context, count=1)
    used = sorted(set(_NUMPY1_USE.findall(context + "\n" + solution)))
    first = _FIRST_IMPORT.search(context)
    if used and first:
        shim = ("# NumPy 1.x names this module uses (removed in NumPy 2), defined as their NumPy 2 equivalents.\n"
                "import numpy as _np1\n" + "".join(f"_np1.{name} = {_NUMPY1[name]}\n" for name in used))
        context = context[:first.start()] + shim + context[first.start():]
    return context


def missing_modules(source: str) -> list[str]:
    """Top-level modules ``source`` imports that this Python environment (the sandbox's venv) cannot find."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if n not in sys.builtin_module_names and importlib.util.find_spec(n) is None)


def _instance(rec: dict[str, Any], context: str, stdout: str, split: str,
              hidden: dict[str, list[Any]] | None = None) -> Instance:
    from medagentgym.tasks.biocoder import _INSTRUCTIONS

    fn = rec["signature"].split("def ", 1)[-1].split("(", 1)[0].strip()
    digest = hashlib.sha256(str(rec["idx"]).encode()).hexdigest()[:12]
    hidden = hidden or {"salts": [], "stdouts": []}
    return Instance(
        id=f"biocoder/{split}/rec-{digest}", family="biocoder", category="imported", split=split,
        question=f"{rec['problem']}\n\nSignature: {rec['signature']}\n\n{_INSTRUCTIONS}",
        context=f"Module context (your function replaces the marker):\n\n{context}",
        answer=rec["solution"], answer_type="text", solution=rec["solution"], solution_lang="python",
        metadata={"mode": "stdout", "idx": rec["idx"], "target": fn, "module": context, "expected_stdout": stdout,
                  "hidden_salts": hidden["salts"], "hidden_stdout": hidden["stdouts"]})


def _determinism(worlds: list[dict[str, Any]], k: int) -> tuple[str, str]:
    """``(reason, detail)`` of run ``k`` (one salt) across the probe's worlds; ``("", stdout)`` when usable."""
    broken = next((w["error"] for w in worlds if "error" in w), None)
    if broken:
        return "reference_fails", broken[:200]
    runs = [w["runs"][k] for w in worlds]
    failed = next((r["status"] for r in runs if r["status"] != "ok"), None)
    if failed:
        return "reference_fails", failed[:160]
    flags = sorted({f for r in runs for f in r["flags"]})
    if flags:
        return "nondeterministic", "the reference program " + "; ".join(flags)
    outputs = [r["stdout"] for r in runs]
    if len(set(outputs)) > 1:
        first = next(i for i, o in enumerate(outputs) if o != outputs[0])
        return "nondeterministic", (f"the reference program prints different output in fixed worlds 1 and {first + 1} "
                                    "(other seeds for the global generators and PYTHONHASHSEED)")
    if not outputs[0].strip():
        return "no_output", "the reference program prints nothing, so there is no output to compare"
    return "", outputs[0]


def check_record(rec: dict[str, Any], session: Any, *, seed: int = 0
                 ) -> tuple[str, str, str, dict[str, list[Any]]]:
    """``(reason, detail_or_stdout, context, hidden)``: reason is empty when the record is usable.

    The reference program's ``main()`` demo runs in each fixed world of
    :func:`medagentgym.tasks.bio.demo_runs.probe_worlds` (seeded generators, a fixed ``PYTHONHASHSEED`` per fresh
    interpreter, traced entropy use): any difference or unseeded draw rejects the record as nondeterministic, and
    the verdict is the same on every import. The demo also runs under :data:`HIDDEN_SALTS` hidden seeds (every
    seed it sets replaced by one derived from the salt), and each salt whose output is deterministic and differs
    from the visible demo becomes a hidden test: ``hidden = {"salts": [...], "stdouts": [...]}``. Last, the gold
    is run once in the grader's own runtime (``run_salts``) and must print the same.

    Raises nothing for a bad record; ``session`` is a sandbox session the reference program runs in.
    """
    from medagentgym.tasks.bio import biocoder_build as bb
    from medagentgym.tasks.bio.demo_runs import derive_salts, probe_worlds, run_salts

    none: dict[str, list[Any]] = {"salts": [], "stdouts": []}
    missing = [f for f in FIELDS if not isinstance(rec.get(f), str)]
    if missing:
        return "missing_field", f"BioCoder record lacks {missing}; expected fields {list(FIELDS)}", "", none
    context = normalise_context(rec["context"], rec["solution"])
    try:
        program = bb.splice(context, rec["solution"])
    except ValueError as exc:
        return "no_marker", str(exc), context, none
    absent = missing_modules(program)
    if absent:
        pip = " ".join(PIP_NAMES.get(m, m) for m in absent)
        return "needs_packages", (f"imports {', '.join(absent)}, not installed in the sandbox's Python: "
                                  f"{sys.prefix}/bin/pip install {pip}"), context, none
    salts = derive_salts(f"{seed}:{rec['idx']}", HIDDEN_SALTS)
    worlds = probe_worlds(session, program, [None, *salts], wall_s=PROBE_WALL_S)
    reason, visible = _determinism(worlds, 0)
    if reason:
        return reason, visible, context, none
    hidden: dict[str, list[Any]] = {"salts": [], "stdouts": []}
    for k, salt in enumerate(salts, start=1):
        bad, out = _determinism(worlds, k)
        if not bad and out != visible and out not in hidden["stdouts"]:
            hidden["salts"].append(salt)
            hidden["stdouts"].append(out)
    status, gold = run_salts(session, program, [None, *hidden["salts"]], wall_s=WALL_S)
    if status != "ok":
        return "reference_fails", f"in the grader's runtime: {status[:160]}", context, none
    if gold != [visible, *hidden["stdouts"]]:
        return "nondeterministic", ("the reference program prints differently in the grader's runtime than in "
                                    "the fixed worlds"), context, none
    return "", visible, context, hidden


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every record of ``paths``, running each reference program in a sandbox (``opts.backend``)."""
    from medagentgym.tasks.bio.runner import FallbackPool

    pool = FallbackPool(opts.backend)
    out: list[Imported] = []
    try:
        for path, line, record in each_record(paths, report):
            reason, detail, context, hidden = check_record(record, pool.session(), seed=opts.seed)
            if reason == "needs_packages":
                report.need(str(path), line, detail, reason)
            elif reason:
                report.reject(str(path), line, reason, detail)
            else:
                notes = ["context_normalised"] if context != record["context"] else []
                notes.append("hidden_inputs" if hidden["salts"] else "visible_demo_only")
                report.keep(*notes)
                out.append(Imported(_instance(record, context, detail, split_of(record, path, opts.split), hidden),
                                    str(path), line))
    finally:
        pool.close()
    return out
