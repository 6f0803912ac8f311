"""The paper path cannot train or evaluate on a smoke build by accident: every bundled recipe and paper sweep names
its task size, and the dry runs of the headline recipe and of the paper sweeps refuse a tiny build where they read
(one line: which input, and the command that rebuilds it)."""

from __future__ import annotations

import pytest
import yaml

from medagentgym import tasks
from medagentgym.medcopilot.config import RECIPES_DIR
from medagentgym.medcopilot.sweep import main as sweep_main

RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
PAPER_SWEEPS = sorted(p.stem for p in (RECIPES_DIR / "sweeps").glob("paper_*.yaml"))


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_names_its_task_size(name):
    raw = yaml.safe_load((RECIPES_DIR / f"{name}.yaml").read_text())
    size = (raw.get("tasks") or {}).get("size")
    assert size in ("tiny", "default"), f"recipes/{name}.yaml must set tasks.size explicitly"
    if "_qwen" in name:
        assert size == "default", f"recipes/{name}.yaml trains a real model: tasks.size must be default"


@pytest.mark.parametrize("name", PAPER_SWEEPS)
def test_every_paper_sweep_names_its_evaluation_size_and_its_stages_agree(name):
    raw = yaml.safe_load((RECIPES_DIR / "sweeps" / f"{name}.yaml").read_text())
    args = [str(a) for a in raw["evaluate"]["args"]]
    assert "--size" in args, f"sweeps/{name}.yaml: evaluate.args must name --size"
    size = args[args.index("--size") + 1]
    assert size == ("tiny" if name.endswith("_tiny") else "default")
    for stage in raw["stages"]:
        recipe = yaml.safe_load((RECIPES_DIR / f"{stage['recipe']}.yaml").read_text())
        assert recipe["tasks"]["size"] == size, f"stage {stage['name']} trains at another size than it evaluates"


@pytest.fixture(scope="module")
def tiny_medcalc(tmp_path_factory):
    """A tasks root holding a tiny build of one in-distribution family (medcalcbench) and one ood family."""
    root = tmp_path_factory.mktemp("sizes") / "artifacts" / "tasks"
    tasks.make("medcalcbench", root=root).build(root, size="tiny", seed=0)
    return root


def test_the_headline_recipes_dry_run_refuses_a_tiny_build(tiny_medcalc, train_main, capsys, tmp_path):
    root = tiny_medcalc
    status = train_main(["recipe=grpo_qwen14b", "--dry-run", f"tasks.root={root}", f"output.dir={tmp_path / 'o'}"])
    out, err = capsys.readouterr()
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "valid" not in out.split("# input")[-1]
    assert err.startswith(f"train.py: error: {root} holds a tiny build of medcalcbench, but this run needs size "
                          f"default: rebuild with `medagentgym build --families medcalcbench --size default "
                          f"--out {root}`"), err
    assert f"# input tasks medcalcbench: REFUSED ({root / 'medcalcbench'} is a tiny build, the recipe needs default)" \
        in out


@pytest.mark.parametrize("name", ["paper_qwen7b", "paper_qwen14b"])
def test_the_paper_sweeps_dry_run_refuses_a_tiny_build(name, tiny_medcalc, capsys, monkeypatch):
    monkeypatch.chdir(tiny_medcalc.parent.parent)  # the sweeps read artifacts/tasks
    assert sweep_main([name, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("sweep.py: error: sweep run 'sft' (sft_qwen") and "holds a tiny build of medcalcbench" in err
    assert "`medagentgym build --families medcalcbench --size default --out artifacts/tasks`" in err


def test_the_paper_sweeps_evaluation_refuses_a_tiny_build_of_a_held_out_family(tmp_path, capsys, monkeypatch):
    root = tmp_path / "artifacts" / "tasks"
    tasks.make("npowerai", root=root).build(root, size="tiny", seed=0)  # ood: no training stage reads it
    monkeypatch.chdir(tmp_path)
    assert sweep_main(["paper_qwen7b", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("sweep.py: error: evaluate (--size default): artifacts/tasks holds a tiny build of "
                          "npowerai, but this run needs size default: rebuild with `medagentgym build --families "
                          "npowerai --size default --out artifacts/tasks`"), err
    assert "a smoke run may say --size tiny" in err


def test_the_tiny_paper_sweep_still_plans_over_a_tiny_build(tiny_medcalc, capsys, monkeypatch):
    monkeypatch.chdir(tiny_medcalc.parent.parent)
    assert sweep_main(["paper_tiny", "--dry-run"]) == 0, capsys.readouterr().err
