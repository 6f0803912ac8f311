"""Small pieces the SFT and DPO trainers share: where their trajectories come from, and how a run ends."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from medagentgym.medcopilot.config import RecipeConfig, RecipeError
from medagentgym.medcopilot.data import Episode, load_episodes
from medagentgym.tasks.base import write_bytes_atomic


def episodes_for(cfg: RecipeConfig) -> list[Episode]:
    """Episodes of ``cfg.tasks.families`` from the trajectory store ``cfg.rollout.store`` (generated if missing).

    Raises:
        RecipeError: If ``rollout.store`` is unset, or the store cannot be generated.
    """
    if not cfg.rollout.store:
        raise RecipeError(f"rollout.store is not set: {cfg.method.upper()} trains on a trajectory store; "
                          f"set rollout.store=<path to a rollout JSONL>")
    from accelerate import PartialState

    with PartialState().main_process_first():  # rank 0 rolls the store out once; the other ranks then read it
        path = ensure_store(cfg)
    return load_episodes(path, families=cfg.tasks.families)


def ensure_store(cfg: RecipeConfig) -> Path:
    """Return ``rollout.store``, first writing it by rolling out ``rollout.policy`` when it does not exist.

    ``rollout.policy`` may join several policy specs with ``+`` (e.g. ``oracle+hf:artifacts/tiny-qwen2`` gives DPO
    both successes and failures). Each policy runs ``rollout.k`` episodes per instance of ``tasks.families``
    (``tasks.split``, at most ``tasks.limit`` each; families not built yet are built at ``tasks.size``) into its
    own resumable part under ``<store>.parts/``; the parts are then joined into the store atomically, so a store
    that exists is always complete.
    """
    path = Path(cfg.rollout.store)
    if path.is_file():
        return path
    from medagentgym.env_client.policies import make_policy
    from medagentgym.env_client.rollout import EnvSpec, rollout

    specs = [s.strip() for s in cfg.rollout.policy.split("+") if s.strip()]
    instances = task_instances(cfg)
    env = EnvSpec(tasks_root=cfg.tasks.root, backend=cfg.env.sandbox, allow_unisolated=cfg.env.allow_unisolated,
                  config={"max_turns": cfg.env.max_turns} if cfg.env.max_turns else None,
                  sandbox_workers=cfg.env.workers)
    parts = path.with_name(path.name + ".parts")
    for i, spec in enumerate(specs):
        policy = spec if spec.split(":")[0] == "oracle" else make_policy(
            spec, temperature=cfg.rollout.temperature, max_new_tokens=cfg.rollout.max_new_tokens)
        result = rollout(instances, policy, env, k=cfg.rollout.k, concurrency=cfg.rollout.concurrency,
                         store=parts / f"{i}.jsonl", policy_name=spec, seed=int(cfg.trainer.get("seed", 0)))
        print(f"[{cfg.method}] rollout {spec}: {len(instances)} tasks x {cfg.rollout.k}, "
              f"success rate {result.summary.success_rate:.3f}", flush=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as joined:
        for i in range(len(specs)):
            joined.write((parts / f"{i}.jsonl").read_bytes())
    os.replace(tmp, path)
    return path


def task_instances(cfg: RecipeConfig) -> list[Any]:
    """Instances of ``tasks.families`` for ``tasks.split`` (first ``tasks.limit`` of each), building missing ones."""
    from medagentgym import tasks
    from medagentgym.tasks.base import NotBuilt

    out = []
    for name in cfg.tasks.families:
        family = tasks.make(name, root=cfg.tasks.root)
        try:
            found = family.instances(cfg.tasks.split)
        except NotBuilt:
            family.build(Path(cfg.tasks.root), size=cfg.tasks.size, seed=0)
            found = family.instances(cfg.tasks.split)
        out.extend(found[: cfg.tasks.limit] if cfg.tasks.limit else found)
    return out


def finish_run(trainer: Any, cfg: RecipeConfig, train_output: Any, *, resumed_from: str | None,
               n_rows: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Save the final model, tokenizer, metrics and state into ``cfg.output.dir``; return the run summary.

    Args:
        trainer: A TRL trainer that has finished ``train()``.
        cfg: The recipe.
        train_output: What ``trainer.train()`` returned (``TrainOutput``).
        resumed_from: The checkpoint training resumed from, or None.
        n_rows: Training rows (conversations or pairs).
        extra: More summary keys (e.g. :func:`rl_summary`).

    Returns:
        ``{"method", "output_dir", "global_step", "resumed_from", "train_rows", "metrics"}`` plus ``extra``; also
        written to ``<output.dir>/run_summary.json``.
    """
    out = Path(cfg.output.dir)
    trainer.save_model(str(out))  # weights or adapter, plus the tokenizer and chat template (processing_class)
    metrics = {k: v for k, v in train_output.metrics.items() if isinstance(v, (int, float))}
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    summary = {
        "method": cfg.method,
        "output_dir": str(out),
        "global_step": int(trainer.state.global_step),
        "resumed_from": resumed_from,
        "train_rows": n_rows,
        "metrics": metrics,
        **(extra or {}),
    }
    if trainer.is_world_process_zero():
        write_bytes_atomic(out / "run_summary.json", (json.dumps(summary, indent=2) + "\n").encode("utf-8"))
    return summary


def rl_summary(history: list[dict[str, Any]], *, layers: list[str], started: float) -> dict[str, Any]:
    """Run-summary keys of the online trainers (GRPO, PPO): the first and last logged ``reward`` and
    ``env/success_rate`` (``reward_first`` ... ``success_last``; None if never logged), the sandbox's isolation
    ``layers`` and the wall time since ``started`` (a ``time.monotonic()`` value)."""
    def first_last(key: str) -> tuple[float | None, float | None]:
        values = [row[key] for row in history if isinstance(row.get(key), (int, float))]
        return (values[0], values[-1]) if values else (None, None)

    (r0, r1), (s0, s1) = first_last("reward"), first_last("env/success_rate")
    return {"reward_first": r0, "reward_last": r1, "success_first": s0, "success_last": s1,
            "sandbox_layers": layers, "wall_s": round(time.monotonic() - started, 1)}


def make_env_pool(cfg: RecipeConfig) -> Any:
    """The RL trainers' sandbox pool (None with ``env.urls``: episodes run on env servers). Its warm workers preload
    what the recipe's families declare (``medagentgym.env_client.rollout.family_preload``: SQL-only families start
    lean workers; others, or an unknown family, keep the sandbox's default)."""
    if cfg.env.urls:
        return None
    from medagentgym import sandbox
    from medagentgym.env_client.rollout import family_preload
    from medagentgym.tasks import registry
    from medagentgym.tasks.base import TaskError

    try:
        # instances, not classes: a config-declared family's sandbox_preload is in its family.yaml
        preload = family_preload(lambda name: registry.make(name, root=cfg.tasks.root), cfg.tasks.families)
    except TaskError:  # an unknown family fails later, in build_index, with its own one-line error
        preload = None
    return sandbox.make_pool(cfg.env.sandbox, workers=cfg.env.workers, max_workers=cfg.env.max_workers,
                             allow_unisolated=cfg.env.allow_unisolated, preload=preload)
