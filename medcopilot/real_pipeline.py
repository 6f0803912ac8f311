"""The paper's pipeline in miniature on the real SmolLM2-135M-Instruct, on CPU: zero-shot -> SFT -> GRPO / PPO.

``scripts/bench_real.py`` runs it and writes the table; this module holds the parts. Every stage uses the
project's own pieces:

1. **Families** (:data:`ID`, :data:`OOD`): the toy families and the easiest category of three real ones, each
   restricted to that category (:class:`Arena`). The in-distribution families are trained on (their ``train``
   split) and evaluated on their ``test`` split (instances never trained on); the held-out family is never
   trained on (``ehrcon`` is in the project's ``ood`` suite).
2. **Zero-shot**: :func:`medagentgym.medcopilot.learning.evaluate` on each family's evaluation prompts, greedy (one episode
   per prompt, so n is the number of held-out instances; ``eval_temperature`` > 0 samples ``reps`` episodes per
   prompt on fixed seeds instead), the ``compact`` prompt (its system line names each action's parameters).
   Evaluation is the pipeline's main cost, so it is made cheap (:func:`generation_speed` measures it):
   episodes advance in lock-step (every turn of all live episodes is one left-padded ``model.generate`` call with
   the KV cache, ``TurnBatcher(batching="lockstep")``), under ``torch.inference_mode``, with a tight per-turn
   token cap per family, and with the intra-op thread count of :func:`torch_threads` (on a loaded 2-core machine
   two threads spin-wait for each other: one thread decoded ~10x more tokens per CPU second there).
3. **Trajectories**: the families' reference solutions played through the environment at token level
   (:func:`medagentgym.medcopilot.learning.oracle_episodes`: the sandbox runs the code, observations are masked out of the
   loss): the paper's trajectory sampling with the oracle as teacher.
4. **SFT**: :func:`medagentgym.medcopilot.learning.warm_start` (full fine-tuning, AdamW, loss on the model's tokens).
5. **RL from the SFT checkpoint**: TRL's GRPO with :class:`~medagentgym.medcopilot.rollout_func.EnvRolloutFunc`
   (:func:`medagentgym.medcopilot.learning.train_grpo`) and the in-house PPO (:func:`medagentgym.medcopilot.learning.train_ppo`), over
   several seeds, each scored again.

The table (:func:`table_rows`): per family and method, success with its n, the 95 % Wilson interval
(``medagentgym.env_client.evaluation.wilson_interval``) and the difference to zero-shot.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FULL", "ID", "OOD", "QUICK", "SPEED", "TOY", "Arena", "generation_speed", "open_arena", "run_pipeline",
           "table_rows", "torch_threads"]

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
#: ``eval_per_family`` bounds the toy families' evaluation instances (:data:`TOY`: all 16 held-out toy_lookup
#: records of a tiny build, so SFT against zero-shot is decidable there), ``eval_per_real_family`` the others'.
#: Quick is sized from per-stage CPU seconds measured on the loaded 2-core machine (docs/benchmarks.md, "Real
#: model"): ~4,500 CPU s extrapolated, within the 5,400 of 45 minutes of a quiet 2-core machine.
QUICK = {"train_per_family": 8, "eval_per_family": 16, "eval_per_real_family": 4, "reps": 1, "sft_steps": 30,
         "sft_batch": 4, "sft_lr": 5e-5, "rl_steps": 2, "rl_group": 4, "rl_lr": 1e-5, "seeds": [0, 1, 2], "ppo": True}
FULL = {"train_per_family": 32, "eval_per_family": 16, "eval_per_real_family": 24, "reps": 4, "sft_steps": 200,
        "sft_batch": 8, "sft_lr": 5e-5, "rl_steps": 30, "rl_group": 8, "rl_lr": 1e-5, "seeds": [0, 1, 2, 3, 4],
        "ppo": True}
#: The toy families (their evaluation size is ``eval_per_family``).
TOY = ("toy_lookup", "toy_sql")
#: Evaluation and speed settings shared by both modes (``--set`` overrides them too): greedy evaluation (``reps``
#: is then 1), episodes per lock-step batch, torch's intra-op threads (``auto``: :func:`torch_threads`), and the
#: tokens per row of the before/after generation probe (0: no probe).
SPEED = {"eval_temperature": 0.0, "eval_concurrency": 16, "threads": "auto", "probe_tokens": 16}
QUICK.update(SPEED)
FULL.update(SPEED)


@dataclass
class Arena:
    """One family restricted to a category: its training and evaluation prompt indexes, as learning's Playground."""

    name: str
    play: Any  # medagentgym.medcopilot.learning.Playground over the training instances
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
    from medagentgym.env_client.prompts import initial_messages
    from medagentgym import tasks
    from medagentgym.medcopilot.learning import PROMPT, Playground
    from medagentgym.medcopilot.rollout_func import PromptIndex

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


def torch_threads(setting: int | str = "auto") -> int:
    """Set and return torch's intra-op thread count: ``setting`` when it is a number; ``auto``: the cores this
    process may use minus the 1-minute load average (rounded), at least 1.

    On a quiet 2-core machine that is 2. On a loaded one it is 1: there the two threads of every matrix product
    wait for each other while the scheduler runs other work, and spin while they wait (measured on this
    project's 2-core machine at load ~15, SmolLM2-135M decoding 8 rows: 4.8 tokens per CPU second with 2 threads,
    47 with 1).
    """
    import torch

    if setting == "auto":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        n = max(1, min(cores, round(cores - os.getloadavg()[0])))
    else:
        n = int(setting)
        if n < 1:
            raise ValueError(f"threads={setting!r}: use a positive number or 'auto'")
    torch.set_num_threads(n)
    return n


def generation_speed(model: Any, tokenizer: Any, contexts: list[list[int]], *, tokens: int, threads: int,
                     before_threads: int) -> dict[str, Any]:
    """Decoding speed of the old evaluation setting and the new one on the same contexts, in this process.

    Before: sampling at temperature 1 under ``torch.no_grad`` with ``before_threads`` (torch's default) intra-op
    threads. After: greedy under ``torch.inference_mode`` with ``threads``. Both decode all ``contexts`` in one
    left-padded ``generate`` call of ``tokens`` new tokens per row (KV cache on); the throughput counts the
    positions decoded (rows x steps, what the model computes), per CPU second of this process and per wall
    second. Returns ``{"before": {...}, "after": {...}, "ratio_cpu": after/before, "ratio_wall": ...}``.
    """
    import torch

    from medagentgym.env_client.tokens import generate_batch

    def run(temperature: float, n_threads: int, mode: Any) -> dict[str, float]:
        torch.set_num_threads(n_threads)
        cpu0, wall0 = time.process_time(), time.monotonic()
        with mode():
            new, _ = generate_batch(model, tokenizer, contexts, seeds=list(range(len(contexts))),
                                    max_new_tokens=tokens, temperature=temperature)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        positions = len(contexts) * max(len(ids) for ids in new)
        return {"threads": n_threads, "positions": positions, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                "per_cpu_s": round(positions / max(cpu, 1e-9), 2), "per_wall_s": round(positions / max(wall, 1e-9), 2)}

    before = run(1.0, before_threads, torch.no_grad)
    after = run(0.0, threads, torch.inference_mode)
    torch.set_num_threads(threads)
    return {"before": before, "after": after, "rows": len(contexts),
            "ratio_cpu": round(after["per_cpu_s"] / before["per_cpu_s"], 2),
            "ratio_wall": round(after["per_wall_s"] / before["per_wall_s"], 2)}


def _score(arena: Arena, model: Any, settings: dict[str, Any], seed: int) -> tuple[int, int]:
    """(successes, episodes) of ``model`` on the arena's evaluation prompts: greedy, or sampled on the fixed seeds
    of ``seed`` when ``settings["eval_temperature"]`` > 0 (``reps`` episodes per prompt); lock-step batches."""
    import torch

    from medagentgym.medcopilot.learning import evaluate

    temperature = float(settings["eval_temperature"])
    reps = settings["reps"] if temperature > 0 else 1
    prompts = arena.eval_prompts
    rollout = arena.play.rollout(seed=seed, index=arena.eval_index, batching="lockstep",
                                 concurrency=min(settings["eval_concurrency"], len(prompts) * reps))
    with torch.inference_mode():
        score = evaluate(rollout, model, prompts, reps=reps, temperature=temperature)
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

    from medagentgym import sandbox as sandbox_pkg
    from medagentgym.env_client import Env, EnvConfig
    from medagentgym.env_client.tokens import render_prompt
    from medagentgym.medcopilot.learning import (
        PROMPT,
        oracle_episodes,
        train_grpo,
        train_ppo,
        warm_start,
    )
    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex

    families = dict(ID if families is None else families)
    held_out = dict(OOD if held_out is None else held_out)
    workdir, root = Path(workdir), Path(workdir) / "tasks"
    cost: dict[str, float] = {}
    cpu = time.process_time

    def stage(name: str, started: float) -> None:
        cost[name] = round(cost.get(name, 0.0) + cpu() - started, 1)
        log(f"[real] {name}: {cost[name]:.0f} s CPU so far")

    default_threads = torch.get_num_threads()
    threads = torch_threads(settings.get("threads", "auto"))
    log(f"[real] torch threads {threads} (default {default_threads}, load {os.getloadavg()[0]:.1f})")
    tok = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    names = [*families, *held_out]
    t0 = cpu()
    from medagentgym import tasks
    from medagentgym.env_client.rollout import family_preload

    for name in names:  # build first: the pool's mounts must name every family's data
        if not (root / name / "manifest.json").is_file():
            tasks.make(name, root=root).build(root, size="tiny", seed=0)
    backend = "bwrap" if sandbox == "auto" else sandbox
    workers = max(8, int(settings["eval_concurrency"]))
    preload = family_preload(lambda name: tasks.make(name, root=root), names)  # lean only if every family is SQL
    pool = sandbox_pkg.make_pool(backend, workers=workers, allow_unisolated=backend == "local",
                                 mounts=_mounts(root, names), preload=preload)
    speed: dict[str, Any] = {}
    try:
        real_eval = settings.get("eval_per_real_family", settings["eval_per_family"])
        arenas = {name: open_arena(name, spec, root, tok, pool, train_limit=settings["train_per_family"],
                                   eval_limit=settings["eval_per_family"] if name in TOY else real_eval)
                  for name, spec in {**families, **held_out}.items()}
        stage("setup", t0)
        if settings.get("probe_tokens"):
            t0 = cpu()
            # each family's first evaluation prompt, as rendered for the model, 8 rows in all
            contexts = ([render_prompt(tok, arena.eval_prompts[0]) for arena in arenas.values()] * 8)[:8]
            speed = generation_speed(base, tok, contexts, tokens=int(settings["probe_tokens"]), threads=threads,
                                     before_threads=default_threads)
            log(f"[real] generation speed, {speed['rows']} rows: before {speed['before']['per_cpu_s']} positions "
                f"per CPU s ({speed['before']['threads']} threads, sampled, no_grad), after "
                f"{speed['after']['per_cpu_s']} ({threads} threads, greedy, inference_mode): "
                f"x{speed['ratio_cpu']} per CPU s, x{speed['ratio_wall']} per wall s")
            stage("speed probe", t0)

        def score_all(model: Any, seed: int) -> dict[str, list[int]]:
            return {name: list(_score(arena, model, settings, seed)) for name, arena in arenas.items()}

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
                                         max_completion_tokens=limits[3], concurrency=workers, seed=seed,
                                         flush_s=30.0, batching="lockstep")
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
    return {"scores": scores, "rl": rl, "cost": cost, "settings": settings, "speed": speed, "threads": threads,
            "families": {"id": {k: v[0] for k, v in families.items()}, "held_out": {k: v[0] for k, v in held_out.items()}}}


def _renderer(arenas: dict[str, Arena]) -> Callable[[Any], list[dict]]:
    from medagentgym.env_client.prompts import initial_messages

    def render(inst: Any) -> list[dict]:
        play = arenas[inst.family].play
        return initial_messages(inst, play.family.actions, prompt=play.prompt)
    return render


def table_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per family and method: success, n, 95 % Wilson interval, difference to zero-shot (RL: per seed, and the
    seeds pooled)."""
    from medagentgym.env_client.evaluation import wilson_interval

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
