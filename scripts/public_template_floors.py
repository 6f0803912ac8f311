"""The per-template floor of MedAgentGym's public EHR SQL task files, and their train instances per template.

    python scripts/public_template_floors.py --family mimic_iii train_tasks.jsonl valid_tasks.jsonl [--write]

Per family: the floor as issue 34 measured it (``medagentgym.tasks.floors.public_template_floor``: one constant
per template learned on the first file, scored on the second) at three template grains (EHRSQL's ``q_tag``, the
filled ``template``, the gold SQL with values blanked), as published and without the wall-clock golds the
importer drops (``gold_wall_clock``). ``--write`` stores the published figures and the clean files' train
records per test template in ``medagentgym/tasks/data/<family>/public_floor.json`` (counts only: no question,
SQL or answer), which ``matched_template_floor`` draws from to measure our builds like the public files. The
public files are not part of this repository; point at your own copies (github.com/wshi83/MedAgentGym, data/).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from medagentgym.tasks.floors import public_template_floor, public_template_key
from medagentgym.tasks.importers.public import ehr_gold_defect

DATA = Path(__file__).resolve().parents[1] / "medagentgym" / "tasks" / "data"
GRAINS = {
    "q_tag (slots unfilled)": public_template_key,
    "template (values filled)": lambda r: str(r.get("template") or r.get("question")),
    "gold SQL, values blanked": lambda r: public_template_key({"query": r.get("query", "")}),
}


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def measure(family: str, train_path: Path, test_path: Path) -> dict:
    """Floors at each grain, published and clean (wall-clock golds dropped), and the clean train sizes."""
    train, test = _load(train_path), _load(test_path)

    def clean(rows: list[dict]) -> list[dict]:
        return [r for r in rows if (ehr_gold_defect(family, str(r.get("query", ""))) or ("",))[0] != "gold_wall_clock"]

    out: dict = {"family": family, "files": [train_path.name, test_path.name], "grains": {}}
    for name, key in GRAINS.items():
        out["grains"][name] = {
            "published": public_template_floor(train, test, key=key)["floor"],
            "clean": public_template_floor(clean(train), clean(test), key=key)["floor"]}
    main = public_template_floor(clean(train), clean(test))
    out.update({"floor_published": public_template_floor(train, test)["floor"], "floor_clean": main["floor"],
                "templates_clean": main["templates"], "test_clean": main["instances"],
                "train_per_template": main["train_per_template"]})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", required=True, choices=("mimic_iii", "eicu", "treqs"))
    p.add_argument("files", nargs=2, type=Path, metavar="FILE", help="the train file, then the test/valid file")
    p.add_argument("--write", action="store_true", help="store the figures in data/<family>/public_floor.json")
    args = p.parse_args(argv)
    for f in args.files:
        if not f.is_file():
            p.error(f"{f}: no such file; pass MedAgentGym's data/{args.family}/*_tasks.jsonl")
    row = measure(args.family, *args.files)
    for grain, figs in row["grains"].items():
        print(f"{args.family:10s} {grain:28s} published {figs['published']:.1%}  clean {figs['clean']:.1%}")
    sizes = row["train_per_template"]
    print(f"{args.family:10s} clean: {row['templates_clean']} test templates, {row['test_clean']} test records, "
          f"{sum(sizes) / max(1, len(sizes)):.1f} train records per template")
    if args.write:
        doc = {k: row[k] for k in ("files", "grains", "floor_published", "floor_clean", "templates_clean",
                                   "test_clean", "train_per_template")}
        doc["source"] = "MedAgentGym public task files (github.com/wshi83/MedAgentGym, data/), scripts/public_template_floors.py"
        path = DATA / args.family / "public_floor.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
