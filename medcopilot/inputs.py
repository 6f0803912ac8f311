"""Every input file a recipe will read, printed and checked before anything is loaded (``train.py``).

``train.py --dry-run`` prints :func:`check_inputs`'s lines and refuses a recipe whose inputs are wrong; a real run
runs the same checks first, so it fails at once instead of after loading a model or rolling out a store:

* **task builds** (``tasks.root/<family>``): the size and family version of each build and its instances per
  split. A build of another size than ``tasks.size`` or by another version of the family's code is refused (a
  flagship recipe must not train on a tiny smoke build that sits where it reads). Not built yet: built at
  ``tasks.size`` on start.
* **the trajectory store** (``rollout.store``; SFT, DPO and the verifier): rows, successes and tasks per
  family, and the family versions its episodes were played under. Refused: a family of the recipe with no row,
  episodes played under another family version, or (from ``medagentgym collect``'s ``summary.json`` beside it) a store
  collected over fewer tasks than the recipe trains on (a ``--limit 2`` smoke run, 16 rows). Missing: rolled
  out from ``rollout.policy`` on start.
* **models** (``model.name_or_path``, ``reward.verifier``): a local folder must exist (named at once, with the
  nearest siblings); a Hub id is named as such. On ``--dry-run`` a missing model is a warning (an earlier stage
  of a chain may still write it); a run refuses it.

The checks read files only: no torch, no model, no network.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

__all__ = ["InputReport", "check_inputs", "size_refusal"]

#: Methods that train on ``rollout.store`` (``medagentgym.medcopilot.trainers._common.episodes_for``).
STORE_METHODS = ("sft", "dpo", "verifier")


class InputReport:
    """What :func:`check_inputs` found: ``lines`` to print, ``errors`` that refuse the recipe, ``missing_models``
    (an error for a run, a warning for a dry run)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.missing_models: list[str] = []

    def refusal(self, *, dry_run: bool) -> str | None:
        """One line listing what refuses the recipe (None: nothing does)."""
        problems = self.errors + ([] if dry_run else self.missing_models)
        return "; ".join(problems) if problems else None


def _tasks(cfg: Any, report: InputReport) -> dict[str, int]:
    """Check and describe each family's build; returns ``family -> instances of tasks.split`` for built ones."""
    from medagentgym.tasks.base import TaskError
    from medagentgym.tasks.builds import SIZES, build_facts, check_build

    root, split, size = Path(cfg.tasks.root), cfg.tasks.split, cfg.tasks.size
    counts: dict[str, int] = {}
    wrong_size: dict[str, str] = {}
    for name in cfg.tasks.families:
        try:
            found = build_facts(name, root)
            if found is not None and found["size"] in SIZES and found["size"] != size:
                wrong_size[name] = found["size"]
                report.lines.append(f"input tasks {name}: REFUSED ({root / name} is a {found['size']} build, the "
                                    f"recipe needs {size})")
                continue
            facts = check_build(name, root, size=size, required=False, size_option="tasks.size=")
        except TaskError as exc:
            report.errors.append(str(exc))
            report.lines.append(f"input tasks {name}: REFUSED ({root / name})")
            continue
        if facts is None:
            report.lines.append(f"input tasks {name}: not built in {root}; built at size {cfg.tasks.size} on start")
            continue
        split_counts = facts.get("counts") or {}
        counts[name] = int(split_counts.get(split, 0))
        made = facts["size"] or facts["source"]
        report.lines.append(f"input tasks {name}: {root / name} ({made} build, version {facts['version']}, "
                            + ", ".join(f"{s} {n}" for s, n in sorted(split_counts.items())) + ")")
    if wrong_size:
        report.errors.append(size_refusal(root, size, wrong_size))
    return counts


def size_refusal(root: Path, size: str, wrong: dict[str, str], option: str = "tasks.size=") -> str:
    """One line for builds of another size than the run needs: which inputs, and the command that rebuilds them.

    Args:
        root: The tasks root.
        size: The size the run needs (``tasks.size``, ``medagentgym eval --size``).
        wrong: ``family -> the size it is built at`` for the refused builds.
        option: How the run sets its size (``tasks.size=``, ``--size ``), for the smoke-run alternative.

    Example:
        >>> size_refusal(Path("artifacts/tasks"), "default", {"eicu": "tiny"}).split(":")[0]
        'artifacts/tasks holds a tiny build of eicu, but this run needs size default'
    """
    names = list(wrong)
    built = "/".join(sorted(set(wrong.values())))
    which = names[0] if len(names) == 1 else f"{len(names)} families ({', '.join(names)})"
    return (f"{root} holds a {built} build of {which}, but this run needs size {size}: rebuild with "
            f"`medagentgym build --families {','.join(names)} --size {size} --out {root}` (or use another tasks "
            f"root; a smoke run may say {option}{built})")


def _store(cfg: Any, report: InputReport, built: dict[str, int]) -> None:
    """Describe and check ``rollout.store`` (rows, successes, tasks and family versions per family)."""
    from medagentgym.tasks.base import TaskError
    from medagentgym.tasks.builds import current_version

    path = Path(cfg.rollout.store)
    if not path.is_file():
        report.lines.append(f"input store {path}: missing; rolled out from rollout.policy={cfg.rollout.policy!r} "
                            f"on start")
        return
    rows: Counter = Counter()
    wins: Counter = Counter()
    tasks: dict[str, set] = defaultdict(set)
    versions: dict[str, set] = defaultdict(set)
    bad = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                header, final = row["header"], row.get("final") or {}
                family = header["family"]
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            rows[family] += 1
            tasks[family].add(header.get("task_id"))
            versions[family].add(header.get("family_version"))
            wins[family] += bool((final.get("verdict") or {}).get("correct"))
    report.lines.append(f"input store {path}: {sum(rows.values())} rows" + (f", {bad} unreadable" if bad else ""))
    for name in cfg.tasks.families:
        if not rows[name]:
            report.errors.append(f"rollout.store {path} has no episode of family {name!r} (families in it: "
                                 f"{', '.join(sorted(rows)) or 'none'}); collect it, or drop the family")
            continue
        try:
            current = current_version(name, cfg.tasks.root)
        except TaskError:
            current = None
        played = sorted(v for v in versions[name] if v is not None)
        report.lines.append(f"input store {name}: {rows[name]} rows, {wins[name]} successes, {len(tasks[name])} tasks"
                            f", family version {'/'.join(map(str, played)) or '?'}")
        if current is not None and played and played != [current]:
            report.errors.append(f"rollout.store {path}: its {name} episodes were played under family version(s) "
                                 f"{played}, but this code is version {current}; collect them again")
    extra = sorted(set(rows) - set(cfg.tasks.families))
    if extra:
        report.lines.append(f"input store: rows of {', '.join(extra)} are not read (not in tasks.families)")
    summary = path.parent / "summary.json"  # medagentgym collect's: the tasks each family was collected over
    if summary.is_file():
        try:
            collected = json.loads(summary.read_text(encoding="utf-8"))
        except ValueError:
            collected = {}
        for name in cfg.tasks.families:
            want = built.get(name)
            if want is None:
                continue
            want = min(want, cfg.tasks.limit) if cfg.tasks.limit else want
            got = (collected.get(name) or {}).get("tasks")
            if isinstance(got, int) and got < want:
                report.errors.append(f"rollout.store {path} was collected over {got} of the {want} "
                                     f"{cfg.tasks.split} tasks of {name} ({summary}; a --limit smoke run?): "
                                     f"collect over all of them, or set tasks.limit={got}")


def _model(label: str, path: str | None, report: InputReport) -> None:
    from medagentgym.env_client.policies import model_path_problem

    if not path:
        return
    if path.startswith(("http://", "https://")):
        report.lines.append(f"input {label}: {path} (a service)")
        return
    problem = model_path_problem(path)
    if problem:
        report.missing_models.append(f"{label}: {problem}")
        report.lines.append(f"input {label}: MISSING: {problem}")
    elif Path(path).expanduser().is_dir():
        n = sum(1 for p in Path(path).expanduser().rglob("*") if p.is_file())
        report.lines.append(f"input {label}: {path} (local folder, {n} files)")
    else:
        report.lines.append(f"input {label}: {path} (Hub id: downloaded on first use, or read from the cache)")


def check_inputs(cfg: Any) -> InputReport:
    """Describe and check every input file ``cfg`` will read (see the module docstring).

    Returns:
        The :class:`InputReport`; ``report.refusal(dry_run=...)`` is the one-line error, if any.
    """
    report = InputReport()
    built = _tasks(cfg, report)
    if cfg.method in STORE_METHODS and cfg.rollout.store:
        _store(cfg, report, built)
    _model("model", cfg.model.name_or_path, report)
    _model("reward.verifier", getattr(cfg.reward, "verifier", None), report)
    return report
