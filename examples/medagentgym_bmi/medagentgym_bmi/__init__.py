"""bmi: compute a patient's body-mass index from a table of measurements (an example family of another package).

Description:
    Each instance asks for the body-mass index of one patient of a small synthetic clinic table
    (``/data/bmi/patients.csv``: ``patient_id, height_cm, weight_kg``). The agent must read the table in the
    sandbox, find the patient and compute ``weight_kg / (height_m ** 2)``; the question states neither number.
    Heights and weights are drawn independently per patient, so no constant answer is right for more than a
    few patients.

Example instance:
    question: "What is the body-mass index of patient P0007 (kg/m², one decimal)? Submit the number only."
    context:  "A CSV table of the clinic's patients is at /data/bmi/patients.csv ..."
    answer:   23.4          answer_type: "number"         category: "normal"
    solution: "import csv ... print(round(w / (h / 100) ** 2, 1))"

Allowed actions:
    code_execution (python), submit_answer.

Grading:
    One ``submit_answer`` per episode: exactly one number within 0.05 of the gold BMI (the grader of MedAgentGym's
    ``number`` answers); several numbers in one submission are wrong.

Episode end:
    The graded submit (terminated), or a budget (truncated). Default 4 turns.

Arguments:
    ``medagentgym.make("bmi", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/bmi/{bmi/patients.csv, train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed.
    tiny: 30 train + 30 test; default: 300 + 100.

Version history:
    1: first version.
"""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import (
    GradeContext,
    Instance,
    TaskError,
    Verdict,
    load_instances,
    run_then_submit,
    write_bytes_atomic,
    write_instances,
    write_manifest,
)
from medagentgym.tasks.graders import grade

_SIZES = {"tiny": {"train": 30, "test": 30}, "default": {"train": 300, "test": 100}}
_TABLE = "bmi/patients.csv"
_CATEGORIES = ("underweight", "normal", "overweight", "obese")
_PROGRAM = """import csv
with open("/data/bmi/patients.csv") as f:
    row = next(r for r in csv.DictReader(f) if r["patient_id"] == {pid!r})
h, w = float(row["height_cm"]), float(row["weight_kg"])
print(round(w / (h / 100) ** 2, 1))
"""


def _category(bmi: float) -> str:
    return _CATEGORIES[(bmi >= 18.5) + (bmi >= 25) + (bmi >= 30)]


class BMI:
    """Body-mass index from a patient table (see the module docstring)."""

    name = "bmi"
    version = 1
    max_turns = 4
    actions = frozenset({"code_execution", "submit_answer"})
    categories = list(_CATEGORIES)

    def __init__(self, root: Path | str) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/bmi``)."""
        self.root = Path(root)

    def build(self, out_dir: Path | str, *, size: str = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write the patient table, the train/test instances and the manifest; same seed, same bytes."""
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        family_dir = Path(out_dir) / self.name
        rng = random.Random(f"bmi:{seed}")
        total = sum(_SIZES[size].values())
        rows = [(f"P{i:04d}", rng.randint(150, 200), round(rng.uniform(45.0, 120.0), 1)) for i in range(total)]
        table = io.StringIO()
        writer = csv.writer(table, lineterminator="\n")
        writer.writerow(["patient_id", "height_cm", "weight_kg"])
        writer.writerows(rows)
        write_bytes_atomic(family_dir / _TABLE, table.getvalue().encode())
        splits = {"train": rows[:_SIZES[size]["train"]], "test": rows[_SIZES[size]["train"]:]}
        for split, items in splits.items():
            write_instances(family_dir, split, [self._instance(split, i, *row) for i, row in enumerate(items)])
        return write_manifest(family_dir, family=self.name, version=self.version, size=size, seed=seed,
                              counts={split: len(items) for split, items in splits.items()})

    def _instance(self, split: str, index: int, pid: str, height: int, weight: float) -> Instance:
        bmi = round(weight / (height / 100) ** 2, 1)
        return Instance(
            id=f"{self.name}/{split}/{index:04d}", family=self.name, category=_category(bmi), split=split,
            question=f"What is the body-mass index of patient {pid} (kg/m², one decimal)? Submit the number only.",
            context=("A CSV table of the clinic's patients is at /data/bmi/patients.csv (columns patient_id, "
                     "height_cm, weight_kg). Read it with Python."),
            answer=bmi, answer_type="number", solution=_PROGRAM.format(pid=pid), solution_lang="python",
            data={"bmi": "bmi"}, metadata={"patient_id": pid},
        )

    def instances(self, split: str) -> list[Instance]:
        """Instances of ``split`` from the built directory (``NotBuilt`` with the build command when missing)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the program that reads the table, then submit the BMI it prints."""
        return run_then_submit("python", instance.solution, f"{instance.answer:.1f}")

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """One number within 0.05 of the gold BMI."""
        return grade("number", instance.answer, submission, rel_tol=0.0, abs_tol=0.05)
