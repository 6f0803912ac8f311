"""eicu: EHRSQL-style questions over a synthetic ICU database in the EHRSQL eICU schema, answered with SQL.

Description:
    The same seeded synthetic hospital as ``mimic_iii`` (``medagentgym.tasks.ehr_synth``; no credentialed data), viewed as
    eICU: ICU stays become unit stays (``patientunitstayid``) of hospital stays (``patienthealthsystemstayid``)
    of patients (``uniquepid`` like ``013-55516``), events are offsets from unit admission turned into times,
    and the database is written in EHRSQL's 10-table eICU schema and conventions (lower-case values, times in
    2100-2105, current time ``2105-12-31 23:59:00``, path-derived diagnosis/treatment names, vitals as columns of
    ``vitalperiodic``, a cost table), with the public EHRSQL eICU vocabularies (``medagentgym/tasks/data/ehr_vocab``).
    Templates in ``medagentgym/tasks/data/eicu/templates.yaml`` (retrieval, counts, time windows, top-N, event-after-event);
    each (template, time/visit filter) pair is a category. Gold answers come from EXECUTING the gold SQL on the
    built database.

Example instance:
    (tiny build, seed 0)
    question: "how many times was vancomycin inj 1,000 mg vial prescribed to patient 017-62692 since 2103?"
    context:  "SQLite database: /data/eicu.db (EHRSQL eICU schema) ... current time 2105-12-31 23:59:00"
    answer:   3           answer_type: "integer"        category: "med_count_patient.since_year"
    solution: "select count( * ) from medication where medication.patientunitstayid in ( select ... ) and ..."

Allowed actions:
    request_info, code_execution (sql on /data/eicu.db read-only, or python), debugging, submit_answer.

Grading:
    One ``submit_answer`` per episode, graded by the strict grader of the answer type (medagentgym.tasks.graders): integer
    exact; number within rel 1e-4; datetime to the second; text normalised exact; boolean exactly one truth
    word (a bare 1/0 is a count here); set order-insensitive with exactly the gold elements. "Nothing found": a
    count is 0, a list ``[]``, any other value ``None`` (each only by its own token). Shotgun, traceback and empty
    submissions fail. Imported records may keep MedAgentGym's published answers (``medagentgym import --answers
    public``: EHRSQL's result, graded as its scorer does).

Episode end:
    The graded submit (terminated) or a budget (turns, tokens, wall time: truncated). 15 turns.

Arguments:
    ``tasks.make("eicu", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/eicu/{eicu.db, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed.
    tiny: 30 patients (45, 60 ... up to 90 at a seed where 30 leave a category empty),
    up to 3 instances per category; default: 1,000 patients, up to 150 per category.
    ``public_ids=[FILES]`` gives the first ordinary patients the ids public question files name (their
    histories are the ordinary draw). ``public_questions=[FILES]`` is a schema/coverage SMOKE option: it plants
    patients shaped by those questions (``medagentgym.tasks.ehr_synth.plant``, an answer key for them); the
    manifest says ``planted`` and so does every evaluation report built on it; never report its numbers.
    40 % of each category goes to test. The instance mounts only the database.

Version history:
    1: first version (EHRSQL eICU schema, strict graders, explicit submit).
    2: the hospital draws from the public EHRSQL eICU vocabularies (drug names, diagnosis / treatment names,
       intake-output labels and paths incl. ``%input%``, culture sites); question mix moved toward EHRSQL's
       (relative windows, top-N, event-after-event, longer wording); no answer fills more than a third of a
       category; ``build(..., public_questions=FILES)`` adds the patients public question files name.
       Test instances are chosen per category to spread answers, and no answer holds more than 8 % of a split
       (``templating.MAX_ANSWER_SHARE``), so no constant answer nears the 10 % floor bound.
    3: question and answer mix matched to MedAgentGym's public files (``data/eicu/mix.json``, measured by
       ``scripts/check_public_sql.py``): each category's instances are chosen so that time windows, top-N,
       event-after-event, yes/no and current-visit questions hold the public shares, and 17.8 % of the answers
       say "nothing found" (a count of 0, no value, an empty list; drawn by crossing slot values between pool
       rows), graded by their own tokens; yes/no questions take yes/no words, not a bare 1/0 (a count of 0 is an
       answer now). ``public_questions`` builds are labelled schema/coverage smoke builds; ``public_ids``
       gives ordinary patients the public files' ids.
    4: rows stored in a seeded random order in every table (was time order per stay); same values.
    5: per-template constants pay about what they pay on the public files without their wall-clock defect
       (issue 34): "nothing found" answers at the public records' trusted share (13.5 %, was the midpoint with
       the wall-clock-inflated published share), and no meaningful answer holds more than a quarter of a built
       category (``answer_share``; a count of 2 held half of some small categories).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from medagentgym.tasks.ehr_synth.eicu_db import build_eicu
from medagentgym.tasks.ehr_synth.eicu_view import eicu_view
from medagentgym.tasks.ehr_synth.family import ANSWER_RULES, EHRSQLFamily
from medagentgym.tasks.ehr_synth.hospital import RawHospital

DB_FILE = "eicu.db"


def _write(raw: RawHospital, path: Path, seed: int) -> dict[str, int]:
    return build_eicu(eicu_view(raw, seed=seed), path, seed=seed)


class EICU(EHRSQLFamily):
    """The eicu family (see the module docstring for the spec card)."""

    name = "eicu"
    version = 5
    db_file = DB_FILE
    per_category: ClassVar[dict[str, int]] = {"tiny": 3, "default": 150}
    answer_share: ClassVar[float | None] = 0.25
    context_text = (
        f"SQLite database: /data/{DB_FILE} (EHRSQL eICU schema, 10 tables: patient, diagnosis, treatment, lab, "
        "medication, cost, allergy, intakeoutput, microlab, vitalperiodic), read-only. Patients are identified by "
        "uniquepid; every clinical table links to patient through patientunitstayid. All text values are "
        "lower-case. The current time is 2105-12-31 23:59:00: use it instead of the wall clock (a stay with a NULL "
        "discharge time is the current one). Run SQL with code_execution (lang 'sql') or Python's sqlite3, then "
        "submit only the final answer; for several values submit a JSON list. " + ANSWER_RULES
    )
    write_database = staticmethod(_write)
