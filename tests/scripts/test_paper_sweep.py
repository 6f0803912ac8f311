"""The paper's runbook end to end on the tiny model, CPU only (recipes/sweeps/paper_tiny.yaml): base -> SFT -> DPO,
SFT -> PPO and SFT -> GRPO, every stage exported and evaluated on the per-family test sets of both suites, and the
paper table written as Markdown, JSON and PNG; a rerun skips every stage and evaluation.

Slow: the 12 families are built at tiny size and 5 models x 2 suites are evaluated (about 14 minutes on a busy
2-core machine; training, export and evaluation run in this process, so torch and TRL load once).
"""

from __future__ import annotations

import json

import pytest
import yaml

from medagentgym.medcopilot.config import RECIPES_DIR
from medagentgym.medcopilot.sweep import main
from medagentgym.tasks import SUITES

pytestmark = pytest.mark.slow


def test_tiny_paper_sweep_writes_the_table_then_resumes(tiny_model_dir, tmp_path, train_main, load_script,
                                                         quiet_training_env, sandbox_backend, capsys):
    data = yaml.safe_load((RECIPES_DIR / "sweeps" / "paper_tiny.yaml").read_text())
    tasks_root = tmp_path / "tasks"
    data["overrides"] += [f"model.name_or_path={tiny_model_dir}", f"tasks.root={tasks_root}",
                          f"env.sandbox={sandbox_backend}",
                          f"env.allow_unisolated={sandbox_backend == 'local'}", "trainer.report_to=[]"]
    args = data["evaluate"]["args"]
    args[args.index("artifacts/tasks")] = str(tasks_root)
    args += ["--limit", "1", "--sandbox", sandbox_backend] + (["--allow-unisolated"] if sandbox_backend == "local"
                                                              else [])
    file = tmp_path / "paper_tiny.yaml"
    file.write_text(yaml.safe_dump(data))
    load_script("build_tasks").main(["--families", "toy_sql", "--out", str(tasks_root)])
    scripts = {name: load_script(name).main for name in ("evaluate", "export_hf")}
    trained, evaluated = [], []

    def launch(recipe, overrides):
        trained.append(recipe)
        return train_main([f"recipe={recipe}", *overrides])

    def launch_eval(script, argv):
        evaluated.append(script)
        return scripts[script](argv)

    out = tmp_path / "paper"
    assert main([str(file), "--output-root", str(out)], launch=launch, launch_eval=launch_eval) == 0
    assert trained == ["sft_tiny", "dpo_tiny", "ppo_tiny", "grpo_tiny"]
    assert evaluated.count("export_hf") == 4 and evaluated.count("evaluate") == 10
    table = json.loads((out / "paper_table.json").read_text())
    assert [r["name"] for r in table["rows"]] == ["base", "sft", "dpo", "ppo", "grpo"]
    for row in table["rows"]:  # every id column and the whole ood suite were evaluated for every row
        assert all(v is not None for v in row["cells"].values()) and row["id_n"] == 8
        assert sorted(row["ood_families"]) == sorted(SUITES["ood"]) and row["ood"] is not None
    md = (out / "paper_table.md").read_text()
    assert "| model | MIMIC-III | eICU | TREQS | MedCalc | MedAgentBench | BioCoder | BioDSBench | EHRSHOT |" in md
    assert (out / "paper_table.png").stat().st_size > 5000
    for stage in ("sft", "dpo", "ppo", "grpo"):
        assert (out / stage / "merged" / "config.json").is_file()
    trained.clear()
    evaluated.clear()
    capsys.readouterr()
    assert main([str(file), "--output-root", str(out)], launch=launch, launch_eval=launch_eval) == 0
    assert trained == [] and evaluated == [], "a rerun skips finished stages, exports and evaluations"
