"""The generic env server: sessions, errors, capacity, idle reaping, concurrency (on a toy counter env)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict, Field

from medagentgym.sandbox.server import create_app


class Add(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: int = Field(description="How much to add.")


class Count(BaseModel):
    model_config = ConfigDict(extra="forbid")
    total: int = Field(description="Running total.")


class Start(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: int = Field(0, description="Initial total.")
    limit: int = Field(10, description="Episode ends when the total reaches this.")


class Misuse(RuntimeError):
    pass


class CounterEnv:
    instances: ClassVar[list[CounterEnv]] = []

    def __init__(self) -> None:
        self.total, self.limit, self.done, self.closed = 0, 0, False, 0
        CounterEnv.instances.append(self)

    def reset(self, request: Start):
        self.total, self.limit, self.done = request.start, request.limit, False
        return Count(total=self.total), {"limit": self.limit}

    def step(self, action: Add):
        if self.done:
            raise Misuse("episode is over; call reset")
        if action.amount == 13:
            raise ZeroDivisionError("unlucky")
        time.sleep(0.01)
        self.total += action.amount
        self.done = self.total >= self.limit
        return Count(total=self.total), float(self.done), self.done, False, {}

    def state(self):
        return {"total": self.total, "done": self.done}

    def close(self):
        self.closed += 1


@pytest.fixture()
def client():
    CounterEnv.instances.clear()
    app = create_app(CounterEnv, Add, Count, reset_model=Start, capacity=3, idle_timeout_s=30,
                     client_errors=(Misuse,), max_sessions_per_client=3)
    with TestClient(app) as c:
        yield c


def test_episode_round_trip_and_close(client):
    r = client.post("/reset", json={"start": 5, "limit": 8})
    assert r.status_code == 200, r.text
    eid = r.json()["episode_id"]
    assert r.json()["observation"] == {"total": 5} and r.json()["info"] == {"limit": 8}
    r = client.post("/step", json={"episode_id": eid, "action": {"amount": 1}}).json()
    assert r == {"observation": {"total": 6}, "reward": 0.0, "terminated": False, "truncated": False,
                 "done": False, "info": {}}
    r = client.post("/step", json={"episode_id": eid, "action": {"amount": 2}}).json()
    assert r["done"] and r["terminated"] and r["reward"] == 1.0
    assert client.get("/state", params={"episode_id": eid}).json() == {"total": 8, "done": True}
    # reset on the same session reuses its env
    r = client.post("/reset", json={"episode_id": eid})
    assert r.json()["episode_id"] == eid and len(CounterEnv.instances) == 1
    r = client.post("/close", json={"episode_id": eid}).json()
    assert r["closed"] and r["state"] == {"total": 0, "done": False}
    assert CounterEnv.instances[0].closed == 1
    assert client.post("/step", json={"episode_id": eid, "action": {"amount": 1}}).status_code == 404
    assert client.post("/close", json={"episode_id": eid}).status_code == 404
    assert client.get("/health").json() == {"status": "healthy", "sessions": 0, "capacity": 3}


def test_malformed_input_is_422_with_field_errors(client):
    eid = client.post("/reset", json={}).json()["episode_id"]
    r = client.post("/step", json={"episode_id": eid, "action": {"amount": "many"}})
    assert r.status_code == 422
    locs = [tuple(e["loc"]) for e in r.json()["detail"]]
    assert ("body", "action", "amount") in locs
    r = client.post("/step", json={"episode_id": eid, "action": {"amount": 1, "bogus": 2}})
    assert r.status_code == 422 and ("body", "action", "bogus") in [tuple(e["loc"]) for e in r.json()["detail"]]
    assert client.post("/reset", json={"limit": "x"}).status_code == 422
    assert client.post("/step", json={"action": {"amount": 1}}).status_code == 422


def test_env_errors_keep_their_type(client):
    eid = client.post("/reset", json={"limit": 1}).json()["episode_id"]
    r = client.post("/step", json={"episode_id": eid, "action": {"amount": 13}})
    assert r.status_code == 500 and r.json()["detail"] == {"error": "ZeroDivisionError", "message": "unlucky"}
    client.post("/step", json={"episode_id": eid, "action": {"amount": 1}})
    r = client.post("/step", json={"episode_id": eid, "action": {"amount": 1}})
    assert r.status_code == 409 and r.json()["detail"]["error"] == "Misuse"


def test_capacity_limit_is_503():
    tokens = ("capacity-token-alice", "capacity-token-bob0")
    app = create_app(CounterEnv, Add, Count, reset_model=Start, capacity=3, tokens=tokens, max_sessions_per_client=2)
    alice, bob = ({"Authorization": f"Bearer {t}"} for t in tokens)
    with TestClient(app) as client:
        ids = [client.post("/reset", json={}, headers=h).json()["episode_id"] for h in (alice, alice, bob)]
        r = client.post("/reset", json={}, headers=bob)  # bob is under his cap, the server is full
        assert r.status_code == 503 and "capacity" in r.json()["detail"]
        assert client.post("/reset", json={}, headers=alice).status_code == 429  # alice hears of her own cap
        client.post("/close", json={"episode_id": ids[0]}, headers=alice)
        assert client.post("/reset", json={}, headers=bob).status_code == 200


def test_schema_lists_models(client):
    s = client.get("/schema").json()
    assert set(s) == {"reset", "action", "observation", "state"}
    assert "amount" in s["action"]["properties"] and "episode_id" in s["reset"]["properties"]


def test_idle_sessions_are_reaped():
    CounterEnv.instances.clear()
    app = create_app(CounterEnv, Add, Count, reset_model=Start, capacity=2, idle_timeout_s=0.2,
                     reap_interval_s=0.05)
    with TestClient(app) as c:
        eid = c.post("/reset", json={}).json()["episode_id"]
        deadline = time.monotonic() + 60  # ends as soon as the reaper closed it (a hang guard, issue #29)
        while c.get("/health").json()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.get("/health").json()["sessions"] == 0
        assert CounterEnv.instances[0].closed == 1
        assert c.post("/step", json={"episode_id": eid, "action": {"amount": 1}}).status_code == 404


def test_shutdown_closes_open_sessions():
    CounterEnv.instances.clear()
    app = create_app(CounterEnv, Add, Count, reset_model=Start)
    with TestClient(app) as c:
        c.post("/reset", json={})
        c.post("/reset", json={})
    assert [e.closed for e in CounterEnv.instances] == [1, 1]


def test_concurrent_sessions_are_independent(client):
    def episode(i: int) -> int:
        eid = client.post("/reset", json={"start": i, "limit": 1000}).json()["episode_id"]
        for _ in range(5):
            total = client.post("/step", json={"episode_id": eid, "action": {"amount": 2}}).json()
        client.post("/close", json={"episode_id": eid})
        return total["observation"]["total"]

    with ThreadPoolExecutor(3) as ex:
        assert list(ex.map(episode, range(3))) == [10, 11, 12]
    assert threading.active_count() < 50


def test_bad_arguments_rejected():
    with pytest.raises(ValueError, match="capacity"):
        create_app(CounterEnv, Add, Count, capacity=0)


# ------------------------------------------------------------------------------------------ abuse limits

TOKENS = ("token-for-alice-0001", "token-for-bob-00002")


class Busy(RuntimeError):
    pass


class LeakyEnv(CounterEnv):
    """Fails in ways whose message must not always reach the client."""

    def step(self, action: Add):
        if action.amount == 7:
            raise Busy("no worker free")
        if action.amount == 8:
            raise KeyError("the secret gold answer is 42")
        return super().step(action)


def _guarded(**kw):
    CounterEnv.instances.clear()
    opts = {"reset_model": Start, "capacity": 8, "idle_timeout_s": 30, "client_errors": (Misuse,),
            "busy_errors": (Busy,), "tokens": TOKENS, "max_body_bytes": 4096, "max_sessions_per_client": 2,
            "internal_error_detail": False}
    return create_app(LeakyEnv, Add, Count, **{**opts, **kw})


def _auth(i: int) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[i]}"}


def test_bearer_token_required_everywhere_but_health():
    with TestClient(_guarded()) as c:
        assert c.get("/health").status_code == 200
        for bad in ({}, {"Authorization": "Bearer nope-nope-nope"}, {"Authorization": f"Basic {TOKENS[0]}"},
                    {"Authorization": f"Bearer {TOKENS[0]}x"}):
            r = c.post("/reset", json={}, headers=bad)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", bad
            assert "\n" not in r.json()["detail"] and "token" in r.json()["detail"]
            assert c.get("/schema", headers=bad).status_code == 401
            assert c.get("/openapi.json", headers=bad).status_code == 401
        assert not CounterEnv.instances  # nothing was created for the refused calls
        r = c.post("/reset", json={}, headers=_auth(1))
        assert r.status_code == 200  # every accepted token works
    with pytest.raises(ValueError, match="at least 8"):
        create_app(CounterEnv, Add, Count, tokens=["short"])


def test_oversized_bodies_are_413_before_parsing_and_the_server_keeps_serving():
    with TestClient(_guarded()) as c:
        eid = c.post("/reset", json={}, headers=_auth(0)).json()["episode_id"]
        big = {"episode_id": eid, "action": {"amount": 1}, "pad": "x" * 10_000}
        r = c.post("/step", json=big, headers=_auth(0))
        assert r.status_code == 413 and "4096 bytes" in r.json()["detail"]

        def chunks():  # no Content-Length: the guard counts the streamed bytes
            for _ in range(100):
                yield b"x" * 1000

        r = c.post("/step", content=chunks(), headers={**_auth(0), "content-type": "application/json"})
        assert r.status_code == 413
        assert CounterEnv.instances[0].total == 0  # neither reached the env
        r = c.post("/step", json={"episode_id": eid, "action": {"amount": 2}}, headers=_auth(0))
        assert r.status_code == 200 and r.json()["observation"] == {"total": 2}


def test_per_client_cap_is_429_and_sessions_are_private():
    with TestClient(_guarded()) as c:
        mine = [c.post("/reset", json={}, headers=_auth(0)).json()["episode_id"] for _ in range(2)]
        r = c.post("/reset", json={}, headers=_auth(0))
        assert r.status_code == 429 and "per-client cap" in r.json()["detail"] and r.headers["retry-after"]
        assert c.post("/reset", json={}, headers=_auth(1)).status_code == 200  # another client is not blocked
        # bob cannot see, step or close alice's session; it looks like an unknown id
        assert c.get("/state", params={"episode_id": mine[0]}, headers=_auth(1)).status_code == 404
        assert c.post("/step", json={"episode_id": mine[0], "action": {"amount": 1}},
                      headers=_auth(1)).status_code == 404
        assert c.post("/close", json={"episode_id": mine[0]}, headers=_auth(1)).status_code == 404
        assert c.post("/close", json={"episode_id": mine[0]}, headers=_auth(0)).status_code == 200
        assert c.post("/reset", json={}, headers=_auth(0)).status_code == 200  # room again after a close


def test_busy_env_is_503_and_internal_errors_hide_their_message():
    with TestClient(_guarded()) as c:
        eid = c.post("/reset", json={}, headers=_auth(0)).json()["episode_id"]
        r = c.post("/step", json={"episode_id": eid, "action": {"amount": 7}}, headers=_auth(0))
        assert r.status_code == 503 and r.headers["retry-after"] and r.json()["detail"]["error"] == "Busy"
        r = c.post("/step", json={"episode_id": eid, "action": {"amount": 8}}, headers=_auth(0))
        assert r.status_code == 500 and r.json()["detail"]["error"] == "KeyError"
        assert "42" not in r.text and "gold" not in r.text
        assert c.post("/step", json={"episode_id": eid, "action": {"amount": 1}},
                      headers=_auth(0)).status_code == 200


def test_basic_auth_password_is_accepted_as_the_token():
    import base64

    with TestClient(_guarded()) as c:
        good = base64.b64encode(f"anyone:{TOKENS[0]}".encode()).decode()
        bad = base64.b64encode(b"anyone:not-the-token").decode()
        assert c.post("/reset", json={}, headers={"Authorization": f"Basic {good}"}).status_code == 200
        assert c.post("/reset", json={}, headers={"Authorization": f"Basic {bad}"}).status_code == 401
        assert c.post("/reset", json={}, headers={"Authorization": "Basic !!notbase64"}).status_code == 401


def test_clients_without_tokens_are_told_apart_by_address():
    app = create_app(CounterEnv, Add, Count, reset_model=Start, capacity=8, max_sessions_per_client=1)
    with TestClient(app) as c:  # TestClient's peer is "testclient"
        eid = c.post("/reset", json={}).json()["episode_id"]
        assert c.post("/reset", json={}).status_code == 429
        assert c.post("/close", json={"episode_id": eid}).status_code == 200


def _reaped_within(c, eid, seconds: float, poke) -> bool:
    """Keep ``poke``-ing the session until it is gone (True) or ``seconds`` passed (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if poke(c, eid).status_code == 404:
            return True
        time.sleep(0.05)
    return False


def test_polling_state_does_not_keep_a_session_alive():
    """One client could hold every worker forever by polling GET /state: only /reset and /step are activity."""
    CounterEnv.instances.clear()
    app = create_app(CounterEnv, Add, Count, reset_model=Start, capacity=2, idle_timeout_s=2.0,
                     reap_interval_s=0.05)
    with TestClient(app) as c:  # polled every 50 ms, far more often than the idle timeout
        eid = c.post("/reset", json={"limit": 10**6}).json()["episode_id"]
        assert _reaped_within(c, eid, 30, lambda c, e: c.get("/state", params={"episode_id": e}))
        assert CounterEnv.instances[0].closed == 1


def test_an_episode_has_a_maximum_lifetime_even_while_it_steps():
    CounterEnv.instances.clear()
    app = create_app(CounterEnv, Add, Count, reset_model=Start, capacity=2, idle_timeout_s=30, max_episode_s=0.5,
                     reap_interval_s=0.05)
    with TestClient(app) as c:
        eid = c.post("/reset", json={"limit": 10**6}).json()["episode_id"]
        assert _reaped_within(c, eid, 20, lambda c, e: c.post("/step", json={"episode_id": e, "action": {"amount": 1}}))
        assert CounterEnv.instances[0].closed == 1
    with pytest.raises(ValueError, match="max_episode_s"):
        create_app(CounterEnv, Add, Count, max_episode_s=0)


# ------------------------------------------------------------------------------------------ issue 31: fair sessions


class FinishingEnv(CounterEnv):
    """Says it holds nothing once its episode ended, as ``ServedEnv`` does (``idle``)."""

    @property
    def idle(self) -> bool:
        return self.done


def test_finished_sessions_count_against_the_client_cap_and_the_capacity():
    """Attack (issue 31): finish every episode, keep its session open, open more; the finished ones did not count
    against the per-client cap, so one client filled the server and every other client got 503."""
    CounterEnv.instances.clear()
    app = create_app(FinishingEnv, Add, Count, reset_model=Start, capacity=8, idle_timeout_s=30,
                     client_errors=(Misuse,), tokens=TOKENS, max_sessions_per_client=2)
    with TestClient(app) as c:
        opened = 0
        for _ in range(8):  # alice: open, finish at once, open the next
            r = c.post("/reset", json={"limit": 1}, headers=_auth(0))
            if r.status_code != 200:
                assert r.status_code == 429 and "per-client cap" in r.json()["detail"]
                break
            opened += 1
            done = c.post("/step", json={"episode_id": r.json()["episode_id"], "action": {"amount": 1}},
                          headers=_auth(0))
            assert done.json()["done"]
        assert opened == 2, f"alice held {opened} sessions past her cap of 2"
        assert c.post("/reset", json={}, headers=_auth(1)).status_code == 200  # bob still gets one


def test_no_client_fills_the_server_by_default():
    """Attack: without a per-client cap the cap was the capacity itself, so one client could take every session."""
    app = create_app(FinishingEnv, Add, Count, reset_model=Start, capacity=6, tokens=TOKENS)
    with TestClient(app) as c:
        codes = [c.post("/reset", json={}, headers=_auth(0)).status_code for _ in range(6)]
        assert codes == [200] * 3 + [429] * 3  # half the capacity
        assert c.post("/reset", json={}, headers=_auth(1)).status_code == 200
    with pytest.raises(ValueError, match="exceeds capacity"):
        create_app(CounterEnv, Add, Count, capacity=4, max_sessions_per_client=5)


@pytest.mark.parametrize("clocks", [{"idle_timeout_s": 0.5}, {"idle_timeout_s": 300, "finished_ttl_s": 0.5}])
def test_a_refused_step_does_not_keep_a_finished_session_alive(clocks):
    """Attack: a /step on a finished episode (409) refreshed the session's idle clock, so hammering it kept the row
    forever; only a call that succeeds is activity, and a finished session expires on its own clock
    (``finished_ttl_s``) however long the idle timeout is."""
    CounterEnv.instances.clear()
    app = create_app(FinishingEnv, Add, Count, reset_model=Start, capacity=2, reap_interval_s=0.05,
                     client_errors=(Misuse,), **clocks)
    with TestClient(app) as c:
        eid = c.post("/reset", json={"limit": 1}).json()["episode_id"]
        assert c.post("/step", json={"episode_id": eid, "action": {"amount": 1}}).json()["done"]

        def refused_step(c, e):
            r = c.post("/step", json={"episode_id": e, "action": {"amount": 1}})
            assert r.status_code in (404, 409), r.text
            return r

        assert _reaped_within(c, eid, 30, refused_step)
        assert CounterEnv.instances[0].closed == 1
        if "finished_ttl_s" not in clocks:
            return  # (an idle clock of 0.5 s would reap a running episode whose steps a loaded machine delays)
        # a running episode is not cut short by that clock (only idle_timeout_s / max_episode_s apply)
        eid = c.post("/reset", json={"limit": 10**6}).json()["episode_id"]
        for _ in range(20):
            assert c.post("/step", json={"episode_id": eid, "action": {"amount": 1}}).status_code == 200
            time.sleep(0.05)


def test_dozens_of_clients_at_once_each_get_their_share():
    """24 clients (one token each) race to open 5 sessions apiece, finishing each episode at once, on a server of
    capacity 48 with a cap of 2 per client: every client gets exactly its 2, nobody is crowded out (no 503)."""
    tokens = [f"client-token-{i:04d}-x" for i in range(24)]
    app = create_app(FinishingEnv, Add, Count, reset_model=Start, capacity=48, idle_timeout_s=60, tokens=tokens,
                     max_sessions_per_client=2, client_errors=(Misuse,))
    barrier = threading.Barrier(24)

    with TestClient(app) as c:
        def client(token: str) -> list[int]:
            headers = {"Authorization": f"Bearer {token}"}
            barrier.wait()
            codes = []
            for _ in range(5):
                r = c.post("/reset", json={"limit": 1}, headers=headers)
                codes.append(r.status_code)
                if r.status_code == 200:
                    c.post("/step", json={"episode_id": r.json()["episode_id"], "action": {"amount": 1}},
                           headers=headers)
            return codes

        with ThreadPoolExecutor(24) as ex:
            results = list(ex.map(client, tokens))
        assert all(codes.count(200) == 2 and codes.count(429) == 3 for codes in results), results
        assert c.get("/health").json()["sessions"] == 48
