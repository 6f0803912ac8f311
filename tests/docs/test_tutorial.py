"""docs/tutorial.md, run verbatim: every command of its ``bash`` blocks, in order, from a copy of the repository.

The commands are parsed from the tutorial, so the test fails when the tutorial drifts from what works: each
non-comment line of a fenced ``bash`` block is one command (continuation lines joined), run with ``bash -c`` in a
copy of the tracked and untracked-but-not-ignored files (as a clone has them) whose ``.venv`` links to the
interpreter running the tests. Blocks fenced as ``text`` are output or need a network, a key or a GPU, and are not
run. One exception: ``make venv`` would reinstall the packages into that shared interpreter when its install
stamp is older than ``pyproject.toml``, so then ``make -n venv`` (what it would do) runs instead; a current stamp
makes ``make venv`` a no-op that runs as written. After the last command the test checks what each step should
have left: the oracle's episodes, the SFT adapter, the GRPO run in the sandbox, the three reports with intervals
and provenance over one task set, the leaderboard and the exported model card.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"


def tutorial_commands(text: str) -> list[str]:
    """The commands of every ```` ```bash ```` block, in order: continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def test_tutorial_parser_runs_bash_blocks_only():
    text = ("intro\n```text\ngit clone URL\n```\n```bash\nmake venv\n.venv/bin/python a.py --x 1 \\\n    --y 2\n"
            "# a comment\n```\n```bash\n.venv/bin/python b.py\n```\n")
    assert tutorial_commands(text) == ["make venv", ".venv/bin/python a.py --x 1 --y 2", ".venv/bin/python b.py"]
    commands = tutorial_commands(TUTORIAL.read_text(encoding="utf-8"))
    for step in ("make venv", "medagentgym build", "recipe=sft_tiny", "recipe=grpo_tiny", "medagentgym eval",
                 "medagentgym leaderboard", "medagentgym export"):
        assert any(step in command for command in commands), f"the tutorial no longer runs {step}"


def _install_stamp_current(clone: Path) -> bool:
    """Whether ``make venv`` in ``clone`` would do nothing (its install stamp is newer than pyproject.toml)."""
    return subprocess.run(["make", "-q", ".venv/.installed"], cwd=clone, check=False).returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None or shutil.which("make") is None,
                    reason="the tutorial uses the bubblewrap sandbox and make; the copy is made from git's file list")
def test_tutorial_commands_run_verbatim_from_a_fresh_copy(tmp_path, repo_copy):
    clone = repo_copy(tmp_path / "clone")
    ran = []
    for command in tutorial_commands(TUTORIAL.read_text(encoding="utf-8")):
        if command == "make venv" and not _install_stamp_current(clone):
            command = "make -n venv"  # never reinstall into the interpreter running the tests
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", command], cwd=clone, capture_output=True, text=True, timeout=1800,
                              check=False)
        assert done.returncode == 0, (f"`{command}` failed ({done.returncode}):\n{done.stdout[-2000:]}\n"
                                      f"{done.stderr[-4000:]}")
        ran.append(f"{time.monotonic() - started:6.1f} s  {command}")
    print("\n".join(ran))
    _check_outputs(clone)


def _check_outputs(clone: Path) -> None:
    """What the exit statuses do not show: each step left what the tutorial says it leaves."""
    from huggingface_hub import ModelCard

    from medagentgym.env_client.trajectory import TrajectoryStore

    episodes = list(TrajectoryStore(clone / "artifacts/trajectories/oracle_train.jsonl").read())
    assert episodes and all(t.final.verdict["correct"] for t in episodes), "the oracle's SFT data is not all correct"
    sft = clone / "runs/tutorial/sft"
    assert (sft / "adapter_config.json").is_file() and (sft / "checkpoint-5").is_dir()
    assert json.loads((sft / "run_summary.json").read_text())["global_step"] == 5
    grpo = json.loads((clone / "runs/tutorial/grpo/run_summary.json").read_text())
    assert grpo["global_step"] == 2 and "bwrap" in grpo["sandbox_layers"], grpo
    logged = json.loads((clone / "runs/tutorial/grpo/trainer_state.json").read_text())["log_history"]
    assert any("env/success_rate" in row and "frac_reward_zero_std" in row for row in logged), logged
    reports = {name: json.loads((clone / f"runs/eval/{name}/report.json").read_text())
               for name in ("oracle", "sft", "grpo")}
    assert reports["oracle"]["success_rate"] == 1.0, reports["oracle"]["per_family"]
    for name, report in reports.items():
        lo, hi = report["ci95"]
        assert 0.0 <= lo <= report["success_rate"] <= hi <= 1.0, (name, report["ci95"])
        assert report["episodes"] == 8 and all(report["meta"].get(key) for key in ("commit", "date", "task_set"))
        assert (clone / f"runs/eval/{name}/report.md").is_file()
    assert len({report["meta"]["task_set"] for report in reports.values()}) == 1, "the reports ran other tasks"
    page = (clone / "runs/eval/sft/view.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and '"id":"toy_sql/test/' in page, "the viewer's page of step 6"
    board = (clone / "runs/eval/leaderboard/leaderboard.md").read_text()
    assert all(policy in board for policy in ("oracle", "hf:runs/tutorial/sft", "hf:runs/tutorial/grpo")), board
    card = ModelCard.load(clone / "artifacts/export/tutorial-grpo/README.md")
    assert card.data.eval_results and "## Intended use" in card.text
    assert (clone / "artifacts/export/tutorial-grpo/model.safetensors").is_file()


def test_the_readme_and_the_tutorial_evaluate_into_different_folders():
    """A new user runs README's commands, then the tutorial's, in one clone: an evaluation of another question
    into the same --out is refused (medagentgym eval), so the two must never share one (it blocked step 6)."""
    import shlex

    def outs(commands):
        found = {}
        for command in commands:
            words = shlex.split(command)
            if "eval" in words and "--out" in words:
                found[words[words.index("--out") + 1]] = command
        return found

    using = (ROOT / "README.md").read_text(encoding="utf-8").split("## Using it", 1)[1]
    block = re.sub(r"\\\n\s*", "", re.search(r"```(?:bash)?\n(.*?)```", using, re.DOTALL).group(1))
    readme = outs(line.split("#")[0] for line in block.splitlines() if "medagentgym eval" in line)
    tutorial = outs(tutorial_commands(TUTORIAL.read_text(encoding="utf-8")))
    assert readme and tutorial and not set(readme) & set(tutorial), sorted(set(readme) & set(tutorial))
