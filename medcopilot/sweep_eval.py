"""Evaluate every stage of a chain (and its base model) and write the paper's results table.

A chain sweep file may carry an ``evaluate`` section (``recipes/sweeps/paper_qwen7b.yaml``)::

    evaluate:
      policy: "hf:{model}"        # how to sample a model; {model} = the base model, or a stage's merged export
      suites: [id, ood]           # medagentgym eval --suite per row (the per-family test sets)
      args: [--concurrency, "16"] # more medagentgym eval flags for every row (--tasks-root, --limit, -k, ...)
      base: null                  # the "base" row's model; null = the chain's root model; false = no base row
      rows: null                  # stages in the table (null = all, in file order)
      title: "Qwen2.5-7B-Instruct on MedAgentGym"

After training, each stage's output is exported as a standalone merged model (``<stage>/merged``, LoRA chains
merged: ``medagentgym export``; a LoRA stage exports float32 by default, which keeps the small updates a bf16
export rounds away on a bf16-stored base, :func:`medagentgym.medcopilot.export.export_dtype`), each row is evaluated per suite into ``<output_root>/eval/<row>/<suite>/``
(``medagentgym eval``; a report newer than its model is reused, so a rerun resumes), and
``<output_root>/paper_table.{md,json,png}`` is written (:mod:`medagentgym.env_client.paper_table`). Exports and evaluations
run as separate processes, like the training stages, so each frees its memory (and its GPU) when it ends.

Example:
    >>> spec = EvalSpec.from_dict({"suites": ["id"], "args": ["--limit", "2"]})
    >>> spec.policy
    'hf:{model}'
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from medagentgym.medcopilot.config import RecipeError

__all__ = ["EvalSpec", "ScriptLaunch", "evaluate_chain", "subprocess_script"]

#: ``launch(module_name, argv) -> exit status``: runs the command of ``medagentgym.cli.<module_name>`` with argv.
ScriptLaunch = Callable[[str, list[str]], int]


@dataclass
class EvalSpec:
    """The ``evaluate`` section of a chain sweep (see the module docstring)."""

    policy: str = "hf:{model}"
    suites: list[str] = field(default_factory=lambda: ["id", "ood"])
    args: list[str] = field(default_factory=list)
    base: str | bool | None = None
    rows: list[str] | None = None
    title: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalSpec:
        """Check and build the section.

        Raises:
            RecipeError: An unknown key, a policy without ``{model}``, or an unknown suite (one line).
        """
        from medagentgym import tasks

        names = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise RecipeError(f"evaluate: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(names)}")
        spec = cls(**data)
        if "{model}" not in spec.policy:
            raise RecipeError(f"evaluate.policy={spec.policy!r} must contain {{model}}, e.g. hf:{{model}}")
        bad = [s for s in spec.suites if s not in tasks.SUITES]
        if bad or not spec.suites:
            raise RecipeError(f"evaluate.suites={spec.suites!r}: choose from {', '.join(tasks.SUITES)}")
        spec.args = [str(a) for a in spec.args]
        return spec

    def row_models(self, runs: Sequence[Any]) -> list[tuple[str, str, Any]]:
        """``(row name, model to evaluate, run or None)`` for the table's rows, base first.

        Raises:
            RecipeError: ``rows`` names a stage that is not in the chain.
        """
        out: list[tuple[str, str, Any]] = []
        if self.base is not False and runs:
            base = self.base if isinstance(self.base, str) else runs[0].base_model
            out.append(("base", str(base), None))
        wanted = self.rows if self.rows is not None else [r.name for r in runs]
        by_name = {r.name: r for r in runs}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise RecipeError(f"evaluate.rows names {missing}, not stages of the chain ({', '.join(by_name)})")
        out.extend((n, str(by_name[n].output_dir / "merged"), by_name[n]) for n in wanted)
        return out

    def check_builds(self) -> None:
        """Refuse, before anything trains, builds the evaluations would refuse: a family of the suites built at
        another size than the ``--size`` in ``args`` (e.g. a tiny build under the paper's ``--size default``).

        Raises:
            RecipeError: One line naming the builds and the command that rebuilds them.
        """
        from medagentgym import tasks
        from medagentgym.tasks.builds import SIZES, build_facts
        from medagentgym.medcopilot.inputs import size_refusal

        size = _flag(self.args, "--size")
        if size is None:
            return
        root = Path(_flag(self.args, "--tasks-root") or "artifacts/tasks")
        wrong = {}
        for suite in self.suites:
            for name in tasks.SUITES[suite]:
                facts = build_facts(name, root)
                if facts is not None and facts["size"] in SIZES and facts["size"] != size:
                    wrong[name] = facts["size"]
        if wrong:
            raise RecipeError(f"evaluate (--size {size}): {size_refusal(root, size, wrong, option='--size ')}")

    def plan(self, runs: Sequence[Any], root: Path) -> list[str]:
        """What :func:`evaluate_chain` will run, one line per row and suite (for ``--dry-run``)."""
        lines = []
        for row, model, _ in self.row_models(runs):
            for suite in self.suites:
                lines.append(f"eval {row}/{suite}: medagentgym eval {shlex.join(self.argv(model, suite, root, row))}")
        lines.append(f"table: {root / 'paper_table.md'} (+ .json, .png)")
        return lines

    def argv(self, model: str, suite: str, root: Path, row: str) -> list[str]:
        """The ``medagentgym eval`` arguments of one row and suite."""
        return ["--policy", self.policy.replace("{model}", model), "--suite", suite,
                "--out", str(root / "eval" / row / suite), "--no-progress", *self.args]


def _flag(args: list[str], name: str) -> str | None:
    """The value of ``name`` in an argument list (``--size default`` or ``--size=default``); None when absent."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.partition("=")[2]
    return None


def subprocess_script(name: str, argv: list[str]) -> int:
    """A :data:`ScriptLaunch` running ``medagentgym <command>`` (the command of ``medagentgym.cli.<name>``) with
    this interpreter in a fresh process."""
    from medagentgym.cli import COMMANDS

    command = next(cmd for cmd, (module, _) in COMMANDS.items() if module == name)
    return subprocess.call([sys.executable, "-m", "medagentgym", command, *argv])


def _fresh(target: Path, source: Path) -> bool:
    """``target`` exists and was written after ``source`` (a stage's run summary or merged model)."""
    return target.exists() and (not source.exists() or target.stat().st_mtime >= source.stat().st_mtime)


def evaluate_chain(spec: EvalSpec, runs: Sequence[Any], root: Path, *, launch_eval: ScriptLaunch | None = None) -> int:
    """Export, evaluate and tabulate every row of ``spec`` (after the chain's stages trained).

    Args:
        spec: The evaluation section.
        runs: The chain's stages (``medagentgym.medcopilot.sweep.Run``), all finished.
        root: The sweep's output root.
        launch_eval: Runs ``export_hf`` and ``evaluate`` (default: :func:`subprocess_script`).

    Returns:
        0, or the exit status of the first export or evaluation that failed.
    """
    from medagentgym.env_client.paper_table import paper_table, write_paper_table
    from medagentgym.tasks._files import load_json

    launch = launch_eval or subprocess_script
    reports: dict[str, list[dict[str, Any]]] = {}
    for row, model, run in spec.row_models(runs):
        if run is not None and not _fresh(Path(model) / "config.json", run.output_dir / "run_summary.json"):
            print(f"[sweep] export {row}: {run.output_dir} -> {model}", flush=True)
            status = launch("export_hf", [str(run.output_dir), "--out", model])
            if status != 0:
                print(f"sweep.py: error: exporting stage {row!r} exited with status {status}", file=sys.stderr)
                return status
        reports[row] = []
        for suite in spec.suites:
            out = root / "eval" / row / suite
            source = Path(model) / "config.json"
            if not _fresh(out / "report.json", source):
                print(f"[sweep] eval {row}/{suite}", flush=True)
                status = launch("evaluate", spec.argv(model, suite, root, row))
                if status not in (0, 1) or not (out / "report.json").is_file():
                    print(f"sweep.py: error: evaluating {row!r} on --suite {suite} exited with status {status}; "
                          f"see {out}; rerun to resume", file=sys.stderr)
                    return status or 1
                if status == 1:  # medagentgym eval's "some episodes could not run": counted as failures in the report
                    print(f"[sweep] warning: {row}/{suite} had episodes that could not run (counted as failures, "
                          f"listed in {out / 'report.md'}); rerun to retry them", flush=True)
            reports[row].append(load_json(out / "report.json"))
    table = paper_table(reports, title=spec.title)
    paths = write_paper_table(table, root)
    print(f"[sweep] paper table: {paths['md']} (+ {paths['png'].name})", flush=True)
    print(paths["md"].read_text(encoding="utf-8"), flush=True)
    return 0
