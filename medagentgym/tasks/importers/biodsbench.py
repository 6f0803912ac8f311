"""biodsbench: BioDSBench / MedAgentGym ``biodsbench`` task JSONL -> instances over the studies' own tables.

A record names its study (``study_ids``, a PubMed id), the tables it reads (``/workdir/<table>.csv`` in
``dataframes`` and the reference code), earlier notebook cells (``code_histories``), the reference answer and the
assert lines (``test_cases``). The tables are the study's cBioPortal export, which is not shipped: pass
``--data DIR`` holding ``DIR/<pmid>/`` (or ``DIR/<cBioPortal id>/``) with the CSVs; a record whose tables are
missing is rejected with the exact files and folder to provide. Each used study folder is copied into the family
(``imported/<pmid>/``) and mounted as ``/data/workdir``; ``/workdir/`` paths in the record become
``/data/workdir/``. With ``verify`` (the default), earlier cells + reference + asserts run as one program in a
sandbox session over the copied tables, and records whose reference fails its own asserts are rejected.
"""

from __future__ import annotations

import ast
import contextlib
import re
import shutil
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import GradeContext, Instance, Split
from medagentgym.tasks.importers._common import Imported, ImportOptions, each_record, reject
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport

__all__ = ["FIELDS", "STUDIES", "record_instance", "run", "study_folder", "tables_of"]

FIELDS = ("queries", "dataframes", "test_cases", "reference_answer", "study_ids", "question_ids")
WORKDIR = "/workdir/"
#: PubMed id -> cBioPortal study id of the studies MedAgentGym's BioDSBench records use (public identifiers).
STUDIES = {"32437664": "egc_trap_msk_2020", "33765338": "ihch_msk_2021", "30867592": "histiocytosis_cobi_msk_2019",
           "28472509": "odg_msk_2017", "37699004": "egc_msk_2023", "28985567": "dlbcl_duke_2017",
           "25303977": "cscc_hgsc_bcm_2014", "30742119": "gbm_columbia_2019", "29713087": "dlbcl_dfci_2018",
           "32864625": "breast_alpelisib_2020", "34819518": "crc_nigerian_2020"}
_TABLE = re.compile(r"/workdir/([\w.-]+\.(?:csv|tsv|txt))")


def _as_list(text: Any) -> list[str]:
    """``code_histories``/``test_cases`` arrive as a list or its string form."""
    if isinstance(text, list):
        return [str(t) for t in text]
    text = str(text or "").strip()
    if not text or text == "[]":
        return []
    with contextlib.suppress(ValueError, SyntaxError):
        value = ast.literal_eval(text)
        if isinstance(value, list):
            return [str(t) for t in value]
    return [text]


def tables_of(record: dict[str, Any]) -> list[str]:
    """The ``/workdir/`` files a record reads (from its table list, reference and earlier cells)."""
    text = " ".join(str(record.get(k, "")) for k in ("dataframes", "reference_answer", "code_histories", "tables"))
    return sorted(set(_TABLE.findall(text)))


def study_folder(data_root: Path | None, study: str) -> Path | None:
    """``<data_root>/<pmid>`` or ``<data_root>/<cBioPortal id>``, whichever exists (None without ``--data``)."""
    if data_root is None:
        return None
    for name in (study, STUDIES.get(study, "")):
        if name and (Path(data_root) / name).is_dir():
            return Path(data_root) / name
    return None


def record_instance(record: dict[str, Any], data_root: Path | None, family_dir: Path, *, split: Split = "test"
                    ) -> Instance:
    """One record -> an instance over its study's copied tables.

    Raises:
        ValueError: ``"<reason>: <detail>"``: ``missing_field`` (the record lacks a field), ``needs_data`` (the
            study's tables are not under ``data_root``; the detail names the files and the flag) or
            ``bad_tests`` (its test cases are not valid Python).
    """
    from medagentgym.tasks.bio.values import check_names
    from medagentgym.tasks.biodsbench import _INSTRUCTIONS

    missing = [f for f in FIELDS if f not in record]
    if missing:
        raise ValueError(f"missing_field: BioDSBench record lacks {missing}; expected {list(FIELDS)}")
    study = str(record["study_ids"])
    needed = tables_of(record)
    src = study_folder(data_root, study)
    absent = [t for t in needed if src is None or not (src / t).is_file()]
    if src is None or absent:
        cbio = STUDIES.get(study)
        raise ValueError(
            f"needs_data: no data folder with the tables of study {study}"
            + (f" (cBioPortal {cbio})" if cbio else "") + f": put {', '.join(absent or needed) or 'its tables'} "
            f"(CSV) under DIR/{study}/ and pass --data DIR")
    dest = Path(family_dir) / "imported" / study
    if not dest.is_dir():
        shutil.copytree(src, dest)

    def fix(text: Any) -> str:
        return str(text).replace(WORKDIR, "/data/workdir/")

    prelude = "\n".join(fix(c) for c in _as_list(record.get("code_histories")))
    checks = "\n".join(fix(t) for t in _as_list(record["test_cases"])) + "\n"
    try:  # the names the asserts read: the grader sends only those of the submission's variables across
        names = check_names(checks)
    except SyntaxError as exc:
        raise ValueError(f"bad_tests: test_cases are not valid Python ({exc.msg})") from None
    earlier = f"\n\nEarlier notebook cells (run before your code):\n{prelude}" if prelude else ""
    return Instance(
        id=f"biodsbench/{split}/rec-{study}-{record['question_ids']}", family="biodsbench", category="imported",
        split=split, question=f"{fix(record['queries'])}\n\n{_INSTRUCTIONS}",
        context=f"Tables:\n\n{fix(record['dataframes'])}{earlier}",
        answer=fix(record["reference_answer"]), answer_type="text", solution=fix(record["reference_answer"]),
        solution_lang="python", data={"workdir": f"imported/{study}"},
        metadata={"study": study, "question_id": record["question_ids"], "prelude": prelude, "checks": checks,
                  "check_names": names},
    )


def verify(instance: Instance, family_dir: Path, pool: Any, checker: Any) -> str:
    """Why ``instance``'s reference fails its own asserts ("" when it passes): the reference runs in a session of
    ``pool``; ``checker`` (a ``BioDSBench`` over ``family_dir``) runs the asserts in its grader-only jail."""
    session = pool.session({"workdir": Path(family_dir) / instance.data["workdir"]})
    verdict = checker.grade(instance, instance.solution or "", GradeContext(session=session))
    return "" if verdict.correct else verdict.reason


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every record of ``paths`` (see the module docstring); rejected records go to ``report``."""
    from medagentgym.tasks.bio.runner import FallbackPool
    from medagentgym.tasks.biodsbench import BioDSBench

    pool = FallbackPool(opts.backend) if opts.verify else None
    checker = BioDSBench(root=opts.family_dir, grader_backend=opts.backend) if opts.verify else None
    out: list[Imported] = []
    try:
        for path, line, record in each_record(paths, report):
            try:
                inst = record_instance(record, opts.data, opts.family_dir, split=split_of(record, path, opts.split))
            except ValueError as exc:
                reject(report, path, line, exc)
                continue
            why = verify(inst, opts.family_dir, pool, checker) if pool is not None else ""
            if why:
                report.reject(str(path), line, "reference_fails", f"the reference fails its own asserts ({why})")
                continue
            report.keep(*(["verified"] if pool is not None else []))
            out.append(Imported(inst, str(path), line))
    finally:
        for closing in (pool, checker):
            if closing is not None:
                closing.close()
    return out
