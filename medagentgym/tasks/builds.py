"""What a built family folder holds, and whether it is the build a run asked for.

Every build writes ``<root>/<family>/manifest.json`` with the family's ``version``, the ``size`` preset and the
``seed`` (imports write ``source: "import"`` instead of a size). A run must never use a build silently that is not
the one it names: :func:`check_build` refuses a build made by another version of the family's code (its gold
answers, graders or data may have changed) and, when a size is asked for, a build of another size (an evaluation
with ``--size default`` over a tiny build would otherwise be recorded as ``size: default``). Both errors are one
line that says how to rebuild.

Example:
    >>> from medagentgym.tasks.builds import check_build
    >>> check_build("toy_sql", "artifacts/tasks", size="tiny")["size"]
    'tiny'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import NotBuilt, TaskError

__all__ = ["DEFAULT_SIZE", "SIZES", "BuildMismatch", "build_facts", "check_build", "current_version", "rebuild_hint"]

#: The size presets a build can be made at (``medagentgym build --size``).
SIZES = ("tiny", "default")
#: The one size used when none is named: ``medagentgym build``, the families ``medagentgym eval`` builds on demand,
#: and a recipe's ``tasks.size``. Every bundled recipe and sweep names its size; the paper's need ``default``
#: and refuse a tiny build (``train.py --dry-run``, ``medagentgym sweep --dry-run``).
DEFAULT_SIZE = "tiny"


class BuildMismatch(TaskError):
    """A built family folder that is not the build the run asked for (another size, or another version)."""


def rebuild_hint(name: str, root: Path | str, size: str | None) -> str:
    """The command that rebuilds ``name`` under ``root`` (at ``size`` when given)."""
    at = f" --size {size}" if size else ""
    return f"medagentgym build --families {name}{at} --out {root}"


def build_facts(name: str, root: Path | str) -> dict[str, Any] | None:
    """``{"version", "size", "seed", "source", "counts"}`` from ``<root>/<name>/manifest.json``; None when there is
    no manifest (not built).

    Raises:
        TaskError: The manifest is not JSON (names it).
    """
    path = Path(root) / name / "manifest.json"
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TaskError(f"{path} is unreadable ({exc}); rebuild: {rebuild_hint(name, root, None)}") from None
    return {"version": manifest.get("version"), "size": manifest.get("size"), "seed": manifest.get("seed"),
            "source": manifest.get("source", "build"), "counts": manifest.get("counts", {})}


def current_version(name: str, root: Path | str | None = None) -> Any:
    """The version of family ``name`` in the installed code (its class's ``version``; config-declared families:
    their family.yaml's)."""
    from medagentgym.tasks import registry

    root = root or registry.DEFAULT_ROOT
    declared = getattr(registry.family_class(name, root=root), "version", None)
    if isinstance(declared, int) and registry.spec(name, root=root).entry_point != registry._CONFIG_ENTRY_POINT:
        return declared  # a class attribute: no need to construct the family
    return getattr(registry.make(name, root=root), "version", None)


def check_build(name: str, root: Path | str, *, size: str | None = None, required: bool = True,
                version: Any = None, size_option: str = "--size ") -> dict[str, Any] | None:
    """Check that ``<root>/<name>`` is a build this code can use, at ``size`` when given.

    Args:
        name: The family.
        root: The tasks root.
        size: ``"tiny"`` or ``"default"``: refuse a build of the other size. None: any size. Imported families
            (``source: import``) have no size and pass.
        required: Raise ``NotBuilt`` when the family is not built; False returns None instead.
        version: The family version expected (default: the installed code's, :func:`current_version`).
        size_option: How the caller asks for a size, for the message (``"--size "``, ``"tasks.size="``).

    Returns:
        The build's facts (:func:`build_facts`), or None when not built and not ``required``.

    Raises:
        NotBuilt: Not built (with the command that builds it).
        BuildMismatch: Built by another version of the family, or at another size (one line, how to rebuild).
    """
    facts = build_facts(name, root)
    where = Path(root) / name
    if facts is None:
        if required:
            raise NotBuilt(f"family {name!r} is not built at {where}; run `{rebuild_hint(name, root, size)}`")
        return None
    expected = current_version(name, root) if version is None else version
    if facts["version"] is not None and expected is not None and facts["version"] != expected:
        raise BuildMismatch(f"{where} was built by version {facts['version']} of family {name!r}, but this code is "
                            f"version {expected} (its instances, data or grading changed): rebuild it with "
                            f"`{rebuild_hint(name, root, size or facts['size'])}`")
    if size is not None and facts["size"] in SIZES and facts["size"] != size:
        raise BuildMismatch(f"{where} is a {facts['size']} build, not {size}: rebuild it with "
                            f"`{rebuild_hint(name, root, size)}`, or use it with {size_option}{facts['size']} "
                            f"(or use another tasks root)")
    return facts
