"""The MedAgentGym paper's results table from ``medagentgym eval`` reports: one row per model or training stage,
the 8 in-distribution families as columns (the paper's order), their mean, and the out-of-distribution suite.

Every cell is a success rate in percent from a ``report.json`` (``per_family[f]["success_rate"]``); ``ID avg``
is the mean over the 8 id columns, ``OOD`` the mean over the ood families (``tasks.SUITES["ood"]``), each
averaged per family so that a large family does not outweigh the others, as the paper reports them. A family a
row was not evaluated on is an empty cell (and is left out of that row's means, which then say how many families
they cover).

Example:
    >>> table = paper_table({"base": [id_report, ood_report], "sft": [sft_id, sft_ood]})  # doctest: +SKIP
    >>> write_paper_table(table, Path("runs/sweeps/paper_qwen7b"))  # paper_table.md, .json, .png  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from medagentgym.tasks import SUITES

__all__ = ["PAPER_COLUMNS", "paper_table", "render_paper_table", "write_paper_table"]

#: The paper's in-distribution columns, in its order: (family, header).
PAPER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mimic_iii", "MIMIC-III"), ("eicu", "eICU"), ("treqs", "TREQS"), ("medcalcbench", "MedCalc"),
    ("medagentbench", "MedAgentBench"), ("biocoder", "BioCoder"), ("biodsbench", "BioDSBench"),
    ("ehrshot", "EHRSHOT"),
)


def paper_table(rows: Mapping[str, Iterable[Mapping[str, Any]]], *, title: str = "") -> dict[str, Any]:
    """Merge each row's evaluation reports into the paper's columns.

    Args:
        rows: Row name (e.g. ``base``, ``sft``) -> its ``report.json`` dicts (typically the id and ood suites).
        title: Shown above the table.

    Returns:
        ``{"title", "columns": [header...], "families": {...}, "rows": [{"name", "cells": {family: pct|None},
        "id_avg", "id_n", "ood", "ood_n", "ood_families": {family: pct}}]}``.
    """
    out_rows = []
    for name, reports in rows.items():
        success: dict[str, float] = {}
        for report in reports:
            for family, row in (report.get("per_family") or {}).items():
                if isinstance(row.get("success_rate"), (int, float)):
                    success[family] = 100.0 * float(row["success_rate"])
        cells = {family: success.get(family) for family, _ in PAPER_COLUMNS}
        ids = [v for v in cells.values() if v is not None]
        oods = {f: success[f] for f in SUITES["ood"] if f in success}
        out_rows.append({"name": name, "cells": cells,
                         "id_avg": sum(ids) / len(ids) if ids else None, "id_n": len(ids),
                         "ood": sum(oods.values()) / len(oods) if oods else None, "ood_n": len(oods),
                         "ood_families": oods})
    return {"title": title, "columns": [h for _, h in PAPER_COLUMNS] + ["ID avg", "OOD"],
            "families": {h: f for f, h in PAPER_COLUMNS}, "ood_suite": list(SUITES["ood"]), "rows": out_rows}


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def render_paper_table(table: Mapping[str, Any]) -> str:
    """The table as Markdown (success rates in %, the paper's column order)."""
    n_id, n_ood = len(PAPER_COLUMNS), len(table["ood_suite"])
    lines = [f"## {table['title']}" if table.get("title") else "## Results", "",
             ("Success rate (%) on each family's test split; ID avg: mean over the 8 in-distribution families; "
              f"OOD: mean over {', '.join(table['ood_suite'])}."), "",
             "| model | " + " | ".join(table["columns"]) + " |",
             "|---|" + "---:|" * len(table["columns"])]
    for row in table["rows"]:
        cells = [_pct(row["cells"][f]) for f, _ in PAPER_COLUMNS]
        id_avg = _pct(row["id_avg"]) + ("" if row["id_n"] in (0, n_id) else f" ({row['id_n']}/{n_id})")
        ood = _pct(row["ood"]) + ("" if row["ood_n"] in (0, n_ood) else f" ({row['ood_n']}/{n_ood})")
        lines.append(f"| {row['name']} | " + " | ".join([*cells, id_avg, ood]) + " |")
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
