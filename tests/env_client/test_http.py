"""The same seeded episodes locally and over HTTP (a real uvicorn server on loopback) give identical records."""

from __future__ import annotations

import shutil

import pytest

from env_client import Env
from env_client.errors import InvalidAction, ResetNeeded
from env_client.http_client import HTTPEnv
from env_client.policies import make_policy, render_action
from env_client.rollout import rollout
from env_client.server_app import background_server, build_app
from sandbox import make_pool

# bwrap when installed (the default sandbox); the unisolated local backend otherwise.
BACKEND = "bwrap" if shutil.which("bwrap") else "local"
@pytest.fixture(scope="module")
def served(built):
    root, _ = built
    with make_pool(BACKEND, workers=2, allow_unisolated=True) as pool:
        app = build_app(root, pool=pool, capacity=8)
        with background_server(app) as url:
            yield url, pool


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
