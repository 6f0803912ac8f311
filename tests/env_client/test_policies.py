"""Policies: the OpenAI-compatible client over a real HTTP round trip, scripted policies, the spec factory."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from medagentgym.env_client.policies import (
    ConstantPolicy,
    EmptyPolicy,
    OpenAIPolicy,
    PolicyError,
    ShotgunPolicy,
    TracebackPolicy,
    bind,
    make_policy,
    render_action,
)
from medagentgym.env_client.server_app import background_server


def _fake_chat_server(fail_first: int, status: int = 500, headers: dict | None = None):
    """A chat-completions endpoint that answers ``status`` ``fail_first`` times, then echoes what it was sent."""
    app = FastAPI()
    seen: list[dict] = []
    lock = threading.Lock()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        with lock:
            seen.append(body)
            n = len(seen)
        if n <= fail_first:
            return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}}, status_code=status,
                                headers=headers)
        reply = f"seed={body.get('seed')} temp={body['temperature']} n={len(body['messages'])}"
        message = {"role": "assistant", "content": reply}
        if body.get("tools"):  # native function calling
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "submit_answer", "arguments": '{"answer": "4"}'}}]}
        return {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }

    return app, seen


def test_openai_policy_round_trip_with_retry_after_500():
    app, seen = _fake_chat_server(fail_first=1)
    with background_server(app) as base:
        policy = make_policy(f"openai:tiny-model@{base}/v1", temperature=0.3, max_retries=2, max_new_tokens=64)
        assert isinstance(policy, OpenAIPolicy) and policy.max_tokens == 64
        msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"}, {"role": "tool", "content": "rows"}]
        out = policy.act(msgs, seed=42)
    assert len(seen) == 2  # one 500, one success
    assert out.text == "seed=42 temp=0.3 n=4"
    assert (out.n_prompt_tokens, out.n_completion_tokens) == (11, 7)
    assert seen[1]["model"] == "tiny-model" and seen[1]["messages"][3] == {
        "role": "user", "content": "<tool_response>\nrows\n</tool_response>"}


def test_openai_policy_gives_up_after_retries():
    app, seen = _fake_chat_server(fail_first=10)
    with background_server(app) as base:
        policy = OpenAIPolicy("m", f"{base}/v1", max_retries=2)
        with pytest.raises(PolicyError, match="InternalServerError 500: .*overloaded") as info:
            policy.act([{"role": "user", "content": "q"}])
    assert len(seen) == 3 and info.value.status == 500  # the SDK's own retries: 1 + 2


def test_openai_policy_honours_retry_after():
    app, seen = _fake_chat_server(fail_first=1, status=429, headers={"retry-after": "1.5"})
    with background_server(app) as base:
        policy = OpenAIPolicy("m", f"{base}/v1", max_retries=2)
        start = time.monotonic()
        out = policy.act([{"role": "user", "content": "q"}])
    # Without the header the SDK's first backoff is at most 0.5 s: waiting >= 1.4 s means Retry-After was used.
    assert time.monotonic() - start >= 1.4 and len(seen) == 2 and out.n_prompt_tokens == 11


def test_openai_policy_does_not_retry_a_refusal_and_says_what_to_do():
    app, seen = _fake_chat_server(fail_first=10, status=401)
    with background_server(app) as base:
        with pytest.raises(PolicyError, match="OPENAI_API_KEY") as info:
            OpenAIPolicy("m", f"{base}/v1", max_retries=3).act([{"role": "user", "content": "q"}])
    assert len(seen) == 1 and info.value.status == 401


def test_native_tools_send_a_faithful_history():
    app, seen = _fake_chat_server(fail_first=0)
    tools = [{"type": "function", "function": {"name": "code_execution", "parameters": {"type": "object"}}}]
    call = render_action("code_execution", {"lang": "sql", "code": "SELECT 1"})
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": "Let me look.\n" + call}, {"role": "tool", "content": "rows"},
            {"role": "assistant", "content": "no call here"}, {"role": "user", "content": "parse error"}]
    with background_server(app) as base:
        OpenAIPolicy("m", f"{base}/v1", native_tools=True, extra_body={"top_k": 20}).act(msgs, tools=tools)
    sent = seen[0]["messages"]
    assert sent[2]["role"] == "assistant" and sent[2]["content"] == "Let me look."
    assert sent[2]["tool_calls"] == [{"id": "call_1_0", "type": "function", "function": {
        "name": "code_execution", "arguments": '{"lang": "sql", "code": "SELECT 1"}'}}]
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1_0", "content": "rows"}
    assert sent[4] == {"role": "assistant", "content": "no call here"} and sent[5]["role"] == "user"
    assert seen[0]["top_k"] == 20  # extra_body fields reach the endpoint


def _submitted(text: str) -> str:
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
    call = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
    assert call["name"] == "submit_answer"
    return call["arguments"]["answer"]


def test_adversaries_submit_what_they_claim():
    msgs = [{"role": "user", "content": "q"}]
    assert _submitted(ConstantPolicy().act(msgs).text) == "0"
    assert _submitted(make_policy("constant:True").act(msgs).text) == "True"
    shot = _submitted(ShotgunPolicy().act(msgs).text).split(", ")
    assert {"0", "1", "100", "True", "False", "yes", "no"} <= set(shot)
    assert _submitted(TracebackPolicy().act(msgs).text).startswith("Traceback (most recent call last):")
    assert _submitted(EmptyPolicy().act(msgs).text) == ""
    as_json = json.loads(make_policy("empty", fmt="json").act(msgs).text)
    assert as_json == {"action": "submit_answer", "params": {"answer": ""}}


class _Fam:
    def reference_solution(self, inst):
        return [{"action": "code_execution", "params": {"lang": "sql", "code": "SELECT 1"}},
                {"action": "submit_answer", "params": {"answer": "1"}}]


class _Inst:
    id, family = "fam/test/0000", "fam"


def test_oracle_replays_reference_per_episode():
    policy = make_policy("oracle", families={"fam": _Fam()})
    with pytest.raises(PolicyError, match="bind"):
        policy.act([])
    a, b = bind(policy, _Inst()), bind(policy, _Inst())
    assert a.act([]).text == render_action("code_execution", {"lang": "sql", "code": "SELECT 1"})
    assert b.act([]).text.startswith("<tool_call>")  # episodes keep separate cursors
    assert _submitted(a.act([]).text) == "1"
    with pytest.raises(PolicyError, match="ran out"):
        a.act([])


def test_make_policy_errors_are_one_line():
    with pytest.raises(PolicyError, match="unknown policy spec 'bogus'"):
        make_policy("bogus")
    with pytest.raises(PolicyError, match="families"):
        make_policy("oracle")
    with pytest.raises(PolicyError, match="unknown action format"):
        render_action("submit_answer", {}, "xml")  # type: ignore[arg-type]


def test_vllm_guard_names_the_extra(tmp_path):
    (tmp_path / "config.json").write_text("{}")  # a model folder that exists: the guard is the extra's
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(PolicyError, match=r"pip install 'medagentgym\[gpu\]'"):
            make_policy(f"vllm:{tmp_path}")
    else:
        pytest.skip("vllm is installed here; the guard is not reachable")


def test_openai_native_tool_calls_become_tool_call_text():
    app, seen = _fake_chat_server(fail_first=0)
    tools = [{"type": "function", "function": {"name": "submit_answer", "parameters": {"type": "object"}}}]
    with background_server(app) as base:
        out = OpenAIPolicy("m", f"{base}/v1", native_tools=True).act([{"role": "user", "content": "q"}], tools=tools)
    assert seen[0]["tools"] == tools
    assert _submitted(out.text) == "4"


def test_openai_async_act_concurrent_with_retry():
    import asyncio

    app, seen = _fake_chat_server(fail_first=1)
    with background_server(app) as base:
        policy = OpenAIPolicy("m", f"{base}/v1", temperature=0.7)

        async def many():
            msgs = [{"role": "user", "content": "q"}]
            return await asyncio.gather(*(policy.aact(msgs, seed=i) for i in range(3)))

        outs = asyncio.run(many())
    assert [o.text for o in outs] == [f"seed={i} temp=0.7 n=1" for i in range(3)]
    assert len(seen) == 4 and all(o.n_completion_tokens == 7 for o in outs)  # one 500 was retried


def test_a_missing_or_mistyped_local_model_fails_at_once_without_the_hub(tmp_path, monkeypatch):
    """``hf:runs/pp_tiny`` (a typo of runs/ppo_tiny) is a local path, named at once with the nearest folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "ppo_tiny").mkdir(parents=True)
    (tmp_path / "runs" / "ppo_tiny" / "config.json").write_text("{}")
    with pytest.raises(PolicyError, match=r"^policy 'hf:runs/pp_tiny': no model folder at 'runs/pp_tiny' "
                                          r"\(runs/pp_tiny does not exist\); did you mean runs/ppo_tiny\?$"):
        make_policy("hf:runs/pp_tiny")
    with pytest.raises(PolicyError, match="no model folder at '/no/such/model' \\(/no does not exist\\)"):
        make_policy("hf:/no/such/model")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PolicyError, match="neither a local folder nor in the Hub cache, and HF_HUB_OFFLINE is set"):
        make_policy("hf:no-such-org/no-such-model")
