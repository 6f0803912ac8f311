"""The GPU path's launch and weight settings (issue #32), checked on the tiny model on CPU.

- A recipe that reports to wandb starts on a machine without a wandb key: offline, said at ``--dry-run``.
- Small updates reach the sampler and the default export on a base stored in bf16 (as Qwen2.5's weights are):
  1e-4 and 1e-3 relative LoRA updates, measured as the share of the update that the sampler's weights (what
  :mod:`medcopilot.vllm_sync` streams to vLLM) and the exported weights carry.
- The 14B GRPO recipe's generating phase has headroom, and the memory check refuses a phase that would not.
"""

from __future__ import annotations

import pytest
import torch

from medcopilot.config import RECIPES_DIR

QWEN_RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*_qwen*.yaml"))


# --------------------------------------------------------------------------------------------- wandb without a key
@pytest.fixture
def no_wandb_key(quiet_training_env, monkeypatch, tmp_path):
    """A machine that never ran ``wandb login``: no key, no ``~/.netrc``, no ``WANDB_MODE``."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return quiet_training_env


@pytest.mark.parametrize("name", QWEN_RECIPES)
def test_every_qwen_recipe_dry_runs_without_a_wandb_key_and_says_offline(name, no_wandb_key, train_main, capsys):
    assert train_main([f"recipe={name}", "--dry-run", f"output.dir={no_wandb_key / 'o'}"]) == 0
    out = capsys.readouterr().out
    assert "# wandb: offline (no WANDB_API_KEY" in out, out[-2000:]


def test_wandb_mode_respects_a_key_or_a_set_mode(monkeypatch, tmp_path):
    import os

    from medcopilot.recipe_checks import wandb_mode

    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode(["wandb"]) == "wandb: WANDB_MODE=disabled (as set)"
    monkeypatch.delenv("WANDB_MODE")
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password abc123\n")
    assert wandb_mode("wandb").startswith("wandb: online") and "WANDB_MODE" not in os.environ
    (tmp_path / "netrc").write_text("machine example.org login user password abc123\n")
    assert wandb_mode(["wandb"]).startswith("wandb: offline") and os.environ["WANDB_MODE"] == "offline"
    assert wandb_mode([]) is None and wandb_mode(["none"]) is None


def test_a_run_reporting_to_wandb_without_a_key_trains_and_logs_offline(tiny_model_dir, sample_trajectory_store,
                                                                         no_wandb_key, train_main):
    out = no_wandb_key / "sft"
    argv = ["recipe=sft_tiny", f"model.name_or_path={tiny_model_dir}", f"rollout.store={sample_trajectory_store}",
            f"output.dir={out}", "trainer.max_length=256", "trainer.max_steps=1", "trainer.save_strategy='no'",
            "trainer.report_to=[wandb]"]
    assert train_main(argv) == 0  # wandb stops a keyless launch: "api_key not configured (no-tty)"
    assert list((no_wandb_key / "wandb").glob("offline-run-*")), "wandb should log offline"
