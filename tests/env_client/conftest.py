"""Fixtures for the episode tests: a session sandbox pool, toy_sql built tiny, and a fresh Env per test."""

from __future__ import annotations

import pytest

import tasks
from env_client import Env, EnvConfig


@pytest.fixture(scope="session")
def env_pool():
    """Two warm sandbox workers: bwrap when it works here, else the local backend (unisolated, tests only)."""
    from sandbox import SandboxUnavailable, make_pool

    try:
        pool = make_pool("bwrap", workers=2)
    except SandboxUnavailable:
        pool = make_pool("local", workers=2, allow_unisolated=True)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def toy_root(tmp_path_factory: pytest.TempPathFactory):
    """A tasks root with toy_sql built (tiny, seed 0)."""
    root = tmp_path_factory.mktemp("env_tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


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

