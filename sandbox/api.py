"""Public value types of the sandbox: per-call :class:`Limits`, :class:`ErrorKind` and :class:`ExecResult`.

Stdlib only: this module is imported inside the jail as well as on the host.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["ErrorKind", "ExecResult", "Limits"]


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to one call.

    Attributes:
        wall_s: Wall-clock seconds before every process of the call is killed.
        cpu_s: CPU seconds (RLIMIT_CPU) for the executing process.
        memory_mb: Address-space cap in MiB (RLIMIT_AS) for the executing process and its children.
        processes: Max processes/threads of the jail's uid (RLIMIT_NPROC); stops fork bombs.
        output_bytes: Cap per stream (stdout, stderr). Past it, the head and the tail are kept,
            the middle is replaced by a marker, and the total size is still reported.
        file_size_mb: Largest file the call may write (RLIMIT_FSIZE).

    Example:
        >>> Limits(wall_s=2.0, memory_mb=1024)
        Limits(wall_s=2.0, cpu_s=30.0, memory_mb=1024, processes=64, output_bytes=65536, file_size_mb=64)
    """

    wall_s: float = 30.0
    cpu_s: float = 30.0
    memory_mb: int = 2048
    processes: int = 64
    output_bytes: int = 65536
    file_size_mb: int = 64

    def __post_init__(self) -> None:
        for name, low in (("wall_s", 0.01), ("cpu_s", 0.01), ("memory_mb", 64), ("processes", 4),
                          ("output_bytes", 256), ("file_size_mb", 1)):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < low:
                raise ValueError(f"Limits.{name}={value!r} is invalid: use a number >= {low}")

    def to_dict(self) -> dict[str, Any]:
        """Return the limits as a plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Limits:
        """Build limits from a dict; unknown keys raise ``ValueError`` naming the valid ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown Limits field(s) {unknown}: valid fields are {sorted(known)}")
        return cls(**data)


class ErrorKind(str, Enum):
    """Why a call did not succeed (``OK`` when it did)."""

    OK = "ok"
    PYTHON = "python_error"
    SYNTAX = "syntax_error"
    SQL = "sql_error"
    SHELL = "shell_error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    KILLED = "killed"
    SANDBOX = "sandbox_error"


@dataclass
class ExecResult:
    """Outcome of one execution.

    Attributes:
        lang: ``"python"``, ``"sql"`` or ``"shell"``.
        source: The code or query that ran.
        stdout: Captured standard output (decoded, invalid UTF-8 replaced, capped: see ``truncated``).
        stderr: Captured standard error (same rules).
        exit_code: Exit status of the program (Python: 0, 1 on an exception, ``n`` for ``sys.exit(n)``);
            ``None`` when it was killed by a signal.
        signal: Signal number that killed it, else ``None``.
        timed_out: True when the wall-clock or CPU limit ended the call.
        truncated: True when either stream went past ``Limits.output_bytes``.
        stdout_bytes: Total bytes the program wrote to stdout (before capping).
        stderr_bytes: Total bytes written to stderr (before capping).
        duration_s: Wall-clock seconds of the call inside the worker.
        error_kind: Classification of the outcome.
        exception: For Python and SQL failures: ``{"type", "message", "lineno", "traceback", "context"}``;
            ``lineno`` is a line of the user's code, ``context`` comes from ``medagentgym.sandbox.grounding``.
    """

    lang: str
    source: str
    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    timed_out: bool
    truncated: bool
    stdout_bytes: int
    stderr_bytes: int
    duration_s: float
    error_kind: ErrorKind
    exception: dict | None = None

    @property
    def ok(self) -> bool:
        """True when the call finished normally with exit status 0."""
        return self.error_kind == ErrorKind.OK and self.exit_code == 0

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (``error_kind`` as its string value)."""
        data = dataclasses.asdict(self)
        data["error_kind"] = self.error_kind.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecResult:
        """Inverse of :meth:`to_dict`."""
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(fields - set(data) - {"exception"})
        if missing:
            raise ValueError(f"ExecResult dict lacks field(s) {missing}")
        kwargs = {k: data[k] for k in fields if k in data}
        kwargs["error_kind"] = ErrorKind(kwargs["error_kind"])
        return cls(**kwargs)

    @classmethod
    def sandbox_error(cls, lang: str, source: str, message: str, duration_s: float = 0.0) -> ExecResult:
        """A result describing a failure of the sandbox itself (not of the user's code)."""
        text = f"[sandbox] {message}\n"
        return cls(lang=lang, source=source, stdout="", stderr=text, exit_code=None, signal=None,
                   timed_out=False, truncated=False, stdout_bytes=0, stderr_bytes=len(text.encode()),
                   duration_s=duration_s, error_kind=ErrorKind.SANDBOX, exception=None)
