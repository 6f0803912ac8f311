"""gymnasium: ``gymnasium.make`` builds the registered env; a toy_sql episode runs to a graded reward, and
gymnasium's own env checker accepts the env."""

from __future__ import annotations

import json
import math

import pytest

gymnasium = pytest.importorskip("gymnasium", reason="gymnasium is not installed (pip install '.[gymnasium]')")

SQL = '<tool_call>{"name": "code_execution", "arguments": {"lang": "sql", "code": "SELECT COUNT(*) FROM patients"}}' \
      '</tool_call>'


def _submit(answer: str) -> str:
    return f'<tool_call>{json.dumps({"name": "submit_answer", "arguments": {"answer": answer}})}</tool_call>'


@pytest.fixture()
def env(toy_root, sandbox_backend):
    env = gymnasium.make("medagentgym.adapters.gym:MedAgentGym-v0", tasks_root=toy_root, families=["toy_sql"],
                         sandbox=sandbox_backend, allow_unisolated=True)
    yield env
    env.close()


def test_make_reset_step_to_a_graded_reward(env, oracle_answer):
    obs, info = env.reset(options={"task_id": "toy_sql/test/0003"})
    assert "Question:" in obs and info["task_id"] == "toy_sql/test/0003" and info["messages"][0]["role"] == "system"
    obs, reward, terminated, truncated, info = env.step(SQL)
    assert "status: SUCCESS" in obs and reward == 0.0 and not terminated and not truncated
    obs, reward, terminated, truncated, info = env.step(_submit(oracle_answer("toy_sql/test/0003")))
    assert terminated and not truncated and reward == 1.0 and info["verdict"]["correct"]
    obs, info = env.reset(seed=5)  # a task picked by seed, reproducibly
    assert info["task_id"] == env.reset(seed=5)[1]["task_id"] and info["task_id"].startswith("toy_sql/train/")
    _, reward, terminated, _, _ = env.step(_submit("-1"))
    assert terminated and reward == 0.0 and not math.isnan(reward)


def test_gymnasium_env_checker_accepts_it(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env.unwrapped, skip_render_check=True)
    assert gymnasium.spec("MedAgentGym-v0").entry_point == "medagentgym.adapters.gym:MedAgentGymEnv"


def _play_vector(vec, oracle_answer) -> None:
    """Every sub-env plays its own task to a graded 1.0 (a SQL call, then the oracle's answer), then autoresets."""
    n = vec.num_envs
    obs, info = vec.reset(seed=0)
    assert isinstance(obs, tuple) and len(obs) == n and all("Question:" in o for o in obs)
    task_ids = list(info["task_id"])
    assert len(set(task_ids)) > 1  # each sub-env picks its own task (seeded seed, seed + 1, ...)
    obs, reward, terminated, truncated, info = vec.step((SQL,) * n)
    assert all("status: SUCCESS" in o for o in obs) and not reward.any() and not terminated.any()
    obs, reward, terminated, truncated, info = vec.step(tuple(_submit(oracle_answer(t)) for t in task_ids))
    assert reward.tolist() == [1.0] * n and terminated.all() and not truncated.any()
    assert info["verdict"]["correct"].all() and info["_verdict"].all()
    obs, reward, terminated, _, info = vec.step(("ignored",) * n)  # gymnasium's next-step autoreset
    assert all("Question:" in o for o in obs) and not terminated.any() and info["task_id"].tolist()


def _vector(mode: str, num_envs: int, toy_root, sandbox_backend):
    return gymnasium.make_vec("medagentgym.adapters.gym:MedAgentGym-v0", num_envs=num_envs, vectorization_mode=mode,
                              tasks_root=str(toy_root), families=["toy_sql"], sandbox=sandbox_backend,
                              allow_unisolated=True)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_env_with_eight_envs(mode, toy_root, sandbox_backend, oracle_answer):
    """``make_vec(num_envs=8)`` with gymnasium's defaults (async: shared memory on): eight episodes at once, each on
    its own sandbox worker, with no flag saying so. In one process (sync) the shared pool grows to the eight envs;
    async runs each env in its own process, with its own pool."""
    from medagentgym.adapters._common import shared_pool

    pool = shared_pool(sandbox_backend, allow_unisolated=True)
    vec = _vector(mode, 8, toy_root, sandbox_backend)
    try:
        _play_vector(vec, oracle_answer)
        assert pool.stats()["busy"] == (8 if mode == "sync" else 0)
    finally:
        vec.close()
    assert pool.stats()["busy"] == 0


def test_text_space_shared_memory_round_trip():
    """What AsyncVectorEnv's workers write is what the parent reads, any unicode, and an oversized text is refused."""
    import copy

    from gymnasium.vector.utils import (
        create_shared_memory,
        read_from_shared_memory,
        write_to_shared_memory,
    )

    from medagentgym.adapters.gym import TextSpace

    space = TextSpace(16)
    assert space == TextSpace(16) and space != TextSpace(17)
    memory = create_shared_memory(space, n=3)
    view = read_from_shared_memory(space, memory, n=3)
    for i, text in enumerate(["héllo wörld ✓", "", "\ud800 lone"]):
        write_to_shared_memory(space, i, text, memory)
    assert copy.deepcopy(view) == ("héllo wörld ✓", "", "\ud800 lone")  # the view reads the buffer when used
    write_to_shared_memory(space, 1, "second", memory)
    assert view[1] == "second" and isinstance(copy.deepcopy(view), tuple)
    with pytest.raises(ValueError, match="does not fit"):
        write_to_shared_memory(space, 0, "x" * 17, memory)
