"""The public benchmarks' vocabularies, shipped as data: what EHRSQL / MIMICSQL questions compare against.

``medagentgym/tasks/data/ehr_vocab/public_values.json`` lists, per dataset and kind, the literal values the public gold SQL
compares a column with (drug names, lab labels, item labels, eICU diagnosis / treatment / intake-output names,
culture sites, routes, admission categories, ...); ``medagentgym/tasks/data/ehr_vocab/icd9_cms_v32.tsv`` holds the ICD-9-CM
codes those questions name (by code or by title) with their CMS v32 short and long titles (public-domain CMS
files). Both are harvested from the public question files by :func:`harvest` (question text and gold SQL only:
never answers, never database rows) and read by :func:`load`; the synthetic hospital draws from them so the
public questions find their values (``vocab_items`` / ``vocab_icd`` keep the hand-made core with realistic
distributions).

Regenerate (maintainers, with their own copies of the public files and the CMS v32 description files)::

    python -m medagentgym.tasks.ehr_synth.public_vocab --mimic-iii M.json ... --eicu E.json ... --mimicsql T.jsonl ... \\
        --cms-dir ICD_9_CM_v32_master_descriptions

Example:
    >>> vocab = load()
    >>> "newborn" in vocab.values("mimicsql", "admission_type")
    True
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from medagentgym.tasks.base import TaskError
from medagentgym.tasks.ehr_synth.public_sql import (
    LITERAL,
    add_file_arguments,
    files_from_arguments,
    gold_sql,
    load_records,
)

VOCAB_DIR = Path(__file__).resolve().parent.parent / "data" / "ehr_vocab"
VALUES_FILE = VOCAB_DIR / "public_values.json"
ICD_FILE = VOCAB_DIR / "icd9_cms_v32.tsv"

#: (dataset, table, column) -> vocabulary kind. d_items labels and eICU cell labels are split by the
#: ``linksto`` / ``cellpath`` condition of the same query (see :func:`_kinds`).
_KINDS: dict[tuple[str, str, str], str] = {
    ("mimic_iii", "prescriptions", "drug"): "drug", ("mimic_iii", "prescriptions", "route"): "route",
    ("mimic_iii", "d_labitems", "label"): "lab", ("mimic_iii", "microbiologyevents", "spec_type_desc"): "specimen",
    ("mimic_iii", "microbiologyevents", "org_name"): "organism",
    ("mimic_iii", "admissions", "admission_location"): "admission_location",
    ("mimic_iii", "d_icd_diagnoses", "short_title"): "dx_short", ("mimic_iii", "d_icd_procedures", "short_title"): "px_short",
    ("eicu", "medication", "drugname"): "drug", ("eicu", "medication", "routeadmin"): "route",
    ("eicu", "lab", "labname"): "lab", ("eicu", "diagnosis", "diagnosisname"): "diagnosis",
    ("eicu", "treatment", "treatmentname"): "treatment", ("eicu", "microlab", "culturesite"): "culture",
    ("eicu", "microlab", "organism"): "organism", ("eicu", "patient", "hospitaladmitsource"): "admit_source",
    ("eicu", "allergy", "allergyname"): "allergy",
}
_MIMICSQL_COLUMNS = {
    "demographic": ("admission_type", "admission_location", "discharge_location", "insurance", "ethnicity", "religion",
                    "language", "marital_status", "diagnosis"),
    "prescriptions": ("drug", "drug_type", "formulary_drug_cd", "route"),
    "lab": ("label", "itemid", "fluid", "category", "flag"),
    "diagnoses": ("icd9_code", "short_title", "long_title"),
    "procedures": ("icd9_code", "short_title", "long_title"),
}
_PREFIX = {"demographic": "", "prescriptions": "", "lab": "lab_", "diagnoses": "dx_", "procedures": "px_"}
_KINDS.update({("mimicsql", t, c): _PREFIX[t] + c for t, cols in _MIMICSQL_COLUMNS.items() for c in cols})


@dataclass(frozen=True)
class IcdEntry:
    """One ICD-9-CM code with CMS v32 titles (``kind`` is ``dx`` or ``px``)."""

    kind: str
    code: str
    short_title: str
    long_title: str


@dataclass(frozen=True)
class PublicVocab:
    """The shipped vocabularies (see the module docstring)."""

    by_dataset: dict[str, dict[str, tuple[str, ...]]]
    icd: tuple[IcdEntry, ...]

    def values(self, dataset: str, kind: str) -> tuple[str, ...]:
        """Values of one kind (empty when the public questions never compare it)."""
        return self.by_dataset.get(dataset, {}).get(kind, ())

    def icd_entries(self, kind: str) -> list[IcdEntry]:
        """The ICD entries of ``dx`` or ``px``, in file order."""
        return [e for e in self.icd if e.kind == kind]


def _kinds(dataset: str, sql: str) -> Iterable[tuple[str, str]]:
    """(kind, value) pairs one gold query compares against."""
    for table, column, single, double in LITERAL.findall(sql):
        value = (single if single or not double else double).replace("''", "'").strip()
        if not value:
            continue
        if dataset == "mimic_iii" and (table, column) == ("d_items", "label"):
            tail = sql[sql.find(value) + len(value):][:80]
            link = re.search(r"d_items\.linksto\s*=\s*'(\w+)'", tail)
            if link and link.group(1) in ("inputevents_cv", "outputevents"):
                yield ("input_item" if link.group(1) == "inputevents_cv" else "output_item"), value
        elif dataset == "eicu" and (table, column) == ("intakeoutput", "celllabel"):
            at = sql.find(value)
            near = sql[at + len(value):at + len(value) + 80] + " " + sql[max(0, at - 80):at]
            path = re.search(r"cellpath\s+like\s+'%(\w+)%'", near)
            if path:
                yield path.group(1), value  # intake / input / output
        elif (dataset, table, column) in _KINDS:
            yield _KINDS[(dataset, table, column)], value


def _read_cms(cms_dir: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """``{"dx"|"px": {code: (short, long)}}`` from the CMS v32 description files."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for kind, suffix in (("dx", "DX"), ("px", "SG")):
        titles = []
        for length in ("SHORT", "LONG"):
            path = cms_dir / f"CMS32_DESC_{length}_{suffix}.txt"
            if not path.is_file():
                raise TaskError(f"{path}: missing; pass --cms-dir pointing at the CMS ICD-9-CM v32 description files")
            rows = {}
            for line in path.read_text(encoding="latin-1").splitlines():
                code, _, title = line.partition(" ")
                rows[code.strip()] = title.strip()
            titles.append(rows)
        out[kind] = {code: (short, titles[1].get(code, short)) for code, short in titles[0].items()}
    return out


def _icd_wanted(values: dict[str, dict[str, set[str]]], cms: dict[str, dict[str, tuple[str, str]]]) -> list[IcdEntry]:
    """CMS entries named by any public question: by short title, long title or code (MIMICSQL lower-cases codes and
    drops the leading zeros of procedure codes)."""
    picked: dict[tuple[str, str], IcdEntry] = {}
    for kind in ("dx", "px"):
        table = cms[kind]
        by_short = {s.lower(): c for c, (s, _l) in table.items()}
        by_long = {lt.lower(): c for c, (_s, lt) in table.items()}
        by_code = {c.lower(): c for c in table}
        by_code.update({c.lstrip("0"): c for c in table if kind == "px" and c.lstrip("0") not in by_code})
        wanted = set()
        for dataset in ("mimic_iii", "mimicsql"):
            wanted |= {by_short.get(v) for v in values.get(dataset, {}).get(f"{kind}_short", ())}
            wanted |= {by_short.get(v) for v in values.get(dataset, {}).get(f"{kind}_short_title", ())}
            wanted |= {by_long.get(v) for v in values.get(dataset, {}).get(f"{kind}_long_title", ())}
            wanted |= {by_code.get(v) for v in values.get(dataset, {}).get(f"{kind}_icd9_code", ())}
        for code in sorted(c for c in wanted if c):
            picked[(kind, code)] = IcdEntry(kind, code, *table[code])
    # EHRSQL compares a few procedure titles with D_ICD_DIAGNOSES and diagnosis titles with D_ICD_PROCEDURES (MIMIC's
    # dictionaries hold such rows): they join the dictionary asked, under their own code (a digit added when it is taken)
    for kind, other in (("dx", "px"), ("px", "dx")):
        by_short = {s.lower(): c for c, (s, _l) in cms[other].items()}
        known = {s.lower() for s, _l in cms[kind].values()}
        for title in sorted(values.get("mimic_iii", {}).get(f"{kind}_short", ())):
            code = by_short.get(title)
            if title in known or not code:
                continue
            free = next(c for c in (code, *(f"{code}{k}" for k in range(10))) if c not in cms[kind])
            picked.setdefault((kind, free), IcdEntry(kind, free, *cms[other][code]))
    return list(picked.values())


def harvest(files: dict[str, list[Path]], cms_dir: Path | None = None) -> tuple[dict, list[IcdEntry]]:
    """Collect the vocabularies of public question files.

    Args:
        files: dataset (``mimic_iii``, ``eicu``, ``mimicsql``) -> question files.
        cms_dir: Folder with ``CMS32_DESC_{SHORT,LONG}_{DX,SG}.txt``; without it no ICD entries are collected.

    Returns:
        (``{dataset: {kind: sorted values}}``, ICD entries).
    """
    values: dict[str, dict[str, set[str]]] = {}
    for dataset, paths in files.items():
        for path in paths:
            for rec in load_records(path):
                sql = gold_sql(rec, dataset)
                if sql:
                    for kind, value in _kinds(dataset, sql):
                        values.setdefault(dataset, {}).setdefault(kind, set()).add(value)
    icd = _icd_wanted(values, _read_cms(cms_dir)) if cms_dir else []
    return {d: {k: sorted(v) for k, v in sorted(kinds.items())} for d, kinds in sorted(values.items())}, icd


@functools.lru_cache(maxsize=1)
def load() -> PublicVocab:
    """The shipped vocabularies (empty when the data files are absent)."""
    by_dataset: dict[str, dict[str, tuple[str, ...]]] = {}
    if VALUES_FILE.is_file():
        doc = json.loads(VALUES_FILE.read_text(encoding="utf-8"))
        by_dataset = {d: {k: tuple(v) for k, v in kinds.items()} for d, kinds in doc.items() if not d.startswith("_")}
    icd: list[IcdEntry] = []
    if ICD_FILE.is_file():
        for line in ICD_FILE.read_text(encoding="utf-8").splitlines()[1:]:
            kind, code, short, long_ = line.split("\t")
            icd.append(IcdEntry(kind, code, short, long_))
    return PublicVocab(by_dataset, tuple(icd))


def main(argv: list[str] | None = None) -> int:
    """Harvest the public files into ``medagentgym/tasks/data/ehr_vocab/`` (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_file_arguments(ap)
    ap.add_argument("--cms-dir", type=Path, help="folder with the CMS ICD-9-CM v32 description files")
    ap.add_argument("--out", type=Path, default=VOCAB_DIR, help="output folder (default: the shipped one)")
    args = ap.parse_args(argv)
    files = files_from_arguments(args)
    try:
        values, icd = harvest(files, args.cms_dir)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"_source": "literal values compared in the gold SQL of the public EHRSQL (MIMIC-III, eICU) and "
                      "MIMICSQL question files; question text and SQL only, no answers, no database rows",
           **values}
    (args.out / VALUES_FILE.name).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    lines = ["kind\tcode\tshort_title\tlong_title"] + [f"{e.kind}\t{e.code}\t{e.short_title}\t{e.long_title}" for e in icd]
    (args.out / ICD_FILE.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {sum(len(v) for d in values.values() for v in d.values())} values, {len(icd)} ICD entries to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
