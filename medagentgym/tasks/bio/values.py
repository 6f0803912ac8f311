"""Plain-data transfer of a program's variables between two jails (imported BioDSBench records).

An imported record's hidden checks are arbitrary ``assert`` lines that hold the gold values. They must not run
in the process where the submission ran (it could read them from the frame, or patch what they call), and they
are code from a dataset file, so they do not run on the host either. Grading an imported record is therefore
two runs in two different jails:

1. the submission runs in the episode's session; :func:`mg_encode` (shipped into that run) turns the variables
   the checks name into JSON: numbers, strings, containers, numpy scalars and arrays, pandas Series and
   DataFrames (with dtypes), timestamps, modules by name (re-imported only for a fixed list of analysis
   libraries); anything else becomes an "unsupported" marker;
2. the checks run in a grader-only, one-shot session where no agent code has ever run, over the variables
   rebuilt by :func:`mg_decode` from that JSON. JSON cannot carry code, so nothing of the submission executes
   next to the gold values.

Both functions are self-contained: their source is shipped into the sandbox (:func:`encoder_source`,
:func:`decoder_source`). Limits: 200,000 elements and 40 levels of nesting per variable.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from typing import Any

__all__ = ["check_names", "decoder_source", "encoder_source", "mg_decode", "mg_encode"]


def mg_encode(value: Any) -> Any:
    """Runs IN THE JAIL: ``value`` as JSON-ready plain data (see the module docstring for the tags)."""
    import datetime
    import math
    import types

    import numpy as np
    import pandas as pd

    budget = [200_000]

    def enc(x: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0 or depth > 40:
            return {"__unsupported__": "too large or nested too deeply"}
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int) and not isinstance(x, np.generic):
            return x if abs(x) < 2 ** 63 else {"__unsupported__": "int too large"}
        if isinstance(x, float) and not isinstance(x, np.generic):
            return x if math.isfinite(x) else {"__float__": repr(x)}
        if isinstance(x, types.ModuleType):
            return {"__module__": x.__name__}
        if isinstance(x, (pd.Timestamp, datetime.datetime, datetime.date)):
            return {"__timestamp__": x.isoformat()}
        if isinstance(x, np.generic):
            return {"__np__": x.dtype.str, "v": enc(x.item(), depth + 1)}
        if isinstance(x, np.ndarray):
            return {"__ndarray__": x.dtype.str, "shape": list(x.shape), "v": enc(x.ravel().tolist(), depth + 1)}
        if isinstance(x, pd.Series):
            return {"__series__": enc(x.tolist(), depth + 1), "index": enc(x.index.tolist(), depth + 1),
                    "name": enc(x.name, depth + 1), "dtype": str(x.dtype)}
        if isinstance(x, pd.DataFrame):
            return {"__frame__": [enc(x.iloc[:, i].tolist(), depth + 1) for i in range(x.shape[1])],
                    "columns": enc(list(x.columns), depth + 1), "index": enc(x.index.tolist(), depth + 1),
                    "dtypes": [str(t) for t in x.dtypes]}
        if isinstance(x, list):
            return [enc(v, depth + 1) for v in x]
        if isinstance(x, tuple):
            return {"__tuple__": [enc(v, depth + 1) for v in x]}
        if isinstance(x, (set, frozenset)):
            return {"__set__": [enc(v, depth + 1) for v in x]}
        if isinstance(x, dict):
            return {"__dict__": [[enc(k, depth + 1), enc(v, depth + 1)] for k, v in x.items()]}
        return {"__unsupported__": type(x).__name__}

    return enc(value, 0)


def mg_decode(data: Any) -> Any:
    """Runs in the CHECKER jail (and in tests): rebuild a value from :func:`mg_encode`'s output."""
    import datetime
    import importlib

    import numpy as np
    import pandas as pd

    class Unsupported:
        """A variable the transfer could not carry: equal to nothing, so every check on it fails."""

        def __init__(self, what: str) -> None:
            self.what = what

        def __repr__(self) -> str:
            return f"<unsupported value: {self.what}>"

        def __eq__(self, other: object) -> bool:
            return False

        __hash__ = object.__hash__

    modules = {"numpy", "pandas", "scipy", "math", "statistics", "lifelines", "matplotlib", "statsmodels", "sklearn",
               "collections", "itertools", "re", "json", "datetime"}

    def astype(obj: Any, dtype: str) -> Any:
        try:
            return obj.astype(dtype)
        except (TypeError, ValueError):
            return obj

    def dec(x: Any) -> Any:
        if isinstance(x, list):
            return [dec(v) for v in x]
        if not isinstance(x, dict) or len(x) == 0:
            return x
        if "__float__" in x:
            return float(x["__float__"])
        if "__module__" in x:  # only analysis libraries: importing an arbitrary module could patch what checks call
            name = str(x["__module__"])
            if name.split(".")[0] not in modules:
                return Unsupported(f"module {name}")
            try:
                return importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module the checker cannot import is just unsupported
                return Unsupported(f"module {name}")
        if "__timestamp__" in x:
            text = str(x["__timestamp__"])
            return pd.Timestamp(text) if "T" in text else datetime.date.fromisoformat(text)
        if "__np__" in x:
            return np.array(dec(x["v"]), dtype=np.dtype(x["__np__"]))[()]
        if "__ndarray__" in x:
            return np.array(dec(x["v"]), dtype=np.dtype(x["__ndarray__"])).reshape(x["shape"])
        if "__series__" in x:
            return astype(pd.Series(dec(x["__series__"]), index=dec(x["index"]), name=dec(x["name"])), x["dtype"])
        if "__frame__" in x:
            cols = [astype(pd.Series(dec(c), index=dec(x["index"])), t) for c, t in zip(x["__frame__"], x["dtypes"])]
            frame = pd.concat(cols, axis=1) if cols else pd.DataFrame(index=dec(x["index"]))
            frame.columns = dec(x["columns"])
            return frame
        if "__tuple__" in x:
            return tuple(dec(v) for v in x["__tuple__"])
        if "__set__" in x:
            return {dec(v) for v in x["__set__"]}
        if "__dict__" in x:
            return {dec(k): dec(v) for k, v in x["__dict__"]}
        if "__unsupported__" in x:
            return Unsupported(str(x["__unsupported__"]))
        return Unsupported("unknown tag")

    return dec(data)


def encoder_source() -> str:
    """Source of :func:`mg_encode`, to append to the graded program."""
    return inspect.getsource(mg_encode) + "\n"


def decoder_source() -> str:
    """Source of :func:`mg_decode`, for the checker program."""
    return inspect.getsource(mg_decode) + "\n"


def check_names(checks: str) -> list[str]:
    """The variable names hidden checks read (every loaded name that is not a builtin), sorted.

    Raises:
        SyntaxError: ``checks`` is not valid Python.
    """
    names = {node.id for node in ast.walk(ast.parse(checks)) if isinstance(node, ast.Name)}
    return sorted(n for n in names if not hasattr(builtins, n))
