"""Generation overlaps sandbox execution: with continuous batching an episode that is ready is served while
another is still in the sandbox; lockstep batching makes it wait. Deterministic: the "sandbox" is an event."""

from __future__ import annotations

import threading

import pytest

from medagentgym.medcopilot.rollout_func import TurnBatcher


def _play(batching: str, flush_s: float, b_wait_s: float):
    """Episode A asks twice; episode B sits in its sandbox until A's second turn is generated (at most
    ``b_wait_s``), then asks once."""
    calls: list[list[int]] = []

    def generate(contexts, seeds):
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
            seen["b_waited"] = a_second_turn_done.wait(timeout=b_wait_s)  # a long sandbox call
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
    # B waits for A's second turn (the event; microseconds of work): 60 s guards a hang, not the speed (issue #29)
    calls, seen, batcher = _play("continuous", flush_s=60.0, b_wait_s=60.0)
    assert seen["b_waited"] is True, "A's second turn was generated while B was still in its sandbox"
    assert calls[1] == [0] and calls[-1] == [1]
    assert 0.0 <= batcher.idle_share <= 1.0 and batcher.generate_s <= batcher.wall_s


def test_lockstep_batching_makes_the_ready_episode_wait_for_the_slow_one():
    # A's second turn cannot come while B is out, however fast the host: B gives up after 3 s whatever the load
    calls, seen, _ = _play("lockstep", flush_s=60.0, b_wait_s=3.0)
    assert seen["b_waited"] is False, "A waited for B (B gave up waiting after 3 s)"
    assert [0, 1] in calls[1:], "A's second turn went out together with B's"


def test_unknown_batching_is_refused():
    with pytest.raises(ValueError, match="continuous"):
        TurnBatcher(lambda c: ([], None), 1, batching="eager")


class _FakeLLM:
    """The part of vllm.LLM the hook touches (no GPU here): records sleep and wake calls."""

    def __init__(self, log):
        self.log = log

    def wake_up(self, tags=None):
        self.log.append(("wake_up", tuple(tags or ())))

    def sleep(self, level=1):
        self.log.append(("sleep", level))


class _FakeVLLMGeneration:
    """TRL's VLLMGeneration at its public surface: generate() sleeps per call when enable_sleep_mode is set."""

    def __init__(self, log):
        self.mode, self.tensor_parallel_size, self.enable_sleep_mode = "colocate", 1, True
        self.llm, self.log, self.max_completion_length = _FakeLLM(log), log, None

    def generate(self, prompts, images, num_generations):
        self.log.append(("generate", self.enable_sleep_mode))
        if self.enable_sleep_mode:  # what TRL does around each call in sleep mode
            self.llm.wake_up(tags=["kv_cache"])
            self.llm.sleep(level=2)
        return prompts, [[5] for _ in prompts], [[[-0.5]] for _ in prompts], None


def test_a_sleeping_vllm_engine_stays_awake_for_a_whole_multi_turn_round():
    from types import SimpleNamespace

    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc

    log: list = []
    vg = _FakeVLLMGeneration(log)
    trainer = SimpleNamespace(vllm_generation=vg, accelerator=SimpleNamespace(num_processes=1, process_index=0),
                              state=SimpleNamespace(global_step=0))
    hook = EnvRolloutFunc.__new__(EnvRolloutFunc)  # only the vLLM plumbing is under test
    hook.max_new_tokens, hook._vllm_slept_at = 16, None

    def three_turns(prompts, gen, **kwargs):
        for _ in range(3):
            gen([[1, 2]], [0])
        return {}

    hook.run = three_turns
    hook._run_vllm(["p"], trainer)
    assert log == [("wake_up", ("kv_cache",)), ("generate", False), ("generate", False), ("generate", False),
                   ("sleep", 1)], "woken once, no per-call level-2 sleep (which would re-push the weights)"
    assert vg.enable_sleep_mode is True
    log.clear()
    hook._run_vllm(["p"], trainer)  # same step: TRL did not sync, so the hook restores the weights itself
    assert log[:2] == [("wake_up", ("weights",)), ("wake_up", ("kv_cache",))] and log[-1] == ("sleep", 1)
