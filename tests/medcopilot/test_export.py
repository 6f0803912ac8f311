"""Export: LoRA merged into a standalone HF folder with a model card; pushing fails clearly when it cannot happen."""

from __future__ import annotations

import json

import pytest

from medcopilot.export import ExportError, export_model, push_folder


@pytest.fixture(scope="module")
def lora_run_dir(tiny_model_dir, tmp_path_factory):
    """A finished LoRA run folder as train.py leaves it: adapter, tokenizer, recipe, summary, trainer state."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medcopilot.config import load_recipe

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
    assert f"base_model: {tiny_model_dir.resolve()}" in card
    assert "Recipe: `sft_tiny`" in card and "| train_loss | 6.5 |" in card and "| final_logged_loss | 6.4 |" in card
    assert "toy_sql" in card and "method: sft" in card
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # written atomically, no temp left


def test_export_script_and_bad_input_are_one_line(lora_run_dir, tmp_path, capsys):
    from scripts.export_hf import main

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
    assert push_folder(tmp_path, "org/m") == "https://hf.co/org/m/commit/1"
    assert calls == [("token", "hf_secret"), ("create", "org/m", True, True), ("upload", "org/m", str(tmp_path))]
