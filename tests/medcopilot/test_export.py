"""Export: LoRA merged into a standalone HF folder with a Hub model card; pushing fails clearly when it cannot happen.

The card is checked by loading it back with ``huggingface_hub.ModelCard`` (metadata and ``model-index`` from a
real ``medagentgym eval`` report); a failed upload is checked against a real ``HfApi`` pointed at a closed
local port (the only boundary this machine cannot reach is the Hub itself).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from medagentgym.medcopilot.export import ExportError, export_model, hub_model_id, model_card, push_folder

ROOT = Path(__file__).resolve().parents[2]
BASE = "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.fixture(scope="module")
def lora_run_dir(tiny_model_dir, tmp_path_factory):
    """A finished LoRA run folder as train.py leaves it: adapter, tokenizer, recipe, summary, trainer state."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym.medcopilot.config import load_recipe

    out = tmp_path_factory.mktemp("run") / "sft_tiny"
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False,
                                      task_type="CAUSAL_LM"))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    load_recipe("sft_tiny", [f"model.name_or_path={tiny_model_dir}", f"output.dir={out}"]).save()
    summary = {"method": "sft", "global_step": 5, "train_rows": 3, "metrics": {"train_loss": 6.5}}
    (out / "run_summary.json").write_text(json.dumps(summary))
    (out / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": [{"loss": 6.4, "step": 5}]}))
    return out


def test_export_merges_lora_and_reloads_for_generation(lora_run_dir, tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = export_model(lora_run_dir, tmp_path / "export")
    assert not (out / "adapter_config.json").exists() and (out / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(model.state_dict()[name], base.state_dict()[name])  # the adapter was merged in
    assert tok.chat_template == AutoTokenizer.from_pretrained(tiny_model_dir).chat_template
    inputs = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                     return_dict=True, return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert generated.shape[1] > inputs["input_ids"].shape[1]

    card = (out / "README.md").read_text()
    assert "base_model:" not in card  # a local folder is no Hub id: named in the text, kept out of the metadata
    assert f"`{tiny_model_dir.resolve()}` (a local folder, not a Hub id)" in card
    assert "recipe `sft_tiny`" in card and "| train_loss | 6.5 |" in card and "| final_logged_loss | 6.4 |" in card
    assert "toy_sql" in card and "method: sft" in card
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # written atomically, no temp left


def test_export_script_and_bad_input_are_one_line(lora_run_dir, tmp_path, capsys):
    from medagentgym.cli.export_hf import main

    assert main([str(lora_run_dir), "--out", str(tmp_path / "e")]) == 0
    assert (tmp_path / "e" / "config.json").is_file()
    capsys.readouterr()
    assert main([str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "holds no model" in err


def test_push_offline_or_without_token_is_a_clear_error(lora_run_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    with pytest.raises(ExportError, match="HF_HUB_OFFLINE is set"):
        export_model(lora_run_dir, tmp_path / "never", push="org/model")
    assert not (tmp_path / "never").exists()  # checked before any work
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(ExportError, match="HF_TOKEN is not set"):
        push_folder(tmp_path, "org/model")
    with pytest.raises(ExportError, match="org/name"):
        push_folder(tmp_path, "not-a-repo")


def test_push_uploads_through_the_hub_client(tmp_path, monkeypatch):
    """Only the network boundary (HfApi) is replaced: repo created, folder uploaded with the token."""
    import huggingface_hub

    calls = []

    class FakeApi:
        def __init__(self, token):
            calls.append(("token", token))

        def create_repo(self, repo_id, **kw):
            calls.append(("create", repo_id, kw["private"], kw["exist_ok"]))

        def upload_folder(self, **kw):
            calls.append(("upload", kw["repo_id"], kw["folder_path"]))
            return type("Info", (), {"commit_url": "https://hf.co/org/m/commit/1"})()

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    (tmp_path / "config.json").write_text("{}")
    assert push_folder(tmp_path, "org/m") == "https://hf.co/org/m/commit/1"
    assert calls == [("token", "hf_secret"), ("create", "org/m", True, True), ("upload", "org/m", str(tmp_path))]


# ------------------------------------------------------------------------------------------------ the model card
@pytest.fixture(scope="module")
def eval_report(tmp_path_factory):
    """A real report.json: medagentgym eval with the oracle on 3 toy_sql tasks (built on demand)."""
    base = tmp_path_factory.mktemp("card_eval")
    sandbox = "bwrap" if shutil.which("bwrap") else "local"
    done = subprocess.run(
        [sys.executable, "-m", "medagentgym", "eval", "--policy", "oracle", "--families", "toy_sql",
         "--size", "tiny", "--limit", "3", "--tasks-root", str(base / "tasks"), "--out", str(base / "eval"),
         "--sandbox", sandbox, "--allow-unisolated", "--no-progress", "--no-plots"],
        capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return base / "eval" / "report.json"


@pytest.fixture()
def run_folder(tmp_path):
    """A run folder's text files (recipe, summary, trainer state): all the card reads, no weights."""
    run = tmp_path / "grpo_run"
    run.mkdir()
    (run / "recipe.yaml").write_text("name: grpo_qwen7b\nmethod: grpo\nmodel: {name_or_path: Qwen/Qwen2.5-7B-Instruct}\n"
                                     "tasks: {families: [toy_sql, mimic_iii], split: train, size: tiny}\n")
    (run / "run_summary.json").write_text(json.dumps({"method": "grpo", "global_step": 40, "train_rows": 80,
                                                      "metrics": {"train_loss": 0.125}}))
    return run


def test_card_round_trips_through_huggingface_hub(run_folder, eval_report, tmp_path):
    from huggingface_hub import EvalResult, ModelCard

    report = json.loads(eval_report.read_text())
    card = model_card(run_folder, base_model="Qwen/Qwen2.5-7B-Instruct", repo="my-org/med-copilot-7b",
                      datasets=["my-org/medagentgym-trajectories"], eval_reports=[eval_report.parent])
    (tmp_path / "README.md").write_text(str(card))
    loaded = ModelCard.load(tmp_path / "README.md")
    data = loaded.data
    assert data.base_model == "Qwen/Qwen2.5-7B-Instruct" and data.license == "apache-2.0"
    assert data.datasets == ["my-org/medagentgym-trajectories"] and data.pipeline_tag == "text-generation"
    assert {"medical", "medagentgym", "grpo"} <= set(data.tags) and data.model_name == "my-org/med-copilot-7b"
    results = {(r.dataset_config, r.dataset_split): r for r in data.eval_results}
    assert set(results) == {(None, "test"), ("toy_sql", "test")}
    overall, family = results[(None, "test")], results[("toy_sql", "test")]
    assert isinstance(overall, EvalResult) and overall.metric_type == "accuracy"
    assert overall.metric_value == round(report["success_rate"], 4) == 1.0
    assert family.metric_value == round(report["per_family"]["toy_sql"]["success_rate"], 4)
    text = loaded.text
    for section in ("## Intended use", "## Out-of-scope use", "## Training", "## Evaluation",
                    "## Limitations and risks", "## Recipe"):
        assert section in text
    assert "Not for clinical decisions" in text and "Synthetic training data" in text
    assert "| toy_sql | 3 | 100.0% |" in text and "train_loss | 0.125" in text and "toy_sql, mimic_iii" in text
    if report.get("ci95"):  # reports carry 95 % intervals since the evaluation rework: the card shows them
        assert f"(95 % interval {report['ci95'][0]:.1%}-{report['ci95'][1]:.1%}" in text


def test_card_without_hub_base_or_reports_says_what_is_missing(run_folder, tmp_path):
    card = model_card(run_folder, base_model=str(tmp_path))  # a local folder
    assert card.data.base_model is None and card.data.license is None and card.data.eval_results is None
    assert "not set; it must follow the base model" in card.text and "No evaluation report was attached" in card.text
    with pytest.raises(ExportError, match="not a medagentgym eval report"):
        (tmp_path / "bad.json").write_text(json.dumps({"policy": "x"}))
        model_card(run_folder, base_model=BASE, eval_reports=[tmp_path / "bad.json"])


def test_hub_model_id_tells_hub_ids_from_local_folders(tmp_path):
    (tmp_path / "org" / "model").mkdir(parents=True)
    assert hub_model_id("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"
    assert hub_model_id(str(tmp_path / "org" / "model")) is None and hub_model_id("artifacts") is None
    assert hub_model_id("a/b/c") is None and hub_model_id("org/na--me") is None and hub_model_id("../x") is None


# ------------------------------------------------------------------------------------------ pushing that fails
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def unreachable_hub(monkeypatch):
    """A real HfApi whose endpoint is a closed local port: every request fails to connect."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")


def test_failed_upload_keeps_the_export_and_says_how_to_retry(lora_run_dir, tmp_path, unreachable_hub, capsys):
    from medagentgym.cli.export_hf import main

    out = tmp_path / "export"
    with pytest.raises(ExportError) as caught:
        export_model(lora_run_dir, out, push="my-org/m", base_model=BASE)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("upload to my-org/m failed (")
    assert f"the export is kept in {out}" in message
    assert f"medagentgym export --upload {out} --push my-org/m" in message
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert "base_model: Qwen/Qwen2.5-0.5B-Instruct" in (out / "README.md").read_text()

    capsys.readouterr()  # the export's own progress bars
    assert main(["--upload", str(out), "--push", "my-org/m"]) == 2  # the retry command, still unreachable
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "export is kept in" in err and (out / "config.json").is_file()


def test_push_refuses_before_merging_without_hub_base_or_license(lora_run_dir, tmp_path, unreachable_hub, capsys):
    from medagentgym.cli.export_hf import main

    with pytest.raises(ExportError, match="is not a Hub id .*pass --base-model ORG/NAME"):
        export_model(lora_run_dir, tmp_path / "a", push="my-org/m")  # the adapter's base is a local folder
    with pytest.raises(ExportError, match="no license for base model 'some-org/some-model'; pass --license"):
        export_model(lora_run_dir, tmp_path / "b", push="my-org/m", base_model="some-org/some-model")
    with pytest.raises(ExportError, match="is not a Hub model id"):
        export_model(lora_run_dir, tmp_path / "c", base_model="./models/x")
    assert not list(tmp_path.iterdir())  # refused before any work
    assert main(["--upload", str(tmp_path), "--push", "my-org/m"]) == 2
    assert "not an exported model folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--upload", str(tmp_path)])  # --upload needs --push: argparse's usage error


def test_the_card_names_who_trained_it_ppo_is_in_house(run_folder):
    card = model_card(run_folder, base_model="Qwen/Qwen2.5-7B-Instruct")
    assert "fine-tuned with GRPO (TRL) in MedAgentGym" in card.text and "trl" in card.data.tags
    recipe = (run_folder / "recipe.yaml").read_text().replace("method: grpo", "method: ppo")
    (run_folder / "recipe.yaml").write_text(recipe)
    card = model_card(run_folder, base_model="Qwen/Qwen2.5-7B-Instruct")
    assert "fine-tuned with PPO (in-house PPO) in MedAgentGym" in card.text and "(TRL)" not in card.text
    assert "trl" not in card.data.tags and "ppo" in card.data.tags
