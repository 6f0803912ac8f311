"""Generation overlaps sandbox execution: with continuous batching an episode that is ready is served while
another is still in the sandbox; lockstep batching makes it wait. Deterministic: the "sandbox" is an event."""

from __future__ import annotations

import threading

import pytest

from medcopilot.rollout_func import TurnBatcher


def _play(batching: str, flush_s: float):
    """Episode A asks twice; episode B sits in its sandbox until A's second turn is generated, then asks once."""
    calls: list[list[int]] = []

    def generate(contexts):
        calls.append([ctx[0] for ctx in contexts])
        return [[7] for _ in contexts], None

    batcher = TurnBatcher(generate, n_episodes=2, flush_s=flush_s, batching=batching)
    a_second_turn_done = threading.Event()
    seen: dict[str, float] = {}

    def episode_a():
        batcher.start()
        try:
            batcher.request(0, [0, 1])
            batcher.request(0, [0, 2])  # back from a quick sandbox call
            a_second_turn_done.set()
        finally:
            batcher.done()

    def episode_b():
        batcher.start()
        try:
            batcher.request(1, [1, 1])
            seen["b_waited"] = a_second_turn_done.wait(timeout=3.0)  # a long sandbox call
            batcher.request(1, [1, 2])
        finally:
            batcher.done()

    threads = [threading.Thread(target=episode_a), threading.Thread(target=episode_b)]
    for t in threads:
        t.start()
    batcher.serve()
    for t in threads:
        t.join()
    return calls, seen, batcher


def test_continuous_batching_serves_a_ready_episode_while_another_runs_code():
    calls, seen, batcher = _play("continuous", flush_s=60.0)
    assert seen["b_waited"] is True, "A's second turn was generated while B was still in its sandbox"
    assert calls[1] == [0] and calls[-1] == [1]
    assert 0.0 <= batcher.idle_share <= 1.0 and batcher.generate_s <= batcher.wall_s


def test_lockstep_batching_makes_the_ready_episode_wait_for_the_slow_one():
    calls, seen, _ = _play("lockstep", flush_s=60.0)
    assert seen["b_waited"] is False, "A waited for B (B gave up waiting after 3 s)"
    assert [0, 1] in calls[1:], "A's second turn went out together with B's"


def test_unknown_batching_is_refused():
    with pytest.raises(ValueError, match="continuous"):
        TurnBatcher(lambda c: ([], None), 1, batching="eager")
