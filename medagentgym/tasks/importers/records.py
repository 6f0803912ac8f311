"""Read public task files record by record, each with its line, so one bad record never stops a file.

Formats: JSON lines (MedAgentGym ``*_tasks.jsonl``, MIMICSQL), a JSON array (EHRSQL ``valid.json``, MedAgentBench
``test_data.json``) and CSV with a header (MedCalc-Bench). :func:`read_records` yields ``(line, record, error)``:
``record`` is a dict and ``error`` None, or ``record`` is None and ``error`` says why that record could not be read.

Example:
    >>> for line, record, error in read_records(Path("test_tasks.jsonl")):
    ...     print(line, error or sorted(record)[:2])
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import TaskError

__all__ = ["Record", "read_records", "split_of"]

Record = tuple[int, "dict[str, Any] | None", "str | None"]
_DECODER = json.JSONDecoder()
_NEXT_OBJECT = re.compile(r"\n\s*\{")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _array(text: str) -> Iterator[Record]:
    """Elements of a JSON array with the line each starts on; a broken element is reported and skipped."""
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield _line_of(text, pos), None, f"not JSON ({exc.msg} at line {_line_of(text, exc.pos)})"
            nxt = _NEXT_OBJECT.search(text, exc.pos)
            if nxt is None:
                return
            pos = nxt.end() - 1
            continue
        yield (_line_of(text, pos), value, None) if isinstance(value, dict) else (
            _line_of(text, pos), None, f"not a JSON object but {type(value).__name__}")
        pos = end


def read_records(path: Path | str) -> Iterator[Record]:
    """Yield ``(line, record, error)`` for every record of a JSONL, JSON-array or CSV file.

    Args:
        path: The public task file.

    Raises:
        TaskError: The file does not exist or is not UTF-8 text (the whole file is unusable).
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"no task file at {path}; pass --from FILE (a .jsonl, .json or .csv of public records)")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path} is not UTF-8 text ({exc.reason}); pass the benchmark's JSON/JSONL/CSV file") from exc
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        for row in reader:
            yield reader.line_num, dict(row), None
        return
    if text.lstrip().startswith("["):
        yield from _array(text)
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            yield lineno, None, f"not JSON ({exc.msg}); expected one record per line"
            continue
        yield (lineno, value, None) if isinstance(value, dict) else (
            lineno, None, f"not a JSON object but {type(value).__name__}")


def split_of(record: dict[str, Any], path: Path, default: str | None = None) -> str:
    """The split a record belongs to: ``default`` when given, else the record's ``split`` field, else the file name.

    EHRSQL's ``valid``/``dev`` and MedAgentGym's ``valid_tasks.jsonl`` count as test (MedAgentGym evaluates on them).
    """
    if default:
        return default
    value = str(record.get("split") or "").strip().lower()
    if value:
        return "train" if value == "train" else "test"
    return "train" if Path(path).name.lower().startswith("train") else "test"
