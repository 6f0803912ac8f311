"""toy_retry: toy_choice where half the records renamed their tables; the first query fails, the error names them.

Description:
    The error-recovery rung of the learning checks. Each record is a ``toy_choice`` record (three readings of one
    lab test in tables ``admission``, ``discharge`` and ``recent``; the question names one in words; the context
    says the tables are named like the readings), but on every second record of each split (``metadata["renamed"]``)
    the database's tables are ``admission_v2``, ``discharge_v2`` and ``recent_v2``. A query of a reading's name then
    fails, and the sandbox's
    grounded SQL error says so and lists the tables the database really has ("no such table", the tables, the
    closest name; ``medagentgym.sandbox.grounding``). Recovering means retrying with the renamed cued table, ``<cue>_v2``; another
    listed name returns a valid but wrong value. ``medagentgym.medcopilot.learning`` demonstrates a retry with a listed name drawn
    at random (retrying is taught, choosing right is not) and measures *first-retry accuracy*: on renamed records,
    the share of episodes whose second query reads ``<cue>_v2`` (chance 1/3).

Example instance:
    question: "Record aab: what value did the glucose monitor record in the recent reading? Submit it."
    context:  "SQLite database: /data/records/aab.db (one table per reading, named like it: test, value, unit), ..."
    answer:   4            answer_type: "integer"        category: "recent" (the cued table)
    solution: "SELECT value FROM recent_v2" (on a renamed record; "SELECT value FROM recent" on the others)

Allowed actions:
    code_execution (sql against the instance's database read-only, or python), submit_answer.

Grading:
    One ``submit_answer`` per episode, integer exact (medagentgym.tasks.graders). A constant answer is right for
    about 1 record in 9.

Episode end:
    The graded submit (terminated), or a budget (truncated). Default 4 turns: a failed query, the retry, the
    submit, a spare.

Arguments:
    ``tasks.make("toy_retry", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/toy_retry/{records/<code>.db, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed:
    the records of ``toy_choice`` at the same size and seed (tiny: 96 train + 128 test), renamed on every second
    one. ``metadata["tables"]`` maps each listed name to the database's real one.

Version history:
    1: first version.
    2: toy_choice version 2's tables and context (``admission``, ``discharge``, ``recent``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medagentgym.tasks.base import Instance, Split, run_then_submit
from medagentgym.tasks.toy_choice import TABLES, ToyChoice, query, write_readings

#: How a renamed record's tables are named: ``recent`` -> ``recent_v2`` (the question still says ``recent``).
RENAMED = "{}_v2"


class ToyRetry(ToyChoice):
    """The toy_retry family (see the module docstring for the spec card)."""

    name = "toy_retry"
    version = 2

    @staticmethod
    def renamed(index: int) -> bool:
        """Whether the split's ``index``-th record renamed its tables (every second one)."""
        return index % 2 == 1

    def _write(self, path: Path, test: str, readings: dict[str, int], index: int) -> None:
        real = {t: RENAMED.format(t) if self.renamed(index) else t for t in TABLES}
        write_readings(path, test, {real[t]: v for t, v in readings.items()})

    def _instance(self, split: Split, index: int, code: str, test: str, cue: str,
                  readings: dict[str, int]) -> Instance:
        inst = super()._instance(split, index, code, test, cue, readings)
        real = {t: RENAMED.format(t) if self.renamed(index) else t for t in TABLES}
        return inst.model_copy(update={"metadata": {**inst.metadata, "renamed": self.renamed(index), "tables": real},
                                       "solution": query(real[cue])})

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Query the cued table under its real name, then submit its value."""
        return run_then_submit("sql", query(instance.metadata["tables"][instance.metadata["table"]]),
                               str(instance.answer))
