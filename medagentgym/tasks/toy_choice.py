"""toy_choice: three readings of one record, the question names which one; query that table, submit its value.

Description:
    A ``toy_lookup`` variant for learning checks of *query choice*. Each instance has its own SQLite database with
    three one-row tables, ``admission``, ``discharge`` and ``recent`` (each ``test, value, unit``): three synthetic
    readings of one lab test, three different values from 1 to 9. The question names the reading in words ("the
    discharge reading"), the context says there is one table per reading named like it, and the answer is the cued
    table's value. Querying another
    table returns a valid reading of the same record, but the wrong value; no digit appears in a question. So
    success needs two decisions: read the table the question names (the cue, a word of the prompt), then submit
    the value the observation shows. ``medagentgym.medcopilot.learning`` warm-starts a model on demonstrations that query a
    table drawn at random, independent of the cue, and submit what they read (consistent episodes: copying is
    taught, cue -> table never), and measures whether RL raises *query-choice accuracy* (the share of episodes
    whose SQL reads the cued table; chance 1/3), read from the trajectories.

    Cued tables are balanced over each split (every third record names the same one), and values are drawn
    independently per record. Records are named by three letters in both splits (test codes continue after the
    training ones), as in ``toy_lookup``.

Example instance:
    question: "Record kxb: what value did the potassium monitor record in the discharge reading? Submit it."
    context:  "SQLite database: /data/records/kxb.db (one table per reading, named like it: test, value, unit), ..."
    answer:   4            answer_type: "integer"        category: "discharge" (the cued table)
    solution: "SELECT value FROM discharge"

Allowed actions:
    code_execution (sql against the instance's database read-only, or python), submit_answer.

Grading:
    One ``submit_answer`` per episode, integer exact (medagentgym.tasks.graders). A constant answer is right for
    about 1 record in 9; a policy that reads a table at random and submits what it read, for 1 in 3.

Episode end:
    The graded submit (terminated), or a budget (truncated). Default 3 turns: one query, one submit, one spare.

Arguments:
    ``tasks.make("toy_choice", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/toy_choice/{records/<code>.db, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed.
    tiny: 96 train + 128 test records (128 held-out records: the paired interval of a learning check needs them);
    default: 384 + 384. Every instance mounts the ``records`` folder; its query runs against its own file there
    (``metadata["sql_database"]``); ``metadata["table"]`` is the cued table and ``metadata["readings"]`` every
    table's value (for demonstrations and the swapped-cue control; never shown to the agent).

Version history:
    1: first version (tables ``morning``, ``noon``, ``evening``, listed in the context).
    2: tables ``admission``, ``discharge``, ``recent``, not listed in the context (issue 30's diagnosis): with the
       tiny model's tokenizer each new name is one token with its leading space (" admission"), the same in the
       question and in the SQL, and appears nowhere else in the prompt, so the cue is one visible token. The old
       names split into several tokens whose first (the token that decides the table) was " m" (also in every
       question's " monitor"), " n", and a bare " " (14 times in every prompt), and the context listed all three.
       Values and cue order are unchanged.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import (
    Instance,
    Split,
    run_then_submit,
    write_bytes_atomic,
)
from medagentgym.tasks.toy_lookup import _TESTS, RECORDS, ToyLookup, _code

#: The three tables of every record, in the order the context lists them.
TABLES = ("admission", "discharge", "recent")
_SIZES: dict[str, dict[str, int]] = {"tiny": {"train": 96, "test": 128}, "default": {"train": 384, "test": 384}}
_LOW, _HIGH = 1, 9


def query(table: str) -> str:
    """The SQL that reads ``table``'s value."""
    return f"SELECT value FROM {table}"


def write_readings(path: Path, test: str, readings: dict[str, int]) -> None:
    """One deterministic database: a one-row table per reading (the bytes depend only on the rows)."""
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        db = Path(tmp) / path.name
        con = sqlite3.connect(db)
        try:
            for table, value in readings.items():
                con.execute(f"CREATE TABLE {table} (test TEXT NOT NULL, value INTEGER NOT NULL, unit TEXT NOT NULL)")
                con.execute(f"INSERT INTO {table} VALUES (?, ?, ?)", (test, value, _TESTS[test]))
            con.commit()
        finally:
            con.close()
        write_bytes_atomic(path, db.read_bytes())


class ToyChoice(ToyLookup):
    """The toy_choice family (see the module docstring for the spec card); binding to a root, loading instances and
    grading (integer exact: the cued table's value and nothing else) are toy_lookup's."""

    name = "toy_choice"
    version = 2
    actions = frozenset({"code_execution", "submit_answer"})
    #: Values are uniform on 1..9: a constant answer is right for ~1 record in 9 (on 128 test records up to ~17 %).
    #: Not a benchmark family, so its constant-answer bound is 25 %, as toy_lookup's.
    floor_bound = 0.25
    sizes = _SIZES
    rng_name = "toy_choice"  # toy_retry: the same records (its subclass renames tables)

    @property
    def categories(self) -> list[str]:
        """The cued tables, in a fixed order."""
        return sorted(TABLES)

    def _records(self, family_dir: Path, split: Split, n: int, first: int, rng: random.Random) -> list[Instance]:
        """Write the ``n`` records of ``split``: cued tables balanced over the split in a shuffled order, three
        different values per record (``build``, a fixed seed, is toy_lookup's and gives byte-identical files)."""
        cues = [TABLES[i % len(TABLES)] for i in range(n)]
        rng.shuffle(cues)  # balanced over the split, in no pattern
        items = []
        for index, cue in enumerate(cues):
            test = rng.choice(sorted(_TESTS))
            readings = dict(zip(TABLES, rng.sample(range(_LOW, _HIGH + 1), len(TABLES))))
            code = _code(first + index)
            self._write(family_dir / RECORDS / f"{code}.db", test, readings, index)
            items.append(self._instance(split, index, code, test, cue, readings))
        return items

    def _write(self, path: Path, test: str, readings: dict[str, int], index: int) -> None:
        """The record's database (``index``: its place in the split)."""
        write_readings(path, test, readings)

    def _instance(self, split: Split, index: int, code: str, test: str, cue: str,
                  readings: dict[str, int]) -> Instance:
        database = f"{RECORDS}/{code}.db"
        return Instance(
            id=f"{self.name}/{split}/{index:04d}", family=self.name, category=cue, split=split,
            question=f"Record {code}: what value did the {test} monitor record in the {cue} reading? Submit it.",
            context=(f"SQLite database: /data/{database} (one table per reading, named like it: test, value, unit), "
                     "read-only. "
                     "Run SQL with code_execution (lang 'sql'), then submit only the value."),
            answer=readings[cue], answer_type="integer", solution=query(cue), solution_lang="sql",
            data={RECORDS: RECORDS},
            metadata={"sql_database": database, "table": cue, "readings": readings},
        )

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Query the cued table, then submit its value."""
        return run_then_submit("sql", query(instance.metadata["table"]), str(instance.answer))

