"""A chained GRPO stage on vLLM starting from an SFT adapter folder, on the tiny chain up to the point vLLM would
start (no GPU here): TRL's engine is handed the chain's full base model, the merged weights are pushed into it
before anything is generated, and the new adapter still records the SFT folder as its base."""

from __future__ import annotations

import json

import pytest


class EngineStarted(Exception):
    """Raised by the fake engine where the real one would first touch the GPU."""


def test_grpo_on_vllm_after_sft_starts_the_engine_from_the_base_model(tiny_model_dir, sample_trajectory_store,
                                                                      tmp_path, train_main, quiet_training_env,
                                                                      monkeypatch):
    from trl.trainer import grpo_trainer

    sft = tmp_path / "sft"
    assert train_main(["recipe=sft_tiny", f"model.name_or_path={tiny_model_dir}",
                       f"rollout.store={sample_trajectory_store}", f"output.dir={sft}", "trainer.max_steps=1",
                       "trainer.save_steps=1", "trainer.report_to=none"]) == 0
    assert (sft / "adapter_config.json").is_file() and not (sft / "config.json").is_file()

    seen: dict = {}

    class FakeVLLMGeneration:  # the public surface TRL's GRPOTrainer uses
        def __init__(self, model, **kwargs):
            seen["engine_model"] = model.name_or_path
            seen["sleep"] = kwargs.get("enable_sleep_mode")
            self.model = model

        def sync_weights(self):
            peft = getattr(self.model, "peft_config", {})
            seen["adapter_base_at_sync"] = [c.base_model_name_or_path for c in peft.values()]
            seen["name_at_sync"] = self.model.name_or_path
            raise EngineStarted("the weights would now be pushed into vLLM")

    monkeypatch.setattr(grpo_trainer, "VLLMGeneration", FakeVLLMGeneration)
    tasks_root = tmp_path / "tasks"
    from medagentgym import tasks

    tasks.make("toy_sql", root=tasks_root).build(tasks_root, size="tiny", seed=0)
    status = train_main(["recipe=grpo_tiny", f"model.name_or_path={sft}", "rollout.backend=vllm",
                         f"tasks.root={tasks_root}", "tasks.limit=2", "env.sandbox=local",
                         "env.allow_unisolated=true", "env.workers=2",
                         "rollout.concurrency=2", "trainer.max_steps=1", "trainer.per_device_train_batch_size=2",
                         "trainer.num_generations=2", "trainer.vllm_mode=colocate",
                         "trainer.vllm_max_model_length=4096", f"output.dir={tmp_path / 'grpo'}",
                         "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: all-linear}"])
    assert status == 2  # EngineStarted ends the run where the real engine would start generating
    assert seen["engine_model"] == str(tiny_model_dir.resolve()), "vLLM gets the chain's full model, not the adapter"
    assert seen["name_at_sync"] == str(sft.resolve()), "restored once the engine exists"
    assert seen["adapter_base_at_sync"] == [str(sft.resolve())], "the new adapter's base is the SFT folder"
    assert json.loads((sft / "adapter_config.json").read_text())["base_model_name_or_path"] == \
        str(tiny_model_dir.resolve())


def test_the_stage_is_refused_before_loading_when_the_chain_has_no_base(tmp_path, train_main, capsys):
    orphan = tmp_path / "orphan"
    orphan.mkdir()
    (orphan / "adapter_config.json").write_text("{}")
    assert train_main(["recipe=grpo_tiny", f"model.name_or_path={orphan}", "rollout.backend=vllm",
                       "trainer.vllm_max_model_length=4096", "--dry-run"]) == 2
    assert "names no base_model_name_or_path, so vLLM has no model to start from" in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _no_cuda_needed(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
