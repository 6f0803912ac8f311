"""Family registry: names → lazy entry points, so ``from medagentgym import tasks`` loads no family module.

Three kinds of family are known by name:

* registered ones, ``register("toy_sql", entry_point="medagentgym.tasks.toy_sql:ToySQL", max_turns=8)``; the module is
  imported only when ``make("toy_sql")`` (or ``family_class``) needs it;
* plugins: an installed distribution that declares an entry point in the group :data:`ENTRY_POINT_GROUP`
  (``[project.entry-points."medagentgym.families"] my_family = "my_pkg.family:MyFamily"``) is registered on first
  use of the registry, with no edit to this package (docs/add_a_family.md); the class may set ``max_turns``;
* config-declared ones: a directory ``<root>/<name>/family.yaml`` under the tasks root (see
  ``medagentgym/tasks/config_family.py``); ``make(name, root=...)`` finds them without any registration.

Example:
    >>> from medagentgym import tasks
    >>> fam = tasks.make("toy_sql", root="artifacts/tasks")
    >>> fam.name, fam.version
    ('toy_sql', 1)
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import FAMILY_YAML, TaskError, UnknownTask

#: Where ``medagentgym build`` writes families by default, relative to the working directory.
DEFAULT_ROOT = Path("artifacts/tasks")
#: The turn budget of a family that does not state one.
DEFAULT_MAX_TURNS = 15
_CONFIG_ENTRY_POINT = "medagentgym.tasks.config_family:ConfigFamily"
#: The entry point group through which installed distributions register task families (importlib.metadata).
ENTRY_POINT_GROUP = "medagentgym.families"


@dataclass(frozen=True)
class FamilySpec:
    """How to construct one family.

    Attributes:
        name: Registry name (also the built directory's name under the tasks root).
        entry_point: ``"module:Class"``; imported lazily.
        max_turns: The family's turn budget; an episode uses ``min(EnvConfig.max_turns, max_turns)``.
        defaults: Keyword arguments passed to the class on construction (``make`` kwargs override them).
        plugin: The distribution that declared it through :data:`ENTRY_POINT_GROUP`, or None (registered in
            code); a plugin's turn budget is its class's ``max_turns`` attribute when it has one.
    """

    name: str
    entry_point: str
    max_turns: int = DEFAULT_MAX_TURNS
    defaults: dict[str, Any] = field(default_factory=dict)
    plugin: str | None = None


_REGISTRY: dict[str, FamilySpec] = {}


def register(
    name: str, entry_point: str, *, max_turns: int = DEFAULT_MAX_TURNS, replace: bool = False, **defaults: Any
) -> FamilySpec:
    """Register a family under ``name`` with a lazy ``"module:Class"`` entry point.

    Args:
        name: Registry name, lowercase letters, digits and underscores.
        entry_point: ``"package.module:ClassName"``; nothing is imported now.
        max_turns: Turn budget of the family's episodes (>= 1).
        replace: Allow re-registering an existing name with a different entry point.
        **defaults: Constructor keyword arguments.

    Returns:
        The stored spec.

    Raises:
        TaskError: Bad name, malformed entry point, or a conflicting re-registration.

    Example:
        >>> register("toy_sql", entry_point="medagentgym.tasks.toy_sql:ToySQL", max_turns=8)
    """
    if not name or not name.replace("_", "").isalnum() or name != name.lower():
        raise TaskError(f"family name {name!r} must be lowercase letters, digits and underscores, e.g. 'toy_sql'")
    if entry_point.count(":") != 1 or not all(entry_point.split(":")):
        raise TaskError(f"entry_point {entry_point!r} must look like 'medagentgym.tasks.toy_sql:ToySQL'")
    if max_turns < 1:
        raise TaskError(f"max_turns={max_turns} for family {name!r} must be >= 1")
    spec = FamilySpec(name=name, entry_point=entry_point, max_turns=max_turns, defaults=dict(defaults))
    old = _REGISTRY.get(name)
    if old is not None and old != spec and not replace:
        raise TaskError(f"family {name!r} is already registered as {old.entry_point!r}; pass replace=True to override")
    _REGISTRY[name] = spec
    return spec


_PLUGINS_LOADED = False


def load_plugins(*, force: bool = False) -> dict[str, FamilySpec]:
    """Register every family that an installed distribution declares in the :data:`ENTRY_POINT_GROUP` group.

    Runs once per process (``force`` reads the entry points again). Nothing is imported: an entry point's value
    is the lazy ``"module:Class"`` string; the family's turn budget is the ``max_turns`` attribute of its class
    (read when an episode needs it), else the default. A name already registered in code is kept (a warning
    names the distribution whose entry point was ignored).

    Returns:
        ``name -> spec`` of the plugins registered now.
    """
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED and not force:
        return {}
    _PLUGINS_LOADED = True
    from importlib.metadata import entry_points

    added: dict[str, FamilySpec] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", "?")
        old = _REGISTRY.get(ep.name)
        if old is not None and old.entry_point != ep.value:
            print(f"warning: family {ep.name!r} of the installed distribution {dist!r} ({ep.value}) is ignored: "
                  f"the name is taken by {old.entry_point}", file=sys.stderr)
            continue
        try:
            register(ep.name, entry_point=ep.value)  # validates the name and the "module:Class" form
        except TaskError as exc:
            print(f"warning: family entry point {ep.name!r} of {dist!r} is ignored: {exc}", file=sys.stderr)
            continue
        added[ep.name] = _REGISTRY[ep.name] = FamilySpec(name=ep.name, entry_point=ep.value, plugin=dist)
    return added


def _config_names(root: Path | str | None) -> list[str]:
    if root is None or not Path(root).is_dir():
        return []
    return sorted(p.parent.name for p in Path(root).glob(f"*/{FAMILY_YAML}"))


def names(root: Path | str | None = None) -> list[str]:
    """Registered family names (plugins included), plus the config-declared families under ``root``; sorted."""
    load_plugins()
    return sorted(set(_REGISTRY) | set(_config_names(root)))


def spec(name: str, *, root: Path | str | None = None) -> FamilySpec:
    """The spec of ``name``: registered, or config-declared under ``root``.

    Raises:
        UnknownTask: Neither; the message suggests the nearest known name.
    """
    load_plugins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if root is not None and (Path(root) / name / FAMILY_YAML).is_file():
        from medagentgym.tasks.config_family import read_family_yaml

        declared = read_family_yaml(Path(root) / name / FAMILY_YAML)
        return FamilySpec(name=name, entry_point=_CONFIG_ENTRY_POINT, max_turns=declared.max_turns)
    known = names(root)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"did you mean `{close[0]}`?" if close else f"known families: {', '.join(known) or '(none)'}"
    raise UnknownTask(f"unknown task family {name!r}; {hint}")


def family_class(name: str, *, root: Path | str | None = None) -> type:
    """Import and return the class behind ``name`` (the only place a family module is imported)."""
    entry = spec(name, root=root).entry_point
    module_name, _, attr = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskError(f"family {name!r}: cannot import {module_name!r} ({exc}); is the module installed?") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise TaskError(f"family {name!r}: module {module_name!r} has no {attr!r} (entry point {entry!r})") from exc


def make(name: str, *, root: Path | str = DEFAULT_ROOT, **kwargs: Any) -> Any:
    """Construct family ``name`` bound to its built directory ``<root>/<name>/``.

    The directory need not exist yet: ``build`` writes it, ``instances`` raises ``NotBuilt`` with the command
    to run when it is missing.

    Args:
        name: A registered or config-declared family name.
        root: The tasks root (``medagentgym build --out``).
        **kwargs: Constructor arguments, overriding the registered defaults.

    Returns:
        The family object (satisfies ``tasks.TaskFamily``).

    Raises:
        UnknownTask: Unknown name, with a "did you mean" hint.

    Example:
        >>> fam = make("toy_sql", root="artifacts/tasks")
        >>> fam.build(Path("artifacts/tasks"), size="tiny", seed=0)
    """
    family_spec = spec(name, root=root)
    cls = family_class(name, root=root)
    # Bound to an absolute directory: builds and graders run reference code from other working directories and
    # hand paths to the sandbox and to subprocesses, where a relative root would point elsewhere (or nowhere).
    family = cls(root=Path(os.path.abspath(root)) / name, **{**family_spec.defaults, **kwargs})
    if getattr(family, "name", None) != name:
        raise TaskError(f"family class {family_spec.entry_point!r} reports name {family.name!r}, registered as {name!r}")
    return family


def _build_one(name: str, root: Path, size: str, seed: int) -> tuple[dict[str, Any], dict[str, int]]:
    """Build one family; returns its manifest and the instances each of its splits really holds."""
    family = make(name, root=root)
    manifest = family.build(root, size=size, seed=seed)
    splits = list(manifest.get("counts") or ("train", "test"))
    return manifest, {split: len(family.instances(split)) for split in splits}


def _drop_reasons(manifest: dict[str, Any]) -> list[str]:
    """One reason per instance the build dropped, from the manifest's ``dropped*`` entries.

    Families list drops as ``"<id>: <why>"`` strings (the id may hold colons, the reason starts after the first
    ``": "``) or count them (``dropped_unverified: 3``), in which case the key names the reason.
    """
    reasons: list[str] = []
    for key, value in sorted(manifest.items()):
        if not key.startswith("dropped"):
            continue
        if isinstance(value, list):
            reasons += [str(v).split(": ", 1)[1] if ": " in str(v) else "no reason recorded" for v in value]
        elif isinstance(value, int) and not isinstance(value, bool):
            reasons += [key.removeprefix("dropped").strip("_").replace("_", " ") or "no reason recorded"] * value
    return reasons


def _common_reasons(reasons: list[str], top: int = 2, width: int = 160) -> str:
    """The ``top`` most frequent reasons as one line, ``"<n>x <reason>; ..."``, each cut at ``width`` chars."""
    from collections import Counter

    counts = Counter(" ".join(reason.split()) for reason in reasons)  # one line, whatever the exception said
    text = "; ".join(f"{n}x {r[:width]}" + ("..." if len(r) > width else "") for r, n in counts.most_common(top))
    return text + (f"; {len(counts) - top} other reason(s)" if len(counts) > top else "")


def build_report(name: str, root: Path | str, manifest: dict[str, Any],
                 kept: dict[str, int]) -> tuple[str | None, str | None]:
    """Judge one finished build: ``(warning, error)``, each one line or None.

    The warning (prefixed ``warning: <name>:``) says how many instances the build dropped and why, most common
    reasons first; the error says which split was left empty. Both name the manifest, which lists every drop.

    Args:
        name: The family.
        root: The tasks root it was built under.
        manifest: What ``build`` returned.
        kept: ``split -> instances`` actually loadable after the build.

    Example:
        >>> build_report("toy_sql", "artifacts/tasks", {"dropped": []}, {"train": 22, "test": 22})
        (None, None)
    """
    reasons = _drop_reasons(manifest)
    where = Path(root) / name / "manifest.json"
    total = sum(kept.values()) + len(reasons)
    warning = (f"warning: {name}: the build dropped {len(reasons)} of {total} instances: "
               f"{_common_reasons(reasons)} (see {where})") if reasons else None
    empty = [split for split, n in kept.items() if n == 0]
    error = None
    if empty:
        why = f"{len(reasons)} dropped, most often {_common_reasons(reasons, top=1)}" if reasons else "none dropped"
        error = f"the build left the {' and '.join(repr(s) for s in empty)} split(s) empty ({why}); see {where}"
    return warning, error


def build_families(names: list[str], root: Path | str, *, size: str, seed: int = 0, jobs: int = 1,
                   progress: bool = False, skip_errors: bool = False) -> tuple[dict[str, dict], dict[str, str]]:
    """Build each family under ``root`` (``jobs`` families at a time, in separate processes).

    Families are independent and each writes only ``<root>/<name>/``, so the output does not depend on ``jobs``.
    A relative ``root`` is taken from the current directory once, here: families then work with absolute paths
    (their reference code may run elsewhere). A build that drops instances prints one warning line per family
    on stderr (how many, and the most common reasons); a build that leaves a split empty is an error.

    Args:
        names: Family names.
        root: The tasks root to write.
        size: ``"tiny"`` or ``"default"``.
        seed: Build seed (the same seed gives byte-identical files).
        jobs: Families built at once.
        progress: Show a tqdm bar on stderr.
        skip_errors: Record a failing family's error and go on, instead of raising it.

    Returns:
        ``({name: manifest}, {name: "ExcType: message"})`` in the order of ``names``; the second is empty unless
        ``skip_errors``.

    Raises:
        TaskError: Without ``skip_errors``: a build left a split empty (one line naming every such family, raised
            after all builds finished). Any exception a family's build raises is re-raised as is.

    Example:
        >>> manifests, _ = build_families(["toy_sql"], "artifacts/tasks", size="tiny")
        >>> manifests["toy_sql"]["counts"]
        {'test': 22, 'train': 22}
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    root = Path(os.path.abspath(root))
    results: dict[str, tuple[dict, dict] | BaseException] = {}
    bar = tqdm(total=len(names), desc="build", unit="family", disable=not progress)

    def record(name: str, get: Any) -> None:
        try:
            results[name] = get()
        except Exception as exc:  # noqa: BLE001 - kept per family; raised below unless skip_errors
            if not skip_errors:
                raise
            results[name] = exc
        bar.set_postfix_str(name)
        bar.update()

    try:
        if jobs <= 1 or len(names) <= 1:
            for name in names:
                record(name, lambda name=name: _build_one(name, root, size, seed))
        else:
            with ProcessPoolExecutor(max_workers=min(jobs, len(names))) as pool:
                futures = {pool.submit(_build_one, name, root, size, seed): name for name in names}
                for future in as_completed(futures):
                    record(futures[future], future.result)
    finally:
        bar.close()
    manifests: dict[str, dict] = {}
    errors: dict[str, str] = {}
    for name in names:
        got = results[name]
        if isinstance(got, BaseException):
            errors[name] = f"{type(got).__name__}: {got}"
            continue
        warning, error = build_report(name, root, *got)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        if error:
            errors[name] = f"TaskError: {error}"
        else:
            manifests[name] = got[0]
    if errors and not skip_errors:  # only empty splits get here: other failures were raised as they happened
        raise TaskError("; ".join(f"{n}: {e.removeprefix('TaskError: ')}" for n, e in errors.items()))
    return manifests, errors


def max_turns(name: str, *, root: Path | str | None = None) -> int:
    """The family's turn budget (registered, ``max_turns`` in its family.yaml, or a plugin class's ``max_turns``)."""
    family_spec = spec(name, root=root)
    if family_spec.plugin is not None:
        declared = getattr(family_class(name, root=root), "max_turns", None)
        if isinstance(declared, int) and not isinstance(declared, bool) and declared >= 1:
            return declared
    return family_spec.max_turns


# -------------------------------------------------------------------------------------------------------------
# check_family: the contract test every family passes (used by tests/tasks/test_registry.py for every name).
# -------------------------------------------------------------------------------------------------------------
_TRACEBACK = 'Traceback (most recent call last):\n  File "<cell-1>", line 1, in <module>\nNameError: name \'x\''
_SHOTGUN = " ".join(str(i) for i in range(1000)) + " yes no true false 2020-01-01 [] " + "\n".join("abc")


#: How many of the most common gold labels are scored as constants to find the base rate (bounds the cost).
_BASE_CANDIDATES = 20


def _scores(family: Any, items: list[Any], policies: dict[str, Any], play: Any) -> dict[str, float]:
    """Mean score of each policy (``name -> instance -> steps``) over ``items``.

    Instance-major: every policy plays one instance before the next, so a sandboxed play keeps its worker's
    mounts (a family whose instances mount different folders, e.g. ehrshot, restarts a worker per instance,
    not per play).
    """
    totals = dict.fromkeys(policies, 0.0)
    for inst in items:
        for name, steps_of in policies.items():
            totals[name] += play(family, inst, steps_of(inst))
    return {name: total / len(items) for name, total in totals.items()}


def _built_manifest(name: str, root: Path, size: str, seed: int) -> dict[str, Any]:
    """The manifest of ``root``'s build of ``name`` when it was built at ``size`` and ``seed``, else ``{}``."""
    import json

    try:
        manifest = json.loads((root / name / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    ok = isinstance(manifest, dict) and manifest.get("size") == size and manifest.get("seed") == seed
    return manifest if ok and isinstance(manifest.get("files"), dict) else {}


def check_family(name: str, *, size: str = "tiny", seed: int = 0, root: Path | str | None = None,
                 play: Any = None, limit: int | None = None, built: bool = False,
                 rebuild: bool = True) -> dict[str, Any]:
    """Check that family ``name`` honours the contract; returns a report, raises ``TaskError`` listing failures.

    Checks: the same seed builds byte-identical files; instances load, have unique ids, known categories, and
    survive pickle/JSON round trips; the reference solution scores 1 on every instance; the reference PROGRAM
    (its ``code_execution`` steps) runs in the bubblewrap sandbox without an error and its output holds the gold
    answer (:func:`reference_output_problems`: a reference that computes something else, or fails where the
    agent's code runs, fails the check even though its final submission is the gold); empty, traceback and
    shotgun submissions score 0; constant answers score at most the base rate (the best score one of the
    20 most common gold labels gets as a constant answer, under the family's own grader); over each WHOLE
    split, no constant answer scores above the reward-floor bound (``medagentgym.tasks.floors.constant_floor``: 10 %,
    50 % for yes/no families, or the family's ``floor_bound``); and at ``size="default"``, one constant per
    question template learned on train scores at most its bound on test (``template_floor``; reported as
    ``report["template_floor"]`` at every size, enforced only at default size, where templates hold enough
    instances for the number to mean something).

    Args:
        name: A registered (or config-declared under ``root``) family.
        size: Build size.
        seed: Build seed.
        root: Where to build; a temporary directory when None.
        play: ``play(family, instance, steps) -> score``: replays action steps (e.g. through an ``Env``).
            Default: :func:`sandbox_play` for families with ``needs_sandbox = True``, otherwise grade the final
            ``submit_answer`` directly.
        limit: Check at most this many instances per split (the build is always complete).
        built: ``root`` already holds the family built at ``size`` and ``seed`` by this code (a test's cached
            build, issue #29): its ``manifest.json`` stands for the first build, so only the second is built
            here and compared with it, file by file.
        rebuild: Build a second time and compare (the determinism check). ``False`` skips it, only with
            ``built=True``: a test module whose family's build is checked for determinism elsewhere (``make
            test-slow``'s registry-wide run) saves the second build, the costliest step for the large families.
    """
    import contextlib
    import functools
    import pickle
    import tempfile

    from medagentgym.tasks.base import ALL_ACTIONS, GradeContext, Instance
    from medagentgym.tasks.floors import constant_floor, template_floor
    from medagentgym.tasks.graders import render_answer

    def direct(family: Any, inst: Any, steps: list[dict[str, Any]]) -> float:
        answer = steps[-1]["params"]["answer"]
        return family.grade(inst, answer, GradeContext(family_dir=Path(family.root))).score

    if not rebuild and not built:
        raise TaskError(f"check_family({name!r}, rebuild=False) needs built=True: without a build in root= there is "
                        f"nothing to check; drop rebuild=False or pass the cached build")
    problems: list[str] = []
    report: dict[str, Any] = {"family": name}
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        base_root = Path(root) if root is not None else Path(scratch) / "a"
        if built:
            first = _built_manifest(name, base_root, size, seed) if root is not None else {}
            if not first:
                raise TaskError(f"check_family({name!r}, built=True) needs root= holding {name}/manifest.json "
                                f"of a size={size!r} seed={seed} build; build it first or drop built=True")
        else:
            first = make(name, root=base_root).build(base_root, size=size, seed=seed)
        report["rebuilt"] = rebuild
        if rebuild:
            second = make(name, root=Path(scratch) / "b").build(Path(scratch) / "b", size=size, seed=seed)
            if first.get("files") != second.get("files"):
                differ = sorted(k for k in set(first.get("files", {})) | set(second.get("files", {}))
                                if first.get("files", {}).get(k) != second.get("files", {}).get(k))
                problems.append(f"same seed, different files: {differ[:5]}")
        family = make(name, root=base_root)
        pool = None
        if play is None and getattr(family, "needs_sandbox", False):
            pool = stack.enter_context(_check_pool(family))
            play = functools.partial(sandbox_play, pool)
        replays = play is not None  # a custom or sandboxed play runs the reference program itself
        play = play or direct
        if not isinstance(family.version, int) or not family.categories:
            problems.append("needs an int version and at least one category")
        if not set(family.actions) <= ALL_ACTIONS or "submit_answer" not in family.actions:
            problems.append(f"actions {sorted(family.actions)} must be a subset of ALL_ACTIONS with submit_answer")
        for split in ("train", "test"):
            whole = family.instances(split)
            items = whole[:limit] if limit else whole
            report[split] = {"instances": len(items)}
            if not items:
                continue
            floor = constant_floor(family, whole)  # the whole split: a reward floor is a property of the split
            report[split]["floor"] = floor["floor"]
            if floor["exceeds"]:
                problems.append(f"{split}: the constant answer {str(floor['constant'])[:20]!r} scores "
                                f"{floor['floor']:.1%} over the whole split, above the {floor['bound']:.0%} bound")
            ids = [i.id for i in items]
            if len(set(ids)) != len(ids) or any(i.family != name or i.split != split for i in items):
                problems.append(f"{split}: ids must be unique, family/split fields must match")
            if any(i.category not in family.categories for i in items):
                problems.append(f"{split}: an instance category is not in family.categories")
            if any(pickle.loads(pickle.dumps(i)) != i or Instance.model_validate_json(i.model_dump_json()) != i
                   for i in items):
                problems.append(f"{split}: instances must round-trip through pickle and JSON")
            rendered = [render_answer(i.answer_type, i.answer) for i in items]
            # The label base rate is the best any single gold label scores under the family's own grader:
            # with a tolerance band, one constant can match several nearby labels (e.g. MedCalc's ±5 %).
            common = sorted(set(rendered), key=lambda r: (-rendered.count(r), r))[:_BASE_CANDIDATES]
            constants = sorted({"0", "1", "yes", "no", max(set(rendered), key=rendered.count)} | set(common))
            fixed = {"empty": "", "traceback": _TRACEBACK, "shotgun": _SHOTGUN}
            policies = {"oracle": family.reference_solution,
                        **{label: (lambda _i, t=text: [_submit(t)]) for label, text in fixed.items()},
                        **{f"constant:{c}": (lambda _i, c=c: [_submit(c)]) for c in constants}}
            scores = _scores(family, items, policies, play)
            base = max([max(rendered.count(r) for r in set(rendered)) / len(items)]
                       + [scores[f"constant:{c}"] for c in common])
            report[split].update(oracle=scores["oracle"], base_rate=base)
            if scores["oracle"] != 1.0:
                problems.append(f"{split}: reference solutions score {scores['oracle']:.3f}, not 1")
            if not replays and getattr(family, "reference_runs_alone", True):
                if pool is None:
                    pool = stack.enter_context(_check_pool(family))
                ran, bad = reference_output_problems(pool, family, items)
                report[split]["reference_runs"] = ran
                problems += [f"{split}: {line}" for line in bad[:3]]
                if len(bad) > 3:
                    problems.append(f"{split}: {len(bad) - 3} more reference program(s) fail the same way")
            for label in fixed:
                report[split][label] = scores[label]
                if scores[label] != 0:
                    problems.append(f"{split}: a {label} submission scores {scores[label]:.3f}, not 0")
            for constant in constants:
                score = scores[f"constant:{constant}"]
                if score > base + 1e-9:
                    problems.append(f"{split}: constant {constant[:20]!r} scores {score:.3f} > base rate {base:.3f}")
        train_all, test_all = family.instances("train"), family.instances("test")
        if train_all and test_all:  # one constant per question template, learned on train, scored on test
            per_template = template_floor(family, train_all, test_all)
            report["template_floor"] = {k: per_template[k] for k in ("floor", "bound", "templates", "over")}
            # A tiny build has one or two instances per template: its per-template floor is noise, not a property.
            if size == "default" and per_template["exceeds"]:
                top = per_template["top"][0]
                problems.append(f"one constant per question template scores {per_template['floor']:.1%} on test, above "
                                f"the {per_template['bound']:.1%} bound (most from {top['template']!r}: "
                                f"{top['score']:.0%} with {str(top['constant'])[:20]!r})")
    if problems:
        raise TaskError(f"family {name!r} fails its contract: " + "; ".join(problems))
    return report


#: Python run in the session after a reference SQL step: the same query's rows in full, as JSON (the SQL printer
#: the agent sees cuts cells at 60 characters). The database is resolved as ``Session.run_sql`` does in a jail.
_SQL_ROWS = """import json as _j, os as _o, sqlite3 as _s
_db = {db!r}
if not _o.path.isabs(_db):
    _c = _o.path.join("/data", _db)
    if _o.path.isdir(_c):
        _d = sorted(f for f in _o.listdir(_c) if f.endswith((".db", ".sqlite", ".sqlite3")))
        _c = _o.path.join(_c, _d[0]) if len(_d) == 1 else _c
    _db = _c
print(_j.dumps([[None if v is None else str(v) for v in r]
                for r in _s.connect("file:" + _db + "?mode=ro", uri=True).execute({query!r}).fetchall()]))
"""


def _holds_gold(family: Any, inst: Any, rows: list[list[str]], ctx: Any) -> bool:
    """Whether the printed ``rows`` (lines, or a query's rows of cells) state ``inst``'s gold answer under the
    family's own grader: one row, one cell, or all of them together (a list or set answer printed one element
    per row, as text or JSON; a number stated to the gold's decimal places)."""
    import json

    lines = [" | ".join(str(c) for c in row) for row in rows]
    cells = [str(c) for row in rows for c in row]
    joined = [", ".join(cells), json.dumps(cells), json.dumps(lines)] if len(cells) > 1 else []
    # A gold number stored rounded (e.g. 4 decimals) is stated by a program that prints it in full.
    gold = str(inst.answer)
    places = len(gold.split(".", 1)[1]) if "." in gold and gold.replace(".", "", 1).lstrip("-").isdigit() else None
    rounded = []
    if places is not None:
        for cell in cells:
            try:
                rounded.append(f"{float(cell):.{places}f}")
            except ValueError:
                pass
    candidates = list(dict.fromkeys(lines + cells + joined + rounded))
    return any(family.grade(inst, text, ctx).correct for text in candidates[:400])


def reference_output_problems(pool: Any, family: Any, items: list[Any]) -> tuple[int, list[str]]:
    """Run each instance's reference program in a sandbox session (its mounts, as in an episode).

    Every ``code_execution`` step must run without an error; the last one's output must hold the gold answer
    (:func:`_holds_gold`), unless the instance's answer IS the program (biocoder-style: the grader runs it, and
    the oracle score already checks it). Instances whose reference has no code step are not counted.

    Returns:
        ``(programs run, one problem line per failing instance)``.
    """
    import json

    from medagentgym.tasks.base import GradeContext

    ran, problems = 0, []
    for inst in items:
        steps = family.reference_solution(inst)
        code = [s for s in steps if s.get("action") == "code_execution"]
        if not code:
            continue
        ran += 1
        mounts = {name: Path(family.root) / rel for name, rel in inst.data.items()}
        with pool.session(mounts=mounts, persistent=True) as session:
            for step in code:
                params = step.get("params", {})
                database = None
                if params.get("lang", "python") == "python":
                    result = session.run_python(params["code"])
                else:
                    database = inst.metadata.get("sql_database") or next(iter(inst.data), "")
                    result = session.run_sql(params["code"], database)
                if not result.ok:
                    tail = " ".join((result.stderr or result.stdout or "").split())[-160:]
                    problems.append(f"the reference program of {inst.id} fails in the sandbox "
                                    f"({result.error_kind.value}): {tail}")
                    break
            else:
                if inst.answer == inst.solution:
                    continue
                ctx = GradeContext(workspace=session.workspace, session=session, family_dir=Path(family.root))
                if database is None:
                    rows = [[line.strip()] for line in result.stdout.splitlines() if line.strip()]
                else:
                    full = session.run_python(_SQL_ROWS.format(db=database, query=params["code"]))
                    rows = json.loads(full.stdout) if full.ok else [[full.stderr.strip()]]
                if not _holds_gold(family, inst, rows, ctx):
                    shown = " / ".join(" | ".join(map(str, row)) for row in rows)[:80] or "(nothing)"
                    problems.append(f"the reference program of {inst.id} prints {shown!r}, which does not hold the "
                                    f"gold answer {str(inst.answer)[:40]!r}")
    return ran, problems


def _check_pool(family: Any) -> Any:
    """check_family's one-worker jail, preloading what ``family`` declares (``sandbox_preload``; else the default)."""
    from medagentgym import sandbox

    return sandbox.make_pool("bwrap", workers=1, preload=getattr(family, "sandbox_preload", None))


def sandbox_play(pool: Any, family: Any, inst: Any, steps: list[dict[str, Any]]) -> float:
    """Replay ``steps`` in a real sandbox session with the instance's mounts; return the final submit's score.

    This is how ``check_family`` plays families that set ``needs_sandbox = True`` (their grader reads the
    episode's workspace or runs hidden tests in the session). Code runs jailed, exactly as in an episode.
    """
    from medagentgym.tasks.base import GradeContext

    mounts = {name: Path(family.root) / rel for name, rel in inst.data.items()}
    with pool.session(mounts=mounts, persistent=True) as session:
        for step in steps[:-1]:
            params = step.get("params", {})
            if step["action"] == "code_execution" and params.get("lang", "python") == "python":
                session.run_python(params["code"])
            elif step["action"] == "code_execution":
                session.run_sql(params["code"], inst.metadata.get("sql_database") or next(iter(inst.data), ""))
            elif step["action"] == "terminal":
                session.run_shell(params["cmd"])
        ctx = GradeContext(workspace=session.workspace, session=session, family_dir=Path(family.root))
        return family.grade(inst, steps[-1]["params"]["answer"], ctx).score


def _submit(answer: str) -> dict[str, Any]:
    return {"action": "submit_answer", "params": {"answer": answer}}
