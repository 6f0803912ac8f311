"""The machinery shared by the SQL-over-EHR families (``mimic_iii``, ``eicu``, ``treqs``).

A family subclass states its name, database file, template file, context text and how to write its database
from the synthetic hospital; this class builds (database, instances, manifest), loads, replays the reference
solution and grades with the strict graders. The family files keep the spec cards.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

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
from medagentgym.tasks.ehr_synth.hospital import SIZES, RawHospital, cached_draw
from medagentgym.tasks.ehr_synth.templating import (
    Instantiator,
    categories,
    load_templates,
    make_instances,
)
from medagentgym.tasks.graders import grade, render_answer

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
SQL_ACTIONS = frozenset({"request_info", "code_execution", "debugging", "submit_answer"})
TEST_FRACTION = 0.4
#: A tiny build whose 30 patients leave a category without an instance at its seed is drawn again with 15 more
#: patients, up to this many times 30 (most tiny seeds but 0 left one category empty; seed 0 is unchanged).
TINY_GROWTH = 3
#: What a build made with ``public_questions`` says about itself (manifest ``planted.warning``, evaluation reports,
#: ``scripts/check_public_sql.py --plant``).
PLANTED_WARNING = ("schema/coverage smoke build: patients were planted from public question files, with the events "
                   "their questions ask about (an answer key for those questions); no number from it may be reported")


#: Grader options per answer type: yes/no questions take yes/no (or true/false), not a bare 1/0, because counts of
#: 0 and 1 are answers here too (a constant "0" would otherwise answer every empty count and every "no").
GRADING: dict[str, dict[str, Any]] = {"boolean": {"digits": False}}
#: The sentence every EHR SQL context ends with: how to answer yes/no and "nothing found" questions.
NOTHING_RULE = "When nothing matches, a count is 0, a list is [] and any other value is None."
ANSWER_RULES = "Answer yes/no questions with yes or no. " + NOTHING_RULE


#: A reference program that runs the gold SQL and prints the answer as submitted (see ``reference_solution``).
_ANSWER_PROGRAM = """import json
import sqlite3

con = sqlite3.connect("file:/data/{db}?mode=ro", uri=True)
values = [v for row in con.execute({sql!r}).fetchall() for v in row if v is not None]
{show}
"""
_SCALAR_SHOW = "print(values[0] if values else None)  # nothing found: None (a count of nothing is 0)"
_SHOW = {"boolean": 'print("yes" if values and values[0] else "no")',
         "set": "print(json.dumps(sorted(set(values), key=str)))  # nothing found: []",
         "list": "print(json.dumps(values))  # nothing found: []",
         **dict.fromkeys(("integer", "number", "text", "date", "datetime"), _SCALAR_SHOW)}


class EHRSQLFamily:
    """Base of the EHR SQL families. Subclasses set the class attributes and ``write_database``."""

    name: str = ""
    version: int = 1
    actions = SQL_ACTIONS
    db_file: str = ""
    #: Instances per category by size.
    per_category: ClassVar[dict[str, int]] = {"tiny": 3, "default": 150}
    context_text: str = ""
    #: The most one meaningful answer may hold of a built category (``templating.spread_answers``); None: a third
    #: of ``per_category`` as drawn.
    answer_share: ClassVar[float | None] = None
    write_database: Callable[[RawHospital, Path, int], dict[str, int]]

    def __init__(self, root: Path | str | None = None) -> None:
        """Bind to the built directory ``root`` (``<tasks_root>/<name>``)."""
        self.root = Path(root) if root is not None else None
        self._filters, self._templates = load_templates(DATA_DIR / self.name / "templates.yaml")

    @property
    def categories(self) -> list[str]:
        """Category ids ``<template>.<variant>``, in template-file order."""
        return categories(self._templates)

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Counts without building.

        Exact for seed 0 when ``medagentgym/tasks/data/<name>/counts.json`` was recorded from a build of the current template
        file (its sha256 must match); otherwise the upper bound categories x instances per category.
        """
        self._check_size(size)
        recorded = DATA_DIR / self.name / "counts.json"
        if recorded.is_file():
            facts = json.loads(recorded.read_text(encoding="utf-8"))
            if facts.get("templates_sha256") == self._templates_sha() and size in facts.get("seed0", {}):
                return dict(facts["seed0"][size])
        n = len(self.categories)
        return {"categories": n, "instances": n * self.per_category[size]}

    def mix_target(self) -> dict[str, float] | None:
        """The question-type and answer mix the build aims at (``data/<name>/mix.json``), or None."""
        from medagentgym.tasks.ehr_synth.mix import load_target

        path = DATA_DIR / self.name / "mix.json"
        return load_target(path) if path.is_file() else None

    @property
    def nothing_found_share(self) -> float:
        """The "nothing found" share (zero, None, empty; yes/no aside) the build reproduces from the public files.

        ``medagentgym.tasks.floors.template_floor`` lets each question template's floor bound grow by its own
        nothing-found share up to this: "always 0" / "always None" per template earns that much on the public
        files too. 0 for a family without a mix target.
        """
        target = self.mix_target() or {}
        return round(sum(float(target.get(k, 0.0)) for k in ("nothing_zero", "nothing_none", "nothing_empty")), 6)

    def _templates_sha(self) -> str:
        """sha256 of what decides the counts: the template file, then the mix target when there is one."""
        digest = hashlib.sha256((DATA_DIR / self.name / "templates.yaml").read_bytes())
        mix = DATA_DIR / self.name / "mix.json"
        if mix.is_file():
            digest.update(mix.read_bytes())
        return digest.hexdigest()

    def record_counts(self, manifests: dict[str, dict[str, Any]]) -> None:
        """Write ``counts.json`` from seed-0 build manifests keyed by size (maintainers run this after editing templates)."""
        seed0 = {size: {"categories": len(m["categories"]), "instances": sum(m["counts"].values())}
                 for size, m in manifests.items() if m.get("seed") == 0}
        text = json.dumps({"templates_sha256": self._templates_sha(), "seed0": seed0}, indent=2, sort_keys=True)
        (DATA_DIR / self.name / "counts.json").write_text(text + "\n", encoding="utf-8")

    def _check_size(self, size: str) -> None:
        if size not in self.per_category:
            raise TaskError(f"size {size!r} is not one of {sorted(self.per_category)}; use 'tiny' or 'default'")

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0,
              public_questions: Sequence[Path | str] | None = None,
              public_ids: Sequence[Path | str] | None = None) -> dict[str, Any]:
        """Write ``<out_dir>/<name>/``: the SQLite database, train/test instances and a manifest.

        Args:
            out_dir: The tasks root.
            size: ``"tiny"`` (30 patients, a few instances per category) or ``"default"`` (1,000 patients).
            seed: Seeds the synthetic hospital, the database conventions and the slot draws; the same seed gives
                byte-identical files.
            public_questions: SCHEMA/COVERAGE SMOKE ONLY. Public EHRSQL / MedAgentGym / MIMICSQL question files:
                the patients they name are added with histories shaped by their questions
                (``medagentgym.tasks.ehr_synth.plant``), an answer key for exactly those questions. The manifest
                says so (``planted``) and so does every report built on it; never use such a build for a number
                in docs or reports. Off by default.
            public_ids: Public question files whose named patient ids (MIMIC ``subject_id``, eICU ``uniquepid``,
                MIMICSQL names) the first ordinary patients carry; their histories are the ordinary draw, so a
                public question about such a patient asks about a plausible history, not one made for it.

        Returns:
            The manifest (counts per split and category, table sizes, seed, size, version, sha256 per file).
        """
        self._check_size(size)
        started = time.perf_counter()
        family_dir = Path(out_dir) / self.name
        family_dir.mkdir(parents=True, exist_ok=True)
        for patients in range(SIZES[size], SIZES[size] * TINY_GROWTH + 1, SIZES[size] // 2):
            raw = cached_draw(patients, seed, tuple(str(Path(p)) for p in public_questions or ()),
                              public_id_files=tuple(str(Path(p)) for p in public_ids or ()))
            tables = type(self).write_database(raw, family_dir / self.db_file, seed)
            inst = Instantiator(family_dir / self.db_file, self._filters, self._templates, family=self.name,
                                seed=seed)
            try:
                splits = make_instances(inst, per_category=self.per_category[size], test_fraction=TEST_FRACTION,
                                        context=self.context_text, data={self.db_file: self.db_file},
                                        db_name=self.db_file, target=self.mix_target(), grading=GRADING,
                                        answer_share=self.answer_share)
            finally:
                inst.close()
            empty = [c for c in self.categories if not any(i.category == c for s in splits.values() for i in s)]
            if not empty or size != "tiny":  # a tiny hospital that leaves a category empty grows by half
                break
        if empty:
            raise TaskError(f"{self.name}: categories without any instance at size={size!r}, seed={seed}: {empty[:5]}")
        for split, items in splits.items():
            write_instances(family_dir, split, items)
        per_cat: dict[str, int] = {}
        for items in splits.values():
            for item in items:
                per_cat[item.category] = per_cat.get(item.category, 0) + 1
        planted = ({"planted": {"files": sorted(Path(p).name for p in public_questions), "warning": PLANTED_WARNING}}
                   if public_questions else {})
        if public_ids:
            planted["public_ids"] = {"files": sorted(Path(p).name for p in public_ids)}
        if patients != SIZES[size]:  # said only when grown: other builds' manifests stay as they were
            planted["patients"] = patients
        manifest = write_manifest(
            family_dir, family=self.name, version=self.version, size=size, seed=seed, tables=tables,
            counts={split: len(items) for split, items in splits.items()}, categories=per_cat, **planted,
        )
        manifest["build_seconds"] = round(time.perf_counter() - started, 2)  # returned only, not written
        return manifest

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` from the built directory (raises ``NotBuilt`` with the build command)."""
        return load_instances(self.root, split, family=self.name)

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the gold SQL, then submit the rendered gold answer.

        Where SQLite's own output is not yet the answer (a yes/no question prints 1/0; a query that finds nothing
        prints no row), the gold SQL runs from Python, which prints the answer as it is submitted (``yes``,
        ``None``, ``[]``): the reference program shows the conventions it follows.
        """
        from medagentgym.tasks.ehr_synth.mix import nothing_kind

        rendered = render_answer(instance.answer_type, instance.answer)
        if instance.answer_type == "boolean" or nothing_kind(instance.answer, instance.answer_type):
            db = instance.metadata.get("sql_database") or self.db_file
            return run_then_submit("python", _ANSWER_PROGRAM.format(db=db, sql=instance.solution,
                                                                    show=_SHOW[instance.answer_type]), rendered)
        return run_then_submit("sql", instance.solution, rendered)

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """The strict grader of the instance's answer type (exactly one answer; sets order-free)."""
        return grade(instance.answer_type, instance.answer, submission, **instance.metadata.get("grading", {}))
