"""``medagentgym demo`` (``make demo``): what it reports and draws (fast), and one real run (slow).

The fast tests build the report and the figure from a made-up :class:`medagentgym.medcopilot.learning.RunResult`: the curve
shows every held-out evaluation with its interval, and the one-line verdict claims that the model learnt to read
the tool's output only when the numbers show it (a gain beyond both intervals, above the control). The slow test
runs the demo as ``make demo`` does (bwrap, defaults, seed 0) and checks the same things on a real run.
"""

from __future__ import annotations

import json

import pytest

from medagentgym.cli import demo
from medagentgym.medcopilot.learning import RunResult, wilson

CURVE_STEPS = (0, 10, 20, 30, 40, 50, 60)


def _run(before: float, after: float, control_after: float, n: int = 96) -> RunResult:
    points = [before + (after - before) * k / (len(CURVE_STEPS) - 1) for k in range(len(CURVE_STEPS))]
    curve = [(s, p, *wilson(p * n, n)) for s, p in zip(CURVE_STEPS, points)]
    return RunResult("grpo", demo.FAMILY, 0, before, after, curve, [(s, 0.2) for s in range(1, 61)], "test",
                     0.12, control_after, before, after, ["bwrap"], {"steps": 60, "group": 16, "eval_episodes": n})


def _summary(run: RunResult) -> dict:
    return {"success_before": run.before, "success_after": run.after, "control_before": run.control_before,
            "control_after": run.control_after, "eval_episodes": run.settings["eval_episodes"]}


def test_the_curve_plots_every_evaluation_with_its_interval():
    import matplotlib.pyplot as plt

    run = _run(0.2, 0.5, 0.03)
    fig = demo.figure(run, 16)
    try:
        ax = fig.axes[0]
        held = [line for line in ax.lines if list(line.get_xdata()) == list(CURVE_STEPS)]
        assert held and list(held[0].get_ydata()) == pytest.approx([p[1] for p in run.curve])
        # one vertical error bar per evaluation, from its interval's low to its high end
        bars = [c for c in ax.collections if len(getattr(c, "get_segments", list)()) == len(CURVE_STEPS)]
        assert bars, "no error bars on the held-out evaluations"
        ends = sorted((seg[0][0], round(min(seg[0][1], seg[1][1]), 4), round(max(seg[0][1], seg[1][1]), 4))
                      for seg in bars[0].get_segments())
        assert ends == sorted((s, round(lo, 4), round(hi, 4)) for s, _, lo, hi in run.curve)
    finally:
        plt.close(fig)


@pytest.mark.parametrize(("before", "after", "control", "claim"), [
    (0.20, 0.50, 0.03, "to read the tool's output"),
    (0.20, 0.26, 0.03, "inside the evaluation's noise"),  # a gain the two intervals do not separate
    (0.30, 0.25, 0.03, "nothing measurable"),
    (0.20, 0.50, 0.60, "not shown to come from reading"),  # as good with wrong observations: not reading them
    (0.20, 0.50, 0.42, "not shown to come from reading"),  # the control's interval reaches the success's: not shown
])
def test_the_verdict_claims_reading_only_when_the_numbers_show_it(before, after, control, claim):
    text = demo.verdict(_summary(_run(before, after, control)))
    assert claim in text, text
    report = demo.report({**_summary(_run(before, after, control)), "steps": 60, "group": 16, "chance": 1 / 9,
                          "heldout_records": 16, "sandbox_layers": ["bwrap"], "wall_s": 1.0, "cpu_s": 1.0,
                          "curve_png": "x.png"})
    assert f"learned          {text}" in report


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_make_demo_learns_to_read_the_tool_output(tmp_path, capsys):
    """``make demo``'s run (bwrap, default settings, seed 0): held-out success rises, the control stays low."""
    code = demo.main(["--json", "--out", str(tmp_path / "run"), "--tasks", str(tmp_path / "tasks"),
                      "--model", str(tmp_path / "tiny")])
    assert code == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    print(f"\n[demo] {summary['success_before']:.3f} -> {summary['success_after']:.3f}, control "
          f"{summary['control_before']:.3f} -> {summary['control_after']:.3f}, {summary['cpu_s']:.0f} s CPU")
    assert "learned          to read the tool's output" in out, out[-2000:]
    assert summary["success_after"] >= summary["success_before"] + 0.15
    assert summary["control_after"] < summary["success_after"] / 2
    assert [p[0] for p in summary["curve"]] == list(CURVE_STEPS)  # every evaluation is on the curve
    assert (tmp_path / "run" / "reward_curve.png").stat().st_size > 10_000
