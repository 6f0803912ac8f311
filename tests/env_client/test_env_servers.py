"""Several env servers behind ``EnvServers`` (real uvicorn servers on loopback): episodes are spread round-robin,
a dead server is skipped after its health check, a full one is retried elsewhere, and an episode stays on the
server it started on."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from medagentgym.env_client.http_client import EnvServers, ServerError
from medagentgym.env_client.policies import make_policy
from medagentgym.env_client.rollout import rollout
from medagentgym.env_client.server_app import background_server, build_app
from medagentgym import tasks


def _dead_url() -> str:
    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def two_servers(toy_root, make_test_pool):
    pool = make_test_pool(4)
    try:
        a = build_app(toy_root, pool=pool, capacity=8, hide_gold=False)
        b = build_app(toy_root, pool=pool, capacity=1, hide_gold=False)  # b holds one session at most
        with background_server(a) as url_a, background_server(b) as url_b:
            yield url_a, url_b
    finally:
        pool.close()


def test_episodes_spread_round_robin_and_succeed(two_servers, toy_root, toy_test):
    servers = EnvServers(list(two_servers))
    oracle = make_policy("oracle", families=lambda name: tasks.make(name, root=toy_root))
    result = rollout(toy_test[:4], oracle, servers.env, concurrency=1, on_error="raise")
    assert result.summary.success_rate == 1.0
    assert servers.episodes == {two_servers[0]: 2, two_servers[1]: 2}, "one server after the other"
    servers.close()


def test_a_dead_server_is_skipped_and_none_alive_is_one_line(two_servers, toy_root, toy_test):
    dead = _dead_url()
    servers = EnvServers([dead, two_servers[0]], health_every_s=60)
    oracle = make_policy("oracle", families=lambda name: tasks.make(name, root=toy_root))
    result = rollout(toy_test[:3], oracle, servers.env, concurrency=1)
    assert result.summary.success_rate == 1.0 and servers.episodes == {dead: 0, two_servers[0]: 3}
    assert servers.healthy(dead) is False
    nobody = EnvServers([dead, _dead_url()])
    with pytest.raises(ServerError, match="no healthy env server among") as exc:
        nobody.env().reset(toy_test[0])
    assert "\n" not in str(exc.value)


def test_a_full_server_is_retried_on_the_next_and_episodes_stay_put(two_servers, toy_test):
    url_a, url_b = two_servers
    servers = EnvServers([url_b, url_a], backoff_s=0.01)
    holder = servers.env()
    holder.reset(toy_test[0])  # takes b's only session
    assert holder.url == url_b
    other = servers.env()
    other.reset(toy_test[1])  # round-robin says a
    third = servers.env()
    third.reset(toy_test[2])  # round-robin says b, which is full (503): retried on a
    assert other.url == url_a and third.url == url_a and servers.episodes[url_b] == 1
    result = holder.step('<tool_call>{"name": "submit_answer", "arguments": {"answer": "0"}}</tool_call>')
    assert result.terminated and holder.url == url_b, "the step went to the episode's own server"
    for env in (holder, other, third):
        env.close()
    assert holder.trajectory.final is not None  # readable after close, from the server it ran on
    servers.close()


def test_bad_urls_are_refused():
    with pytest.raises(ValueError, match="distinct http"):
        EnvServers(["http://127.0.0.1:1", "http://127.0.0.1:1"])
    with pytest.raises(ValueError, match="distinct http"):
        EnvServers(["127.0.0.1:8000"])


class _Gated:
    """The oracle, with a gate before every turn (a model's latency, held as long as the test wants): while the gate
    is shut, every running episode waits before its next turn with its session open, so a server stopped then has
    episodes mid-way whatever the machine's load (issue #29: a 0.15 s pause let them finish first under load)."""

    def __init__(self, oracle) -> None:
        self.oracle, self.open, self.held = oracle, threading.Event(), 0
        self.changed = threading.Condition()
        self.open.set()

    def hold(self, episodes: int, timeout: float) -> bool:
        """Shut the gate; True once ``episodes`` episodes wait at it (False after ``timeout`` seconds)."""
        self.open.clear()
        with self.changed:
            return self.changed.wait_for(lambda: self.held >= episodes, timeout)

    def for_episode(self, instance):
        replay, gate = self.oracle.for_episode(instance), self

        class Turn:
            def act(self, messages, *, tools=None, seed=None):
                with gate.changed:
                    gate.held += 1
                    gate.changed.notify_all()
                try:
                    gate.open.wait(300)
                finally:
                    with gate.changed:
                        gate.held -= 1
                return replay.act(messages, tools=tools, seed=seed)

        return Turn()


def test_a_server_that_dies_mid_run_loses_no_episode_and_duplicates_none(toy_root, toy_test, make_test_pool,
                                                                         tmp_path):
    """Two servers; one stops (its port closes) while episodes run on it: each of those is played again on the
    other server, and the store ends with every (task, sample) exactly once, all correct."""
    oracle = make_policy("oracle", families=lambda name: tasks.make(name, root=toy_root))
    pool = make_test_pool(2)
    store = tmp_path / "episodes.jsonl"
    try:
        app_a = build_app(toy_root, pool=pool, capacity=16, hide_gold=False)
        app_b = build_app(toy_root, pool=pool, capacity=16, hide_gold=False)
        server_a = background_server(app_a)
        url_a = server_a.__enter__()
        with background_server(app_b) as url_b:
            servers = EnvServers([url_a, url_b], health_every_s=0.5, backoff_s=0.05)
            killed = threading.Event()

            policy = _Gated(oracle)

            def kill_a_mid_episode() -> None:
                deadline = time.monotonic() + 120
                try:
                    while time.monotonic() < deadline:
                        stored = store.read_text().count("\n") if store.exists() else 0
                        # once two are stored, hold all four runners before their next turn: an episode open on a
                        # then stays open there until a is gone
                        if stored >= 2 and policy.hold(4, timeout=30) and \
                                httpx.get(url_a + "/health", timeout=5).json()["sessions"] >= 1:
                            server_a.__exit__(None, None, None)
                            killed.set()
                            return
                        policy.open.set()  # none on a this time: let one more episode finish, then try again
                        while store.exists() and store.read_text().count("\n") == stored and \
                                time.monotonic() < deadline:
                            time.sleep(0.01)
                finally:
                    policy.open.set()

            killer = threading.Thread(target=kill_a_mid_episode)
            killer.start()
            result = rollout(toy_test[:6], policy, servers.env, k=2, concurrency=4, store=store, on_error="skip")
            killer.join()
            assert killed.is_set(), "server a was never stopped mid-run"
            assert result.summary.failed == 0 and result.summary.episodes == 12 == result.summary.new
            assert result.summary.success_rate == 1.0
            lines = [json.loads(line) for line in store.read_text().splitlines()]
            keys = [(rec["header"]["task_id"], rec["header"]["sample_idx"]) for rec in lines]
            assert len(keys) == 12 == len(set(keys)), "every episode stored exactly once"
            assert servers.lost[url_a] >= 1, "an episode was running on a when it stopped"
            # every replay was a new episode start (on b), and nothing else was started twice
            assert sum(servers.episodes.values()) == 12 + servers.lost[url_a] and servers.lost[url_b] == 0
            servers.close()
    finally:
        pool.close()


def test_a_server_marked_down_by_a_missed_health_check_is_checked_again_before_giving_up(two_servers):
    """An overloaded server can miss a health check; when every server looks down, pick() asks each again instead
    of failing the episode (found by the kill-a-server benchmark at load 40: the survivor missed one check)."""
    url = two_servers[0]
    servers = EnvServers([url], health_every_s=600)
    servers.mark(url, False)  # as after a check that timed out
    assert servers.pick() == url and servers.healthy(url)
    servers.close()
