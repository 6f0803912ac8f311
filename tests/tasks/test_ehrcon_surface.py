"""No EHRCon label hidden in how a note is written (issue 34).

Before: falsified and absent statements printed random values with two decimals (``temp 50.19 deg. c``) while
faithful ones printed the database's own value, so "two decimals" predicted inconsistent (60 % vs 21 %, base
30 %). Now every number, unit and entity of a false statement is drawn from the database's own rows. The measure
(``notes.surface_association``): per surface feature (decimals, rounding, number length, unit, name length,
shorthand, statement length), the bucket (>= 5 % of statements) whose inconsistent share is farthest from the
base rate, in points.
"""

from __future__ import annotations

import pytest

from medagentgym import tasks
from medagentgym.tasks.ehr_synth.notes import SHORTHAND, surface_association


def _statements(root, size, seed):
    tasks.make("ehrcon").build(root, size=size, seed=seed)
    fam = tasks.make("ehrcon", root=root)
    return [(i.metadata["table"], i.metadata["claim"], i.metadata["surface"], bool(i.answer))
            for split in ("train", "test") for i in fam.instances(split)]


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


def test_entities_are_named_mostly_by_shorthand(tmp_path):
    """The public notes name 82 % of their entities by abbreviations or brand names (Hct, BP, Percocet)."""
    fam_items = _statements(tmp_path, "tiny", 0)
    short = sum(claim["entity"].lower() != surface.lower() for _, claim, surface, _ in fam_items) / len(fam_items)
    assert short >= 0.55, short
    assert {"furosemide", "acetaminophen", "hypertension nos", "venous cath nec"} <= set(SHORTHAND)


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
