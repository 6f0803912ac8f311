"""Reward floors: what an answer that carries no information about the instance earns under a family's grader.

A policy optimised for reward finds any answer that pays without solving the task. Three kinds are measured:

* **Constant floor** (:func:`constant_floor`): the best score ONE constant answer earns over a whole split (a
  "do nothing" answer such as ``[-1]``, a common count such as ``2``, ``yes``; every accepted nothing-found,
  empty and yes/no token, alone and joined into one answer: :func:`answer_tokens`). For families graded on a
  predictions file (``null_submissions``: ehrshot, mimic_extract) the "constant" is the best *no-information
  predictor*: a file that covers every test id with constant, uniformly random or class-proportional random
  predictions, written without reading a feature (:func:`no_information_floor`).
* **Per-template floor** (:func:`template_floor`): one constant per question template, chosen on the train
  split and applied to the test split. A template whose answers cluster (a score that is mostly 2, a yes/no
  template that is mostly yes) pays more than any family-wide constant does.
* **Chance baseline of an ML instance** (:func:`null_metric`): the metric of the best no-information predictor
  and its spread, measured by permutation when the instance is built; families keep an instance only when the
  reference model beats that spread, and put the pass threshold above it.

``medagentgym eval`` reports the constant floor beside each family's success; ``tasks.check_family`` refuses
a build whose floors exceed their bound (:data:`FLOOR_BOUND`, a family's own ``floor_bound``, 1/2 for yes/no
families; per template, a yes/no family is held to its label base rate: no template may pay more than "always the
majority answer"); ``scripts/make_family_pages.py`` shows both floors.

Example:
    >>> floor = constant_floor(tasks.make("medagentbench", root=root), fam.instances("test"))
    >>> floor["floor"] <= floor["bound"]
    True
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["BINARY_SLACK", "FLOOR_BOUND", "FLOOR_CANDIDATES", "FLOOR_CONSTANTS", "NULL_DRAWS", "NULL_Z",
           "answer_tokens", "constant_floor", "constant_predictor", "matched_template_floor", "no_information_floor",
           "nothing_found", "null_metric", "public_floor_record", "public_template_floor", "public_template_key", "question_template",
           "slot_template", "template_floor"]


#: Constant answers tried beside a family's most common gold answers: do nothing, yes/no, zero/one, empty list.
FLOOR_CONSTANTS = ("0", "1", "-1", "[-1]", "[]", "yes", "no", "true", "false", "none", "done", "predictions.csv")
#: The most a constant answer may score on a non-binary family; binary families are bounded by their base rate.
FLOOR_BOUND = 0.10
#: Most common gold answers scored as constants (bounds the cost: candidates x instances grades).
FLOOR_CANDIDATES = 20
#: Draws of each no-information predictor per instance in :func:`no_information_floor`.
NULL_DRAWS = 10
#: The no-information spread: a predictor's mean metric plus this many standard deviations (one-sided ~0.1 %).
NULL_Z = 3.0
#: How far a per-template floor of a yes/no family may exceed its base rate (the learned constants' noise).
BINARY_SLACK = 0.02


def _floor_context(family: Any, workspace: Path) -> Any:
    from medagentgym.tasks.base import GradeContext

    root = getattr(family, "root", None)
    return GradeContext(family_dir=Path(root) if root is not None else None, workspace=workspace)


def _bounds(family: Any, items: list[Any]) -> tuple[bool, float, float]:
    """``(binary, bound, base_rate)``: a family's floor bound, and for yes/no families the label base rate.

    A family states its own bound in ``floor_bound`` (a learning check whose answers are few by design; a yes/no
    family built at the public label balance, e.g. ehrcon's 70 % consistent). Otherwise yes/no families are
    bounded at 1/2 and the others at :data:`FLOOR_BOUND`. ``base_rate`` is the share of the most common label
    (what "always the majority answer" earns; 0 for non-binary families).
    """
    from medagentgym.tasks.graders import render_answer

    binary = bool(items) and all(i.answer_type == "boolean" for i in items)
    base = 0.0
    if binary:
        base = Counter(render_answer("boolean", i.answer) for i in items).most_common(1)[0][1] / len(items)
    return binary, getattr(family, "floor_bound", None) or (0.5 if binary else FLOOR_BOUND), base


def _is_program_family(items: list[Any]) -> bool:
    return bool(items) and all(i.solution_lang == "python" and i.answer == i.solution for i in items)


def _grade_constants(family: Any, items: list[Any], candidates: list[str], ctx: Any) -> tuple[dict[str, float], int]:
    """``({constant: total score over items}, grader errors)``; a crashing grader earns nothing."""
    totals: dict[str, float] = {}
    errors = 0
    for constant in candidates:
        total = 0.0
        for inst in items:
            try:
                total += family.grade(inst, constant, ctx).score
            except Exception:  # noqa: BLE001 - a crashing grader earns nothing here; counted, shown in the report
                errors += 1
        totals[constant] = total
    return totals, errors


def answer_tokens() -> list[str]:
    """Every accepted token of each kind of "no information" gold, alone and together.

    Alone: each no-value token (``None``, ``No value.``, ``no results``, ``[None]`` ...), each empty collection,
    each yes/no word. Together: each no-value token joined with each "no"-kind token (``no``, ``false``, ``0``,
    ``[]``) as one answer (``None, no``, ``no results\n0``, ``[None, false]``), and the one-word phrases a
    grader might read as two kinds at once. A grader that lets one of these answer two kinds of gold shows up
    as a floor above its bound instead of hiding between two constants tried separately.
    """
    from medagentgym.tasks.graders import EMPTY_TOKENS, NOTHING_TOKENS, YES_NO_TOKENS

    alone = list(NOTHING_TOKENS) + list(EMPTY_TOKENS) + list(YES_NO_TOKENS)
    together = []
    for nothing in ("None", "No value.", "no results", "nan", "[None]"):
        for other in ("no", "false", "0", "[]"):
            together += [f"{nothing}, {other}", f"{nothing}\n{other}", f"{other} ({nothing})"]
    together += ['["None", "no"]', "[None, false]", "[None, 0]", "[[], None]"]
    return list(dict.fromkeys(alone + together))


def _candidates(items: list[Any]) -> list[str]:
    from medagentgym.tasks.graders import render_answer

    rendered = Counter(render_answer(i.answer_type, i.answer) for i in items)
    return list(dict.fromkeys([r for r, _ in rendered.most_common(FLOOR_CANDIDATES)] + list(FLOOR_CONSTANTS)
                              + answer_tokens()))


def constant_floor(family: Any, instances: list[Any]) -> dict[str, Any]:
    """The best score ONE constant answer earns over ``instances`` (a whole split) under the family's grader.

    Candidates: the :data:`FLOOR_CANDIDATES` most common rendered gold answers and :data:`FLOOR_CONSTANTS`; each
    is submitted to every instance and graded by ``family.grade`` with an empty workspace (a constant answer
    writes no file). Families whose gold answers are programs (the reference code itself, graded by running
    it) are not executed: a program can only pass the instances it is the reference of, so their floor is the
    share of the most common reference program. Families graded on a predictions file (a
    ``null_submissions`` method) are measured with no-information predictors instead
    (:func:`no_information_floor`): a constant answer without the file earns nothing there.

    Args:
        family: The family object (``tasks.make``).
        instances: Every instance of the split (not a ``--limit`` subset).

    Returns:
        ``{"floor", "constant", "method", "binary", "bound", "exceeds", "instances", "grader_errors"}``;
        the bound is the family's ``floor_bound`` attribute when it has one, else 0.5 for ``binary`` families
        (every answer a yes/no) and :data:`FLOOR_BOUND` for the others. No-information
        families add ``full_reward`` (the best predictor's share of draws graded correct) and ``worst_instance``.

    Example:
        >>> constant_floor(tasks.make("medagentbench", root=root), fam.instances("test"))["constant"]
        '[-1]'
    """
    items = list(instances)
    binary, bound, _ = _bounds(family, items)
    out: dict[str, Any] = {"floor": 0.0, "constant": None, "method": "graded", "binary": binary, "bound": bound,
                           "instances": len(items), "grader_errors": 0}
    if not items:
        return {**out, "exceeds": False}
    if hasattr(family, "null_submissions"):
        null = no_information_floor(family, items)
        return {**out, **null, "bound": bound, "exceeds": null["floor"] > bound + 1e-9
                or null["worst_instance_full_reward"] > bound + 1e-9}
    if _is_program_family(items):
        counts = Counter(str(i.answer) for i in items)
        top, n = counts.most_common(1)[0]
        return {**out, "floor": round(n / len(items), 6), "constant": top[:60], "method": "shared reference program",
                "exceeds": n / len(items) > bound + 1e-9}
    with tempfile.TemporaryDirectory() as ws:
        totals, errors = _grade_constants(family, items, _candidates(items), _floor_context(family, Path(ws)))
    best_c = max(totals, key=lambda c: (totals[c], -list(totals).index(c)))
    best = totals[best_c] / len(items)
    return {**out, "floor": round(best, 6), "constant": best_c[:60], "grader_errors": errors,
            "exceeds": best > bound + 1e-9}


def _null_scores(family: Any, inst: Any, draws: int, seed: int, index: int) -> dict[str, list[tuple[float, bool]]]:
    """``{predictor: [(score, correct) per draw]}`` of one instance's no-information submissions."""
    import numpy as np

    out: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for draw in range(draws):
        rng = np.random.default_rng([seed, index, draw])
        for name, answer, files in family.null_submissions(inst, rng):
            with tempfile.TemporaryDirectory() as ws:
                for rel, data in files.items():
                    (Path(ws) / rel).write_bytes(data)
                try:
                    verdict = family.grade(inst, answer, _floor_context(family, Path(ws)))
                    out[name].append((verdict.score, verdict.correct))
                except Exception:  # noqa: BLE001 - a crashing grader earns nothing (counted by the caller)
                    out[name].append((0.0, False))
    return out


def no_information_floor(family: Any, instances: list[Any], *, draws: int = NULL_DRAWS,
                         seed: int = 0) -> dict[str, Any]:
    """What predictions that read no feature earn: the best no-information predictor over ``instances``.

    ``family.null_submissions(instance, rng)`` lists, for one draw, ``(predictor, answer, {file: bytes})``: a
    constant class, uniformly random scores or classes, class-proportional random classes (drawn from the train
    labels' shares), each covering every test id. Each is written into an empty workspace and graded, ``draws``
    times per instance.

    Returns:
        ``{"floor", "constant", "method", "full_reward", "worst_instance", "worst_instance_full_reward",
        "draws"}``: ``floor`` is the best predictor's mean score, ``full_reward`` its share of draws graded
        correct, and ``worst_instance_full_reward`` the largest share of one predictor's draws graded correct on
        one instance (the issue's "19.7 % of draws" on ``lab_hyperkalemia_k8``).
    """
    totals: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    worst, worst_id = 0.0, None
    for index, inst in enumerate(instances):
        for name, runs in _null_scores(family, inst, draws, seed, index).items():
            totals[name] += runs
            share = sum(ok for _, ok in runs) / len(runs)
            if share > worst:
                worst, worst_id = share, inst.id
    if not totals:
        return {"floor": 0.0, "constant": None, "method": "no-information predictions", "full_reward": 0.0,
                "worst_instance": None, "worst_instance_full_reward": 0.0, "draws": draws}
    best = max(sorted(totals), key=lambda n: sum(s for s, _ in totals[n]))
    runs = totals[best]
    return {"floor": round(sum(s for s, _ in runs) / len(runs), 6), "constant": best,
            "method": "no-information predictions", "full_reward": round(sum(ok for _, ok in runs) / len(runs), 6),
            "worst_instance": worst_id, "worst_instance_full_reward": round(worst, 6), "draws": draws}


def nothing_found(instance: Any) -> bool:
    """Whether the gold answer is "nothing found" (empty, None, 0), as the EHR benchmarks count it; yes/no aside."""
    if instance.answer_type == "boolean":
        return False
    answer = instance.answer
    if isinstance(answer, (list, tuple)) and len(answer) == 1:
        answer = answer[0]
    if answer is None or (isinstance(answer, (list, tuple, str)) and not answer):
        return True
    if isinstance(answer, str):
        return answer.strip().lower() in {"none", "null", "0", "0.0", "[]"}
    return isinstance(answer, (int, float)) and not isinstance(answer, bool) and answer == 0


def _by_template(family: Any, items: list[Any], key: Callable[[Any, Any], str]) -> dict[str, list[Any]]:
    """``items`` grouped by ``key(family, item)`` (their question template)."""
    out: dict[str, list[Any]] = defaultdict(list)
    for inst in items:
        out[key(family, inst)].append(inst)
    return out


def question_template(family: Any, instance: Any) -> str:
    """The question template ``instance`` was written from: ``family.question_template(instance)`` when the
    family defines it (its categories would say more than the question does), else the instance's category."""
    hook = getattr(family, "question_template", None)
    return hook(instance) if callable(hook) else instance.category


def template_floor(family: Any, train: list[Any], test: list[Any]) -> dict[str, Any]:
    """The per-template floor: per question template, the best constant on ``train``, scored on ``test``.

    For each template (:func:`question_template`), the candidates are the template's most common train gold
    answers and :data:`FLOOR_CONSTANTS` (families graded on a predictions file: their no-information
    predictors; program families: the template's most common train reference); the one scoring best on the
    template's train instances is submitted to its test instances. A test template absent from train earns 0.

    Each template has a bound: a yes/no template the family's yes/no bound (its ``floor_bound`` for a yes/no
    family built at a stated label balance, else 1/2) plus :data:`BINARY_SLACK`, since "always yes" earns the
    base rate and no template may pay more than that; any other template :data:`FLOOR_BOUND` (or the family's
    ``floor_bound``). A family that reproduces a public benchmark's share of "nothing found" answers (empty,
    None, 0: 19-22 % of MedAgentGym's mimic_iii and eicu answers) states that share as ``nothing_found_share``;
    its templates' bounds then add their own nothing-found share up to it, as yes/no templates are held to their
    base rate: "always 0" earns that much on the public files too. The family's bound is the instance-weighted
    mean of its templates' bounds (10 % for a family without yes/no or stated nothing-found answers).

    Returns:
        ``{"floor", "bound", "binary", "exceeds", "instances", "templates", "method", "top", "over"}``: ``floor``
        is the mean test score; ``top`` lists the five templates contributing most (``template``, ``test``
        instances, ``score`` there, ``bound``, ``constant``); ``over`` names the templates whose score exceeds
        their own bound by more than two binomial standard errors (reported; the family bound is what fails).
    """
    train, test = list(train), list(test)
    binary, family_bound, _ = _bounds(family, test)
    yes_no = (family_bound if binary else 0.5) + BINARY_SLACK
    other = getattr(family, "floor_bound", None) or FLOOR_BOUND
    allowance = float(getattr(family, "nothing_found_share", 0.0) or 0.0)
    out: dict[str, Any] = {"floor": 0.0, "bound": 0.0, "binary": binary, "instances": len(test), "templates": 0,
                           "method": "graded", "top": [], "over": [], "nothing_found": 0.0}
    if not test:
        return {**out, "exceeds": False}
    by_train, by_test = _by_template(family, train, question_template), _by_template(family, test, question_template)
    rows = []
    with tempfile.TemporaryDirectory() as ws:
        ctx = _floor_context(family, Path(ws))
        for template in sorted(by_test):
            fit, apply = by_train.get(template, []), by_test[template]
            constant, score = _template_score(family, fit, apply, ctx)
            boolean = all(i.answer_type == "boolean" for i in apply)
            empty = sum(nothing_found(i) for i in apply) / len(apply)
            rows.append({"template": template, "test": len(apply), "score": round(score, 6),
                         "bound": round(yes_no if boolean else other + min(empty, allowance), 6),
                         "constant": None if constant is None else str(constant)[:40],
                         "nothing_found": round(empty, 6)})
    if hasattr(family, "null_submissions"):
        out["method"] = "no-information predictions"
    elif _is_program_family(test):
        out["method"] = "shared reference program"
    total = sum(r["score"] * r["test"] for r in rows) / len(test)
    bound = sum(r["bound"] * r["test"] for r in rows) / len(test)
    top = sorted(rows, key=lambda r: (-r["score"] * r["test"], r["template"]))[:5]
    over = [r["template"] for r in rows
            if r["score"] > r["bound"] + 2 * (r["bound"] * (1 - min(r["bound"], 1)) / r["test"]) ** 0.5]
    return {**out, "floor": round(total, 6), "bound": round(bound, 6), "templates": len(rows), "top": top,
            "over": over, "nothing_found": round(sum(map(nothing_found, test)) / len(test), 6),
            "exceeds": total > bound + 1e-9}


def slot_template(family: Any, instance: Any) -> str:
    """The template at the public files' grain: EHRSQL's ``q_tag`` keeps time windows as ``[time_filter]``
    slots, so one template covers every time-window variant; ours is ``metadata["template"]`` (the category
    without its ``.<variant>``), else :func:`question_template`."""
    meta = getattr(instance, "metadata", None) or {}
    return str(meta["template"]) if meta.get("template") else question_template(family, instance)


def matched_template_floor(family: Any, train: list[Any], test: list[Any], train_sizes: list[int], *,
                           key: Callable[[Any, Any], str] | None = None, draws: int = 20,
                           seed: int = 0) -> dict[str, Any]:
    """The per-template floor measured as on a benchmark whose templates hold few train instances.

    :func:`template_floor` learns each template's constant on ALL its train instances (about 90 in a default
    mimic_iii build), so it finds each template's most common answer. MedAgentGym's public files hold about 3.4
    train instances per template (mimic_iii, eicu; 11 for treqs), and its published per-template floor (the one
    constant learned on those few) is that small-sample figure: the same answers learned on more instances pay
    more (:func:`public_template_floor`). To compare like with like, each template here learns its constant on
    ``k`` train instances drawn at random, ``k`` drawn from ``train_sizes`` (the public files' train instances
    per test template), and the mean test score is averaged over ``draws`` draws.

    Args:
        family: The family (its grader scores the constants).
        train, test: The splits.
        train_sizes: Train instances per template on the benchmark compared with (one entry per template).
        key: The template of an instance (default :func:`slot_template`, the public files' grain).
        draws: Draws of the train samples.
        seed: Seeds the draws.

    Returns:
        ``{"floor", "sd", "draws", "templates", "instances", "full"}``: ``floor`` is the mean over draws, ``sd``
        its standard deviation over draws, ``full`` the floor learned on every train instance at the same grain.
    """
    import random
    import statistics

    key = key or slot_template
    by_train, by_test = _by_template(family, train, key), _by_template(family, test, key)
    out: dict[str, Any] = {"floor": 0.0, "sd": 0.0, "draws": draws, "templates": len(by_test),
                           "instances": len(test), "full": 0.0}
    sizes = [int(k) for k in train_sizes if int(k) > 0]
    if not test or not sizes:
        return out
    rng = random.Random(seed)
    totals = [0.0] * draws
    full = 0.0
    memo: dict[tuple[int, str], float] = {}  # (train instance, constant) -> score: draws share their instances

    def learn(sample: list[Any], ctx: Any) -> str:
        got = {}
        for c in _candidates(sample):
            total = 0.0
            for inst in sample:
                if (id(inst), c) not in memo:
                    memo[(id(inst), c)] = _grade_constants(family, [inst], [c], ctx)[0][c]
                total += memo[(id(inst), c)]
            got[c] = total
        return max(got, key=lambda c: (got[c], -list(got).index(c)))

    with tempfile.TemporaryDirectory() as ws:
        ctx = _floor_context(family, Path(ws))
        for template in sorted(by_test):
            fit, apply = by_train.get(template, []), by_test[template]
            scored: dict[str, float] = {}

            def applied(constant: str, apply: list[Any] = apply, scored: dict[str, float] = scored) -> float:
                if constant not in scored:
                    scored[constant] = _grade_constants(family, apply, [constant], ctx)[0][constant]
                return scored[constant]

            if not fit:
                continue
            full += applied(learn(fit, ctx))
            for d in range(draws):
                totals[d] += applied(learn(rng.sample(fit, min(rng.choice(sizes), len(fit))), ctx))
    shares = [t / len(test) for t in totals]
    return {**out, "floor": round(statistics.fmean(shares), 6),
            "sd": round(statistics.stdev(shares), 6) if draws > 1 else 0.0, "full": round(full / len(test), 6)}


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")


def public_template_key(record: dict[str, Any]) -> str:
    """A public record's question template: EHRSQL's ``q_tag`` (slots and ``[time_filter]`` brackets unfilled)
    when it has one (mimic_iii, eicu), else its gold SQL with quoted values and numbers blanked (TREQS, whose
    records carry no template)."""
    if record.get("q_tag"):
        return str(record["q_tag"])
    return _NUMBER.sub("N", _QUOTED.sub("'V'", str(record.get("query", ""))))


def _public_answer(answer: Any) -> tuple[str, ...]:
    values = answer if isinstance(answer, (list, tuple)) else [answer]
    return tuple(sorted(str(v).strip().lower() for v in values))


def public_floor_record(name: str) -> dict[str, Any] | None:
    """The public files' per-template floor and train records per template stored for family ``name``
    (``medagentgym/tasks/data/<name>/public_floor.json``, written by ``scripts/public_template_floors.py``), or
    None when the family has none."""
    import json

    path = Path(__file__).resolve().parent / "data" / name / "public_floor.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def public_template_floor(train: list[dict[str, Any]], test: list[dict[str, Any]], *,
                          key: Callable[[dict[str, Any]], str] | None = None) -> dict[str, Any]:
    """The per-template floor of a public benchmark's task files, as issue 34 measured it: per template
    (:func:`public_template_key`), the most common train answer (its values as a set, lower-cased; the first
    seen wins a tie) submitted to that template's test records, scored by equality of those sets.

    On MedAgentGym's public files this gives mimic_iii 21.9 % (14.0 % without the wall-clock golds the importer
    drops), eicu 23.7 % (14.1 %), treqs 4.2 % (``scripts/public_template_floors.py``; the template values
    filled in, ``template``, give 3.1 %: nearly every filled template is unique).

    Returns:
        ``{"floor", "templates", "instances", "train_per_template"}``: ``train_per_template`` lists, per test
        template, its train records (what :func:`matched_template_floor` draws from).
    """
    counts: dict[str, Counter] = defaultdict(Counter)
    key = key or public_template_key
    for rec in train:
        counts[key(rec)][_public_answer(rec.get("answer"))] += 1
    hits = 0
    for rec in test:
        c = counts.get(key(rec))
        hits += bool(c) and c.most_common(1)[0][0] == _public_answer(rec.get("answer"))
    templates = sorted({key(r) for r in test})
    return {"floor": round(hits / len(test), 6) if test else 0.0, "templates": len(templates),
            "instances": len(test), "train_per_template": [sum(counts[t].values()) for t in templates]}


def _template_score(family: Any, fit: list[Any], apply: list[Any], ctx: Any) -> tuple[str | None, float]:
    """``(constant, mean test score)`` of one template: the constant chosen on ``fit`` applied to ``apply``."""
    if not fit:
        return None, 0.0
    if hasattr(family, "null_submissions"):
        fitted = no_information_floor(family, fit, draws=max(2, NULL_DRAWS // 2))
        name = fitted["constant"]
        scores = [s for i, inst in enumerate(apply)
                  for s, _ in _null_scores(family, inst, NULL_DRAWS, 1, i).get(name, [])]
        return name, (sum(scores) / len(scores)) if scores else 0.0
    if _is_program_family(apply):
        top = Counter(str(i.answer) for i in fit).most_common(1)[0][0]
        return top, sum(str(i.answer) == top for i in apply) / len(apply)
    totals, _ = _grade_constants(family, fit, _candidates(fit), ctx)
    constant = max(totals, key=lambda c: (totals[c], -list(totals).index(c)))
    applied, _ = _grade_constants(family, apply, [constant], ctx)
    return constant, applied[constant] / len(apply)


def null_metric(metric: Callable[[Any], float], predictors: dict[str, Callable[[Any], Any]], *, draws: int = 200,
                seed: Any = 0) -> dict[str, Any]:
    """The chance baseline of one ML instance: the best no-information predictor's metric, and its spread.

    Each predictor (a constant, a permutation of the gold labels = class-proportional random with the test
    shares, a permutation of the reference model's predictions across patients, uniformly random output) is
    drawn ``draws`` times and scored with ``metric``.

    Args:
        metric: ``metric(predictions) -> float`` against the instance's hidden labels.
        predictors: ``name -> draw(rng) -> predictions``; none may read a feature.
        draws: Draws per predictor (a constant is drawn once).
        seed: Seeds the draws (``numpy.random.default_rng(seed)``).

    Returns:
        ``{"chance", "chance_by", "high", "high_by", "sd"}``: ``chance`` = the best mean metric (the
        no-information baseline), ``high`` = the largest mean + :data:`NULL_Z` standard deviations over the
        predictors (what no-information predictions reach with probability ~0.1 %), ``sd`` = that predictor's
        standard deviation.

    Example:
        >>> null_metric(lambda p: float((p == y).mean()), {"permuted": lambda rng: rng.permutation(y)})["chance"]
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    stats = {}
    for name in sorted(predictors):
        first = predictors[name](rng)
        values = [metric(first)]
        if not getattr(predictors[name], "constant", False):
            values += [metric(predictors[name](rng)) for _ in range(draws - 1)]
        arr = np.asarray(values, dtype=float)
        stats[name] = (float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0)
    chance_by = max(stats, key=lambda n: (stats[n][0], n))
    high_by = max(stats, key=lambda n: (stats[n][0] + NULL_Z * stats[n][1], n))
    mean, sd = stats[high_by]
    high = math.ceil((mean + NULL_Z * sd) * 1e6) / 1e6  # rounded up: a constant at the level earns exactly 0
    return {"chance": round(stats[chance_by][0], 6), "chance_by": chance_by, "high": high, "high_by": high_by,
            "sd": round(sd, 6)}


def constant_predictor(value: Any) -> Callable[[Any], Any]:
    """A :func:`null_metric` predictor that returns ``value`` on every draw (drawn once)."""
    def draw(_rng: Any) -> Any:
        return value

    draw.constant = True  # type: ignore[attr-defined]
    return draw
