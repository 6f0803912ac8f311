"""Parsing model replies: both wire formats, strictness, one action per turn, precise errors, raw text kept."""

from __future__ import annotations

import json

import pytest

from medagentgym.env_client.actions import (
    CodeExecution,
    Debugging,
    RequestInfo,
    SubmitAnswer,
    Terminal,
    parse_action,
    parse_call,
    tool_schemas,
)
from medagentgym.env_client.parsing import parse_model_text


def call(name, **arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def original(action, **params):
    return json.dumps({"action": action, "params": params})


@pytest.mark.parametrize("text,expected", [
    (call("code_execution", lang="sql", code="SELECT 1"), CodeExecution(lang="sql", code="SELECT 1")),
    (call("terminal", cmd="ls"), Terminal(cmd="ls")),
    (call("debugging"), Debugging()),
    (call("request_info", info_type="term", keyterm="asthma"), RequestInfo(info_type="term", keyterm="asthma")),
    (call("submit_answer", answer="42"), SubmitAnswer(answer="42")),
    ("I will count.\n" + call("submit_answer", answer="7"), SubmitAnswer(answer="7")),
    ("<think>maybe 6?</think>\n" + call("submit_answer", answer="7"), SubmitAnswer(answer="7")),
    ('<tool_call>\n{"name": "submit_answer", "arguments": "{\\"answer\\": \\"7\\"}"}\n</tool_call>',
     SubmitAnswer(answer="7")),
    ('<tool_call>{"name": "submit_answer", "arguments": {"answer": "7"}}', SubmitAnswer(answer="7")),  # no close tag
])
def test_tool_call_format(text, expected):
    result = parse_model_text(text)
    assert result.ok and result.format == "tool_call" and result.error is None
    assert result.action == expected and result.raw == text


@pytest.mark.parametrize("text,expected", [
    (original("validate_code", code="print(1)"), CodeExecution(lang="python", code="print(1)")),
    (original("debug", code="x", error_msg="NameError"), Debugging(code="x", error_msg="NameError")),
    (original("request_info", data_path="/data/x.csv", info_type="column_names", keyterm=""),
     RequestInfo(info_type="column_names", target="/data/x.csv", keyterm="")),
    (original("terminal", cmd="ls"), Terminal(cmd="ls")),
    ("```json\n" + original("submit_answer", answer="yes") + "\n```", SubmitAnswer(answer="yes")),
    ("<think>\nhmm {not json}\n</think>\n" + original("submit_answer", answer="no"), SubmitAnswer(answer="no")),
    ("lost opening tag</think>" + original("submit_answer", answer="no"), SubmitAnswer(answer="no")),
    ('{"action": "validate_code", "params": {"code": """import os\nprint("hi")"""}}',
     CodeExecution(code='import os\nprint("hi")')),
    ('{"action": "submit_answer", "params": {"answer": 3.5}}', SubmitAnswer(answer="3.5")),
    ('{"action": "submit_answer", "params": {"answer": ["a", "b"]}}', SubmitAnswer(answer='["a", "b"]')),
])
def test_original_json_format(text, expected):
    result = parse_model_text(text)
    assert result.ok and result.format == "json", result.error
    assert result.action == expected


@pytest.mark.parametrize("text,fragment", [
    ("", "the reply is empty"),
    ("I think the answer is 42.", "no action found"),
    ('{"action": "submit_answer", "params": {"answer": "1"}, "thought": "x"}', 'exactly the keys "action" and "params"'),
    ('{"action": "submit_answer"}', 'exactly the keys "action" and "params"'),
    (original("submit", answer="1"), "did you mean 'submit_answer'?"),
    (original("code_execution", lang="sql"), "code_execution.code: Field required"),
    (original("code_execution", code="x", lang="r"), "code_execution.lang"),
    (original("terminal", cmd="ls", timeout=3), "terminal.timeout: unexpected key; allowed keys: cmd"),
    (original("submit_answer", answer="1") + "\n" + original("submit_answer", answer="2"), "several actions"),
    ("```json\n" + original("terminal", cmd="a") + "\n```\n```json\n" + original("terminal", cmd="b") + "\n```",
     "2 JSON blocks"),
    ('{"action": "terminal", "params": {"cmd": "ls"', "invalid JSON"),
    (call("terminal", cmd="ls") + call("terminal", cmd="pwd"), "2 tool calls in one reply"),
    ('<tool_call>{"name": "terminal"}</tool_call>', 'exactly the keys "name" and "arguments"'),
    ('<tool_call>{"name": "terminal", "arguments": {"cmd": "ls"}, "id": 1}</tool_call>', '"name" and "arguments"'),
    ("<tool_call>not json</tool_call>", "not valid JSON"),
    (call("code_execution", code=""), "code_execution.code"),
    (call("submit_answer", answer="1", action="x"), "'action' goes outside"),
])
def test_parse_errors_are_precise_and_show_the_format(text, fragment):
    result = parse_model_text(text)
    assert not result.ok and result.action is None
    assert fragment in result.error, result.error
    assert "Reply with exactly one action" in result.error
    assert ("<tool_call>" in result.error) or ('"action"' in result.error)
    assert result.raw == text


def test_error_example_follows_the_format_used():
    assert '{"action": "code_execution"' in parse_model_text(original("nope")).error
    assert "<tool_call>" in parse_model_text(call("nope")).error


def test_typed_actions_and_tool_schemas():
    assert parse_action({"action": "terminal", "cmd": "ls"}) == Terminal(cmd="ls")
    assert parse_call("validate_code", {"code": "1"}).lang == "python"
    schemas = tool_schemas(["submit_answer", "code_execution", "request_info", "debugging", "terminal"])
    assert [s["function"]["name"] for s in schemas] == [
        "request_info", "code_execution", "terminal", "debugging", "submit_answer"]
    for schema in schemas:
        params = schema["function"]["parameters"]
        # The shown schema omits additionalProperties (prompt tokens); the models still reject extra keys.
        assert params["type"] == "object" and "additionalProperties" not in params
        assert not any(k in p for p in params["properties"].values() for k in ("maxLength", "minLength"))
        assert "action" not in params["properties"]
        assert all(p.get("description") for p in params["properties"].values())
        assert schema["function"]["description"]
    code = schemas[1]["function"]["parameters"]
    assert code["required"] == ["code"] and code["properties"]["lang"]["enum"] == ["python", "sql"]
    with pytest.raises(ValueError, match="unexpected key; allowed keys: cmd"):
        parse_call("terminal", {"cmd": "ls", "cwd": "/"})
    with pytest.raises(ValueError, match="unknown action"):
        tool_schemas(["shell"])


# -- attacks: a reply is the policy's to choose, so no reply may crash or stall the host ---------------------------
_DEEP = "[" * 5000


@pytest.mark.parametrize("text", [
    f'<tool_call>{{"name": "submit_answer", "arguments": {{"answer": {_DEEP}}}}}</tool_call>',
    f'{{"action": "submit_answer", "params": {{"answer": {_DEEP}}}}}',
    f'```json\n{{"action": "submit_answer", "params": {_DEEP}}}\n```',
    '<tool_call>{"name": "submit_answer", "arguments": ' + json.dumps(_DEEP + "]" * 5000) + "}</tool_call>",
    f'{{"action": "submit_answer", "params": {{"answer": """{_DEEP}""", "x": {_DEEP}}}}}',
    "{" * 100_000,
])
def test_deeply_nested_replies_are_parse_errors_not_exceptions(text):
    result = parse_model_text(text)  # raised RecursionError before
    assert not result.ok and result.error.startswith("Invalid action") and result.raw == text


@pytest.mark.parametrize("text", [
    "<think>" * 60_000,                                 # every open tag scanned to the end: quadratic
    "```" + " " * 200_000,                              # an unclosed fence after whitespace: quadratic
    "```json" + "\n" * 200_000 + "x",
    '{"action": "x", "params": {"a": """' + "'''x" * 60_000,
    "<tool_call>" * 30_000,
])
def test_parsing_is_linear_time(text):
    import time

    start = time.process_time()
    result = parse_model_text(text)
    used = time.process_time() - start
    # Linear scanning takes milliseconds; the regular expressions it replaced took ~15 s of CPU on the first
    # input at a third of this size. A CPU-time bound (not wall time) holds on a loaded machine.
    assert used < 2.0, used
    assert not result.ok


def test_an_oversized_or_non_text_reply_is_an_error():
    from medagentgym.env_client.parsing import MAX_REPLY_CHARS

    assert "characters" in parse_model_text("x" * (MAX_REPLY_CHARS + 1)).error
    assert not parse_model_text(["a"] * 10).ok and not parse_model_text(None).ok
