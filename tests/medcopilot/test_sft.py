"""SFT: successful episodes become conversations, only assistant tokens are trained, train.py runs it end to end."""

from __future__ import annotations

import json
import math

import pytest

from medagentgym.medcopilot.config import RecipeError, load_recipe
from medagentgym.medcopilot.data import Episode, load_episodes, sft_rows

MARKER = "OBSERVED_ROWS"  # tests/conftest.py puts it in every observation


def tiny_overrides(tiny_model_dir, store, out, *extra):
    return [f"model.name_or_path={tiny_model_dir}", f"rollout.store={store}", f"output.dir={out}",
            "trainer.max_length=512", *extra]


def test_sft_rows_keep_successes_with_observations(sample_trajectory_store):
    episodes = load_episodes(sample_trajectory_store)
    assert len(episodes) == 10 and sum(e.success for e in episodes) == 3
    rows = sft_rows(episodes)
    assert len(rows) == 3
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant"]
        assert MARKER in row["messages"][3]["content"]
        assert "submit_answer" in row["messages"][-1]["content"]
    assert load_episodes(sample_trajectory_store, families=["other"]) == []


def test_sft_rows_dedupe_and_trim_trailing_observations():
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "o"}]
    ep = Episode("t/0", "toy_sql", "c", msgs, success=True)
    rows = sft_rows([ep, ep, Episode("t/1", "toy_sql", "c", msgs, success=False)])
    assert rows == [{"messages": msgs[:2]}]
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert json.loads(sft_rows([Episode("t/2", "toy_sql", "c", msgs, True, tools=tools)])[0]["tools"]) == tools


def test_assistant_mask_excludes_observations_and_prompts(tiny_model_dir, sample_trajectory_store, tmp_path):
    from medagentgym.medcopilot.trainers.sft import build_trainer

    cfg = load_recipe("sft_tiny", tiny_overrides(tiny_model_dir, sample_trajectory_store, tmp_path / "out"))
    trainer, n_rows = build_trainer(cfg)
    tok = trainer.processing_class
    assert n_rows == 3 and len(trainer.train_dataset) == 3
    for row in trainer.train_dataset:
        ids, labels = row["input_ids"], row["labels"]
        trained = tok.decode([i for i, lab in zip(ids, labels) if lab != -100])
        context = tok.decode([i for i, lab in zip(ids, labels) if lab == -100])
        assert MARKER in tok.decode(ids) and MARKER not in trained  # observations are context only
        assert "<tool_response>" not in trained and "How many patients" not in trained
        assert "SELECT COUNT(*)" in trained and "submit_answer" in trained
        assert trained.count("<|im_end|>") == 2  # each assistant turn learns to stop
        assert "<|im_start|>assistant" in context


def test_sft_lora_through_train_py(tiny_model_dir, sample_trajectory_store, tmp_path, train_main,
                                   quiet_training_env):
    from safetensors.torch import load_file

    out = tmp_path / "sft"
    argv = ["recipe=sft_tiny", *tiny_overrides(tiny_model_dir, sample_trajectory_store, out,
                                               "trainer.max_steps=3", "trainer.save_steps=3",
                                               "trainer.report_to=wandb")]
    assert train_main(argv) == 0
    assert load_recipe(out / "recipe.yaml").trainer["max_steps"] == 3
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 3 and summary["train_rows"] == 3 and summary["resumed_from"] is None
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    losses = [e["loss"] for e in history if "loss" in e]
    assert len(losses) == 3 and all(math.isfinite(v) and v > 0 for v in losses)
    assert (out / "train_results.json").is_file() and (out / "checkpoint-3").is_dir()
    assert (out / "tokenizer_config.json").is_file() and (out / "chat_template.jinja").is_file()
    adapter = load_file(out / "adapter_model.safetensors")
    lora_b = [t for name, t in adapter.items() if "lora_B" in name]
    assert lora_b and any(t.abs().sum() > 0 for t in lora_b)  # lora_B starts at zero: it moved
    assert list((quiet_training_env / "wandb").glob("offline-run-*")), "wandb should log offline"


def test_sft_full_finetune_changes_weights_and_empty_store_is_one_line(
        tiny_model_dir, sample_trajectory_store, tmp_path, train_main, quiet_training_env, capsys):
    from safetensors.torch import load_file

    out = tmp_path / "full"
    argv = ["recipe=sft_tiny", "model.lora=null", "trainer.max_steps=2", "trainer.learning_rate=1e-2",
            *tiny_overrides(tiny_model_dir, sample_trajectory_store, out)]
    assert train_main(argv) == 0
    before, after = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    changed = [k for k in before if not before[k].equal(after[k])]
    assert len(changed) >= len(before) // 2

    failures_only = tmp_path / "failures.jsonl"
    failures_only.write_text("".join(line + "\n" for line in sample_trajectory_store.read_text().splitlines()
                                     if '"correct":true' not in line.replace(" ", "")))
    argv = ["recipe=sft_tiny", *tiny_overrides(tiny_model_dir, failures_only, tmp_path / "none")]
    capsys.readouterr()
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no SFT training rows" in err  # fails before any model is loaded


def test_sft_refuses_to_train_on_observations(tiny_model_dir, sample_trajectory_store, tmp_path):
    from medagentgym.medcopilot.trainers.sft import build_trainer

    cfg = load_recipe("sft_tiny", tiny_overrides(tiny_model_dir, sample_trajectory_store, tmp_path,
                                                 "trainer.assistant_only_loss=false"))
    with pytest.raises(RecipeError, match="assistant_only_loss=False is not supported"):
        build_trainer(cfg)
