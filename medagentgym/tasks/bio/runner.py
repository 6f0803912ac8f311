"""Run a graded program inside a sandbox session, in a fresh namespace, and read back a JSON payload.

The code families (biocoder, biodsbench) grade by executing the agent's code inside the episode's sandbox
session (``GradeContext.session``), not in the agent's persistent namespace: a small wrapper ``exec``s the
program in a new ``__main__`` dict, in a fresh temporary working directory, with stdout captured, and prints one
line ``@@<nonce>@@{status}@@<nonce>@@{payload}``.

What crosses the jail boundary is DATA only, and nothing in the jail is trusted: the agent's code runs in the
same process as the wrapper, so it can read the nonce and print (or suppress) any line it likes. Hence:

* gold values and hidden assertions never enter the jail; the payload carries the program's outputs
  (function results, variables, plotted data) and the host compares them with gold it keeps;
* the host parses exactly one tagged line; a missing, duplicated or malformed line is a wrong answer with a
  reason (:func:`parse_tagged`), never an exception (a crash would be a free pass; see ``medagentgym.rewards.oracle``).

When a grader gets no session (``tasks.check_family``'s direct play, offline scoring), the family opens its
own one-worker sandbox pool with the family's data mounts (:class:`FallbackPool`); its sessions are not
persistent, so nothing one graded program leaves behind reaches the next.
"""

from __future__ import annotations

import atexit
import json
import re
import secrets
import textwrap
from pathlib import Path
from typing import Any

from medagentgym.tasks.base import GraderError

#: Name the harness must assign its payload to; ``{nonce}`` is filled at grade time.
PAYLOAD_VAR = "__mg_payload_{nonce}"

_WRAPPER = '''
def __mg_grade(src, var, tag, modname):
    import contextlib, io, json, os, sys, tempfile
    ns = {"__name__": modname, "__builtins__": __builtins__}
    here = os.getcwd()
    work = tempfile.mkdtemp(prefix="graded_")
    buf = io.StringIO()
    status = "ok"
    try:
        os.chdir(work)
        with contextlib.redirect_stdout(buf):
            exec(compile(src, "<graded>", "exec"), ns)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the program did not finish
        status = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        os.chdir(here)
        plt = sys.modules.get("matplotlib.pyplot")  # close the program's figures; never import it (~1 s)
        if plt is not None:
            try:
                plt.close("all")
            except Exception:
                pass
    try:
        text = json.dumps(ns.get(var), default=repr)
    except Exception as exc:
        text, status = "null", f"payload not serialisable: {type(exc).__name__}"
    head = json.dumps({"status": status, "stdout": buf.getvalue()[-20000:]})
    print(tag + head + tag + text)
__mg_grade(%s, %s, %s, %s)
'''

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_+-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


def strip_fence(code: str) -> str:
    """The code inside one surrounding Markdown fence (```python ... ```), else ``code`` unchanged."""
    match = _FENCE.match(code)
    return match.group(1) if match else code


def precheck(code: str, names: list[str] | tuple[str, ...] = ()) -> str | None:
    """Why ``code`` cannot pass, decided on the host without running it; None when it must be run.

    A syntax error (of the dedented code) or a required name that never occurs in the text fails fast: code
    that never mentions ``name`` cannot define it. This keeps hopeless submissions out of the sandbox.
    """
    try:
        compile(indent_for(code, ""), "<submission>", "exec")
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    except (ValueError, MemoryError, RecursionError) as exc:
        return f"{type(exc).__name__}: cannot compile the submission"
    for name in names:
        if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", code):
            return f"{name} is never defined (the name does not occur in the submission)"
    return None


def new_nonce() -> str:
    """A fresh random hex tag for one grading run."""
    return secrets.token_hex(8)


#: Longest payload line the host parses (the sandbox call's output cap is 1 MiB).
MAX_PAYLOAD_CHARS = 1 << 20


def parse_tagged(stdout: str, tag: str) -> tuple[str, Any, str]:
    """The ``(status, payload, program_stdout)`` of the ONE line starting with ``tag``; never raises.

    Returns:
        ``status`` is the wrapper's status (``"ok"`` or ``"<Exception>: message"``) or why the output cannot be
        trusted: no tagged line, more than one (the program printed its own), or a malformed one. ``payload`` is
        None unless the line parsed.
    """
    lines = [line for line in (stdout or "").splitlines() if line.startswith(tag)]
    if len(lines) != 1:
        why = "no result line (the program did not finish)" if not lines else (
            f"{len(lines)} result lines: the program printed its own (forged)")
        return why, None, ""
    parts = lines[0][len(tag):].split(tag)
    if len(parts) != 2 or len(lines[0]) > MAX_PAYLOAD_CHARS:
        return "malformed result line (forged or truncated)", None, ""
    try:
        head, payload = json.loads(parts[0]), json.loads(parts[1])
    except (ValueError, RecursionError):
        return "malformed result line: not JSON", None, ""
    if not isinstance(head, dict) or not isinstance(head.get("status"), str) or not isinstance(head.get("stdout"), str):
        return "malformed result line: bad status record", None, ""
    return head["status"][:400], payload, head["stdout"]


def run_graded(session: Any, program: str, nonce: str, *, wall_s: float = 30.0,
               module_name: str = "__main__") -> tuple[str, Any, str]:
    """Execute ``program`` in a fresh namespace inside ``session``; return ``(status, payload, stdout)``.

    Args:
        session: A sandbox session (``run_python(code, limits=...)``).
        program: Full source; it must assign its JSON-serialisable findings to ``PAYLOAD_VAR`` with ``nonce``.
        nonce: The tag of this run (:func:`new_nonce`).
        wall_s: Wall-clock limit of the run.
        module_name: ``__name__`` of the namespace (``"__main__"`` runs a ``__main__`` guard).

    Returns:
        ``(status, payload, stdout)``: ``status`` is ``"ok"`` or why not (``"<ExceptionType>: message"``, a
        sandbox failure, a missing or forged result line); ``payload`` is the decoded variable (None when never
        assigned, or the output is not trustworthy); ``stdout`` is what the program printed (its last 20,000
        characters). The payload is untrusted data: validate it before use.

    Raises:
        medagentgym.sandbox.SandboxError: The session itself failed (closed, no worker): an infrastructure failure.
    """
    from medagentgym.sandbox import Limits

    tag = f"@@{nonce}@@"
    code = _WRAPPER % (repr(program), repr(PAYLOAD_VAR.format(nonce=nonce)), repr(tag), repr(module_name))
    result = session.run_python(code, limits=Limits(wall_s=wall_s, cpu_s=wall_s, output_bytes=1 << 20))
    status, payload, stdout = parse_tagged(result.stdout or "", tag)
    if status.startswith("no result line"):
        tail = (result.stderr or "").strip().splitlines()[-1:] or [str(getattr(result, "error_kind", "no output"))]
        return f"run failed: {tail[0][:200]}", None, ""
    return status, payload, stdout


def indent_for(code: str, indent: str) -> str:
    """``code`` dedented, then indented by ``indent`` (blank lines kept empty)."""
    body = textwrap.dedent(code.expandtabs(4)).strip("\n")
    return "\n".join(indent + line if line.strip() else "" for line in body.splitlines())


class FallbackPool:
    """A lazily started one-worker sandbox pool for grading without an episode session.

    Args:
        backend: Sandbox backend (``"bwrap"``; ``"local"`` only for development, unisolated).
    """

    def __init__(self, backend: str = "bwrap") -> None:
        self.backend = backend  # sessions are one-shot (persistent=False): no graded program sees another's state
        self._pool: Any = None
        self._session: Any = None
        self._mounts: dict[str, Path] | None = None

    def session(self, mounts: dict[str, Path] | None = None) -> Any:
        """A grading session seeing ``mounts`` under /data (reused while the mounts stay the same)."""
        mounts = {k: Path(v) for k, v in (mounts or {}).items()}
        if self._session is not None and mounts == self._mounts:
            return self._session
        if self._pool is None:
            from medagentgym.sandbox import SandboxUnavailable, make_pool

            try:
                self._pool = make_pool(self.backend, workers=1, allow_unisolated=self.backend == "local",
                                       preload=("numpy", "pandas", "json"))
            except SandboxUnavailable as exc:
                raise GraderError(f"grading runs code but no session was given and the {self.backend!r} "
                                  f"sandbox is unavailable ({exc}); pass GradeContext(session=...)") from exc
            atexit.register(self.close)
        if self._session is not None:
            self._session.close()
        self._session = self._pool.session(mounts=mounts, persistent=False)
        self._mounts = mounts
        return self._session

    def close(self) -> None:
        """Close the session and the pool (idempotent)."""
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
