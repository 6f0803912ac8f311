"""API models fail fast and keep what they did, against real local HTTP servers.

* a closed port: the probe before the run fails with one line, no episode starts;
* a server that accepts and never answers: one probe connection, no retry, one line naming the wait;
* a server that refuses the chat as too long on turn 2: the episode ends truncated (``context_length``) with
  turn 1's usage kept, not an infrastructure failure, and a rerun does not send it again;
* an endpoint that fails every chat: the run stops after N episodes in a row with one line;
* an endpoint that lists its models but never answers a chat (issue 31: 778 s and nothing printed): the probe's
  one 1-token chat fails with one line; one that stops answering mid-run stops the run after 2 timed-out episodes.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from medagentgym.env_client.policies import OpenAIPolicy, PolicyError, is_context_overflow
from medagentgym.env_client.server_app import background_server

SANDBOX = "bwrap" if shutil.which("bwrap") else "local"
MODEL = "tiny-model"
#: vLLM's words for a chat longer than the model's context (an OpenAI-style 400).
OVERFLOW = ("This model's maximum context length is 64 tokens. However, you requested 900 tokens (836 in the "
            "messages, 64 in the completion). Please reduce the length of the messages or completion.")


@pytest.fixture(scope="module")
def tasks_root(tmp_path_factory):
    from medagentgym import tasks

    root = tmp_path_factory.mktemp("tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


def _evaluate(load_script, root: Path, out: Path, policy: str, *extra: str) -> int:
    return load_script("evaluate").main(["--policy", policy, "--families", "toy_sql", "--limit", "3",
                                         "--tasks-root", str(root), "--out", str(out), "--sandbox", SANDBOX,
                                         "--allow-unisolated", "--no-progress", "--no-plots", "--concurrency", "1",
                                         *extra])


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_a_closed_port_fails_before_any_episode_with_one_line(load_script, tasks_root, tmp_path, capsys):
    status = _evaluate(load_script, tasks_root, tmp_path / "out", f"openai:{MODEL}@http://127.0.0.1:{_closed_port()}/v1")
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and "APIConnectionError" in err[0]
    assert "check that the server runs" in err[0]
    assert not (tmp_path / "out" / "trajectories.jsonl").exists()  # nothing ran


class _MuteServer:
    """Accepts TCP connections, reads, never answers; counts the connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)  # held open, never written to

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


def test_a_server_that_never_answers_fails_after_one_probe_with_the_timeout(load_script, tasks_root, tmp_path,
                                                                             capsys):
    mute = _MuteServer()
    try:
        status = _evaluate(load_script, tasks_root, tmp_path / "out", f"openai:{MODEL}@http://127.0.0.1:{mute.port}/v1",
                           "--timeout", "1", "--max-retries", "3")
    finally:
        mute.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert "accepted the connection but did not answer within 1 s" in err[0]
    assert mute.accepted == 1  # the probe does not retry, and no episode started


def _chat_server(fail: str):
    """``fail="turn2"``: turn 1 runs SQL, turn 2 is refused as too long; ``fail="always"``: every chat is a 500."""
    app = FastAPI()
    calls: list[int] = []

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "test"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        turn = 1 + sum(m["role"] == "assistant" for m in body["messages"])
        calls.append(turn)
        if fail == "always":
            return JSONResponse({"error": {"message": "boom", "type": "server_error"}}, status_code=500)
        if turn >= 2:
            return JSONResponse({"object": "error", "message": OVERFLOW, "type": "BadRequestError", "code": 400},
                                status_code=400)
        call = {"name": "code_execution", "arguments": {"lang": "sql", "code": "SELECT 1"}}
        return {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": f"<tool_call>\n{json.dumps(call)}\n</tool_call>"}}],
                "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}}

    return app, calls


def test_a_context_overflow_on_turn_2_ends_the_episode_truncated_with_its_usage(load_script, tasks_root, tmp_path,
                                                                                 capsys):
    app, calls = _chat_server("turn2")
    out = tmp_path / "out"
    with background_server(app) as base:
        policy = f"openai:{MODEL}@{base}/v1"
        assert _evaluate(load_script, tasks_root, out, policy, "--max-retries", "0") == 0  # no infra failure
        first = list(calls)
        assert _evaluate(load_script, tasks_root, out, policy, "--max-retries", "0") == 0
    # the probe's 1-token chat, then 3 episodes; the rerun sends only its probe: the episodes are stored
    assert first == [1, 1, 2, 1, 2, 1, 2] and calls == [*first, 1]
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    finals = [r["final"] for r in rows if r.get("final")] or [r["final"] for r in rows]
    assert len(finals) == 3
    for final in finals:
        assert final["truncated"] and final["reason"] == "context_length" and final["turns"] == 1
        assert final["prompt_tokens"] == 40 and final["total_tokens"] == 9
    report = json.loads((out / "report.json").read_text())
    assert report["infra_failures"] == 0 and report["errors"] == {"truncated": 3} and report["prompt_tokens"] == 120
    capsys.readouterr()


def test_an_endpoint_failing_every_chat_stops_the_run_after_n_in_a_row(load_script, tasks_root, tmp_path, capsys):
    app, calls = _chat_server("always")
    with background_server(app) as base:
        status = _evaluate(load_script, tasks_root, tmp_path / "out", f"openai:{MODEL}@{base}/v1",
                           "--max-retries", "0", "--max-failures-in-a-row", "2", "-k", "3")
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith("error: stopped: 2 episodes in a row failed to run, the last with PolicyError")
    assert "rerun the same command to resume" in err[0]
    # the probe's chat (a 500 answers: left to the run), then of 9 episodes the 2 that failed and at most the one
    # already in flight
    assert 3 <= len(calls) <= 4


def test_the_probe_names_the_models_a_server_serves_and_overflow_words_are_recognised():
    app, _ = _chat_server("turn2")
    with background_server(app) as base:
        OpenAIPolicy(MODEL, f"{base}/v1").probe()
        with pytest.raises(PolicyError, match=rf"does not serve model 'other'; it serves {MODEL}"):
            OpenAIPolicy("other", f"{base}/v1").probe()
    assert is_context_overflow(400, OVERFLOW)
    assert is_context_overflow(400, "prompt is too long: 210000 tokens > 200000 maximum")  # Anthropic-style
    assert not is_context_overflow(400, "Unsupported parameter: 'seed'") and not is_context_overflow(500, OVERFLOW)


class _ScriptedChatServer:
    """Lists its models at once; answers each chat by ``script`` (one entry per chat, the last repeated): ``"ok"``
    answers, ``"hang"`` reads the request and never answers, a number answers that HTTP error status (429 and 503
    with ``Retry-After: 0``). Keeps each chat body's digest (a retried request repeats one) and counts the 1-token
    chats (the probe's and the liveness checks, which share one body)."""

    def __init__(self, script: list) -> None:
        import hashlib
        import http.server

        outer, self.bodies, self.checks, self.released = self, [], 0, threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _json(self, body: dict, status: int = 200) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status in (429, 503):
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._json({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                        "owned_by": "test"}]})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.bodies.append(hashlib.sha256(body).hexdigest())
                outer.checks += json.loads(body).get("max_tokens") == 1  # the probe's or a liveness check
                what = script[min(len(outer.bodies), len(script)) - 1]
                if what == "ok":
                    self._json({"id": "c", "object": "chat.completion", "created": 0, "model": MODEL,
                                "choices": [{"index": 0, "finish_reason": "length",
                                             "message": {"role": "assistant", "content": "OK"}}],
                                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})
                elif what == "hang":
                    outer.released.wait(120)  # hung: holds the request until the test ends
                else:
                    self._json({"error": {"message": f"flaky {what}", "type": "server_error"}}, status=what)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def chats(self) -> int:
        return len(self.bodies)

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def test_an_endpoint_that_lists_models_but_never_chats_fails_at_the_probe(load_script, tasks_root, tmp_path, capsys):
    """Attack (issue 31): /models answers, a chat never does; with --timeout 60 --max-retries 2 this cost 778 s and
    printed nothing. The probe's one chat (no retry) fails with one line after one --timeout."""
    hung = _ScriptedChatServer(["hang"])
    try:
        status = _evaluate(load_script, tasks_root, tmp_path / "out", f"openai:{MODEL}@{hung.url}",
                           "--timeout", "1", "--max-retries", "2")
        chats = hung.chats
    finally:
        hung.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert "did not answer a 1-token chat" in err[0] and "within --timeout 1 s" in err[0]
    assert chats == 1  # the probe's chat, not retried; no episode started
    assert not (tmp_path / "out" / "trajectories.jsonl").exists()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_endpoint_that_hangs_mid_run_stops_it_after_two_request_timeouts(load_script, tasks_root, tmp_path,
                                                                              capsys, concurrency):
    """Attack (issue 31): the endpoint answers the probe, then hangs. Before: the SDK retried each timed-out request
    (--max-retries 2: 3 x --timeout per episode, plus backoff) and the run stopped after 2 such episodes (about
    6 min at the defaults). Now a timed-out request is never retried, and 2 request timeouts in a row across the
    run's episodes (at concurrency 1: the request, then one 1-token liveness check) stop it with one line naming
    the endpoint, the timeout and what to do."""
    hung = _ScriptedChatServer(["ok", "hang"])
    try:
        status = _evaluate(load_script, tasks_root, tmp_path / "out", f"openai:{MODEL}@{hung.url}",
                           "--timeout", "1", "--max-retries", "2", "-k", "3", "--concurrency", str(concurrency))
        bodies, checks = list(hung.bodies), hung.checks
    finally:
        hung.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: stopped: the model endpoint {hung.url} stopped answering: 2 requests in a row")
    assert "--timeout 1 s, not retried" in err[0] and "rerun the same command to resume" in err[0]
    episodes = len(bodies) - checks  # requests of episodes: each sent once (a timeout is never retried)
    assert len(set(bodies)) == episodes + 1 and checks in (1, 2)  # the probe, at most one liveness check
    if concurrency == 1:  # the probe, the first episode's request, the liveness check; nothing more
        assert (episodes, checks) == (1, 2)
    else:  # at most one request per episode in flight
        assert 1 <= episodes <= concurrency


def test_a_flaky_endpoint_is_retried_on_5xx_429_and_connection_errors_not_on_a_timeout():
    """503 then 429 then an answer: the request is retried (backoff, Retry-After) and succeeds; the SDK's own
    retries are off (one attempt per try), so the counts are exact. A timed-out request is sent once."""
    flaky = _ScriptedChatServer([503, 429, "ok", "hang"])
    try:
        policy = OpenAIPolicy(MODEL, flaky.url, max_retries=2, timeout_s=1, backoff_s=0.01)
        out = policy.act([{"role": "user", "content": "hi"}], seed=0)
        assert out.text == "OK" and flaky.chats == 3 and policy.timeouts_in_a_row == 0
        with pytest.raises(PolicyError) as caught:  # the 4th chat hangs: one try, then one liveness check
            policy.act([{"role": "user", "content": "again"}], seed=1)
        assert caught.value.timed_out and caught.value.hung and flaky.chats == 5
        with pytest.raises(PolicyError, match="stopped answering") as again:  # declared hung: nothing is sent
            policy.act([{"role": "user", "content": "third"}], seed=2)
        assert again.value.hung and flaky.chats == 5
    finally:
        flaky.close()
    refused = OpenAIPolicy(MODEL, f"http://127.0.0.1:{_closed_port()}/v1", max_retries=2, backoff_s=0.01)
    with pytest.raises(PolicyError) as caught:
        refused.act([{"role": "user", "content": "hi"}])
    assert caught.value.unreachable and not caught.value.timed_out and refused.timeouts_in_a_row == 0


def test_retries_are_bounded_and_an_answer_ends_a_timeout_streak():
    """A 5xx for ever: max_retries + 1 tries, then one line with the status. A timeout followed by an answer (the
    liveness check) is no hang: the streak ends and the next request is sent."""
    down = _ScriptedChatServer([500])
    try:
        with pytest.raises(PolicyError) as caught:
            OpenAIPolicy(MODEL, down.url, max_retries=3, timeout_s=1, backoff_s=0.01).act([{"role": "user",
                                                                                          "content": "hi"}])
        assert caught.value.status == 500 and down.chats == 4 and not caught.value.timed_out
    finally:
        down.close()
    slow = _ScriptedChatServer(["hang", "ok", "ok"])  # one long request, then a live endpoint
    try:
        policy = OpenAIPolicy(MODEL, slow.url, max_retries=2, timeout_s=1, backoff_s=0.01)
        with pytest.raises(PolicyError) as caught:
            policy.act([{"role": "user", "content": "long"}])
        assert caught.value.timed_out and not caught.value.hung and slow.chats == 2  # the request, the check
        assert policy.timeouts_in_a_row == 0 and policy.act([{"role": "user", "content": "next"}]).text == "OK"
    finally:
        slow.close()


def test_concurrent_async_requests_count_toward_one_hang():
    """The async backend's many requests in flight on one hung endpoint: each is sent once, their timeouts count
    together (2 declare the hang), and a request after that fails at once without being sent."""
    import asyncio

    hung = _ScriptedChatServer(["hang"])
    try:
        policy = OpenAIPolicy(MODEL, hung.url, max_retries=2, timeout_s=1, backoff_s=0.01)

        async def many():
            return await asyncio.gather(*(policy.aact([{"role": "user", "content": f"q{i}"}], seed=i)
                                          for i in range(4)), return_exceptions=True)

        outs = asyncio.run(many())
        assert all(isinstance(o, PolicyError) and o.timed_out for o in outs), outs
        assert any(o.hung for o in outs) and policy.timeouts_in_a_row >= 2
        sent = len(hung.bodies)
        assert sent - hung.checks == 4 and hung.checks <= 1 and len(set(hung.bodies)) == sent  # none sent twice
        with pytest.raises(PolicyError, match="stopped answering"):
            asyncio.run(policy.aact([{"role": "user", "content": "later"}]))
        assert len(hung.bodies) == sent
    finally:
        hung.close()
