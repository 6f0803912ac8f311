"""SkyRL-gym: ``skyrl_gym.make("medagentgym", ...)`` builds the registered BaseTextEnv; toy_sql episodes run to a graded
reward through ``init`` and ``step``, from rows of the dataset builder loaded the way SkyRL's prompt dataset loads
them; the row's ``max_turns`` caps the episode, the reward is always a float, and trajectories run concurrently the
way SkyRL's generator runs them (every trajectory of a batch at once, env calls in a thread pool)."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed (pip install '.[skyrl]')")

import medagentgym.adapters.skyrl  # noqa: F401 - registers "medagentgym"
from medagentgym.adapters._common import shared_pool
from medagentgym.adapters.skyrl import skyrl_dataset, write_skyrl_dataset

SQL = '<tool_call>{"name": "code_execution", "arguments": {"lang": "sql", "code": "SELECT COUNT(*) FROM patients"}}' \
      '</tool_call>'


def _submit(answer: str) -> str:
    return f'<tool_call>{json.dumps({"name": "submit_answer", "arguments": {"answer": answer}})}</tool_call>'


@pytest.fixture()
def env_config(toy_root, sandbox_backend):
    from omegaconf import OmegaConf

    return OmegaConf.create({"tasks_root": str(toy_root), "sandbox": sandbox_backend, "allow_unisolated": True})


def test_make_init_step_to_a_graded_reward(env_config, oracle_answer):
    for answer, reward in ((oracle_answer("toy_sql/train/0002"), 1.0), ("-1", 0.0)):
        env = skyrl_gym.make("medagentgym", env_config=env_config, extras={"task_id": "toy_sql/train/0002"})
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
            assert env.get_metrics() == {"correct": reward, "turns": 2.0, "grader_failed": 0.0}
        finally:
            env.close()


@pytest.mark.parametrize("extras", [{"task_id": "toy_sql/train/0001", "max_turns": 2},
                                    {"extra_info": {"task_id": "toy_sql/train/0001", "max_turns": 2}}])
def test_the_rows_max_turns_ends_the_episode(env_config, extras):
    """SkyRL's generator puts ``generator.max_turns`` into every row's extras; SkyRL's datasets keep per-row settings
    in ``extra_info``. Either caps the episode below the family's own budget."""
    env = skyrl_gym.make("medagentgym", env_config=env_config, extras=extras)
    try:
        _, meta = env.init([])
        assert meta["max_turns"] == env.max_turns == 2
        first = env.step(SQL)
        assert not first["done"]
        last = env.step(SQL)
        assert last["done"] and last["observations"] == [] and last["metadata"]["reason"]
        assert type(last["reward"]) is float and last["reward"] == 0.0
    finally:
        env.close()


def test_a_grader_failure_is_a_flagged_float_never_none(env_config, monkeypatch):
    """SkyRL asserts every step reward is a float: an infrastructure failure of grading gives 0.0, flagged in the
    step's metadata and in the env metrics SkyRL logs, so it is never a silent 0."""
    from medagentgym.tasks.base import InfraError

    env = skyrl_gym.make("medagentgym", env_config=env_config, extras={"task_id": "toy_sql/train/0003"})
    try:
        env.init([])

        def broken(*_a, **_k):
            raise InfraError("grading service down")

        monkeypatch.setattr(env._env.family("toy_sql"), "grade", broken)
        out = env.step(_submit("1"))
        assert out["done"] and type(out["reward"]) is float and out["reward"] == 0.0
        assert out["metadata"]["grader_failed"] is True and out["metadata"]["verdict"]["infra"] is True
        assert env.get_metrics()["grader_failed"] == 1.0
    finally:
        env.close()


def test_bad_config_is_one_clear_error(toy_root):
    with pytest.raises(ValueError, match="needs env_config.tasks_root and extras.task_id"):
        skyrl_gym.make("medagentgym", env_config={"tasks_root": str(toy_root)}, extras={})
    with pytest.raises(ValueError, match="unknown env_config keys: \\['sandbx'\\]"):
        skyrl_gym.make("medagentgym", env_config={"tasks_root": str(toy_root), "sandbx": "local"},
                       extras={"task_id": "toy_sql/train/0000"})
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        skyrl_gym.make("medagentgym", env_config={"tasks_root": str(toy_root)},
                       extras={"task_id": "toy_sql/train/0000", "max_turns": 0})


def _load_like_skyrl(path: str) -> list[tuple[list, str, dict]]:
    """What SkyRL's ``PromptDataset`` yields per row: (prompt messages, env_class, extras = every other column)."""
    import datasets

    rows = datasets.load_dataset("parquet", data_files=path, keep_in_memory=True)["train"]
    out = []
    for row in rows:
        row = dict(row)
        out.append((row.pop("prompt"), row.pop("env_class"), row))
    return out


def _play(rows, env_config, oracle_answer, *, max_env_workers: int, generator_max_turns: int = 4) -> list[float]:
    """SkyRL's generator, reduced to its env calls: every trajectory at once (asyncio.gather), each env call in a
    thread pool of ``max_env_workers``, ``generator.max_turns`` written into the extras, one env per trajectory.
    Every trajectory waits at a barrier after ``init`` (the batch's generation, which the inference engine runs for
    all of them at once), so all episodes are open at the same time."""
    executor = ThreadPoolExecutor(max_workers=max_env_workers)

    async def trajectory(prompt, env_class, extras, generation: asyncio.Barrier) -> float:
        loop = asyncio.get_running_loop()
        env = skyrl_gym.make(env_class, env_config=env_config, extras={**extras, "max_turns": generator_max_turns})
        try:
            chat, _ = await loop.run_in_executor(executor, env.init, prompt)
            assert chat == prompt  # the dataset's prompt is the episode's own opening
            await generation.wait()
            out = await loop.run_in_executor(executor, env.step, SQL)
            assert not out["done"] and "status: SUCCESS" in out["observations"][0]["content"]
            out = await loop.run_in_executor(executor, env.step, _submit(oracle_answer(extras["task_id"])))
            assert out["done"]
            return out["reward"]
        finally:
            await loop.run_in_executor(executor, env.close)

    async def batch() -> list[float]:
        generation = asyncio.Barrier(len(rows))
        return await asyncio.gather(*(trajectory(*row, generation) for row in rows))

    try:
        return asyncio.run(batch())
    finally:
        executor.shutdown()


def test_dataset_builder_rows_play_concurrently(toy_root, env_config, oracle_answer, tmp_path):
    """The fast twin of the 32-trajectory test below: 4 trajectories of the builder's rows at once."""
    paths = write_skyrl_dataset(str(tmp_path / "skyrl"), str(toy_root), ["toy_sql"], limit=4, max_turns=6)
    rows = _load_like_skyrl(paths["train"])
    assert len(rows) == 4 and {env_class for _, env_class, _ in rows} == {"medagentgym"}
    prompt, _, extras = rows[0]
    assert [m["role"] for m in prompt] == ["system", "user"]
    assert extras["data_source"] == "medagentgym/toy_sql" and extras["extra_info"]["max_turns"] == 6
    assert "answer" not in json.dumps(extras).lower().replace("submit_answer", "")  # no gold in the data
    assert len(_load_like_skyrl(paths["test"])) == 4
    assert _play(rows, env_config, oracle_answer, max_env_workers=4) == [1.0] * 4
    assert shared_pool(env_config["sandbox"], allow_unisolated=True).stats()["peak"] >= 4


@pytest.mark.slow
def test_thirty_two_concurrent_trajectories(toy_root, env_config, oracle_answer):
    """A SkyRL batch of 32 trajectories at once (e.g. train_batch_size 8 x n_samples_per_prompt 4) on one process's
    adapters: the shared pool grows to 32 workers from the demand alone."""
    base = skyrl_dataset(str(toy_root), ["toy_sql"], "train", limit=8)
    rows = [(r["prompt"], r["env_class"], {k: v for k, v in r.items() if k not in ("prompt", "env_class")})
            for r in base for _ in range(4)]
    assert _play(rows, env_config, oracle_answer, max_env_workers=32) == [1.0] * 32
    assert shared_pool(env_config["sandbox"], allow_unisolated=True).stats()["peak"] >= 32
