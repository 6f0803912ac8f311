"""The task-family contract: instances, verdicts, and the protocol every family satisfies.

A family is one file, ``medagentgym/tasks/<family>.py``, exposing one class that satisfies :class:`TaskFamily`.
Families build their data once (``build``), are loaded from that built directory, and grade one submission
per episode. Nothing here imports torch, transformers or the sandbox backend.

Example:
    >>> fam = tasks.make("toy_sql", root="artifacts/tasks")
    >>> inst = fam.instances("test")[0]
    >>> fam.grade(inst, "42").correct
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

Split = Literal["train", "test"]
Size = Literal["tiny", "default"]

#: Every action name an episode knows. A family permits a subset.
ALL_ACTIONS = frozenset({"request_info", "code_execution", "terminal", "debugging", "submit_answer"})


class Instance(BaseModel):
    """One task instance. The agent is shown only ``question`` and ``context``; the rest stays host-side."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="Stable unique id, e.g. 'mimic_iii/test/000123'.")
    family: str = Field(description="Registry name of the family.")
    category: str = Field(description="Template id; success is reported per category.")
    split: Split = Field(description="'train' or 'test'.")
    question: str = Field(description="The task goal shown to the agent.")
    context: str = Field("", description="Extra text shown with the question (a patient note, code context).")
    answer: Any = Field(None, description="Gold answer, JSON-serialisable; never shown to the agent.")
    answer_type: str = Field(description="Selects the strict grader: number, set, list, boolean, text, date, ...")
    solution: str | None = Field(None, description="Gold SQL or reference code that produced `answer`.")
    solution_lang: Literal["sql", "python", "shell"] | None = Field(None, description="Language of `solution`.")
    data: dict[str, str] = Field(
        default_factory=dict,
        description="Read-only mounts: name inside the sandbox's /data -> path relative to the family's built dir.",
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form facts (slots, tolerance, ...).")


#: Longest verdict reason or error kept (characters).
_MAX_REASON = 2000


class Verdict(BaseModel):
    """The oracle's single judgement of one submission."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    correct: bool = Field(description="True only for a fully correct submission.")
    score: float = Field(description="In [0, 1]; equals float(correct) unless the family defines partial credit.")
    reason: str = Field("", description="Short human-readable explanation (shown in logs, not to the agent).")
    error: str | None = Field(None, description="Set when grading failed; kept for the logs. Whose failure it was "
                              "is `infra`: an agent-caused failure is a wrong answer, an infrastructure one is None.")
    infra: bool = Field(False, description="True when the failure is the infrastructure's, not the submission's "
                        "(sandbox died, the grader's own deadline, our broken gold): the reward is then None.")

    @field_validator("reason", "error")
    @classmethod
    def _printable(cls, text: str | None) -> str | None:
        # Reasons quote what the agent's code printed or raised: a lone surrogate (legal in a Python str, e.g. from
        # a JSON "\ud800" escape) would make the trajectory unserialisable and crash the rollout, so replace it;
        # and keep an agent-sized message from bloating every stored episode.
        if text is None:
            return None
        text = text.encode("utf-8", "replace").decode("utf-8")
        return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + f"... [{len(text) - _MAX_REASON} chars cut]"


class GradeContext(BaseModel):
    """What a grader may use beyond the submission: the episode's workspace and a sandbox runner."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    workspace: Path | None = Field(None, description="Host path of the episode's workspace (files the agent wrote); "
                                   "read them only with medagentgym.sandbox.hostio.read_workspace_file, never by name.")
    session: Any = Field(None, description="A sandbox session for hidden tests (run_python/run_sql/run_shell).")
    family_dir: Path | None = Field(None, description="The family's built directory (hidden labels live here).")


@runtime_checkable
class TaskFamily(Protocol):
    """What every family class provides. See medagentgym/tasks/toy_sql.py for a complete small example."""

    name: str
    version: int
    #: Permitted actions, enforced by the episode (not only described in the prompt).
    actions: frozenset[str]

    @property
    def categories(self) -> list[str]:
        """Category ids (template ids); success is reported per category."""
        ...

    def build(self, out_dir: Path, *, size: Size = "tiny", seed: int = 0) -> dict[str, Any]:
        """Write the family's data and instances under ``out_dir``; return a manifest (counts, hashes)."""
        ...

    def instances(self, split: Split) -> list[Instance]:
        """Instances of a split, loaded from the built directory."""
        ...

    def reference_solution(self, instance: Instance) -> list[dict[str, Any]]:
        """The actions (``{"action": name, "params": {...}}``) an oracle replays to solve ``instance``."""
        ...

    def grade(self, instance: Instance, submission: str, ctx: GradeContext | None = None) -> Verdict:
        """Grade exactly one submission. Never raises for a wrong answer (however malformed); raises
        ``InfraError``/``GraderError`` or returns ``Verdict(error=..., infra=True)`` when grading itself broke."""
        ...


# ---------------------------------------------------------------------------------------------------------------
# Additions (additive only; the names above are stable).
# ---------------------------------------------------------------------------------------------------------------

#: The file that marks a config-declared family: ``<root>/<name>/family.yaml`` (see medagentgym/tasks/config_family.py).
FAMILY_YAML = "family.yaml"


class TaskError(Exception):
    """Root of the ``tasks`` error hierarchy."""


class UnknownTask(TaskError, LookupError):
    """A family name that is neither registered nor declared by a ``family.yaml`` under the tasks root."""


class NotBuilt(TaskError):
    """A family whose built directory (instances, data) is missing; the message says how to build it."""


class GraderError(TaskError):
    """The grader itself is broken (bad gold, unknown answer type); never raised for a wrong submission.

    Counted as an infrastructure failure (reward None), like :class:`InfraError`.
    """


class InfraError(TaskError):
    """Grading could not run for a reason that is not the submission's: the sandbox is gone, a server is down,
    the grader's own deadline passed. The episode's verdict is then ``infra=True`` and its reward None.

    Raise it only for failures an agent cannot cause; anything an agent can trigger (a malformed file, a value
    that makes a parser raise) must end as a wrong answer instead.
    """


@runtime_checkable
class SupportsCounts(Protocol):
    """Optional: a family that can report its instance counts for a size cheaply, without building.

    ``medagentgym build --list`` uses it; families without it are built into a temporary directory.
    """

    def counts(self, size: Size = "default") -> dict[str, Any]:
        """Return ``{"categories": n_categories, "instances": n_instances}`` for ``size``."""
        ...


# Family construction contract (used by tasks.make): ``Family(root=<tasks_root>/<name>, **kwargs)``.
# ``root`` is the family's built directory; ``build(out_dir, ...)`` writes under ``out_dir/<name>/`` so that
# ``make(name, root=out_dir)`` finds it. The SQL database of an instance, when it has one, is the mount named
# by ``instance.metadata["sql_database"]`` or else the first mount whose name ends in .db/.sqlite/.sqlite3;
# the episode runs ``code_execution`` with ``lang="sql"`` against ``/data/<that mount>`` read-only.


def instances_path(family_dir: Path, split: Split) -> Path:
    """Where a split's instances live in a built family: ``<family_dir>/<split>.jsonl``."""
    return Path(family_dir) / f"{split}.jsonl"


def load_instances(family_dir: Path | None, split: Split, *, family: str) -> list[Instance]:
    """Read ``<family_dir>/<split>.jsonl`` into instances.

    Args:
        family_dir: The family's built directory (None: the family was constructed without one).
        split: ``"train"`` or ``"test"``.
        family: Registry name, used in the error message when the directory is missing.

    Returns:
        The instances in file order.

    Raises:
        NotBuilt: The file does not exist.
        BuildMismatch: The folder was built by another version of the family (``medagentgym.tasks.builds``).
        TaskError: No directory was given, or a line is not a valid instance (names the file and line).
    """
    if family_dir is None:
        raise TaskError(f"{family}: no built directory given; construct with root=<tasks_root>/{family}")
    path = instances_path(family_dir, split)
    if not path.is_file():
        raise NotBuilt(
            f"family {family!r} is not built at {Path(family_dir)} (missing {path.name}); run "
            f"`medagentgym build --families {family} --out {Path(family_dir).parent}`"
        )
    from medagentgym.tasks.builds import check_build

    check_build(family, Path(family_dir).parent, required=False)  # a build by another version is refused
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(Instance.model_validate_json(line))
        except ValueError as exc:
            raise TaskError(f"{path}:{lineno}: not a valid Instance: {str(exc).splitlines()[0]}") from exc
    return out


def run_then_submit(lang: str, code: str, answer: str) -> list[dict[str, Any]]:
    """The usual reference solution: one ``code_execution`` call (``lang``: python or sql), then ``answer``."""
    return [{"action": "code_execution", "params": {"lang": lang, "code": code}},
            {"action": "submit_answer", "params": {"answer": answer}}]


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary sibling and ``os.replace`` (readers never see half a file)."""
    import os

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_instances(family_dir: Path, split: Split, instances: list[Instance]) -> Path:
    """Write instances as ``<family_dir>/<split>.jsonl`` (one JSON object per line, stable key order), atomically."""
    lines = [inst.model_dump_json() + "\n" for inst in instances]
    path = instances_path(family_dir, split)
    write_bytes_atomic(path, "".join(lines).encode("utf-8"))
    return path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(family_dir: Path, **facts: Any) -> dict[str, Any]:
    """Write ``<family_dir>/manifest.json``: ``facts`` plus the sha256 of every other file, sorted; no timestamps.

    Returns:
        The manifest dict (what was written).
    """
    import json

    family_dir = Path(family_dir)
    files = sorted(p for p in family_dir.rglob("*") if p.is_file() and p.name != "manifest.json")
    manifest = dict(facts)
    manifest["files"] = {p.relative_to(family_dir).as_posix(): sha256_file(p) for p in files}
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    write_bytes_atomic(family_dir / "manifest.json", text.encode("utf-8"))
    return manifest
