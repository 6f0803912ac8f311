"""env_client/evaluation.py: Pass@K and Best@K estimators, the error taxonomy, report, plots, leaderboard."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from medagentgym.env_client.evaluation import (
    bootstrap_interval,
    wilson_interval,
    ERROR_CLASSES,
    EvalError,
    best_at_k,
    classify_failure,
    evaluate,
    leaderboard,
    load_reports,
    pass_at_k,
    render_markdown,
    write_report,
)
from medagentgym.env_client.trajectory import FinalRecord, StepRecord, Trajectory, TrajectoryHeader


def step(action="code_execution", status="ok", error_kind=None, observation="", loop=False, lang="python"):
    act = None if action is None else ({"action": action, "lang": lang, "code": "x"} if action == "code_execution"
                                       else {"action": action})
    return StepRecord(turn=1, raw_text="...", action=act, observation=observation, status=status,
                      error_kind=error_kind, loop=loop, n_tokens=5)


def traj(task="toy_sql/test/0000", sample=0, *, correct=None, steps=(), reason=None, error=None, infra=True,
         family=None, category="c1", tokens=10, wall=0.5):
    steps = list(steps)
    verdict = None if correct is None else {"correct": correct, "score": float(correct), "error": error,
                                            "infra": infra}
    if verdict is not None:
        steps.append(step("submit_answer", "submitted"))
    reason = reason or ("submitted" if verdict is not None else "max_turns")
    header = TrajectoryHeader(task_id=task, family=family or task.split("/")[0], category=category, split="test",
                              policy="p", sample_idx=sample, config_hash="h")
    final = FinalRecord(verdict=verdict, reward=None if error and infra else float(bool(correct)),
                        terminated=verdict is not None, truncated=reason in ("max_turns", "loop"), reason=reason,
                        turns=len(steps), total_tokens=tokens, wall_s=wall)
    return Trajectory(header=header, prompt=[], steps=steps, final=final)


def brute_pass(n, c, k):
    subsets = list(itertools.combinations([1] * c + [0] * (n - c), k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration_and_edges():
    for n, c, k in [(5, 2, 1), (5, 2, 3), (6, 0, 2), (4, 4, 1), (7, 3, 5)]:
        assert pass_at_k(n, c, k) == pytest.approx(brute_pass(n, c, k))
    assert pass_at_k(4, 1, 1) == 0.25 and pass_at_k(4, 1, 4) == 1.0
    with pytest.raises(EvalError, match="1 <= k <= n"):
        pass_at_k(3, 1, 4)


def test_best_at_k_matches_enumeration_of_subsets():
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 6)
        correct = [rng.random() < 0.4 for _ in range(n)]
        scores = [rng.choice([0.1, 0.5, 0.9]) for _ in range(n)]  # ties on purpose
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            want = sum(correct[min(s, key=lambda i: (-scores[i], i))] for s in subsets) / len(subsets)
            assert best_at_k(correct, scores, k) == pytest.approx(want)


@pytest.mark.parametrize("t, expected", [
    ({"correct": False, "error": "grader crashed"}, "grader_error"),
    ({"correct": False, "error": "the submission made the grader raise", "infra": False}, "wrong_answer"),
    ({"reason": "loop", "steps": [step(loop=True)]}, "loop"),
    ({"correct": False, "steps": [step(status="error", error_kind="python_error")]}, "wrong_answer"),
    ({"steps": [step(status="error", error_kind="syntax_error")]}, "syntax_error"),
    ({"steps": [step(status="error", error_kind="python_error",
                      observation="FileNotFoundError: [Errno 2] No such file: '/data/x.csv'")]}, "io_error"),
    ({"steps": [step(status="error", error_kind="sql_error", observation="no such table: labs")]}, "io_error"),
    ({"steps": [step(status="error", error_kind="timeout")]}, "runtime_error"),
    ({"steps": [step(action=None, status="parse_error")]}, "invalid_action"),
    ({"steps": [step(status="ok")]}, "truncated"),
    ({"steps": [step(status="ok")], "reason": "closed"}, "no_submission"),
])
def test_error_taxonomy(t, expected):
    assert expected in ERROR_CLASSES
    assert classify_failure(traj(**t)) == expected


def test_evaluate_success_passk_errors_actions_and_cost():
    trajs = [traj("toy_sql/test/0000", 0, correct=True, steps=[step()]),
             traj("toy_sql/test/0000", 1, correct=False),
             traj("toy_sql/test/0001", 0, correct=False, category="c2"),
             traj("toy_sql/test/0001", 1, steps=[step(action=None, status="parse_error")], category="c2"),
             traj("medcalcbench/test/0000", 0, correct=True, steps=[step(lang="sql")]),
             traj("medcalcbench/test/0000", 1, correct=True)]
    r = evaluate(trajs, base_rates={"toy_sql": 0.5})
    assert r.episodes == 6 and r.tasks == 3 and r.k == 2 and r.policy == "p"
    assert r.success_rate == pytest.approx(0.5)
    assert r.pass_at_k == {"1": pytest.approx(0.5), "2": pytest.approx(2 / 3)}
    row = r.per_family["toy_sql"]
    assert {k: row[k] for k in ("n", "success_rate", "pass_at_k", "base_rate", "errors", "infra_failures")} == {
        "n": 4, "success_rate": 0.25, "pass_at_k": 0.5, "base_rate": 0.5,
        "errors": {"wrong_answer": 2, "invalid_action": 1}, "infra_failures": 0}
    assert row["ci_method"] == "wilson-tasks" and 0.0 <= row["ci95"][0] <= 0.25 <= row["ci95"][1] <= 1.0
    assert row["tasks"] == 2 and row["se"] == pytest.approx(0.25)  # task shares 0.5 and 0.0
    assert r.per_family["medcalcbench"]["success_rate"] == 1.0
    assert r.per_category["toy_sql/c2"] == {"n": 2, "success_rate": 0.0}
    assert r.errors == {"wrong_answer": 2, "invalid_action": 1}
    assert sum(r.error_shares.values()) == pytest.approx(1.0)
    assert r.actions == {"submit_answer": 5, "code_execution:python": 1, "code_execution:sql": 1, "invalid": 1}
    assert r.best_at_k is None
    assert r.total_tokens == 60 and r.mean_wall_s == 0.5
    scores = {t.key: (1.0 if t.final.verdict and t.final.verdict["correct"] else 0.0) for t in trajs}
    best = evaluate(trajs, scores=scores).best_at_k
    assert best == {"1": pytest.approx(0.5), "2": pytest.approx(2 / 3)}  # a perfect scorer reaches Pass@K
    with pytest.raises(EvalError, match="scores lack"):
        evaluate(trajs, scores={trajs[0].key: 1.0})
    with pytest.raises(EvalError, match="no trajectories"):
        evaluate([])


def test_grader_error_is_counted_not_success():
    r = evaluate([traj(correct=True, error="boom")])
    assert r.success_rate == 0.0 and r.grader_errors == 1 and r.errors == {"grader_error": 1}


def test_report_files_and_plots_are_written(tmp_path):
    trajs = [traj(f"toy_sql/test/{i:04d}", j, correct=(i + j) % 3 == 0) for i in range(4) for j in range(3)]
    scores = {t.key: float(t.header.sample_idx == 0) for t in trajs}
    r = evaluate(trajs, scores=scores, meta={"split": "test"})
    paths = write_report(r, tmp_path)
    assert {p.name for p in paths} == {"report.json", "report.md", "success_by_family.png", "pass_at_k.png",
                                       "errors.png"}
    for p in paths:
        assert p.stat().st_size > 500
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["pass_at_k"]["3"] == r.pass_at_k["3"] and data["best_at_k"] is not None
    md = render_markdown(r)
    assert "## Errors of failed episodes" in md and "wrong_answer" in md and "| 3 |" in md
    assert not list(tmp_path.glob(".*tmp*"))  # atomic writes leave no temporaries


def test_leaderboard_table_and_plot(tmp_path):
    a = evaluate([traj("toy_sql/test/0000", correct=True), traj("medcalcbench/test/0000", correct=False)],
                 policy="good")
    b = evaluate([traj("toy_sql/test/0000", correct=False)], policy="bad")
    write_report(a, tmp_path / "a", plots=False)
    write_report(b, tmp_path / "b", plots=False)
    reports = load_reports([tmp_path / "a", tmp_path / "b" / "report.json"])
    table = leaderboard(reports, tmp_path / "lb.png")
    lines = table.splitlines()
    assert lines[0] == ("| policy | episodes | success | SE | 95 % CI | macro | pass@1 | infra failures | "
                        "medcalcbench | toy_sql |")
    assert lines[2].startswith("| good | 2 | 50.0% |") and lines[3].endswith("|  | 0.0% |")  # not evaluated: empty
    assert (tmp_path / "lb.png").stat().st_size > 1000
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(EvalError, match="not a medagentgym eval report"):
        load_reports([tmp_path / "junk.json"])
    assert math.isclose(reports[0]["success_rate"], 0.5)


def test_importing_evaluation_loads_no_plotting_or_training_stack():
    import subprocess
    import sys

    code = ("import sys, medagentgym.env_client.evaluation; print([m for m in ('matplotlib', 'torch', 'transformers', 'trl', "
            "'medagentgym.medcopilot') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_infrastructure_failures_count_as_failures_and_are_reported_apart():
    trajs = [traj("toy_sql/test/0000", correct=True), traj("toy_sql/test/0001", correct=True)]
    failures = [{"task_id": "toy_sql/test/0002", "family": "toy_sql", "category": "c1", "sample_idx": 0,
                 "error": "PolicyError: 401 ..."},
                {"task_id": "toy_sql/test/0003", "family": "toy_sql", "category": "c1", "sample_idx": 0,
                 "error": "PolicyError: 401 ..."}]
    r = evaluate(trajs, failures=failures)
    assert r.episodes == 4 and r.tasks == 4 and r.success_rate == 0.5  # not 2/2
    assert r.infra_failures == 2 and r.errors == {"infra_error": 2}
    assert r.per_family["toy_sql"]["infra_failures"] == 2 and r.per_family["toy_sql"]["n"] == 4
    assert "2 episode(s) failed to run" in render_markdown(r)
    only_failures = evaluate([], failures=failures, policy="down")
    assert only_failures.success_rate == 0.0 and only_failures.infra_failures == 2


def test_intervals():
    lo, hi = wilson_interval(8, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.49, 0.943)  # the textbook value
    assert wilson_interval(0, 0) == (0.0, 1.0) and wilson_interval(0, 20)[0] == 0.0
    r = evaluate([traj(f"toy_sql/test/{i:04d}", correct=i < 3) for i in range(10)])
    assert r.ci_method == "wilson" and r.ci95[0] < 0.3 < r.ci95[1]
    groups = [[True, True], [False, False], [True, False]] * 10
    lo, hi = bootstrap_interval(groups, seed=1)
    assert lo < 0.5 < hi and bootstrap_interval(groups, seed=1) == (lo, hi)  # seeded: reproducible


def test_leaderboard_never_ranks_different_task_sets_side_by_side(tmp_path):
    a = evaluate([traj("toy_sql/test/0000", correct=True)], policy="a", meta={"task_set": "set-one"})
    b = evaluate([traj("toy_sql/test/0001", correct=False)], policy="b", meta={"task_set": "set-two"})
    table = leaderboard([a.to_dict(), b.to_dict()])
    assert "2 different task sets" in table and "### Task set `set-one`" in table and "### Task set `set-two`" in table
    same = leaderboard([a.to_dict(), evaluate([traj("toy_sql/test/0000")], policy="c",
                                              meta={"task_set": "set-one"}).to_dict()])
    assert "different task sets" not in same and same.count("| policy |") == 1


def test_suites_are_the_papers_disjoint_id_and_ood_sets():
    from medagentgym import tasks

    from medagentgym.env_client.evaluation import ID_FAMILIES, OOD_FAMILIES

    assert len(ID_FAMILIES) == 8 and len(OOD_FAMILIES) == 4 and not set(ID_FAMILIES) & set(OOD_FAMILIES)
    # The two smoke/learning-check families are in neither suite.
    assert set(ID_FAMILIES) | set(OOD_FAMILIES) == set(tasks.names()) - {"toy_sql", "toy_lookup", "toy_choice", "toy_retry"}


def test_intervals_clustered_over_tasks_never_collapse_when_tasks_agree():
    """70 tasks, K = 2, every sample correct: Wilson over the 70 tasks, not a point at 100 %."""
    trajs = [traj(f"toy_sql/test/{i:04d}", k, correct=True) for i in range(70) for k in range(2)]
    r = evaluate(trajs)
    assert r.ci_method == "wilson-tasks" and r.success_rate == 1.0
    assert r.ci95 == [pytest.approx(0.948, abs=1e-3), 1.0] and r.se == 0.0
    # K = 1: Wilson over episodes; K = 2 with the same successes per task counts tasks, not episodes (wider)
    one = evaluate([traj(f"toy_sql/test/{i:04d}", correct=i < 7) for i in range(10)])
    two = evaluate([traj(f"toy_sql/test/{i:04d}", k, correct=i < 7) for i in range(10) for k in range(2)])
    assert one.ci95 == two.ci95 and one.ci_method == "wilson" and two.ci_method == "wilson-tasks"
    from statsmodels.stats.proportion import proportion_confint

    assert one.ci95 == pytest.approx(list(proportion_confint(7, 10, method="wilson")), abs=1e-6)
    # the former bootstrap over tasks collapsed exactly here
    assert bootstrap_interval([[True, True]] * 70) == (1.0, 1.0)


def test_macro_average_beside_micro_with_standard_errors():
    trajs = ([traj(f"toy_sql/test/{i:04d}", correct=True) for i in range(8)]
             + [traj(f"medcalcbench/test/{i:04d}", correct=i == 0) for i in range(2)])
    r = evaluate(trajs)
    assert r.success_rate == pytest.approx(0.9) and r.macro_success_rate == pytest.approx(0.75)
    assert r.per_family["medcalcbench"]["se"] == pytest.approx(0.5) and r.per_family["toy_sql"]["se"] == 0.0
    assert r.macro_se == pytest.approx(0.25)  # sqrt(0.5^2 + 0^2) / 2
    md = render_markdown(r)
    assert "macro over 2 families: 75.0% ± 25.0% SE" in md and "| **macro (mean of families)** |" in md


def _table_rows(md: str, header_start: str) -> list[list[str]]:
    """Parse the Markdown table whose header starts with ``header_start`` (cells split on unescaped pipes)."""
    import re

    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    width = len(rows[0])
    assert all(len(r) == width for r in rows), "a row has more or fewer cells than the header"
    return [rows[0]] + rows[2:]


def test_markdown_cells_are_escaped_so_an_answer_with_a_newline_or_pipe_keeps_the_table():
    floor = {"floor": 0.05, "constant": "a|b\nc", "bound": 0.1, "binary": False, "exceeds": False}
    r = evaluate([traj("toy_sql/test/0000", correct=True)], policy="pol|icy\nname", floors={"toy_sql": floor},
                 meta={"note": "x|y\nz", "task_set": "t"})
    md = render_markdown(r)
    fam = _table_rows(md, "| family |")
    assert fam[1][0] == "toy_sql" and fam[1][8] == "5.0% (`a\\|b\\nc`)"
    prov = dict(_table_rows(md, "| | |")[1:])
    assert prov["note"] == "`x\\|y\\nz`"
    assert md.splitlines()[0] == "# Evaluation: pol\\|icy\\nname"
    board = leaderboard([r.to_dict()])
    assert _table_rows(board, "| policy |")[1][0] == "pol\\|icy\\nname"


def test_leaderboard_has_an_infra_column_shows_an_all_failed_run_and_draws_one_plot_per_task_set(tmp_path):
    ok = evaluate([traj("toy_sql/test/0000", correct=False), traj("toy_sql/test/0001", correct=True)], policy="ok",
                  meta={"task_set": "one"})
    failures = [{"task_id": f"toy_sql/test/000{i}", "family": "toy_sql", "sample_idx": 0, "error": "down"}
                for i in range(2)]
    down = evaluate([], failures=failures, policy="down", meta={"task_set": "one"})
    other = evaluate([traj("medcalcbench/test/0000", correct=True)], policy="else", meta={"task_set": "two"})
    assert down.all_failed and "**All 2 episodes failed to run**" in render_markdown(down)
    table = leaderboard([down.to_dict(), ok.to_dict(), other.to_dict()], tmp_path / "lb.png")
    rows = _table_rows(table, "| policy |")
    assert rows[0][:8] == ["policy", "episodes", "success", "SE", "95 % CI", "macro", "pass@1", "infra failures"]
    assert rows[1][0] == "ok" and rows[1][7] == "0"
    assert rows[2][0] == "down (**all episodes failed to run**)" and rows[2][2] == "–" and rows[2][7] == "2"
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["lb_one.png", "lb_two.png"]
    from medagentgym.env_client.evaluation import leaderboard_plots

    assert leaderboard_plots([ok.to_dict()], tmp_path / "single.png") == [tmp_path / "single.png"]


def _captured_figures(monkeypatch):
    """The matplotlib figures the plot writers save (their axes are inspected instead of the PNG pixels)."""
    import medagentgym.env_client.evaluation as evaluation

    figures = []
    real = evaluation._save
    monkeypatch.setattr(evaluation, "_save", lambda fig, path: (figures.append(fig), real(fig, path)))
    return figures


def test_plots_keep_rates_inside_0_100_and_name_each_run_once(tmp_path, monkeypatch):
    from medagentgym.env_client.evaluation import leaderboard_plots, write_plots

    figures = _captured_figures(monkeypatch)
    # a low macro rate with a wide standard error: its ±1.96 SE bar used to reach below 0 %; the axis went to 130 %
    trajs = [traj(f"toy_sql/test/{i:04d}", correct=i == 0) for i in range(3)]
    trajs += [traj(f"medcalcbench/test/{i:04d}", correct=False) for i in range(3)]
    report = evaluate(trajs, policy="p")
    assert report.macro_se and report.macro_success_rate - 1.96 * report.macro_se < 0
    write_plots(report, tmp_path)
    ax = figures[0].axes[0]
    assert ax.get_ylim() == (0.0, 100.0)
    for collection in ax.collections:  # error bars are LineCollections of vertical segments
        for segment in getattr(collection, "get_segments", list)():
            assert all(0.0 <= y <= 100.0 for _, y in segment), segment
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels and len(labels) == len(set(labels))
    figures.clear()
    twice = [report.to_dict(), report.to_dict()]  # the same policy evaluated twice over one task set
    leaderboard_plots(twice, tmp_path / "lb.png")
    ax = figures[0].axes[0]
    assert ax.get_ylim()[1] <= 100.0
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["p", "p #2"]
