"""biocoder programs: module contexts with the marker, the splice, the hidden harness, and in-process gold.

A task's *context* is a small module (imports, helper globals, the marker line, a ``main()`` demo). The graded
program is the context with the candidate function spliced in at the marker (re-indented to the marker's
column), followed by a hidden harness that calls the target on each hidden argument list and stores
canonical results (tuples -> lists, sets sorted, dict items sorted, numpy scalars -> Python) in the payload
variable. Gold results come from running the same program with the reference function, in process, at
build time (our own reference code; the agent's code only ever runs in the sandbox).
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from medagentgym.tasks.bio.kinds_base import Kind
from medagentgym.tasks.bio.runner import PAYLOAD_VAR, indent_for

MARKER = "<<insert solution here>>"
#: ``__name__`` of the graded namespace: the context's ``main()`` demo does not run during grading.
GRADED_MODULE = "__graded__"

_HARNESS = '''

def __mg_canon(x):
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, float)):
        return x
    if hasattr(x, "item") and not hasattr(x, "__len__"):
        return __mg_canon(x.item())
    if isinstance(x, dict):
        return {"__dict__": sorted(([__mg_canon(k), __mg_canon(v)] for k, v in x.items()), key=repr)}
    if isinstance(x, (set, frozenset)):
        return {"__set__": sorted((__mg_canon(v) for v in x), key=repr)}
    if isinstance(x, (list, tuple)) or hasattr(x, "tolist"):
        return [__mg_canon(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]
    return {"__repr__": repr(x)}


def __mg_harness(cases):
    import json as _json
    try:
        target = %(target)s
    except Exception as exc:
        return {"defined": False, "error": type(exc).__name__, "results": []}
    out = []
    for args in _json.loads(cases):
        try:
            out.append(["ok", __mg_canon(target(*args))])
        except Exception as exc:
            out.append(["error", type(exc).__name__ + ": " + str(exc)[:100]])
    return {"defined": True, "results": out}


%(var)s = __mg_harness(%(cases)r)
'''


def signature(kind: Kind, variant: dict[str, Any]) -> str:
    """``def fn(params)`` (``self`` first for class methods)."""
    params = f"self, {kind.params}" if kind.cls else kind.params
    return f"def {variant['fn']}({params})"


def target_expr(kind: Kind, variant: dict[str, Any]) -> str:
    """The expression the harness calls: ``fn`` or ``Cls().fn``."""
    return f"{kind.cls}().{variant['fn']}" if kind.cls else variant["fn"]


def context(kind: Kind, variant: dict[str, Any], example: list[Any]) -> str:
    """The module shown to the agent, with the marker where the function goes."""
    lines = [f'"""Synthetic bioinformatics module ({kind.group}): {kind.id}."""', ""]
    lines += [f"import {m}" for m in kind.imports] + ["", ""]
    if kind.helpers:
        lines += [kind.fill(kind.helpers, variant).rstrip("\n"), "", ""]
    if kind.cls:
        lines += [f"class {kind.cls}:", '    """DNA helpers bound to an alphabet of valid letters."""', "",
                  "    def __init__(self, alphabet='ACGT'):", "        self.alphabet = alphabet", "",
                  "    " + MARKER, "", ""]
    else:
        lines += [MARKER, "", ""]
    call = target_expr(kind, variant)
    lines += ["def main():", f"    args = {example!r}", f"    print({call}(*args))", "", "",
              'if __name__ == "__main__":', "    main()", ""]
    return "\n".join(lines)


def splice(context_text: str, code: str) -> str:
    """Insert ``code`` at the marker, dedented then indented to the marker's column, wrapped in blank lines.

    Raises:
        ValueError: The context has no marker line.
    """
    out = []
    found = False
    for line in context_text.splitlines():
        if line.strip() == MARKER and not found:
            indent = line[: len(line) - len(line.lstrip())]
            out += ["", indent_for(code, indent), ""]
            found = True
        else:
            out.append(line)
    if not found:
        raise ValueError(f"context has no line holding only {MARKER!r}; add it where the function goes")
    return "\n".join(out) + "\n"


def program(context_text: str, code: str, target: str, cases: list[list[Any]], nonce: str) -> str:
    """The graded program: the spliced module plus the hidden harness writing the payload variable."""
    harness = _HARNESS % {"target": target, "cases": json.dumps(cases), "var": PAYLOAD_VAR.format(nonce=nonce)}
    return splice(context_text, code) + harness


def run_in_process(source: str, nonce: str) -> Any:
    """Execute trusted build-time ``source`` in a fresh namespace and return its payload variable."""
    ns: dict[str, Any] = {"__name__": GRADED_MODULE}
    exec(compile(source, "<reference>", "exec"), ns)  # noqa: S102 - our own reference code, at build time
    return ns[PAYLOAD_VAR.format(nonce=nonce)]


def same(a: Any, b: Any, tol: float = 1e-6) -> bool:
    """Canonical results equal; numbers within ``tol`` (absolute or relative); bools only equal bools."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) and math.isnan(a):
            return isinstance(b, float) and math.isnan(b)
        return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], tol) for k in a)
    return a == b


def hidden_cases(kind: Kind, variant: dict[str, Any], seed: str) -> list[list[Any]]:
    """The hidden argument lists of one instance (seeded by a string)."""
    return kind.gen(random.Random(seed), variant)
