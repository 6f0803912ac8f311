"""npowerai: N-PowerAI / MedAgentGym ``npowerai`` task JSONL -> instances with answers recomputed from the question.

Each record's raw quantities (means, SDs, proportions, hazard ratio, alpha, power or size) are read from its
question and the family's reference snippet is executed on them (``medagentgym.tasks.power.importer``); the original answer
is only kept in metadata. The public files reuse ``task_id`` within a group, so instance ids carry the record's
file and line.

With ``answers="public"`` (``--answers public``) the published answer is the gold instead, graded as N-PowerAI's
scorer grades it (sizes exact, powers within 1 % of the gold), and only records whose stated quantities reproduce
it are kept: a group whose records all carry one answer is set aside as ``gold_constant``, a record the stated
quantities do not give as ``gold_not_reproducible`` (with the generator defect that does give it, where known;
``medagentgym.tasks.importers.public``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medagentgym.tasks.base import Instance
from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record, reject
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport
from medagentgym.tasks.power.importer import record_instance

__all__ = ["public_instance", "run"]

#: N-PowerAI's power tolerance: strictly within 1 % of the gold (``0.99 a < x < 1.01 a``).
PUBLIC_POWER_TOLERANCE = 0.01


def public_instance(record: dict[str, Any], *, split: str, key: str) -> Instance:
    """One record under the ``public`` convention: the published answer is the gold, when the question's stated
    quantities reproduce it (otherwise ``ValueError("gold_not_reproducible: ...")``).

    The question is the published one, unchanged (the default convention appends the conventions its
    recomputed answer depends on).
    """
    from medagentgym.tasks.importers.public import npowerai_defect
    from medagentgym.tasks.npowerai import execute_snippet
    from medagentgym.tasks.power.snippets import reference_code

    inst = record_instance(record, split=split, key=key, resize_saturated=False)  # validates fields, reads the quantities
    design, target, params = inst.metadata["design"], inst.metadata["target"], inst.metadata["params"]
    code = reference_code(design, target, params)
    exact = execute_snippet(code.replace("answer = round(float(power_at(n)), 4)", "answer = float(power_at(n))"))
    published = record["answer"]
    defect = npowerai_defect(design, target, params, exact, published)
    if defect is not None:
        raise ValueError(f"{defect[0]}: {defect[1]}")
    grading = ({"rel_tol": PUBLIC_POWER_TOLERANCE, "abs_tol": 0.0, "strict": True} if target == "power" else {})
    return Instance(
        id=f"npowerai/{split}/public-{key}", family="npowerai", category=f"{design}.{target}", split=split,
        question=str(record["question"]).strip(), context=inst.context, answer=published,
        answer_type="number" if target == "power" else "integer", solution=code, solution_lang="python",
        metadata={"design": design, "target": target, "params": params, "grading": grading, "answers": "public",
                  "recomputed": exact, "task_type": record["task_type"], "source_id": record.get("task_id")},
    )


def _run_public(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    from medagentgym.tasks.importers.public import npowerai_constant_groups

    records = list(each_record(paths, report))
    constant = npowerai_constant_groups([r for _p, _l, r in records])
    out: list[Imported] = []
    for path, line, record in records:
        group = (str(record.get("task_type", "")).strip().lower(), str(record.get("estimate_target", "")).strip().lower())
        if group in constant:
            report.reject(str(path), line, "gold_constant",
                          f"every {record['task_type']} {record['estimate_target']} record carries the answer "
                          f"{record['answer']!r}, whatever its inputs")
            continue
        try:
            inst = public_instance(record, split=split_of(record, path, opts.split), key=f"{path.stem}-{line}")
        except ValueError as exc:
            reject(report, path, line, exc)
            continue
        saturated = inst.metadata["target"] == "power" and float(inst.answer) >= 0.99
        report.keep("public_answer", *(["power_saturated"] if saturated else []))
        out.append(Imported(inst, str(path), line))
    return out


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every record of ``paths``; rejected records go to ``report`` (see the module docstring)."""
    if opts.answers == "public":
        return _run_public(paths, opts, report)
    out: list[Imported] = []
    for path, line, record in each_record(paths, report):
        try:
            inst = record_instance(record, split=split_of(record, path, opts.split), key=f"{path.stem}-{line}")
        except ValueError as exc:
            reject(report, path, line, exc)
            continue
        report.keep("recomputed", *(["matches_original"] if inst.metadata["matches_original"] else []),
                    *(["resized"] if "reinstantiated" in inst.metadata else []))
        out.append(Imported(inst, str(path), line))
    return out
