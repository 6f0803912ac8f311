"""The MedAgentGym paper's results table from ``medagentgym eval`` reports: one row per model or training stage,
the 8 in-distribution families as columns (the paper's order), their mean, and the out-of-distribution suite.

Every cell is a success rate in percent from a ``report.json`` (``per_family[f]["success_rate"]``); ``ID avg``
is the mean over the 8 id columns, ``OOD`` the mean over the ood families (``tasks.SUITES["ood"]``), each
averaged per family so that a large family does not outweigh the others, as the paper reports them. A family a
row was not evaluated on is an empty cell (and is left out of that row's means, which then say how many families
they cover).

Every cell carries its sample size and 95 % interval (the report's ``n`` and ``ci95``: Wilson, or a bootstrap over
tasks when a task has several samples; Wilson from ``n`` for reports without one), shown in a second table.
Each row also shows ``Δ ID vs base``: its ID average minus the base row's, over the id families both rows
cover, with a 95 % interval from a normal approximation: each family's standard error is its interval's width
/ 3.92, an average's is the root sum of squares / families, and the two rows' errors add in quadrature (the rows
are treated as independent samples; on the same tasks a paired test would be tighter). An interval that
excludes 0 is a difference the evaluation can see; one that includes 0 is not.

Example:
    >>> table = paper_table({"base": [id_report, ood_report], "sft": [sft_id, sft_ood]})  # doctest: +SKIP
    >>> write_paper_table(table, Path("runs/sweeps/paper_qwen7b"))  # paper_table.md, .json, .png  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from medagentgym.tasks import SUITES

__all__ = ["PAPER_COLUMNS", "Z95", "paper_table", "render_paper_table", "write_paper_table"]

#: The paper's in-distribution columns, in its order: (family, header).
PAPER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mimic_iii", "MIMIC-III"), ("eicu", "eICU"), ("treqs", "TREQS"), ("medcalcbench", "MedCalc"),
    ("medagentbench", "MedAgentBench"), ("biocoder", "BioCoder"), ("biodsbench", "BioDSBench"),
    ("ehrshot", "EHRSHOT"),
)


#: Two-sided 95 % normal quantile.
Z95 = 1.959964


def paper_table(rows: Mapping[str, Iterable[Mapping[str, Any]]], *, title: str = "",
                base: str | None = "base") -> dict[str, Any]:
    """Merge each row's evaluation reports into the paper's columns, with sizes, intervals and Δ vs base.

    Args:
        rows: Row name (e.g. ``base``, ``sft``) -> its ``report.json`` dicts (typically the id and ood suites).
        title: Shown above the table.
        base: The row the others are compared with (``Δ ID vs base``); when no row has this name, the first row.
            None: no comparison.

    Returns:
        ``{"title", "columns": [header...], "families": {...}, "base": name|None, "rows": [{"name", "cells":
        {family: pct|None}, "id_avg", "id_n", "ood", "ood_n", "ood_families": {family: pct}, "n": {family:
        episodes}, "ci95": {family: [lo, hi] pct}, "id_episodes", "id_ci95", "ood_ci95", "delta_id",
        "delta_id_ci95", "delta_ood", "delta_ood_ci95"}]}`` (percentages; deltas None for the base row and where
        the two rows share no family).
    """
    out_rows = []
    for name, reports in rows.items():
        success: dict[str, float] = {}
        sizes: dict[str, int] = {}
        intervals: dict[str, list[float]] = {}
        for report in reports:
            for family, row in (report.get("per_family") or {}).items():
                if isinstance(row.get("success_rate"), (int, float)):
                    success[family] = 100.0 * float(row["success_rate"])
                    sizes[family] = int(row.get("n") or 0)
                    intervals[family] = _interval_pct(row)
        cells = {family: success.get(family) for family, _ in PAPER_COLUMNS}
        ids = [f for f, v in cells.items() if v is not None]
        oods = {f: success[f] for f in SUITES["ood"] if f in success}
        out_rows.append({"name": name, "cells": cells,
                         "id_avg": _mean([cells[f] for f in ids]), "id_n": len(ids),
                         "ood": _mean(list(oods.values())), "ood_n": len(oods),
                         "ood_families": oods, "n": sizes, "ci95": intervals,
                         "id_episodes": sum(sizes.get(f, 0) for f in ids),
                         "id_ci95": _mean_interval(success, intervals, ids),
                         "ood_ci95": _mean_interval(success, intervals, list(oods))})
    base_row = None
    if base is not None and out_rows:
        base_row = next((r for r in out_rows if r["name"] == base), out_rows[0])
    for row in out_rows:
        for key, families in (("id", [f for f, _ in PAPER_COLUMNS]), ("ood", list(SUITES["ood"]))):
            delta, interval = (None, None) if base_row is None or row is base_row else _delta(row, base_row, families)
            row[f"delta_{key}"], row[f"delta_{key}_ci95"] = delta, interval
    return {"title": title, "columns": [h for _, h in PAPER_COLUMNS] + ["ID avg", "OOD"],
            "families": {h: f for f, h in PAPER_COLUMNS}, "ood_suite": list(SUITES["ood"]),
            "base": None if base_row is None else base_row["name"], "rows": out_rows}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _interval_pct(row: Mapping[str, Any]) -> list[float]:
    """A report row's 95 % interval in percent: its ``ci95``, else Wilson's from ``n`` and the rate."""
    ci = row.get("ci95")
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        return [100.0 * float(ci[0]), 100.0 * float(ci[1])]
    n, rate = int(row.get("n") or 0), float(row["success_rate"])
    if n <= 0:
        return [0.0, 100.0]
    centre = (rate + Z95 ** 2 / (2 * n)) / (1 + Z95 ** 2 / n)
    half = Z95 * math.sqrt(rate * (1 - rate) / n + Z95 ** 2 / (4 * n * n)) / (1 + Z95 ** 2 / n)
    return [100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half)]


def _se(interval: list[float]) -> float:
    return (interval[1] - interval[0]) / (2 * Z95)


def _mean_se(intervals: Mapping[str, list[float]], families: list[str]) -> float:
    return math.sqrt(sum(_se(intervals[f]) ** 2 for f in families)) / len(families)


def _mean_interval(success: Mapping[str, float], intervals: Mapping[str, list[float]],
                   families: list[str]) -> list[float] | None:
    """95 % interval of the mean over ``families`` (normal approximation from each family's interval)."""
    if not families:
        return None
    mean, se = sum(success[f] for f in families) / len(families), _mean_se(intervals, families)
    return [max(0.0, mean - Z95 * se), min(100.0, mean + Z95 * se)]


def _delta(row: Mapping[str, Any], base: Mapping[str, Any], families: list[str]) -> tuple[float | None,
                                                                                      list[float] | None]:
    """``row``'s mean minus ``base``'s over the ``families`` both have, and its 95 % interval."""
    rates = {**row["cells"], **row["ood_families"]}
    base_rates = {**base["cells"], **base["ood_families"]}
    shared = [f for f in families if rates.get(f) is not None and base_rates.get(f) is not None]
    if not shared:
        return None, None
    delta = sum(rates[f] - base_rates[f] for f in shared) / len(shared)
    se = math.hypot(_mean_se(row["ci95"], shared), _mean_se(base["ci95"], shared))
    return delta, [delta - Z95 * se, delta + Z95 * se]


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _signed(value: float) -> str:
    return f"{value:+.1f}".replace("-", "\u2212")


def _delta_cell(row: Mapping[str, Any], key: str) -> str:
    if row.get(f"delta_{key}") is None:
        return ""
    lo, hi = row[f"delta_{key}_ci95"]
    return f"{_signed(row[f'delta_{key}'])} [{_signed(lo)}, {_signed(hi)}]"


def _interval_cell(interval: list[float] | None, n: int | None = None) -> str:
    if interval is None:
        return ""
    text = f"{interval[0]:.1f}\u2013{interval[1]:.1f}"
    return text if n is None else f"{text} (n={n})"


def render_paper_table(table: Mapping[str, Any]) -> str:
    """The table as Markdown (success rates in %, the paper's column order), then its intervals and sizes."""
    n_id, n_ood = len(PAPER_COLUMNS), len(table["ood_suite"])
    base = table.get("base")
    extra = [f"\u0394 ID vs {base}", f"\u0394 OOD vs {base}"] if base else []
    lines = [f"## {table['title']}" if table.get("title") else "## Results", "",
             ("Success rate (%) on each family's test split; ID avg: mean over the 8 in-distribution families; "
              f"OOD: mean over {', '.join(table['ood_suite'])}."
              + (f" \u0394: difference from the {base} row over the families both cover, with its 95 % interval "
                 "(normal approximation, rows treated as independent)." if base else "")), "",
             "| model | " + " | ".join([*table["columns"], *extra, "n (ID episodes)"]) + " |",
             "|---|" + "---:|" * (len(table["columns"]) + len(extra) + 1)]
    for row in table["rows"]:
        cells = [_pct(row["cells"][f]) for f, _ in PAPER_COLUMNS]
        id_avg = _pct(row["id_avg"]) + ("" if row["id_n"] in (0, n_id) else f" ({row['id_n']}/{n_id})")
        ood = _pct(row["ood"]) + ("" if row["ood_n"] in (0, n_ood) else f" ({row['ood_n']}/{n_ood})")
        deltas = [_delta_cell(row, "id"), _delta_cell(row, "ood")] if base else []
        lines.append(f"| {row['name']} | " + " | ".join([*cells, id_avg, ood, *deltas,
                                                        str(row.get("id_episodes", ""))]) + " |")
    lines += ["", "95 % intervals (%) and episodes per cell:", "",
              "| model | " + " | ".join(table["columns"]) + " |", "|---|" + "---:|" * len(table["columns"])]
    for row in table["rows"]:
        cis, sizes = row.get("ci95", {}), row.get("n", {})
        cells = [_interval_cell(cis.get(f), sizes.get(f)) if row["cells"][f] is not None else ""
                 for f, _ in PAPER_COLUMNS]
        lines.append(f"| {row['name']} | " + " | ".join([*cells, _interval_cell(row.get("id_ci95")),
                                                        _interval_cell(row.get("ood_ci95"))]) + " |")
    return "\n".join(lines) + "\n"


def _plot(table: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in table["rows"]]
    columns = table["columns"]
    values = [[*(r["cells"][f] for f, _ in PAPER_COLUMNS), r["id_avg"], r["ood"]] for r in table["rows"]]
    fig, ax = plt.subplots(figsize=(max(8.0, 1.0 * len(columns)), 1.2 + 0.5 * len(names)), dpi=110)
    shown = [[float("nan") if v is None else v for v in row] for row in values]
    image = ax.imshow(shown, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            ax.text(j, i, "" if v is None else f"{v:.1f}", ha="center", va="center", fontsize=8,
                    color="white" if v is not None and v < 60 else "black")
    ax.set_xticks(range(len(columns)), columns, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=9)
    ax.axvline(len(PAPER_COLUMNS) - 0.5, color="white", linewidth=2)
    ax.set_title(table.get("title") or "success rate (%) per family", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.03, label="success %")
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)


def write_paper_table(table: Mapping[str, Any], folder: Path) -> dict[str, Path]:
    """Write ``paper_table.md``, ``paper_table.json`` and ``paper_table.png`` (a heat map) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"md": folder / "paper_table.md", "json": folder / "paper_table.json", "png": folder / "paper_table.png"}
    for key, text in (("md", render_paper_table(table)), ("json", json.dumps(table, indent=2) + "\n")):
        tmp = paths[key].with_name(f".{paths[key].name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, paths[key])
    _plot(table, paths["png"])
    return paths
