"""ehrcon family: rendered notes, recorded injections confirmed by the reference check, balanced strict booleans."""

from __future__ import annotations

import csv
import sqlite3

import pytest

from medagentgym import tasks
from medagentgym.tasks.ehr_synth.notes import KINDS, SHORTHAND, check_sql
from medagentgym.tasks.ehrcon import DB_FILE, NOTES_FILE, EHRCon

NAME = "ehrcon"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """check_family on the build cache's copy in ``root`` (tests/_build_cache.py, built=True). The same-seed rebuild
    and its file-by-file comparison is make test-slow's (test_registry.py's registry-wide run): rebuild=False."""
    from _build_cache import tasks_root

    tasks.register(NAME, entry_point="medagentgym.tasks.ehrcon:EHRCon", max_turns=15, replace=True)
    root = tasks_root([NAME], tmp_path_factory.mktemp("ehrcon_root"))
    report = tasks.check_family(NAME, size="tiny", seed=0, root=root, built=True, rebuild=False)
    return report, EHRCon(root=root / NAME)


def test_contract_audits_pass_at_the_public_label_balance(built):
    # The public EHRCon files are ~30 % inconsistent (28.8 % train, 31.5 % test); v2 was 50/50. Each entity table
    # holds the same share, so the table an entity's name reveals never pays more than the base rate.
    from medagentgym.tasks.floors import constant_floor, template_floor

    report, fam = built
    for split in ("train", "test"):
        items = fam.instances(split)
        assert abs(sum(i.answer for i in items) / len(items) - 0.30) <= 0.02, split
        for table in KINDS:
            mine = [i for i in items if i.metadata["table"] == table]
            assert mine and abs(sum(i.answer for i in mine) / len(mine) - 0.30) <= 0.06, (split, table)
        base = sum(not i.answer for i in items) / len(items)
        assert report[split]["oracle"] == 1.0 and report[split]["base_rate"] == pytest.approx(base)
        assert report[split]["empty"] == report[split]["traceback"] == report[split]["shotgun"] == 0
    test, train = fam.instances("test"), fam.instances("train")
    floor = constant_floor(fam, test)
    assert floor["constant"] == "false" and floor["floor"] <= floor["bound"] == pytest.approx(0.71)
    per_table = template_floor(fam, train, test)
    assert per_table["templates"] == 5 and per_table["floor"] <= per_table["bound"] and not per_table["over"]


def test_notes_and_questions_use_clinical_shorthand(built):
    _report, fam = built
    with open(fam.root / NOTES_FILE, newline="", encoding="utf-8") as fh:
        notes = list(csv.DictReader(fh))
    text_of: dict[str, str] = {}
    for row in notes:
        text_of[row["HADM_ID"]] = text_of.get(row["HADM_ID"], "") + "\n" + row["TEXT"]
    items = fam.instances("train") + fam.instances("test")
    short = [i for i in items if i.metadata["surface"] != i.metadata["entity"]]
    assert len(short) >= 0.1 * len(items)
    for inst in short:
        meta = inst.metadata
        assert meta["surface"] in SHORTHAND[meta["entity"]] and f"medical entity '{meta['surface']}'" in inst.question
        assert meta["surface"] in text_of[str(meta["hadm_id"])]
    by_admission: dict[int, list[str]] = {}
    for inst in items:
        by_admission.setdefault(inst.metadata["hadm_id"], []).append(inst.metadata["surface"].lower())
    assert all(len(v) == len(set(v)) for v in by_admission.values())  # one entity per surface form


def test_labels_match_the_executed_reference_check_and_the_recorded_kind(built):
    _report, fam = built
    con = sqlite3.connect(f"file:{fam.root / DB_FILE}?mode=ro", uri=True)
    try:
        for inst in fam.instances("train") + fam.instances("test"):
            meta = inst.metadata
            assert inst.solution == check_sql(meta["hadm_id"], meta["table"], meta["claim"])
            (label,) = con.execute(inst.solution).fetchone()
            assert (label == "true") == inst.answer == (meta["kind"] != "none"), inst.id
            assert inst.category == f"{meta['table']}.{meta['kind']}"
    finally:
        con.close()
    assert len(fam.categories) >= 10 and len(fam.categories) == sum(len(k) for k in KINDS.values())


def test_pairs_are_unique_and_admissions_do_not_cross_splits(built):
    _report, fam = built
    pairs = {s: [(i.metadata["hadm_id"], i.metadata["entity"]) for i in fam.instances(s)] for s in ("train", "test")}
    everything = pairs["train"] + pairs["test"]
    assert len(everything) == len(set(everything))
    assert not {h for h, _ in pairs["train"]} & {h for h, _ in pairs["test"]}


def test_notes_state_each_claim_of_its_admission(built):
    _report, fam = built
    with open(fam.root / NOTES_FILE, newline="", encoding="utf-8") as fh:
        notes = list(csv.DictReader(fh))
    assert list(notes[0]) == ["ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "STORETIME", "CATEGORY",
                              "DESCRIPTION", "CGID", "ISERROR", "TEXT", "ADMITTIME"]
    text_of: dict[str, str] = {}
    for row in notes:
        text_of[row["HADM_ID"]] = text_of.get(row["HADM_ID"], "") + "\n" + row["TEXT"]
    for inst in fam.instances("test"):
        text = text_of[str(inst.metadata["hadm_id"])]
        for key, value in inst.metadata["claim"].items():
            shown = inst.metadata["surface"] if key == "entity" else value  # the entity as the note writes it
            assert str(shown) in text, (inst.id, key, shown)
        assert inst.data == {DB_FILE: DB_FILE, NOTES_FILE: NOTES_FILE}


def test_both_words_and_hedges_are_wrong(built):
    _report, fam = built
    inst = fam.instances("test")[0]
    gold = "true" if inst.answer else "false"
    assert fam.grade(inst, gold).correct
    for exploit in ("true\nfalse", "false true", "print('true'); print('false')", "maybe", ""):
        assert not fam.grade(inst, exploit).correct, exploit


def test_counts_and_bad_size():
    assert EHRCon().counts("default")["instances"] >= 5000
    with pytest.raises(tasks.TaskError, match="use 'tiny' or 'default'"):
        EHRCon().counts("medium")
