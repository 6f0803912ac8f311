"""The vocabulary the synthetic hospital draws from: the hand-made core plus the public benchmarks' values.

:func:`merged` extends the core tables of ``vocab_items`` / ``vocab_icd`` (realistic distributions, MIMIC's raw
spelling) with every value the public EHRSQL / MIMICSQL questions compare against (``public_vocab``), in the
same tuple shapes, so ``hospital`` and ``eicu_view`` need no other source:

* ICD-9 codes named by the questions join the dictionaries with their CMS v32 titles (a core code a question
  names takes the CMS titles, so the question's title finds it);
* each added raw item names its counterparts in every view: a MIMIC drug its eICU drug name, dosage and route; a
  lab its eICU lab name; an input/output item its eICU cell label and path group; a specimen its culture site;
  a diagnosis / procedure code its eICU ``diagnosisstring`` / ``treatmentstring`` path (public eICU names are
  given to the codes whose long title shares most words with them, one name per code);
* lab fluids and categories follow the label's words (``csf`` -> cerebrospinal fluid ...), and every fluid,
  category, route and drug type the questions use is carried by at least one item;
* admission categories (``TRSF WITHIN THIS FACILITY``, ``DISCH-TRAN TO PSYCH HOSP``, ethnicities, religions ...)
  join their weighted lists.

Added entries get modest weights, so the core keeps shaping the distributions. Everything here is deterministic
(sorted inputs, no random draws).

Example:
    >>> V = merged()
    >>> any(lab[1].lower() == "24 hr creatinine" for lab in V.labs)
    True
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from itertools import cycle

from medagentgym.tasks.ehr_synth import vocab_icd as icd
from medagentgym.tasks.ehr_synth import vocab_items as v
from medagentgym.tasks.ehr_synth.public_vocab import load

_NEW_LAB_RATE = 0.06
_NEW_DRUG_WEIGHT = 2
_NEW_IO_WEIGHT = 2
_NEW_CODE_WEIGHT = 2
_FLUIDS = (("csf", "Cerebrospinal Fluid (CSF)"), ("ascites", "Ascites"), ("pleural", "Pleural"),
           ("joint", "Joint Fluid"), ("body fluid", "Other Body Fluid"), ("urine", "Urine"))
_GAS_WORDS = ("po2", "pco2", "ph", "base excess", "lactate", "oxygen", "o2", "gradient", "peep", "tidal", "ventilat",
              "intubat", "fio2", "temperature", "free calcium", "required")
_HEME_WORDS = ("cell", "count", "rbc", "wbc", "hemat", "hemoglobin", "platelet", "mcv", "mch", "ptt", "inr", "neutro",
               "lymph", "mono", "eos", "baso", "fibrin", "smear", "rdw", "anisocy", "poikilo", "macro", "micro",
               "bands", "blasts", "atypical", "d-dimer", "sed rate", "reticulocyte")
_DOSE = re.compile(r"(\d+)\s*(mg|mcg|g|gm|ml|meq|unit|units)\b")
_PATH_ORGANS = ("cardiovascular", "pulmonary", "renal", "neurologic", "gastrointestinal", "endocrine", "hematology",
                "infectious diseases", "toxicology", "surgery", "oncology", "general")


@dataclass(frozen=True)
class Vocab:
    """Merged vocabulary tables (tuple shapes as in ``vocab_items`` / ``vocab_icd``)."""

    labs: tuple[tuple, ...]
    drugs: tuple[tuple, ...]
    input_items: tuple[tuple, ...]
    output_items: tuple[tuple, ...]
    specimens: tuple[tuple, ...]
    diagnoses: tuple[tuple[str, str, str, int], ...]
    procedures: tuple[tuple[str, str, str, int], ...]
    dx_paths: dict[str, str]
    px_paths: dict[str, str]
    admission_locations: tuple[tuple, ...]
    discharge_locations: tuple[tuple, ...]
    insurance: tuple[tuple, ...]
    languages: tuple[tuple, ...]
    religions: tuple[tuple, ...]
    marital: tuple[tuple, ...]
    ethnicities: tuple[tuple, ...]
    admit_diagnoses: tuple[str, ...]
    eicu_admit_source: dict[str, str]


def _new(values, known) -> list[str]:
    """Values (sorted, de-duplicated case-insensitively) not already in ``known`` (compared lower-case)."""
    seen = {k.strip().lower() for k in known if k}
    out = []
    for value in sorted(values):
        key = value.strip().lower()
        if key and key not in seen:
            seen.add(key)
            out.append(value)
    return out


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def _fluid(label: str) -> str:
    low = label.lower()
    return next((fluid for word, fluid in _FLUIDS if word in low), "Blood")


def _category(label: str) -> str:
    low = label.lower()
    if any(re.search(rf"\b{re.escape(w)}", low) for w in _GAS_WORDS):
        return "Blood Gas"
    return "Hematology" if any(w in low for w in _HEME_WORDS) else "Chemistry"


def _free_ids(start: int, used: set[int]):
    k = start
    while True:
        if k not in used:
            used.add(k)
            yield k
        k += 1


def _labs(pv) -> tuple[tuple, ...]:
    labels = _new(set(pv.values("mimic_iii", "lab")) | set(pv.values("mimicsql", "lab_label")), [lab[1] for lab in v.LABS])
    eicu_names = _new(pv.values("eicu", "lab"), [lab[11] for lab in v.LABS]) or [lab[11] for lab in v.LABS]
    used = {lab[0] for lab in v.LABS}
    wanted_ids = iter([int(i) for i in pv.values("mimicsql", "lab_itemid") if i.isdigit() and int(i) not in used])
    fresh = _free_ids(52000, used)
    fluids = {label: _fluid(label) for label in labels}
    missing = [f for f in pv.values("mimicsql", "lab_fluid") if f not in {x.lower() for x in fluids.values()}]
    # a fluid no label implies still needs an item (questions filter on it): the first blood labels take them
    for label, fluid in zip([lb for lb, f in fluids.items() if f == "Blood"], missing):
        fluids[label] = fluid.title().replace("(Csf)", "(CSF)")
    added, eicu = [], cycle(eicu_names)
    for label in labels:
        item = next(wanted_ids, None) or next(fresh)
        used.add(item)
        unit = "%" if "%" in label or "percent" in label.lower() or "saturation" in label.lower() else "mg/dL"
        added.append((item, label, fluids[label], _category(label), "", unit, 40.0, 15.0, 0.5, 300.0, 1, next(eicu),
                      _NEW_LAB_RATE))
    # eICU lab names not reached by the cycle above (more eICU names than new labels) ride on core labs' rows
    return tuple(v.LABS) + tuple(added)


def _drugs(pv) -> tuple[tuple, ...]:
    core_names = [d[0] for d in v.DRUGS] + [x for vs in v.DRUG_CASE_VARIANTS.values() for x in vs]
    names = _new(set(pv.values("mimic_iii", "drug")) | set(pv.values("mimicsql", "drug")), core_names)
    eicu_names = _new(pv.values("eicu", "drug"), [d[7] for d in v.DRUGS]) or [d[7] for d in v.DRUGS]
    routes = sorted({r.upper() for r in pv.values("mimic_iii", "route")} | {r.upper() for r in pv.values("mimicsql", "route")})
    routes = routes or ["PO"]
    eicu_routes = list(pv.values("eicu", "route")) or ["po"]
    codes = iter(sorted({c.upper() for c in pv.values("mimicsql", "formulary_drug_cd")} - {d[2] for d in v.DRUGS}))
    types = [t.upper() for t in pv.values("mimicsql", "drug_type")] or ["MAIN"]
    added = []
    route_cycle, eicu_cycle, eroute_cycle = cycle(routes), cycle(eicu_names), cycle(eicu_routes)
    for k, name in enumerate(names):
        dose = _DOSE.search(name.lower())
        amount, unit = (dose.group(1), dose.group(2)) if dose else (("1", "2", "5", "10", "20", "40", "100")[k % 7], "mg")
        code = next(codes, None) or f"{re.sub(r'[^A-Z]', '', name.upper())[:4]}{k}"
        dtype = types[k % len(types)] if k < 3 * len(types) else "MAIN"
        added.append((name, dtype, code, amount, unit, next(route_cycle), _NEW_DRUG_WEIGHT, next(eicu_cycle),
                      f"{amount} {unit}", next(eroute_cycle)))
    return tuple(v.DRUGS) + tuple(added)


def _io(pv, core: tuple[tuple, ...], mimic_kind: str, eicu_kinds: tuple[str, ...], start: int, output: bool):
    labels = _new(pv.values("mimic_iii", mimic_kind), [it[1] for it in core])
    eicu_labels = []
    for kind in eicu_kinds:
        eicu_labels += [(name, kind) for name in _new(pv.values("eicu", kind), [it[5] for it in core] + [n for n, _k in eicu_labels])]
    used = {it[0] for it in core}
    fresh = _free_ids(start, used)
    n = max(len(labels), len(eicu_labels))
    added = []
    for k in range(n):
        label = labels[k] if k < len(labels) else f"{eicu_labels[k][0]}"
        eicu_label, kind = eicu_labels[k % len(eicu_labels)] if eicu_labels else (label.lower(), "intake")
        mean = 60.0 if not output else 120.0
        if output:
            added.append((next(fresh), label, mean, mean * 0.6, _NEW_IO_WEIGHT, eicu_label))
        else:
            group = "medication input" if kind == "input" else "other intake"
            added.append((next(fresh), label, mean, mean * 0.6, _NEW_IO_WEIGHT, eicu_label, group))
    return tuple(core) + tuple(added)


def _specimens(pv) -> tuple[tuple, ...]:
    specs = _new(pv.values("mimic_iii", "specimen"), [s[0] for s in v.SPECIMENS])
    sites = _new(pv.values("eicu", "culture"), [s[2] for s in v.SPECIMENS]) or [s[2] for s in v.SPECIMENS]
    site = cycle(sites)
    added = [(s.upper(), 2, next(site)) for s in specs]
    added += [(f"{s.upper()} (SITE)", 1, s) for s in sites[len(specs):]]
    return tuple(v.SPECIMENS) + tuple(added)


def _codes(pv, kind: str, core: tuple[tuple, ...]) -> tuple[tuple[str, str, str, int], ...]:
    cms = {e.code: e for e in pv.icd_entries(kind)}
    seen: dict[str, tuple] = {}
    for code, short, long_, weight in core:
        if code not in seen:
            e = cms.get(code)
            seen[code] = (code, e.short_title, e.long_title, weight) if e else (code, short, long_, weight)
    for code, e in cms.items():
        seen.setdefault(code, (code, e.short_title, e.long_title, _NEW_CODE_WEIGHT))
    return tuple(seen.values())


def _paths(names: list[str], codes: tuple[tuple, ...], taken: dict[str, str]) -> dict[str, str]:
    """eICU paths: each public name goes to the free code whose long title shares most words with it."""
    paths = dict(taken)
    produced = {" - ".join(p.split("|")[2:4]) for p in taken.values()}
    free = [(c[0], _words(c[1] + " " + c[2])) for c in codes if c[0] not in paths]
    for k, name in enumerate(n for n in names if n not in produced):
        if not free:
            break
        words = _words(name)
        best = max(range(len(free)), key=lambda i: (len(words & free[i][1]), -i))
        code, _w = free.pop(best)
        organ = _PATH_ORGANS[k % len(_PATH_ORGANS)]
        paths[code] = f"{organ}|public vocabulary|" + name.replace(" - ", "|", 1)
    return paths


def _categorical(core: tuple[tuple, ...], public: tuple[str, ...], weight: int = 1) -> tuple[tuple, ...]:
    return tuple(core) + tuple((value.upper(), weight) for value in _new(public, [c[0] for c in core if c[0]]))


@functools.lru_cache(maxsize=1)
def merged() -> Vocab:
    """The merged vocabulary (cached; see the module docstring)."""
    pv = load()
    diagnoses = _codes(pv, "dx", tuple(icd.DIAGNOSES))
    procedures = _codes(pv, "px", tuple(icd.PROCEDURES))
    treatment_names = [n for n in pv.values("eicu", "treatment")
                       if n not in {" - ".join(p.split("|")[2:4]) for p in v.DRUG_TREATMENTS.values()}]
    sources = dict(v.EICU_ADMIT_SOURCE)
    sources["TRSF WITHIN THIS FACILITY"] = "Operating Room"
    mimicsql = {k: pv.values("mimicsql", k) for k in ("admission_location", "discharge_location", "insurance",
                                                       "language", "religion", "marital_status", "ethnicity")}
    admit_locations = set(mimicsql["admission_location"]) | set(pv.values("mimic_iii", "admission_location"))
    return Vocab(
        labs=_labs(pv), drugs=_drugs(pv),
        input_items=_io(pv, v.INPUT_ITEMS, "input_item", ("intake", "input"), 31000, output=False),
        output_items=_io(pv, v.OUTPUT_ITEMS, "output_item", ("output",), 41000, output=True),
        specimens=_specimens(pv), diagnoses=diagnoses, procedures=procedures,
        dx_paths=_paths(list(pv.values("eicu", "diagnosis")), diagnoses, v.DX_PATHS),
        px_paths=_paths(treatment_names, procedures, v.PX_PATHS),
        admission_locations=_categorical(v.ADMISSION_LOCATIONS, tuple(admit_locations), 2),
        discharge_locations=_categorical(v.DISCHARGE_LOCATIONS, mimicsql["discharge_location"], 2),
        insurance=_categorical(v.INSURANCE, mimicsql["insurance"]),
        languages=_categorical(v.LANGUAGES, mimicsql["language"]),
        religions=_categorical(v.RELIGIONS, mimicsql["religion"]),
        marital=_categorical(v.MARITAL, mimicsql["marital_status"]),
        ethnicities=_categorical(v.ETHNICITIES, mimicsql["ethnicity"]),
        admit_diagnoses=tuple(v.ADMIT_DIAGNOSES) + tuple(
            d.upper() for d in _new(pv.values("mimicsql", "diagnosis"), v.ADMIT_DIAGNOSES)),
        eicu_admit_source=sources,
    )
