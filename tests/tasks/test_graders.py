"""Strict graders: one answer, exact comparison, and the original harness's exploits rejected."""

from __future__ import annotations

import pytest

from medagentgym.tasks.base import GraderError
from medagentgym.tasks.graders import ANSWER_TYPES, grade, looks_like_error, render_answer

TRACEBACK = 'Traceback (most recent call last):\n  File "<cell-1>", line 3, in <module>\nNameError: name "x" is not defined'


@pytest.mark.parametrize("submission,ok", [
    ("42", True), ("The answer is 42.", True), ("42.00003", True), ("4.2e1", True), ("'42'", True),
    ("43", False), ("-42", False), ("41 42 43", False), ("42, 43", False), ("forty-two", False), ("", False),
    (None, False), (TRACEBACK, False), ("42 " + "x" * 400, False),
])
def test_number(submission, ok):
    verdict = grade("number", 42, submission)
    assert verdict.correct is ok, verdict.reason
    assert verdict.score == float(ok) and verdict.reason


def test_number_tolerances_and_thousands():
    assert grade("number", 1234.5, "1,234.5").correct
    assert grade("number", 4.37, "4.365", abs_tol=0.01, rel_tol=0).correct
    assert not grade("number", 4.37, "4.39", abs_tol=0.01, rel_tol=0).correct
    assert grade("number", 100, "101", rel_tol=0.02).correct
    assert grade("number", -3.5, "-3.5").correct
    assert grade("number", -3.5, "\u22123.5").correct  # typographic minus
    assert grade("number", 45, "45%").correct


def test_shotgun_reason_names_the_count():
    assert "shotgun: 3 numbers" in grade("number", 1, "1 2 3").reason


@pytest.mark.parametrize("submission,ok", [("7", True), ("7.0", True), ("7.5", False), ("8", False), ("7 8", False)])
def test_integer(submission, ok):
    assert grade("integer", 7, submission).correct is ok


@pytest.mark.parametrize("submission,gold,ok", [
    ("yes", True, True), ("True", True, True), ("1", True, True), ("Yes, the patient was.", True, True),
    ("no", False, True), ("false", False, True), ("0", False, True),
    ("no", True, False), ("true false", True, False), ("yes / no", False, False), ("maybe", True, False),
    ("", True, False), (TRACEBACK, False, False), ("1 0", True, False),
])
def test_boolean(submission, gold, ok):
    assert grade("boolean", gold, submission).correct is ok


@pytest.mark.parametrize("submission,ok", [
    ('["asthma", "anemia"]', True), ("['Anemia', 'asthma']", True), ("asthma, anemia", True),
    ("anemia\nasthma", True), ("(asthma, anemia)", True), ("[asthma, anemia]", True),
    ("asthma", False), ("asthma, anemia, copd", False), ("asthma, influenza", False), ("[]", False), ("", False),
])
def test_set(submission, ok):
    assert grade("set", ["asthma", "anemia"], submission).correct is ok


def test_set_numeric_tolerance_and_duplicates():
    assert grade("set", [1.0, 2.5], "[2.50001, 1]").correct
    assert grade("set", [1, 2], "1, 1, 2").correct  # a set ignores repeats
    assert not grade("set", [1, 2], "1, 2, 3").correct


@pytest.mark.parametrize("submission,ok", [("[1, 30, 95]", True), ("1, 30, 95", True), ("[95, 30, 1]", False),
                                           ("[1, 30]", False), ("[1, 30, 95, 96]", False)])
def test_list_is_order_sensitive(submission, ok):
    assert grade("list", [1, 30, 95], submission).correct is ok


def test_list_of_rows():
    assert grade("list", [["a", 1], ["b", 2]], '[["A", 1.0], ["b", 2]]').correct
    assert not grade("list", [["a", 1], ["b", 2]], '[["a", 2], ["b", 1]]').correct


@pytest.mark.parametrize("submission,ok", [
    ("2020-01-05", True), ("2020/01/05", True), ("01/05/2020", True), ("on 2020-01-05 at 10:00", True),
    ("2020-01-06", False), ("2020-01-05 or 2020-01-06", False), ("2020-13-45", False), ("January", False),
])
def test_date(submission, ok):
    assert grade("date", "2020-01-05", submission).correct is ok


def test_datetime():
    assert grade("datetime", "2020-01-05 14:30:00", "2020-01-05T14:30").correct
    assert not grade("datetime", "2020-01-05 14:30:00", "2020-01-05").correct
    assert not grade("datetime", "2020-01-05 14:30:00", "2020-01-05 14:31").correct


@pytest.mark.parametrize("submission,ok", [
    ("Cardiology", True), (" cardiology. ", True), ('"cardiology"', True), ("the cardiology", False),
    ("cardiology, nephrology", False), ("cardio", False), ("", False),
])
def test_text_is_exact_after_normalisation(submission, ok):
    assert grade("text", "cardiology", submission).correct is ok


def test_no_substring_matching():
    # the original harness passed any output that contained the gold as a substring
    assert not grade("text", "Ada Diaz", "Ada Diaz and Ben Ford").correct
    assert not grade("number", 3, "13").correct
    assert not grade("number", 3, " ".join(str(i) for i in range(1000))).correct


def test_broken_gold_and_unknown_type_raise():
    with pytest.raises(GraderError, match="unknown answer_type 'numbr'"):
        grade("numbr", 1, "1")
    with pytest.raises(GraderError, match="not a number"):
        grade("number", "abc", "1")
    with pytest.raises(GraderError, match="not a list"):
        grade("set", "abc", "a")


@pytest.mark.parametrize("answer_type,gold", [
    ("number", 4.37), ("number", 12.0), ("integer", 7), ("boolean", True), ("boolean", False), ("set", ["a", "b c"]),
    ("list", [3, 1, 2]), ("date", "2021-02-03"), ("datetime", "2021-02-03 04:05:06"), ("text", "Maple Grove"),
])
def test_rendered_gold_grades_correct(answer_type, gold):
    assert answer_type in ANSWER_TYPES
    assert grade(answer_type, gold, render_answer(answer_type, gold)).correct


def test_looks_like_error():
    assert looks_like_error(TRACEBACK)
    assert looks_like_error("sqlite3.OperationalError: no such table: x")
    assert not looks_like_error("42")


@pytest.mark.parametrize("answer_type,gold,submission", [
    ("integer", 3, "1e999"), ("integer", 3, "-1e999"), ("number", 3.0, "1e999"), ("set", [1, 2], "[1e999]"),
    ("list", [1, 2], "[NaN, 1]"), ("set", ["a"], "[" * 900 + "]" * 900), ("list", ["a"], "[" * 900 + "]" * 900),
])
def test_hostile_numbers_and_nesting_are_wrong_answers_not_crashes(answer_type, gold, submission):
    verdict = grade(answer_type, gold, submission)
    assert not verdict.correct and verdict.score == 0.0 and verdict.error is None


def test_huge_collections_are_refused_before_the_quadratic_comparison():
    """20,000 distinct elements once held the set grader for minutes (pairwise tolerance matching)."""
    import time

    many = "[" + ",".join(str(i) for i in range(20000)) + "]"
    start = time.process_time()
    verdict = grade("set", [1, 2], many)
    assert not verdict.correct and "20000 distinct elements" in verdict.reason
    assert time.process_time() - start < 5  # CPU time; seconds, not minutes, even on a loaded machine
    assert grade("set", [1, 2], "[" + ",".join(["1", "2"] * 500) + "]").correct  # duplicates are still fine
