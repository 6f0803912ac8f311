"""Slow: the real SmolLM2-135M-Instruct trained end to end on CPU: SFT then GRPO through ``train.py`` with the
``*_smollm2`` recipes, and the miniature pipeline of ``scripts/bench_real.py`` at its smallest."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(folder / ("adapter_model.safetensors" if (folder / "adapter_model.safetensors").is_file()
                               else "model.safetensors"))


def test_sft_then_grpo_on_the_real_model_through_train_py(real_model_dir, tmp_path, train_main, quiet_training_env):
    root, sft, grpo = tmp_path / "tasks", tmp_path / "sft", tmp_path / "grpo"
    common = [f"tasks.root={root}", "env.sandbox=bwrap"]
    from medagentgym import tasks

    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    assert train_main(["recipe=sft_smollm2", f"model.name_or_path={real_model_dir}", *common, "tasks.limit=4",
                       f"rollout.store={tmp_path / 'oracle.jsonl'}", f"output.dir={sft}", "trainer.max_steps=2",
                       "trainer.save_steps=2", "trainer.max_length=1024"]) == 0
    adapter = _weights(sft)
    assert any(k.endswith("lora_B.weight") and v.abs().max() > 0 for k, v in adapter.items())  # B starts at 0
    state = json.loads((sft / "trainer_state.json").read_text()) if (sft / "trainer_state.json").is_file() else None
    assert state is None or state["global_step"] == 2
    assert train_main(["recipe=grpo_smollm2", f"model.name_or_path={sft}", *common, "tasks.limit=2",
                       f"output.dir={grpo}", "trainer.max_steps=1", "trainer.per_device_train_batch_size=2",
                       "trainer.num_generations=2", "rollout.max_new_tokens=32", "rollout.concurrency=2",
                       "env.workers=2", "trainer.max_completion_length=160"]) == 0
    assert any(k.endswith("lora_B.weight") for k in _weights(grpo))


def test_the_miniature_pipeline_runs_every_stage_and_tabulates(real_model_dir, tmp_path, quiet_training_env):
    from medagentgym.medcopilot.real_pipeline import ID, OOD, QUICK, run_pipeline, table_rows

    settings = {**QUICK, "train_per_family": 2, "eval_per_family": 2, "eval_per_real_family": 2, "reps": 1,
                "sft_steps": 2, "sft_batch": 2,
                "rl_steps": 1, "rl_group": 2, "seeds": [0], "ppo": True}
    result = run_pipeline(real_model_dir, tmp_path, settings, families={"toy_lookup": ID["toy_lookup"]},
                          held_out={"ehrcon": OOD["ehrcon"]}, log=lambda line: None)
    rows = table_rows(result)
    methods = {r["method"] for r in rows}
    assert {"zero-shot", "sft", "sft+grpo seed 0", "sft+ppo seed 0"} <= methods
    assert {r["family"] for r in rows} == {"toy_lookup", "ehrcon"}
    for r in rows:
        assert r["n"] == 2 and 0 <= r["ci95"][0] <= r["success"] <= r["ci95"][1] <= 1
    assert set(result["cost"]) >= {"zero-shot eval", "trajectories", "sft", "grpo", "ppo"}
