"""Config-declared families: a family made of files alone, no Python.

A directory ``<tasks_root>/<name>/`` holding:

``family.yaml``::

    name: bmi_questions            # must equal the directory name
    description: BMI questions over a small cohort table.
    version: 1
    answer_type: number            # default grader (medagentgym.tasks.graders); an item may override it
    tolerance: {rel_tol: 0.01}     # grader options
    actions: [request_info, code_execution, submit_answer]
    max_turns: 8
    data: {cohort.csv: data/cohort.csv}   # mount name under /data -> path relative to this directory
    splits: [train, test]
    sandbox_preload: [sqlite3]     # optional: what a warm sandbox worker imports first (default numpy, pandas,
                                   # sqlite3); SQL alone -> [sqlite3], lean workers

``tasks.jsonl``: one object per line, ``{"question", "answer", "category"?, "split", "context"?,
"answer_type"?, "solution"?, "solution_lang"?}``; plus the data files. ``tasks.make(name, root=...)`` finds it
without registration; the strict grader is selected by the answer type.

Example:
    >>> fam = tasks.make("bmi_questions", root="artifacts/tasks")
    >>> fam.grade(fam.instances("test")[0], "24.2").correct
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from medagentgym.tasks._files import FileFormatError, load_yaml
from medagentgym.tasks.base import (
    ALL_ACTIONS,
    FAMILY_YAML,
    GradeContext,
    Instance,
    NotBuilt,
    Size,
    Split,
    TaskError,
    Verdict,
    write_manifest,
)
from medagentgym.tasks.graders import ANSWER_TYPES, grade, render_answer

__all__ = ["ConfigFamily", "FamilyDecl", "TaskLine", "read_family_yaml"]

TASKS_FILE = "tasks.jsonl"


class FamilyDecl(BaseModel):
    """The contents of ``family.yaml``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Registry name; must equal the directory name.")
    description: str = Field("", description="One paragraph shown in listings.")
    version: int = Field(1, ge=1, description="Bump when grading or data change.")
    answer_type: str = Field(description=f"Default grader: one of {', '.join(ANSWER_TYPES)}.")
    tolerance: dict[str, float] = Field(default_factory=dict, description="Grader options, e.g. {rel_tol: 0.01}.")
    actions: list[str] = Field(default_factory=lambda: sorted(ALL_ACTIONS), description="Permitted actions.")
    max_turns: int = Field(15, ge=1, description="Turn budget of an episode.")
    data: dict[str, str] = Field(default_factory=dict, description="Mounts: name -> path relative to the directory.")
    splits: list[Literal["train", "test"]] = Field(default_factory=lambda: ["train", "test"], description="Splits.")
    sandbox_preload: list[str] | None = Field(
        None, description="Modules a warm sandbox worker imports before this family's episodes, e.g. [sqlite3] "
                          "for SQL alone (lean workers); unset: the sandbox's default (numpy, pandas, sqlite3).")

    @field_validator("answer_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in ANSWER_TYPES:
            raise ValueError(f"answer_type {value!r} is not one of {', '.join(ANSWER_TYPES)}")
        return value

    @field_validator("sandbox_preload")
    @classmethod
    def _module_names(cls, value: list[str] | None) -> list[str] | None:
        bad = [m for m in value or [] if not all(part.isidentifier() for part in str(m).split("."))]
        if bad:
            raise ValueError(f"sandbox_preload {bad[0]!r} is not a module name (e.g. sqlite3 or numpy)")
        return value

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - ALL_ACTIONS)
        if unknown:
            raise ValueError(f"unknown action(s) {unknown}; use some of {sorted(ALL_ACTIONS)}")
        if "submit_answer" not in value:
            raise ValueError("actions must include 'submit_answer' (an episode ends with one graded submit)")
        return value


class TaskLine(BaseModel):
    """One line of ``tasks.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, description="The task goal.")
    answer: Any = Field(description="Gold answer (JSON).")
    split: Literal["train", "test"] = Field(description="'train' or 'test'.")
    category: str = Field("default", description="Category for per-category success.")
    context: str = Field("", description="Extra text shown with the question.")
    answer_type: str | None = Field(None, description="Overrides the family's answer_type for this item.")
    solution: str | None = Field(None, description="Reference SQL or Python that produces the answer.")
    solution_lang: Literal["sql", "python", "shell"] | None = Field(None, description="Language of `solution`.")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(root)"
    return f"{loc}: {err['msg']}"


def read_family_yaml(path: Path) -> FamilyDecl:
    """Parse and validate a ``family.yaml``.

    Raises:
        TaskError: Unreadable YAML or an invalid field (names the file and the field).
    """
    try:
        raw = load_yaml(path)
        return FamilyDecl.model_validate(raw if raw is not None else {})
    except FileFormatError as exc:
        raise TaskError(str(exc)) from None
    except ValidationError as exc:
        raise TaskError(f"{path}: {_first_error(exc)}") from exc


class ConfigFamily:
    """A family declared by ``family.yaml`` + ``tasks.jsonl`` in its directory (see the module docstring)."""

    def __init__(self, root: Path | str) -> None:
        """Load the declaration from ``root/family.yaml``.

        Raises:
            NotBuilt: No family.yaml there.
            TaskError: Invalid declaration, or its name differs from the directory name.
        """
        self.root = Path(root)
        path = self.root / FAMILY_YAML
        if not path.is_file():
            raise NotBuilt(f"no {FAMILY_YAML} in {self.root}; a config family is declared by that file")
        self.decl = read_family_yaml(path)
        if self.decl.name != self.root.name:
            raise TaskError(f"{path}: name {self.decl.name!r} must equal the directory name {self.root.name!r}")
        self.name = self.decl.name
        self.version = self.decl.version
        self.actions = frozenset(self.decl.actions)
        self.max_turns = self.decl.max_turns
        # what family_preload (medagentgym.env_client.rollout) reads: None keeps the sandbox's default preload
        self.sandbox_preload = None if self.decl.sandbox_preload is None else tuple(self.decl.sandbox_preload)
        self._lines: list[TaskLine] | None = None

    def _read_lines(self) -> list[TaskLine]:
        if self._lines is None:
            path = self.root / TASKS_FILE
            if not path.is_file():
                raise NotBuilt(f"config family {self.name!r} has no {TASKS_FILE} in {self.root}")
            lines = []
            for lineno, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not text.strip():
                    continue
                try:
                    item = TaskLine.model_validate(json.loads(text))
                except (json.JSONDecodeError, ValidationError) as exc:
                    why = _first_error(exc) if isinstance(exc, ValidationError) else f"invalid JSON ({exc.msg})"
                    raise TaskError(f"{path}:{lineno}: {why}") from exc
                if item.split not in self.decl.splits:
                    raise TaskError(f"{path}:{lineno}: split {item.split!r} is not declared in splits {self.decl.splits}")
                if item.answer_type is not None and item.answer_type not in ANSWER_TYPES:
                    raise TaskError(f"{path}:{lineno}: answer_type {item.answer_type!r} is not one of {ANSWER_TYPES}")
                lines.append(item)
            self._lines = lines
        return self._lines

    @property
    def categories(self) -> list[str]:
        """Categories in first-seen order."""
        return list(dict.fromkeys(item.category for item in self._read_lines()))

    def counts(self, size: Size = "default") -> dict[str, int]:
        """Counts from tasks.jsonl (a config family has one size)."""
        return {"categories": len(self.categories), "instances": len(self._read_lines())}

    def instances(self, split: Split) -> list[Instance]:
        """Instances of ``split`` in file order; ids are ``<name>/<split>/<index>``."""
        out = []
        for item in (i for i in self._read_lines() if i.split == split):
            out.append(Instance(
                id=f"{self.name}/{split}/{len(out):04d}", family=self.name, category=item.category, split=split,
                question=item.question, context=item.context, answer=item.answer,
                answer_type=item.answer_type or self.decl.answer_type, solution=item.solution,
                solution_lang=item.solution_lang or ("sql" if item.solution else None), data=dict(self.decl.data),
                metadata={"grading": dict(self.decl.tolerance)},
            ))
        return out

    def build(self, out_dir: Path | str, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Validate the declaration, copy it to ``out_dir/<name>`` when that is elsewhere, write a manifest."""
        target = Path(out_dir) / self.name
        for name, rel in self.decl.data.items():
            if not (self.root / rel).exists():
                raise TaskError(f"{self.root / FAMILY_YAML}: data mount {name!r} -> {rel!r} does not exist")
        if target.resolve() != self.root.resolve():
            shutil.copytree(self.root, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("manifest.json"))
        lines = self._read_lines()
        return write_manifest(
            target, family=self.name, version=self.version, size=size, seed=seed,
            counts={split: sum(i.split == split for i in lines) for split in self.decl.splits},
            categories={c: sum(i.category == c for i in lines) for c in self.categories},
        )

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """Run the item's solution when it has one, then submit the rendered gold answer."""
        steps: list[dict[str, Any]] = []
        if instance.solution and instance.solution_lang == "shell":
            steps.append({"action": "terminal", "params": {"cmd": instance.solution}})
        elif instance.solution:
            steps.append({"action": "code_execution",
                          "params": {"lang": instance.solution_lang or "sql", "code": instance.solution}})
        steps.append({"action": "submit_answer", "params": {"answer": render_answer(instance.answer_type,
                                                                                     instance.answer)}})
        return steps

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """The strict grader of the instance's answer type with the declared tolerance."""
        return grade(instance.answer_type, instance.answer, submission, **instance.metadata.get("grading", {}))
