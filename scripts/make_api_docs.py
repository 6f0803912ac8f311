"""Write the API reference (Markdown, one page per package) from the docstrings of the public names.

    python scripts/make_api_docs.py                     # = make docs; writes docs/api/<package>.md
    python scripts/make_api_docs.py --out /tmp/api --strict

A name is public when its package or module lists it in ``__all__``: those are documented in full (signature,
docstring with its Google-style sections as Markdown, a pydantic model's fields, a class's public methods).
Modules without ``__all__`` are internal: the page lists them with their one-line summary. Packages:
``sandbox``, ``tasks``, ``env_client``, ``rewards``, ``medcopilot``, ``adapters`` (an adapter whose optional
library is missing is named on its page and in a warning; ``make venv`` installs them all). Pages are written
atomically; ``docs/api/README.md`` (the index) is kept. Prints the pages and every public name without a
docstring; ``--strict`` makes those exit 1.
The pages are not committed: they are rebuilt in seconds, and a committed copy would either rot or fail every
change to a docstring until someone regenerated it.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

from medagentgym.tasks.base import write_bytes_atomic

PACKAGES = ("medagentgym.sandbox", "medagentgym.tasks", "medagentgym.env_client", "medagentgym.rewards",
            "medagentgym.medcopilot", "medagentgym.adapters")
SECTION = re.compile(r"^(Args|Arguments|Attributes|Returns|Yields|Raises|Example|Examples|Note|Notes|Warning)"
                     r":\s*$")
ITEM = re.compile(r"^(\S.*?):(\s+.*|)$")
ROLE = re.compile(r":(?:func|class|data|mod|meth|attr|exc|obj):`~?([^`]+)`")


def modules(package: str) -> tuple[list[ModuleType], dict[str, str]]:
    """The package and its submodules, private ones (a ``_`` part in the dotted name) left out, sorted; and
    ``{module: why}`` for those that cannot be imported here (an adapter whose optional library is missing)."""
    pkg = importlib.import_module(package)
    names = sorted(info.name for info in pkgutil.walk_packages(pkg.__path__, f"{package}.")
                   if not any(part.startswith("_") for part in info.name.split(".")[1:]))
    found, failed = [pkg], {}
    for name in names:
        try:
            found.append(importlib.import_module(name))
        except ImportError as exc:
            failed[name] = " ".join(str(exc).split())
    return found, failed


def markdown(doc: str | None) -> str:
    """A Google-style docstring as Markdown: sections become bold labels, Args/Raises items a list, Examples code.

    Example:
        >>> markdown("Add.\n\nArgs:\n    x: A number.").splitlines()
        ['Add.', '', '**Args**', '', '- `x`: A number.']
    """
    if not doc:
        return "*(no docstring)*"
    text = ROLE.sub(r"`\1`", inspect.cleandoc(doc)).replace("``", "`")
    out: list[str] = []
    section, block = None, []

    def flush() -> None:
        body = inspect.cleandoc("\n".join(block)).strip("\n") if block else ""
        if section in ("Example", "Examples") and body:
            out.extend(["```python", body, "```", ""])
        elif section in ("Args", "Arguments", "Attributes", "Raises") and body:
            items: list[str] = []
            for line in body.splitlines():
                match = ITEM.match(line) if not line.startswith(" ") else None
                if match:
                    items.append(f"- `{match.group(1)}`:{match.group(2)}".rstrip())
                elif items:
                    items[-1] += " " + line.strip()
            out.extend(items + [""])
        elif body:
            out.extend([body, ""])
        block.clear()

    for line in text.splitlines():
        found = SECTION.match(line)
        if found:
            flush()
            section = found.group(1)
            out.extend([f"**{section}**", ""])
        elif section is not None and line and not line.startswith(" "):
            flush()  # an unindented line ends the section
            section = None
            out.append(line)
        elif section is not None:
            block.append(line)
        else:
            out.append(line)
    flush()
    return "\n".join(out).strip()


class _Source(str):
    """An annotation kept as source text (``from __future__ import annotations``), shown without quotes."""

    __repr__ = str.__str__


def _unquoted(sig: inspect.Signature) -> inspect.Signature:
    def fix(annotation: Any) -> Any:
        return _Source(annotation) if isinstance(annotation, str) else annotation

    params = [param.replace(annotation=fix(param.annotation)) for param in sig.parameters.values()]
    return sig.replace(parameters=params, return_annotation=fix(sig.return_annotation))


def signature(name: str, obj: Any) -> str:
    """``def name(...)``, or ``class Name(Base, ...)`` plus its constructor call, as Python-like source."""
    if inspect.isclass(obj):
        bases = ", ".join(b.__name__ for b in obj.__bases__ if b is not object)
        head = f"class {name}({bases})" if bases else f"class {name}"
        if issubclass(obj, BaseException) or hasattr(obj, "model_fields"):
            return head  # an exception takes a message; a pydantic model's fields are tabled below
        try:
            sig = _unquoted(inspect.signature(obj))
        except (TypeError, ValueError):
            return head
        kinds = {param.kind for param in sig.parameters.values()}
        if not kinds or kinds <= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
            return head  # no constructor of its own worth showing (a protocol, a plain base)
        return f"{head}\n{name}{sig}"
    try:
        sig = str(_unquoted(inspect.signature(obj)))
    except (TypeError, ValueError):
        sig = "(...)"
    return f"{'async def' if inspect.iscoroutinefunction(obj) else 'def'} {name}{sig}"


def type_text(annotation: Any) -> str:
    """A type as written in source: ``str``, ``dict[str, str]``, ``Literal['train', 'test']``, ``Any``."""
    if inspect.isclass(annotation) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


def value_text(obj: Any, limit: int = 300) -> str:
    """A constant as short, stable source: functions and classes by name, sets sorted (their order varies)."""
    def show(value: Any) -> str:
        if inspect.isroutine(value) or inspect.isclass(value):
            return value.__name__
        if isinstance(value, dict):
            return "{" + ", ".join(f"{show(k)}: {show(v)}" for k, v in value.items()) + "}"
        if isinstance(value, (set, frozenset)):
            inner = ", ".join(sorted(show(v) for v in value))
            return f"{type(value).__name__}({{{inner}}})" if value else f"{type(value).__name__}()"
        if isinstance(value, (list, tuple)):
            inner = ", ".join(show(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
        return repr(value)

    text = show(obj)
    return text if len(text) <= limit else text[:limit] + " ..."


def constant_comment(name: str, obj: Any, where: list[ModuleType]) -> str:
    """The ``#:`` comment lines right above ``name = ...`` (or ``name: T = ...``) in the module that defines it:
    the first of ``where`` whose globals bind ``name`` to ``obj`` and whose source has such lines."""
    for module in where:
        if vars(module).get(name) is not obj:
            continue
        try:
            lines = inspect.getsource(module).splitlines()
        except (OSError, TypeError):
            continue
        for i, line in enumerate(lines):
            if re.match(rf"^{re.escape(name)}\s*[:=]", line):
                above = []
                while i > 0 and lines[i - 1].startswith("#:"):
                    i -= 1
                    above.insert(0, lines[i][2:].strip())
                if above:
                    return markdown(" ".join(above))
    return ""


def class_members(cls: type, qualname: str) -> tuple[list[str], list[str]]:
    """Markdown for a class's pydantic fields (a table) and public methods and properties, and the members
    without a docstring (one inherited from a base class counts)."""
    parts: list[str] = []
    missing: list[str] = []
    fields = getattr(cls, "model_fields", None)
    fields = fields if isinstance(fields, dict) else {}
    if fields:
        rows = ["| field | type | description |", "|---|---|---|"]
        for field, info in fields.items():
            kind = type_text(info.annotation)
            desc = (info.description or "").replace("\n", " ")
            cells = [f"`{field}`", f"`{kind}`", desc]
            rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        parts.append("\n".join(rows))
    for member, raw in vars(cls).items():
        if member.startswith("_") or member in fields:
            continue
        value = getattr(cls, member, raw)
        if isinstance(raw, property):
            doc = inspect.getdoc(raw)
            parts.append(f"**`{member}`** (property): {markdown(doc)}")
        elif inspect.isfunction(value) or inspect.ismethod(value):
            doc = inspect.getdoc(value)
            parts.append(f"```python\n{signature(member, value)}\n```\n\n{markdown(doc)}")
        else:
            continue
        if not doc:
            missing.append(f"{qualname}.{member}")
    return parts, missing


def document(qualname: str, obj: Any, where: list[ModuleType], seen: dict[int, str]) -> tuple[str, list[str]]:
    """Markdown for one public name, and the names in it without a docstring (constants need none)."""
    anchor = f'<a id="{qualname}"></a>\n\n### `{qualname}`\n\n'
    if id(obj) in seen and (inspect.isclass(obj) or inspect.isroutine(obj)):
        return anchor + f"The same object as [`{seen[id(obj)]}`](#{seen[id(obj)]}).\n", []
    if inspect.isclass(obj) or inspect.isroutine(obj):
        seen[id(obj)] = qualname
        doc = inspect.getdoc(obj)
        body = [f"```python\n{signature(qualname.rsplit('.', 1)[1], obj)}\n```", markdown(doc)]
        missing = [] if doc else [qualname]
        if inspect.isclass(obj):
            members, missing_members = class_members(obj, qualname)
            body += members
            missing += missing_members
        return anchor + "\n\n".join(body) + "\n", missing
    comment = constant_comment(qualname.rsplit(".", 1)[1], obj, where)
    return anchor + f"```python\n{qualname.rsplit('.', 1)[1]} = {value_text(obj)}\n```\n\n{comment}".rstrip() + "\n", []


def package_page(package: str) -> tuple[str, list[str], list[str], dict[str, str]]:
    """``(markdown, documented qualified names, names without a docstring, {module: why not importable})``."""
    mods, failed = modules(package)
    seen: dict[int, str] = {}
    documented, undocumented = [], []
    toc, sections, internal = [], [], []
    for module in mods:
        names = getattr(module, "__all__", None)  # the module's declared public API, if any
        summary = markdown((inspect.getdoc(module) or "").split("\n\n", 1)[0]).replace("\n", " ")
        if names is None:
            internal.append(f"- `{module.__name__}`: {summary}")
            continue
        toc.append(f"- [`{module.__name__}`](#{module.__name__}): {summary}")
        body = [f'<a id="{module.__name__}"></a>\n\n## `{module.__name__}`\n',
                markdown(inspect.getdoc(module)) + "\n"]
        for name in names:
            qualname = f"{module.__name__}.{name}"
            text, missing = document(qualname, getattr(module, name), [module, *mods], seen)
            body.append(text)
            documented.append(qualname)
            undocumented += missing
        sections.append("\n".join(body))
    page = [f"# `{package}` API reference\n",
            ("Generated by `make docs` (`scripts/make_api_docs.py`) from the docstrings of the names each module "
             "lists in `__all__`; do not edit by hand.\n"), "## Modules\n", "\n".join(toc) + "\n", *sections]
    if internal:
        page += ["## Internal modules (no `__all__`)\n", "\n".join(internal) + "\n"]
    if failed:
        page += ["## Not documented here (cannot be imported)\n",
                 "\n".join(f"- `{name}`: {why}" for name, why in failed.items()) + "\n"]
    return "\n".join(page), documented, undocumented, failed


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("docs/api"), help="folder for the pages; default docs/api")
    p.add_argument("--packages", default=",".join(PACKAGES), help="comma-separated packages; default all six")
    p.add_argument("--strict", action="store_true", help="exit 1 when a public class or function has no docstring")
    args = p.parse_args(argv)
    missing: list[str] = []
    try:
        for package in [name.strip() for name in args.packages.split(",") if name.strip()]:
            page, documented, undocumented, failed = package_page(package)
            write_bytes_atomic(args.out / f"{package}.md", page.encode("utf-8"))
            missing += undocumented
            print(f"{args.out / f'{package}.md'}: {len(documented)} public names")
            for name, why in failed.items():
                print(f"warning: {name} is not documented: {why}", file=sys.stderr)
    except ImportError as exc:
        print(f"error: {exc} (make venv installs what every package needs)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: pages written so far are complete, the rest are not; rerun the same command",
              file=sys.stderr)
        return 130
    for name in missing:
        print(f"no docstring: {name}", file=sys.stderr)
    return 1 if missing and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
