"""The tiny Qwen2 test model: loads like a Hub checkpoint, tokenizer survives a reload, TRL knows its template."""

from __future__ import annotations

import json
import time

import pytest

from medagentgym.medcopilot.tiny import EOS_TOKEN, PAD_TOKEN, TOOL_TOKENS, build_tiny_model, build_tiny_tokenizer

TOOLS = [{
    "type": "function",
    "function": {
        "name": "execute_sql",
        "description": "Run a read-only SQL query.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}]
SAMPLES = [
    "SELECT COUNT(*) FROM patients WHERE age > 65;",
    "def f(x):\n    return x ** 2  # ünïcode ✓ 12345\n\n\n",
    "caf\u0065\u0301 vs caf\u00e9",  # decomposed vs composed: NFC makes them the same
    ('<|im_start|>assistant\n<tool_call>\n{"name": "execute_sql", "arguments": {"query": "SELECT 1"}}\n</tool_call>'
     "<|im_end|>\n<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|><|endoftext|>"),
    "   leading spaces and\ttabs\r\nCRLF lines I'm we'll they've",
]


def test_reload_gives_qwen2_tokenizer_with_identical_encodings(tiny_model_dir):
    from transformers import AutoTokenizer

    fresh = build_tiny_tokenizer(seed=0)
    reloaded = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert type(reloaded).__name__ == "Qwen2Tokenizer"
    for text in SAMPLES:
        assert reloaded.encode(text) == fresh.encode(text), text
    assert reloaded.encode("caf\u0065\u0301") == reloaded.encode("caf\u00e9")
    assert 1000 <= len(reloaded) <= 4096
    assert reloaded.eos_token == EOS_TOKEN and reloaded.pad_token == PAD_TOKEN
    assert "<|im_start|>" in reloaded.all_special_tokens


def test_tool_tags_are_single_non_special_tokens(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    for tag in TOOL_TOKENS:
        assert len(tok.encode(tag)) == 1 and tag not in tok.all_special_tokens
    text = '<|im_start|>assistant\n<tool_call>\n{"name": "f"}\n</tool_call><|im_end|><|endoftext|>'
    decoded = tok.decode(tok.encode(text), skip_special_tokens=True)
    assert decoded == 'assistant\n<tool_call>\n{"name": "f"}\n</tool_call>'


def test_chat_template_is_trls_qwen25_and_renders_tools(tiny_model_dir):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template, qwen2_5_chat_template, supports_tool_calling

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert tok.chat_template == qwen2_5_chat_template
    assert get_training_chat_template(tok) is not None  # TRL recognises it: assistant-only loss works
    assert supports_tool_calling(tok)
    text = tok.apply_chat_template([{"role": "user", "content": "How many patients?"}], tools=TOOLS,
                                   add_generation_prompt=True, tokenize=False)
    assert '"name": "execute_sql"' in text and text.endswith("<|im_start|>assistant\n")


def test_model_loads_and_generates_with_eos_and_pad(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    cfg = model.config
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers) == ("qwen2", 64, 2)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size) == (4, 2, len(tok))
    gen = model.generation_config
    assert gen.eos_token_id == tok.eos_token_id and gen.pad_token_id == tok.pad_token_id
    inputs = tok.apply_chat_template([{"role": "user", "content": "hi"}], tools=TOOLS, add_generation_prompt=True,
                                     return_dict=True, return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4 or int(out[0, -1]) == tok.eos_token_id


def test_build_is_fast_deterministic_and_atomic(tiny_model_dir, tmp_path):
    start = time.process_time()  # CPU time: a busy machine stretches the clock, not the work (issue #29)
    again = build_tiny_model(tmp_path / "again", seed=0)
    assert time.process_time() - start < 5.0
    for name in ("model.safetensors", "tokenizer.json", "config.json", "generation_config.json"):
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]  # no temporary folder left behind
    other = build_tiny_model(tmp_path / "again", seed=1)  # replaces the existing folder
    assert (other / "model.safetensors").read_bytes() != (tiny_model_dir / "model.safetensors").read_bytes()
    assert json.loads((other / "config.json").read_text())["hidden_size"] == 64


def test_make_tiny_model_script(tmp_path, capsys):
    from medagentgym.cli.make_tiny_model import main

    assert main(["--out", str(tmp_path / "m"), "--seed", "0"]) == 0
    assert (tmp_path / "m" / "chat_template.jinja").is_file()
    assert "tiny Qwen2 model written to" in capsys.readouterr().out


@pytest.mark.parametrize("text", SAMPLES[:2])
def test_decode_round_trips_plain_text(tiny_model_dir, text):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert tok.decode(tok.encode(text)) == text
