"""Evaluate a policy on task families: success, Pass@K, Best@K, error taxonomy, actions, cost; report and plots.

    medagentgym eval --policy oracle --families all --size tiny --limit 5 --out runs/eval/oracle --json
    medagentgym eval --policy openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1 --suite ood -k 4
    medagentgym eval --policy hf:runs/sft/final --suite id --scores runs/verifier/scores.jsonl -k 8
    medagentgym eval --policy hf:runs/sft/final --families toy_sql -k 8 --verifier runs/verifier_tiny

Rolls the policy out (``k`` samples per task) over the chosen families' ``--split`` instances (``--limit`` per
family), then writes into ``--out``: ``trajectories.jsonl`` (rerunning the same command resumes),
``report.json``, ``report.md`` and the plots ``success_by_family.png``, ``pass_at_k.png`` and ``errors.png``.
Families not yet built under ``--tasks-root`` are built there first at ``--size`` (by default at
``medagentgym build``'s default size, tiny); a family
already built at another size than ``--size``, or by another version of its code, is refused with one line (the
report records the size really evaluated).

Honest numbers: a rerun reuses stored episodes only when everything that changes an episode is the same (policy
spec, weights of a local model, sampling flags, turn cap, format, seed, family versions and data), and a rerun
that asks another question (``--families``, ``--split``, ``--limit``, ``-k``, ``--seed``) never mixes with nor
replaces the stored report; either stops with one line naming the difference and leaves ``--out`` as it was
(use another ``--out``). ``--overwrite`` replaces ``--out`` instead, as ``medagentgym rollout --overwrite`` does:
the new run writes a hidden folder beside it, ``.<name>.overwrite``, which takes the place of ``--out`` once the
report is written (an interrupted ``--overwrite`` run resumes from it when rerun).

Episodes that fail to run (an endpoint error, a dead sandbox) count as failures in every rate, are listed apart
(``infra_failures``), make the exit status 1, and are retried by a rerun; the endpoint's own error is printed once
with a hint. Every rate has a 95 % interval that never collapses (Wilson; over tasks when ``-k`` > 1) and a standard
error clustered over tasks, and the report gives the macro average over families beside the micro one; base rates
cover the whole split; the report records its provenance (policy and sampling, caps, commit, date, task-set hash) so
that ``medagentgym leaderboard`` ranks only runs over the same tasks side by side. A family built with planted
patients (``public_questions``, a schema/coverage smoke build) makes the report, its markdown and the JSON line
carry a ``warnings`` entry.

Suites (``tasks.SUITES``, disjoint, as in the MedAgentGym paper): ``--suite id`` is the eight in-distribution
families (mimic_iii, eicu, treqs, medcalcbench, medagentbench, biocoder, biodsbench, ehrshot), ``--suite ood``
the four held out of every training recipe (ehr_seqsql, ehrcon, mimic_extract, npowerai); both on the test split.
``--scores`` is a JSONL file of ``{"task_id", "sample_idx", "score"}`` from a scorer (the learned verifier)
for Best@K; ``--verifier FOLDER_OR_URL`` scores the episodes with a trained verifier (a folder of
``train.py recipe=verifier_*``, or the URL of ``medagentgym serve-verifier``) and writes ``scores.jsonl`` beside
the trajectories; without either, Best@K is N/A. ``--json`` ends stdout with one JSON object: ``policy``,
``episodes``, ``success_rate``, ``ci95``, ``se``, ``macro_success_rate``, ``per_family`` (``family -> success rate``), ``pass_at_k``,
``best_at_k``, ``errors``, ``infra_failures``, ``prompt_tokens``, ``completion_tokens``, ``out``.

Reward floors: beside each family's success the report gives the best score one constant answer earns over
the WHOLE split (not the ``--limit`` subset) under the family's own grader, and its bound (10 %; 50 % for
yes/no families): ``medagentgym.env_client.evaluation.constant_floor``; the JSON line has it as ``floor``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from medagentgym.cli.rollout import START_OVER, overwrite_store, overwrite_twin, refuse_another_question, replace_store
from medagentgym.env_client.argtypes import nonneg_int, positive_int
from medagentgym import tasks
from medagentgym.env_client.errors import EnvClientError
from medagentgym.env_client.evaluation import (
    ID_FAMILIES,
    OOD_FAMILIES,
    EvalError,
    code_version,
    constant_floor,
    evaluate,
    label_base_rate,
    library_versions,
    task_set_hash,
    write_report,
)
from medagentgym.env_client.policies import add_policy_arguments, failures_in_a_row, make_policy, policy_kwargs, probe
from medagentgym.env_client.rollout import EnvSpec, describe_run, family_names, rollout, run_key
from medagentgym.env_client.trajectory import TrajectoryStore
from medagentgym.sandbox.errors import SandboxError
from medagentgym.tasks.base import TaskError


def choose_families(families: str, suite: str | None, root: Path) -> list[str]:
    """Family names from ``--suite`` (wins: ``tasks.SUITES``) or ``--families`` (``all`` = every registered family)."""
    if suite in ("id", "ood"):
        return list(ID_FAMILIES if suite == "id" else OOD_FAMILIES)
    if families.strip() == "all":
        return list(tasks.names(root))
    chosen = [f.strip() for f in families.split(",") if f.strip()]
    if not chosen:
        raise TaskError("--families is empty; pass names separated by commas, or 'all'")
    for name in chosen:
        tasks.registry.spec(name, root=root)  # an unknown name raises UnknownTask with "did you mean"
    return chosen


def ensure_built(names: list[str], root: Path, size: str | None, seed: int) -> dict[str, str]:
    """Build each family missing under ``root`` (at ``size``; ``builds.DEFAULT_SIZE`` when None), in parallel; check the others.

    Returns:
        ``family -> the size of its build`` (``"import"`` for imported ones): what the report records.

    Raises:
        BuildMismatch: A family built at another size than ``size`` (when given), or by another version of the
            family's code: one line with the command that rebuilds it.
    """
    from medagentgym.tasks.builds import DEFAULT_SIZE, build_facts, check_build

    missing = [name for name in names if check_build(name, root, size=size, required=False) is None]
    if missing:
        print(f"building {', '.join(missing)} ({size or DEFAULT_SIZE}) under {root}", file=sys.stderr)
        tasks.registry.build_families(missing, root, size=size or DEFAULT_SIZE, seed=seed, jobs=os.cpu_count() or 1)
    return {name: (build_facts(name, root) or {}).get("size") or "import" for name in names}


#: What a report answers besides the policy: (its meta key, the flag that sets it).
QUESTION = (("families", "--families"), ("split", "--split"), ("limit", "--limit"), ("k", "-k"), ("seed", "--seed"))


#: The episodes' store in ``--out``.
STORE = "trajectories.jsonl"


def default_out(args: argparse.Namespace) -> Path:
    """``--out``, or ``runs/eval/<policy>`` without it."""
    return args.out or Path("runs/eval") / re.sub(r"[^A-Za-z0-9_.-]+", "_", args.policy)


def question_change(out: Path, question: dict[str, Any]) -> str | None:
    """How ``question`` differs from the one the report in ``out`` answered, in words; None when it does not (or
    there is no report yet). A rerun that asks another question must not mix its episodes with the stored ones
    nor replace a report of more episodes.

    Example:
        >>> question_change(Path("/nonexistent"), {"families": ["toy_sql"]}) is None
        True
    """
    try:
        meta = json.loads((out / "report.json").read_text(encoding="utf-8"))["meta"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return question_difference(meta, question)


def question_difference(meta: dict[str, Any], question: dict[str, Any]) -> str | None:
    """How ``question`` differs from the one recorded in ``meta`` (a report's meta, or the settings a rollout
    store records beside it), flag by flag in words (``--limit: 10 -> 2``); keys ``meta`` lacks are not compared.

    Example:
        >>> question_difference({"limit": 10, "k": 1}, {"limit": 2, "k": 1})
        '--limit: 10 -> 2'
    """
    words = []
    for key, flag in QUESTION:
        if key not in meta:
            continue
        old, new = meta[key], question[key]
        if key == "families":
            if sorted(old or ()) != sorted(new):
                words.append(f"{flag}: {family_names(old or ())} -> {family_names(new)}")
        elif old != new:
            words.append(f"{flag}: {'none' if old is None else old} -> {'none' if new is None else new}")
    return "; ".join(words) or None


def read_scores(path: Path) -> dict[tuple[str, int], float]:
    """``(task_id, sample_idx) -> score`` from a JSONL file of ``{"task_id", "sample_idx", "score"}``."""
    scores: dict[tuple[str, int], float] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalError(f"--scores {path}: cannot read it ({type(exc).__name__}: {exc})") from exc
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            scores[(str(row["task_id"]), int(row["sample_idx"]))] = float(row["score"])
        except (ValueError, KeyError, TypeError) as exc:
            raise EvalError(f"{path}:{lineno}: need {{'task_id', 'sample_idx', 'score'}} per line ({exc})") from exc
    return scores


def verifier_scores(spec: str, trajectories: list, path: Path) -> dict[tuple[str, int], float]:
    """Score ``trajectories`` with the verifier ``spec`` (folder or URL); write them to ``path`` as JSONL.

    Raises:
        EvalError: The verifier could not be loaded or left some episode unscored (one line, how to fix it).
    """
    from medagentgym.medcopilot.verifier import make_scorer, score_rows, write_score_rows

    try:
        rows = score_rows(make_scorer(spec), trajectories)
    except (OSError, ValueError, RuntimeError) as exc:
        raise EvalError(f"verifier {spec}: {' '.join(str(exc).split())} (finished episodes are kept: rerun "
                        f"with the same --out to score them without rolling them out again)") from exc
    write_score_rows(rows, path)
    return {(row["task_id"], row["sample_idx"]): row["score"] for row in rows}


def _report_failures(failures: list[dict[str, Any]]) -> None:
    """Print each distinct error once (the endpoint's own message and hint), with how many episodes it hit."""
    counts = Counter(f["error"].split(": ", 1)[-1] for f in failures)
    for message, n in counts.most_common(3):
        print(f"{n} episode(s) failed to run: {message}", file=sys.stderr)
    if len(counts) > 3:
        print(f"... and {len(counts) - 3} other error(s); rerun with the same --out to retry them", file=sys.stderr)


def run(args: argparse.Namespace) -> dict:
    """Roll out, evaluate and write the report; returns the summary printed as the JSON line."""
    started = time.monotonic()
    split = "test" if args.suite else args.split
    scores = read_scores(args.scores) if args.scores else None  # a bad file fails now, not after every episode ran
    names = choose_families(args.families, args.suite, args.tasks_root)
    out = default_out(args)
    question = {"families": names, "split": split, "limit": args.limit, "k": args.k, "seed": args.seed}
    changed = None if args.overwrite else question_change(out, question)
    if changed:
        raise EvalError(f"{out} holds the report of another question ({changed}); pass another --out, or "
                        f"{START_OVER}")
    if not args.overwrite:  # an interrupted run's episodes, before any report
        refuse_another_question(out / STORE, question)
    sizes = ensure_built(names, args.tasks_root, args.size, args.seed)
    instances, base_rates, floors = [], {}, {}
    for name in names:
        family = tasks.make(name, root=args.tasks_root)
        whole = family.instances(split)
        if not whole:
            raise TaskError(f"family {name!r} has no {split!r} instances under {args.tasks_root}; rebuild it")
        instances.extend(whole[:args.limit])
        base_rates[name] = label_base_rate(whole)  # both over the whole split, not the --limit subset
        floors[name] = constant_floor(family, whole)
    config = {"format": args.format, **({"max_turns": args.max_turns} if args.max_turns else {})}
    spec = EnvSpec(tasks_root=str(args.tasks_root), backend=args.sandbox, allow_unisolated=args.allow_unisolated,
                   config=config)
    kwargs = policy_kwargs(args)
    policy = make_policy(args.policy, families=spec.families(), fmt=args.format, **kwargs)
    probe(policy)  # an endpoint that is down or mute fails here, once, before any episode
    run_info = describe_run(args.policy, policy, kwargs, config=config, fmt=args.format, split=split,
                            tasks_root=args.tasks_root, families=names)
    run_info.update(limit=args.limit, k=args.k)  # the question, as `medagentgym rollout` records it
    folder = overwrite_store(out, {**run_info, "seed": args.seed}, episodes=STORE) if args.overwrite else out
    store = folder / STORE
    families, env_config = run_info["families"], run_info["env"]
    warnings = [f"{n}: {json.loads((args.tasks_root / n / 'manifest.json').read_text())['planted']['warning']}"
                for n, f in sorted(families.items()) if f.get("planted")]
    result = rollout(instances, policy, spec, k=args.k, seed=args.seed, concurrency=args.concurrency,
                     store=store, policy_name=args.policy, on_error="skip", progress=not args.no_progress,
                     run_info=run_info, max_consecutive_failures=failures_in_a_row(args), start_over=START_OVER)
    if args.verifier:
        scores = verifier_scores(args.verifier, result.trajectories, folder / "scores.jsonl")
    built = sorted(set(sizes.values()))
    meta = {"policy": run_info["policy"], "split": split, "suite": args.suite or "custom",
            "size": built[0] if len(built) == 1 else sizes,
            "seed": args.seed, "k": args.k, "limit": args.limit, "format": args.format,
            "env": {k: v for k, v in env_config.items() if k in ("max_turns", "max_total_tokens", "obs_max_chars")},
            "families": families, "commit": code_version(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "task_set": task_set_hash(instances, {n: f["version"] for n, f in families.items()}),
            "sandbox": args.sandbox, "versions": library_versions(),
            "wall_s": round(time.monotonic() - started, 1),
            **({"served_model": sorted(policy.served_models)} if getattr(policy, "served_models", None) else {}),
            "run_key": run_key({**run_info, "seed": args.seed}), **({"warnings": warnings} if warnings else {})}
    report = evaluate(result.trajectories, policy=args.policy, scores=scores, base_rates=base_rates, floors=floors,
                      meta=meta, failures=result.summary.failures)
    write_report(report, folder, plots=not args.no_plots)
    if folder != out:
        replace_store(folder, out)
    if result.summary.failures:
        _report_failures(result.summary.failures)
    return {"policy": report.policy, "episodes": report.episodes, "success_rate": report.success_rate,
            "ci95": report.ci95, "se": report.se, "macro_success_rate": report.macro_success_rate, "per_family": {f: row["success_rate"] for f, row in report.per_family.items()},
            "base_rate": base_rates, "floor": floors, "pass_at_k": report.pass_at_k, "best_at_k": report.best_at_k,
            "errors": report.errors, "failed_episodes": result.summary.failed,
            "infra_failures": report.infra_failures, "prompt_tokens": report.prompt_tokens,
            "completion_tokens": report.total_tokens, "out": str(out), "_store": str(out / STORE),
            **({"warnings": warnings} if warnings else {})}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_policy_arguments(p)
    p.add_argument("--families", default="all", help="comma-separated family names, or 'all' (default)")
    p.add_argument("--suite", choices=["id", "ood"], default=None,
                   help="named suite (tasks.SUITES): id = the paper's 8 in-distribution families, ood = the 4 held "
                        "out of training; both on the test split")
    p.add_argument("--split", choices=["train", "test"], default="test", help="split to evaluate (default test)")
    p.add_argument("--size", choices=["tiny", "default"], default=None,
                   help="build size to evaluate: missing families are built at it, and a family already built at "
                        "another size is refused (default: the size each family is built at; missing ones at "
                        "medagentgym build's default, tiny); the report records the sizes evaluated")
    p.add_argument("--tasks-root", type=Path, default=Path("artifacts/tasks"),
                   help="built tasks root; missing families are built into it (default artifacts/tasks)")
    p.add_argument("--limit", type=positive_int, default=None, help="at most this many instances per family")
    p.add_argument("-k", type=positive_int, default=1, help="samples per task; Pass@K for K = 1..k (default 1)")
    scoring = p.add_mutually_exclusive_group()
    scoring.add_argument("--scores", type=Path, default=None, help="JSONL of verifier scores for Best@K (see above)")
    scoring.add_argument("--verifier", default=None,
                         help="trained verifier folder or service URL: score the episodes for Best@K")
    p.add_argument("--out", type=Path, default=None, help="report directory (default runs/eval/<policy>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out (when the run ends) instead of resuming it; needed to change its question")
    p.add_argument("--concurrency", type=positive_int, default=4, help="episodes in flight; default 4")
    p.add_argument("--sandbox", choices=["bwrap", "docker", "local"], default="bwrap",
                   help="sandbox backend for code; default bwrap ('local' is unisolated)")
    p.add_argument("--allow-unisolated", action="store_true", help="permit --sandbox local")
    p.add_argument("--max-turns", type=positive_int, default=None, help="episode turn cap (EnvConfig.max_turns)")
    p.add_argument("--format", choices=["tool_call", "json"], default="tool_call",
                   help="action wire format of prompts and scripted policies; default tool_call")
    p.add_argument("--seed", type=nonneg_int, default=0, help="build seed and base rollout seed; default 0")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--json", action="store_true", help="end stdout with the summary as one JSON line")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = p.parse_args(argv)
    if args.k < 1 or (args.limit is not None and args.limit < 1):
        print(f"error: -k ({args.k}) and --limit ({args.limit}) must be >= 1", file=sys.stderr)
        return 2
    try:
        summary = run(args)
    except KeyboardInterrupt:
        out = default_out(args)
        store = (overwrite_twin(out) if args.overwrite else out) / STORE
        saved = len(TrajectoryStore(store)) if store.exists() else 0
        apart = f" (kept apart from {out} until it ends)" if args.overwrite else ""
        print(f"\ninterrupted: {saved} episode(s) saved in {store}; rerun the same command to resume{apart}",
              file=sys.stderr)
        return 130
    except (EnvClientError, TaskError, SandboxError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in summary.get("warnings", ()):
        print(f"warning: {line}", file=sys.stderr)
    lo, hi = summary["ci95"]
    infra = f"; {summary['infra_failures']} failed to run (counted as failures)" if summary["infra_failures"] else ""
    print(f"{summary['policy']}: success {summary['success_rate']:.1%} (95 % CI {lo:.1%}-{hi:.1%}) over "
          f"{summary['episodes']} episodes{infra}; macro over families {summary['macro_success_rate']:.1%}; "
          f"pass@k {summary['pass_at_k']}; report in {summary['out']}")
    for fam, rate in summary["per_family"].items():
        floor = summary["floor"][fam]
        flag = " EXCEEDS" if floor["exceeds"] else ""
        print(f"  {fam:<16} {rate:6.1%}  (label base rate {summary['base_rate'].get(fam, 0):.1%}; constant floor "
              f"{floor['floor']:.1%} with {str(floor['constant'])[:20]!r}, bound {floor['bound']:.0%}{flag})")
    summary.pop("_store")
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    return 0 if summary["failed_episodes"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
