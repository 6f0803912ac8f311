"""biodsbench plot checks: read the plotted DATA in the jail, compare it with the reference estimate on the host.

A plot task asks for a figure (kept in ``fig``) and a saved file. Checking only labels and the number of lines
lets a curve with the right label but invented values pass. Instead the jail reports what is drawn on the
figure's first axes (:func:`mg_figure`: labels, every line's x/y data and draw style, every bar's x, width and
height) and the first bytes of the saved file; the host then checks (:func:`check_plot`):

* the file's type (PNG or PDF magic bytes) and the requested axis labels and title, exactly;
* ``curves``: each reference curve (a Kaplan-Meier survival function, computed with lifelines at build time) is
  matched by a distinct plotted line, evaluated as the step function it draws (``steps-post``, ``steps-pre``,
  ``steps-mid`` or linear between points, so hand-built step coordinates work too) at the midpoint of every
  reference step and at the last time, within 1e-6;
* ``bars``: the bar heights, in drawing order, equal the reference (counts, or per-gene sample numbers); with
  ``edges`` (a histogram) each bar also spans the reference bin.

Everything in the payload is untrusted: malformed shapes, non-finite numbers or a non-monotone x are a wrong
answer with a reason, never an exception.
"""

from __future__ import annotations

import inspect
import math
from bisect import bisect_left, bisect_right
from itertools import pairwise
from typing import Any

import numpy as np

__all__ = ["FILE_MAGIC", "check_plot", "extraction_source", "mg_figure"]

#: Hex prefix of each accepted file type.
FILE_MAGIC = {"png": "89504e470d0a1a0a", "pdf": "255044462d"}
_TOL = 1e-6
_MAX_LINES, _MAX_POINTS, _MAX_BARS = 100, 20000, 500


def mg_figure(fig: Any) -> dict[str, Any]:
    """Runs IN THE JAIL after the submission: the drawn data of ``fig.axes[0]`` as plain JSON values.

    Self-contained (its source is shipped into the graded program by :func:`extraction_source`).
    """
    import numpy as np

    ax = fig.axes[0]

    def numbers(values: Any) -> list[float]:
        return [float(v) for v in np.asarray(values, dtype=float).ravel()[:20000]]

    lines = [{"x": numbers(line.get_xdata()), "y": numbers(line.get_ydata()), "drawstyle": str(line.get_drawstyle())}
             for line in list(ax.get_lines())[:100]]
    bars = [[float(p.get_x()), float(p.get_width()), float(p.get_height())]
            for p in list(ax.patches)[:500] if all(hasattr(p, a) for a in ("get_x", "get_width", "get_height"))]
    return {"xlabel": str(ax.get_xlabel()), "ylabel": str(ax.get_ylabel()), "title": str(ax.get_title()),
            "lines": lines, "bars": bars, "n_patches": len(ax.patches)}


def mg_file_head(path: str) -> str:
    """Runs IN THE JAIL: the first 8 bytes of ``path`` as hex ('' when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(8).hex()
    except OSError:
        return ""


def extraction_source() -> str:
    """Source of the jail-side helpers, to append to a graded program."""
    return inspect.getsource(mg_figure) + "\n\n" + inspect.getsource(mg_file_head) + "\n"


def _numbers(value: Any, limit: int) -> list[float] | None:
    if not isinstance(value, list) or len(value) > limit:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        return None
    return [float(v) for v in value]


def _step_value(x: list[float], y: list[float], style: str, at: float) -> float | None:
    """The value the drawn line shows at ``at`` (None outside its x range)."""
    if at < x[0] - _TOL or at > x[-1] + _TOL:
        return None
    if style in ("steps-post", "steps"):
        return y[max(bisect_right(x, at) - 1, 0)]
    if style == "steps-pre":
        return y[min(bisect_left(x, at), len(x) - 1)]
    if style == "steps-mid":
        i = bisect_left(x, at)
        if i == 0 or (i < len(x) and x[i] - at <= at - x[i - 1]):
            return y[min(i, len(x) - 1)]
        return y[i - 1]
    return float(np.interp(at, x, y))


def _line_matches(line: Any, ref_t: list[float], ref_s: list[float]) -> bool:
    if not isinstance(line, dict):
        return False
    x, y = _numbers(line.get("x"), _MAX_POINTS), _numbers(line.get("y"), _MAX_POINTS)
    style = line.get("drawstyle") if isinstance(line.get("drawstyle"), str) else "default"
    if x is None or y is None or len(x) != len(y) or not x or any(b < a for a, b in pairwise(x)):
        return False
    points = [((a + b) / 2, s) for (a, b), s in zip(pairwise(ref_t), ref_s)] + [(ref_t[-1], ref_s[-1])]
    for at, want in points:
        got = _step_value(x, y, style, at)
        if got is None or abs(got - want) > _TOL:
            return False
    return True


def _check_curves(lines: Any, curves: list[list[list[float]]]) -> str | None:
    if not isinstance(lines, list) or len(lines) > _MAX_LINES:
        return "the figure's lines could not be read"
    used: set[int] = set()
    for k, (ref_t, ref_s) in enumerate(curves):
        match = next((i for i, line in enumerate(lines) if i not in used and _line_matches(line, ref_t, ref_s)), None)
        if match is None:
            return f"no plotted line matches reference curve {k + 1} of {len(curves)} (the estimated survival function)"
        used.add(match)
    return None


def _check_bars(bars: Any, heights: list[float], edges: list[float] | None) -> str | None:
    if not isinstance(bars, list) or len(bars) > _MAX_BARS:
        return "the figure's bars could not be read"
    rows = [_numbers(b, 3) for b in bars]
    if any(r is None or len(r) != 3 for r in rows):
        return "the figure's bars could not be read"
    if len(rows) != len(heights):
        return f"{len(rows)} bars drawn, {len(heights)} expected"
    for i, ((left, width, height), want) in enumerate(zip(rows, heights)):
        if abs(height - want) > _TOL * max(1.0, abs(want)):
            return f"bar {i + 1} has height {height:g}, which is not the reference value"
        if edges is not None:
            span = max(edges[-1] - edges[0], 1.0)
            if abs(left - edges[i]) > 1e-6 * span or abs(left + width - edges[i + 1]) > 1e-6 * span:
                return f"bar {i + 1} does not span the reference bin [{edges[i]:g}, {edges[i + 1]:g})"
    return None


def check_plot(spec: dict[str, Any], gold: dict[str, Any], figure: Any, file_head: Any) -> str | None:
    """Why the plotted figure and saved file fail the instance's plot check (None when they pass).

    Args:
        spec: The instance's plot spec: ``file_type`` (png/pdf), ``labels`` (``{"xlabel": ..., ...}``).
        gold: The reference data: ``curves`` (``[[times, survival], ...]``) and/or ``bars`` (+ ``edges``).
        figure: What :func:`mg_figure` reported (untrusted).
        file_head: What :func:`mg_file_head` reported (untrusted hex string).

    Example:
        >>> check_plot({"file_type": "png", "labels": {}}, {"bars": [2.0]}, figure, "89504e470d0a1a0a")
    """
    magic = FILE_MAGIC[spec["file_type"]]
    if not isinstance(file_head, str) or not file_head.startswith(magic):
        return f"the saved file {spec.get('file', '')!r} is not a {spec['file_type'].upper()} file"
    if not isinstance(figure, dict):
        return "the figure could not be read"
    for key, want in spec.get("labels", {}).items():
        if figure.get(key) != want:
            return f"{key} must be {want!r}"
    if "curves" in gold:
        why = _check_curves(figure.get("lines"), gold["curves"])
        if why:
            return why
    if "bars" in gold:
        why = _check_bars(figure.get("bars"), gold["bars"], gold.get("edges"))
        if why:
            return why
    return None
