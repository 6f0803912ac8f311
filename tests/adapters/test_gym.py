"""gymnasium: ``gymnasium.make`` builds the registered env; a toy_sql episode runs to a graded reward, and
gymnasium's own env checker accepts the env."""

from __future__ import annotations

import math

import pytest

gymnasium = pytest.importorskip("gymnasium", reason="gymnasium is not installed (pip install '.[gymnasium]')")

SQL = '<tool_call>{"name": "code_execution", "arguments": {"lang": "sql", "code": "SELECT COUNT(*) FROM patients"}}' \
      '</tool_call>'


def _submit(answer: str) -> str:
    return f'<tool_call>{{"name": "submit_answer", "arguments": {{"answer": "{answer}"}}}}</tool_call>'


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
