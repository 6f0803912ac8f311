"""toy_lookup: read a stored lab value with SQL, then submit it (a two-turn tool-use family for learning checks).

Description:
    Each instance has its own one-row SQLite database (``reading(test, value, unit)``): one synthetic lab
    reading, a value from 1 to 9. The question names the record but not the value, and values are drawn
    independently per record, so the only way to the answer is to run the query and submit what it returned: the
    answer depends on the tool's *observation*. Every instance is solved by the same SQL, so the skill is exactly
    "read the value out of the observation" (the learning checks of ``medagentgym.medcopilot.learning`` and
    ``scripts/bench_learning.py``). Records of the test split are never seen in training, so success there cannot
    come from memorised answers; no digit appears in a question. Records are named alike in both splits (a code of
    three letters, test codes continuing after the training ones), so a held-out prompt differs from a training
    one only in which record it names, not by a split marker a small model could key on.

Example instance:
    question: "Record kxb: what value did the potassium monitor record in this task's database? Submit it."
    context:  "SQLite database: /data/records/kxb.db (table reading: test, value, unit), read-only. ..."
    answer:   4            answer_type: "integer"        category: "potassium"
    solution: "SELECT value FROM reading"

Allowed actions:
    code_execution (sql against the instance's database read-only, or python), submit_answer.

Grading:
    One ``submit_answer`` per episode, integer exact (medagentgym.tasks.graders). Several candidates in one submission are
    wrong. A constant answer is right for about 1 record in 9 (values are uniform on 1..9).

Episode end:
    The graded submit (terminated), or a budget (truncated). Default 3 turns: one query, one submit, one spare.

Arguments:
    ``tasks.make("toy_lookup", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/toy_lookup/{records/<code>.db, train.jsonl, test.jsonl, manifest.json}``, byte-identical
    per seed. tiny: 48 train + 16 test records; default: 384 + 128. Every instance mounts the ``records`` folder
    (one mount for the whole family, so sandbox workers never restart between episodes); its query runs against
    its own file there (``metadata["sql_database"]``).

Version history:
    1: first version.
    2: records named ``<code>`` in both splits (were ``tr-<code>`` / ``te-<code>``, files ``<split>_<code>.db``):
       the split marker was the only token a held-out prompt had that no training prompt had, and the tiny model's
       first turn broke on it (docs/benchmarks.md, "Learning"). Values and categories are unchanged.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
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
from medagentgym.tasks.graders import grade

RECORDS = "records"  # the mounted folder of per-instance databases
QUERY = "SELECT value FROM reading"
_SIZES: dict[str, dict[str, int]] = {"tiny": {"train": 48, "test": 16}, "default": {"train": 384, "test": 128}}
_TESTS = {"potassium": "mmol/L", "glucose": "mmol/L", "lactate": "mmol/L", "creatinine": "mg/dL"}
_LOW, _HIGH = 1, 9


def _code(index: int) -> str:
    """Three letters naming a record (``aaa``, ``aab``, ...): distinct prompts without a digit in them."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return "".join(letters[index // 26 ** k % 26] for k in (2, 1, 0))


def _write_record(path: Path, test: str, value: int) -> None:
    """One deterministic one-row database (the bytes depend only on the row)."""
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        db = Path(tmp) / path.name
        con = sqlite3.connect(db)
        try:
            con.execute("CREATE TABLE reading (test TEXT NOT NULL, value INTEGER NOT NULL, unit TEXT NOT NULL)")
            con.execute("INSERT INTO reading VALUES (?, ?, ?)", (test, value, _TESTS[test]))
            con.commit()
        finally:
            con.close()
        write_bytes_atomic(path, db.read_bytes())


class ToyLookup:
    """The toy_lookup family (see the module docstring for the spec card)."""

    name = "toy_lookup"
    version = 2
    actions = frozenset({"code_execution", "submit_answer"})
    #: Values are uniform on 1..9 by design (one token each, so reading them is the whole skill): a constant
    #: answer is right for ~1 record in 9, and on the 16 test records of a tiny build up to ~20 %. Not a
    #: benchmark family (in no suite), so its constant-answer bound is 25 %, not medagentgym.tasks.floors.FLOOR_BOUND.
    floor_bound = 0.25
    #: Its episodes' code is SQL: the sandbox's warm workers import sqlite3 alone, not numpy and pandas
    #: (``medagentgym.env_client.rollout.family_preload``; a worker starts in ~0.15 CPU-s instead of ~0.9).
    sandbox_preload = ("sqlite3",)
    #: Records per split and size (subclasses declare theirs).
    sizes: dict[str, dict[str, int]] = _SIZES
    #: Names the build's random generator (``"<rng_name>:<seed>"``).
    rng_name = "toy_lookup"

    def __init__(self, root: Path | str) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/toy_lookup``)."""
        self.root = Path(root)

    @property
    def categories(self) -> list[str]:
        """The lab tests, in a fixed order."""
        return sorted(_TESTS)

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Instance counts for ``size`` without building."""
        return {"categories": len(self.categories), "instances": sum(self.sizes[size].values())}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write ``<out_dir>/toy_lookup/``: one database per record, train/test instances and a manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` or ``"default"``.
            seed: Seeds the tests and values; the same seed gives byte-identical files.

        Returns:
            The manifest (counts per split and category, seed, size, version, sha256 per file).

        Raises:
            TaskError: An unknown size.
        """
        if size not in self.sizes:
            raise TaskError(f"size {size!r} is not one of {sorted(self.sizes)}")
        family_dir = Path(out_dir) / self.name
        (family_dir / RECORDS).mkdir(parents=True, exist_ok=True)
        rng = random.Random(f"{self.rng_name}:{seed}")
        splits: dict[str, list[Instance]] = {}
        first = {"train": 0, "test": self.sizes[size]["train"]}  # test codes continue after the training ones
        for split in ("train", "test"):
            items = self._records(family_dir, split, self.sizes[size][split], first[split], rng)
            splits[split] = items
            write_instances(family_dir, split, items)
        return write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed,
            counts={split: len(items) for split, items in splits.items()},
            categories={c: sum(i.category == c for items in splits.values() for i in items) for c in self.categories},
        )

    def _records(self, family_dir: Path, split: Split, n: int, first: int, rng: random.Random) -> list[Instance]:
        """Write the ``n`` records of ``split`` (codes from ``first`` on) and return their instances."""
        items = []
        for index in range(n):
            test, value = rng.choice(sorted(_TESTS)), rng.randint(_LOW, _HIGH)
            code = _code(first + index)
            _write_record(family_dir / RECORDS / f"{code}.db", test, value)
            items.append(self._instance(split, index, code, test, value))
        return items

    def _instance(self, split: Split, index: int, code: str, test: str, value: int) -> Instance:
        database = f"{RECORDS}/{code}.db"
        return Instance(
            id=f"{self.name}/{split}/{index:04d}", family=self.name, category=test, split=split,
            question=(f"Record {code}: what value did the {test} monitor record in this task's "
                      "database? Submit it."),
            context=(f"SQLite database: /data/{database} (table reading: test, value, unit), read-only. Run SQL "
                     "with code_execution (lang 'sql'), then submit only the value."),
            answer=value, answer_type="integer", solution=QUERY, solution_lang="sql", data={RECORDS: RECORDS},
            metadata={"sql_database": database},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the query, then submit the value."""
        return run_then_submit("sql", QUERY, str(instance.answer))

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Integer exact: the submission must be the stored value and nothing else."""
        return grade("integer", instance.answer, submission)
