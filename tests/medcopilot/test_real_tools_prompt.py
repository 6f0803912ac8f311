"""Tools in the prompt of a model whose chat template drops ``tools`` (SmolLM2's ChatML template): the action
schemas reach it in the system message, in the text form it is told to reply in, which the parser accepts; a
template that renders ``tools`` (TRL's bundled Qwen2.5 one, the tiny model's) is left exactly as it was."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

ACTIONS = ["request_info", "code_execution", "terminal", "submit_answer"]
INSTANCE = SimpleNamespace(question="How many patients are older than 60?", context="", data={"db": "x.sqlite"})


@pytest.fixture(scope="module")
def smol_tok(real_model_dir):
    from medagentgym.medcopilot.modeling import load_tokenizer

    return load_tokenizer(str(real_model_dir))


@pytest.fixture(scope="module")
def qwen_tok(tiny_model_dir):
    from medagentgym.medcopilot.modeling import load_tokenizer

    return load_tokenizer(str(tiny_model_dir))


def _episode_prompt():
    from medagentgym.env_client.prompts import episode_tools, initial_messages

    return initial_messages(INSTANCE, ACTIONS, fmt="tool_call"), episode_tools(ACTIONS)


def test_smollm2_is_told_every_actions_parameters_and_the_reply_it_writes_parses(smol_tok):
    from medagentgym.env_client.actions import tool_schemas
    from medagentgym.env_client.parsing import parse_model_text
    from medagentgym.env_client.prompts import action_signature
    from medagentgym.env_client.tokens import render_prompt, template_renders_tools

    messages, tools = _episode_prompt()
    assert not template_renders_tools(smol_tok)
    text = smol_tok.decode(render_prompt(smol_tok, messages, tools))
    system = text.split("<|im_start|>user")[0]
    for schema in tool_schemas(ACTIONS):  # each action's parameters and purpose, in the system turn
        assert f"- {action_signature(schema)}: {schema['function']['description']}" in system, system
    # What the model is told to write, filled in, is one valid action for the parser.
    told = re.search(r"Reply with exactly one (.+?); you may think", system).group(1)
    assert told == '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    reply = told.replace('"name": ...', '"name": "code_execution"').replace(
        "{...}", json.dumps({"lang": "sql", "code": "SELECT COUNT(*) FROM patients WHERE age > 60"}))
    parsed = parse_model_text(f"Let me count.\n{reply}")
    assert parsed.ok and parsed.action.code.startswith("SELECT COUNT(*)")
    # The episode's own messages are not modified, and the schemas appear once (no second copy of the block).
    assert "code_execution(" not in messages[0]["content"]
    assert system.count("code_execution(") == 1


def test_a_template_that_renders_tools_is_left_as_it_was(qwen_tok):
    from medagentgym.env_client.tokens import fit_tools, render_prompt, template_renders_tools
    from medagentgym.medcopilot.tiny import qwen25_chat_template

    messages, tools = _episode_prompt()
    assert qwen_tok.chat_template == qwen25_chat_template()  # TRL's bundled template, unchanged
    assert template_renders_tools(qwen_tok)
    assert fit_tools(qwen_tok, messages, tools) == (messages, tools)
    plain = qwen_tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert render_prompt(qwen_tok, messages, tools) == qwen_tok(plain, add_special_tokens=False)["input_ids"]
    assert "<tools>" in plain and "Actions (? = optional):" not in plain


def test_training_rows_for_smollm2_carry_the_schemas_its_rollouts_show(smol_tok, qwen_tok):
    from medagentgym.env_client.tokens import render_prompt
    from medagentgym.medcopilot.data import Episode, dpo_pairs, fit_rows, sft_rows

    messages, tools = _episode_prompt()
    call = '<tool_call>{"name": "submit_answer", "arguments": {"answer": "%s"}}</tool_call>'
    win = Episode("t/0", "toy_sql", "count", [*messages, {"role": "assistant", "content": call % 40}], True, 1.0, tools)
    loss = Episode("t/0", "toy_sql", "count", [*messages, {"role": "assistant", "content": call % 9}], False, 0.0, tools)
    sft, dpo = sft_rows([win, loss]), dpo_pairs([win, loss])
    assert json.loads(sft[0]["tools"]) == tools and json.loads(dpo[0]["tools"]) == tools
    rollout_prompt = smol_tok.decode(render_prompt(smol_tok, messages, tools))
    for rows, key in ((sft, "messages"), (dpo, "prompt")):
        fitted = fit_rows(rows, smol_tok)
        assert "tools" not in fitted[0]
        trained_on = smol_tok.apply_chat_template(fitted[0][key][:2], add_generation_prompt=True, tokenize=False)
        assert trained_on == rollout_prompt  # SFT/DPO context = what a rollout shows the model
        assert fit_rows(rows, qwen_tok) == rows  # a template that renders tools: untouched
