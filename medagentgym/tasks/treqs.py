"""treqs: MIMICSQL-style questions over the five-table MIMICSQL (TREQS) database, answered with SQL.

Description:
    The seeded synthetic hospital (``medagentgym.tasks.ehr_synth``; no credentialed data) is written as MIMICSQL's five
    tables (DEMOGRAPHIC, DIAGNOSES, PROCEDURES, PRESCRIPTIONS, LAB) with MIMICSQL's conventions: one DEMOGRAPHIC
    row per admission with a synthetic patient NAME, every value stored as lower-case text as MedAgentGym's
    MIMICSQL questions compare them (``f``, ``emergency``, ``hypertension nos``), MIMIC's native shifted dates
    (2100-2200), ages above 89 remapped, DRUG_DOSE and VALUE_UNIT glued; the vocabularies cover the public
    MIMICSQL questions' values (``medagentgym/tasks/data/ehr_vocab``), including newborn admissions, ``delta`` lab flags and
    body-fluid labs. Questions (lower-cased, as in MIMICSQL) come from templates in
    ``medagentgym/tasks/data/treqs/templates.yaml``: counts, averages, maxima, minima and retrievals with one to three
    conditions over one to three tables. Each template is a category; gold answers come from EXECUTING the gold
    SQL (MIMICSQL's style: ``DEMOGRAPHIC."AGE" < '30'``) on the built database.

Example instance:
    (tiny build, seed 0)
    question: "how many male patients are aged below 88?"
    context:  "SQLite database: /data/treqs.db (MIMICSQL schema: DEMOGRAPHIC, DIAGNOSES, ...) ..."
    answer:   13          answer_type: "integer"        category: "count_gender_age.none"
    solution: 'SELECT COUNT ( DISTINCT DEMOGRAPHIC."SUBJECT_ID" ) FROM DEMOGRAPHIC WHERE ... = 'm' AND ... < '88'

Allowed actions:
    request_info, code_execution (sql on /data/treqs.db read-only, or python), debugging, submit_answer.

Grading:
    One ``submit_answer`` per episode, graded by the strict grader of the answer type (medagentgym.tasks.graders): integer
    exact; number within rel 1e-4; text normalised exact; datetime to the second; set order-insensitive; a
    two-attribute answer is a list in the question's order. "Nothing found": a count is 0, any other value
    ``None``. Shotgun, traceback and empty submissions fail. Imported records may keep MedAgentGym's published
    answers (``medagentgym import --answers public``: the first row MedAgentGym kept, graded as TREQS's scorer
    compares it; queries that can return several rows are set aside).

Episode end:
    The graded submit (terminated) or a budget (turns, tokens, wall time: truncated). 15 turns.

Arguments:
    ``tasks.make("treqs", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/treqs/{treqs.db, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed.
    tiny: 30 patients (45, 60 ... up to 90 at a seed where 30 leave a category empty),
    up to 3 instances per template; default: 1,000 patients, up to 300 per template.
    ``public_ids=[FILES]`` gives the first ordinary patients the ids public question files name (their
    histories are the ordinary draw). ``public_questions=[FILES]`` is a schema/coverage SMOKE option: it plants
    patients shaped by those questions (``medagentgym.tasks.ehr_synth.plant``, an answer key for them); the
    manifest says ``planted`` and so does every evaluation report built on it; never report its numbers.
    40 % of each category goes to test. The instance mounts only the database.

Version history:
    1: first version (MIMICSQL schema and conventions, strict graders, explicit submit).
    2: values lower-cased and procedure codes without leading zeros (MedAgentGym's MIMICSQL conventions), public
       MIMICSQL vocabularies (newborns, ``delta`` flags, body-fluid labs, CMS ICD-9 titles), single-quoted
       values in the gold SQL, longer question wording; ``build(..., public_questions=FILES)`` adds the patients
       the files name.
       Test instances are chosen per category to spread answers, and no answer holds more than 8 % of a split
       (``templating.MAX_ANSWER_SHARE``), so no constant answer nears the 10 % floor bound. tiny builds draw 6
       instances per category (was 3) so a test split of small counts has answers to choose from.
    3: nine two-attribute templates ("what is the X and Y of ...", MIMICSQL's ~15 % of public questions; the
       answer is the one row, as a list in the question's order) and the public answer mix: 7 % of the answers
       say "nothing found" (a count of 0, no value), chosen per category to the shares in ``data/treqs/mix.json``
       (``scripts/check_public_sql.py``). ``public_questions`` builds are labelled schema/coverage smoke builds.
    4: rows stored in a seeded random order in every table (was time order per patient); same values.
       ``lab_fluids_of_subject`` replaces ``lab_categories_of_subject`` (every subject had all three categories,
       so one constant answered 91-97 % of it). tiny builds draw 8 instances per category (was 6): with rows in
       random order, 6 left a count of 2 on 11.8 % of the tiny train split.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from medagentgym.tasks.ehr_synth.family import NOTHING_RULE, EHRSQLFamily
from medagentgym.tasks.ehr_synth.hospital import RawHospital
from medagentgym.tasks.ehr_synth.treqs_db import build_treqs

DB_FILE = "treqs.db"


def _write(raw: RawHospital, path: Path, seed: int) -> dict[str, int]:
    return build_treqs(raw, path, seed=seed)


class TREQS(EHRSQLFamily):
    """The treqs family (see the module docstring for the spec card)."""

    name = "treqs"
    version = 4
    db_file = DB_FILE
    per_category: ClassVar[dict[str, int]] = {"tiny": 8, "default": 300}
    context_text = (
        f"SQLite database: /data/{DB_FILE} (MIMICSQL schema, 5 tables: DEMOGRAPHIC (one row per hospital "
        "admission), DIAGNOSES, PROCEDURES, PRESCRIPTIONS, LAB; joined on HADM_ID), read-only. Every column holds "
        "text, all values lower-case (e.g. GENDER 'f'/'m', ADMISSION_TYPE 'emergency'). Run SQL with code_execution (lang 'sql') or Python's sqlite3, then submit only "
        "the final answer; for several values submit a JSON list. " + NOTHING_RULE
    )
    write_database = staticmethod(_write)
