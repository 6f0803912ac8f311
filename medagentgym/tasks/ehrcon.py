"""ehrcon: is what a clinical note says about an entity consistent with the admission's database rows?

Description:
    EHRCon asks, for one (hospital admission, medical entity) pair, whether the admission's clinical notes
    disagree with its structured records. Here the records are the synthetic hospital of ``medagentgym.tasks.ehr_synth``
    written by the ``mimic_iii`` builder as one merged database (``EHRCon_combined.db``, EHRSQL MIMIC-III schema,
    admissions scoped by ``hadm_id``), and the notes (``clinical_notes.csv``, NOTEEVENTS columns: discharge
    summaries, nursing and physician notes, in the shorthand such notes use: "Hct 31.2 % @ 08:00", "s/p",
    "d/w", "cont to monitor") are RENDERED from those rows by ``medagentgym.tasks.ehr_synth.notes``. An entity is
    written by its database label or, 95 % of the time when it has one, by clinical shorthand or a brand name
    (``Hct`` for hematocrit, ``BUN``, ``HR``, ``SBP``, ``Lasix``, ``HTN``; an acronym label as the acronym, ``RDW``),
    and notes mention entities that have such a form 4 times as often as others (faithful and falsified alike),
    so 84.8 % of the default build's mentions are abbreviations or brand names (the public notes: 82 %); the
    question names the entity as the note writes it (EHRCon's "Medical entity" is the note's surface string), so
    the agent maps it to the database (``notes.resolve``). Some stated entities are
    falsified on purpose and the kind is recorded: ``value``, ``unit``, ``time``, ``dose`` or ``absent`` (the
    note asserts an entity the admission has no row of). A false statement is written like a true one: its
    number, unit, dose and entity are those of some database row (``notes.surface_association`` measures that no
    surface feature predicts the label). Each entity is mentioned once per admission, so
    (admission, entity) pairs are unique and never carry conflicting labels. The gold label is produced by
    EXECUTING a reference check (SQL: does any row of the admission match the note's claim?) and must agree with
    the recorded injection; disagreeing items are dropped and counted. Labels follow the public balance: 30 %
    inconsistent in each split AND each entity table (the public files: 28.8 % train, 31.5 % test), so a constant
    answer earns the 70 % base rate and no table pays more; admissions do not cross splits. Category =
    ``<table>.<kind>`` (tables lab, vital, rx, dx, px; kind ``none`` for a faithful mention).

Example instance:
    question: "Hospital admission 100876, medical entity 'glucose'. Is there any inconsistency between what
               the clinical notes of this admission state about 'glucose' and the database? ..."
    answer: true   answer_type: "boolean"   category: "lab.value"
    solution: "select case when count( * ) = 0 then 'true' else 'false' end from labevents where ..."

Allowed actions:
    request_info, code_execution (sql on /data/EHRCon_combined.db, or python reading /data/clinical_notes.csv),
    terminal, debugging, submit_answer.

Grading:
    One ``submit_answer``: the strict boolean grader, exactly one of true/false/yes/no. Printing both words (the
    original harness's "true wins" exploit), tracebacks and empty submissions are wrong. A constant answer
    scores the base rate: 70 % for "false" (consistent), as on the public files; compare success with it.

Episode end:
    The graded submit (terminated) or a budget (turns, tokens, wall time: truncated). 15 turns.

Arguments:
    ``tasks.make("ehrcon", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/ehrcon/{EHRCon_combined.db, clinical_notes.csv, train.jsonl, test.jsonl, manifest.json}``,
    byte-identical per seed. tiny: 30 patients; default: 1,000 patients (all admissions, up to 8 entities each).
    40 % of admissions go to test.

Version history:
    1: first version (rendered notes, recorded injections, executed reference check, balanced labels).
    2: the MIMIC-III database draws from the public EHRSQL vocabularies (same notes and checks, new values).
    3: the public label balance (30 % inconsistent, per split and per entity table; was 50/50), clinical
       shorthand in notes and questions (Hct, BUN, HR, SBP ...; 60 % of entities that have one), shorthand filler
       lines in every note.
    4: no label in how a statement is written: falsified and absent statements take their numbers, units, doses
       and entities from the database's own rows (before, random two-decimal values predicted "inconsistent": 60 %
       vs 21 %); absent labs and vitals are stated at a time of the admission's own rows (was the admission
       time); abbreviations and brand names for more labs, drugs, diagnoses and procedures (Lasix, Percocet, HTN,
       CAD, PRBC transfusion; 90 % of entities that have one); rows stored in a seeded random order.
    5: entity names at the public abbreviation share (issue 34): short forms for 200 more labels (fluid labs,
       brand names, procedure acronyms), acronym labels written as acronyms (``RDW``, ``MCHC``), 95 % of the
       mentions of an entity with a short form use it, and such entities are mentioned 4 times as often
       (``notes.MENTION_WEIGHT``, drawn before the label, for faithful and absent entities alike).
"""

from __future__ import annotations

import csv
import io
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import (
    GradeContext,
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
from medagentgym.tasks.ehr_seqsql import indexed_copy
from medagentgym.tasks.ehr_synth.hospital import SIZES, cached_draw
from medagentgym.tasks.ehr_synth.mimic_iii_db import build_mimic_iii
from medagentgym.tasks.ehr_synth.notes import (
    KINDS,
    NOTE_COLUMNS,
    Vocab,
    admission_mentions,
    check_sql,
    render_notes,
)
from medagentgym.tasks.graders import grade, render_answer

DB_FILE = "EHRCon_combined.db"
NOTES_FILE = "clinical_notes.csv"
TEST_FRACTION = 0.4
#: Share of inconsistent (true) labels in each split and entity table: the public EHRCon files have 28.8 % (train)
#: and 31.5 % (test).
INCONSISTENT_SHARE = 0.30
ACTIONS = frozenset({"request_info", "code_execution", "terminal", "debugging", "submit_answer"})
CONTEXT = (
    f"Files (read-only): /data/{DB_FILE}, an SQLite database in the EHRSQL MIMIC-III schema (labevents + "
    "d_labitems, chartevents + d_items, prescriptions, diagnoses_icd + d_icd_diagnoses, procedures_icd + "
    f"d_icd_procedures, admissions, ...; text lower-case), and /data/{NOTES_FILE}, the clinical notes (NOTEEVENTS "
    "columns ROW_ID, SUBJECT_ID, HADM_ID, CHARTDATE, CHARTTIME, STORETIME, CATEGORY, DESCRIPTION, CGID, ISERROR, "
    "TEXT, ADMITTIME). Notes state lab and vital values with unit and chart time (YYYY-MM-DD HH:MM), prescriptions "
    "with dose, unit, route and start date, and diagnoses/procedures by their short title; notes name an entity by "
    "its database label or by clinical shorthand (Hct, BUN, HR, SBP, ...), as the question does. A statement is "
    "consistent when some row of THAT admission matches all of it; a statement about an entity the admission has "
    "no row of is inconsistent. Submit exactly one word: true (inconsistent) or false (consistent)."
)


def _question(hadm: int, entity: str) -> str:
    return (f"Hospital admission {hadm}, medical entity '{entity}'. Is there any inconsistency between what the "
            f"clinical notes of this admission state about '{entity}' and the database (value, unit, time, dose, or "
            "the entity not being recorded at all)? Answer true if there is at least one inconsistency, else false.")


def _notes_csv(rows: list[list[Any]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(NOTE_COLUMNS)
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _balance(items: list[dict[str, Any]], rng: random.Random, share: float = INCONSISTENT_SHARE
             ) -> list[dict[str, Any]]:
    """Keep ``share`` inconsistent items in EACH entity table (drop a seeded sample of the surplus), so that
    neither the split nor any table (what the entity's name tells) pays more than the base rate to a constant."""
    keep: set[int] = set()
    for table in KINDS:
        pos = [k for k, it in enumerate(items) if it["label"] and it["mention"].table == table]
        neg = [k for k, it in enumerate(items) if not it["label"] and it["mention"].table == table]
        n_pos = min(len(pos), round(len(neg) * share / (1 - share)))
        n_neg = min(len(neg), round(n_pos * (1 - share) / share)) if n_pos else 0
        keep |= set(rng.sample(pos, n_pos)) | set(rng.sample(neg, n_neg))
    return [it for k, it in enumerate(items) if k in keep]


class EHRCon:
    """The ehrcon family (see the module docstring for the spec card)."""

    name = "ehrcon"
    version = 5
    actions = ACTIONS
    #: Built at the public label balance, "always consistent" earns the 70 % base rate (plus rounding).
    floor_bound = 1 - INCONSISTENT_SHARE + 0.01

    def __init__(self, root: Path | str | None = None) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/ehrcon``)."""
        self.root = Path(root) if root is not None else None

    @property
    def categories(self) -> list[str]:
        """``<table>.<kind>`` for every entity table and the kinds it can carry (``none`` = faithful)."""
        return [f"{table}.{kind}" for table, kinds in KINDS.items() for kind in kinds]

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Upper bounds without building: categories, and admissions x 8 entities (before balancing)."""
        if size not in SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(SIZES)}; use 'tiny' or 'default'")
        return {"categories": len(self.categories), "instances": int(SIZES[size] * 1.4) * 8}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write ``<out_dir>/ehrcon/``: database, rendered notes, balanced train/test instances, manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` (30 patients) or ``"default"`` (1,000 patients).
            seed: Seeds the hospital, the entity choice and the injections (byte-identical per seed).

        Returns:
            The manifest (counts per split, category and label, dropped items, sha256 per file).
        """
        self.counts(size)
        started = time.perf_counter()
        family_dir = Path(out_dir) / self.name
        family_dir.mkdir(parents=True, exist_ok=True)
        tables = build_mimic_iii(cached_draw(SIZES[size], seed), family_dir / DB_FILE, seed=seed)
        con = indexed_copy(family_dir / DB_FILE)
        try:
            items, notes, dropped = self._draw(con, seed)
        finally:
            con.close()
        write_bytes_atomic(family_dir / NOTES_FILE, _notes_csv(notes))
        admissions = sorted({it["hadm"] for it in items})
        random.Random(f"{self.name}:{seed}:split").shuffle(admissions)
        test_adm = set(admissions[: round(len(admissions) * TEST_FRACTION)])
        splits: dict[Split, list[Instance]] = {}
        for split in ("train", "test"):
            chosen = _balance([it for it in items if (it["hadm"] in test_adm) == (split == "test")],
                              random.Random(f"{self.name}:{seed}:{split}"))
            splits[split] = [self._instance(it, split, k) for k, it in enumerate(chosen)]
            write_instances(family_dir, split, splits[split])
        per_cat: dict[str, int] = {}
        for inst in splits["train"] + splits["test"]:
            per_cat[inst.category] = per_cat.get(inst.category, 0) + 1
        manifest = write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed, tables=tables,
            counts={s: len(v) for s, v in splits.items()}, categories=per_cat, notes=len(notes),
            dropped_unverified=dropped, labels={s: sum(bool(i.answer) for i in v) for s, v in splits.items()},
        )
        manifest["build_seconds"] = round(time.perf_counter() - started, 2)  # returned only, not written
        return manifest

    def _draw(self, con: sqlite3.Connection, seed: int) -> tuple[list[dict[str, Any]], list[list[Any]], int]:
        """Mentions of every admission, verified by executing their reference check; notes; dropped count."""
        vocab = Vocab(con)
        admissions = con.execute("select hadm_id, subject_id, admittime, dischtime from admissions "
                                 "order by hadm_id").fetchall()
        items: list[dict[str, Any]] = []
        notes: list[list[Any]] = []
        dropped = 0
        for hadm, subject, admit, disch in admissions:
            rng = random.Random(f"{self.name}:{seed}:{hadm}")
            mentions = admission_mentions(con, hadm, admit, rng, vocab)
            if not mentions:
                continue
            notes += render_notes(hadm, subject, admit, disch, mentions, rng, len(notes))
            for m in mentions:
                sql = check_sql(hadm, m.table, m.claim)
                (label,) = con.execute(sql).fetchone()
                if (label == "true") != m.inconsistent:  # the reference check must confirm the injection
                    dropped += 1
                    continue
                items.append({"hadm": hadm, "mention": m, "sql": sql, "label": label == "true"})
        keys = [(it["hadm"], it["mention"].entity) for it in items]
        if len(keys) != len(set(keys)):
            raise TaskError(f"{self.name}: duplicate (admission, entity) pairs at seed={seed}; notes.py must keep "
                            "one mention per entity and admission")
        return items, notes, dropped

    def _instance(self, item: dict[str, Any], split: Split, index: int) -> Instance:
        m = item["mention"]
        return Instance(
            id=f"{self.name}/{split}/{index:06d}", family=self.name, category=f"{m.table}.{m.kind}", split=split,
            question=_question(item["hadm"], m.surface), context=CONTEXT, answer=item["label"], answer_type="boolean",
            solution=item["sql"], solution_lang="sql", data={DB_FILE: DB_FILE, NOTES_FILE: NOTES_FILE},
            metadata={"hadm_id": item["hadm"], "entity": m.entity, "surface": m.surface, "table": m.table,
                      "kind": m.kind, "claim": m.claim, "sql_database": DB_FILE},
        )

    def question_template(self, instance: Instance) -> str:
        """The entity's table (``lab``, ``rx`` ...): one question wording for all, and the entity's name tells the
        table; the category's kind (``lab.value``) is the label itself (used by the per-template reward floor)."""
        return str(instance.metadata.get("table") or instance.category.split(".", 1)[0])

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the reference check (SQL on the note's claim), then submit the label."""
        return run_then_submit("sql", instance.solution, render_answer("boolean", instance.answer))

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """The strict boolean grader: exactly one of true/false/yes/no."""
        return grade("boolean", instance.answer, submission)
