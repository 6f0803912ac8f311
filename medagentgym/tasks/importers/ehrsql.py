"""EHR SQL families (mimic_iii, eicu, treqs, ehr_seqsql): public question files -> instances over one database.

Accepted records:

* EHRSQL (``valid.json``/``test.json``, a JSON array) and MedAgentGym's ``mimic_iii``/``eicu`` task JSONL (the same
  records plus an ``answer`` computed on MIMIC, which is ignored): ``question``, ``query``, ``value`` (slot
  values), ``template`` (the question before paraphrase), ``id``, ``split``, ``is_impossible``;
* MIMICSQL (``question_refine``, ``sql``, ``key``) and MedAgentGym's lower-cased ``treqs`` rows
  (``question``, ``query``, ``id``);
* EHR-SeqSQL (``seed_question`` + ``question``; ``sql`` a list whose last query is graded, or ``query``).

The gold SQL is post-processed as EHRSQL's evaluator does (EHRSQL records), its slot values are re-instantiated
against the target database (``medagentgym.tasks.importers._slots``), and the answer is what the rewritten SQL RETURNS there.
Unanswerable records (``is_impossible``, a ``nan`` query) and records that stay degenerate are reported, never
kept. With ``answers="public"`` (``--answers public``) MedAgentGym's published answers are kept instead, graded as
EHRSQL's / TREQS's scorers grade them, and records whose published answer is defective are set aside
(:func:`public_instance`, ``medagentgym.tasks.importers.public``). The target database is ``--db`` (copied into the family directory under the family's file name), or the
family's synthetic hospital built at ``--size`` when none is given.
"""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import Instance, TaskError
from medagentgym.tasks.ehr_synth.importers import postprocess_ehrsql
from medagentgym.tasks.importers._common import (
    Imported,
    ImportOptions,
    each_record,
    reject,
    short_hash,
)
from medagentgym.tasks.importers._slots import DIALECTS, Reinstantiator, find_slots
from medagentgym.tasks.importers.records import split_of
from medagentgym.tasks.importers.report import ImportReport

__all__ = ["QUESTION_FIELDS", "parse_record", "public_instance", "run", "shown_question", "target_database"]


def target_database(opts: ImportOptions) -> Path:
    """Copy ``--db`` (or build the family's synthetic database) into the staged family directory.

    Raises:
        TaskError: ``--db`` does not exist or is not an SQLite file.
    """
    dialect = DIALECTS[opts.family]
    dest = opts.family_dir / dialect.db_file
    if opts.db is not None:
        src = Path(opts.db)
        if not src.is_file() or src.read_bytes()[:16] != b"SQLite format 3\x00":
            raise TaskError(f"--db {src} is not an SQLite database; pass the {dialect.db_file} of a built "
                            f"{opts.family} family (medagentgym build) or one made by medagentgym.tasks.ehr_synth.importers")
        shutil.copyfile(src, dest)
        return dest
    from medagentgym.tasks.ehr_synth.hospital import SIZES, cached_draw
    from medagentgym.tasks.registry import family_class

    writer = family_class("mimic_iii" if opts.family == "ehr_seqsql" else opts.family).write_database
    writer(cached_draw(SIZES[opts.size], opts.seed), dest, opts.seed)
    return dest


#: The record fields a shown question can come from (``--question-field``).
QUESTION_FIELDS = ("question", "template")


def shown_question(question: str, template: str, field: str) -> tuple[str, str]:
    """``(text, field it came from)``: the question shown for ``field`` (``question``: the paraphrase;
    ``template``: EHRSQL's canonical question, what MedAgentGym's harness shows), the other when it is missing."""
    if field not in QUESTION_FIELDS:
        raise ValueError(f"question field {field!r} is not one of {', '.join(QUESTION_FIELDS)}")
    if field == "template" and template.strip():
        return template.strip(), "template"
    return question, "question"


def question_note(family: str, field: str) -> str:
    """The import report's line saying which question field is shown, and how to show the other."""
    if field == "template":
        return ("questions shown: each record's 'template' field (EHRSQL's canonical question, as MedAgentGym's "
                "harness shows it; 'question' where a record has no template)")
    other = (" MedAgentGym's harness shows the canonical 'template' instead: --question-field template"
             if family in ("mimic_iii", "eicu") else " --question-field template shows EHRSQL's canonical one")
    return f"questions shown: each record's 'question' field (the paraphrase).{other}"


def parse_record(family: str, record: dict[str, Any]) -> tuple[str, str, str, str, dict[str, Any] | None]:
    """``(key, question, sql, template, slot values or None)`` of one record, in any accepted format.

    Raises:
        ValueError: A required field is missing, or the record is marked unanswerable (message says which).
    """
    if record.get("is_impossible") is True:
        raise ValueError("unanswerable: the record is marked is_impossible")
    question = record.get("question_refine") or record.get("question")
    if record.get("seed_question"):
        question = f"{record['seed_question']} {question or ''}".strip()
    sql = record.get("query") if record.get("query") is not None else record.get("sql")
    if isinstance(sql, list):
        sql = sql[-1] if sql else None
    if not isinstance(question, str) or not question.strip():
        raise ValueError("missing_field: no question (expected 'question' or 'question_refine')")
    if not isinstance(sql, str) or sql.strip().lower() in ("", "nan", "null", "none"):
        raise ValueError("unanswerable: no gold SQL (expected 'query' or 'sql')")
    key = str(record.get("id") or record.get("key") or short_hash(question + sql))
    values = record.get("value") if isinstance(record.get("value"), dict) else None
    if family in ("mimic_iii", "eicu", "ehr_seqsql"):
        sql = postprocess_ehrsql(sql)
    return key, question.strip(), sql.strip(), str(record.get("template") or ""), values


_WORDS = {"subject_id": "patient id", "hadm_id": "admission id", "icd9_code": "icd9 code", "dob_year": "year of birth",
          "dod_year": "year of death", "expire_flag": "death status", "days_stay": "days of hospital stay",
          "admityear": "admission year", "admittime": "admission time",
          "dischtime": "discharge time", "dob": "date of birth", "dod": "date of death", "drug_dose": "drug dose", "formulary_drug_cd": "drug code"}
_TABLE_WORDS = {"demographic": "", "diagnoses": "diagnosis", "procedures": "procedure", "prescriptions": "",
                "lab": "lab test"}
_OPS = {"=": "is", "<": "is less than", ">": "is greater than", "<=": "is at most", ">=": "is at least",
        "!=": "is not", "<>": "is not"}
_MIMICSQL_COND = re.compile(r"([a-z_]+)\.[\"']?([a-z_0-9]+)[\"']?\s*(<=|>=|<>|!=|=|<|>)\s*('[^']*'|\"[^\"]*\"|[\d.]+)",
                            re.IGNORECASE)
_MIMICSQL_COL = re.compile(r"(?:(max|min|avg|sum|count)\s*\(\s*(?:distinct\s+)?)?([a-z_]+)\.[\"']?([a-z_0-9]+)",
                           re.IGNORECASE)


def _words(table: str, column: str) -> str:
    col = _WORDS.get(column.lower(), column.lower().replace("_", " "))
    return f"{_TABLE_WORDS.get(table.lower(), table.lower())} {col}".strip()


def render_mimicsql(sql: str) -> str:
    """A template question stating every condition of a MIMICSQL query verbatim (MIMICSQL's template style).

    Public MIMICSQL questions are paraphrased and often do not state a value as stored ("capso fungin" for
    ``caspofungin``); when such a value must be re-instantiated, this rendering is the question shown.

    Example:
        >>> render_mimicsql("select count ( distinct demographic.'subject_id' ) from demographic "
        ...                 "where demographic.'gender' = 'f' and demographic.'age' < '90'")
        'what is the number of patients whose gender is f and age is less than 90?'
    """
    parts = re.split(r"\bwhere\b", sql, maxsplit=1, flags=re.IGNORECASE)
    head, where = parts[0], parts[1] if len(parts) > 1 else ""
    select = re.split(r"\bfrom\b", head, maxsplit=1, flags=re.IGNORECASE)[0]
    conds = [f"{_words(t, c)} {_OPS[op]} {lit.strip(chr(39) + chr(34))}" for t, c, op, lit in _MIMICSQL_COND.findall(where)]
    cols = _MIMICSQL_COL.findall(select)
    if len(cols) == 1 and cols[0][0].lower() == "count" and cols[0][2].lower() == "subject_id":
        lead = "what is the number of patients"
    else:
        names = [f"{ {'max': 'maximum', 'min': 'minimum', 'avg': 'average', 'sum': 'total', 'count': 'number of'}.get(agg.lower(), '')} "
                 f"{_words(t, c)}".strip() for agg, t, c in cols]
        lead = f"what is the {' and '.join(names)} of patients"
    return f"{lead} whose {' and '.join(conds)}?" if conds else f"{lead}?"


def _instance(family: str, split: str, key: str, question: str, draw: Any, db_file: str, context: str,
              record: dict[str, Any]) -> Instance:
    return Instance(
        id=f"{family}/{split}/{key}", family=family, category="imported", split=split, question=draw.question,
        context=context, answer=draw.answer, answer_type=draw.answer_type, solution=draw.sql, solution_lang="sql",
        data={db_file: db_file},
        metadata={"sql_database": db_file, "source_id": key, "source_question": question,
                  "source_template": record.get("q_tag") or record.get("tag") or "",
                  "reinstantiated": {k: [old, new] for k, (old, new) in draw.changed.items()}},
    )


def public_instance(family: str, record: dict[str, Any], split: str, context: str, db_file: str,
                    question_field: str = "question") -> Instance:
    """One record under the ``public`` answer convention: its published ``answer`` is the gold (answer type
    ``result``), its SQL is kept as published (post-processed as EHRSQL's evaluator does).

    Raises:
        ValueError: ``"<reason>: <detail>"``: a missing field, no published answer, or a defective published gold
            (``medagentgym.tasks.importers.public.ehr_gold_defect``).
    """
    from medagentgym.tasks.importers.public import ehr_gold_defect, is_yes_no

    key, question, sql, template, _values = parse_record(family, record)
    question, shown = shown_question(question, template, question_field)
    answer = record.get("answer")
    if not isinstance(answer, list):
        raise ValueError("no_public_answer: the record has no 'answer' list (MedAgentGym's task files carry one; "
                         "EHRSQL's and MIMICSQL's own files do not: import them with --answers recompute)")
    defect = ehr_gold_defect(family, str(record.get("query") if record.get("query") is not None else record.get("sql")))
    if defect is not None:
        raise ValueError(f"{defect[0]}: {defect[1]}")
    gold = [None if v is None else str(v) for v in answer]
    yes_no = is_yes_no(sql)
    if yes_no and gold not in (["1"], ["0"]):
        raise ValueError(f"gold_malformed: a yes/no query whose published answer is {answer!r}, not ['1'] or ['0']")
    return Instance(
        id=f"{family}/{split}/{key}", family=family, category="imported", split=split, question=question,
        context=context, answer=gold, answer_type="result", solution=sql, solution_lang="sql", data={db_file: db_file},
        metadata={"sql_database": db_file, "source_id": key, "source_question": question, "answers": "public",
                  "question_field": shown,
                  "source_template": record.get("q_tag") or record.get("tag") or "",
                  "grading": {"yes_no": True} if yes_no else {}},
    )


def _run_public(paths: list[Path], opts: ImportOptions, report: ImportReport, context: str) -> list[Imported]:
    dialect = DIALECTS[opts.family]
    if opts.db is None:
        report.warn(f"--answers public keeps answers computed on the credentialed {opts.family} database; without "
                    f"--db the family mounts the synthetic one, so episodes cannot reach them (grading still works)")
    target_database(opts)
    out: list[Imported] = []
    for path, line, record in each_record(paths, report):
        try:
            inst = public_instance(opts.family, record, split_of(record, path, opts.split), context, dialect.db_file,
                                   opts.question_field)
        except ValueError as exc:
            reject(report, path, line, exc)
            continue
        out.append(Imported(inst, str(path), line))
        report.keep("public_answer", f"question_from_{inst.metadata['question_field']}")
    return out


def run(paths: list[Path], opts: ImportOptions, report: ImportReport) -> list[Imported]:
    """Import every record of ``paths`` (see the module docstring); rejected records go to ``report``."""
    from medagentgym.tasks.registry import family_class

    dialect = DIALECTS[opts.family]
    cls = family_class(opts.family)
    # The SQL families keep their context on the class; ehr_seqsql in its module.
    context = getattr(cls, "context_text", "") or importlib.import_module(cls.__module__).CONTEXT
    if opts.question_field not in QUESTION_FIELDS:
        raise TaskError(f"--question-field {opts.question_field!r} is not one of {', '.join(QUESTION_FIELDS)}")
    report.questions = question_note(opts.family, opts.question_field)
    if opts.answers == "public":
        return _run_public(paths, opts, report, context)
    db = target_database(opts)
    out: list[Imported] = []
    engine = Reinstantiator(db, dialect, seed=opts.seed)
    try:
        for path, line, record in each_record(paths, report):
            try:
                key, question, sql, template, values = parse_record(opts.family, record)
            except ValueError as exc:
                reject(report, path, line, exc)
                continue
            first, shown = shown_question(question, template, opts.question_field)
            texts = list(dict.fromkeys([first, question, template])) + (
                [render_mimicsql(sql)] if opts.family == "treqs" else [])
            draw = engine.reinstantiate(key, sql, texts, find_slots(sql, values))
            if not draw.ok:
                report.reject(str(path), line, draw.reason, draw.detail)
                continue
            split = split_of(record, path, opts.split)
            out.append(Imported(_instance(opts.family, split, key, question, draw, dialect.db_file, context,
                                          record), str(path), line))
            report.keep(*(["reinstantiated"] if draw.changed else []) + (["case_fixed"] if draw.case_fixed else [])
                        + [f"question_from_{shown}"])
    finally:
        engine.close()
    return out
