"""The paper's runbook without training: branching chains (``from:``), the evaluation plan, the table's layout,
and the in-process evaluation of rows against real ``report.json`` files."""

from __future__ import annotations

import json

import pytest
import yaml

from medagentgym.env_client.paper_table import (
    PAPER_COLUMNS,
    paper_table,
    render_paper_table,
    write_paper_table,
)
from medagentgym.medcopilot.config import RECIPES_DIR, RecipeError
from medagentgym.medcopilot.sweep import load_sweep, main, plan_runs
from medagentgym.medcopilot.sweep_eval import EvalSpec, evaluate_chain
from medagentgym.tasks import SUITES


@pytest.mark.parametrize("name", ["paper_qwen7b", "paper_qwen14b", "paper_tiny"])
def test_paper_sweeps_branch_from_sft_and_evaluate_both_suites(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # plan_runs checks the builds under artifacts/tasks: not this checkout's
    sweep = load_sweep(RECIPES_DIR / "sweeps" / f"{name}.yaml")
    runs = plan_runs(sweep)  # every stage checked as train.py --dry-run would, against the chain's base model
    by = {r.name: r for r in runs}
    assert list(by) == ["sft", "dpo", "ppo", "grpo"]
    for branch in ("dpo", "ppo", "grpo"):
        assert by[branch].start == "sft" and f"model.name_or_path={by['sft'].output_dir}" in by[branch].overrides
        assert by[branch].base_model == by["sft"].base_model
    spec = EvalSpec.from_dict(sweep.evaluate)
    assert spec.suites == ["id", "ood"]
    rows = [row for row, _, _ in spec.row_models(runs)]
    assert rows == ["base", "sft", "dpo", "ppo", "grpo"]


def test_the_qwen_sweeps_give_vllm_the_base_model(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a tiny build in this checkout's artifacts/tasks is (rightly) refused
    assert main([str(RECIPES_DIR / "sweeps" / "paper_qwen14b.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "eval base/id: medagentgym eval --policy vllm:Qwen/Qwen2.5-14B-Instruct --suite id" in out
    assert "eval grpo/ood: medagentgym eval --policy vllm:runs/sweeps/paper_qwen14b/grpo/merged" in out


def test_bad_branches_and_evaluate_sections_are_one_line(tmp_path):
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump({"stages": [{"name": "a", "recipe": "sft_tiny"},
                                               {"name": "b", "recipe": "dpo_tiny", "from": "c"}]}))
    with pytest.raises(RecipeError, match="starts from 'c', which is not an earlier stage; earlier stages: a"):
        load_sweep(file)
    for section, message in (({"policy": "hf:runs/x"}, "must contain {model}"),
                             ({"suites": ["idd"]}, "choose from id, ood"), ({"bogus": 1}, "unknown key")):
        with pytest.raises(RecipeError, match=message):
            EvalSpec.from_dict(section)


def _report(success: dict[str, float]) -> dict:
    return {"per_family": {f: {"success_rate": v, "n": 10} for f, v in success.items()}}


def test_the_table_has_the_papers_columns_and_ood_suite(tmp_path):
    ids = {f: 0.1 * (i + 1) for i, (f, _) in enumerate(PAPER_COLUMNS)}
    table = paper_table({"base": [_report(ids), _report(dict.fromkeys(SUITES["ood"], 0.2))],
                         "sft": [_report({"mimic_iii": 0.5})]}, title="t")
    assert table["columns"][:8] == ["MIMIC-III", "eICU", "TREQS", "MedCalc", "MedAgentBench", "BioCoder",
                                    "BioDSBench", "EHRSHOT"] and table["columns"][8:] == ["ID avg", "OOD"]
    base, sft = table["rows"]
    assert base["id_avg"] == pytest.approx(45.0) and base["ood"] == pytest.approx(20.0) and base["ood_n"] == 4
    assert sft["cells"]["eicu"] is None and sft["ood"] is None
    md = render_paper_table(table)
    assert "| base | 10.0 | 20.0 | 30.0 | 40.0 | 50.0 | 60.0 | 70.0 | 80.0 | 45.0 | 20.0 |" in md
    assert "| sft | 50.0 |  |  |  |  |  |  |  | 50.0 (1/8) |  |" in md, "a partial row says what it covers"
    paths = write_paper_table(table, tmp_path)
    assert paths["png"].stat().st_size > 1000 and json.loads(paths["json"].read_text()) == table


def test_evaluate_chain_exports_evaluates_resumes_and_tabulates(tmp_path):
    class Run:  # what evaluate_chain reads of medagentgym.medcopilot.sweep.Run
        def __init__(self, name):
            self.name, self.output_dir, self.base_model = name, tmp_path / name, "base-model"
            self.output_dir.mkdir()
            (self.output_dir / "run_summary.json").write_text("{}")

    calls = []

    def launch(script, argv):
        calls.append((script, argv))
        if script == "export_hf":
            out = argv[argv.index("--out") + 1]
            (tmp_path / out).mkdir(parents=True, exist_ok=True)
            (tmp_path / out / "config.json").write_text("{}")
            return 0
        out = tmp_path / argv[argv.index("--out") + 1]
        out.mkdir(parents=True)
        suite = argv[argv.index("--suite") + 1]
        (out / "report.json").write_text(json.dumps(_report(dict.fromkeys(SUITES[suite], 0.5))))
        return 0

    spec = EvalSpec.from_dict({"args": ["--limit", "2"]})
    runs = [Run("sft"), Run("grpo")]
    assert evaluate_chain(spec, runs, tmp_path, launch_eval=launch) == 0
    assert [c[0] for c in calls].count("export_hf") == 2 and [c[0] for c in calls].count("evaluate") == 6
    assert ["--policy", "hf:base-model", "--suite", "id"] == calls[0][1][:4]
    table = json.loads((tmp_path / "paper_table.json").read_text())
    assert [r["name"] for r in table["rows"]] == ["base", "sft", "grpo"]
    assert all(r["id_avg"] == 50.0 and r["ood"] == 50.0 for r in table["rows"])
    calls.clear()
    assert evaluate_chain(spec, runs, tmp_path, launch_eval=launch) == 0
    assert calls == [], "a rerun reuses the exports and reports newer than their models"
