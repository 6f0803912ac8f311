"""The env over HTTP (a real uvicorn server on loopback): the same seeded episodes locally and remotely give
identical records on a trusted server; a guarded server (tokens, size and session limits, gold hidden) contains
each kind of abuse and still serves."""

from __future__ import annotations

import json
import shutil
import time

import httpx
import pytest

from medagentgym import tasks
from medagentgym.env_client import Env
from medagentgym.env_client.errors import InvalidAction, ResetNeeded
from medagentgym.env_client.http_client import TOKEN_ENV, HTTPEnv, ServerBusy, ServerError
from medagentgym.env_client.policies import make_policy, render_action
from medagentgym.env_client.rollout import rollout
from medagentgym.env_client.server_app import MAX_ACTION_CHARS, background_server, build_app
from medagentgym.sandbox import make_pool

# bwrap when installed (the default sandbox); the unisolated local backend otherwise.
BACKEND = "bwrap" if shutil.which("bwrap") else "local"
GOLD = "xylophone-quasar-271828"  # the vault family's answer: must never reach a client of a guarded server
TOKENS = ["alice-token-0123456789", "bob-token-9876543210"]


@pytest.fixture(scope="module")
def served(built):
    root, _ = built
    with make_pool(BACKEND, workers=2, allow_unisolated=True) as pool:
        app = build_app(root, pool=pool, capacity=8, hide_gold=False)  # trusted: records identical to local
        with background_server(app) as url:
            yield url, pool


@pytest.fixture(scope="module")
def vault(tmp_path_factory):
    """A tasks root with toy_sql and a declared family ``vault`` whose one test answer is :data:`GOLD`."""
    root = tmp_path_factory.mktemp("vault_tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    fam = root / "vault"
    fam.mkdir()
    (fam / "family.yaml").write_text("name: vault\nanswer_type: text\nactions: [code_execution, submit_answer]\n"
                                     "max_turns: 4\n", encoding="utf-8")
    lines = [{"question": "Which word opens the vault?", "answer": GOLD, "split": s} for s in ("train", "test")]
    (fam / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def guarded(vault, served):
    """``(url, trusted_url)``: the vault root served with every limit on, and the same root with gold shown."""
    _, pool = served
    app = build_app(vault, pool=pool, tokens=TOKENS, max_body_bytes=64_000, max_sessions_per_client=1)
    trusted = build_app(vault, pool=pool, hide_gold=False)
    with background_server(app) as url, background_server(trusted) as trusted_url:
        yield url, trusted_url


SCRIPT = [
    "I think the answer is probably 7.",  # parse error: no action
    render_action("code_execution", {"lang": "python", "code": "x = 1 / 0"}),  # code error
    render_action("code_execution", {"lang": "sql", "code": "SELECT COUNT(*) FROM patients"}),
    render_action("submit_answer", {"answer": "7"}),
]


def _play(env, inst, texts):
    obs, _info = env.reset(inst, seed=123, options={"policy": "script", "sample_idx": 1})
    results = []
    for text in texts:
        res = env.step(text, n_tokens=len(text))
        results.append((res.observation.model_dump(), res.reward, res.terminated, res.truncated,
                        {k: v for k, v in res.info.items() if k not in {"exec_s", "overhead_s", "duration_s"}}))
        if res.terminated or res.truncated:
            break
    return obs.model_dump(), results, env.trajectory.model_dump(mode="json")


def test_scripted_episode_identical_local_and_http(built, served, strip_timings):
    root, fam = built
    url, pool = served
    inst = fam.instances("test")[0]
    local = Env(pool, tasks_root=root)
    remote = HTTPEnv(url)
    try:
        a, b = _play(local, inst, SCRIPT), _play(remote, inst, SCRIPT)
    finally:
        local.close()
        remote.close()
    assert a[0] == b[0]
    assert [r[1:] for r in a[1]] == [r[1:] for r in b[1]] and [r[0] for r in a[1]] == [r[0] for r in b[1]]
    statuses = [s["status"] for s in a[2]["steps"]]
    assert statuses == ["parse_error", "error", "ok", "submitted"]
    assert strip_timings(a[2]) == strip_timings(b[2])
    assert b[2]["header"]["sample_idx"] == 1 and b[2]["header"]["seed"] == 123


def test_oracle_rollout_identical_local_and_http(built, served, strip_timings):
    root, fam = built
    url, pool = served
    insts = fam.instances("test")[:3]
    policy = make_policy("oracle", families={"toy_sql": fam})
    local = rollout(insts, policy, lambda: Env(pool, tasks_root=root), k=2, seed=5, concurrency=2)
    remote = rollout(insts, policy, lambda: HTTPEnv(url), k=2, seed=5, concurrency=2)
    key = lambda t: t.key
    la = [strip_timings(t.model_dump(mode="json")) for t in sorted(local.trajectories, key=key)]
    lb = [strip_timings(t.model_dump(mode="json")) for t in sorted(remote.trajectories, key=key)]
    assert la == lb and len(la) == 6
    assert remote.summary.success_rate == 1.0


def test_http_errors_are_typed(built, served):
    _, fam = built
    url, _ = served
    inst = fam.instances("test")[0]
    with HTTPEnv(url) as env:
        with pytest.raises(ResetNeeded):
            env.step("hi")
        env.reset(inst)
        with pytest.raises(InvalidAction):
            env.step({"action": "terminal"})  # missing cmd: field-level 422 from the server
        res = env.step({"action": "submit_answer", "answer": "0"})
        assert res.terminated
        with pytest.raises(ResetNeeded):
            env.step("again")
        fake = inst.model_copy(update={"id": "toy_sql/test/9999"})
        with pytest.raises(Exception, match="not in toy_sql/test"):
            env.reset(fake)
    # close() is idempotent and the last trajectory stays readable
    env.close()
    assert env.trajectory.final.reason == "submitted"


# ------------------------------------------------------------------------------------------ a guarded server


def _harvest(url: str, headers: dict[str, str]) -> tuple[list[str], list[dict]]:
    """Play a client hunting for gold answers: every endpoint, wrong and right submits, misuse; all bodies."""
    bodies, verdicts = [], []
    with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
        def call(method: str, path: str, **kw) -> httpx.Response:
            r = c.request(method, path, **kw)
            bodies.append(r.text)
            return r

        for path in ("/health", "/schema", "/openapi.json"):
            call("GET", path)
        task = {"family": "vault", "split": "test", "task_id": "vault/test/0000"}
        for answer in ("sesame", GOLD.upper()):
            eid = call("POST", "/reset", json=task).json()["episode_id"]
            code = "print(open('/data/answer').read())"  # the gold is not in the jail either
            call("POST", "/step", json={"episode_id": eid, "action": {"typed": {
                "action": "code_execution", "lang": "python", "code": code}}})
            r = call("POST", "/step", json={"episode_id": eid, "action": {"typed": {
                "action": "submit_answer", "answer": answer}}})
            verdicts.append(r.json()["info"]["verdict"])
            call("POST", "/step", json={"episode_id": eid, "action": {"text": "again"}})  # 409 after the end
            call("GET", "/state", params={"episode_id": eid})
            call("POST", "/close", json={"episode_id": eid})
            call("GET", "/state", params={"episode_id": eid})  # 404
        call("POST", "/reset", json={**task, "task_id": "vault/test/0001"})  # unknown task: 409
        call("POST", "/reset", json={**task, "family": "../vault"})  # 422
    return bodies, verdicts


def test_harvesting_client_finds_no_gold_but_sees_correctness(guarded):
    url, trusted_url = guarded
    bodies, verdicts = _harvest(url, {"Authorization": f"Bearer {TOKENS[0]}"})
    # case-sensitive: the client's own right answer is sent upper-case; graders quote the gold lower-case
    assert not [b for b in bodies if GOLD in b]
    assert [(v["correct"], v["score"], v["error"]) for v in verdicts] == [(False, 0.0, None), (True, 1.0, None)]
    assert all(v["reason"] == "hidden by the server" for v in verdicts)
    # the same hunt on a server that shows gold finds it: the search above can fail
    bodies, _ = _harvest(trusted_url, {})
    assert [b for b in bodies if GOLD in b]


def test_token_is_required_and_the_client_sends_it(guarded, vault, monkeypatch):
    url, _ = guarded
    inst = tasks.make("toy_sql", root=vault).instances("test")[0]
    assert httpx.get(f"{url}/health").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong-token-000000"}):
        r = httpx.post(f"{url}/reset", json={"family": "toy_sql", "split": "test", "task_id": inst.id},
                       headers=headers)
        assert r.status_code == 401 and "bearer token" in r.json()["detail"]
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with HTTPEnv(url) as env, pytest.raises(ServerError, match=f"HTTP 401.*{TOKEN_ENV}"):
        env.reset(inst)
    with HTTPEnv(url, token=TOKENS[1]) as env:
        assert env.reset(inst)[0].kind == "task"
    monkeypatch.setenv(TOKEN_ENV, TOKENS[0])
    with HTTPEnv(url) as env:
        oracle = tasks.make("toy_sql", root=vault).reference_solution(inst)[-1]["params"]["answer"]
        env.reset(inst)
        assert env.step({"action": "submit_answer", "answer": oracle}).reward == 1.0


def test_oversized_requests_are_refused_and_the_server_still_serves(guarded, vault):
    url, _ = guarded
    inst = tasks.make("toy_sql", root=vault).instances("test")[0]
    with HTTPEnv(url, token=TOKENS[0]) as env:
        env.reset(inst)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS[0]}"}) as c:
            big = json.dumps({"episode_id": env.episode_id, "action": {"text": "x" * 200_000}})
            assert c.post("/step", content=big, headers={"content-type": "application/json"}).status_code == 413

            def trickle():  # chunked, no Content-Length: counted as it arrives
                yield b'{"episode_id": "' + env.episode_id.encode() + b'", "action": {"text": "'
                for _ in range(100):
                    yield b"y" * 1000
                yield b'"}}'

            assert c.post("/step", content=trickle(), headers={"content-type": "application/json"}
                          ).status_code == 413
            long_text = {"episode_id": env.episode_id, "action": {"text": "z" * (MAX_ACTION_CHARS + 1)}}
            assert c.post("/step", json=long_text).status_code in (413, 422)
        assert env.trajectory.steps == []  # nothing was recorded
        res = env.step(render_action("code_execution", {"lang": "sql", "code": "SELECT 1"}))
        assert res.info["status"] == "ok" and len(env.trajectory.steps) == 1


def test_session_cap_per_client_and_private_sessions(guarded, vault):
    url, _ = guarded
    inst = tasks.make("toy_sql", root=vault).instances("test")[0]
    envs = [HTTPEnv(url, token=TOKENS[0]) for _ in range(2)]  # the pool has 2 workers: alice may hold 1
    try:
        envs[0].reset(inst)
        with pytest.raises(ServerBusy, match="HTTP 429.*per-client cap"):
            envs[1].reset(inst)
        with HTTPEnv(url, token=TOKENS[1]) as bob:  # another client still gets a session...
            bob.reset(inst)
            bob.episode_id = envs[0].episode_id  # ...but not alice's
            with pytest.raises(ResetNeeded):
                bob.state()
            bob.episode_id = None
        envs[0].close()
        envs[1].reset(inst)  # room again
        assert envs[1].step({"action": "submit_answer", "answer": "0"}).terminated
    finally:
        for env in envs:
            env.close()


def test_abandoned_session_frees_its_worker_and_waiting_is_bounded(vault):
    """One sandbox worker: an abandoned episode holds it, a second reset gets 503 (not a hang) until the reaper
    closes the abandoned session, after which the pool serves again; a finished episode frees it at once."""
    inst = tasks.make("toy_sql", root=vault).instances("test")[0]
    with make_pool(BACKEND, workers=1, max_workers=1, allow_unisolated=True) as pool:
        # 10 s idle: the second reset below must come before the reaper frees the worker; at load ~20 on 2 cores
        # more than 1 s passed between the two calls (issue #29). The test sleeps those seconds, using no CPU.
        app = build_app(vault, pool=pool, idle_timeout_s=10.0, worker_wait_s=0.3)
        with background_server(app) as url:
            abandoned = HTTPEnv(url)
            abandoned.reset(inst)  # holds the only worker, then goes silent
            waiting = HTTPEnv(url)
            t0 = time.monotonic()
            # 429: the client's cap is the one worker (503 would come after worker_wait_s): busy, not a hang
            with pytest.raises(ServerBusy, match="HTTP (429|503)"):
                waiting.reset(inst)
            # bounded by worker_wait_s (0.3 s); had it waited for the worker instead, the reaper would have freed
            # one and the reset succeeded (pytest.raises above); this bound only guards a hang, even at 5x slower
            assert time.monotonic() - t0 < 120
            deadline = time.monotonic() + 120  # idle timeout 10 s + reaper interval, plus load (a hang guard)
            while True:
                try:
                    waiting.reset(inst)
                    break
                except ServerBusy:
                    assert time.monotonic() < deadline, "the abandoned session was never reaped"
                    time.sleep(0.2)
            assert waiting.step({"action": "submit_answer", "answer": "0"}).terminated
            assert pool.stats()["busy"] == 0  # the finished episode gave its worker back without /close
            with HTTPEnv(url) as third:  # ... but its session still counts against the client's cap (issue 31)
                with pytest.raises(ServerBusy, match="HTTP 429"):
                    third.reset(inst)
            assert waiting.trajectory.final.reason == "submitted"
            waiting.close()
            with HTTPEnv(url) as third:  # closed: room again
                third.reset(inst)
                assert third.step(render_action("code_execution", {"lang": "sql", "code": "SELECT 1"})
                                  ).info["status"] == "ok"
            with pytest.raises(ResetNeeded):
                abandoned.step("hello")  # its session was closed by the reaper
            abandoned.close()


def test_serve_env_refuses_a_public_bind_without_a_token(load_script, capsys, monkeypatch, tmp_path):
    serve_env = load_script("serve_env")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert serve_env.main(["--tasks-root", str(tmp_path), "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no token is set" in err and "--token" in err
    assert serve_env.main(["--tasks-root", str(tmp_path / "missing"), "--host", "0.0.0.0", "--token", "x" * 16]) == 2
    assert "does not exist" in capsys.readouterr().err  # the token check passed; the next check speaks


def test_a_client_holds_at_most_as_many_sessions_as_there_are_workers(vault):
    """The per-client cap defaults to the pool's workers and may never exceed them (it defaulted to 32 over 4)."""
    inst = tasks.make("toy_sql", root=vault).instances("test")[0]
    with make_pool(BACKEND, workers=2, max_workers=2, allow_unisolated=True) as pool:  # the cap is 2 workers
        with pytest.raises(ValueError, match="exceeds the 2 sandbox workers"):
            build_app(vault, pool=pool, max_sessions_per_client=3)
        app = build_app(vault, pool=pool, capacity=8, worker_wait_s=0.3)
        _three_resets(app, inst)


def _three_resets(app, inst) -> None:
    with background_server(app) as url:
        envs = [HTTPEnv(url) for _ in range(3)]
        try:
            envs[0].reset(inst)
            envs[1].reset(inst)
            with pytest.raises(ServerBusy, match="HTTP 429"):
                envs[2].reset(inst)
        finally:
            for env in envs:
                env.close()


def test_httpenv_pausing_past_the_finished_clock_resets_on_a_new_session(vault, served):
    """Issue 31: a trainer pauses longer than the server's finished clock between episodes; the server closes the
    finished session (its row freed), HTTPEnv's next reset opens a new one, and a step on the expired session is one
    line (ServerLost, a ResetNeeded)."""
    from medagentgym.env_client.http_client import ServerLost

    _, pool = served
    app = build_app(vault, pool=pool, tokens=TOKENS, max_sessions_per_client=1, finished_ttl_s=0.5)
    rows = app.state.env_sessions
    insts = tasks.make("toy_sql", root=vault).instances("test")[:2]

    def expired() -> None:
        deadline = time.monotonic() + 120  # a hang guard: the clock is 0.5 s
        while len(rows):
            assert time.monotonic() < deadline, "the finished session never expired"
            time.sleep(0.05)

    with background_server(app) as url, HTTPEnv(url, token=TOKENS[0]) as env:
        env.reset(insts[0])
        assert env.step({"action": "submit_answer", "answer": "0"}).terminated
        first = env.episode_id
        expired()  # the pause
        env.reset(insts[1])  # transparently on a new session
        assert env.episode_id != first and env.step({"action": "submit_answer", "answer": "0"}).terminated
        expired()
        with pytest.raises(ServerLost) as lost:
            env.step({"action": "submit_answer", "answer": "0"})
        assert "\n" not in str(lost.value) and "no longer knows episode" in str(lost.value)
