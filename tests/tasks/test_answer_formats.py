"""Public answer formats accepted by the default graders, and no answer that fits two kinds of gold.

Issue 34: MedAgentGym's agents answer a single value as a one-element list (``['oral']``, ``['1']``), and one value
per line may contain a comma. Issue 31: ``No value.`` / ``no results`` was graded right on nothing-found golds AND
on yes/no "no" golds, so one constant earned both; the floor check tried ``none`` and ``no`` apart and missed it.
Attacks that must stay wrong: hedges (several candidate values), type confusion, several values for one gold.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from medagentgym.tasks.floors import FLOOR_BOUND, answer_tokens, constant_floor, template_floor
from medagentgym.tasks.graders import NOTHING_TOKENS, grade


@pytest.mark.parametrize("answer_type,gold,submission", [
    ("text", "oral", "['oral']"), ("text", "oral", '["oral"]'), ("text", "oral", "[('oral',)]"),
    ("text", "oral", ["oral"]), ("integer", 1, "['1']"), ("integer", 1, "[1]"), ("number", 2.5, "[2.5]"),
    ("number", 2.5, "['2.5']"), ("date", "2101-03-04", "['2101-03-04']"),
    ("datetime", "2101-03-04 10:00:00", "['2101-03-04 10:00:00']"), ("boolean", True, "['yes']"),
    ("text", "hypertension, unspecified", "['hypertension, unspecified']"), ("text", None, "[None]"),
])
def test_a_one_element_list_answers_a_single_value_gold_by_default(answer_type, gold, submission):
    verdict = grade(answer_type, gold, submission)
    assert verdict.correct, verdict.reason


@pytest.mark.parametrize("answer_type,gold,submission", [
    ("text", "oral", "['oral', 'iv']"),          # hedge: two candidate values
    ("text", "oral", "[['oral', 'iv']]"),        # one row of two values
    ("text", "oral", "[['oral'], ['iv']]"),      # two rows
    ("integer", 1, "['1', '2']"), ("integer", 1, "[1, 2]"), ("integer", 1, "[[1, 2]]"),
    ("number", 1.0, "[true]"), ("integer", 1, "[True]"),   # type confusion: a bool is not the number 1
    ("integer", 0, "[false]"), ("text", "oral", "[]"), ("integer", 0, "[]"), ("integer", 1, "[[]]"),
    ("text", "oral", "['[\"oral\", \"iv\"]']"),   # a list inside the one string
    ("text", "oral", "[None]"), ("integer", 3, "[None]"), ("text", None, "['oral']"),
    ("boolean", True, "['yes', 'no']"), ("date", "2101-03-04", "['2101-03-04', '2101-03-05']"),
])
def test_hedges_type_confusion_and_several_values_stay_wrong(answer_type, gold, submission):
    verdict = grade(answer_type, gold, submission)
    assert not verdict.correct, verdict.reason


def test_one_value_per_line_keeps_a_value_with_a_comma():
    gold = ["hypertension, unspecified", "anemia"]
    assert grade("set", gold, "hypertension, unspecified\nanemia").correct
    assert grade("set", gold, "anemia\nhypertension, unspecified\n").correct
    assert grade("list", gold, "hypertension, unspecified,\nanemia").correct
    assert grade("result", gold, "hypertension, unspecified\nanemia").correct
    assert not grade("set", gold, "hypertension\nunspecified\nanemia").correct
    # without a comma in the gold, commas still separate values, over lines too
    assert grade("set", ["a", "b", "c"], "a, b\nc").correct
    assert not grade("set", ["a", "b"], "a, b\nc").correct


@pytest.mark.parametrize("token", NOTHING_TOKENS)
def test_a_nothing_found_answer_is_not_a_no(token):
    """ATTACK (issue 31): 'No value.' answered nothing-found golds AND yes/no 'no' golds."""
    assert grade("integer", None, token).correct, token
    assert not grade("boolean", False, token, digits=False).correct, token
    assert not grade("boolean", False, token).correct, token
    assert not grade("result", ["0"], token, yes_no=True).correct, token


@pytest.mark.parametrize("submission", ["No value., 0", "no, 0", "0 (no)", "None, no 0", "false 0", "no. 0 found"])
def test_a_number_with_a_no_is_not_a_no(submission):
    """ATTACK (found by the floor check on the tiny mimic_iii build, 10.2 % of train): 'No value., 0' was "no" to
    the boolean grader and 0 to the integer grader, answering every "no" gold and every count of zero."""
    assert not grade("boolean", False, submission, digits=False).correct
    assert not grade("boolean", False, submission).correct


def test_yes_no_and_nothing_found_still_take_their_own_answers():
    assert grade("boolean", False, "no", digits=False).correct
    assert grade("boolean", False, "No, there was none.", digits=False).correct
    assert grade("result", ["0"], "no", yes_no=True).correct
    assert grade("result", ["0"], "[0]", yes_no=True).correct
    assert not grade("integer", None, "no").correct
    assert not grade("text", None, "false").correct


class _Family:
    """A minimal graded family (the EHR SQL families' rule: yes/no without bare 1/0)."""

    name = "toy"

    def grade(self, inst, submission, ctx=None):
        options = {"digits": False} if inst.answer_type == "boolean" else {}
        return grade(inst.answer_type, inst.answer, submission, **options)


def _inst(k, answer_type, answer, category="t"):
    return SimpleNamespace(id=f"toy/{k}", answer_type=answer_type, answer=answer, category=category,
                           solution="", solution_lang="sql", metadata={})


def _mixed_split(n=100):
    """8 % nothing-found (None) golds and 8 % "no" golds among distinct counts: each kind alone stays under the
    10 % bound, the two together (what one 'No value.' earned before the fix) would be 16 %."""
    items = [_inst(k, "integer", None) for k in range(8)] + [_inst(8 + k, "boolean", False) for k in range(8)]
    items += [_inst(16 + k, "integer", 100 + k) for k in range(n - 16)]
    return items


def test_no_constant_earns_two_kinds_of_gold_and_the_floor_check_tries_them_together():
    """ATTACK (issue 31): before the fix 'No value.' earned 16 % here, and the floor check reported 8 %."""
    items = _mixed_split()
    family = _Family()
    for token in answer_tokens():
        earned = sum(family.grade(i, token).correct for i in items) / len(items)
        assert earned <= FLOOR_BOUND, (token, earned)
    floor = constant_floor(family, items)
    assert floor["floor"] == pytest.approx(0.08) and not floor["exceeds"], floor
    assert "No value." in answer_tokens() and "None, no" in answer_tokens()


def test_the_floor_check_reports_a_constant_that_fits_two_kinds():
    """The floor check finds a two-kind constant when a grader lets one through (here: a grader that reads
    'no results' as no, like the one before the fix)."""
    class Lenient(_Family):
        def grade(self, inst, submission, ctx=None):
            if inst.answer_type == "boolean" and str(submission).lower().startswith("no "):
                return grade("boolean", inst.answer, "no")
            return super().grade(inst, submission, ctx)

    floor = constant_floor(Lenient(), _mixed_split())
    assert floor["floor"] == pytest.approx(0.16) and floor["exceeds"], floor
    per_template = template_floor(Lenient(), _mixed_split(), _mixed_split())
    assert per_template["floor"] == pytest.approx(0.16), per_template


@pytest.mark.parametrize("name", ["mimic_iii", "eicu", "treqs", "ehr_seqsql"])
def test_every_scalar_gold_of_an_ehr_family_takes_the_public_one_element_list(all_families_tiny_root, name):
    """MedAgentGym's harness prints a result as a list: ``['oral']``, ``[1]``. The default grader of every EHR SQL
    family takes that for each single-value gold, and never a list holding a second value too."""
    from medagentgym import tasks
    from medagentgym.tasks.graders import render_answer

    fam = tasks.make(name, root=all_families_tiny_root)
    scalar = [i for i in fam.instances("test") if i.answer_type in ("number", "integer", "text", "date", "datetime")]
    assert scalar
    for inst in scalar:
        gold = render_answer(inst.answer_type, inst.answer)
        verdict = fam.grade(inst, str([gold]))
        assert verdict.correct, (inst.id, gold, verdict.reason)
        if inst.answer is not None:
            other = "2101-01-01 00:00:00" if inst.answer_type in ("date", "datetime") else "zz-other"
            assert not fam.grade(inst, str([gold, other])).correct, (inst.id, gold)


@pytest.mark.parametrize("answer_type,gold,submission", [
    ("number", 42, "['42', 'zz-other']"), ("number", 42, "[42, 'unknown']"), ("integer", 3, "[3, None]"),
    ("text", "oral", "['oral', None]"), ("date", "2101-03-04", "['2101-03-04', 'n/a']"),
    ("boolean", True, "['yes', 'maybe']"), ("text", None, "[None, 'oral']"), ("number", 42, "[(42, 'x')]"),
])
def test_a_list_of_several_values_never_answers_a_single_value_gold(answer_type, gold, submission):
    """Before, the number grader read '['42', 'zz-other']' as one number: a list of several values passed."""
    assert not grade(answer_type, gold, submission).correct


@pytest.mark.slow
def test_no_token_earns_more_than_the_bound_on_the_default_mimic_iii_build(tmp_path):
    """ATTACK (issue 31), at the size it was found: on the default mimic_iii build (seed 0) 'No value.' earned
    15.5 % (nothing-found golds and "no" golds together) while the floor check reported 8.0 %."""
    from medagentgym import tasks

    tasks.make("mimic_iii").build(tmp_path, size="default", seed=0)
    fam = tasks.make("mimic_iii", root=tmp_path)
    items = fam.instances("test")
    floor = constant_floor(fam, items)
    for token in answer_tokens():
        earned = sum(fam.grade(i, token).correct for i in items) / len(items)
        # the floor is rounded to 6 decimals: a token that IS the floor's constant earns up to 5e-7 more
        assert earned <= FLOOR_BOUND and earned <= floor["floor"] + 1e-6, (token, earned, floor)
    assert not floor["exceeds"], floor
