"""Built folders are used only when they are the build a run asked for: same family version, same size."""

from __future__ import annotations

import json

import pytest

from medagentgym import tasks
from medagentgym.tasks.builds import BuildMismatch, build_facts, check_build


@pytest.fixture
def tiny_root(tmp_path):
    tasks.make("toy_sql", root=tmp_path).build(tmp_path, size="tiny", seed=0)
    return tmp_path


def test_a_build_of_another_size_is_refused_with_the_command_that_rebuilds_it(tiny_root):
    assert check_build("toy_sql", tiny_root, size="tiny")["size"] == "tiny"
    assert check_build("toy_sql", tiny_root)["version"] == tasks.make("toy_sql", root=tiny_root).version
    with pytest.raises(BuildMismatch) as err:
        check_build("toy_sql", tiny_root, size="default")
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{tiny_root / 'toy_sql'} is a tiny build, not default: rebuild")
    assert f"medagentgym build --families toy_sql --size default --out {tiny_root}" in line
    assert check_build("eicu", tiny_root, required=False) is None
    with pytest.raises(tasks.NotBuilt, match="family 'eicu' is not built"):
        check_build("eicu", tiny_root)


def test_a_build_made_by_an_older_family_version_is_refused_wherever_instances_are_read(tiny_root):
    manifest = tiny_root / "toy_sql" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["version"] = 0
    manifest.write_text(json.dumps(data))
    assert build_facts("toy_sql", tiny_root)["version"] == 0
    with pytest.raises(BuildMismatch) as err:
        tasks.make("toy_sql", root=tiny_root).instances("test")
    line = str(err.value)
    assert "\n" not in line and "was built by version 0 of family 'toy_sql', but this code is version 1" in line
    assert f"medagentgym build --families toy_sql --size tiny --out {tiny_root}" in line
