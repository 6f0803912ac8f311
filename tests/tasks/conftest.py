"""Fixtures for the task tests: toy_sql built once (tiny, seed 0) into a session temp root; the EHR SQL databases."""

from __future__ import annotations

import pytest

from medagentgym import tasks


@pytest.fixture(scope="session")
def toy_root(tmp_path_factory: pytest.TempPathFactory):
    """A tasks root holding ``toy_sql`` built at size tiny, seed 0. Read-only use."""
    root = tmp_path_factory.mktemp("tasks_root")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


@pytest.fixture(scope="session")
def toy(toy_root):
    """The toy_sql family bound to :func:`toy_root`."""
    return tasks.make("toy_sql", root=toy_root)


@pytest.fixture(scope="session")
def task_pool(make_test_pool):
    """One sandbox worker for the config-family episode test (bwrap when it works, else local unisolated)."""
    pool = make_test_pool(1, preload=None)
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def dbs(tmp_path_factory):
    """The tiny synthetic databases of the three SQL families (30 patients, seed 0): ``<dir>/<family>.db``.
    Read-only use (importers copy them)."""
    from medagentgym.tasks.ehr_synth.hospital import SIZES, cached_draw

    out = tmp_path_factory.mktemp("dbs")
    raw = cached_draw(SIZES["tiny"], 0)
    for fam in ("mimic_iii", "eicu", "treqs"):
        tasks.registry.family_class(fam).write_database(raw, out / f"{fam}.db", 0)
    return out
