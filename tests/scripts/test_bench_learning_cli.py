"""scripts/bench_learning.py: its JSON line, the observation proof's rule and the seed-band PNG (fast).

The benchmark's runs take minutes each (``make test-slow`` runs the proof: tests/medcopilot/
test_observation_learning.py); here ``--summarize`` reads made-up run files, so what is checked is the summary:
per family and method seeds improved, median gain and collapses, the control, and when the proof holds.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_learning.py"


def _write(out: Path, method: str, family: str, seed: int, before: float, after: float,
           control_after: float | None = None, n: int = 96) -> None:
    curve = [[0, before, 0.0, 1.0], [30, (before + after) / 2, 0.0, 1.0], [60, after, 0.0, 1.0]]
    run = {"method": method, "family": family, "seed": seed, "before": before, "after": after,
           "gain": after - before, "curve": curve, "control_before": None if control_after is None else 0.12,
           "control_after": control_after, "settings": {"eval_episodes": n, "steps": 60}, "cpu_s": 100.0}
    (out / f"{method}-{family}-seed{seed}.json").write_text(json.dumps(run), encoding="utf-8")


def _summarize(out: Path) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--summarize", "--json", "--out", str(out)],
                          capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_json_line_has_every_family_and_method_and_the_proof(tmp_path):
    gains = [0.30, 0.25, -0.02, 0.20, 0.16]  # 4 of 5 improved, median 0.20
    for seed, gain in enumerate(gains):
        for method in ("grpo", "ppo"):
            _write(tmp_path, method, "toy_lookup", seed, 0.2, 0.2 + gain, control_after=0.03)
            _write(tmp_path, method, "say_number", seed, 0.2, 0.5)
            _write(tmp_path, method, "clinic_code", seed, 0.4, 0.1 if seed == 0 else 0.6)  # seed 0 collapses
    line = _summarize(tmp_path)
    for family in ("say_number", "clinic_code", "toy_lookup"):
        for method in ("grpo", "ppo"):
            s = line["families"][family][method]
            assert {"seeds_improved", "median_gain", "collapsed"} <= set(s) and s["seeds"] == 5
    toy = line["families"]["toy_lookup"]["grpo"]
    assert toy["seeds_improved"] == 4 and toy["median_gain"] == pytest.approx(0.20) and toy["collapsed"] == 0
    assert line["families"]["clinic_code"]["ppo"]["collapsed"] == 1
    assert line["control"]["grpo"]["not_above_chance"] and line["control"]["grpo"]["max_after"] == 0.03
    assert line["observation_proof"] == {"grpo": True, "ppo": True}
    assert Path(line["curves_png"]).stat().st_size > 10_000


def _bench():
    spec = importlib.util.spec_from_file_location("bench_learning", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("gains", "control", "holds"), [
    ([0.30, 0.25, -0.02, 0.20, 0.16], 0.03, True),  # 4 of 5 improved, median 0.20, no collapse, control 0.03
    ([0.30, 0.12, -0.02, 0.10, 0.14], 0.03, False),  # 4 of 5 improved, but the median gain is 0.12
    ([0.30, 0.25, -0.02, -0.01, 0.16], 0.03, False),  # 3 of 5 improved
    ([0.30, 0.25, 0.20, 0.16, -0.15], 0.03, False),  # one seed collapsed (0.20 -> 0.05)
    ([0.30, 0.25, 0.20, 0.10, 0.16], 0.25, False),  # the control is above chance (24 of 96 wrong observations right)
    ([0.30, 0.25, 0.20, 0.10, 0.16], 0.17, True),  # 16 of 96: 1/9 is still inside the interval
])
def test_the_proof_holds_only_when_every_condition_does(tmp_path, gains, control, holds):
    for seed, gain in enumerate(gains):
        _write(tmp_path, "grpo", "toy_lookup", seed, 0.2, 0.2 + gain, control_after=control)
    bench = _bench()
    runs = [json.loads(f.read_text(encoding="utf-8")) for f in sorted(tmp_path.glob("*.json"))]
    assert bench.proof(bench.summarize(runs), bench.control_summary(runs)) is holds


def _choice(out: Path, method: str, seed: int, choice: tuple[float, float], low: float, control_low: float) -> None:
    """A made-up toy_choice run: query-choice accuracy before/after, its paired interval's low end, the control's."""
    run = {"method": method, "family": "toy_choice", "seed": seed, "before": 0.27, "after": 0.5, "gain": 0.23,
           "curve": [[0, 0.27, 0.0, 1.0], [60, 0.5, 0.0, 1.0]], "control_before": 0.3, "control_after": 0.2,
           "settings": {"eval_episodes": 128, "steps": 60}, "cpu_s": 100.0, "choice_before": choice[0],
           "choice_after": choice[1], "choice_curve": [[0, choice[0]], [60, choice[1]]],
           "paired_choice": {"mean": choice[1] - choice[0], "low": low, "high": 1.0, "records": 128},
           "paired_success": {"mean": 0.23, "low": 0.1, "high": 0.3, "records": 128},
           "paired_control": {"mean": -0.1, "low": control_low, "high": 0.0, "records": 128}}
    (out / f"{method}-toy_choice-seed{seed}.json").write_text(json.dumps(run), encoding="utf-8")


@pytest.mark.parametrize(("runs", "control_low", "holds"), [
    ([((0.3, 0.6), 0.2)] * 4 + [((0.3, 0.35), -0.05)], -0.2, True),  # 4 of 5: +0.3 with the interval above 0
    ([((0.3, 0.6), 0.2)] * 3 + [((0.3, 0.35), -0.05)] * 2, -0.2, False),  # 3 of 5
    ([((0.3, 0.45), 0.05)] * 5, -0.2, False),  # intervals above 0 but +0.15 < +0.2
    ([((0.3, 0.6), -0.01)] * 5, -0.2, False),  # +0.3 but the intervals include 0
    ([((0.3, 0.6), 0.2)] * 5, 0.01, False),  # the swapped-cue control rose on a seed
])
def test_the_choice_proof_asks_gain_interval_and_a_flat_control(tmp_path, runs, control_low, holds):
    for seed, (choice, low) in enumerate(runs):
        _choice(tmp_path, "grpo", seed, choice, low, control_low if seed == 0 else -0.2)
    line = _summarize(tmp_path)
    assert line["choice_proof"] == {"grpo": holds}
    assert line["families"]["toy_choice"]["grpo"]["median_choice_before"] == 0.3


def test_a_stored_run_made_under_other_library_defaults_is_refused_not_reused(tmp_path, monkeypatch, capsys):
    """The resume key holds the library's defaults for the run's method and family (``default_settings``), so a run
    stored before a ``FAMILY_RL`` or ``WARM_DEFAULTS`` change is refused in one line, not counted as this one."""
    bench = _bench()
    argv = ["--methods", "grpo", "--families", "toy_choice", "--seeds", "1", "--model", str(tmp_path / "no-model"),
            "--out", str(tmp_path)]
    keyed = {**{k: None for k in bench.KEYED}, "eval_every": 10, "eval_episodes": 96,
             "defaults": json.loads(json.dumps(bench.default_settings("grpo", "toy_choice")))}
    stored = tmp_path / "grpo-toy_choice-seed0.json"
    run = {"method": "grpo", "family": "toy_choice", "seed": 0, "before": 0.3, "after": 0.5, "gain": 0.2,
           "curve": [], "control_before": None, "control_after": None, "settings": {}, "cpu_s": 1.0}
    stored.write_text(json.dumps({**run, "keyed": keyed}), encoding="utf-8")
    monkeypatch.setattr(bench, "one_run", lambda job: pytest.fail(f"ran {job} although it is stored"))

    def summary_reached(runs):
        raise LookupError(runs)  # the stored run reached the summary: reused (the summary is tested above)

    monkeypatch.setattr(bench, "table", summary_reached)
    with pytest.raises(LookupError) as reused:
        bench.main(argv)
    assert reused.value.args[0][0]["gain"] == 0.2 and "0 runs to do, 1 already in" in capsys.readouterr().out

    keyed["defaults"]["rl"].pop("per_device_train_batch_size")  # as stored before 4 records x 16 a step
    stored.write_text(json.dumps({**run, "keyed": keyed}), encoding="utf-8")
    with pytest.raises(SystemExit) as refused:
        bench.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2 and "was made with other settings" in err[-1] and "use another --out" in err[-1]


@pytest.mark.parametrize("extra, expected", [
    ([], [("ppo", "toy_retry"), ("ppo", "toy_choice"), ("grpo", "toy_lookup"), ("ppo", "toy_lookup")]),
    (["--methods", "grpo"], [("grpo", "toy_retry"), ("grpo", "toy_choice"), ("grpo", "toy_lookup")]),
    (["--families", "toy_choice"], [("grpo", "toy_choice"), ("ppo", "toy_choice")]),
])
def test_quick_runs_seed_0_of_every_rung_longest_first(tmp_path, monkeypatch, capsys, extra, expected):
    """``--quick`` alone is :data:`QUICK_RUNS` (every rung, seed 0, the 15-minute budget of issue 30), started
    longest first so two processes finish together; ``--methods``/``--families`` with it run their product."""
    bench = _bench()
    started = []

    def fake_run(job):
        started.append(job)
        return {"method": job["method"], "family": job["family"], "seed": job["seed"]}

    def summary_reached(runs):
        raise LookupError(runs)

    monkeypatch.setattr(bench, "one_run", fake_run)
    monkeypatch.setattr(bench, "table", summary_reached)
    with pytest.raises(LookupError):
        bench.main(["--quick", "--jobs", "1", "--model", str(tmp_path / "no-model"), "--out", str(tmp_path), *extra])
    assert [(j["method"], j["family"]) for j in started] == expected
    assert {j["seed"] for j in started} == {0} and {j["eval_every"] for j in started} == {20}
    assert [j["steps"] for j in started if j["family"] == "toy_retry"] in ([], [40])  # toy_retry stops at 40 steps
    assert {j["steps"] for j in started if j["family"] != "toy_retry"} <= {None}  # the others at their defaults
    if not extra:
        assert sorted(expected) == sorted(bench.QUICK_RUNS)
    assert f"{len(expected)} runs to do, 0 already in" in capsys.readouterr().out


def test_first_retry_is_summarised_per_method_without_a_control(tmp_path):
    """toy_retry runs (no control copy) get first-retry accuracy in the table, the summary and each run's line."""
    for seed, (after, low) in enumerate([(0.42, 0.05), (0.47, -0.1), (0.6, 0.2)]):
        run = {"method": "ppo", "family": "toy_retry", "seed": seed, "before": 0.3, "after": 0.4, "gain": 0.1,
               "curve": [[0, 0.3, 0.0, 1.0], [60, 0.4, 0.0, 1.0]], "control_before": None, "control_after": None,
               "settings": {"eval_episodes": 128, "steps": 60}, "cpu_s": 400.0, "choice_metric": "first retry",
               "choice_before": 0.25, "choice_after": after, "choice_curve": [[0, 0.25], [60, after]],
               "paired_choice": {"mean": after - 0.25, "low": low, "high": 1.0, "records": 64},
               "paired_success": {"mean": 0.1, "low": 0.0, "high": 0.2, "records": 128}}
        (tmp_path / f"ppo-toy_retry-seed{seed}.json").write_text(json.dumps(run), encoding="utf-8")
    line = _summarize(tmp_path)
    s = line["families"]["toy_retry"]["ppo"]
    assert s["median_choice_before"] == 0.25 and s["median_choice_after"] == 0.47
    assert s["seeds_choice_interval_above_0"] == 2 and s["seeds_choice_proof"] == 1  # +0.17 and +0.35; +0.22 has 0 inside
    assert line["choice_proof"] == {} and line["choice_control"] == {}
    assert {r["choice_metric"] for r in line["per_run"]} == {"first retry"}
