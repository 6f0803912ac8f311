"""Strict graders: compare exactly ONE submitted answer with the gold answer, by answer type.

The original harness graded by substring search over the whole program output, so a fixed list of numbers, a
traceback, or printing both "true" and "false" passed many items. These graders parse the submission into one
value of the expected type and compare it exactly (numbers within a tolerance). What they reject, on purpose:

* an empty or missing submission;
* an error message or traceback ("Traceback (most recent call last)", ``NameError: ...``);
* several candidates where one is expected ("shotgun"): two numbers for a number, two dates for a date,
  both a true-word and a false-word for a boolean, extra elements for a set or list;
* substrings: ``"42 or 43"`` is not ``42``, ``"hypertension, diabetes"`` is not the text ``"hypertension"``.

Answer types (``grade(answer_type, gold, submission, **options)``):

=========== ================================================ =================================================
type        accepted submission                              options
=========== ================================================ =================================================
number      exactly one number (``1,234.5``, ``-3e-2`` ok)    ``rel_tol`` (1e-4), ``abs_tol`` (1e-6), ``strict``
integer     exactly one number with an integral value        —
boolean     exactly one of true/false, yes/no (or 1/0 alone) ``digits`` (False: no bare 1/0)
set         JSON/Python list, or comma/newline separated     ``rel_tol``, ``abs_tol`` (per element)
list        same, order matters                              ``rel_tol``, ``abs_tol``
date        exactly one date (ISO, YYYY/MM/DD, MM/DD/YYYY)   —
datetime    exactly one date and time (ISO or ``D HH:MM``)   —
text        the normalised text (case, spaces, quotes)       —
result      a public benchmark's result list (see below)     ``yes_no``, ``rel_tol``, ``abs_tol``
=========== ================================================ =================================================

"Nothing found": a scalar gold of ``None`` (an aggregate over no rows, a first time that never happened) is
answered by exactly one explicit no-value token (``None``, ``null``, ``nan``, ``[None]``, "no value", "nothing
found"); a set or list gold of ``[]`` by an empty collection (``[]``, ``()``). The two are kept apart, so no one
constant answers both. An empty submission is never an answer, and neither token answers a gold with a value.
A no-value answer is not a "no" either: ``No value.`` or ``no results`` is wrong on a yes/no question, so no one
constant answers both the nothing-found golds and the "no" golds of a family.

Public formats (MedAgentGym's harness prints query results as lists): a single-value gold (number, integer,
boolean, date, datetime, text, nothing found) also takes a one-element list, ``['oral']``, ``[1]``, ``[('1',)]``
(:func:`one_element`); several elements are never unwrapped, so a hedge stays wrong. In a set or list answer
written one value per line, a line is one value, commas and all, when a gold value contains a comma.

``result`` is the ``public`` answer convention of imported EHR records (EHRSQL, MIMICSQL/TREQS as MedAgentGym
stores them: a list of strings, ``'None'`` for SQL NULL). A submission is right when its distinct values are
exactly the gold's distinct values, in any order (EHRSQL's scorer sorts rows; a value repeated by the SQL's shape
need not be repeated): numbers within ``rel_tol`` (1e-6: the benchmark compares printed values, so a rounded
average is wrong there too), datetimes to the second, text ignoring case; a code with a leading zero (``'0389'``)
stays text. Yes/no questions (``yes_no=True``, EHRSQL's ``count(*) > 0``, stored ``['1']``/``['0']``) take 1/0,
true/false or yes/no, bare or in a list. JSON or Python lists, one-column rows (``[(x,), (y,)]``) and one row of
several columns (TREQS) are read; a lone value may contain commas.

Example:
    >>> grade("number", 42.0, "The answer is 42").correct
    True
    >>> grade("number", 42.0, "41 42 43").reason
    'shotgun: 3 numbers in one submission; submit exactly one'
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import re
from collections.abc import Callable
from typing import Any

from medagentgym.tasks.base import GraderError, Verdict

__all__ = ["ANSWER_TYPES", "EMPTY_TOKENS", "GRADERS", "NOTHING_TOKENS", "YES_NO_TOKENS", "grade", "is_nothing",
           "looks_like_error", "render_answer"]

DEFAULT_REL_TOL = 1e-4
DEFAULT_ABS_TOL = 1e-6
#: A scalar answer longer than this is not "one answer".
MAX_SCALAR_CHARS = 300
#: A set or list answer with more distinct elements than ``4 x gold + 50`` is refused before the pairwise
#: (tolerance-aware) comparison, which is quadratic: 20,000 elements would hold the grader for minutes.
MAX_EXTRA_ELEMENTS = 50

_NUMBER_RE = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])|(?<![\w.])[-+]?\.\d+(?![\w])")
_ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)|^\s*(?:[A-Z]\w*(?:Error|Exception)|sqlite3\.\w+):\s|"
    r"\b(?:OperationalError|SyntaxError|NameError|KeyError|TypeError|ValueError)\b",
    re.MULTILINE,
)
_TRUE_WORDS = {"true", "yes"}
_FALSE_WORDS = {"false", "no"}
_BOOL_WORD_RE = re.compile(r"\b(true|false|yes|no)\b", re.IGNORECASE)
_ISO_DT_RE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?)?\b")
_SLASH_YMD_RE = re.compile(r"\b(\d{4})/(\d{1,2})/(\d{1,2})\b")
_US_DATE_RE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")


#: A whole submission that states "no value" (Python's None, SQL/JSON null, pandas' NaN, a NULL row).
_NO_VALUE_RE = re.compile(
    r"^\s*(?:none|null|nan|nothing(?: found)?|no (?:value|results?)(?: found)?|"
    r"\[\s*(?:none|null|nan|\(\s*(?:none|null)\s*,?\s*\))\s*\])\s*\.?\s*$",
    re.IGNORECASE,
)
#: A whole submission that is an empty collection.
_EMPTY_RE = re.compile(r"^\s*(?:\[\s*\]|\(\s*\))\s*$")
#: Why a yes/no question refuses a nothing-found answer: "No value." is not "no", so that no one constant answers
#: both the nothing-found golds and the "no" golds of a family.
NOT_A_NO = "a nothing-found answer (None, no value, no results) is not a yes/no answer; answer yes or no"
#: Every whole-submission token the graders accept as "nothing found" (scalar) or "empty" (collection), with the
#: yes/no words: the reward-floor check tries each of them, alone and together (medagentgym.tasks.floors).
NOTHING_TOKENS = ("None", "null", "nan", "nothing", "nothing found", "no value", "No value.", "no value found",
                  "no results", "no result found", "[None]", "[null]", "[(None,)]")
EMPTY_TOKENS = ("[]", "()")
YES_NO_TOKENS = ("yes", "no", "true", "false", "1", "0")


def is_nothing(submission: Any, *, collection: bool = False) -> bool:
    """True when the whole submission is one explicit "nothing found" answer: a no-value token (``None``,
    ``null``, ``nan``, ``[None]`` ...) for a scalar, an empty collection (``[]``, ``()``) when ``collection``.

    The two are kept apart so that no one constant answers both a missing value and an empty list.
    """
    if submission is None:
        return False
    text = submission if isinstance(submission, str) else json.dumps(submission)
    return bool((_EMPTY_RE if collection else _NO_VALUE_RE).match(text))


def _ok(reason: str) -> Verdict:
    return Verdict(correct=True, score=1.0, reason=reason)


def _wrong(reason: str) -> Verdict:
    return Verdict(correct=False, score=0.0, reason=reason)


def looks_like_error(text: str) -> bool:
    """True when ``text`` looks like a traceback or an error message rather than an answer."""
    return bool(_ERROR_RE.search(text))


def _precheck(submission: Any, *, scalar: bool) -> tuple[str | None, Verdict | None]:
    """Common rejections. Returns (cleaned text, None) or (None, wrong verdict)."""
    if submission is None:
        return None, _wrong("empty submission")
    text = submission if isinstance(submission, str) else json.dumps(submission)
    text = text.strip().replace("\u2212", "-")  # a typographic minus is still a minus
    if not text or text.lower() in {"none", "null", "nan", '""', "''", "[]"} and scalar:
        return None, _wrong("empty submission")
    if looks_like_error(text):
        return None, _wrong("submission is an error message or traceback, not an answer")
    if scalar and len(text) > MAX_SCALAR_CHARS:
        return None, _wrong(f"submission is {len(text)} chars; one answer is expected (<= {MAX_SCALAR_CHARS})")
    return text, None


def _to_float(token: str) -> float:
    return float(token.replace(",", ""))


def _gold_float(gold: Any) -> float:
    if isinstance(gold, bool) or gold is None:
        raise GraderError(f"gold {gold!r} is not a number")
    try:
        value = float(gold)
    except (TypeError, ValueError) as exc:
        raise GraderError(f"gold {gold!r} is not a number") from exc
    if math.isnan(value):
        raise GraderError("gold is NaN")
    return value


def _close(a: float, b: float, rel_tol: float, abs_tol: float) -> bool:
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


def _one_number(text: str) -> tuple[float | None, str]:
    tokens = _NUMBER_RE.findall(text)
    if not tokens:
        return None, "no number in the submission"
    if len(tokens) > 1:
        return None, f"shotgun: {len(tokens)} numbers in one submission; submit exactly one"
    return _to_float(tokens[0]), ""


def grade_number(
    gold: Any, submission: Any, *, rel_tol: float = DEFAULT_REL_TOL, abs_tol: float = DEFAULT_ABS_TOL,
    strict: bool = False, **_: Any
) -> Verdict:
    """Exactly one number, equal to ``gold`` within ``rel_tol`` / ``abs_tol`` (math.isclose).

    ``strict=True`` is a benchmark's own rule instead: strictly within ``rel_tol`` of the gold itself
    (N-PowerAI: ``0.99 a < x < 1.01 a``).
    """
    text, bad = _precheck(submission, scalar=True)
    if bad:
        return bad
    gold_value = _gold_float(gold)
    value, why = _one_number(text)
    if value is None:
        return _wrong(why)
    if strict:
        ok = abs(value - gold_value) < rel_tol * abs(gold_value)
        return (_ok(f"{value:g} within {rel_tol:g} of {gold_value:g}") if ok
                else _wrong(f"{value:g} not within {rel_tol:g} of {gold_value:g}"))
    if _close(value, gold_value, rel_tol, abs_tol):
        return _ok(f"{value:g} matches {gold_value:g}")
    return _wrong(f"{value:g} != {gold_value:g} (rel_tol={rel_tol:g}, abs_tol={abs_tol:g})")


def grade_integer(gold: Any, submission: Any, **_: Any) -> Verdict:
    """Exactly one number with an integral value, equal to ``gold``."""
    text, bad = _precheck(submission, scalar=True)
    if bad:
        return bad
    gold_value = _gold_float(gold)
    if gold_value != int(gold_value):
        raise GraderError(f"gold {gold!r} is not an integer")
    value, why = _one_number(text)
    if value is None:
        return _wrong(why)
    if not math.isfinite(value) or value != int(value):
        return _wrong(f"{value:g} is not an integer")
    if int(value) == int(gold_value):
        return _ok(f"{int(value)} matches")
    return _wrong(f"{int(value)} != {int(gold_value)}")


def _parse_bool(text: str, *, digits: bool = True) -> tuple[bool | None, str]:
    bare = text.strip().strip(".!\"'`").strip().lower()
    if bare in {"1", "0"}:
        if not digits:
            return None, "a bare 1/0 is a number here; answer yes or no"
        return bare == "1", ""
    words = {w.lower() for w in _BOOL_WORD_RE.findall(text)}
    has_true, has_false = bool(words & _TRUE_WORDS), bool(words & _FALSE_WORDS)
    if has_true and has_false:
        return None, "both a true-word and a false-word in one submission; submit exactly one"
    if not (has_true or has_false):
        return None, "no boolean (true/false/yes/no) in the submission"
    return has_true, ""


def _gold_bool(gold: Any) -> bool:
    if isinstance(gold, bool):
        return gold
    if isinstance(gold, (int, float)) and gold in (0, 1):
        return bool(gold)
    if isinstance(gold, str):
        value, _ = _parse_bool(gold)
        if value is not None:
            return value
    raise GraderError(f"gold {gold!r} is not a boolean")


def grade_boolean(gold: Any, submission: Any, *, digits: bool = True, **_: Any) -> Verdict:
    """Exactly one truth value: true/false/yes/no as words, or a bare 1/0; both polarities present → wrong.

    ``digits=False`` refuses the bare 1/0 (families whose counts of 0 and 1 are answers too: there a constant "0"
    would otherwise answer every count of zero and every "no").
    """
    text, bad = _precheck(submission, scalar=True)
    if bad:
        return bad
    gold_value = _gold_bool(gold)
    if is_nothing(text):
        return _wrong(NOT_A_NO)
    if text.strip().strip(".!\"'`").strip() not in {"1", "0"} and _NUMBER_RE.search(text):
        # "No value., 0" read as "no" here and as 0 by the number grader: one constant for two kinds of gold
        return _wrong("a number and a yes/no answer in one submission; submit exactly one of yes or no")
    value, why = _parse_bool(text, digits=digits)
    if value is None:
        return _wrong(why)
    return _ok(f"{value} matches") if value == gold_value else _wrong(f"{value} != {gold_value}")


def _norm_text(value: Any) -> str:
    text = str(value).strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    text = text.rstrip(".").strip()
    return re.sub(r"\s+", " ", text).casefold()


def grade_text(gold: Any, submission: Any, **_: Any) -> Verdict:
    """Normalised exact text: case, surrounding quotes, a trailing period and runs of spaces are ignored."""
    text, bad = _precheck(submission, scalar=True)
    if bad:
        return bad
    if gold is None or _norm_text(gold) == "":
        raise GraderError(f"gold {gold!r} is empty")
    got, want = _norm_text(text), _norm_text(gold)
    return _ok("text matches") if got == want else _wrong(f"text {got!r} != {want!r}")


def _parse_datetime(text: str) -> tuple[list[dt.datetime], bool]:
    """All dates/datetimes in ``text`` and whether any carried a time of day."""
    found: list[dt.datetime] = []
    has_time = False
    spans: list[tuple[int, int]] = []
    try:
        for m in _ISO_DT_RE.finditer(text):
            y, mo, d, hh, mm, ss = m.groups()
            has_time |= hh is not None
            found.append(dt.datetime(int(y), int(mo), int(d), int(hh or 0), int(mm or 0), int(ss or 0)))
            spans.append(m.span())
        for m in _SLASH_YMD_RE.finditer(text):
            found.append(dt.datetime(int(m[1]), int(m[2]), int(m[3])))
        for m in _US_DATE_RE.finditer(text):
            found.append(dt.datetime(int(m[3]), int(m[1]), int(m[2])))
    except ValueError:
        return [], False  # an impossible date such as 2020-13-40 counts as no date
    return found, has_time


def _one_datetime(value: Any, *, what: str) -> tuple[dt.datetime | None, bool, str]:
    found, has_time = _parse_datetime(str(value))
    if not found:
        return None, False, f"no valid date in the {what}"
    if len(set(found)) > 1 or len(found) > 1:
        return None, False, f"shotgun: {len(found)} dates in the {what}; submit exactly one"
    return found[0], has_time, ""


def _gold_and_submitted_datetime(gold: Any, submission: Any) -> tuple[Any, Any, bool, Verdict | None]:
    """(gold, submitted, submission has a time of day, a wrong-answer verdict or None); a bad gold raises."""
    text, bad = _precheck(submission, scalar=True)
    if bad:
        return None, None, False, bad
    want, _, why = _one_datetime(gold, what="gold")
    if want is None:
        raise GraderError(f"gold {gold!r}: {why}")
    got, has_time, why = _one_datetime(text, what="submission")
    return want, got, has_time, (_wrong(why) if got is None else None)


def grade_date(gold: Any, submission: Any, **_: Any) -> Verdict:
    """Exactly one calendar date; compared by day (a time of day, if given, is ignored)."""
    want, got, _, bad = _gold_and_submitted_datetime(gold, submission)
    if bad:
        return bad
    ok = got.date() == want.date()
    return _ok("date matches") if ok else _wrong(f"date {got.date()} != {want.date()}")


def grade_datetime(gold: Any, submission: Any, **_: Any) -> Verdict:
    """Exactly one date with a time of day, equal to the second (missing seconds count as :00)."""
    want, got, has_time, bad = _gold_and_submitted_datetime(gold, submission)
    if bad:
        return bad
    if not has_time and (want.hour, want.minute, want.second) != (0, 0, 0):
        return _wrong("a time of day is required (e.g. 2020-01-05 14:30:00)")
    return _ok("datetime matches") if got == want else _wrong(f"datetime {got} != {want}")


def _parse_collection(text: str, *, comma_values: bool = False) -> list[Any]:
    """A list from JSON / Python literal syntax, else newline- or comma-separated items.

    One value per line is read line by line when the lines carry no comma, or when ``comma_values`` (a gold
    value contains a comma, e.g. ``'hypertension, unspecified'``): a line is then one value, commas and all, and a
    trailing comma is dropped. Otherwise commas and line ends separate values, as in ``asthma, anemia``.
    """
    stripped = text.strip()
    if stripped[:1] in "[(" and stripped[-1:] in "])":
        value = _literal(stripped)
        if value is not None:
            return list(value)
        stripped = stripped[1:-1]
    if "\n" in stripped and ("," not in stripped or comma_values):
        items = [part.strip().rstrip(",").strip() for part in stripped.split("\n")]
    else:
        items = [part.strip() for part in re.split(r"[,\n]", stripped)]
    return [item for item in items if item != ""]


def _norm_element(value: Any) -> Any:
    """Canonical element: float for numbers, bool kept, tuple for rows, normalised text otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(_norm_element(v) for v in value)
    text = _norm_text(value)
    if re.fullmatch(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?", text):
        return float(text)
    if text in {"true", "false"}:
        return text == "true"
    return text


def _elements_equal(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_elements_equal(x, y, rel_tol, abs_tol) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float) and isinstance(b, float):
        return _close(a, b, rel_tol, abs_tol)
    return a == b


def _exact_key(value: Any) -> Any:
    """A hashable key equal only for identical canonical elements (a bool never equals the number 1)."""
    if isinstance(value, tuple):
        return ("t", tuple(_exact_key(v) for v in value))
    return (type(value).__name__, value)


def _collection_inputs(gold: Any, submission: Any) -> tuple[list[Any] | None, list[Any], Verdict | None]:
    if not isinstance(gold, (list, tuple)):
        raise GraderError(f"gold {gold!r} is not a list")
    want = [_norm_element(v) for v in gold]
    if isinstance(submission, (list, tuple)):
        items = list(submission)
    else:
        text, bad = _precheck(submission, scalar=False)
        if bad:
            return None, [], bad
        items = _parse_collection(text, comma_values=any("," in str(v) for v in gold))
    try:
        got = [_norm_element(v) for v in items]
        distinct = len({_exact_key(v): None for v in got})
    except RecursionError:
        return None, [], _wrong("submission is nested too deeply to be a list of answers")
    limit = 4 * len(want) + MAX_EXTRA_ELEMENTS
    if distinct > limit:
        return None, [], _wrong(f"{distinct} distinct elements submitted, {len(want)} expected (at most {limit} "
                                "are compared)")
    return got, want, None


def grade_set(
    gold: Any, submission: Any, *, rel_tol: float = DEFAULT_REL_TOL, abs_tol: float = DEFAULT_ABS_TOL, **_: Any
) -> Verdict:
    """Order-insensitive equality of distinct elements (numbers within tolerance, text normalised)."""
    if isinstance(gold, (list, tuple)) and not gold and is_nothing(submission, collection=True):
        return _ok("empty, as expected")
    got, want, bad = _collection_inputs(gold, submission)
    if bad:
        return bad
    got_u = _dedupe(got, rel_tol, abs_tol)
    want_u = _dedupe(want, rel_tol, abs_tol)
    if len(got_u) != len(want_u):
        return _wrong(f"{len(got_u)} distinct elements submitted, {len(want_u)} expected")
    unused = list(got_u)
    for w in want_u:
        match = next((i for i, g in enumerate(unused) if _elements_equal(g, w, rel_tol, abs_tol)), None)
        if match is None:
            return _wrong(f"expected element {w!r} is missing")
        unused.pop(match)
    return _ok(f"set of {len(want_u)} matches")


def _dedupe(items: list[Any], rel_tol: float, abs_tol: float,
            equal: Callable[[Any, Any, float, float], bool] = _elements_equal) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not any(equal(item, seen, rel_tol, abs_tol) for seen in out):
            out.append(item)
    return out


def grade_list(
    gold: Any, submission: Any, *, rel_tol: float = DEFAULT_REL_TOL, abs_tol: float = DEFAULT_ABS_TOL, **_: Any
) -> Verdict:
    """Order-sensitive element-wise equality (numbers within tolerance, text normalised); lengths must match."""
    if isinstance(gold, (list, tuple)) and not gold and is_nothing(submission, collection=True):
        return _ok("empty, as expected")
    got, want, bad = _collection_inputs(gold, submission)
    if bad:
        return bad
    if len(got) != len(want):
        return _wrong(f"{len(got)} elements submitted, {len(want)} expected")
    for i, (g, w) in enumerate(zip(got, want)):
        if not _elements_equal(g, w, rel_tol, abs_tol):
            return _wrong(f"element {i}: {g!r} != {w!r}")
    return _ok(f"list of {len(want)} matches")


# ---------------------------------------------------------------------------------------------------------------
# The ``public`` convention of imported EHR records: a benchmark's result list (EHRSQL, MIMICSQL/TREQS)

#: Relative tolerance of ``result`` numbers: the benchmarks compare printed values, so only float noise is forgiven.
RESULT_REL_TOL = 1e-6
_LEADING_ZERO = re.compile(r"^[-+]?0\d")
_FULL_DT = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?)?$")
_NONE_WORDS = {"none", "null", "nan"}


def _public_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS)


def _gold_list(gold: Any) -> list[Any]:
    if not isinstance(gold, (list, tuple)):
        raise GraderError(f"gold {gold!r} is not a result list")
    return list(gold)


_NONE = ("none",)


def _result_value(value: Any) -> Any:
    """Canonical form of one result value: the NONE marker, a float, a datetime, or case-folded text."""
    if _public_none(value):
        return _NONE
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else ("text", str(value))
    text = _norm_text(value)
    if re.fullmatch(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?", text) and not _LEADING_ZERO.match(text):
        number = float(text)
        if math.isfinite(number):
            return number
    m = _FULL_DT.match(text)
    if m:
        try:
            return dt.datetime(*(int(g or 0) for g in m.groups()))
        except ValueError:
            pass
    return ("text", text)


def _result_equal(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return _close(a, b, rel_tol, abs_tol)
    return type(a) is type(b) and a == b


def _result_items(value: Any, depth: int = 0) -> list[Any] | None:
    """Values of a submitted result: a list of values, of one-column rows, or one row of several columns."""
    if not isinstance(value, (list, tuple)):
        return [value]
    if depth > 0:
        return list(value) if all(not isinstance(v, (list, tuple)) for v in value) else None
    out: list[Any] = []
    rows = [v for v in value if isinstance(v, (list, tuple))]
    if rows and len(rows) != len(value):
        return None  # values and rows mixed: not a result
    if len(rows) > 1 and any(len(r) != 1 for r in rows):
        return None  # several rows of several columns: not one answer list
    for item in value:
        inner = _result_items(item, depth + 1)
        if inner is None:
            return None
        out.extend(inner)
    return out


def _distinct_results(values: list[Any], rel_tol: float, abs_tol: float) -> list[Any]:
    return _dedupe(values, rel_tol, abs_tol, equal=_result_equal)


def _same_results(got: list[Any], want: list[Any], rel_tol: float, abs_tol: float) -> bool:
    got_u, want_u = _distinct_results(got, rel_tol, abs_tol), _distinct_results(want, rel_tol, abs_tol)
    if len(got_u) != len(want_u):
        return False
    unused = list(got_u)
    for w in want_u:
        k = next((i for i, g in enumerate(unused) if _result_equal(g, w, rel_tol, abs_tol)), None)
        if k is None:
            return False
        unused.pop(k)
    return True


def grade_result(gold: Any, submission: Any, *, yes_no: bool = False, rel_tol: float = RESULT_REL_TOL,
                 abs_tol: float = DEFAULT_ABS_TOL, **_: Any) -> Verdict:
    """A public benchmark's result list (the ``public`` convention of imported EHR records; see the module doc)."""
    want_raw = _gold_list(gold)
    text, bad = _precheck(submission, scalar=False)
    if bad:
        return bad
    if not want_raw:  # no row at all
        return _ok("empty, as expected") if is_nothing(text, collection=True) else _wrong("expected no row")
    if yes_no:
        want = _result_value(want_raw[0])
        if len(want_raw) != 1 or want not in (0.0, 1.0):
            raise GraderError(f"gold {gold!r} of a yes/no question is not ['1'] or ['0']")
        bare = text
        while len(bare) >= 2 and bare[0] + bare[-1] in ("[]", "()"):
            bare = bare[1:-1].strip().rstrip(",").strip()
        if is_nothing(text) or is_nothing(bare):
            return _wrong(NOT_A_NO)
        value, why = _parse_bool(bare)
        if value is None:
            return _wrong(why)
        return _ok(f"{value} matches") if value == bool(want) else _wrong(f"{value} != {bool(want)}")
    want = [_result_value(v) for v in want_raw]
    candidates: list[list[Any]] = []
    if len(_distinct_results(want, rel_tol, abs_tol)) == 1 and len(text) <= MAX_SCALAR_CHARS:
        candidates.append([_result_value(text)])  # one value, commas and all
    parsed = None
    if text[:1] in "[(" and text[-1:] in "])":
        for loader in (json.loads, ast.literal_eval):
            try:
                parsed = loader(text)
                break
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    items = (_result_items(parsed) if isinstance(parsed, (list, tuple))
             else _parse_collection(text, comma_values=any("," in str(v) for v in want_raw)))
    if items is None:
        return _wrong("not a list of values, one-column rows or one row")
    if len(items) > 4 * len(want) + MAX_EXTRA_ELEMENTS:
        return _wrong(f"{len(items)} values submitted, {len(want)} expected")
    candidates.append([_result_value(v) for v in items])
    if any(_same_results(c, want, rel_tol, abs_tol) for c in candidates):
        return _ok(f"result of {len(_distinct_results(want, rel_tol, abs_tol))} value(s) matches")
    return _wrong(f"{len(candidates[-1])} value(s) submitted do not equal the {len(want)} expected")


_SCALAR_TYPES = frozenset({"number", "integer", "date", "datetime", "text"})


GRADERS: dict[str, Callable[..., Verdict]] = {
    "number": grade_number,
    "integer": grade_integer,
    "boolean": grade_boolean,
    "set": grade_set,
    "list": grade_list,
    "date": grade_date,
    "datetime": grade_datetime,
    "text": grade_text,
    "result": grade_result,
}
ANSWER_TYPES = tuple(GRADERS)


def grade_nothing(gold: Any, submission: Any, **_: Any) -> Verdict:
    """A scalar gold of ``None`` ("nothing found"): exactly one explicit no-value token is right."""
    if submission is None or (isinstance(submission, str) and not submission.strip()):
        return _wrong("empty submission")
    if is_nothing(submission):
        return _ok("no value, as expected")
    return _wrong("expected no value")


def grade(answer_type: str, gold: Any, submission: Any, **options: Any) -> Verdict:
    """Grade one submission with the strict grader for ``answer_type``.

    Args:
        answer_type: One of :data:`ANSWER_TYPES`.
        gold: The gold answer (JSON value: number, bool, string, list).
        submission: The submitted answer, normally a string.
        **options: Grader options (``rel_tol``, ``abs_tol``); unknown options are ignored.

    Returns:
        A verdict with a reason; never raises for a wrong submission.

    Raises:
        GraderError: Unknown answer type or a malformed gold answer (the grader is broken, not the agent).
    """
    try:
        grader = GRADERS[answer_type]
    except KeyError:
        raise GraderError(f"unknown answer_type {answer_type!r}; use one of {', '.join(ANSWER_TYPES)}") from None
    if answer_type in _SCALAR_TYPES or answer_type == "boolean":
        values = _list_values(submission)
        if values is not None and len(values) > 1:
            return _wrong(f"shotgun: a list of {len(values)} values for a single-value answer; submit exactly one")
        submission = one_element(submission)
    if gold is None and answer_type in _SCALAR_TYPES:
        return grade_nothing(gold, submission)
    return grader(gold, submission, **options)


def _literal(text: str) -> Any:
    """A JSON or Python list/tuple literal, else None."""
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, (list, tuple)):
            return value
    return None


def _list_values(submission: Any) -> list[Any] | None:
    """The values of a submitted list literal (a one-row list of several columns counts as its columns), or None
    when the submission is not a list."""
    if isinstance(submission, str):
        text = submission.strip()
        if not (text[:1] in "[(" and text[-1:] in "])"):
            return None
        value = _literal(text) if len(text) <= 100 * MAX_SCALAR_CHARS else None
    elif isinstance(submission, (list, tuple)):
        value = submission
    else:
        return None
    if value is None:
        return None
    if len(value) == 1 and isinstance(value[0], (list, tuple)):
        return list(value[0])
    return list(value)


def one_element(submission: Any) -> Any:
    """A one-element list for a single-value gold, unwrapped: ``['oral']`` -> ``oral``, ``[('1',)]`` -> ``1``.

    MedAgentGym's harness prints query results as lists, so its agents answer ``['oral']``. Exactly one element
    (one value, or one row of one column) is unwrapped; the element must be a plain value (a string that is not
    itself a list, a number, None; a bool becomes ``true``/``false``, which no number grader reads as 1). Anything
    else (several elements, an empty list, nested values) is returned unchanged, so a hedge such as
    ``['1', '2']`` still reaches the scalar grader as several values and is wrong.
    """
    if isinstance(submission, str):
        text = submission.strip()
        if not (len(text) <= MAX_SCALAR_CHARS and text[:1] in "[(" and text[-1:] in "])"):
            return submission
        value = _literal(text)
    elif isinstance(submission, (list, tuple)):
        value = submission
    else:
        return submission
    if value is None or len(value) != 1:
        return submission
    (item,) = value
    if isinstance(item, (list, tuple)):
        if len(item) != 1:
            return submission
        (item,) = item
    if item is None:
        return "None"
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, (int, float)):
        return repr(item)
    if isinstance(item, str) and item.strip()[:1] not in "[(" and item.strip():
        return item
    return submission


def render_answer(answer_type: str, gold: Any) -> str:
    """The canonical submission string for ``gold`` (what a reference solution submits).

    Example:
        >>> render_answer("boolean", True), render_answer("set", ["a", "b"])
        ('true', '["a", "b"]')
    """
    if gold is None and answer_type in _SCALAR_TYPES:
        return "None"
    if answer_type == "boolean":
        return "true" if _gold_bool(gold) else "false"
    if answer_type == "result":
        return json.dumps([None if _public_none(v) else v for v in _gold_list(gold)])
    if answer_type in {"set", "list"}:
        return json.dumps(list(gold))
    if answer_type == "integer":
        return str(int(_gold_float(gold)))
    if answer_type == "number":
        value = _gold_float(gold)
        return str(int(value)) if value == int(value) else repr(value)
    if answer_type not in GRADERS:
        raise GraderError(f"unknown answer_type {answer_type!r}; use one of {', '.join(ANSWER_TYPES)}")
    return str(gold)
