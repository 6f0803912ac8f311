"""DPO: pairs are shared history + one divergent assistant turn; SFT-warmed DPO through train.py."""

from __future__ import annotations

import json

import pytest

from medagentgym.medcopilot.config import load_recipe
from medagentgym.medcopilot.data import Episode, divergence, dpo_pairs, load_episodes

MARKER = "OBSERVED_ROWS"


def msg(role, content):
    return {"role": role, "content": content}


def test_divergence_only_at_an_assistant_turn():
    base = [msg("system", "s"), msg("user", "q"), msg("assistant", "a1"), msg("tool", "o1")]
    assert divergence(base + [msg("assistant", "good")], base + [msg("assistant", "bad")]) == 4
    assert divergence(base, base + [msg("assistant", "more")]) is None  # one is a prefix of the other
    flaky = base[:3] + [msg("tool", "o1 but different")] + [msg("assistant", "x")]
    assert divergence(base + [msg("assistant", "x")], flaky) is None  # the environment differed first


def test_pairs_from_sample_store(sample_trajectory_store):
    pairs = dpo_pairs(load_episodes(sample_trajectory_store))
    # per task: the success against 2 failures; task 2 also against its truncated episode
    assert len(pairs) == 7
    assert [p["task_id"] for p in pairs].count("toy_sql/train/0002") == 3
    for pair in pairs:
        assert pair["prompt"][-1]["role"] in ("user", "tool")
        assert len(pair["chosen"]) == len(pair["rejected"]) == 1
        assert pair["chosen"][0]["role"] == pair["rejected"][0]["role"] == "assistant"
        assert pair["chosen"][0]["content"] != pair["rejected"][0]["content"]
        assert MARKER not in pair["chosen"][0]["content"] + pair["rejected"][0]["content"]
    late = [p for p in pairs if len(p["prompt"]) == 4]  # diverged at the submit, after one observation
    assert len(late) == 3 and all(MARKER in p["prompt"][3]["content"] for p in late)
    assert '"answer": "40"' in late[0]["chosen"][0]["content"]


def test_pairs_cap_and_need_both_outcomes():
    hist = [msg("user", "q")]
    wins = [Episode("t/0", "f", "c", hist + [msg("assistant", f"w{i}")], True) for i in range(3)]
    losses = [Episode("t/0", "f", "c", hist + [msg("assistant", f"l{i}")], False) for i in range(3)]
    assert len(dpo_pairs(wins + losses, max_pairs_per_task=4)) == 4
    assert dpo_pairs(wins) == [] and dpo_pairs(losses) == []
    other_task = Episode("t/1", "f", "c", hist + [msg("assistant", "l")], False)
    assert dpo_pairs(wins[:1] + [other_task]) == []  # never pairs across tasks


@pytest.fixture()
def sft_adapter_dir(tiny_model_dir, tmp_path):
    """A stand-in SFT output: a random (non-zero) LoRA adapter on the tiny model, with its tokenizer."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                  init_lora_weights=False, task_type="CAUSAL_LM"))
    out = tmp_path / "sft_run"
    peft_model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def test_sft_warmed_dpo_through_train_py(tiny_model_dir, sft_adapter_dir, sample_trajectory_store, tmp_path,
                                         train_main, quiet_training_env):
    import torch
    from safetensors.torch import load_file

    from medagentgym.medcopilot.modeling import load_model

    out = tmp_path / "dpo"
    argv = ["recipe=dpo_tiny", f"model.name_or_path={sft_adapter_dir}", f"rollout.store={sample_trajectory_store}",
            f"output.dir={out}", "trainer.max_steps=2", "trainer.max_length=512"]
    assert train_main(argv) == 0
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["train_rows"] == 7
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("rewards/margins" in e for e in history) and any("loss" in e for e in history)
    adapter_cfg = json.loads((out / "adapter_config.json").read_text())
    assert adapter_cfg["base_model_name_or_path"] == str(sft_adapter_dir.resolve())  # stacks on the SFT weights
    assert any(t.abs().sum() > 0 for k, t in load_file(out / "adapter_model.safetensors").items() if "lora_B" in k)

    # Loading the DPO output merges SFT then DPO: different from the base and from SFT alone.
    spec = load_recipe("dpo_tiny").model
    weights = {}
    for name, path in (("base", tiny_model_dir), ("sft", sft_adapter_dir), ("dpo", out)):
        model = load_model(type(spec)(name_or_path=str(path), dtype="float32"))
        weights[name] = model.state_dict()["model.layers.0.self_attn.q_proj.weight"].clone()
    assert not torch.equal(weights["base"], weights["sft"]) and not torch.equal(weights["sft"], weights["dpo"])


def test_dpo_without_pairs_fails_fast(tiny_model_dir, tmp_path, train_main, sample_trajectory_store, capsys):
    successes = tmp_path / "wins.jsonl"
    successes.write_text("".join(line + "\n" for line in sample_trajectory_store.read_text().splitlines()
                                 if '"correct":true' in line.replace(" ", "")))
    argv = ["recipe=dpo_tiny", f"model.name_or_path={tiny_model_dir}", f"rollout.store={successes}",
            f"output.dir={tmp_path / 'o'}"]
    assert train_main(argv) == 2
    assert "no DPO training rows" in capsys.readouterr().err.strip().splitlines()[-1]


def test_missing_store_is_rolled_out_from_mixed_policies(tmp_path):
    """rollout.policy 'oracle+constant:0' fills a missing store with a success and a failure per task."""
    from medagentgym.medcopilot.trainers._common import ensure_store

    store = tmp_path / "store.jsonl"
    cfg = load_recipe("dpo_tiny", [f"tasks.root={tmp_path / 'tasks'}", "tasks.limit=2", "env.sandbox=local",
                                   "env.allow_unisolated=true",
                                   "env.workers=1", "rollout.concurrency=1", f"rollout.store={store}"])
    assert ensure_store(cfg) == store
    episodes = load_episodes(store)
    assert len(episodes) == 4 and sum(e.success for e in episodes) == 2
    assert {e.task_id for e in episodes if e.success} == {e.task_id for e in episodes if not e.success}
    pairs = dpo_pairs(episodes)
    assert len(pairs) == 2 and all('"submit_answer"' in p["rejected"][0]["content"] for p in pairs)
    before = store.read_bytes()
    assert ensure_store(cfg) == store and store.read_bytes() == before  # an existing store is used as is
