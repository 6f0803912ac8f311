"""biocoder: BioCoder / MedAgentGym ``biocoder`` task JSONL -> instances graded on the reference program's stdout.

A record has ``idx``, ``problem``, ``solution`` (the reference function), ``context`` (its module with the marker
line ``<<insert solution here>>``), ``signature`` and ``code``. The gold is the stdout of the module with the
reference spliced in, run twice in a sandbox session (bubblewrap by default): a record whose program fails,
prints nothing, or prints differently on the two runs is rejected with the reason. Before running anything, the
module's imports are checked against the sandbox's Python environment; a record importing a package that is not
installed is rejected with the ``pip install`` line that fixes it (BioCoder modules use pysam, scikit-image,
centrosome ...). A marker written as a comment (``# <<insert solution here>>``) is accepted, and NumPy 1.x names
the modules use (removed in NumPy 2) are defined again (:func:`normalise_context`).
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
#: Seconds per reference run (BioCoder modules import scipy / scikit-image: several seconds on a busy machine).
WALL_S = 60.0


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


def _instance(rec: dict[str, Any], context: str, stdout: str, split: str) -> Instance:
    from medagentgym.tasks.biocoder import _INSTRUCTIONS

    fn = rec["signature"].split("def ", 1)[-1].split("(", 1)[0].strip()
    digest = hashlib.sha256(str(rec["idx"]).encode()).hexdigest()[:12]
    return Instance(
        id=f"biocoder/{split}/rec-{digest}", family="biocoder", category="imported", split=split,
        question=f"{rec['problem']}\n\nSignature: {rec['signature']}\n\n{_INSTRUCTIONS}",
        context=f"Module context (your function replaces the marker):\n\n{context}",
        answer=rec["solution"], answer_type="text", solution=rec["solution"], solution_lang="python",
        metadata={"mode": "stdout", "idx": rec["idx"], "target": fn, "module": context, "expected_stdout": stdout})


def check_record(rec: dict[str, Any], session: Any) -> tuple[str, str, str]:
    """``(reason, detail_or_stdout, context)``: reason is empty when the record is usable (then the stdout).

    Raises nothing for a bad record; ``session`` is a sandbox session the reference program runs in.
    """
    from medagentgym.tasks.bio import biocoder_build as bb
    from medagentgym.tasks.bio.runner import new_nonce, run_graded

    missing = [f for f in FIELDS if not isinstance(rec.get(f), str)]
    if missing:
        return "missing_field", f"BioCoder record lacks {missing}; expected fields {list(FIELDS)}", ""
    context = normalise_context(rec["context"], rec["solution"])
    try:
        program = bb.splice(context, rec["solution"])
    except ValueError as exc:
        return "no_marker", str(exc), context
    absent = missing_modules(program)
    if absent:
        pip = " ".join(PIP_NAMES.get(m, m) for m in absent)
        return "needs_packages", (f"imports {', '.join(absent)}, not installed in the sandbox's Python: "
                                  f"{sys.prefix}/bin/pip install {pip}"), context
    runs = [run_graded(session, program, new_nonce(), wall_s=WALL_S) for _ in range(2)]
    if any(status != "ok" for status, _, _ in runs):
        return "reference_fails", next(s for s, _, _ in runs if s != "ok")[:160], context
    if not runs[0][2].strip():
        return "no_output", "the reference program prints nothing, so there is no output to compare", context
    if runs[0][2] != runs[1][2]:
        return "nondeterministic", "two runs of the reference program print different output", context
    return "", runs[0][2], context


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every record of ``paths``, running each reference program in a sandbox (``opts.backend``)."""
    from medagentgym.tasks.bio.runner import FallbackPool

    pool = FallbackPool(opts.backend)
    out: list[Imported] = []
    try:
        for path, line, record in each_record(paths, report):
            reason, detail, context = check_record(record, pool.session())
            if reason == "needs_packages":
                report.need(str(path), line, detail, reason)
            elif reason:
                report.reject(str(path), line, reason, detail)
            else:
                report.keep(*(["context_normalised"] if context != record["context"] else []))
                out.append(Imported(_instance(record, context, detail, split_of(record, path, opts.split)),
                                    str(path), line))
    finally:
        pool.close()
    return out
