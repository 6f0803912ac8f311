"""SkyRL-gym: ``skyrl_gym.make("medagentgym", ...)`` builds the registered BaseTextEnv; a toy_sql episode runs to a
graded reward through ``init`` and ``step``."""

from __future__ import annotations

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed (pip install '.[skyrl]')")

import medagentgym.adapters.skyrl  # noqa: F401 - registers "medagentgym"

SQL = '<tool_call>{"name": "code_execution", "arguments": {"lang": "sql", "code": "SELECT COUNT(*) FROM patients"}}' \
      '</tool_call>'


def _submit(answer: str) -> str:
    return f'<tool_call>{{"name": "submit_answer", "arguments": {{"answer": "{answer}"}}}}</tool_call>'


def test_make_init_step_to_a_graded_reward(toy_root, sandbox_backend, oracle_answer):
    from omegaconf import OmegaConf

    config = OmegaConf.create({"tasks_root": str(toy_root), "sandbox": sandbox_backend, "allow_unisolated": True})
    for answer, reward in ((oracle_answer("toy_sql/train/0002"), 1.0), ("-1", 0.0)):
        env = skyrl_gym.make("medagentgym", env_config=config, extras={"task_id": "toy_sql/train/0002"})
        try:
            prompt, meta = env.init([{"role": "user", "content": "ignored: the episode brings its own prompt"}])
            assert [m["role"] for m in prompt] == ["system", "user"] and meta["task_id"] == "toy_sql/train/0002"
            # SkyRL renders the prompt without tools: the system message carries their compact form
            assert prompt[0]["content"].count("code_execution(lang?: python|sql, code: str)") == 1
            out = env.step(SQL)
            assert not out["done"] and out["reward"] == 0.0 and out["observations"][0]["role"] == "tool"
            assert "status: SUCCESS" in out["observations"][0]["content"]
            out = env.step(_submit(answer))
            assert out["done"] and out["reward"] == reward and out["observations"] == []
            assert out["metadata"]["verdict"]["correct"] is (reward == 1.0)
        finally:
            env.close()


def test_bad_config_is_one_clear_error(toy_root):
    with pytest.raises(ValueError, match="needs env_config.tasks_root and extras.task_id"):
        skyrl_gym.make("medagentgym", env_config={"tasks_root": str(toy_root)}, extras={})
    with pytest.raises(ValueError, match="unknown env_config keys: \\['sandbx'\\]"):
        skyrl_gym.make("medagentgym", env_config={"tasks_root": str(toy_root), "sandbx": "local"},
                       extras={"task_id": "toy_sql/train/0000"})
