"""OpenEnv's own generic client (openenv-core) plays toy_sql episodes against the env server to a graded reward,
over WebSocket sessions, with the server's token, session and gold-hiding limits in force."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("openenv", reason="openenv-core is not installed (pip install '.[openenv]')")

from medagentgym.env_client.server_app import background_server

TOKEN = "openenv-test-token-42"
SQL = '<tool_call>{"name": "code_execution", "arguments": {"lang": "sql", "code": "SELECT COUNT(*) FROM patients"}}' \
      '</tool_call>'


def build_openenv_app(*args, **kwargs):
    """``medagentgym.adapters.openenv.build_openenv_app``, imported on first use: openenv-core's server pulls in
    gradio (~8 s of CPU), which test collection should not pay (issue #29)."""
    from medagentgym.adapters.openenv import build_openenv_app as build

    return build(*args, **kwargs)


def GenericEnvClient(*args, **kwargs):  # stands for the class
    """openenv-core's ``GenericEnvClient(...)``, imported on first use (``openenv.core`` loads its server too)."""
    from openenv import GenericEnvClient as client

    return client(*args, **kwargs)


@pytest.fixture(scope="module")
def server(toy_root, make_test_pool):
    pool = make_test_pool(2)
    app = build_openenv_app(toy_root, pool=pool, tokens=[TOKEN], families=["toy_sql"], max_sessions_per_client=1)
    with background_server(app) as url:
        yield url, url.replace("http://", f"http://trainer:{TOKEN}@")
    pool.close()


def test_generic_client_runs_an_episode_to_a_graded_reward(server, oracle_answer):
    _, authed = server
    with GenericEnvClient(base_url=authed).sync() as env:
        first = env.reset(task_id="toy_sql/test/0001", episode_id="run-7/ep-3")
        assert first.observation["kind"] == "task" and not first.done and first.reward is None
        assert "submit_answer" in [t["function"]["name"] for t in first.observation["tools"]]
        ran = env.step({"text": SQL})
        assert ran.observation["info"]["status"] == "ok" and ran.reward == 0.0 and not ran.done
        done = env.step({"typed": {"action": "submit_answer", "answer": oracle_answer("toy_sql/test/0001")}})
        assert done.done and done.reward == 1.0 and done.observation["info"]["verdict"]["correct"]
        state = env.state()
        assert state["episode_id"] == "run-7/ep-3" and state["step_count"] == 2  # the id given to reset
        assert state["final"]["reason"] == "submitted"
        # the same socket, a new episode picked by seed: the same seed picks the same task
        picked = [env.reset(seed=11).observation["info"]["task_id"] for _ in range(2)]
        assert picked[0] == picked[1] and picked[0].startswith("toy_sql/train/")
        wrong = env.step({"typed": {"action": "submit_answer", "answer": "-1"}})
        assert wrong.done and wrong.reward == 0.0


def test_gold_stays_hidden_and_misuse_is_an_error_message(server, oracle_answer):
    _, authed = server
    gold = oracle_answer("toy_sql/test/0002")
    with GenericEnvClient(base_url=authed).sync() as env:
        env.reset(task_id="toy_sql/test/0002")
        result = env.step({"typed": {"action": "submit_answer", "answer": "123456789"}})
        seen = json.dumps([result.observation, env.state()])
        assert result.observation["info"]["verdict"]["reason"] == "hidden by the server"
        assert f"!= {gold}" not in seen and f"'{gold}'" not in seen
        with pytest.raises(RuntimeError, match="the episode is over"):
            env.step({"text": "again"})  # the episode is over
        with pytest.raises(RuntimeError, match="not in toy_sql/test"):
            env.reset(task_id="toy_sql/test/9999")


def test_metadata_and_schema_answer_openenv_clients(server):
    import httpx

    url, _ = server
    headers = {"Authorization": f"Bearer {TOKEN}"}
    meta = httpx.get(f"{url}/metadata", headers=headers).json()
    assert meta["name"] == "MedAgentGym" and "toy_sql" in meta["description"]
    schema = httpx.get(f"{url}/schema", headers=headers).json()
    assert {"action", "observation", "state"} <= set(schema) and "text" in schema["action"]["properties"]
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"  # open, as OpenEnv's probes expect
    assert httpx.get(f"{url}/metadata").status_code == 401


def test_token_and_per_client_session_cap_apply_to_websockets(server):
    url, authed = server
    with pytest.raises(ConnectionError, match="403"), GenericEnvClient(base_url=url).sync() as env:  # no token
        env.reset(seed=0)
    with GenericEnvClient(base_url=authed).sync() as env:
        env.reset(seed=0)
        # a second socket of the same client is refused at the handshake
        with pytest.raises(ConnectionError, match="403"), GenericEnvClient(base_url=authed).sync() as other:
            other.reset(seed=1)
        assert env.step({"text": SQL}).observation["info"]["status"] == "ok"  # the first still serves


def test_an_abandoned_websocket_session_is_reaped_and_frees_its_worker(toy_root, make_test_pool):
    """One sandbox worker: a silent WebSocket session is closed by the env server's reaper (idle timeout; openenv-core's
    own reaper, started by our lifespan, is a second bound), so a new session gets the worker; the abandoned client's
    next step is an error (the socket closed with code 4001 and the reason), not a hang."""
    import time

    pool = make_test_pool(1, max_workers=1)
    try:
        app = build_openenv_app(toy_root, pool=pool, families=["toy_sql"], idle_timeout_s=2.0, worker_wait_s=0.3)
        with background_server(app) as url, GenericEnvClient(base_url=url).sync() as abandoned:
            abandoned.reset(seed=0)  # holds the only worker, then goes silent
            deadline = time.monotonic() + 300  # reaper period 0.5 s, plus a loaded machine (a hang guard)
            while True:  # a new session per try: OpenEnv counts only successful calls as activity
                try:  # refused at the handshake while the abandoned session holds the client's one session
                    fresh_client = GenericEnvClient(base_url=url).sync().__enter__()
                except ConnectionError as exc:
                    assert "403" in str(exc)
                    assert time.monotonic() < deadline, "the abandoned session was never reaped"
                    time.sleep(0.2)
                    continue
                with fresh_client as fresh:
                    try:
                        fresh.reset(seed=1)
                    except RuntimeError as exc:
                        assert "no sandbox worker became free" in str(exc)
                        assert time.monotonic() < deadline, "the abandoned session was never reaped"
                        continue
                    assert fresh.step({"text": SQL}).observation["info"]["status"] == "ok"
                    break
            from websockets.exceptions import ConnectionClosed

            with pytest.raises(ConnectionClosed) as closed:
                abandoned.step({"text": SQL})
            assert closed.value.rcvd.code == 4001 and "idle (2 s)" in closed.value.rcvd.reason
    finally:
        pool.close()


# ------------------------------------------------------------------------------ OpenEnv's HTTP contract, MCP, errors


@pytest.fixture(scope="module")
def open_server(toy_root, make_test_pool):
    """A server without tokens, as OpenEnv's own HTTP tests and `openenv validate` address one."""
    pool = make_test_pool(1)
    with background_server(build_openenv_app(toy_root, pool=pool, families=["toy_sql"])) as url:
        yield url
    pool.close()


def _submit(answer: str) -> dict:
    return {"typed": {"action": "submit_answer", "answer": answer}}


def test_openenv_http_contract_plays_an_episode(open_server, oracle_answer):
    """OpenEnv's HTTP contract, as its LocalDockerProvider test drives a server: POST /reset {}, POST /step
    {"action": ...}, GET /state; the episode spans the requests, and openenv-core's runtime validator passes."""
    import httpx
    from openenv.cli._validation import validate_running_environment

    with httpx.Client(base_url=open_server, timeout=120) as http:
        first = http.post("/reset", json={})
        assert first.status_code == 200, first.text
        body = first.json()
        assert body["reward"] is None and body["done"] is False and body["observation"]["kind"] == "task"
        task_id, eid = body["info"]["task_id"], body["episode_id"]
        seeded = [http.post("/reset", json={"seed": 3, "episode_id": eid}).json() for _ in range(2)]
        assert seeded[0]["info"]["task_id"] == seeded[1]["info"]["task_id"]  # the same seed, the same task
        assert {r["episode_id"] for r in seeded} == {eid}  # naming the episode restarts it
        task_id = http.post("/reset", json={"task_id": task_id, "episode_id": eid}).json()["info"]["task_id"]
        ran = http.post("/step", json={"action": {"text": SQL}}).json()
        assert ran["done"] is False and ran["reward"] == 0.0 and "status: SUCCESS" in ran["observation"]["text"]
        state = http.get("/state").json()
        assert state["step_count"] == 1 and state["task_id"] == task_id and state["episode_id"] == eid
        assert http.post("/step", json={"action": _submit(oracle_answer(task_id))}).json()["reward"] == 1.0
        named = http.post("/reset", json={"seed": 7, "episode_id": "run-1/ep-7"}).json()  # a new episode, named
        assert named["episode_id"] == "run-1/ep-7"  # ... on the finished episode's session (one worker here)
        state = http.get("/state").json()
        assert state["episode_id"] == "run-1/ep-7" and state["step_count"] == 0
        assert http.get("/state", params={"episode_id": "run-1/ep-7"}).json()["session_id"] == state["session_id"]
        done = http.post("/step", json={"action": _submit(oracle_answer(named["info"]["task_id"]))}).json()
        assert done["done"] is True and done["reward"] == 1.0
        assert http.post("/close", json={"episode_id": state["session_id"]}).status_code == 200
        # MedAgentGym's own protocol is served on the same paths
        own = http.post("/reset", json={"task_id": "toy_sql/test/0001", "family": "toy_sql", "split": "test"}).json()
        assert http.post("/step", json={"episode_id": own["episode_id"], "action": {"text": SQL}}).json()["done"] is False
        assert http.post("/close", json={"episode_id": own["episode_id"]}).status_code == 200
        assert http.post("/reset", json={"sed": 1}).status_code == 422  # a typo is named, not ignored
    report = validate_running_environment(open_server, timeout_s=30)
    assert report["passed"] and report["mode"] == "simulation", report["summary"]


def test_each_http_client_has_its_own_episode(server, oracle_answer):
    import httpx

    url, _ = server
    alice = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
    anonymous = httpx.Client(base_url=url, timeout=120)
    with alice, anonymous:
        assert anonymous.post("/reset", json={}).status_code == 401  # the token applies to the contract too
        assert alice.post("/step", json={"action": {"text": SQL}}).status_code == 409  # no episode yet: one line
        task = alice.post("/reset", json={"task_id": "toy_sql/test/0002"}).json()["info"]["task_id"]
        result = alice.post("/step", json={"action": _submit(oracle_answer(task))}).json()
        assert result["reward"] == 1.0 and result["info"]["verdict"]["reason"] == "hidden by the server"


def test_a_malformed_step_is_an_error_observation_and_the_session_goes_on(open_server, oracle_answer):
    """Over a WebSocket, an action that does not validate used to kill the session with a serializer error."""
    with GenericEnvClient(base_url=open_server).sync() as env:
        env.reset(task_id="toy_sql/test/0003")
        for bad, says in (({"text": SQL, "typed": {"action": "terminal", "cmd": "ls"}}, "exactly one of"),
                          ({"typed": {"action": "teleport"}}, "does not match"), ({}, "exactly one of")):
            result = env.step(bad)
            assert result.observation["kind"] == "error" and says in result.observation["text"]
            assert not result.done and result.observation["turn"] == 0  # no turn spent on it
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"text": 5})  # OpenEnv's own schema check answers an error message; the session stays
        assert env.step({"text": SQL}).observation["info"]["status"] == "ok"
        assert env.step(_submit(oracle_answer("toy_sql/test/0003"))).reward == 1.0


def test_mcp_tools_are_the_family_actions(open_server, oracle_answer):
    """openenv-core's MCPToolClient lists the family actions as tools and plays an episode through them; the
    server's MCP endpoint lists the same tools."""
    import httpx
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=open_server).sync() as env:
        env.reset(task_id="toy_sql/test/0004")
        tools = {t.name: t for t in env.list_tools()}
        assert sorted(tools) == ["code_execution", "debugging", "request_info", "submit_answer", "terminal"]
        assert tools["code_execution"].input_schema["required"] == ["code"]
        assert "status: SUCCESS" in env.call_tool("code_execution", code="SELECT COUNT(*) FROM patients", lang="sql")
        with pytest.raises(RuntimeError, match="invalid_args"):
            env.call_tool("submit_answer", value="7")
        done = env.step(CallToolAction(tool_name="submit_answer",
                                       arguments={"answer": oracle_answer("toy_sql/test/0004")}))
        assert done.done and done.reward == 1.0
        assert "episode is over" in env.call_tool("terminal", cmd="ls")
    listed = httpx.post(f"{open_server}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    assert sorted(t["name"] for t in listed.json()["result"]["tools"]) == sorted(tools)


def _sessions_at_once(url: str, n: int, oracle_answer) -> list[float]:
    """``n`` WebSocket sessions of OpenEnv's async client at once: every one resets, waits for all the others to
    have reset (so all ``n`` episodes hold a sandbox worker together), then plays its task to the oracle's answer."""
    import asyncio

    async def one(i: int, together: asyncio.Barrier) -> float:
        async with GenericEnvClient(base_url=url, message_timeout_s=600) as env:
            first = await env.reset(seed=i)
            await together.wait()
            ran = await env.step({"text": SQL})
            assert ran.observation["info"]["status"] == "ok"
            task = first.observation["info"]["task_id"]
            return (await env.step(_submit(oracle_answer(task)))).reward

    async def main() -> list[float]:
        together = asyncio.Barrier(n)
        return await asyncio.gather(*(one(i, together) for i in range(n)))

    return asyncio.run(main())


@pytest.mark.parametrize("n", [4, pytest.param(32, marks=pytest.mark.slow)])
def test_concurrent_websocket_sessions(n, toy_root, make_test_pool, oracle_answer):
    """``n`` OpenEnv sessions at once on one server whose sandbox pool starts with one worker and grows."""
    pool = make_test_pool(1)
    try:
        with background_server(build_openenv_app(toy_root, pool=pool, families=["toy_sql"])) as url:
            assert _sessions_at_once(url, n, oracle_answer) == [1.0] * n
        assert pool.stats()["peak"] >= n
    finally:
        pool.close()


def test_mcp_tools_before_a_reset_say_so(open_server):
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=open_server).sync() as env:
        assert env.call_tool("terminal", cmd="ls") == "No episode yet: reset first."


# ------------------------------------------------------------------------------ issue 31: owned and counted sessions

ALICE, BOB = "alice-openenv-token-1", "bob-openenv-token-22"


def _mcp(url: str, token: str, method: str, **params) -> dict:
    import httpx

    r = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                   headers={"Authorization": f"Bearer {token}"}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def two_clients(toy_root, make_test_pool):
    pool = make_test_pool(2)
    app = build_openenv_app(toy_root, pool=pool, tokens=[ALICE, BOB], families=["toy_sql"], capacity=8,
                            max_sessions_per_client=2)
    with background_server(app) as url:
        yield url
    pool.close()


def test_mcp_sessions_count_against_the_client_cap(two_clients):
    """Attack: openenv/session/create filled the shared session table outside every per-client count."""
    made = []
    for _ in range(10):
        out = _mcp(two_clients, ALICE, "openenv/session/create")
        if "error" in out:
            assert "per-client cap" in out["error"]["message"]
            break
        made.append(out["result"]["session_id"])
    assert len(made) == 2, f"alice made {len(made)} MCP sessions past her cap of 2"
    theirs = _mcp(two_clients, BOB, "openenv/session/create")
    assert "result" in theirs, theirs  # bob is not crowded out
    for sid in made:
        assert _mcp(two_clients, ALICE, "openenv/session/close", session_id=sid)["result"]["closed"]
    assert _mcp(two_clients, BOB, "openenv/session/close", session_id=theirs["result"]["session_id"])["result"]
    assert "result" in _mcp(two_clients, ALICE, "openenv/session/create")  # closed ones free their rows


def test_an_mcp_session_id_answers_only_its_client(two_clients):
    """Attack: bob ran a tool in, and closed, alice's MCP session by its id."""
    sid = _mcp(two_clients, ALICE, "openenv/session/create")["result"]["session_id"]
    try:
        used = _mcp(two_clients, BOB, "tools/call", session_id=sid, name="terminal", arguments={"cmd": "ls"})
        assert "error" in used and "Unknown session_id" in used["error"]["message"], used
        closed = _mcp(two_clients, BOB, "openenv/session/close", session_id=sid)
        assert "error" in closed and "Unknown session_id" in closed["error"]["message"], closed
        mine = _mcp(two_clients, ALICE, "tools/call", session_id=sid, name="terminal", arguments={"cmd": "ls"})
        assert "result" in mine, mine  # still alice's, still open
    finally:
        _mcp(two_clients, ALICE, "openenv/session/close", session_id=sid)


def test_two_http_clients_behind_one_address_never_share_an_episode(toy_root, make_test_pool, oracle_answer):
    """Attack: two OpenEnv HTTP clients from one address (no tokens) shared one episode: A's correct answer was
    graded on B's task (reward 0.0), and /state did not report the episode_id /reset returned."""
    import httpx

    pool = make_test_pool(2)
    try:
        with background_server(build_openenv_app(toy_root, pool=pool, families=["toy_sql"])) as url, \
                httpx.Client(base_url=url, timeout=120) as a, httpx.Client(base_url=url, timeout=120) as b:
            ra = a.post("/reset", json={"task_id": "toy_sql/test/0001"}).json()
            rb = b.post("/reset", json={"task_id": "toy_sql/test/0002"}).json()
            assert ra["episode_id"] != rb["episode_id"]
            blind = a.post("/step", json={"action": _submit(oracle_answer("toy_sql/test/0001"))})
            assert blind.status_code == 409 and "episode_id" in blind.json()["detail"]  # ambiguous: said, not guessed
            state = a.get("/state", params={"episode_id": ra["episode_id"]}).json()
            assert state["episode_id"] == ra["episode_id"] and state["task_id"] == "toy_sql/test/0001"
            mine = a.post("/step", json={"episode_id": ra["episode_id"],
                                         "action": _submit(oracle_answer("toy_sql/test/0001"))}).json()
            assert mine["reward"] == 1.0  # graded on A's own task
            theirs = b.post("/step", json={"episode_id": rb["episode_id"],
                                           "action": _submit(oracle_answer("toy_sql/test/0002"))}).json()
            assert theirs["reward"] == 1.0
    finally:
        pool.close()


def test_one_client_cannot_pass_its_cap_by_mixing_protocols(toy_root, make_test_pool):
    """Issue 31 review: alice (cap 2) holds one WebSocket session and one HTTP session; an MCP session, an OpenEnv
    HTTP-contract reset and another WebSocket are each refused, and bob is not crowded out."""
    pool = make_test_pool(2)
    app = build_openenv_app(toy_root, pool=pool, tokens=[ALICE, BOB], families=["toy_sql"], capacity=8,
                            max_sessions_per_client=2)
    try:
        with background_server(app) as url:
            _mixed_protocols_at_cap(url)
    finally:
        pool.close()


def _mixed_protocols_at_cap(url: str) -> None:
    import httpx

    authed = url.replace("http://", f"http://trainer:{ALICE}@")
    alice = {"Authorization": f"Bearer {ALICE}"}
    with GenericEnvClient(base_url=authed).sync() as ws, httpx.Client(base_url=url, timeout=120) as http:
        ws.reset(task_id="toy_sql/test/0001")
        own = http.post("/reset", json={"task_id": "toy_sql/test/0002", "family": "toy_sql", "split": "test"},
                        headers=alice)
        assert own.status_code == 200, own.text
        try:
            mcp = _mcp(url, ALICE, "openenv/session/create")
            assert "error" in mcp and "per-client cap" in mcp["error"]["message"], mcp
            contract = http.post("/reset", json={"task_id": "toy_sql/test/0003"}, headers=alice)
            assert contract.status_code == 429, contract.text
            with pytest.raises(ConnectionError, match="403"), GenericEnvClient(base_url=authed).sync() as other:
                other.reset(seed=1)
            theirs = _mcp(url, BOB, "openenv/session/create")
            assert "result" in theirs, theirs
            _mcp(url, BOB, "openenv/session/close", session_id=theirs["result"]["session_id"])
        finally:
            http.post("/close", json={"episode_id": own.json()["episode_id"]}, headers=alice)


# ------------------------------------------------------------------------------ the finished clock (issue 31)

TTL = 0.5  # finished_ttl_s of these servers: tiny, so the clock passes without a long sleep


def _wait_until(check, what: str, guard_s: float = 120.0):
    """Poll ``check()`` until it is truthy; ``guard_s`` only stops a hang (the clock is TTL, 240x shorter)."""
    import time

    deadline = time.monotonic() + guard_s
    while not (got := check()):
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.05)
    return got


def _light_client():
    """``integrations/openenv/client.py`` (the ``medagentgym_env.client`` module of the OpenEnv package), loaded from
    the source tree: it imports only openenv-core and pydantic."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "integrations" / "openenv" / "client.py"
    spec = importlib.util.spec_from_file_location("medagentgym_env_client_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def one_slot(toy_root, make_test_pool):
    """A server with one session slot (capacity 1) and a finished clock of TTL seconds."""
    pool = make_test_pool(1)
    app = build_openenv_app(toy_root, pool=pool, tokens=[ALICE, BOB], families=["toy_sql"], capacity=1,
                            finished_ttl_s=TTL)
    try:
        with background_server(app) as url:
            yield url, app.state.env_sessions
    finally:
        pool.close()


def test_a_finished_websocket_session_kept_open_frees_its_slot_on_the_finished_clock(one_slot, oracle_answer):
    """Attack: alice finishes her episode and keeps her WebSocket open; it held the server's only slot until
    openenv-core's 600 s idle reaper, so bob got 403 (capacity). Now it closes TTL after the episode ended, with close
    code 4001 and the reason in words, and bob gets the slot."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    url, rows = one_slot
    ws_url = url.replace("http://", "ws://") + "/ws"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {ALICE}"}) as alice:
        alice.send(json.dumps({"type": "reset", "data": {"task_id": "toy_sql/test/0001"}}))
        assert json.loads(alice.recv(timeout=120))["type"] == "observation"
        alice.send(json.dumps({"type": "step", "data": _submit(oracle_answer("toy_sql/test/0001"))}))
        assert json.loads(alice.recv(timeout=120))["data"]["done"]
        with pytest.raises(ConnectionClosed) as closed:  # she sends nothing more; the server closes
            alice.recv(timeout=120)
    assert closed.value.rcvd.code == 4001 and "episode ended" in closed.value.rcvd.reason, closed.value.rcvd
    _wait_until(lambda: len(rows) == 0, "the expired session's row being freed")
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {BOB}"}) as bob:  # no 403: the slot is free
        bob.send(json.dumps({"type": "reset", "data": {"task_id": "toy_sql/test/0002"}}))
        assert json.loads(bob.recv(timeout=120))["type"] == "observation"


def test_an_mcp_session_kept_open_frees_its_slot_and_its_next_call_says_it_expired(one_slot):
    """Attack: alice creates an MCP session (openenv/session/create) and holds it; bob's create was refused until
    the 600 s idle reaper. Now it expires on the finished clock (no episode runs in it); alice's next call by its id
    is a JSON-RPC error saying so, and bob's create succeeds."""
    url, rows = one_slot
    asked = time.monotonic()
    sid = _mcp(url, ALICE, "openenv/session/create")["result"]["session_id"]
    refused = _mcp(url, BOB, "openenv/session/create")
    if "result" in refused:
        # a loaded host (issue #29) may answer bob later than the TTL-second finished clock: alice's idle session was
        # already gone, so bob rightly got the slot. Only then is that allowed; give it back and go on.
        assert time.monotonic() - asked > TTL, refused  # within the clock the slot is alice's
        _mcp(url, BOB, "openenv/session/close", session_id=refused["result"]["session_id"])
    else:
        assert "capacity" in refused["error"]["message"], refused  # the slot is alice's
    _wait_until(lambda: len(rows) == 0, "the idle MCP session expiring")
    later = _mcp(url, ALICE, "tools/call", session_id=sid, name="terminal", arguments={"cmd": "ls"})
    assert "error" in later and "expired" in later["error"]["message"], later
    assert "openenv/session/create" in later["error"]["message"]
    other = _mcp(url, BOB, "tools/call", session_id=sid, name="terminal", arguments={"cmd": "ls"})
    assert "Unknown session_id" in other["error"]["message"]  # bob learns nothing about alice's session
    theirs = _mcp(url, BOB, "openenv/session/create")
    assert "result" in theirs, theirs
    _mcp(url, BOB, "openenv/session/close", session_id=theirs["result"]["session_id"])


def test_our_client_pausing_past_the_finished_clock_resets_on_a_new_session(one_slot, oracle_answer):
    """A trainer pauses longer than the finished clock between episodes (an optimizer step): the server closes its
    finished session; the OpenEnv client's next reset reconnects and plays on; a step on the expired session is one
    line saying to reset."""
    url, rows = one_slot
    client = _light_client()
    authed = url.replace("http://", f"http://trainer:{ALICE}@")
    with client.MedagentgymEnv(base_url=authed).sync() as env:
        env.reset(task_id="toy_sql/test/0001")
        assert env.step({"typed": {"action": "submit_answer",
                                   "answer": oracle_answer("toy_sql/test/0001")}}).reward == 1.0
        _wait_until(lambda: len(rows) == 0, "the finished session expiring")  # the pause
        again = env.reset(task_id="toy_sql/test/0002")  # transparently on a new session
        assert again.observation.info["task_id"] == "toy_sql/test/0002"
        assert env.step({"typed": {"action": "submit_answer",
                                   "answer": oracle_answer("toy_sql/test/0002")}}).reward == 1.0
        _wait_until(lambda: len(rows) == 0, "the second session expiring")
        with pytest.raises(RuntimeError) as stale:
            env.step({"text": SQL})
        line = str(stale.value)
        # one line that says the episode ended and to reset: the close frame (4001) when it reached the client
        # first, or, when the step raced it (seen under load, issue #29), the server's answer to a step on the
        # session it had just closed
        assert "\n" not in line and "reset" in line, line
        assert ("4001" in line and "episode ended" in line) or "the server closed this session" in line, line
        assert env.reset(task_id="toy_sql/test/0003").observation.info["task_id"] == "toy_sql/test/0003"
