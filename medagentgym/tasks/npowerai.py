"""npowerai: sample-size and power questions for clinical study designs (N-PowerAI, regenerated).

Description:
    Parameterised clinical scenarios (blood pressure on a diet, statin before/after, two diets on glucose, k
    teaching methods, depression severity by sex, remission rates, infection rates, vitamin A in retinitis
    pigmentosa, ...) for nine designs: one-sample, paired and two-sample t tests, one-way ANOVA, chi-square test
    of independence, one- and two-sample proportions, and Cox models by Schoenfeld's and Freedman's formulas.
    Targets: sample size (given the effect, alpha, sides and power) or power (given the size); Cox/Schoenfeld also
    asks for the number of events. Categories are the 19 (design, target) pairs, e.g. ``two_sample_t.size``.
    Every question states its conventions (sidedness and alpha, the power method, "per group" or "in total",
    "round up to the next integer"). The gold answer is obtained by EXECUTING the instance's reference snippet
    (scipy's noncentral t for the t tests, statsmodels ``FTestAnovaPower``, ``GofChisquarePower``,
    ``NormalIndPower``, or the closed form for Cox; medagentgym/tasks/power/snippets.py), never written by hand. Unlike the
    original data set, no group shares one constant answer and each design follows one convention. N-PowerAI's
    public records (MedAgentGym's ``npowerai`` JSONL) are imported by ``medagentgym import --family
    npowerai``: their answers are recomputed from the raw quantities each question states (medagentgym/tasks/power/importer.py).

Example instance:
    question: "A trial randomises adults with prediabetes to one of two diets and compares fasting glucose at 6
               months. Expected means are 100 mg/dL and 106.5 mg/dL. The common SD is 18.2. The analysis uses a
               two-sided test at significance level alpha = 0.05. Use the exact power of the two-sample t test
               with equal group sizes (noncentral t). How many patients are required per group for 80 % power?
               Report the smallest integer group size that reaches the target power (round up ...)."
    answer:   125          answer_type: "integer"        category: "two_sample_t.size"
    solution: "from scipy.stats import nct ... def power_at(n): ... answer = n"

Allowed actions:
    code_execution (python), terminal, debugging, submit_answer. There is no database, so no request_info.

Grading:
    One ``submit_answer`` per episode. Sample sizes and event counts: exactly one integer, equal to the gold (the
    question fixes the method and the rounding, so the only freedom left, solver tolerance, is removed by
    defining the answer as the smallest integer whose exact power reaches the target; no +-1 slack). Power:
    exactly one number within 0.01 (absolute) of the gold. A traceback, an empty submission or several numbers
    are wrong. Tiny builds space the power answers of a split at least 0.021 apart, so that one constant cannot
    match two of them; default builds are too dense for that (a constant power then matches about 2 % of the
    power items, the base rate of a 0.01 tolerance).

Episode end:
    The graded submit (terminated), or a budget (turns, tokens, wall time: truncated). Default 10 turns.

Arguments:
    ``tasks.make("npowerai", root=DIR)``; ``build(out_dir, size="tiny"|"default", seed=0)`` writes
    ``<out_dir>/npowerai/{train.jsonl, test.jsonl, manifest.json}``, byte-identical per seed. tiny: 3 instances
    per category (57); default: 540 per category (10,260). 30 % of each category goes to test.

Version history:
    1: first version (9 designs, 19 categories, executed statsmodels/closed-form gold, importer).
    2: t-test power computed with scipy's noncentral t in the snippets: statsmodels' TTestPower/TTestIndPower
       return NaN for large effects with the pinned SciPy (the far tail underflows), which ended the size search
       at its starting guess and dropped power items; the importer recomputes answers from raw quantities.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import (
    GradeContext,
    GraderError,
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
from medagentgym.tasks.graders import grade, render_answer
from medagentgym.tasks.power.scenarios import question, sample
from medagentgym.tasks.power.snippets import DESIGNS, reference_code

__all__ = ["CATEGORIES", "NPowerAI", "execute_snippet", "grading_for"]

CATEGORIES: tuple[str, ...] = tuple(f"{d}.{t}" for d, targets in DESIGNS.items() for t in targets)
_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"per_category": 3, "power_spacing": 0.021},
    "default": {"per_category": 540, "power_spacing": 0.0},
}
_TEST_FRACTION = 0.3
#: Answers outside these bands are re-drawn: tiny or huge studies, and powers near 0 or 1 (a power of 0.99
#: would be matched by the constant "1").
_SIZE_RANGE = (4, 5000)
_POWER_RANGE = (0.10, 0.98)
POWER_TOLERANCE = 0.01
_CONTEXT = ("Compute the answer with Python (numpy, scipy and statsmodels are available), then submit only the "
            "final number: {what}.")


def execute_snippet(code: str) -> Any:
    """Execute a reference snippet in a fresh namespace and return its ``answer`` variable.

    Raises:
        TaskError: The snippet raised or did not set ``answer`` (the message names the exception).
    """
    namespace: dict[str, Any] = {"__name__": "__npowerai__"}
    try:
        exec(compile(code, "<npowerai-reference>", "exec"), namespace)  # noqa: S102 - our generated snippet, not agent code
    except Exception as exc:
        raise TaskError(f"npowerai reference snippet failed: {type(exc).__name__}: {exc}") from exc
    if "answer" not in namespace:
        raise TaskError("npowerai reference snippet did not set `answer`")
    return namespace["answer"]


def grading_for(target: str) -> tuple[str, dict[str, float]]:
    """Answer type and grader options of a target: sizes/events exact integers, power within 0.01."""
    if target == "power":
        return "number", {"abs_tol": POWER_TOLERANCE, "rel_tol": 0.0}
    return "integer", {}


def _acceptable(target: str, answer: Any) -> bool:
    if target == "power":
        return _POWER_RANGE[0] <= float(answer) <= _POWER_RANGE[1]
    return _SIZE_RANGE[0] <= int(answer) <= _SIZE_RANGE[1]


class NPowerAI:
    """The npowerai family (see the module docstring for the spec card)."""

    name = "npowerai"
    version = 2
    actions = frozenset({"code_execution", "terminal", "debugging", "submit_answer"})

    def __init__(self, root: Path | str) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/npowerai``)."""
        self.root = Path(root)

    @property
    def categories(self) -> list[str]:
        """``design.target`` pairs, in a fixed order."""
        return list(CATEGORIES)

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Instance counts for ``size`` without building (each category yields exactly its quota)."""
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        return {"categories": len(CATEGORIES), "instances": len(CATEGORIES) * _SIZES[size]["per_category"]}

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write ``<out_dir>/npowerai/``: train/test instances (gold from executed snippets) and a manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` (tests) or ``"default"``.
            seed: Seeds every parameter draw; the same seed gives byte-identical files.

        Returns:
            The manifest (counts per split and category, seed, size, version, sha256 per file).

        Raises:
            TaskError: Unknown size, or a category that cannot fill its quota.
        """
        if size not in _SIZES:
            raise TaskError(f"size {size!r} is not one of {sorted(_SIZES)}")
        family_dir = Path(out_dir) / self.name
        family_dir.mkdir(parents=True, exist_ok=True)
        conf = _SIZES[size]
        splits: dict[str, list[Instance]] = {"train": [], "test": []}
        powers: dict[str, list[float]] = {"train": [], "test": []}
        for category in CATEGORIES:
            for split, params, code, answer in self._draw(category, seed, conf, powers):
                splits[split].append(self._instance(category, split, len(splits[split]), params, code, answer))
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        return write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed,
            counts={split: len(items) for split, items in splits.items()},
            categories={c: sum(i.category == c for items in splits.values() for i in items) for c in CATEGORIES},
        )

    def _draw(self, category: str, seed: int, conf: dict[str, Any], powers: dict[str, list[float]]
              ) -> list[tuple[Split, dict[str, Any], str, Any]]:
        """Draw, execute and filter until the category's quota is met; first 30 % go to test."""
        design, target = category.split(".")
        per = conf["per_category"]
        n_test = max(1, round(per * _TEST_FRACTION))
        rng = random.Random(f"npowerai:{seed}:{category}")
        seen: set[str] = set()
        out: list[tuple[Split, dict[str, Any], str, Any]] = []
        for _ in range(per * 20):
            if len(out) == per:
                break
            params = sample(design, target, rng)
            text = question(design, target, params)
            if text in seen:
                continue
            seen.add(text)
            code = reference_code(design, target, params)
            answer = execute_snippet(code)
            if not _acceptable(target, answer):
                continue
            split: Split = "test" if len(out) < n_test else "train"
            if target == "power" and conf["power_spacing"]:
                if any(abs(answer - other) < conf["power_spacing"] for other in powers[split]):
                    continue
                powers[split].append(answer)
            out.append((split, params, code, answer))
        if len(out) < per:
            raise TaskError(f"npowerai category {category!r} produced {len(out)} of {per} instances")
        return out

    def _instance(self, category: str, split: Split, index: int, params: dict[str, Any], code: str,
                  answer: Any) -> Instance:
        design, target = category.split(".")
        answer_type, options = grading_for(target)
        what = ("the power as a proportion between 0 and 1" if target == "power"
                else "one integer" + (" (events)" if target == "events" else " (the number of patients asked for)"))
        return Instance(
            id=f"{self.name}/{split}/{index:05d}", family=self.name, category=category, split=split,
            question=question(design, target, params), context=_CONTEXT.format(what=what), answer=answer,
            answer_type=answer_type, solution=code, solution_lang="python",
            metadata={"design": design, "target": target, "params": params, "grading": options},
        )

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the reference snippet (printing the answer), then submit the rendered gold answer."""
        return run_then_submit("python", instance.solution + "print(answer)\n", render_answer(instance.answer_type, instance.answer))

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Integer sizes exactly; power within 0.01 absolute (medagentgym.tasks.graders, strict single-answer parsing)."""
        if instance.answer is None:
            raise GraderError(f"{instance.id} has no gold answer; rebuild the family")
        return grade(instance.answer_type, instance.answer, submission, **instance.metadata.get("grading", {}))
