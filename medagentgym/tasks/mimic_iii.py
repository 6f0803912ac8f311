"""mimic_iii: EHRSQL-style questions over a synthetic hospital in the EHRSQL MIMIC-III schema, answered with SQL.

Description:
    A seeded synthetic hospital (``medagentgym.tasks.ehr_synth``; no credentialed data) is written as EHRSQL's 17-table
    MIMIC-III SQLite database with EHRSQL's conventions (lower-cased values, times shifted into 2100-2105,
    a fixed current time ``2105-12-31 23:59:00``, 10 % of patients still in hospital, the nine vital-sign
    items, a COST table); drugs, labs, items, ICD titles and categories include every value the public EHRSQL
    questions compare against (``medagentgym/tasks/data/ehr_vocab``). Questions come from templates in
    ``medagentgym/tasks/data/mimic_iii/templates.yaml`` covering the EHRSQL space: retrieval, counting, aggregation,
    first/last, current stay, relative and absolute time windows ("since 3 years ago", "last month"), top-N
    rankings, event-after-event questions (within 2 days / the same month / the same visit), comparisons and
    multi-hop joins. Each (template, time/visit filter) pair is a category. Every gold answer is obtained by
    EXECUTING the gold SQL on the built database (read-only), never written by hand.

Example instance:
    (tiny build, seed 0)
    question: "how many times was warfarin prescribed to patient 37041 since 2105?"
    context:  "SQLite database: /data/mimic_iii.db (EHRSQL MIMIC-III schema) ... current time 2105-12-31 23:59:00"
    answer:   2           answer_type: "integer"        category: "rx_count_patient.since_year"
    solution: "select count( * ) from prescriptions where prescriptions.hadm_id in ( ... ) and ..."

Allowed actions:
    request_info, code_execution (sql on /data/mimic_iii.db read-only, or python), debugging, submit_answer.

Grading:
    One ``submit_answer`` per episode, graded by the strict grader of the answer type (medagentgym.tasks.graders):
    integer exact; number within rel 1e-4; datetime to the second; text normalised exact; boolean exactly one
    of true/false/yes/no (a bare 1/0 is a count here, not a yes/no); set order-insensitive with the exact
    elements. "Nothing found": a count is 0, a list ``[]``, any other value ``None`` (each only by its own token).
    Several candidates, tracebacks and empty submissions are wrong (no substring matching, unlike the original
    harness). Imported records may keep MedAgentGym's published answers instead (``medagentgym import --answers
    public``: EHRSQL's result, graded as its scorer does; ``medagentgym.tasks.importers.public``).

Episode end:
    The graded submit (terminated) or a budget (turns, tokens, wall time: truncated). 15 turns.

Arguments:
    ``tasks.make("mimic_iii", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/mimic_iii/{mimic_iii.db, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed.
    tiny: 30 patients (45, 60 ... up to 90 at a seed where 30 leave a category empty),
    up to 3 instances per category; default: 1,000 patients, up to 150 per category.
    ``public_ids=[FILES]`` gives the first ordinary patients the ids public question files name (their
    histories are the ordinary draw). ``public_questions=[FILES]`` is a schema/coverage SMOKE option: it plants
    patients shaped by those questions (``medagentgym.tasks.ehr_synth.plant``, an answer key for them); the
    manifest says ``planted`` and so does every evaluation report built on it; never report its numbers.
    40 % of each category goes to test. The instance mounts only the database (never the instance files).

Version history:
    1: first version (EHRSQL MIMIC-III schema, strict graders, explicit submit).
    2: the hospital draws from the public EHRSQL/MIMICSQL vocabularies (medagentgym/tasks/data/ehr_vocab); question mix moved
       toward EHRSQL's ("since N years/months ago" and "last month" windows on every timed template, top-N and
       event-after-event templates, longer wording); no answer fills more than a third of a category;
       ``build(..., public_questions=FILES)`` adds the patients public question files name.
       Test instances are chosen per category to spread answers, and no answer holds more than 8 % of a split
       (``templating.MAX_ANSWER_SHARE``), so no constant answer nears the 10 % floor bound.
    3: question and answer mix matched to MedAgentGym's public files (``data/mimic_iii/mix.json``, measured by
       ``scripts/check_public_sql.py``): each category's instances are chosen so that time windows, top-N,
       event-after-event, yes/no and current-visit questions hold the public shares, and 15.5 % of the answers
       say "nothing found" (a count of 0, no value, an empty list; drawn by crossing slot values between pool
       rows), graded by their own tokens; yes/no questions take yes/no words, not a bare 1/0 (a count of 0 is an
       answer now). ``public_questions`` builds are labelled schema/coverage smoke builds; ``public_ids``
       gives ordinary patients the public files' ids.
    4: rows stored in a seeded random order in every table (was time order per patient: "first"/"last" needed
       no ORDER BY); same values.
    5: per-template constants pay about what they pay on the public files without their wall-clock defect
       (issue 34): "nothing found" answers at the public records' trusted share (11.5 %, was the midpoint with
       the wall-clock-inflated published share), and no meaningful answer holds more than a quarter of a built
       category (``answer_share``; a count of 2 held half of some small categories).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from medagentgym.tasks.ehr_synth.family import ANSWER_RULES, EHRSQLFamily
from medagentgym.tasks.ehr_synth.hospital import RawHospital
from medagentgym.tasks.ehr_synth.mimic_iii_db import build_mimic_iii

DB_FILE = "mimic_iii.db"


def _write(raw: RawHospital, path: Path, seed: int) -> dict[str, int]:
    return build_mimic_iii(raw, path, seed=seed)


class MimicIII(EHRSQLFamily):
    """The mimic_iii family (see the module docstring for the spec card)."""

    name = "mimic_iii"
    version = 5
    db_file = DB_FILE
    per_category: ClassVar[dict[str, int]] = {"tiny": 3, "default": 150}
    answer_share: ClassVar[float | None] = 0.25
    context_text = (
        f"SQLite database: /data/{DB_FILE} (EHRSQL MIMIC-III schema, 17 tables: patients, admissions, icustays, "
        "transfers, diagnoses_icd, procedures_icd, d_icd_diagnoses, d_icd_procedures, labevents, d_labitems, "
        "prescriptions, chartevents, inputevents_cv, outputevents, d_items, microbiologyevents, cost), read-only. "
        "All text values are lower-case. The current time is 2105-12-31 23:59:00: use it instead of the wall clock "
        "(a hospital visit with a NULL dischtime is the current one). Run SQL with code_execution (lang 'sql') or "
        "Python's sqlite3, then submit only the final answer; for several values submit a JSON list. " + ANSWER_RULES
    )
    write_database = staticmethod(_write)
