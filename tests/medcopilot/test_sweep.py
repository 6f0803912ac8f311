"""Sweeps end to end on the tiny model: an SFT -> DPO -> GRPO chain (then a rerun that skips every stage), and a
grid over ``tasks.limit`` that ranks its runs and plots the metric against the limit.

Fast on purpose: the family is declared in the test's tmp dir with one-line questions and a single
``submit_answer`` turn (the prompt is only the shared system prompt plus the question), every stage trains 1
step, GRPO samples 2 generations of 8 tokens, and the runs execute in process (``train.py``'s ``main``), so
torch and TRL are imported once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _learning import declare_family

from medagentgym.medcopilot.config import RecipeError
from medagentgym.medcopilot.sweep import load_sweep, main, plan_runs

REPO = Path(__file__).resolve().parents[2]
FAMILY = "say_seven"
QUESTIONS = ["Submit the number 7.", "Please submit 7 as the answer.", "The answer is 7; submit it."]


def _declare_family(root):
    return declare_family(root, FAMILY, QUESTIONS)


def _shared(tiny_model_dir, tasks_root) -> list[str]:
    return [f"model.name_or_path={tiny_model_dir}", f"tasks.root={tasks_root}", f"tasks.families=[{FAMILY}]",
            "env.sandbox=local",
            "env.allow_unisolated=true", "env.workers=2", "env.max_turns=1", "rollout.concurrency=2",
            "rollout.max_new_tokens=8", "trainer.max_steps=1", "trainer.logging_steps=1", "trainer.report_to=[]",
            "trainer.disable_tqdm=true"]


@pytest.fixture()
def launch(train_main, quiet_training_env):
    """In-process train.py; records each (recipe, overrides) it ran."""
    calls = []

    def run(recipe, overrides):
        calls.append((recipe, overrides))
        return train_main([f"recipe={recipe}", *overrides])

    run.calls = calls
    return run


def test_sft_dpo_grpo_chain_runs_end_to_end_then_resumes_by_skipping(tiny_model_dir, tmp_path, launch, capsys):
    root = _declare_family(tmp_path / "tasks")
    out = tmp_path / "chain"
    sft_dpo = ["trainer.save_strategy='no'", "trainer.max_length=1024", "trainer.per_device_train_batch_size=2",
               "rollout.store={dir}/trajectories.jsonl"]
    file = tmp_path / "chain.yaml"
    file.write_text(yaml.safe_dump({
        "output_root": str(out),
        "overrides": _shared(tiny_model_dir, root),
        "stages": [
            {"name": "sft", "recipe": "sft_tiny", "overrides": sft_dpo},
            {"name": "dpo", "recipe": "dpo_tiny", "overrides": [*sft_dpo, "rollout.policy=oracle+constant:0"]},
            {"name": "grpo", "recipe": "grpo_tiny",
             "overrides": ["trainer.per_device_train_batch_size=2", "trainer.num_generations=2",
                           "trainer.max_completion_length=16",
                           # adapters: a merged adapter folder loads frozen, so full fine-tuning would train nothing
                           "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: all-linear}"]},
        ],
    }), encoding="utf-8")

    started = time.monotonic()
    assert main([str(file)], launch=launch) == 0
    first = capsys.readouterr().out
    assert [recipe for recipe, _ in launch.calls] == ["sft_tiny", "dpo_tiny", "grpo_tiny"]

    # each stage started from the previous stage's output and wrote its own summary and store
    prev = str(tiny_model_dir)
    for name, method in (("sft", "sft"), ("dpo", "dpo"), ("grpo", "grpo")):
        recipe = yaml.safe_load((out / name / "recipe.yaml").read_text())
        summary = json.loads((out / name / "run_summary.json").read_text())
        assert recipe["model"]["name_or_path"] == prev and recipe["output"]["dir"] == str(out / name)
        assert summary["method"] == method and summary["global_step"] == 1
        prev = str(out / name)
    assert (out / "sft" / "trajectories.jsonl").is_file() and (out / "dpo" / "trajectories.jsonl").is_file()
    adapter = json.loads((out / "dpo" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str((out / "sft").resolve())  # DPO trained on the merged SFT

    results = json.loads((out / "sweep_results.json").read_text())
    rows = {row["stage"]: row for row in results["stages"]}
    assert [r["method"] for r in results["stages"]] == ["sft", "dpo", "grpo"]
    assert rows["sft"]["train_loss"] > 0 and rows["grpo"]["reward_first"] is not None
    assert all(row["wall_s"] > 0 for row in rows.values())
    assert "stage chain" in first and "reward first→last" in first and str(out / "grpo") in first

    # the rerun trains nothing: every stage is finished, and the table is rebuilt from the summaries
    assert main([str(file)], launch=launch) == 0
    second = capsys.readouterr().out
    assert len(launch.calls) == 3 and second.count("(done, skipped)") == 3
    assert json.loads((out / "sweep_results.json").read_text())["stages"] == results["stages"]

    # a retrained SFT stage makes the finished DPO stage stale: refused, not silently skipped
    newer = (out / "dpo" / "run_summary.json").stat().st_mtime + 10
    os.utime(out / "sft" / "run_summary.json", (newer, newer))
    assert main([str(file)], launch=launch) == 2
    assert "stage 'dpo' finished before the stage it starts from ('sft')" in capsys.readouterr().err
    assert len(launch.calls) == 3
    print(f"\n[sweep-chain] SFT -> DPO -> GRPO + rerun: {time.monotonic() - started:.1f} s")


def test_grid_over_tasks_limit_ranks_and_plots(tiny_model_dir, tmp_path, launch, capsys):
    root = _declare_family(tmp_path / "tasks")
    out = tmp_path / "grid"
    file = tmp_path / "grid.yaml"
    file.write_text(yaml.safe_dump({
        "recipe": "sft_tiny", "output_root": str(out), "metric": "train_loss", "mode": "min",
        "overrides": [*_shared(tiny_model_dir, root), "trainer.save_strategy='no'", "trainer.max_length=1024",
                      "rollout.store={dir}/trajectories.jsonl"],
        "grid": {"tasks.limit": [1, 3]},
    }), encoding="utf-8")
    assert main([str(file)], launch=launch) == 0
    printed = capsys.readouterr().out

    # each run rolled out its own store of tasks.limit instances: the scaling study's data really varies
    for limit in (1, 3):
        store = out / f"limit{limit}" / "trajectories.jsonl"
        assert len(store.read_text().splitlines()) == limit
    results = json.loads((out / "sweep_results.json").read_text())
    values = [row["value"] for row in results["runs"]]
    assert len(values) == 2 and all(v is not None and v > 0 for v in values) and values == sorted(values)
    plot = out / "sweep_train_loss.png"
    assert results["plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.stat().st_size > 5000 and f"plot: {plot}" in printed


def test_chain_planning_links_stages_and_rejects_bad_files(tmp_path):
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump({"output_root": str(tmp_path / "o"), "overrides": ["trainer.max_steps=1"],
                                    "stages": [{"recipe": "sft_tiny"},
                                               {"recipe": "dpo_tiny", "overrides": ["rollout.policy=hf:{prev}"]}]}))
    first, second = plan_runs(load_sweep(file))
    assert (first.name, second.name) == ("1-sft_tiny", "2-dpo_tiny")
    assert f"model.name_or_path={first.output_dir}" in second.overrides
    assert f"rollout.policy=hf:{first.output_dir}" in second.overrides
    assert not any(o.startswith("model.name_or_path") for o in first.overrides)

    bad = [({"recipe": "sft_tiny", "grid": {"trainer.max_steps": [1]}, "stages": [{"recipe": "sft_tiny"}]},
            "exactly one of grid"),
           ({"stages": []}, "non-empty list"),
           ({"stages": [{"recipe": "sft_tiny", "overides": []}]}, "unknown key(s) overides"),
           ({"stages": [{"recipe": "sft_tiny", "name": "a"}, {"recipe": "dpo_tiny", "name": "a"}]}, "unique"),
           ({"stages": [{"recipe": "sft_tiny", "overrides": ["rollout.policy=hf:{prev}"]}]}, "undefined"),
           ({"stages": [{"recipe": "sft_tiny"}, {"recipe": "dpo_tiny", "overrides": ["trainer.bta=1"]}]},
            "sweep run '2-dpo_tiny'")]
    for data, message in bad:
        file.write_text(yaml.safe_dump(data))
        with pytest.raises(RecipeError, match=message.replace("(", r"\(").replace(")", r"\)")):
            plan_runs(load_sweep(file))


def test_sweeps_accept_ppo_and_verifier_runs_checked_against_their_own_args(tmp_path):
    file = tmp_path / "mixed.yaml"
    file.write_text(yaml.safe_dump({"output_root": str(tmp_path / "o"), "stages": [
        {"name": "sft", "recipe": "sft_tiny", "overrides": ["trainer.max_steps=1"]},
        {"name": "ppo", "recipe": "ppo_tiny", "overrides": ["trainer.max_steps=1", "trainer.kl_coef=0.1"]},
        {"name": "verifier", "recipe": "verifier_tiny", "overrides": ["trainer.eval_fraction=0.5"]}]}))
    runs = plan_runs(load_sweep(file))
    assert [r.name for r in runs] == ["sft", "ppo", "verifier"]
    assert f"model.name_or_path={runs[0].output_dir}" in runs[1].overrides

    grid = tmp_path / "ppo_grid.yaml"
    grid.write_text(yaml.safe_dump({"recipe": "ppo_tiny", "output_root": str(tmp_path / "g"),
                                    "grid": {"trainer.kl_coef": [0.02, 0.05], "trainer.cliprange": [0.1, 0.2]}}))
    assert len(plan_runs(load_sweep(grid))) == 4
    # PPO's own checks apply, with the run named
    grid.write_text(yaml.safe_dump({"recipe": "ppo_tiny", "grid": {"trainer.mini_batch_size": [3]}}))
    with pytest.raises(RecipeError, match=r"sweep run 'mini_batch_size3': trainer.mini_batch_size=3 is invalid"):
        plan_runs(load_sweep(grid))
    grid.write_text(yaml.safe_dump({"recipe": "ppo_tiny", "grid": {"trainer.max_stpes": [3]}}))
    with pytest.raises(RecipeError, match="did you mean 'max_steps'"):
        plan_runs(load_sweep(grid))


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("recipe: sft_tiny\ngrid:\n  trainer.max_steps: [1, 2\noutput_root: x\n", 4,
     "flow sequence that starts at line 3"),
    ("recipe: sft_tiny\ngrid: {trainer.max_steps: [1]}\n  metric: x\n", 3, "expected <block end>"),
    ("recipe: sft_tiny\n\tgrid: {}\n", 2, "found character '\\t'"),
])
def test_malformed_sweep_yaml_is_one_line_with_file_and_line(tmp_path, text, line, fragment):
    file = tmp_path / "broken.yaml"
    file.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "medagentgym", "sweep", str(file), "--dry-run"], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"sweep.py: error: {file}:{line}: ") and fragment in err and "--debug" in err
    debug = subprocess.run([sys.executable, "-m", "medagentgym", "sweep", str(file), "--debug"], cwd=REPO,
                           capture_output=True, text=True, timeout=600, check=False)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
