"""Fixtures for the episode tests: a session sandbox pool, toy_sql built tiny, a fresh Env per test, and a
timing-free view of trajectories for comparing runs."""

from __future__ import annotations

import pytest

from medagentgym import tasks
from medagentgym.env_client import Env, EnvConfig


@pytest.fixture(scope="session")
def env_pool(make_test_pool):
    """Two warm sandbox workers: bwrap when it works here, else the local backend (unisolated, tests only)."""
    pool = make_test_pool(2)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def toy_root(tmp_path_factory: pytest.TempPathFactory):
    """A tasks root with toy_sql built (tiny, seed 0)."""
    root = tmp_path_factory.mktemp("env_tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


@pytest.fixture(scope="session")
def built(toy_root):
    """``(root, family)`` of the session's toy_sql build."""
    return toy_root, tasks.make("toy_sql", root=toy_root)


@pytest.fixture(scope="session")
def strip_timings():
    """``strip(value)``: a JSON-like value without its timing fields, to compare two runs of an episode."""
    timing = {"episode_id", "started_at", "duration_s", "exec_s", "wall_s"}

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in timing}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip


@pytest.fixture(scope="session")
def toy_test(toy_root):
    """toy_sql's test instances."""
    return tasks.make("toy_sql", root=toy_root).instances("test")


@pytest.fixture()
def make_env(env_pool, toy_root):
    """Factory ``make_env(**config)`` -> Env on the shared pool; every env is closed after the test."""
    made: list[Env] = []

    def factory(root=None, **config) -> Env:
        env = Env(env_pool, tasks_root=root or toy_root, config=EnvConfig(**config))
        made.append(env)
        return env

    yield factory
    for env in made:
        env.close()

