"""Prompts: one source for action schemas, and an episode opening at most half as long as before.

The parameters reach the model exactly once: through the chat template's tool block in ``tool_call`` format, as
a compact text form in ``json`` format and wherever ``tools`` cannot be passed (OpenAI without native tools, the
verifiers and SkyRL adapters).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from fastapi import FastAPI, Request

from medagentgym import tasks
from medagentgym.env_client.actions import ACTION_MODELS, tool_schemas
from medagentgym.env_client.policies import OpenAIPolicy
from medagentgym.env_client.prompts import (
    action_signature,
    compact_system_prompt,
    episode_tools,
    initial_messages,
    inline_tools,
    system_prompt,
)
from medagentgym.env_client.server_app import background_server
from medagentgym.env_client.tokens import render_prompt

#: Tokens of the episode opening (the system turn with the tool block and the generation prompt, no question)
#: before the prompts were shortened, per family and format. Measured with ``python scripts/prompt_tokens.py``
#: (the tiny Qwen2.5-format tokenizer ``medagentgym.medcopilot.tiny.build_tiny_tokenizer(seed=0)``, the old
#: ``env_client/prompts.py`` and ``actions.py`` of commit c7a1e2cd, whose text listed every parameter with an
#: example and whose episodes passed the tool block in both formats). Families with the same actions share counts.
_SHARED = {
    ("biocoder", "biodsbench", "ehrshot", "medcalcbench", "npowerai"): (2053, 2049),
    ("ehr_seqsql", "eicu", "mimic_iii", "treqs"): (2544, 2540),
    ("ehrcon", "medagentbench", "mimic_extract", "toy_sql"): (2857, 2851),
    ("toy_lookup", "toy_choice", "toy_retry"): (1332, 1332),
}
BEFORE_TOKENS: dict[str, dict[str, int]] = {
    family: {"tool_call": tool_call, "json": as_json}
    for families, (tool_call, as_json) in _SHARED.items() for family in families
}
ALL = list(ACTION_MODELS)
ACTION_SETS = [ALL, ["code_execution", "submit_answer"], ["request_info", "code_execution", "submit_answer"],
               ["code_execution", "terminal", "debugging", "submit_answer"]]


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from medagentgym.medcopilot.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer(seed=0)


def _family_actions(tmp_path) -> dict[str, frozenset[str]]:
    return {name: frozenset(tasks.make(name, root=tmp_path).actions) & frozenset(ACTION_MODELS)
            for name in tasks.names(tmp_path)}


def _param_mentions(text: str, tool: dict) -> dict[str, int]:
    """How often each parameter of ``tool`` is listed in ``text`` (as ``key:`` or ``key?:``)."""
    return {key: len(re.findall(rf"\b{re.escape(key)}\??: ", text))
            for key in tool["function"]["parameters"]["properties"]}


@pytest.mark.parametrize("fmt", ["tool_call", "json"])
def test_opening_is_at_most_half_of_the_recorded_baseline(tiny_tokenizer, tmp_path, fmt):
    actions = _family_actions(tmp_path)
    assert set(actions) == set(BEFORE_TOKENS), "a family was added or removed: measure its baseline"
    for family, permitted in actions.items():
        system = {"role": "system", "content": system_prompt(permitted, fmt=fmt)}
        after = len(render_prompt(tiny_tokenizer, [system], episode_tools(permitted, fmt)))
        assert after <= 0.5 * BEFORE_TOKENS[family][fmt], (family, fmt, after, BEFORE_TOKENS[family][fmt])


@pytest.mark.parametrize("actions", ACTION_SETS)
def test_tool_call_text_names_actions_without_parameters(actions):
    text = system_prompt(actions, fmt="tool_call")
    for tool in tool_schemas(actions):
        name = tool["function"]["name"]
        assert name in text and action_signature(tool) not in text
        assert not any(_param_mentions(text, tool).values()), (name, _param_mentions(text, tool))
    assert "e.g." not in text and '"enum"' not in text and "(required" not in text
    assert [t["function"]["name"] for t in episode_tools(actions, "tool_call")] == [n for n in ALL if n in actions]


@pytest.mark.parametrize("actions", ACTION_SETS)
def test_json_text_carries_each_parameter_exactly_once(tiny_tokenizer, actions):
    text = system_prompt(actions, fmt="json")
    assert episode_tools(actions, "json") == []  # no tool block: the text is the only copy
    rendered = tiny_tokenizer.apply_chat_template([{"role": "system", "content": text}], tools=None,
                                                  add_generation_prompt=True, tokenize=False)
    assert "<tools>" not in rendered
    for tool in tool_schemas(actions):
        assert text.count(action_signature(tool)) == 1
        line = next(ln for ln in text.splitlines() if ln.startswith(f"- {action_signature(tool)}: "))
        assert line.endswith(tool["function"]["description"])
        assert all(n == 1 for n in _param_mentions(line, tool).values())
    for name in set(ALL) - set(actions):
        assert name + "(" not in text


def test_signatures_show_types_enums_and_optional_parameters():
    by_name = {t["function"]["name"]: action_signature(t) for t in tool_schemas(ALL)}
    assert by_name == {
        "request_info": "request_info(info_type: schema|column_names|column_values|term, target?: str, keyterm?: str)",
        "code_execution": "code_execution(lang?: python|sql, code: str)",
        "terminal": "terminal(cmd: str)",
        "debugging": "debugging(code?: str, error_msg?: str)",
        "submit_answer": "submit_answer(answer: str)",
    }


def test_inline_tools_turns_the_tool_call_text_into_the_compact_form():
    actions = ["request_info", "code_execution", "submit_answer"]
    tools = episode_tools(actions)
    msgs = [{"role": "system", "content": system_prompt(actions)}, {"role": "user", "content": "q"}]
    inlined = inline_tools(msgs, tools)
    assert inlined[0]["content"] == system_prompt(actions, inline=True)  # the same text as verifiers gets
    assert inlined[1] == msgs[1] and msgs[0]["content"] == system_prompt(actions)  # the input is untouched
    for tool in tools:
        assert inlined[0]["content"].count(action_signature(tool)) == 1
    assert '<tool_call>{"name": ..., "arguments": {...}}</tool_call>' in inlined[0]["content"]
    assert inline_tools(inlined, tools) == inlined  # idempotent: never listed twice
    assert inline_tools(msgs, []) == msgs
    foreign = inline_tools([{"role": "user", "content": "q"}], tools)  # no system message of ours
    assert foreign[0]["role"] == "system" and all(action_signature(t) in foreign[0]["content"] for t in tools)


def _echo_server():
    app, seen = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        seen.append(body)
        return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    return app, seen


@pytest.mark.parametrize("native", [False, True])
def test_openai_policy_sends_the_schemas_exactly_once(native):
    actions = ["request_info", "code_execution", "submit_answer"]
    tools = episode_tools(actions)
    msgs = [{"role": "system", "content": system_prompt(actions)}, {"role": "user", "content": "q"}]
    app, seen = _echo_server()
    with background_server(app) as base:
        OpenAIPolicy("m", f"{base}/v1", native_tools=native, max_retries=0).act(msgs, tools=tools)
    sent_system = seen[0]["messages"][0]["content"]
    if native:  # the endpoint gets the schemas as tools=, the system text only names the actions
        assert seen[0]["tools"] == tools and sent_system == msgs[0]["content"]
    else:  # the endpoint never sees tools=: the compact form is in the system message, once per action
        assert "tools" not in seen[0]
        assert sent_system == system_prompt(actions, inline=True)
        assert all(sent_system.count(action_signature(t)) == 1 for t in tools)


@pytest.mark.parametrize("fmt", ["tool_call", "json"])
def test_episode_opening_follows_the_format(make_env, toy_test, tiny_tokenizer, fmt):
    from medagentgym.medcopilot.data import episode_from_trajectory, sft_rows

    env = make_env(format=fmt)
    obs, info = env.reset(toy_test[0])
    permitted = info["permitted_actions"]
    assert obs.messages == initial_messages(toy_test[0], permitted, fmt=fmt)
    assert obs.tools == episode_tools(permitted, fmt) == env.trajectory.tools
    assert bool(obs.tools) == (fmt == "tool_call")
    system = obs.messages[0]["content"]
    assert all((action_signature(t) in system) == (fmt == "json") for t in tool_schemas(permitted))
    assert len(render_prompt(tiny_tokenizer, obs.messages[:1], obs.tools)) <= 0.5 * BEFORE_TOKENS["toy_sql"][fmt]
    # SFT rows carry the tools the episode used (none in json format)
    gold = toy_test[0].answer if isinstance(toy_test[0].answer, str) else json.dumps(toy_test[0].answer)
    submit = (f'<tool_call>{json.dumps({"name": "submit_answer", "arguments": {"answer": gold}})}</tool_call>'
              if fmt == "tool_call" else json.dumps({"action": "submit_answer", "params": {"answer": gold}}))
    assert env.step(submit).reward == 1.0
    chat = [*obs.messages, {"role": "assistant", "content": submit}]
    row = sft_rows([episode_from_trajectory(env.trajectory, chat)])[0]
    assert (json.loads(row["tools"]) if "tools" in row else []) == obs.tools


@pytest.mark.parametrize("fmt", ["tool_call", "json"])
def test_compact_prompt_is_one_line_of_signatures_and_no_tool_block(make_env, toy_test, tiny_tokenizer, fmt):
    env = make_env(format=fmt, prompt="compact")
    obs, info = env.reset(toy_test[0])
    permitted = info["permitted_actions"]
    assert obs.tools == [] == env.trajectory.tools
    assert obs.messages == initial_messages(toy_test[0], permitted, fmt=fmt, prompt="compact")
    system = obs.messages[0]["content"]
    assert system == compact_system_prompt(permitted, fmt=fmt) and "\n" not in system
    assert all(system.count(action_signature(t)) == 1 for t in tool_schemas(permitted))
    assert obs.messages[1] == initial_messages(toy_test[0], permitted, fmt=fmt)[1]  # the task text is the same
    full = len(render_prompt(tiny_tokenizer, initial_messages(toy_test[0], permitted, fmt=fmt)[:1],
                             episode_tools(permitted, fmt)))
    assert len(render_prompt(tiny_tokenizer, obs.messages[:1])) <= 0.4 * full
    with pytest.raises(ValueError, match="prompt style 'short' is unknown"):
        initial_messages(toy_test[0], permitted, prompt="short")


def test_prompt_tokens_script_measures_both_sides_against_the_recorded_baseline(load_script, capsys):
    script = load_script("prompt_tokens")
    root = Path(__file__).resolve().parents[2]
    have_rev = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{script.BEFORE_REV}^{{commit}}"],
                              capture_output=True, check=False).returncode == 0
    if not have_rev:
        pytest.skip(f"this clone lacks commit {script.BEFORE_REV[:10]} (the old prompt): a shallow clone?")
    assert script.main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert {(r["family"], r["format"]) for r in out["rows"]} == {(f, fmt) for f in BEFORE_TOKENS
                                                                for fmt in ("tool_call", "json")}
    for row in out["rows"]:  # "before" is what BEFORE_TOKENS records; "after" is at most half of it
        assert row["before_tokens"] == BEFORE_TOKENS[row["family"]][row["format"]], row
        assert row["ratio"] == round(row["after_tokens"] / row["before_tokens"], 3) <= 0.5, row
    with pytest.raises(SystemExit, match="cannot read env_client/actions.py at no-such-rev"):
        script.main(["--before-rev", "no-such-rev"])


def test_compact_last_puts_the_question_after_its_context():
    """Issue 30: ``compact_last`` is ``compact`` with the question as the user message's last line."""
    from types import SimpleNamespace

    from medagentgym.env_client.prompts import initial_messages

    inst = SimpleNamespace(question="Which reading?", context="One table per reading.", data={"records": "r"})
    compact = initial_messages(inst, ["code_execution", "submit_answer"], prompt="compact")
    last = initial_messages(inst, ["code_execution", "submit_answer"], prompt="compact_last")
    assert last[0] == compact[0]
    assert compact[1]["content"].startswith("Question: Which reading?")
    assert last[1]["content"] == "Context:\nOne table per reading.\n\nData (read-only): /data/records\n\nQuestion: Which reading?"
    assert sorted(last[1]["content"].split("\n\n")) == sorted(compact[1]["content"].split("\n\n"))
