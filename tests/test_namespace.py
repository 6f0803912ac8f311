"""The ``medagentgym`` namespace (issue #33): our packages are ``medagentgym.sandbox``, ``medagentgym.rewards``,
``medagentgym.env_client`` and ``medagentgym.medcopilot``; the old top-level names are deprecated aliases of them
(medagentgym/_compat.py), never copies; a user's folders named like the old ones cannot break us; and the tree uses
the new names (scripts/dev/namespace_move.py --check)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLD = ("sandbox", "rewards", "env_client", "medcopilot")


def _python(code: str, cwd: Path, *, check: bool = True, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` from ``cwd`` (which ``-c`` puts first on sys.path), with DeprecationWarnings shown."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    if extra_path is not None:
        env["PYTHONPATH"] = str(extra_path)
    done = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-c", textwrap.dedent(code)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_new_names_are_the_real_modules_and_the_old_ones_the_same_objects(tmp_path):
    out = _python("""
        import json, sys, warnings
        import medagentgym.sandbox.api as new_api, medagentgym.rewards.oracle as new_oracle
        import medagentgym.env_client.trajectory as new_traj, medagentgym.medcopilot.config as new_config
        assert not [m for m in sys.modules if m.split(".")[0] in ("sandbox", "rewards", "env_client", "medcopilot")]
        import sandbox.api, rewards.oracle, env_client.trajectory, medcopilot.config
        import sandbox, rewards, env_client, medcopilot, medagentgym
        from sandbox import Limits
        from medcopilot.trainers import grpo as old_grpo          # a subpackage, first imported by the old name
        import medagentgym.medcopilot.trainers.grpo as new_grpo
        same = [sandbox.api is new_api, rewards.oracle is new_oracle, env_client.trajectory is new_traj,
                medcopilot.config is new_config, sandbox is medagentgym.sandbox, Limits is new_api.Limits,
                old_grpo is new_grpo, new_api.__spec__.name == "medagentgym.sandbox.api",
                new_api.__name__ == "medagentgym.sandbox.api", sandbox.__name__ == "medagentgym.sandbox"]
        twins = sorted(m for m in sys.modules if m.split(".")[0] in ("sandbox", "rewards", "env_client", "medcopilot")
                       and sys.modules[m] is not sys.modules.get("medagentgym." + m))
        print(json.dumps({"same": same, "twins": twins}))
    """, tmp_path)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(result["same"]), result
    assert result["twins"] == []
    warned = [line for line in out.stderr.splitlines() if "DeprecationWarning" in line]
    assert len(warned) == 4, out.stderr  # once per old name, not per submodule
    for old in OLD:
        assert any(f"`import {old}` is deprecated" in line and f"`import medagentgym.{old}`" in line
                   for line in warned), (old, warned)
    assert all(line.startswith("<string>:") for line in warned), warned  # points at the importing line


def test_an_old_submodule_imported_while_the_package_loads_is_still_one_module(tmp_path):
    """The first import under the old name runs the package's ``__init__`` as the old name; a submodule the
    ``__init__`` imports meanwhile (by the old name too) must not become a second copy."""
    out = _python("""
        import json, sys
        import rewards.oracle                      # rewards/__init__ runs first, as `rewards`
        import medagentgym.rewards.oracle as new
        from rewards.spec import RewardSpec
        import medagentgym.rewards.spec as spec
        print(json.dumps([rewards.oracle is new, RewardSpec is spec.RewardSpec,
                          sorted(m for m in sys.modules if m.startswith("rewards")
                                 and sys.modules[m] is not sys.modules["medagentgym." + m])]))
    """, tmp_path)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, True, []]


def test_objects_pickle_across_both_names():
    from medagentgym.rewards.spec import RewardSpec
    from medagentgym.sandbox.api import ErrorKind, ExecResult, Limits

    limits = Limits(cpu_s=3.0)
    assert type(limits).__module__ == "medagentgym.sandbox.api"
    assert pickle.loads(pickle.dumps(limits)) == limits
    # a pickle written before the move names the old module; it loads to the same class
    old = pickle.dumps(limits, protocol=2).replace(b"medagentgym.sandbox.api", b"sandbox.api")
    assert b"medagentgym.sandbox.api" not in old and b"sandbox.api" in old
    loaded = pickle.loads(old)
    assert type(loaded) is Limits and loaded == limits
    import sandbox.api  # the old name, as a user's code still writes it

    result = sandbox.api.ExecResult(lang="python", source="print(1)", stdout="1\n", stderr="", exit_code=0,
                                    signal=None, timed_out=False, truncated=False, stdout_bytes=2, stderr_bytes=0,
                                    duration_s=0.1, error_kind=ErrorKind.OK)
    assert isinstance(result, ExecResult) and pickle.loads(pickle.dumps(result)) == result
    spec = RewardSpec.from_weights({"correctness": 1.0})
    assert type(pickle.loads(pickle.dumps(spec))) is RewardSpec


@pytest.mark.skipif(not (ROOT / "medagentgym" / "sandbox").is_symlink(), reason="not a clone")
def test_the_clone_keeps_the_top_level_folders_and_links_them():
    for old in OLD:
        link = ROOT / "medagentgym" / old
        assert link.is_symlink() and os.readlink(link) == f"../{old}", link
        assert (ROOT / old / "__init__.py").is_file() and not (ROOT / old).is_symlink()


def _user_folders(work: Path) -> None:
    """The issue's two attacks, in the working directory (first on ``sys.path`` for ``python -c`` and pytest): a
    ``sandbox/`` folder (here a package of the user's with an empty ``__init__.py``; an empty folder without one
    shadowed us only under setuptools' default editable finder), a user's own ``rewards`` package (with no
    ``oracle`` in it); and two more of the kind: a package that fails on import, a data folder."""
    (work / "sandbox").mkdir()
    (work / "sandbox" / "__init__.py").write_text("")
    (work / "rewards").mkdir()
    (work / "rewards" / "__init__.py").write_text("USER_REWARDS = True\n")
    (work / "env_client").mkdir()
    (work / "env_client" / "__init__.py").write_text("raise ImportError('the user\\'s env_client')\n")
    (work / "medcopilot").mkdir()
    (work / "medcopilot" / "notes.txt").write_text("a data folder\n")


def test_user_folders_named_like_the_old_packages_do_not_break_medagentgym(tmp_path):
    _user_folders(tmp_path)
    out = _python("""
        import json
        import medagentgym as mag
        from medagentgym.sandbox import Limits, make_pool
        from medagentgym.rewards.oracle import oracle_reward
        from medagentgym.env_client import Env
        from medagentgym.medcopilot import load_recipe
        import rewards                                       # the user's own package stays the user's
        fam = mag.make("toy_sql")
        print(json.dumps([Limits.__module__, oracle_reward.__module__, Env.__module__, load_recipe.__module__,
                          getattr(rewards, "USER_REWARDS", False), mag.EnvSpec.__module__, type(fam).__module__]))
    """, tmp_path)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got[:4] == ["medagentgym.sandbox.api", "medagentgym.rewards.oracle", "medagentgym.env_client.episode",
                       "medagentgym.medcopilot.config"]
    assert got[4] is True and got[5] == "medagentgym.env_client.rollout"
    assert "DeprecationWarning" not in out.stderr  # nothing of ours uses the old names


def test_before_the_move_these_folders_broke_the_old_names(tmp_path):
    """The attacks are real: the old top-level names resolve to the user's folders (what our code imported
    before issue #33), and fail the way the issue saw it."""
    _user_folders(tmp_path)
    empty = _python("from sandbox import Limits", tmp_path, check=False)
    assert empty.returncode != 0 and "cannot import name 'Limits'" in empty.stderr
    theirs = _python("import rewards.oracle", tmp_path, check=False)
    assert theirs.returncode != 0 and "No module named 'rewards.oracle'" in theirs.stderr


def test_a_user_package_under_an_old_name_is_never_taken_over(tmp_path):
    """Our alias finder answers only below an old name bound to our package: a user's ``rewards`` package, imported
    first, keeps its own submodules even after medagentgym is imported."""
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "__init__.py").write_text("")
    (tmp_path / "rewards" / "oracle.py").write_text("MINE = True\n")
    out = _python("""
        import medagentgym.rewards.oracle, rewards.oracle, sandbox.api   # ours by the new name, the user's rewards
        import medagentgym.sandbox.api
        print(rewards.oracle.MINE, rewards.oracle is not medagentgym.rewards.oracle,
              sandbox.api is medagentgym.sandbox.api)
    """, tmp_path)
    assert out.stdout.split() == ["True", "True", "True"]


def test_the_cli_and_a_jailed_episode_work_from_a_folder_of_look_alikes(tmp_path):
    """The console command from a working directory holding the issue's folders: an oracle episode in the
    bubblewrap jail (the worker boots ``medagentgym.sandbox.worker``) scores 1.0."""
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("the oracle episode runs in the bubblewrap sandbox")
    _user_folders(tmp_path)
    cli = Path(sys.executable).parent / "medagentgym"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}

    def run(*args: str) -> str:
        done = subprocess.run([str(cli), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=900, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    where = json.loads(run("info", "--json"))["packages"]
    assert set(where) >= {"medagentgym.sandbox", "medagentgym.rewards", "medagentgym.env_client"}
    assert all(str(tmp_path) not in path for path in where.values()), where
    run("build", "--families", "toy_sql", "--size", "tiny", "--out", "built", "--no-progress")
    summary = json.loads(run("rollout", "--tasks-root", "built", "--families", "toy_sql", "--policy", "oracle",
                             "--limit", "2", "--sandbox", "bwrap", "--json", "--no-progress").strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["success_rate"] == 1.0


# ------------------------------------------------------------------------------------------- the move script
def _load_move():
    import importlib.util

    spec = importlib.util.spec_from_file_location("namespace_move", ROOT / "scripts" / "dev" / "namespace_move.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tree_uses_the_new_names():
    """Code merged or written later with the old names is caught here; fix: python scripts/dev/namespace_move.py."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "dev" / "namespace_move.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, ("files still use the old import names; run `python scripts/dev/namespace_move.py`:\n"
                                  + done.stdout[-2000:])


SAMPLE = '''\
"""Uses ``sandbox.pool`` and :func:`env_client.rollout.rollout`; the sandbox. Paths: sandbox/pool.py."""
import os, json
import sandbox
import sandbox as sandbox_pkg
import sandbox.pool as pool_module
import medcopilot.trainers.grpo
from rewards.oracle import oracle_reward
from env_client import Env
from . import sibling
from medagentgym import sandbox as already
import medagentgym.sandbox.api

LAZY = {"Env": "env_client:Env", "rollout": "env_client.rollout:rollout"}
BOOT = f"import sys; sys.path.insert(0, {os.sep!r}); from sandbox.worker import main; main()"
CHECK = "import sys, rewards; print(rewards.__file__)"
PROBE = "import sys, medcopilot, env_client, sandbox as box, rewards, medagentgym.cli as c"
CONFIG = {"sandbox": "bwrap", "rewards": ["correctness"]}


def f(args, sandbox_name="sandbox"):
    import sandbox._runner
    path = importlib.import_module("env_client")
    args.sandbox.rewards = medcopilot.trainers.grpo.X  # attribute access, not our package
    return sandbox._runner, sandbox.make_pool, path
'''

EXPECTED = '''\
"""Uses ``medagentgym.sandbox.pool`` and :func:`medagentgym.env_client.rollout.rollout`; the sandbox. Paths: sandbox/pool.py."""
import os, json
from medagentgym import sandbox
from medagentgym import sandbox as sandbox_pkg
import medagentgym.sandbox.pool as pool_module
import medagentgym.medcopilot.trainers.grpo
from medagentgym.rewards.oracle import oracle_reward
from medagentgym.env_client import Env
from . import sibling
from medagentgym import sandbox as already
import medagentgym.sandbox.api

LAZY = {"Env": "medagentgym.env_client:Env", "rollout": "medagentgym.env_client.rollout:rollout"}
BOOT = f"import sys; sys.path.insert(0, {os.sep!r}); from medagentgym.sandbox.worker import main; main()"
CHECK = "import sys, medagentgym.rewards as rewards; print(rewards.__file__)"
PROBE = "import sys, medagentgym.medcopilot as medcopilot, medagentgym.env_client as env_client, medagentgym.sandbox as box, medagentgym.rewards as rewards, medagentgym.cli as c"
CONFIG = {"sandbox": "bwrap", "rewards": ["correctness"]}


def f(args, sandbox_name="sandbox"):
    import medagentgym.sandbox._runner
    path = importlib.import_module("medagentgym.env_client")
    args.sandbox.rewards = medagentgym.medcopilot.trainers.grpo.X  # attribute access, not our package
    return sandbox._runner, sandbox.make_pool, path
'''


def test_the_script_rewrites_imports_strings_and_docs_and_is_idempotent():
    move = _load_move()
    rewriter = move.Rewriter(move.package_names(ROOT))
    once = rewriter.python(SAMPLE)
    assert once == EXPECTED, "\n".join(
        f"{a!r}\n{b!r}" for a, b in zip(once.splitlines(), EXPECTED.splitlines()) if a != b)
    assert rewriter.python(once) == once
    compile(once, "sample.py", "exec")
    doc = ("Run `python -m sandbox.worker` or `from rewards import RewardSpec`; `import sandbox` binds it.\n"
           "The sandbox/ folder, rewards.jsonl and `medagentgym.sandbox.pool` stay. `sandbox.make_pool(workers=2)`.\n")
    moved = rewriter.text(doc)
    assert moved == ("Run `python -m medagentgym.sandbox.worker` or `from medagentgym.rewards import RewardSpec`; "
                     "`from medagentgym import sandbox` binds it.\n"
                     "The sandbox/ folder, rewards.jsonl and `medagentgym.sandbox.pool` stay. "
                     "`medagentgym.sandbox.make_pool(workers=2)`.\n")
    assert rewriter.text(moved) == moved


def test_the_script_refuses_a_list_it_cannot_rewrite_safely():
    move = _load_move()
    rewriter = move.Rewriter(move.package_names(ROOT))
    with pytest.raises(SystemExit, match="split the statement"):
        rewriter.python("import os, sandbox\n")


def test_the_script_leaves_import_statements_after_comments_alone():
    """A file binding ``sandbox`` only by ``import sandbox.x`` has its uses moved, not its other imports twice."""
    move = _load_move()
    rewriter = move.Rewriter(move.package_names(ROOT))
    source = ("def f():\n    # the runner\n    from sandbox._runner import REQ_FD\n    import sandbox._runner\n"
              "    return sandbox._runner.REQ_FD, REQ_FD\n")
    assert rewriter.python(source) == (
        "def f():\n    # the runner\n    from medagentgym.sandbox._runner import REQ_FD\n"
        "    import medagentgym.sandbox._runner\n    return medagentgym.sandbox._runner.REQ_FD, REQ_FD\n")
