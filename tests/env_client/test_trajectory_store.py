"""Trajectory store: atomic appends, torn lines ignored, resume keys, chat-message export."""

from __future__ import annotations

import os
import threading

import pytest

from medagentgym.env_client.errors import StoreError
from medagentgym.env_client.trajectory import (
    FinalRecord,
    StepRecord,
    Trajectory,
    TrajectoryHeader,
    TrajectoryStore,
    to_chat_messages,
)


def make_traj(task: str = "toy_sql/test/0000", sample: int = 0, finished: bool = True, pad: int = 0) -> Trajectory:
    header = TrajectoryHeader(task_id=task, family="toy_sql", category="c", split="test", sample_idx=sample,
                              config_hash="h", policy="p")
    steps = [StepRecord(turn=1, raw_text="x" * pad + "<tool_call>{}</tool_call>", observation="obs", status="ok",
                        observation_role="tool"),
             StepRecord(turn=2, raw_text="submit", observation="Answer submitted.", status="submitted")]
    final = FinalRecord(verdict={"correct": True, "score": 1.0, "reason": "", "error": None}, reward=1.0,
                        terminated=True, truncated=False, reason="submitted", turns=2, wall_s=0.1) if finished else None
    return Trajectory(header=header, prompt=[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
                      steps=steps, final=final)


def test_append_read_roundtrip_and_done_keys(tmp_path):
    store = TrajectoryStore(tmp_path / "sub" / "runs.jsonl")
    trajs = [make_traj("a", 0), make_traj("a", 1), make_traj("b", 0)]
    assert store.extend(trajs) == 3
    assert list(store.read()) == trajs
    assert store.done_keys() == {("a", 0), ("a", 1), ("b", 0)}
    assert len(store) == 3


def test_torn_final_line_is_ignored_and_later_appends_still_read(tmp_path):
    store = TrajectoryStore(tmp_path / "runs.jsonl")
    store.append(make_traj("a"))
    with open(store.path, "ab") as fh:
        fh.write(make_traj("b").model_dump_json().encode()[:50])  # a crash mid-write, no newline
    assert [t.header.task_id for t in store.read()] == ["a"]
    assert store.done_keys() == {("a", 0)}


def test_corrupt_complete_line_is_loud(tmp_path):
    store = TrajectoryStore(tmp_path / "runs.jsonl")
    store.append(make_traj("a"))
    with open(store.path, "ab") as fh:
        fh.write(b'{"not": "a trajectory"}\n')
    with pytest.raises(StoreError, match=r"runs.jsonl:2"):
        list(store.read())


def test_unfinished_trajectory_is_refused(tmp_path):
    with pytest.raises(StoreError, match="has not ended"):
        TrajectoryStore(tmp_path / "r.jsonl").append(make_traj(finished=False))


def test_concurrent_appends_never_interleave(tmp_path):
    store = TrajectoryStore(tmp_path / "runs.jsonl")

    def writer(k: int) -> None:
        for i in range(10):
            store.append(make_traj(f"t{k}", i, pad=20_000))  # lines far larger than a pipe buffer

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.done_keys()) == 40
    assert store.path.read_bytes().count(b"\n") == 40
    assert os.path.getsize(store.path) > 40 * 20_000


def test_to_chat_messages():
    traj = make_traj()
    msgs = to_chat_messages(traj)
    assert msgs == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<tool_call>{}</tool_call>"}, {"role": "tool", "content": "obs"},
        {"role": "assistant", "content": "submit"},
    ]
    assert to_chat_messages(traj, include_final_observation=True)[-1] == {"role": "user",
                                                                          "content": "Answer submitted."}
    assert traj.key == ("toy_sql/test/0000", 0)
