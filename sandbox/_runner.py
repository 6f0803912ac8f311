"""The runner: the jailed process that executes user code (in-jail side, stdlib only).

A runner is forked by the worker server (``medagentgym.sandbox.worker``) with fd 0 = /dev/null, fd 1/2 = the output
pipes, fd 3 = requests, fd 4 = replies. It serves requests until fd 3 closes. In a persistent session the
same runner serves every call, so ``run_python`` keeps its namespace like a notebook; otherwise it serves
one call and exits.
"""

from __future__ import annotations

import builtins
import io
import json
import linecache
import math
import os
import resource
import sys
import traceback
from pathlib import Path
from typing import Any

REQ_FD, RESP_FD = 3, 4
_MB = 1 << 20
_CELL_PREFIX = "<cell-"


def _safe_str(exc: BaseException) -> str:
    """``str(exc)``, even when the user's exception class has a broken ``__str__``."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} whose str() failed>"


def _context(exc: BaseException, namespace: dict, conn: Any, query: str | None = None) -> dict | None:
    """Ask ``medagentgym.sandbox.grounding.collect_context`` for context; never let it break execution."""
    try:
        from medagentgym.sandbox import grounding
        ctx = grounding.collect_context(exc, namespace, conn, query=query)
        json.dumps(ctx)
        return ctx
    except Exception:
        return None


def _user_traceback(exc: BaseException, cell: str) -> tuple[str, int | None]:
    """Format the user's frames only; return (text, line number in the user's code)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(_CELL_PREFIX)]
    lineno = None
    for frame in frames:
        if frame.filename == cell:
            lineno = frame.lineno
    if lineno is None and frames:
        lineno = frames[-1].lineno
    lines = ["Traceback (most recent call last):\n"] if frames else []
    for frame in frames[-8:]:
        where = "" if frame.filename == cell else f" (earlier cell {frame.filename})"
        lines.append(f"  line {frame.lineno}, in {frame.name}{where}\n")
        if frame.line:
            lines.append(f"    {frame.line.strip()}\n")
    lines.extend(traceback.format_exception_only(type(exc), exc))  # copes with a broken __str__
    return "".join(lines), lineno


def format_table(columns: list[str], rows: list[tuple], max_rows: int, max_cell: int = 60) -> str:
    """Render query rows as an aligned text table with a header and a row-count footer."""
    if not columns:
        return "(statement executed; no result set)\n"
    shown = rows[:max_rows]

    def cell(value: Any) -> str:
        text = "NULL" if value is None else (value.hex() if isinstance(value, bytes) else str(value))
        text = text.replace("\n", "\\n")
        return text if len(text) <= max_cell else text[: max_cell - 3] + "..."

    body = [[cell(v) for v in row] for row in shown]
    widths = [max([len(c)] + [len(r[i]) for r in body]) for i, c in enumerate(columns)]
    out = [" | ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(),
           "-+-".join("-" * w for w in widths)]
    out += [" | ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in body]
    if len(rows) > max_rows:
        out.append(f"(showing the first {max_rows} rows; the query returned more)")
    else:
        out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out) + "\n"


class Runner:
    """Executes requests read from fd 3 and replies on fd 4 (one JSON frame each)."""

    def __init__(self, data_dir: str, workspace: str) -> None:
        self.data_dir = data_dir
        self.workspace = workspace
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.conns: dict[str, Any] = {}
        self.cells = 0
        #: One-off messages for the next call's stderr (e.g. a bridge that could not listen).
        self.notes: list[str] = []
        self.out = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                    errors="backslashreplace", line_buffering=True)
        self.err = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                    errors="backslashreplace", line_buffering=True)

    def serve(self, read_frame, write_frame) -> None:
        """Loop: read a request, apply its limits, run it, flush, reply. Exit when fd 3 closes."""
        while True:
            req = read_frame(REQ_FD)
            if req is None:
                os._exit(0)
            sys.stdout, sys.stderr = self.out, self.err
            while self.notes:
                self.err.write(self.notes.pop(0) + "\n")
            self._apply_limits(req.get("limits") or {})
            lang = req.get("lang")
            if lang == "python":
                reply = self.run_python(req.get("source", ""))
            elif lang == "sql":
                reply = self.run_sql(req.get("source", ""), req.get("database", ""), int(req.get("max_rows", 100)))
            elif lang == "shell":
                reply = self.run_shell(req.get("source", ""))
            else:
                reply = {"exit_code": 2, "error_kind": "sandbox_error", "exception": None}
                print(f"[sandbox] unknown lang {lang!r}", file=self.err)
            for stream in (sys.stdout, sys.stderr, self.out, self.err):
                try:
                    stream.flush()
                except Exception:
                    pass
            reply["seq"] = req.get("seq")  # lets the server tell this reply from a stale or forged one
            write_frame(RESP_FD, reply)
            if req.get("once"):
                os._exit(0)

    @staticmethod
    def _apply_limits(limits: dict) -> None:
        """Lower the soft limits for this call (hard limits were fixed when the runner started)."""
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = math.ceil(used.ru_utime + used.ru_stime + float(limits.get("cpu_s", 30.0)))
        wanted = {
            resource.RLIMIT_CPU: cpu,
            resource.RLIMIT_AS: int(limits.get("memory_mb", 2048)) * _MB,
            resource.RLIMIT_FSIZE: int(limits.get("file_size_mb", 64)) * _MB,
            resource.RLIMIT_NPROC: int(limits.get("processes", 64)),
        }
        for res, soft in wanted.items():
            _, hard = resource.getrlimit(res)
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            try:
                resource.setrlimit(res, (soft, hard))
            except (ValueError, OSError):
                pass

    # -- python -------------------------------------------------------------------------------
    def run_python(self, source: str) -> dict:
        """Run ``source`` in the kept namespace; report exit code and user-level exception info."""
        self.cells += 1
        cell = f"{_CELL_PREFIX}{self.cells}>"
        linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
        try:
            code = compile(source, cell, "exec")
        except (SyntaxError, ValueError) as exc:
            text = "".join(traceback.format_exception_only(type(exc), exc))
            self.err.write(text)
            info = {"type": type(exc).__name__, "message": str(getattr(exc, "msg", exc)),
                    "lineno": getattr(exc, "lineno", None), "offset": getattr(exc, "offset", None),
                    "traceback": text, "context": _context(exc, self.namespace, None)}
            return {"exit_code": 1, "error_kind": "syntax_error", "exception": info}
        try:
            exec(code, self.namespace)
        except SystemExit as exc:
            return self._system_exit(exc)
        except BaseException as exc:  # user code may raise anything; report it, keep serving
            text, lineno = _user_traceback(exc, cell)
            self.err.write(text)
            kind = "memory" if isinstance(exc, MemoryError) else "python_error"
            info = {"type": type(exc).__name__, "message": _safe_str(exc), "lineno": lineno,
                    "traceback": text, "context": _context(exc, self.namespace, None)}
            exc.__traceback__ = None
            return {"exit_code": 1, "error_kind": kind, "exception": info}
        return {"exit_code": 0, "error_kind": "ok", "exception": None}

    def _system_exit(self, exc: SystemExit) -> dict:
        code = exc.code
        if code is None:
            status = 0
        elif isinstance(code, int) and not isinstance(code, bool):
            status = code & 0xFF
        else:
            self.err.write(f"{code}\n")
            status = 1
        return {"exit_code": status, "error_kind": "ok" if status == 0 else "python_error", "exception": None}

    # -- sql ----------------------------------------------------------------------------------
    def _resolve_db(self, database: str) -> str:
        """Map a jail path, a mount-relative path or a bare mount name to a database file."""
        path = Path(database)
        if path.is_absolute():
            # The local (unisolated) backend has no /data: its data folder holds the mounts, so a jail path
            # is read there (in a jail, data_dir is /data and this changes nothing).
            if path.parts[:2] == ("/", "data") and self.data_dir != "/data" and not path.exists():
                return str(Path(self.data_dir).joinpath(*path.parts[2:]))
            return str(path)
        candidate = Path(self.data_dir) / path
        if candidate.is_dir():
            dbs = sorted(p for p in candidate.iterdir() if p.suffix in (".db", ".sqlite", ".sqlite3"))
            if len(dbs) == 1:
                return str(dbs[0])
        if candidate.exists():
            return str(candidate)
        return str(Path(self.workspace) / path)

    def run_sql(self, query: str, database: str, max_rows: int) -> dict:
        """Run one statement on a cached read-only connection and print the rows as a table."""
        import sqlite3
        from urllib.parse import quote

        path = self._resolve_db(database)
        conn = self.conns.get(path)
        try:
            if conn is None:
                if not os.path.isfile(path):
                    raise sqlite3.OperationalError(f"no database file at {path!r} (database={database!r})")
                conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
                conn.execute("PRAGMA query_only = ON")
                self.conns[path] = conn
            cursor = conn.execute(query)
            rows = cursor.fetchmany(max_rows + 1)
            columns = [d[0] for d in cursor.description] if cursor.description else []
            cursor.close()
        except (sqlite3.Error, ValueError) as exc:
            self.err.write(f"{type(exc).__name__}: {exc}\n")
            info = {"type": type(exc).__name__, "message": str(exc), "lineno": None,
                    "traceback": f"{type(exc).__name__}: {exc}\n",
                    "context": _context(exc, self.namespace, conn, query)}
            return {"exit_code": 1, "error_kind": "sql_error", "exception": info}
        self.out.write(format_table(columns, rows, max_rows))
        return {"exit_code": 0, "error_kind": "ok", "exception": None}

    # -- shell --------------------------------------------------------------------------------
    def run_shell(self, command: str) -> dict:
        """Run ``command`` with /bin/sh; its output goes straight to the captured pipes."""
        import subprocess

        proc = subprocess.run(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, check=False)
        if proc.returncode < 0:
            return {"exit_code": None, "signal": -proc.returncode, "error_kind": "shell_error", "exception": None}
        kind = "ok" if proc.returncode == 0 else "shell_error"
        return {"exit_code": proc.returncode, "error_kind": kind, "exception": None}
