"""Error grounding: turn a failed execution into one short message an agent can act on.

Two halves, one on each side of the jail:

* :func:`collect_context` runs **inside** the worker, right where user code raised or a SQL query failed,
  while the objects are still alive. It returns a small JSON-able dict of hints: the names defined so far
  (``NameError``), a DataFrame's columns (``KeyError``), close attribute names (``AttributeError``), the
  tables and columns of a database (sqlite "no such column/table"), the importable task libraries
  (``ModuleNotFoundError``). Every list and string in it is bounded, and it never raises.
* :func:`ground` runs on the **host**: it turns an ``ExecResult`` into one short unified message (kind, line,
  the offending source line, the error message, a hint), at most :data:`MAX_MESSAGE_CHARS` characters.

This module is imported by the in-jail worker, so it imports only the standard library at module level;
pandas objects are recognised by duck typing, never imported.

Example:
    >>> try:
    ...     totl = 1
    ...     print(total)
    ... except NameError as exc:
    ...     collect_context(exc, {"totl": 1})["suggestions"]
    ['totl']
"""

from __future__ import annotations

import builtins
import difflib
import re
import signal as _signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    import sqlite3

__all__ = ["MAX_MESSAGE_CHARS", "clean_context", "collect_context", "ground"]

#: Upper bound on the length of a grounded message.
MAX_MESSAGE_CHARS = 1500
_MAX_ITEMS = 30  # entries per list in a context dict
_MAX_ITEM_CHARS = 80  # characters per entry
_MAX_TABLES = 12  # tables described for a SQL error
_SUGGEST_N = 3
_SUGGEST_CUTOFF = 0.6
# Libraries the tasks rely on, by import name; used to answer a ModuleNotFoundError.
_TASK_LIBRARIES = ("numpy", "pandas", "scipy", "sklearn", "statsmodels", "lifelines", "Bio", "matplotlib")
# Distribution names people import by mistake, mapped to the import name.
_IMPORT_ALIASES = {
    "scikit_learn": "sklearn", "scikitlearn": "sklearn", "scikit": "sklearn", "biopython": "Bio",
    "bio": "Bio", "statsmodel": "statsmodels", "lifeline": "lifelines", "np": "numpy", "pd": "pandas",
}


# --------------------------------------------------------------------------------------------------------
# In-jail half: collect_context
# --------------------------------------------------------------------------------------------------------


def collect_context(
    exc: BaseException,
    namespace: dict[str, Any] | None = None,
    conn: sqlite3.Connection | None = None,
    *,
    query: str | None = None,
) -> dict[str, Any]:
    """Gather small, JSON-able hints about why user code or a query failed.

    Called inside the worker while the failing objects are still alive. Never raises: an internal failure
    is reported as ``{"context_error": "<type>"}``.

    Args:
        exc: The exception raised by user code or by the SQL engine.
        namespace: The user's global namespace (persistent sessions keep it between calls), or None.
        conn: The sqlite connection the query ran on, if any. When None and the error is a SQL one, a
            ``sqlite3.Connection`` (or cursor) found in ``namespace`` is used.
        query: The SQL text that failed, if known; used to pick the tables to describe.

    Returns:
        A dict with some of the keys ``missing`` (the unknown name/key/column/module), ``suggestions``
        (close matches), ``defined`` (user names so far), ``columns`` (a DataFrame's columns), ``attributes``
        (public attribute names), ``tables`` (``{table: [columns]}`` or a list of names), ``available``
        (importable task libraries). Lists hold at most 30 entries of at most 80 characters.

    Example:
        >>> collect_context(KeyError("agee"), {})
        {'missing': 'agee', 'suggestions': []}
    """
    try:
        ns = namespace or {}
        message = str(exc)
        if _is_sql_error(exc, message):
            return _bounded(_sql_context(message, conn or _find_connection(ns), query))
        if isinstance(exc, ModuleNotFoundError):
            return _bounded(_module_context(exc))
        if isinstance(exc, NameError):  # UnboundLocalError included
            return _bounded(_name_context(exc, ns))
        if isinstance(exc, KeyError):
            return _bounded(_key_context(exc, ns))
        if isinstance(exc, AttributeError):
            return _bounded(_attribute_context(exc))
        return {}
    except Exception as internal:  # noqa: BLE001 - grounding must never mask the user's error
        return {"context_error": type(internal).__name__}


def _is_sql_error(exc: BaseException, message: str) -> bool:
    if type(exc).__module__ == "sqlite3" or type(exc).__name__ in ("OperationalError", "DatabaseError"):
        return True
    return "no such column" in message or "no such table" in message


def _close(word: str, candidates: list[str]) -> list[str]:
    return difflib.get_close_matches(word, candidates, n=_SUGGEST_N, cutoff=_SUGGEST_CUTOFF)


def _close_ci(word: str, candidates: list[str]) -> list[str]:
    """Close matches, case-insensitive, returned in their original spelling."""
    by_lower: dict[str, str] = {}
    for cand in candidates:
        by_lower.setdefault(cand.lower(), cand)
    return [by_lower[m] for m in _close(word.lower(), list(by_lower))]


def _user_names(ns: dict[str, Any]) -> list[str]:
    return [n for n in ns if not (n.startswith("__") and n.endswith("__")) and n != "_"]


def _name_context(exc: NameError, ns: dict[str, Any]) -> dict[str, Any]:
    name = getattr(exc, "name", None)
    if not name:
        found = re.search(r"name '([^']+)' is not defined", str(exc))
        name = found.group(1) if found else None
    defined = _user_names(ns)
    out: dict[str, Any] = {"defined": sorted(defined)}
    if name:
        out["missing"] = name
        builtin_names = [b for b in dir(builtins) if not b.startswith("_")]
        out["suggestions"] = _close(name, defined) or _close(name, builtin_names)
        if name in ("pd", "np", "plt", "sm") and name not in ns:
            out["import_hint"] = {
                "pd": "import pandas as pd", "np": "import numpy as np",
                "plt": "import matplotlib.pyplot as plt", "sm": "import statsmodels.api as sm",
            }[name]
    return out


def _is_pandas(obj: Any, kind: str) -> bool:
    cls = type(obj)
    return cls.__module__.startswith("pandas") and (
        cls.__name__ == kind if kind != "Index" else cls.__name__.endswith("Index")
    )


def _frames_from_traceback(exc: BaseException) -> list[Any]:
    """DataFrames (or column Indexes) seen as ``self`` in the traceback, innermost first."""
    found: list[Any] = []
    tb = exc.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if candidate is not None and (_is_pandas(candidate, "DataFrame") or _is_pandas(candidate, "Index")):
            found.append(candidate)
        tb = tb.tb_next
    found.reverse()
    return found


def _key_context(exc: KeyError, ns: dict[str, Any]) -> dict[str, Any]:
    key = exc.args[0] if exc.args else None
    missing = key if isinstance(key, str) else repr(key)
    out: dict[str, Any] = {"missing": missing}
    seen = _frames_from_traceback(exc)
    frame = next((f for f in seen if _is_pandas(f, "DataFrame")), None)
    columns_obj = frame.columns if frame is not None else (seen[0] if seen else None)
    if columns_obj is None:
        # Not raised inside pandas with a frame at hand: fall back to the frames in the user's namespace.
        frames = [(n, v) for n, v in ns.items() if _is_pandas(v, "DataFrame") and not n.startswith("_")]
        if len(frames) == 1:
            columns_obj = frames[0][1].columns
        elif frames:
            out["frames"] = {n: [str(c) for c in v.columns][:_MAX_ITEMS] for n, v in frames[:4]}
            cols = [str(c) for _, v in frames for c in v.columns]
            out["suggestions"] = _close_ci(missing, cols)
            return out
        else:
            dict_keys = [str(k) for v in ns.values() if isinstance(v, dict) for k in list(v)[:200]]
            out["suggestions"] = _close_ci(missing, dict_keys)
            return out
    columns = [str(c) for c in columns_obj]
    out["columns"] = columns
    out["suggestions"] = _close_ci(missing, columns)
    return out


def _attribute_context(exc: AttributeError) -> dict[str, Any]:
    name = getattr(exc, "name", None)
    obj = getattr(exc, "obj", None)
    out: dict[str, Any] = {}
    if not name:
        return out
    out["missing"] = name
    if obj is None and "NoneType" in str(exc):
        out["note"] = "the object is None (a function without return, or an in-place method's result?)"
        return out
    try:
        attrs = [a for a in dir(obj) if not a.startswith("_")]
    except Exception:  # noqa: BLE001 - a user class's __dir__ may raise anything
        attrs = []
    suggestions = _close(name, attrs)
    if _is_pandas(obj, "DataFrame"):
        columns = [str(c) for c in obj.columns]
        out["columns"] = columns
        suggestions = _close_ci(name, columns) + suggestions
    out["suggestions"] = list(dict.fromkeys(suggestions))[:_SUGGEST_N]
    return out


def _module_context(exc: ModuleNotFoundError) -> dict[str, Any]:
    import importlib.util

    name = (getattr(exc, "name", None) or "").split(".")[0]
    out: dict[str, Any] = {"missing": name}
    available: list[str] = []
    for lib in _TASK_LIBRARIES:
        try:
            if importlib.util.find_spec(lib) is not None:
                available.append(lib)
        except (ImportError, ValueError):
            continue
    out["available"] = available
    alias = _IMPORT_ALIASES.get(name.lower())
    suggestions = [alias] if alias else []
    suggestions += _close_ci(name, available + sorted(getattr(sys, "stdlib_module_names", ())))
    out["suggestions"] = list(dict.fromkeys(suggestions))[:_SUGGEST_N]
    return out


_SQL_MISSING_RE = re.compile(r"no such (column|table): ([^\s,;]+)")
_SQL_TABLE_RE = re.compile(r"\b(?:from|join|into|update)\s+([`\"\[]?[\w.]+[`\"\]]?)", re.IGNORECASE)


def _find_connection(ns: dict[str, Any]) -> Any:
    for value in ns.values():
        cls = type(value)
        if cls.__module__ == "sqlite3" and cls.__name__ == "Connection":
            return value
        if cls.__module__ == "sqlite3" and cls.__name__ == "Cursor":
            return value.connection
    return None


def _sql_context(message: str, conn: Any, query: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    found = _SQL_MISSING_RE.search(message)
    kind, missing = (found.group(1), found.group(2).strip("`\"[]'")) if found else (None, None)
    if missing:
        out["missing"] = missing
    if conn is None:
        return out
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name").fetchall()]
    if kind == "table" or kind is None:
        out["tables"] = tables
        if missing:
            out["suggestions"] = _close_ci(missing.split(".")[-1], tables)
        return out
    # "no such column": describe the tables the query names, or all of them.
    sql = query or message  # pandas puts the query in its DatabaseError message
    named = {m.group(1).strip("`\"[]").split(".")[-1].lower() for m in _SQL_TABLE_RE.finditer(sql)}
    chosen = [t for t in tables if t.lower() in named] or tables
    described: dict[str, list[str]] = {}
    for table in chosen[:_MAX_TABLES]:
        quoted = '"' + table.replace('"', '""') + '"'
        described[table] = [r[1] for r in conn.execute(f"PRAGMA table_info({quoted})").fetchall()]
    out["tables"] = described
    all_columns = [c for cols in described.values() for c in cols]
    out["suggestions"] = _close_ci(missing.split(".")[-1], all_columns) if missing else []
    return out


def _clip_str(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= _MAX_ITEM_CHARS else text[: _MAX_ITEM_CHARS - 3] + "..."


def _bounded(value: Any, depth: int = 0) -> Any:
    """Copy ``value`` into plain JSON types, clipping strings, lists and dicts."""
    if isinstance(value, dict):
        items = list(value.items())
        limit = _MAX_ITEMS if depth else len(items)  # top-level keys are ours and few
        out = {_clip_str(k): _bounded(v, depth + 1) for k, v in items[:limit]}
        if len(items) > limit:
            out["..."] = f"{len(items) - limit} more"
        return out
    if isinstance(value, (list, tuple)):
        clipped = [_bounded(v, depth + 1) for v in value[:_MAX_ITEMS]]
        if len(value) > _MAX_ITEMS:
            clipped.append(f"... {len(value) - _MAX_ITEMS} more")
        return clipped
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _clip_str(value)


#: The context keys and their shapes; :func:`clean_context` keeps exactly these. ``list`` = a list of strings,
#: ``table`` = ``{name: [strings]}``, ``str`` = one string; ``tables`` may be a ``table`` or a ``list``.
_CONTEXT_SHAPES = {"missing": "str", "import_hint": "str", "note": "str", "context_error": "str",
                   "suggestions": "list", "defined": "list", "columns": "list", "attributes": "list",
                   "available": "list", "frames": "table", "tables": "table|list"}


def _clean_text(value: Any) -> str:
    if isinstance(value, str):
        return _clip_str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return _clip_str(repr(value) if isinstance(value, float) else str(value))
    return f"<{type(value).__name__}>"


def _clean_list(value: Any) -> list[str]:
    if not isinstance(value, list):
        return [_clean_text(value)] if value is not None else []
    out = [_clean_text(v) for v in value[:_MAX_ITEMS]]
    if len(value) > _MAX_ITEMS:
        out.append(f"... {len(value) - _MAX_ITEMS} more")
    return out


def clean_context(ctx: Any) -> dict[str, Any] | None:
    """The context a runner sent back, reduced to the documented keys and shapes (see :func:`collect_context`).

    The runner is the process that runs the user's code, and the user's code can replace any module of its own
    process, so what arrives as "context" may be anything JSON can carry: other keys, other types, nesting as
    deep as the decoder allows. This keeps only known keys, as strings, lists of strings and ``{str: [str]}``
    tables, each bounded like :func:`collect_context`'s output: at most two levels deep and a few KB. Never raises.
    """
    if not isinstance(ctx, dict):
        return None
    out: dict[str, Any] = {}
    for key, shape in _CONTEXT_SHAPES.items():
        if key not in ctx:
            continue
        value = ctx[key]
        if shape == "str":
            out[key] = _clean_text(value)
        elif shape == "list" or (shape == "table|list" and isinstance(value, list)):
            out[key] = _clean_list(value)
        elif isinstance(value, dict):
            items = list(value.items())[:_MAX_TABLES]
            out[key] = {_clean_text(k): _clean_list(v) for k, v in items}
    return out


# --------------------------------------------------------------------------------------------------------
# Host half: ground
# --------------------------------------------------------------------------------------------------------


def _kind(result: Any) -> str:
    kind = getattr(result, "error_kind", "ok")
    return str(getattr(kind, "value", kind)).lower()


def _source_line(source: str | None, lineno: Any) -> str | None:
    if not source or not isinstance(lineno, int) or lineno < 1:
        return None
    lines = source.splitlines()
    return lines[lineno - 1] if lineno <= len(lines) else None


def _quote(lineno: int | None, text: str | None, col: int | None = None) -> list[str]:
    if text is None:
        return []
    prefix = f"  {lineno} | " if lineno else "  | "
    shown = text.rstrip()
    if len(shown) > 160:
        shown = shown[:157] + "..."
    out = [prefix + shown]
    if col and 0 < col <= len(shown) + 1:
        out.append(" " * (len(prefix) - 2) + "| " + " " * (col - 1) + "^")
    return out


def _tail(text: str, lines: int = 5) -> list[str]:
    kept = [ln for ln in (text or "").splitlines() if ln.strip()]
    return ["  " + (ln if len(ln) <= 200 else ln[:197] + "...") for ln in kept[-lines:]]


# CPython's 'File "<cell-3>", line 2' and the worker's short form '  line 2, in <module>'.
_TB_LINE_RE = re.compile(r'(?:File "(<[^"]+)", line (\d+))|(?:^\s+line (\d+), in )', re.MULTILINE)
_EXC_LINE_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|KeyError):?\s?(.*)$")


def _exception_info(result: Any) -> dict[str, Any]:
    """The structured exception, or one parsed from a traceback in stderr."""
    exc = getattr(result, "exception", None)
    if isinstance(exc, dict) and exc.get("type"):
        return exc
    stderr = getattr(result, "stderr", "") or ""
    info: dict[str, Any] = {}
    user_lines = [int(m.group(2) or m.group(3)) for m in _TB_LINE_RE.finditer(stderr)]
    if user_lines:
        info["lineno"] = user_lines[-1]
    for line in reversed(stderr.splitlines()):
        found = _EXC_LINE_RE.match(line.strip())
        if found:
            info["type"], info["message"] = found.group(1).split(".")[-1], found.group(2)
            break
    return info


def _hint(info: dict[str, Any]) -> str | None:
    ctx = clean_context(info.get("context") or info.get("hints") or {})
    if not ctx:
        return None
    suggestions = [s for s in ctx.get("suggestions") or [] if isinstance(s, str)]
    did_you_mean = ("did you mean " + " or ".join(repr(s) for s in suggestions[:3]) + "?") if suggestions else ""
    exc_type = info.get("type", "")
    parts: list[str] = []
    if ctx.get("import_hint"):
        parts.append(f"missing import? `{ctx['import_hint']}`")
    if did_you_mean:
        parts.append(did_you_mean)
    if isinstance(ctx.get("tables"), dict):
        described = "; ".join(f"{t}({', '.join(map(str, c))})" for t, c in list(ctx["tables"].items())[:4])
        parts.append("columns: " + described)
    elif isinstance(ctx.get("tables"), list):
        parts.append("tables: " + ", ".join(map(str, ctx["tables"])))
    if ctx.get("columns") and exc_type in ("KeyError", "AttributeError"):
        parts.append("DataFrame columns: " + ", ".join(map(str, ctx["columns"])))
    elif ctx.get("frames"):
        parts.append("; ".join(f"{n}: {', '.join(map(str, c))}" for n, c in ctx["frames"].items()))
    if exc_type in ("NameError", "UnboundLocalError") and not suggestions:
        defined = ctx.get("defined") or []
        parts.append("defined so far: " + (", ".join(map(str, defined)) if defined else "nothing"))
    if exc_type == "ModuleNotFoundError":
        available = ", ".join(map(str, ctx.get("available", [])))
        parts.append(f"packages cannot be installed; available: {available} and the standard library")
    if ctx.get("note"):
        parts.append(str(ctx["note"]))
    return "; ".join(parts) or None


def _ground_python(result: Any, source: str | None) -> list[str]:
    info = _exception_info(result)
    if not info.get("type"):  # no exception: sys.exit(n), os._exit(n), or output we cannot parse
        status = getattr(result, "exit_code", None)
        lines = [f"Python code exited with status {status} without a traceback (sys.exit() or os._exit()?)."]
        return lines + _tail(getattr(result, "stderr", ""))
    exc_type = info.get("type") or "Error"
    lineno = info.get("lineno") if isinstance(info.get("lineno"), int) else None
    syntax = _kind(result) == "syntax_error" or exc_type in ("SyntaxError", "IndentationError", "TabError")
    where = f" at line {lineno}" if lineno else ""
    col = (info.get("offset") or info.get("col")) if syntax else None
    if syntax and col:
        where += f", column {col}"
    lines = [f"{'Syntax error' if syntax else 'Python error'} ({exc_type}){where}:"]
    text = _source_line(source, lineno) or (info.get("text") if syntax else None)
    lines += _quote(lineno, text, col if isinstance(col, int) else None)
    message = str(info.get("message") or "").strip()
    if syntax:  # str(SyntaxError) repeats the location: "invalid syntax (<cell>, line 1)"
        message = re.sub(r"\s*\([^()]*, line \d+\)$", "", message)
    lines.append(f"{exc_type}: {message}" if message else exc_type)
    hint = _hint(info)
    if hint:
        lines.append("Hint: " + hint)
    return lines


def _ground_sql(result: Any, source: str | None) -> list[str]:
    info = _exception_info(result)
    message = str(info.get("message") or "").strip() or " ".join(_tail(result.stderr, 1)).strip()
    lines = ["SQL error: " + (message or "the query failed")]
    if source:
        query = " ".join(source.split())
        lines.append("  query: " + (query if len(query) <= 300 else query[:297] + "..."))
    hint = _hint(info)
    if hint:
        lines.append("Hint: " + hint)
    elif message.startswith("no database file"):
        lines.append("Hint: name the database as /data/<mount>/<file>.db, <mount>/<file>.db, or a mount name "
                     "holding one .db file.")
    elif "syntax error" in message:
        lines.append("Hint: SQLite dialect; check quotes (strings in '...'), commas and keywords near the token shown.")
    return lines


def _ground_shell(result: Any, source: str | None) -> list[str]:
    code = getattr(result, "exit_code", None)
    lines = [f"Shell command exited with status {code}."]
    if source:
        lines.append("  $ " + (source.strip() if len(source) <= 200 else source.strip()[:197] + "..."))
    stderr_tail = _tail(getattr(result, "stderr", ""))
    if stderr_tail:
        lines += ["stderr (last lines):"] + stderr_tail
    if code == 127:
        lines.append("Hint: command not found; only a minimal set of tools exists in the sandbox.")
    elif code == 126:
        lines.append("Hint: the file is not executable or permission was denied (read-only data?).")
    return lines


def _signal_name(signum: Any) -> str:
    try:
        return _signal.Signals(int(signum)).name
    except (ValueError, TypeError):
        return f"signal {signum}"


def ground(result: Any, source: str | None = None, *, wall_limit_s: float | None = None) -> str:
    """Turn an ``ExecResult`` into one short message an agent can act on.

    Args:
        result: The ``medagentgym.sandbox.ExecResult`` of a call (any object with its attributes works).
        source: The code, query or command that ran; defaults to ``result.source``. Used to quote the
            offending line.
        wall_limit_s: The wall-clock limit the call ran under, quoted in timeout messages; when None the
            measured duration is quoted.

    Returns:
        ``""`` for a successful, untruncated result; otherwise a message of at most
        :data:`MAX_MESSAGE_CHARS` characters: what failed, where (line and the source line), the error
        message, and a hint for the common causes. A truncation note is added to any result whose output
        was cut.

    Example:
        >>> print(ground(result))  # doctest: +SKIP
        Python error (KeyError) at line 2:
          2 | print(df["agee"].mean())
        KeyError: 'agee'
        Hint: did you mean 'age'?; DataFrame columns: age, sex
    """
    try:
        return _ground(result, source, wall_limit_s)
    except Exception as exc:  # noqa: BLE001 - the result holds what jailed code sent: never let it break a step
        return (f"Error ({_safe_kind(result)}); the error details could not be shown "
                f"({type(exc).__name__} while formatting them).")


def _safe_kind(result: Any) -> str:
    try:
        return _kind(result)[:40]
    except Exception:  # noqa: BLE001
        return "unknown"


def _ground(result: Any, source: str | None, wall_limit_s: float | None) -> str:
    source = source if source is not None else getattr(result, "source", None)
    if not isinstance(source, str):
        source = None
    kind = _kind(result)
    lines: list[str] = []
    if kind in ("python_error", "syntax_error"):
        lines = _ground_python(result, source)
    elif kind == "sql_error":
        lines = _ground_sql(result, source)
    elif kind == "shell_error":
        lines = _ground_shell(result, source)
    elif kind == "timeout" or (kind != "ok" and getattr(result, "timed_out", False)):
        limit = wall_limit_s if wall_limit_s is not None else getattr(result, "duration_s", 0.0)
        lines = [(f"Timeout: the code exceeded the {limit:.3g} s wall-clock limit and was killed; "
                  "a loop that never ends, or a heavy query? Work on a sample first, then scale up.")]
    elif kind == "memory":
        lines = [("Memory: the process ran out of its memory limit and was stopped. Load fewer rows or "
                  "columns (usecols=, chunksize=), avoid large cross joins, free big intermediates.")]
    elif kind == "killed":
        name = _signal_name(getattr(result, "signal", None))
        why = {"SIGXCPU": " (CPU-time limit exceeded)", "SIGXFSZ": " (file-size limit exceeded)",
               "SIGSEGV": " (a crash inside a native library)", "SIGKILL": " (out of memory, or killed by the sandbox)"}
        lines = [f"Killed: the process was stopped by {name}{why.get(name, '')}."]
        lines += _tail(getattr(result, "stderr", ""), 3)
    elif kind == "sandbox_error":
        lines = ["Sandbox error: the execution environment failed, not your code; retry the call."]
        lines += _tail(getattr(result, "stderr", ""), 3)
    elif kind != "ok":
        lines = [f"Error ({kind}), exit status {getattr(result, 'exit_code', None)}."]
        lines += _tail(getattr(result, "stderr", ""))
    if getattr(result, "truncated", False):
        shown = getattr(result, "stdout_bytes", None)
        size = f" ({shown:,} bytes produced)" if isinstance(shown, int) and shown else ""
        lines.append(f"Note: the output was truncated{size}; print less (e.g. df.head(), a summary).")
    message = "\n".join(lines)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 4] + " ..."
    return message
