"""ehrcon family: rendered notes, recorded injections confirmed by the reference check, balanced strict booleans."""

from __future__ import annotations

import csv
import sqlite3

import pytest

from medagentgym import tasks
from medagentgym.tasks.ehr_synth.notes import KINDS, check_sql
from medagentgym.tasks.ehrcon import DB_FILE, NOTES_FILE, EHRCon

NAME = "ehrcon"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """check_family builds twice (byte-identical check) and leaves the first build in ``root``."""
    tasks.register(NAME, entry_point="medagentgym.tasks.ehrcon:EHRCon", max_turns=15, replace=True)
    root = tmp_path_factory.mktemp("ehrcon_root")
    report = tasks.check_family(NAME, size="tiny", seed=0, root=root)
    return report, EHRCon(root=root / NAME)


def test_contract_audits_pass_with_exactly_balanced_labels(built):
    report, fam = built
    for split in ("train", "test"):
        items = fam.instances(split)
        assert sum(i.answer for i in items) * 2 == len(items) > 0
        for constant in ("true", "false", "yes", "no"):
            assert sum(fam.grade(i, constant).correct for i in items) * 2 == len(items)
        assert report[split]["oracle"] == 1.0 and report[split]["base_rate"] == 0.5
        assert report[split]["empty"] == report[split]["traceback"] == report[split]["shotgun"] == 0


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
        for value in inst.metadata["claim"].values():
            assert str(value) in text, (inst.id, value)
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
