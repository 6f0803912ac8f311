"""Read user-written YAML, JSON and JSONL files with one-line errors that point at ``path:line``.

Every CLI reads recipes, sweeps, family declarations, reports or score files through these helpers, so a typo
in any of them reads the same way: ``recipes/x.yaml:4: mapping values are not allowed here (column 9); fix the
YAML at that line (indentation, a missing ':' or an unquoted ': ' in a value)``, never a 50-line traceback.

Example:
    >>> data = load_yaml("recipes/sft_tiny.yaml")
    >>> for lineno, row in iter_jsonl("runs/eval/oracle/scores.jsonl"):
    ...     print(lineno, row["score"])
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = ["FileFormatError", "iter_jsonl", "load_json", "load_yaml", "yaml_error"]

_YAML_FIX = "fix the YAML at that line (indentation, a missing ':' or an unquoted ': ' or '#' in a value)"
_JSON_FIX = "fix the JSON at that line (quotes, commas, brackets)"


class FileFormatError(ValueError):
    """A user file is not valid YAML / JSON / JSONL; the message is ``path:line: what is wrong; how to fix``."""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileFormatError(f"{path}: no such file; check the path") from None
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot be read ({exc.strerror or exc}); check the path and permissions"
                              ) from None


def load_yaml(path: str | os.PathLike, *, loader: type = yaml.SafeLoader) -> Any:
    """Parse a YAML file with a safe loader.

    Args:
        path: The file.
        loader: A ``yaml.SafeLoader`` subclass (e.g. one that reads ``5e-4`` as a float).

    Returns:
        The parsed document (``None`` for an empty file).

    Raises:
        FileFormatError: Unreadable or invalid YAML; the message starts ``path:line:``.

    Example:
        >>> load_yaml("recipes/grpo_tiny.yaml")["method"]
        'grpo'
    """
    path = Path(path)
    text = _read(path)
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise FileFormatError(yaml_error(path, exc)) from None


def yaml_error(path: str | os.PathLike, exc: yaml.YAMLError) -> str:
    """One line ``path:line: problem (column c); how to fix`` for a PyYAML error."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    problem = " ".join(str(problem).split())
    if mark is None:
        return f"{path}:1: {problem}; {_YAML_FIX}"
    where = f"column {mark.column + 1}"
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and start is not None and start.line != mark.line:  # e.g. an unclosed bracket opened earlier
        where += f"; {' '.join(context.split())} that starts at line {start.line + 1}"
    return f"{path}:{mark.line + 1}: {problem} ({where}); {_YAML_FIX}"


def load_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file.

    Raises:
        FileFormatError: Unreadable or invalid JSON; the message starts ``path:line:``.

    Example:
        >>> load_json("runs/eval/oracle/report.json")["policy"]
        'oracle'
    """
    path = Path(path)
    text = _read(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileFormatError(f"{path}:{exc.lineno}: {exc.msg} (column {exc.colno}); {_JSON_FIX}") from None


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, parsed value)`` for every non-blank line of a JSONL file.

    Raises:
        FileFormatError: Unreadable file or a line that is not JSON (``path:line: ...``).

    Example:
        >>> rows = [row for _, row in iter_jsonl("scores.jsonl")]
    """
    path = Path(path)
    for lineno, line in enumerate(_read(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise FileFormatError(f"{path}:{lineno}: {exc.msg} (column {exc.colno}); each line must be one JSON "
                                  "object") from None
