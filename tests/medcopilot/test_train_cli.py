"""train.py: recipe + dotted overrides, --dry-run validates without loading a model, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from medagentgym.medcopilot.config import RECIPES_DIR, RecipeError
from medagentgym.medcopilot.trainers import METHODS, get_trainer

REPO = Path(__file__).resolve().parents[2]
ALL_RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


@pytest.mark.slow  # its in-process twin: test_every_recipe_passes_dry_run; train.py as a script: test_grpo, test_ppo
def test_dry_run_subprocess_prints_resolved_recipe_and_loads_nothing(tmp_path):
    out = tmp_path / "never_written"
    proc = subprocess.run(
        [sys.executable, "train.py", "recipe=grpo_tiny", "--dry-run", "model.name_or_path=/nonexistent/model",
         f"output.dir={out}", "trainer.max_steps=7"],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout.split("# resolved recipe 'grpo_tiny'\n")[1].split("\n\n")[0])
    assert resolved["method"] == "grpo" and resolved["trainer"]["max_steps"] == 7
    assert resolved["model"]["name_or_path"] == "/nonexistent/model"  # never loaded, so no error
    assert "is valid (families toy_sql found; trainer section checked by trl.GRPOConfig)" in proc.stdout
    assert not out.exists()


@pytest.mark.parametrize("name", ALL_RECIPES)
def test_every_recipe_passes_dry_run(name, train_main, capsys, tmp_path):
    assert train_main([f"recipe={name}", "--dry-run", f"output.dir={tmp_path / 'o'}"]) == 0
    printed = capsys.readouterr().out
    assert f"# resolved recipe {name!r}" in printed and "nothing loaded or written" in printed
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("argv", "expected"), [
    (["recipe=sft_tiny", "--dry-run", "trainer.warmup_ratio=0.1"],
     "unknown key 'trainer.warmup_ratio': did you mean 'warmup_steps'?"),
    (["recipe=sft_tiny", "--dry-run", "modle.lora=null"], "did you mean 'model'?"),
    (["recipe=sft_tyni"], "did you mean 'sft_tiny'?"),
    (["trainer.max_steps=1"], "no recipe given"),
    (["recipe=sft_tiny", "--fast"], "unknown flag '--fast'"),
    (["recipe=sft_tiny", "max_steps"], "is not key=value"),
    (["recipe=grpo_tiny", "trainer.max_steps=abc", "--dry-run"],
     "trainer.max_steps='abc' has the wrong type: trl.GRPOConfig expects int"),
    (["recipe=ppo_tiny", "trainer.max_steps=abc", "--dry-run"], "trainer.max_steps='abc' has the wrong type"),
    (["recipe=grpo_tiny", "tasks.families=[toy_sq]", "--dry-run"], "did you mean `toy_sql`?"),
    (["recipe=grpo_tiny", "reward.weights.loop_penality=0.1", "--dry-run"],
     "unknown reward term reward.weights.loop_penality: did you mean 'loop_penalty'?"),
])
def test_errors_are_one_line_and_exit_2(argv, expected, train_main, capsys):
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and expected in err and "--debug" in err


def test_malformed_recipe_file_is_one_line_with_its_line(train_main, capsys, tmp_path):
    bad = tmp_path / "mine.yaml"
    bad.write_text("method: sft\nmodel:\n  name_or_path: [x\ntrainer: {max_steps: 1}\n")
    assert train_main([f"recipe={bad}", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{bad}:4: " in err and "flow sequence that starts at line 3" in err
    assert "Traceback" not in err


def test_debug_shows_the_traceback(train_main):
    with pytest.raises(RecipeError, match="did you mean 'model'"):
        train_main(["recipe=sft_tiny", "modle.lora=null", "--debug"])


def test_help(train_main, capsys):
    assert train_main(["--help"]) == 0
    assert "accelerate launch train.py recipe=" in capsys.readouterr().out


def test_dispatch_table():
    assert set(METHODS) == {"sft", "dpo", "grpo", "ppo", "verifier"}
    assert callable(get_trainer("sft").run) and callable(get_trainer("dpo").run)
    with pytest.raises(RecipeError, match="method='rl' is unknown"):
        get_trainer("rl")


SWEEPS = sorted((RECIPES_DIR / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_bundled_sweep_validates(path):
    from medagentgym.medcopilot.sweep import load_sweep, plan_runs

    sweep = load_sweep(path)
    runs = plan_runs(sweep)
    n = len(sweep.stages)
    for values in sweep.grid.values():
        n = max(n, 1) * len(values)
    assert len(runs) == n and len({r.name for r in runs}) == n
    assert all(str(r.output_dir).startswith(sweep.output_root) for r in runs)
    by_name = {r.name: r for r in runs}
    for prev, run in zip(runs, runs[1:] if sweep.stages else []):
        # a chain: each stage starts from the one it names (``from:``, branching chains), else from the last
        source = by_name[run.start] if getattr(run, "start", None) else prev
        assert f"model.name_or_path={source.output_dir}" in run.overrides


def test_sweep_plan_rank_and_errors(tmp_path, capsys):
    import json

    from medagentgym.medcopilot.sweep import load_sweep, main, plan_runs, rank

    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump({"recipe": "sft_tiny", "overrides": ["trainer.max_steps=1"],
                                    "grid": {"trainer.learning_rate": [1.0e-4, 1.0e-3]}, "metric": "train_loss",
                                    "output_root": str(tmp_path / "runs")}))
    sweep = load_sweep(file)
    runs = plan_runs(sweep)
    assert [r.name for r in runs] == ["learning_rate0.0001", "learning_rate0.001"]
    assert "trainer.learning_rate=0.001" in runs[1].overrides
    (runs[0].output_dir).mkdir(parents=True)
    (runs[0].output_dir / "run_summary.json").write_text(json.dumps({"metrics": {"train_loss": 1.5}}))
    ranked = rank(sweep, runs)
    assert [(r["name"], r["value"]) for r in ranked] == [("learning_rate0.0001", 1.5), ("learning_rate0.001", None)]

    # a failing launcher stops the sweep with its status and one line; the finished run is skipped
    assert main([str(file), "--launcher", "sh -c 'exit 3' --"]) == 3
    captured = capsys.readouterr()
    assert "(done, skipped)" in captured.out and "exited with status 3" in captured.err.strip()

    file.write_text(yaml.safe_dump({"recipe": "sft_tiny", "grid": {"trainer.lerning_rate": [1]}}))
    assert main([str(file), "--dry-run"]) == 2
    assert "did you mean 'learning_rate'" in capsys.readouterr().err
    file.write_text(yaml.safe_dump({"recipe": "sft_tiny", "grid": {}, "metrik": "x"}))
    with pytest.raises(RecipeError, match="unknown sweep key"):
        load_sweep(file)


def test_sweep_command_runs_the_shared_logic(capsys):
    """``medagentgym sweep FILE --dry-run`` through the CLI's own ``main`` (its subprocess form: test_sweep's
    malformed-YAML tests, and the slow twin below)."""
    from medagentgym.cli import main

    assert main(["sweep", str(REPO / "recipes/sweeps/pipeline_qwen7b.yaml"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "a chain of 3 stages" in printed and "model.name_or_path=runs/sweeps/pipeline_qwen7b/dpo" in printed


@pytest.mark.slow
def test_sweep_script_runs_the_shared_logic():
    proc = subprocess.run([sys.executable, "-m", "medagentgym", "sweep", "recipes/sweeps/pipeline_qwen7b.yaml", "--dry-run"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "a chain of 3 stages" in proc.stdout and "model.name_or_path=runs/sweeps/pipeline_qwen7b/dpo" in proc.stdout


def test_bundled_recipes_are_package_data_found_by_name_from_any_folder(tmp_path, monkeypatch, train_main, capsys):
    """The recipes, accelerate configs and sweeps ship inside the ``medcopilot`` package (an installed package has
    them; ``tests/test_packaging.py`` installs one), a clone's ``recipes/`` is the same folder, names resolve from any
    working directory, and a user's own recipe or sweep file is read by its path."""
    import tomllib

    from medagentgym import medcopilot
    from medagentgym.medcopilot.config import load_recipe, resolve_recipe_path
    from medagentgym.medcopilot.sweep import SWEEPS_DIR, load_sweep

    package = Path(medcopilot.__file__).resolve().parent
    assert RECIPES_DIR.is_relative_to(package) and SWEEPS_DIR == RECIPES_DIR / "sweeps"
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["medagentgym.medcopilot"]
    shipped = {path for pattern in globs for path in package.glob(pattern)}
    assert shipped == set(RECIPES_DIR.rglob("*.yaml")) and len(shipped) > len(ALL_RECIPES) >= 10
    assert {p.parent.name for p in shipped} == {"recipes", "accelerate", "sweeps"}
    assert (REPO / "recipes").resolve() == RECIPES_DIR  # the documented recipes/... paths of a clone

    monkeypatch.chdir(tmp_path)  # no recipes/ here
    assert resolve_recipe_path("sft_tiny") == RECIPES_DIR / "sft_tiny.yaml"
    assert [stage.recipe for stage in load_sweep("pipeline_tiny").stages] == ["sft_tiny", "dpo_tiny", "grpo_tiny"]
    assert train_main(["recipe=sft_tiny", "--dry-run"]) == 0
    assert "recipe 'sft_tiny' is valid" in capsys.readouterr().out
    # a user's own files, named like the bundled ones: their path wins, relative or absolute
    (tmp_path / "mine").mkdir()
    own = tmp_path / "mine" / "sft_tiny.yaml"
    own.write_text((RECIPES_DIR / "sft_tiny.yaml").read_text().replace("max_steps: 5", "max_steps: 3"))
    assert load_recipe("sft_tiny").trainer["max_steps"] == 5
    assert load_recipe("mine/sft_tiny.yaml").trainer["max_steps"] == load_recipe(own).trainer["max_steps"] == 3
    sweep = tmp_path / "mine" / "pipeline_tiny.yaml"
    sweep.write_text(yaml.safe_dump({"recipe": str(own), "grid": {"trainer.seed": [1, 2]}, "output_root": "o"}))
    assert load_sweep("mine/pipeline_tiny.yaml").recipe == str(own)
    with pytest.raises(RecipeError, match=r"recipe 'recipes/sft_tyni.yaml' not found .* did you mean 'sft_tiny'"):
        load_recipe("recipes/sft_tyni.yaml")
    with pytest.raises(RecipeError, match=r"sweep file 'pipline_tiny' not found; bundled sweeps .*pipeline_tiny"):
        load_sweep("pipline_tiny")


def test_sweep_runs_train_as_a_module_an_installed_package_has(monkeypatch):
    from medagentgym.medcopilot import sweep

    calls = []
    monkeypatch.setattr(sweep.subprocess, "call", lambda argv: calls.append(argv) or 0)
    assert sweep.subprocess_launch()("sft_tiny", ["trainer.max_steps=1"]) == 0
    assert sweep.subprocess_launch("accelerate launch --num_processes 2")("grpo_tiny", []) == 0
    assert calls == [[sys.executable, "-m", "medagentgym.cli.train", "recipe=sft_tiny", "trainer.max_steps=1"],
                     ["accelerate", "launch", "--num_processes", "2", "-m", "medagentgym.cli.train",
                      "recipe=grpo_tiny"]]


def test_interrupt_message_names_the_checkpoint_to_resume_from(tmp_path):
    from medagentgym.cli import train
    from medagentgym.medcopilot.config import load_recipe

    cfg = load_recipe("sft_tiny", [f"output.dir={tmp_path / 'run'}"])
    assert "no checkpoint saved yet" in train._saved(cfg)
    for step in (2, 10, 4):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir(parents=True)
    assert train._saved(cfg) == f"checkpoint-10 saved in {tmp_path / 'run'}; rerun the same command to resume from it"
    assert train._saved(None) == "nothing was started"
