"""Measure the system prompt + tool block tokens an episode opens with, per family and format, before and after.

    python scripts/prompt_tokens.py [--tasks ROOT] [--before-rev REV] [--tokenizer DIR] [--json]

For every family (those registered, plus any declared in ``--tasks``), renders the episode's opening the way the
trainers do: ``medagentgym.env_client.tokens.render_prompt`` of ``[system]`` with the episode's ``tools`` (the question is
excluded: it is the task, not overhead), in both formats. "after" uses this checkout's ``medagentgym.env_client.prompts``
(``system_prompt`` and ``episode_tools``, the functions ``Env.reset`` calls); "before" loads
``env_client/prompts.py`` and ``env_client/actions.py`` from git revision ``--before-rev`` (default: the last
commit with the old prompt, which listed every parameter in the text and passed the tool block in both formats).

The opening depends only on the family's permitted actions and the format, so no family needs to be built: the
tokenizer is the repo's tiny Qwen2.5-format tokenizer (``medagentgym.medcopilot.tiny``: Qwen2's pre-tokenizer and TRL's
Qwen2.5 chat template, a small trained vocabulary, so counts run higher than the real Qwen2.5 vocabulary's; the
ratios are what to compare), or a local Qwen2.5 tokenizer folder with ``--tokenizer``. Prints one row per family
and format (tokens and characters, before / after / ratio) and the totals; ``--json`` ends stdout with one JSON
object. Needs git and the repository's history for "before".
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: The last commit with the old prompt (this branch's base on main; issue #15, deliverable 8).
BEFORE_REV = "c7a1e2cd37fcc0a047ece49aa70c10d65115bfc8"
FORMATS = ("tool_call", "json")


def _git_show(rev: str, path: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True, capture_output=True,
                              text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        err = getattr(exc, "stderr", "") or exc
        raise SystemExit(f"error: cannot read {path} at {rev} ({str(err).strip()[:200]}); run in a git clone with "
                         "its history, or pass --before-rev") from None


def _module(name: str, source: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    sys.modules[name] = mod  # pydantic resolves the models' annotations through sys.modules
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)  # noqa: S102 - this repository's own old source
    return mod


def before_renderer(rev: str) -> Any:
    """``(permitted, fmt) -> (system_text, tools)`` of the old prompt module at ``rev``, loaded without importing it."""
    actions = _module("_before_actions", _git_show(rev, "env_client/actions.py"))
    # the old source imports its actions module by the name of its day (before the medagentgym namespace too)
    prompts_src = re.sub(r"from (?:medagentgym[.])?env_client[.]actions import", "from _before_actions import",
                         _git_show(rev, "env_client/prompts.py"))
    prompts = _module("_before_prompts", prompts_src)

    def render(permitted: frozenset[str], fmt: str) -> tuple[str, list[dict]]:
        # The old Env.reset passed every permitted action's schema to the template in both formats.
        return prompts.system_prompt(permitted, fmt=fmt), actions.tool_schemas(permitted)

    return render


def after_renderer(permitted: frozenset[str], fmt: str) -> tuple[str, list[dict]]:
    """This checkout's opening, through the functions ``Env.reset`` calls."""
    from medagentgym.env_client.prompts import episode_tools, system_prompt

    return system_prompt(permitted, fmt=fmt), episode_tools(permitted, fmt)


def family_actions(root: Path) -> dict[str, frozenset[str]]:
    """Each family's permitted actions, as ``Env.reset`` intersects them with the known actions."""
    from medagentgym import tasks
    from medagentgym.env_client.actions import ACTION_MODELS

    return {name: frozenset(tasks.make(name, root=root).actions) & frozenset(ACTION_MODELS)
            for name in tasks.names(root)}


def measure(tokenizer: Any, renderers: dict[str, Any], actions: dict[str, frozenset[str]]) -> list[dict[str, Any]]:
    """One row per family and format: ``{family, format, <side>_tokens, <side>_chars, ratio}``."""
    from medagentgym.env_client.tokens import render_prompt

    rows = []
    for family, permitted in sorted(actions.items()):
        for fmt in FORMATS:
            row: dict[str, Any] = {"family": family, "format": fmt}
            for side, render in renderers.items():
                text, tools = render(permitted, fmt)
                messages = [{"role": "system", "content": text}]
                row[f"{side}_tokens"] = len(render_prompt(tokenizer, messages, tools))
                row[f"{side}_chars"] = len(tokenizer.apply_chat_template(messages, tools=tools or None,
                                                                         add_generation_prompt=True, tokenize=False))
            row["ratio"] = round(row["after_tokens"] / row["before_tokens"], 3)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=Path, default=None, help="a tasks root (adds the families declared there)")
    p.add_argument("--before-rev", default=BEFORE_REV, help=f"git revision of the old prompt; default {BEFORE_REV[:10]}")
    p.add_argument("--tokenizer", default=None, help="a local Qwen2.5 tokenizer folder; default the tiny one")
    p.add_argument("--json", action="store_true", help="end stdout with the results as one JSON object")
    args = p.parse_args(argv)

    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        from medagentgym.medcopilot.tiny import build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer(seed=0)
    renderers = {"before": before_renderer(args.before_rev), "after": after_renderer}
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(tokenizer, renderers, family_actions(args.tasks or Path(tmp)))

    print(f"{'family':<15} {'format':<9} {'before tok':>10} {'after tok':>9} {'ratio':>6} "
          f"{'before ch':>9} {'after ch':>8}")
    for r in rows:
        print(f"{r['family']:<15} {r['format']:<9} {r['before_tokens']:>10} {r['after_tokens']:>9} {r['ratio']:>6.3f} "
              f"{r['before_chars']:>9} {r['after_chars']:>8}")
    totals = {}
    for fmt in FORMATS:
        before = sum(r["before_tokens"] for r in rows if r["format"] == fmt)
        after = sum(r["after_tokens"] for r in rows if r["format"] == fmt)
        worst = max(r["ratio"] for r in rows if r["format"] == fmt)
        totals[fmt] = {"before_tokens": before, "after_tokens": after, "ratio": round(after / before, 3),
                       "worst_family_ratio": worst}
        print(f"total {fmt}: {before} -> {after} tokens, ratio {after / before:.3f} (worst family {worst:.3f})")
    if args.json:
        print(json.dumps({"tokenizer": args.tokenizer or "medagentgym.medcopilot.tiny", "before_rev": args.before_rev,
                          "rows": rows, "totals": totals}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
