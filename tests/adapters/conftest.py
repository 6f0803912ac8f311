"""Fixtures of the adapter tests: toy_sql built tiny and its oracle answers."""

from __future__ import annotations

import pytest

from medagentgym import tasks


@pytest.fixture(scope="session")
def toy_root(tmp_path_factory: pytest.TempPathFactory):
    """A tasks root with toy_sql built (tiny, seed 0)."""
    root = tmp_path_factory.mktemp("adapter_tasks")
    tasks.make("toy_sql", root=root).build(root, size="tiny", seed=0)
    return root


@pytest.fixture(scope="session")
def oracle_answer(toy_root):
    """``oracle_answer(task_id) -> str``: the answer the family's reference solution submits."""
    fam = tasks.make("toy_sql", root=toy_root)
    by_id = {inst.id: inst for split in ("train", "test") for inst in fam.instances(split)}

    def answer(task_id: str) -> str:
        return str(fam.reference_solution(by_id[task_id])[-1]["params"]["answer"])

    return answer
