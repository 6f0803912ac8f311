"""OpenEnv's own generic client (openenv-core) plays toy_sql episodes against the env server to a graded reward,
over WebSocket sessions, with the server's token, session and gold-hiding limits in force."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openenv", reason="openenv-core is not installed (pip install '.[openenv]')")

from openenv import GenericEnvClient

from medagentgym.adapters.openenv import build_openenv_app
from env_client.server_app import background_server

TOKEN = "openenv-test-token-42"
SQL = '<tool_call>{"name": "code_execution", "arguments": {"lang": "sql", "code": "SELECT COUNT(*) FROM patients"}}' \
      '</tool_call>'


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
    """One sandbox worker: a silent WebSocket session is closed by OpenEnv's reaper (started by our lifespan), so a
    new session gets the worker; the abandoned client's next step is an error, not a hang."""
    import time

    pool = make_test_pool(1, max_workers=1)
    try:
        app = build_openenv_app(toy_root, pool=pool, families=["toy_sql"], idle_timeout_s=2.0, worker_wait_s=0.3)
        with background_server(app) as url, GenericEnvClient(base_url=url).sync() as abandoned:
            abandoned.reset(seed=0)  # holds the only worker, then goes silent
            deadline = time.monotonic() + 60  # reaper period max(2 / 4, 5) s, plus a loaded machine
            while True:  # a new session per try: OpenEnv counts only successful calls as activity
                with GenericEnvClient(base_url=url).sync() as fresh:
                    try:
                        fresh.reset(seed=1)
                    except RuntimeError as exc:
                        assert "no sandbox worker became free" in str(exc)
                        assert time.monotonic() < deadline, "the abandoned session was never reaped"
                        continue
                    assert fresh.step({"text": SQL}).observation["info"]["status"] == "ok"
                    break
            with pytest.raises(RuntimeError, match="episode is over"):
                abandoned.step({"text": SQL})
    finally:
        pool.close()
