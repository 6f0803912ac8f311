"""Write one documentation page per task family, with a real instance from a tiny build, and the index.

    medagentgym pages --only bmi --out runs/bmi_pages   # one family's page (e.g. your own package's family)
    medagentgym pages                                   # every family + index into docs/families (`make docs`)
    medagentgym pages --tasks-root artifacts/tasks_tiny # reuse a tiny build (seed 0)
    medagentgym pages --measure-default                 # also re-measure the default-size floors (minutes)

(``python scripts/make_family_pages.py`` in a clone is the same command.)

Writes ``docs/families/<family>.md`` and ``docs/families/README.md``. A page gives the family's version, suite
and turn budget; what it tests, its grading and its episode end (from the module docstring's spec card); one real
test instance of the tiny build, seed 0 (question, context excerpt, answer type, gold answer, the reference
solution and the actions the oracle replays); the permitted actions (the family's ``actions``); the reward
floors: the constant-answer floor (``medagentgym.env_client.evaluation.constant_floor`` over the whole test split; for
families graded on a predictions file, the best no-information predictor) and the per-template floor (one
constant per question template learned on train, scored on test: ``medagentgym.tasks.floors.template_floor``),
each at tiny size, computed here, and at default size, read from ``docs/families/floors.json``
(``--measure-default`` builds every family at default size, which takes minutes, and rewrites it with the date);
and how to import the public benchmark (``medagentgym import --family F``). ``tests/docs/test_family_pages.py``
checks that each page's version, actions, instance and tiny floors still match the code, and that the default
floors are within their bounds.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

from medagentgym.env_client.evaluation import constant_floor
from medagentgym import tasks
from medagentgym.tasks.base import write_bytes_atomic
from medagentgym.tasks.floors import (
    matched_template_floor,
    public_floor_record,
    template_floor,
)
from medagentgym.tasks.graders import render_answer
from medagentgym.tasks.importers import IMPORTERS

OUT = Path("docs/families")
FLOORS = "floors.json"
#: What each importer reads and what the user must supply (see docs/architecture.md, "Importing public task files").
IMPORT_INPUTS = {
    "mimic_iii": ("EHRSQL MIMIC-III JSON or MedAgentGym task JSONL", "--db MIMIC_III.db (default: the synthetic one)"),
    "eicu": ("EHRSQL eICU JSON or MedAgentGym task JSONL", "--db EICU.db (default: the synthetic one)"),
    "treqs": ("MIMICSQL or MedAgentGym task JSONL", "--db TREQS.db (default: the synthetic one)"),
    "ehr_seqsql": ("MedAgentGym task JSONL (EHR-SeqSQL records)", "--db MIMIC_III.db (default: the synthetic one)"),
    "medcalcbench": ("MedCalc-Bench CSV or JSONL", "nothing else"),
    "npowerai": ("N-PowerAI JSONL", "nothing else"),
    "biocoder": ("BioCoder JSONL", "the packages its programs import (the import prints the pip install line)"),
    "biodsbench": ("BioDSBench JSONL", "--data DIR with DIR/<pmid>/ study tables"),
    "medagentbench": ("MedAgentBench JSON or JSONL", "--fhir-url URL of a FHIR server holding its patients"),
    "ehrcon": ("MedAgentGym task JSONL", "--data DIR with EHRCon_combined.db and clinical_notes.csv"),
    "ehrshot": ("MedAgentGym task JSONL", "--data DIR with the CLMBR embeddings and labels, and --allow-pickle "
                "(the embeddings are pickles, and unpickling runs any code a file holds: only for files you trust)"),
    "mimic_extract": ("MedAgentGym task JSONL", "--data DIR with the MIMIC-Extract files, and --allow-pickle (its "
                      "tables are pickles, and unpickling runs any code a file holds: only for files you trust)"),
}
#: The flags of ``medagentgym import`` a family's import cannot do without (the command each page shows has them).
IMPORT_FLAGS = {"biodsbench": "--data DIR", "medagentbench": "--fhir-url URL", "ehrcon": "--data DIR",
                "ehrshot": "--data DIR --allow-pickle", "mimic_extract": "--data DIR --allow-pickle"}
#: The per-template floor of MedAgentGym's public files (one constant per template learned on train, scored on
#: test), as issue 34 measured it: as published, and without the golds the importer drops (wall-clock answers).
PUBLIC_TEMPLATE_FLOORS = {
    "mimic_iii": "21.9 % as published; 14.0 % without its wall-clock golds, which the importer drops",
    "eicu": "23.7 % as published; 14.1 % without its wall-clock golds, which the importer drops",
    "treqs": "4.2 %",
}
#: Which question field an import shows (``--question-field``), per EHR SQL family.
QUESTION_FIELD_NOTE = (
    "Questions shown: each record's paraphrased `question` by default; `--question-field template` shows EHRSQL's "
    "canonical `template` instead{harness}. The import report says which field was shown (`question_from_<field>`).")
WRONG_OR_INFRA = (
    "What is wrong and what is infrastructure: an empty answer, a traceback, several candidates in one answer, "
    "an answer the grader cannot parse, or any exception the submission provokes in the grader scores **0**. "
    "Only a failure that is not the submission's (the sandbox lost, the grader's own deadline, broken gold: "
    "`InfraError`, `GraderError`) gives reward **None**: training takes no signal from that episode and "
    "`medagentgym eval` counts it as a failure under *grader errors*. See "
    "[Grading semantics](../architecture.md#grading-semantics).")


def spec_card(family_class: type) -> dict[str, str]:
    """The module docstring's sections (``Description``, ``Grading``, ...) as dedented text, plus ``summary``."""
    doc = inspect.getdoc(sys.modules[family_class.__module__]) or ""
    summary, _, rest = doc.partition("\n\n")
    parts = re.split(r"^([A-Z][A-Za-z ]+):\n", rest, flags=re.MULTILINE)
    card = {"summary": " ".join(summary.split(":", 1)[-1].split())}
    for title, body in zip(parts[1::2], parts[2::2]):
        card[title] = inspect.cleandoc(body).replace("``", "`")
    return card


def version_list(text: str) -> str:
    """A docstring's ``Version history`` (``1: ...`` items with indented continuation lines) as a Markdown list."""
    items: list[str] = []
    for line in text.splitlines():
        found = re.match(r"^(\d+):\s*(.*)$", line)
        if found:
            items.append(f"- **{found.group(1)}**: {found.group(2)}")
        elif items and line.strip():
            items[-1] += " " + line.strip()
    return "\n".join(items) or text


def pick_instance(family: Any, card: dict[str, str]) -> Any:
    """The first test instance of the category the docstring's example names, else the first test instance."""
    test = family.instances("test")
    wanted = re.search(r'category:\s*"([^"]+)"', card.get("Example instance", ""))
    same = [inst for inst in test if wanted and inst.category == wanted.group(1)]
    return (same or test)[0]


def excerpt(text: str, limit: int = 1200) -> str:
    """``text`` cut at ``limit`` characters (at a line end when one is near), saying how much was left out."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    cut = cut if cut > limit // 2 else limit
    return f"{text[:cut].rstrip()}\n... ({len(text) - cut:,} more characters)"


def fence(text: str, lang: str = "text") -> str:
    """A fenced block that cannot be closed early by backticks inside ``text``."""
    ticks = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return f"{ticks}{lang}\n{text}\n{ticks}"


def floor_row(size: str, floor: dict[str, Any], when: str) -> str:
    """One row of a page's floor table; the test rebuilds the tiny row from a fresh build and looks for it."""
    constant = " ".join(str(floor["constant"]).split())[:40]
    return (f"| {size} ({when}) | {floor['instances']} | {floor['floor']:.1%} | `{constant}` | "
            f"≤ {floor['bound']:.0%} | {floor['method']} |")


def template_row(size: str, floor: dict[str, Any], when: str) -> str:
    """One row of a page's per-template floor table; the test rebuilds the tiny row and looks for it."""
    top = floor["top"][0] if floor["top"] else None
    worst = (f"`{top['template']}`: {top['score']:.0%} of {top['test']} with `{' '.join(str(top['constant']).split())[:30]}`"
             if top else "-")
    over = ", ".join(f"`{t}`" for t in floor["over"][:6]) + (" ..." if len(floor["over"]) > 6 else "") or "none"
    return (f"| {size} ({when}) | {floor['instances']} | {floor['templates']} | {floor['floor']:.1%} | "
            f"≤ {floor['bound']:.1%} | {worst} | {over} |")


def measured_on(row: dict[str, Any], default: dict[str, Any]) -> str:
    """The date a family's default-size floors were measured (its own, else the floors file's)."""
    return str(row.get("measured") or default.get("measured"))


def floor_section(name: str, family: Any, floors: dict[str, Any], default: dict[str, Any]) -> list[str]:
    """The page's reward-floor section: the constant floor and the per-template floor, tiny and default."""
    row = default.get("families", {}).get(name)
    current = row and row.get("version") == family.version
    predictions = hasattr(family, "null_submissions")
    what = ("the best no-information predictor (a predictions file with constant, uniformly random or "
            "train-proportional random predictions for every test id, written without reading a feature, graded "
            "10 times per instance)" if predictions else
            "one constant answer (a common gold answer, `0`, `1`, `[-1]`, yes/no, ...)")
    lines = ["## Reward floors", "",
             (f"**Constant floor**: what {what} earns over the whole test split under this grader "
              "(`medagentgym.env_client.evaluation.constant_floor`; `medagentgym eval` reports it beside every success rate). A "
              "policy that does not beat it has learned nothing."), "",
             "| size | test instances | floor | constant | bound | method |", "|---|---:|---:|---|---|---|",
             floor_row("tiny", floors[name], "seed 0"),
             floor_row("default", row, f"measured {measured_on(row, default)}") if current else
             "| default | | not measured for this version | | | |", "",
             ("**Per-template floor**: per question template, the best constant on the train split, submitted to the "
              "template's test instances (`medagentgym.tasks.floors.template_floor`). The bound is 10 % per "
              "template, and the label base rate for yes/no templates (no template may pay more than \"always the "
              "majority answer\"), plus, in a family that states a public \"nothing found\" share "
              "(`nothing_found_share`), the template's own share of empty / None / 0 answers up to it; weighted "
              "by the templates' test instances. Tiny builds have one or two "
              "instances per template, so only the default row says much. *Over bound*: templates above their own "
              "bound by more than two binomial standard errors."), "",
             "| size | test instances | templates | floor | bound | template contributing most | over bound |",
             "|---|---:|---:|---:|---:|---|---|",
             template_row("tiny", floors[f"{name}/template"], "seed 0")]
    tmpl = (row or {}).get("template")
    lines.append(template_row("default", tmpl, f"measured {measured_on(row, default)}") if current and tmpl else
                 "| default | | | not measured for this version | | | |")
    if name in PUBLIC_TEMPLATE_FLOORS:
        lines += ["", (f"**Public figure**: the same per-template floor on MedAgentGym's public {name} files is "
                       f"{PUBLIC_TEMPLATE_FLOORS[name]} (measured for issue 34 on the public task files).")]
    matched = (row or {}).get("template_matched") if current else None
    public = public_floor_record(name)
    if public and matched:
        sizes = public["train_per_template"]
        lines += ["", (f"**Like for like** (`scripts/public_template_floors.py`, `floors.matched_template_floor`): "
                       f"the public figure is one constant per public template (EHRSQL's `q_tag`, time windows as "
                       f"unfilled slots; TREQS: the gold SQL with its values blanked) learned on "
                       f"{sum(sizes) / len(sizes):.1f} train records per template on average: "
                       f"{100 * public['floor_clean']:.1f} % without wall-clock golds "
                       f"({100 * public['floor_published']:.1f} % as published). This build measured the same way "
                       f"({matched['templates']} templates, time-window variants merged; each template's constant "
                       f"learned on a train sample of a public template's size, {matched['draws']} draws): "
                       f"**{100 * matched['floor']:.1f} %** (sd {100 * matched['sd']:.1f} points over draws); "
                       f"learned on all its train instances: {100 * matched['full']:.1f} %.")]
    return lines + [""]


def instance_section(family: Any, inst: Any) -> list[str]:
    """The real instance: what the agent sees, the gold answer, the reference solution, the oracle's actions."""
    steps = family.reference_solution(inst)
    actions = " → ".join(s["action"] + (f" ({s['params']['lang']})" if "lang" in s.get("params", {}) else "")
                         for s in steps)
    gold = render_answer(inst.answer_type, inst.answer)
    lines = [(f"`{inst.id}` from `medagentgym build --families {inst.family} --size tiny --seed 0`; category "
             f"`{inst.category}`, answer type `{inst.answer_type}`."), "",
             "**Question** (what the agent is shown, with the context below)", "", fence(inst.question), ""]
    if inst.context:
        lines += ["**Context**", "", fence(excerpt(inst.context)), ""]
    if inst.data:
        mounts = ", ".join(f"`/data/{name}`" for name in sorted(inst.data))
        lines += [f"**Data** mounted read-only in the sandbox: {mounts}.", ""]
    if inst.solution and gold == inst.solution:
        lines += ["**Gold answer**: the reference program itself (the grader runs the submitted program).", ""]
    else:
        lines += ["**Gold answer** (never shown to the agent)", "", fence(excerpt(gold, 600)), ""]
    if inst.solution:
        lines += [f"**Reference solution** ({inst.solution_lang})", "",
                  fence(excerpt(inst.solution, 1500), inst.solution_lang or "text"), ""]
    lines += [f"**The oracle replays**: {actions}.", ""]
    return lines


def page(name: str, family: Any, floors: dict[str, Any], default: dict[str, Any]) -> str:
    """The Markdown page of one family."""
    cls = type(family)
    card = spec_card(cls)
    inst = pick_instance(family, card)
    suite = next((f"`--suite {s}` ({'in-distribution' if s == 'id' else 'held out of training'})"
                  for s, names in tasks.SUITES.items() if name in names), "no suite (a smoke-test family)")
    counts = {split: len(family.instances(split)) for split in ("train", "test")}
    lines = [f"# {name} (version {family.version})", "", card["summary"], "",
             (f"Suite: {suite}. Turn budget: {tasks.registry.max_turns(name)}. Tiny build (seed 0): "
             f"{counts['train']} train and {counts['test']} test instances in {len(family.categories)} categories. "
             f"Code: [`{cls.__module__.replace('.', '/')}.py`](../../{cls.__module__.replace('.', '/')}.py)."),
             "", "## What it tests", "", card.get("Description", ""), "", "## A real instance", "",
             *instance_section(family, inst), "## Permitted actions", "",
             "Permitted actions: " + ", ".join(f"`{a}`" for a in sorted(family.actions)) + ". The episode enforces "
             "them: any other action is an invalid action and costs a turn.", "", card.get("Allowed actions", ""),
             "", "## Grading", "", card.get("Grading", ""), "", WRONG_OR_INFRA, "", "## Episode end", "",
             card.get("Episode end", ""), "", *floor_section(name, family, floors, default)]
    lines += ["## Public benchmark", ""]
    if name in IMPORTERS:
        what, needs = IMPORT_INPUTS[name]
        lines += [f"Import the public task file ({what}) as a built family; it needs {needs}:", "",
                  fence(f".venv/bin/medagentgym import --family {name} --from FILE "
                        f"{IMPORT_FLAGS[name] + ' ' if name in IMPORT_FLAGS else ''}--out artifacts/imported --check",
                        "bash"),
                  "", "Then `--tasks-root artifacts/imported` in `medagentgym rollout`, `medagentgym eval` and recipes.", ""]
        if name in ("mimic_iii", "eicu", "treqs", "ehr_seqsql"):
            harness = (" (what MedAgentGym's harness shows for this family)" if name in ("mimic_iii", "eicu") else "")
            lines += [QUESTION_FIELD_NOTE.format(harness=harness), ""]
    else:
        lines += ["None: this family has no public counterpart to import.", ""]
    if card.get("Version history"):
        lines += ["## Version history", "", version_list(card["Version history"]), ""]
    return "\n".join(lines)


def index(rows: list[tuple[str, Any, dict[str, Any]]], default: dict[str, Any]) -> str:
    """``docs/families/README.md``: one row per family."""
    lines = ["# Task families", "", ("One page per family: what it tests, one real instance from a tiny build, how "
             "it is graded, its constant-answer floor and how to import the public benchmark. Generated by "
             "`scripts/make_family_pages.py` (part of `make docs`); `tests/docs/test_family_pages.py` checks them "
             "against the code."), "",
             ("| family | version | suite | what it tests | floor (tiny) | floor (default; date on its page)"
              " | per-template floor (default) / bound |"),
             "|---|---:|---|---|---:|---:|---:|"]
    for name, family, floor in rows:
        suite = next((s for s, names in tasks.SUITES.items() if name in names), "-")
        row = default.get("families", {}).get(name) or {}
        current = row.get("version") == family.version
        dflt = f"{row['floor']:.1%}" if current else "-"
        tmpl = row.get("template") if current else None
        per = f"{tmpl['floor']:.1%} / {tmpl['bound']:.1%}" if tmpl else "-"
        lines.append(f"| [{name}]({name}.md) | {family.version} | {suite} | {spec_card(type(family))['summary']} | "
                     f"{floor['floor']:.1%} | {dflt} | {per} |")
    return "\n".join(lines) + "\n"


def measure_default(root: Path | None, names: list[str] | None = None,
                    previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Default-size floors of ``names`` (default: every family), building them into a temp dir unless ``root``
    holds a build; the other families keep their rows from ``previous`` (an earlier floors file)."""
    names = names or tasks.names()
    with tempfile.TemporaryDirectory(prefix="family-floors-") as tmp:
        if root is None:
            root = Path(tmp)
            tasks.registry.build_families(names, root, size="default", seed=0, jobs=os.cpu_count() or 1)
        out = dict((previous or {}).get("families", {})) if set(names) != set(tasks.names()) else {}
        for name, row in out.items():  # rows kept from an earlier measurement keep that measurement's date
            out[name] = {"measured": (previous or {}).get("measured"), **row}
        for name in names:
            family = tasks.make(name, root=root)
            out[name] = {"version": family.version, "measured": date.today().isoformat(),
                         **constant_floor(family, family.instances("test")),
                         "template": template_floor(family, family.instances("train"), family.instances("test"))}
            public = public_floor_record(name)
            if public:  # the public files' grain and train sizes (issue 34): like for like with their figure
                out[name]["template_matched"] = matched_template_floor(
                    family, family.instances("train"), family.instances("test"), public["train_per_template"])
    return {"measured": date.today().isoformat(), "size": "default", "seed": 0, "split": "test",
            "families": dict(sorted(out.items()))}


def generate(root: Path, out: Path, default: dict[str, Any], only: list[str] | None = None) -> list[Path]:
    """Write every family's page and the index from the tiny build at ``root`` (``only``: just these families'
    pages, no index: a family of another package); returns the paths written."""
    rows, written = [], []
    for name in only or tasks.names():
        family = tasks.make(name, root=root)
        floor = constant_floor(family, family.instances("test"))
        per_template = template_floor(family, family.instances("train"), family.instances("test"))
        write_bytes_atomic(out / f"{name}.md", page(name, family, {name: floor, f"{name}/template": per_template},
                                                    default).encode("utf-8"))
        rows.append((name, family, floor))
        written.append(out / f"{name}.md")
    if only:
        return written
    write_bytes_atomic(out / "README.md", index(rows, default).encode("utf-8"))
    return written + [out / "README.md"]


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks-root", type=Path, default=None,
                   help="an existing tiny build (seed 0) of every family; default: build one in a temp dir")
    p.add_argument("--out", type=Path, default=OUT, help=f"folder for the pages; default {OUT}")
    p.add_argument("--measure-default", action="store_true",
                   help=f"build every family at default size (minutes) and rewrite <out>/{FLOORS}")
    p.add_argument("--default-root", type=Path, default=None,
                   help="with --measure-default: an existing default-size build (seed 0) to measure instead")
    p.add_argument("--families", nargs="+", choices=tasks.names(), default=None,
                   help="with --measure-default: measure only these (a new or changed family); the others keep "
                        f"their rows in <out>/{FLOORS}")
    p.add_argument("--only", nargs="+", choices=tasks.names(), default=None, metavar="FAMILY",
                   help="write only these families' pages (no index), e.g. a family your own package registers")
    args = p.parse_args(argv)
    if args.families and not args.measure_default:
        p.error("--families goes with --measure-default")
    try:
        if args.measure_default:
            previous = (json.loads((args.out / FLOORS).read_text(encoding="utf-8"))
                        if (args.out / FLOORS).is_file() else None)
            measured = json.dumps(measure_default(args.default_root, args.families, previous), indent=1) + "\n"
            write_bytes_atomic(args.out / FLOORS, measured.encode("utf-8"))
        floors_file = args.out / FLOORS
        default = json.loads(floors_file.read_text(encoding="utf-8")) if floors_file.is_file() else {}
        with tempfile.TemporaryDirectory(prefix="family-pages-") as tmp:
            root = args.tasks_root
            if root is None:
                root = Path(tmp)
                tasks.registry.build_families(args.only or tasks.names(), root, size="tiny", seed=0,
                                              jobs=os.cpu_count() or 1)
            written = generate(root, args.out, default, args.only)
    except KeyboardInterrupt:
        print("\ninterrupted: pages written so far are complete, the others unchanged; rerun the same command",
              file=sys.stderr)
        return 130
    except (tasks.TaskError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} pages into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
