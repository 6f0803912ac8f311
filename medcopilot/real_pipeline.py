"""The paper's pipeline in miniature on the real SmolLM2-135M-Instruct, on CPU: zero-shot -> SFT -> GRPO / PPO.

``scripts/bench_real.py`` runs it and writes the table; this module holds the parts. Every stage uses the
project's own pieces:

1. **Families** (:data:`ID`, :data:`OOD`): the toy families and the easiest category of three real ones, each
   restricted to that category (:class:`Arena`). The in-distribution families are trained on (their ``train``
   split) and evaluated on their ``test`` split (instances never trained on); the held-out family is never
   trained on (``ehrcon`` is in the project's ``ood`` suite).
2. **Zero-shot**: :func:`medcopilot.learning.evaluate` (fixed sampling seeds, so two policies are scored on the
   same draws) on each family's evaluation prompts, temperature 1, the ``compact`` prompt (its system line names
   each action's parameters: SmolLM2's chat template ignores ``tools``, so the ``tool_call`` format's schemas
   would never reach it).
3. **Trajectories**: the families' reference solutions played through the environment at token level
   (:func:`medcopilot.learning.oracle_episodes`: the sandbox runs the code, observations are masked out of the
   loss): the paper's trajectory sampling with the oracle as teacher.
4. **SFT**: :func:`medcopilot.learning.warm_start` (full fine-tuning, AdamW, loss on the model's tokens).
5. **RL from the SFT checkpoint**: TRL's GRPO with :class:`~medcopilot.rollout_func.EnvRolloutFunc`
   (:func:`medcopilot.learning.train_grpo`) and the in-house PPO (:func:`medcopilot.learning.train_ppo`), over
   several seeds, each scored again.

The table (:func:`table_rows`): per family and method, success with its n, the 95 % Wilson interval
(``env_client.evaluation.wilson_interval``) and the difference to zero-shot.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FULL", "ID", "OOD", "QUICK", "Arena", "open_arena", "run_pipeline", "table_rows"]

#: Family -> (category prefixes kept, or None for all; turn budget; tokens per assistant turn; tokens per
#: episode). The real families keep their shortest, most formulaic templates: TREQS's counting questions,
#: MedCalc-Bench's 11 template-note calculators (a ~70-character note: QTc, dates, steroid and morphine
#: conversion, target weight), EHRCon's lab-value consistency checks.
ID = {"toy_lookup": (None, 3, 48, 192), "toy_sql": (None, 3, 64, 256),
      "treqs": (("count_",), 4, 96, 512),
      "medcalcbench": (tuple(f"c{i:02d}_" for i in (11, 13, 24, 49, 56, 57, 58, 59, 61, 68, 69)), 3, 64, 384)}
OOD = {"ehrcon": (("lab.",), 4, 96, 512)}
#: Settings of the two modes (per family: training and evaluation instances, episodes per evaluation prompt;
#: SFT steps and batch; RL steps, group, seeds).
QUICK = {"train_per_family": 8, "eval_per_family": 8, "reps": 2, "sft_steps": 30, "sft_batch": 4, "sft_lr": 5e-5,
         "rl_steps": 4, "rl_group": 4, "rl_lr": 1e-5, "seeds": [0, 1, 2], "ppo": True}
FULL = {"train_per_family": 32, "eval_per_family": 24, "reps": 4, "sft_steps": 200, "sft_batch": 8, "sft_lr": 5e-5,
        "rl_steps": 30, "rl_group": 8, "rl_lr": 1e-5, "seeds": [0, 1, 2, 3, 4], "ppo": True}


@dataclass
class Arena:
    """One family restricted to a category: its training and evaluation prompt indexes, as learning's Playground."""

    name: str
    play: Any  # medcopilot.learning.Playground over the training instances
    eval_index: Any
    train_instances: list[Any]

    @property
    def eval_prompts(self) -> list[Any]:
        return [row["prompt"] for row in self.eval_index.rows]


def _instances(family: Any, split: str, category: tuple[str, ...] | None, limit: int) -> list[Any]:
    chosen = [i for i in family.instances(split) if category is None or i.category.startswith(category)]
    if not chosen:
        raise ValueError(f"{family.name} has no {split} instance of category {category!r}; rebuild it "
                         f"(medagentgym build --families {family.name} --size tiny)")
    return chosen[:limit]


def open_arena(name: str, spec: tuple, root: Path, tokenizer: Any, pool: Any, *, train_limit: int,
               eval_limit: int) -> Arena:
    """Build family ``name`` under ``root`` if missing, and index its chosen category's instances."""
    from env_client.prompts import initial_messages
    from medagentgym import tasks
    from medcopilot.learning import PROMPT, Playground
    from medcopilot.rollout_func import PromptIndex

    category, turns, new_tokens, episode_tokens = spec
    family = tasks.make(name, root=root)
    if not (root / name / "manifest.json").is_file():
        family.build(root, size="tiny", seed=0)

    def render(inst: Any) -> list[dict]:
        return initial_messages(inst, family.actions, prompt=PROMPT)

    train = _instances(family, "train", category, train_limit)
    index = PromptIndex.from_instances(train, render=render)
    play = Playground(root, family, index, tokenizer, pool, turns, new_tokens, episode_tokens, prompt=PROMPT)
    evals = PromptIndex.from_instances(_instances(family, "test", category, eval_limit), render=render)
    return Arena(name, play, evals, train)


def _mounts(root: Path, names: list[str]) -> dict[str, Path]:
    from medagentgym import tasks

    out = {}
    for name in names:
        family = tasks.make(name, root=root)
        for split in ("train", "test"):
            for inst in family.instances(split):
                out.update({key: root / family.name / rel for key, rel in inst.data.items()})
    return out


def _score(arena: Arena, model: Any, reps: int, seed: int) -> tuple[int, int]:
    """(successes, episodes) of ``model`` on the arena's evaluation prompts, on the fixed seeds of ``seed``."""
    from medcopilot.learning import evaluate

    rollout = arena.play.rollout(seed=seed, index=arena.eval_index)
    score = evaluate(rollout, model, arena.eval_prompts, reps=reps)
    return round(score.success * score.episodes), score.episodes


def run_pipeline(model_dir: str | os.PathLike, workdir: str | os.PathLike, settings: dict[str, Any], *,
                 families: dict[str, tuple] | None = None, held_out: dict[str, tuple] | None = None,
                 sandbox: str = "bwrap", log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run zero-shot -> trajectories -> SFT -> eval -> GRPO / PPO (per seed) -> eval; returns the results.

    Returns:
        ``{"scores": {method: {family: [successes, episodes]}}, "rl": {method: {seed: {family: [s, n]}}},
        "cost": {stage: cpu seconds}, "settings": settings, "families": {...}}``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import sandbox as sandbox_pkg
    from env_client import Env, EnvConfig
    from medcopilot.learning import (
        PROMPT,
        oracle_episodes,
        train_grpo,
        train_ppo,
        warm_start,
    )
    from medcopilot.rollout_func import EnvRolloutFunc, PromptIndex

    families = dict(ID if families is None else families)
    held_out = dict(OOD if held_out is None else held_out)
    workdir, root = Path(workdir), Path(workdir) / "tasks"
    cost: dict[str, float] = {}
    cpu = time.process_time

    def stage(name: str, started: float) -> None:
        cost[name] = round(cost.get(name, 0.0) + cpu() - started, 1)
        log(f"[real] {name}: {cost[name]:.0f} s CPU so far")

    tok = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    names = [*families, *held_out]
    t0 = cpu()
    for name in names:  # build first: the pool's mounts must name every family's data
        from medagentgym import tasks

        if not (root / name / "manifest.json").is_file():
            tasks.make(name, root=root).build(root, size="tiny", seed=0)
    backend = "bwrap" if sandbox == "auto" else sandbox
    pool = sandbox_pkg.make_pool(backend, workers=8, allow_unisolated=backend == "local", mounts=_mounts(root, names))
    try:
        arenas = {name: open_arena(name, spec, root, tok, pool, train_limit=settings["train_per_family"],
                                   eval_limit=settings["eval_per_family"])
                  for name, spec in {**families, **held_out}.items()}
        stage("setup", t0)
        reps = settings["reps"]

        def score_all(model: Any, seed: int) -> dict[str, list[int]]:
            return {name: list(_score(arena, model, reps, seed)) for name, arena in arenas.items()}

        t0 = cpu()
        scores = {"zero-shot": score_all(base, 0)}
        log(f"[real] zero-shot {scores['zero-shot']}")
        stage("zero-shot eval", t0)
        t0 = cpu()
        demos = [ep for name in families for ep in oracle_episodes(arenas[name].play, arenas[name].train_instances)]
        stage("trajectories", t0)
        t0 = cpu()
        sft = copy.deepcopy(base)
        torch.manual_seed(0)
        loss = warm_start(sft, demos, steps=settings["sft_steps"], batch=settings["sft_batch"], lr=settings["sft_lr"],
                          pad_id=tok.pad_token_id, seed=0)
        log(f"[real] SFT: {len(demos)} oracle episodes, {settings['sft_steps']} steps, last loss {loss:.3f}")
        stage("sft", t0)
        t0 = cpu()
        scores["sft"] = score_all(sft, 0)
        log(f"[real] sft {scores['sft']}")
        stage("sft eval", t0)
        rl: dict[str, dict[int, dict[str, list[int]]]] = {}
        # RL trains on every in-distribution family at once: one index, the largest turn and token budgets
        index = PromptIndex.from_instances([i for n in families for i in arenas[n].train_instances],
                                           render=_renderer(arenas))
        rows = index.rows
        limits = max(families.values(), key=lambda s: s[3])
        config = EnvConfig(max_turns=max(s[1] for s in families.values()), prompt=PROMPT)

        def make_env() -> Any:
            return Env(pool, tasks_root=root, config=config)

        for method in ("grpo", "ppo") if settings["ppo"] else ("grpo",):
            for seed in settings["seeds"]:
                t0 = cpu()
                policy = copy.deepcopy(sft)
                rollout = EnvRolloutFunc(make_env=make_env, index=index, tokenizer=tok, max_new_tokens=limits[2],
                                         max_completion_tokens=limits[3], concurrency=8, seed=seed, flush_s=30.0)
                out = workdir / f"{method}_{seed}"
                if method == "grpo":
                    trainer = train_grpo(policy, tok, rollout, rows, steps=settings["rl_steps"], lr=settings["rl_lr"],
                                         group=settings["rl_group"], output_dir=out, seed=seed)
                    trained = trainer.model
                else:
                    trainer = train_ppo(policy, tok, rollout, [r["prompt"] for r in rows], steps=settings["rl_steps"],
                                        lr=settings["rl_lr"], group=settings["rl_group"],
                                        batch=2 * settings["rl_group"], output_dir=out, seed=seed)
                    trained = trainer.accelerator.unwrap_model(trainer.model).policy
                stage(method, t0)
                t0 = cpu()
                rl.setdefault(method, {})[seed] = score_all(trained, 0)
                log(f"[real] {method} seed {seed} {rl[method][seed]}")
                stage(f"{method} eval", t0)
    finally:
        pool.close()
    return {"scores": scores, "rl": rl, "cost": cost, "settings": settings,
            "families": {"id": {k: v[0] for k, v in families.items()}, "held_out": {k: v[0] for k, v in held_out.items()}}}


def _renderer(arenas: dict[str, Arena]) -> Callable[[Any], list[dict]]:
    from env_client.prompts import initial_messages

    def render(inst: Any) -> list[dict]:
        play = arenas[inst.family].play
        return initial_messages(inst, play.family.actions, prompt=play.prompt)
    return render


def table_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per family and method: success, n, 95 % Wilson interval, difference to zero-shot (RL: per seed, and the
    seeds pooled)."""
    from env_client.evaluation import wilson_interval

    zero = result["scores"]["zero-shot"]
    split = {name: "id" for name in result["families"]["id"]} | {n: "held-out" for n in result["families"]["held_out"]}
    rows = []

    def row(family: str, method: str, s: int, n: int) -> dict[str, Any]:
        lo, hi = wilson_interval(s, n)
        z = zero[family][0] / zero[family][1]
        return {"family": family, "split": split[family], "method": method, "successes": s, "n": n,
                "success": round(s / n, 4), "ci95": [round(lo, 4), round(hi, 4)], "delta": round(s / n - z, 4)}

    for family in zero:
        for method, by_family in result["scores"].items():
            rows.append(row(family, method, *by_family[family]))
        for method, seeds in result["rl"].items():
            for seed, by_family in seeds.items():
                rows.append(row(family, f"sft+{method} seed {seed}", *by_family[family]))
            pooled = [sum(v[family][i] for v in seeds.values()) for i in (0, 1)]
            rows.append(row(family, f"sft+{method} (seeds pooled)", *pooled))
    return rows
