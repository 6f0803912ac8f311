"""ehr_seqsql: chains of follow-up questions over the EHRSQL MIMIC-III schema, graded on the last one.

Description:
    EHR-SeqSQL poses sequences of questions that build on each other (same patient, then narrowed to an
    admission, a test, a value). Here one chain is one episode: the question shows the earlier turns of the
    conversation with their answers, then the follow-up to answer. The database is the synthetic hospital of
    ``medagentgym.tasks.ehr_synth`` written by the same builder as ``mimic_iii`` (EHRSQL conventions, current time
    ``2105-12-31 23:59:00``). Chains are data (``medagentgym/tasks/data/ehr_seqsql/chains.yaml``): each names a slot pool
    and 3-4 steps (question, gold SQL, answer type); every step's SQL is self-contained and EXECUTED on the
    built database to obtain its answer (earlier answers shown in the conversation, the last one graded).
    Each chain is one category.

Example instance:
    question: "Earlier in this conversation:\\nQ1: which hospital admissions (hadm_id) does patient 5406 have?\\n
               A1: [100876, 101532]\\nQ2: in which of those admissions did they have a glucose lab test?\\n
               A2: [100876]\\nNow answer the follow-up question:\\nQ3: what was the value of their most recent
               glucose test?"
    answer: 104.0   answer_type: "number"   category: "lab_admissions_last_value"
    solution: the last step's SQL (it repeats the narrowing of the earlier steps as sub-queries).

Allowed actions:
    request_info, code_execution (sql on /data/mimic_iii.db read-only, or python), debugging, submit_answer.

Grading:
    Only the last question is graded, once, by the strict grader of its answer type (medagentgym.tasks.graders): integer
    exact, number within rel 1e-4, datetime to the second, text normalised exact, boolean exactly one of
    true/false/yes/no, set order-free with exact elements. Shotgun, traceback and empty submissions are wrong
    (the original harness rewarded any code execution, even a crash).

Episode end:
    The graded submit (terminated) or a budget (turns, tokens, wall time: truncated). 15 turns.

Arguments:
    ``tasks.make("ehr_seqsql", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/ehr_seqsql/{mimic_iii.db, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed.
    tiny: 30 patients, up to 4 chains per category; default: 1,000 patients, up to 260 per category.
    40 % of each category goes to test. Instances mount only the database.

Version history:
    1: first version (25 chain templates, prior answers shown, strict grading of the last step).
    2: the MIMIC-III database draws from the public EHRSQL vocabularies (same chains, new values).
    3: database rows stored in a seeded random order in every table (was time order per patient);
       ``transfer_careunit`` ends with when the patient last left the unit (its count of transfers was 2 for 91 %
       of the test split, so one constant answered it).
"""

from __future__ import annotations

import random
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from medagentgym.tasks.base import (
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
from medagentgym.tasks.ehr_synth.family import SQL_ACTIONS, TEST_FRACTION
from medagentgym.tasks.ehr_synth.hospital import SIZES, cached_draw
from medagentgym.tasks.ehr_synth.mimic_iii_db import build_mimic_iii
from medagentgym.tasks.ehr_synth.templating import Template, gold_answer
from medagentgym.tasks.graders import grade, render_answer

DB_FILE = "mimic_iii.db"
CHAINS_FILE = Path(__file__).resolve().parent / "data" / "ehr_seqsql" / "chains.yaml"
#: An earlier step whose answer has more elements than this makes the conversation too long: the chain is skipped.
MAX_PRIOR_ITEMS = 25
#: Indexes added to the in-memory copy used while building (faster gold SQL; the shipped file is untouched).
_BUILD_INDEXES = (
    ("admissions", "subject_id"), ("admissions", "hadm_id"), ("labevents", "hadm_id, itemid"),
    ("labevents", "itemid"), ("chartevents", "icustay_id, itemid"), ("chartevents", "hadm_id, itemid"),
    ("prescriptions", "hadm_id"), ("diagnoses_icd", "hadm_id"), ("diagnoses_icd", "icd9_code"),
    ("procedures_icd", "hadm_id"), ("inputevents_cv", "hadm_id"), ("outputevents", "hadm_id"),
    ("microbiologyevents", "hadm_id"), ("cost", "hadm_id"), ("icustays", "hadm_id"), ("transfers", "hadm_id"),
)
CONTEXT = (
    f"SQLite database: /data/{DB_FILE} (EHRSQL MIMIC-III schema, 17 tables: patients, admissions, icustays, "
    "transfers, diagnoses_icd, procedures_icd, d_icd_diagnoses, d_icd_procedures, labevents, d_labitems, "
    "prescriptions, chartevents, inputevents_cv, outputevents, d_items, microbiologyevents, cost), read-only. "
    "All text values are lower-case. The current time is 2105-12-31 23:59:00. The question continues a "
    "conversation: earlier questions and their answers are shown for context; answer only the LAST question. "
    "Run SQL with code_execution (lang 'sql') or Python's sqlite3, then submit only the final answer; for several "
    "values submit a JSON list."
)


@dataclass(frozen=True)
class Step:
    """One question of a chain: its answer type, question and gold SQL (with ``{slot}`` placeholders)."""

    type: str
    q: str
    sql: str


@dataclass(frozen=True)
class Chain:
    """One chain template (one category): a slot pool and 2-4 steps sharing its slots."""

    id: str
    pool: str
    steps: tuple[Step, ...]
    max_items: int = 10


def load_chains(path: Path = CHAINS_FILE) -> list[Chain]:
    """Read the chain file, expanding ``<macro>`` names; raises ``TaskError`` naming a malformed chain."""
    doc = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    macros = doc.get("macros") or {}

    def expand(text: str) -> str:
        for _ in range(3):  # macros may use macros
            for name, body in macros.items():
                text = text.replace(f"<{name}>", body)
        return text

    chains = []
    for raw in doc["chains"]:
        try:
            steps = tuple(Step(type=s["type"], q=s["q"], sql=expand(s["sql"])) for s in raw["steps"])
            chain = Chain(id=raw["id"], pool=expand(raw["pool"]), steps=steps, max_items=raw.get("max_items", 10))
        except (KeyError, TypeError) as exc:
            raise TaskError(f"{path}: chain {raw.get('id')!r} is malformed ({exc}); see the file header") from None
        if not 2 <= len(steps) <= 4:
            raise TaskError(f"{path}: chain {chain.id!r} has {len(steps)} steps; use 2 to 4")
        chains.append(chain)
    ids = [c.id for c in chains]
    if len(ids) != len(set(ids)):
        raise TaskError(f"{path}: duplicate chain ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return chains


def _sql_slots(slots: dict[str, Any]) -> dict[str, Any]:
    return {k: v.replace("'", "''") if isinstance(v, str) else v for k, v in slots.items()}


def prior_answer(step: Step, rows: list[tuple]) -> Any:
    """The answer of an earlier (shown, ungraded) step, or None when it is empty, ambiguous or too long."""
    values = [r[0] for r in rows if r and r[0] is not None and r[0] != ""]
    if step.type in ("set", "list"):
        if not values or len(values) > MAX_PRIOR_ITEMS:
            return None
        return sorted(set(values), key=str) if step.type == "set" else values
    if len(set(values)) != 1:
        return None
    value = values[0]
    if step.type == "boolean":
        return bool(value)
    if step.type == "number":
        return round(float(value), 4)
    if step.type == "integer":
        return int(value)
    return value


def render_question(questions: list[str], answers: list[Any], types: list[str]) -> str:
    """The shown question: earlier turns with their answers, then the follow-up to answer."""
    lines = ["Earlier in this conversation:"]
    for k, (q, a, t) in enumerate(zip(questions[:-1], answers, types), 1):
        lines += [f"Q{k}: {q}", f"A{k}: {render_answer(t, a)}"]
    lines += ["Now answer the follow-up question:", f"Q{len(questions)}: {questions[-1]}"]
    return "\n".join(lines)


def draw_chain(con: sqlite3.Connection, chain: Chain, n: int, *, family: str, seed: int) -> list[dict[str, Any]]:
    """Up to ``n`` distinct instantiated chains (slots, questions, step SQL, step answers)."""
    try:
        cur = con.execute(chain.pool)
    except sqlite3.Error as exc:
        raise TaskError(f"{family}: pool of chain {chain.id!r} failed ({exc}): {chain.pool}") from None
    names = [d[0].lower() for d in cur.description]
    pool = [dict(zip(names, row)) for row in cur.fetchall()]
    rng = random.Random(f"{family}:{seed}:{chain.id}")
    final = Template(id=chain.id, type=chain.steps[-1].type, q="", sql="", pool="", max_items=chain.max_items)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    by_answer: dict[Any, int] = {}
    for _ in range(max(n * 12, 400)):
        if len(out) >= n or not pool:
            break
        slots = dict(rng.choice(pool))
        sqls = [s.sql.format(**_sql_slots(slots)) for s in chain.steps]
        if sqls[-1] in seen:
            continue
        seen.add(sqls[-1])
        answers: list[Any] = []
        for step, sql in zip(chain.steps, sqls):
            try:
                rows = con.execute(sql).fetchmany(MAX_PRIOR_ITEMS + 1)
            except sqlite3.Error as exc:
                raise TaskError(f"{family}: gold SQL of chain {chain.id!r} failed ({exc}): {sql}") from None
            is_last = len(answers) == len(chain.steps) - 1
            answer = gold_answer(final, rows) if is_last else prior_answer(step, rows)
            if answer is None:
                break
            answers.append(answer)
        if len(answers) != len(chain.steps):
            continue
        if final.type == "boolean":
            if by_answer.get(answers[-1], 0) > by_answer.get(not answers[-1], 0):
                continue
            by_answer[answers[-1]] = by_answer.get(answers[-1], 0) + 1
        out.append({"slots": slots, "questions": [s.q.format(**slots) for s in chain.steps], "sqls": sqls,
                    "answers": answers})
    return out


def indexed_copy(db: Path) -> sqlite3.Connection:
    """An in-memory copy of ``db`` with lookup indexes (only for building; results are identical)."""
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    mem = sqlite3.connect(":memory:")
    try:
        src.backup(mem)
    finally:
        src.close()
    for k, (table, cols) in enumerate(_BUILD_INDEXES):
        mem.execute(f"create index _build_ix{k} on {table} ({cols})")
    return mem


class EHRSeqSQL:
    """The ehr_seqsql family (see the module docstring for the spec card)."""

    name = "ehr_seqsql"
    version = 3
    actions = SQL_ACTIONS
    per_category: ClassVar[dict[str, int]] = {"tiny": 4, "default": 260}

    def __init__(self, root: Path | str | None = None) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/ehr_seqsql``)."""
        self.root = Path(root) if root is not None else None
        self._chains = load_chains()

    @property
    def categories(self) -> list[str]:
        """One category per chain template, in file order."""
        return [c.id for c in self._chains]

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Upper bounds without building: categories, and categories x instances per category."""
        if size not in self.per_category:
            raise TaskError(f"size {size!r} is not one of {sorted(self.per_category)}; use 'tiny' or 'default'")
        return {"categories": len(self._chains), "instances": len(self._chains) * self.per_category[size]}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write ``<out_dir>/ehr_seqsql/``: the database, train/test instances and a manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` or ``"default"`` (patients and chains per category).
            seed: Seeds the hospital, the database conventions and the slot draws (byte-identical per seed).

        Returns:
            The manifest (counts per split and category, table sizes, seed, size, version, sha256 per file).
        """
        self.counts(size)
        started = time.perf_counter()
        family_dir = Path(out_dir) / self.name
        family_dir.mkdir(parents=True, exist_ok=True)
        tables = build_mimic_iii(cached_draw(SIZES[size], seed), family_dir / DB_FILE, seed=seed)
        con = indexed_copy(family_dir / DB_FILE)
        splits: dict[Split, list[Instance]] = {"train": [], "test": []}
        per_cat: dict[str, int] = {}
        try:
            for chain in self._chains:
                items = draw_chain(con, chain, self.per_category[size], family=self.name, seed=seed)
                if not items:
                    raise TaskError(f"{self.name}: chain {chain.id!r} has no instance at size={size!r}, seed={seed}")
                per_cat[chain.id] = len(items)
                n_test = round(len(items) * TEST_FRACTION) if len(items) > 1 else 0
                for k, item in enumerate(items):
                    split: Split = "test" if k < n_test else "train"
                    splits[split].append(self._instance(chain, item, split, len(splits[split])))
        finally:
            con.close()
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        manifest = write_manifest(family_dir, family=self.name, version=self.version, size=size, seed=seed,
                                  tables=tables, counts={s: len(v) for s, v in splits.items()}, categories=per_cat)
        manifest["build_seconds"] = round(time.perf_counter() - started, 2)  # returned only, not written
        return manifest

    def _instance(self, chain: Chain, item: dict[str, Any], split: Split, index: int) -> Instance:
        types = [s.type for s in chain.steps]
        return Instance(
            id=f"{self.name}/{split}/{index:06d}", family=self.name, category=chain.id, split=split,
            question=render_question(item["questions"], item["answers"][:-1], types), context=CONTEXT,
            answer=item["answers"][-1], answer_type=types[-1], solution=item["sqls"][-1], solution_lang="sql",
            data={DB_FILE: DB_FILE},
            metadata={"chain": chain.id, "slots": item["slots"], "steps": [
                {"question": q, "sql": s, "answer": a, "answer_type": t}
                for q, s, a, t in zip(item["questions"], item["sqls"], item["answers"], types)],
                "sql_database": DB_FILE},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the last step's gold SQL, then submit the rendered gold answer."""
        return run_then_submit("sql", instance.solution, render_answer(instance.answer_type, instance.answer))

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """The strict grader of the last step's answer type (exactly one answer; sets order-free)."""
        return grade(instance.answer_type, instance.answer, submission)
