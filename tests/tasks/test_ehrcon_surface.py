"""No EHRCon label hidden in how a note is written (issue 34).

Before: falsified and absent statements printed random values with two decimals (``temp 50.19 deg. c``) while
faithful ones printed the database's own value, so "two decimals" predicted inconsistent (60 % vs 21 %, base
30 %). Now every number, unit and entity of a false statement is drawn from the database's own rows. The measure
(``notes.surface_association``): per surface feature (decimals, rounding, number length, unit, name length,
shorthand, statement length), the bucket (>= 5 % of statements) whose inconsistent share is farthest from the
base rate, in points.
"""

from __future__ import annotations

import sqlite3

import pytest

from medagentgym import tasks
from medagentgym.tasks.ehr_synth.notes import (
    ALIAS_OF,
    SHORTHAND,
    Vocab,
    abbreviated,
    resolve,
    surface_association,
)


def _statements(root, size, seed):
    tasks.make("ehrcon").build(root, size=size, seed=seed)
    fam = tasks.make("ehrcon", root=root)
    return [(i.metadata["table"], i.metadata["claim"], i.metadata["surface"], bool(i.answer))
            for split in ("train", "test") for i in fam.instances(split)]


def _share(items):
    return sum(abbreviated(claim["entity"], surface) for _, claim, surface, _ in items) / len(items)


def _assert_no_leak(items, points):
    """Every feature's worst bucket within ``points`` of the base rate, plus three binomial standard errors of
    that bucket (the tiny builds are small; the default build is held to 5 points by the slow test)."""
    found = surface_association(items)
    base = found["base"]
    for name, bucket in found["features"].items():
        n = bucket["share"] * len(items)
        noise = 300 * (base * (1 - base) / n) ** 0.5 if n else 0.0
        assert bucket["diff"] <= points + noise, (name, bucket, base, len(items))
    return found


def test_no_surface_feature_predicts_the_label_on_tiny_builds(tmp_path):
    """Four tiny builds pooled (~900 statements). Before the fix: the two-decimal bucket was 45 points off."""
    items = []
    for seed in range(4):
        items += _statements(tmp_path / f"s{seed}", "tiny", seed)
    assert len(items) > 600
    _assert_no_leak(items, 5.0)


def test_the_association_measure_sees_a_format_leak():
    """The measure itself: a feature that tracks the label (two decimals on every false statement) is caught."""
    items = [("lab", {"entity": "glucose", "value": "101", "unit": "mg/dl"}, "BG", False)] * 70
    items += [("lab", {"entity": "glucose", "value": "50.19", "unit": "mg/dl"}, "BG", True)] * 30
    found = surface_association(items)
    assert found["features"]["decimals"]["diff"] == pytest.approx(70.0) and found["worst"] >= 70.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_entities_are_named_by_abbreviations_at_the_public_share(tmp_path, seed):
    """The public notes name 82 % of their entities by abbreviations or brand names (BP, Hct, Tmax, Percocet).
    v4 named 59 % so on the default build; the tiny builds' four seeds pooled give 86 % now. One tiny build holds
    ~240 statements (sd ~2.3 points): each seed must reach 78 %, about 3.5 sd under the pooled share."""
    items = _statements(tmp_path, "tiny", seed)
    assert _share(items) >= 0.78, _share(items)
    assert {"furosemide", "acetaminophen", "hypertension nos", "venous cath nec", "rdw"} <= set(SHORTHAND)


def test_the_abbreviation_is_drawn_independently_of_the_label(tmp_path):
    """Aliases must not carry the label: the abbreviated share of consistent and inconsistent statements differ
    by no more than their noise (four tiny builds pooled, ~950 statements: 3 standard errors of the difference)."""
    items = []
    for seed in range(4):
        items += _statements(tmp_path / f"s{seed}", "tiny", seed)
    yes = [i for i in items if i[3]]
    no = [i for i in items if not i[3]]
    p = _share(items)
    se = (p * (1 - p) * (1 / len(yes) + 1 / len(no))) ** 0.5
    assert abs(_share(yes) - _share(no)) <= 3 * se, (_share(yes), _share(no), se)


def test_every_alias_in_a_build_resolves_to_its_database_item(tmp_path):
    """The oracle's side: every statement's name (label or short form) resolves to the entity the reference
    check queries, and that entity is a label of the build's database."""
    tasks.make("ehrcon").build(tmp_path, size="tiny", seed=1)
    fam = tasks.make("ehrcon", root=tmp_path)
    with sqlite3.connect(tmp_path / "ehrcon" / "EHRCon_combined.db") as con:
        labels = Vocab(con).labels
    items = fam.instances("train") + fam.instances("test")
    assert items and all(resolve(i.metadata["surface"], labels) == i.metadata["entity"] for i in items)
    assert all(i.metadata["entity"] in labels for i in items)
    assert any(i.metadata["surface"] != i.metadata["entity"] for i in items)


def test_every_short_form_resolves_to_its_label():
    """Every form of the lexicon names its own label (given a database that has the label and no label spelled
    like the form); a form spelled like another label resolves to that label, which is why notes never use it."""
    for entity, forms in SHORTHAND.items():
        for form in forms:
            labels = frozenset({entity})
            assert resolve(form, labels) == entity, (entity, form)
            assert ALIAS_OF[form.lower()] == entity
    assert resolve("NS", frozenset({"ns", "sodium chloride 0.9%"})) == "ns"
    assert resolve("Hct", frozenset({"glucose"})) is None  # the label is not in that database


@pytest.mark.slow
def test_no_surface_feature_predicts_the_label_on_the_default_build(tmp_path):
    """Acceptance (issue 34): on the default build (seed 0) no feature bucket is more than 5 points off."""
    items = _statements(tmp_path, "default", 0)
    found = surface_association(items)
    assert found["worst"] <= 5.0, found


def test_a_short_form_names_one_entity_only():
    """Two labels sharing a form ('Dilaudid' for two drug labels) would make the question's entity ambiguous."""
    owners: dict[str, set[str]] = {}
    for entity, forms in SHORTHAND.items():
        for form in forms:
            owners.setdefault(form.lower(), set()).add(entity)
    assert not {f: e for f, e in owners.items() if len(e) > 1}
