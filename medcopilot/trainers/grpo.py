"""GRPO on multi-turn environment episodes: TRL's ``GRPOTrainer`` with our ``rollout_func``.

Reads top to bottom: model → env → trainer → train → save.

- **Model**: ``model.name_or_path`` (Hub id, local folder, or an SFT adapter merged into its base), optional new
  LoRA adapters (``model.lora``).
- **Env**: the task instances of ``tasks.families`` (split ``tasks.split``) become the dataset; each row's
  ``prompt`` is the episode's opening chat, so TRL logs what the model saw. A sandbox pool
  (``env.sandbox``, ``env.workers``) runs the code; every episode gets its own ``medagentgym.env_client.Env``.
- **Trainer**: ``rollout_func`` (:class:`medagentgym.medcopilot.rollout_func.EnvRolloutFunc`) plays one episode per row with
  exact token ids and an environment mask; one reward function per ``reward.weights`` entry returns the
  component the rollout computed (``GRPOConfig.reward_weights`` weights them; ``verifier_score`` comes from the
  learned verifier named by ``reward.verifier``, a folder or a service URL); the ``env/*`` step metrics
  (:mod:`medagentgym.medcopilot.metrics`) are logged through TRL's ``log_metric``.
- **Sampling**: ``rollout.temperature`` is passed to TRL as ``temperature`` (TRL rescores with it);
  ``trainer.top_p=1`` and ``trainer.top_k=0`` (the defaults) keep the importance-sampling correction unbiased.
  ``rollout.max_new_tokens`` caps one assistant turn, ``trainer.max_completion_length`` a whole episode after
  the prompt (model and environment tokens).
- **Saved**: the model (or LoRA adapter), tokenizer, ``trainer_state.json`` (``log_history``: TRL's
  ``reward``, ``loss``, ... and our ``env/*`` metrics per logging step) and ``run_summary.json``.
- **Exact policy**: dropout is off during the update (``disable_dropout``, LoRA's included), vLLM's
  importance-sampling correction is per token (``token_truncate``), and with vLLM the LoRA weights reach the
  engine merged in fp32 into fresh tensors and rounded to bf16 without bias, so small updates reach the sampler
  (:mod:`medagentgym.medcopilot.vllm_sync`): TRL's own sync merges into the bf16
  base and back every step, which changes the frozen base. An episode whose next turn cannot fit the
  generator's context (``vllm_max_model_length``, else the model's ``max_position_embeddings``) ends as
  truncated before the call; a resumed run continues the sampling seeds where it stopped
  (:meth:`EnvRolloutFunc.round_index`).
- **Generation backend**: ``rollout.backend: transformers`` runs ``model.generate`` inside the hook (CPU or
  GPU; each episode samples from its own seeded stream, the rank included, see ``EnvRolloutFunc.run``); it is
  refused under ZeRO-3 or FSDP with several processes, where ranks making different numbers of ``generate``
  calls would hang. ``vllm`` uses TRL's vLLM engine (``trainer.vllm_mode: colocate`` or ``server``; GPU only).
- **Missing rewards**: a row whose weighted total is missing (``medagentgym.rewards.combine``: a weighted term is None, e.g.
  a failed grader) reaches TRL with every term None, so its advantage is 0, as PPO drops it.

Example:
    >>> from medagentgym.medcopilot.config import load_recipe
    >>> run(load_recipe("grpo_tiny", overrides=["trainer.max_steps=2"]))  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from medagentgym.medcopilot.config import RecipeConfig, RecipeError
from medagentgym.medcopilot.mixture import apply_mixture
from medagentgym.medcopilot.rewards_adapter import EpisodeReward
from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex, check_generation_layout

__all__ = ["build_index", "build_trainer", "make_env_factory", "make_verifier", "reward_components", "run", "vllm_start",
           "vllm_started"]

log = logging.getLogger(__name__)


def reward_components(weights: dict[str, float]) -> dict[str, Any]:
    """The ``rewards`` functions named in ``reward.weights``.

    Raises:
        RecipeError: A name that is not a reward term (naming the nearest one).
    """
    from medagentgym import rewards

    try:
        return dict(rewards.RewardSpec.from_weights(weights).funcs)
    except rewards.RewardError as exc:
        raise RecipeError(f"reward.weights: {exc}") from None


def make_verifier(cfg: RecipeConfig) -> Any:
    """The learned-verifier scorer of ``reward.verifier`` (None when unset) for the ``verifier_score`` term.

    Raises:
        RecipeError: ``verifier_score`` is weighted without ``reward.verifier``, or ``reward.verifier`` is set but
            no ``verifier_score`` term reads it.
    """
    wants = "verifier_score" in cfg.reward.weights
    if wants and not cfg.reward.verifier:
        raise RecipeError("reward.weights has verifier_score but reward.verifier is not set; set it to a trained "
                          "verifier folder or the URL of medagentgym serve-verifier")
    if not wants and cfg.reward.verifier:
        raise RecipeError(f"reward.verifier={cfg.reward.verifier!r} is set but reward.weights has no verifier_score; "
                          f"add reward.weights.verifier_score=<weight> (0 logs it only)")
    if not cfg.reward.verifier:
        return None
    from accelerate import PartialState

    from medagentgym.medcopilot.verifier import make_scorer

    return make_scorer(cfg.reward.verifier, device=str(PartialState().device))  # each process on its own device


def build_index(cfg: RecipeConfig) -> PromptIndex:
    """Load the recipe's task instances and index them under their opening chat (the dataset prompts).

    Raises:
        RecipeError: A family with no instances in ``tasks.split`` (tells how to build it).
    """
    from medagentgym import tasks
    from medagentgym.env_client.prompts import initial_messages

    instances: list[Any] = []
    actions: dict[str, Any] = {}
    for name in cfg.tasks.families:
        family = tasks.make(name, root=cfg.tasks.root)
        found = family.instances(cfg.tasks.split)
        if not found:
            raise RecipeError(f"family {name!r} has no {cfg.tasks.split!r} instances under {cfg.tasks.root}; "
                              f"build it: medagentgym build --families {name} --out {cfg.tasks.root}")
        actions[name] = family.actions
        instances.extend(found[: cfg.tasks.limit] if cfg.tasks.limit else found)
    return PromptIndex.from_instances(instances, render=lambda inst: initial_messages(inst, actions[inst.family]))


def make_env_factory(cfg: RecipeConfig, pool: Any) -> Any:
    """A zero-argument callable returning a fresh env: a ``medagentgym.env_client.Env`` on the shared sandbox ``pool``, or,
    with ``env.url``, an env whose episodes run on those servers (round-robin, health-checked; ``pool`` unused).

    Remote servers apply their own episode rules (``medagentgym serve --max-turns``), not ``env.max_turns``.
    """
    if cfg.env.urls:
        from medagentgym.env_client.http_client import EnvServers

        return EnvServers(cfg.env.urls).env
    from medagentgym.env_client import Env, EnvConfig

    env_config = EnvConfig() if cfg.env.max_turns is None else EnvConfig(max_turns=cfg.env.max_turns)

    def make_env() -> Any:
        return Env(pool, tasks_root=cfg.tasks.root, config=env_config)

    return make_env


def vllm_start(model: Any, cfg: RecipeConfig) -> str | None:
    """Point TRL's vLLM engine at a model it can load; returns what to restore afterwards (None: nothing).

    A chained stage starts from an earlier stage's adapter-only folder (merged into its base on load, so
    ``model.name_or_path`` names the folder); vLLM cannot load that. TRL starts its engine from
    ``model.name_or_path``, so it is set to the full model at the root of the chain for the trainer's construction
    (:func:`medagentgym.medcopilot.recipe_checks.vllm_base_model`); TRL then pushes the merged weights into the engine before
    the first generation, as it does every step.
    """
    from medagentgym.medcopilot.recipe_checks import vllm_base_model

    own = getattr(model, "name_or_path", cfg.model.name_or_path)
    base = vllm_base_model(own)
    if base == own:
        return None
    log.info("vLLM starts from %s; the merged weights of %s are pushed into it before the first generation", base, own)
    model.name_or_path = base
    return own


def vllm_started(trainer: Any, model: Any, own: str | None) -> None:
    """Once TRL's engine exists: make its weight sync exact, and undo :func:`vllm_start` so new adapters record
    their real base (the folder).

    TRL's sync merges LoRA into the bf16 base in place and unmerges it every step, which changes the frozen base;
    :func:`medagentgym.medcopilot.vllm_sync.install_exact_sync` computes the merged weights into fresh tensors instead.
    """
    if getattr(trainer.args, "use_vllm", False):
        from medagentgym.medcopilot.vllm_sync import install_exact_sync

        install_exact_sync(trainer.vllm_generation, seed=int(getattr(trainer.args, "seed", 0) or 0))
    if own is None:
        return
    model.name_or_path = own
    for config in (getattr(trainer.model, "peft_config", None) or {}).values():
        config.base_model_name_or_path = own  # PEFT read the base's name during the trainer's construction


#: GRPOConfig values this trainer uses unless the recipe sets them: the policy that sampled is the one trained
#: (TRL leaves dropout, LoRA's included, on during the update, so the importance ratio would compare two
#: different policies), and vLLM's importance-sampling correction is per token (TRL's default ``sequence_mask``
#: drops a whole episode whose summed log-ratio passes ln 3, which long multi-turn episodes do).
DEFAULTS = {"disable_dropout": True, "vllm_importance_sampling_mode": "token_truncate"}


def _trainer_args(cfg: RecipeConfig) -> Any:
    """TRL's ``GRPOConfig`` from the recipe, with the keys that the rollout sections own filled in and
    :data:`DEFAULTS` where the recipe is silent."""
    owned = {"temperature": cfg.rollout.temperature, "use_vllm": cfg.rollout.backend == "vllm",
             "reward_weights": list(cfg.reward.weights.values())}
    for key, value in owned.items():
        if key in cfg.trainer and cfg.trainer[key] != value:
            where = {"temperature": "rollout.temperature", "use_vllm": "rollout.backend",
                     "reward_weights": "reward.weights"}[key]
            raise RecipeError(f"trainer.{key}={cfg.trainer[key]!r} contradicts {where}; set {where} only")
    return cfg.trainer_args(**DEFAULTS, **owned)


def build_trainer(cfg: RecipeConfig, *, model: Any, tokenizer: Any, pool: Any, verifier: Any = None,
                  rollout_cls: type = EnvRolloutFunc, callbacks: list[Any] | None = None) -> tuple[Any, Any, PromptIndex]:
    """TRL's ``GRPOTrainer`` for ``cfg`` around a loaded ``model``, with our rollout hook on ``pool``.

    What :func:`run` trains with; ``scripts/bench_gpu.py`` builds the same trainer around a randomly initialised
    model (``rollout_cls`` lets it script the first turn of each episode).

    Returns:
        ``(trainer, rollout, index)``: the trainer, its rollout hook and the prompt index of the dataset.
    """
    from datasets import Dataset
    from trl import GRPOTrainer

    from medagentgym.medcopilot.modeling import lora_config

    args = _trainer_args(cfg)
    index = build_index(cfg)
    dataset = Dataset.from_list(apply_mixture(cfg.tasks, index.rows, seed=args.seed, tag="grpo"))
    if pool is not None and cfg.rollout.concurrency > getattr(pool, "max_workers", cfg.rollout.concurrency):
        log.warning("rollout.concurrency=%d > the sandbox pool's cap of %d workers (%s): an episode holds a sandbox "
                    "session from reset to end, so episodes will wait for workers and turns batch poorly; raise "
                    "env.max_workers",
                    cfg.rollout.concurrency, pool.max_workers, getattr(pool, "cap_source", "its cap"))
    if callable(getattr(pool, "prewarm", None)):  # the first step's episodes open at once: start their workers now
        per_step = getattr(args, "generation_batch_size", None) or cfg.rollout.concurrency
        pool.prewarm(min(cfg.rollout.concurrency, per_step))
    components = reward_components(cfg.reward.weights)
    rollout = rollout_cls(
        make_env=make_env_factory(cfg, pool), index=index, tokenizer=tokenizer,
        max_new_tokens=cfg.rollout.max_new_tokens, max_completion_tokens=args.max_completion_length,
        concurrency=cfg.rollout.concurrency, rewards=components, weights=cfg.reward.weights, seed=args.seed,
        verifier=verifier, max_infra_share=cfg.rollout.max_infra_failure_share,
    )
    reward_funcs = [EpisodeReward(name, group_size=args.num_generations, log_metrics=i == 0)
                    for i, name in enumerate(components)]
    started_from = vllm_start(model, cfg) if args.use_vllm else None
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=rollout, peft_config=lora_config(cfg.model.lora),
                          callbacks=callbacks)
    if not args.use_vllm:
        check_generation_layout(trainer.accelerator)  # before any step: ZeRO-3 / FSDP ranks would hang
    vllm_started(trainer, model, started_from)
    return trainer, rollout, index


def run(cfg: RecipeConfig) -> dict[str, Any]:
    """Train a policy with GRPO on environment episodes and save it to ``output.dir``.

    Args:
        cfg: A validated recipe with ``method: grpo``.

    Returns:
        The run summary of :func:`medagentgym.medcopilot.trainers._common.finish_run` plus ``reward_first`` /
        ``reward_last`` and ``success_first`` / ``success_last`` (first and last logged step) and
        ``sandbox_layers``. The per-step log (TRL's loss/reward keys and the ``env/*`` metrics) is in
        ``<output.dir>/trainer_state.json`` under ``log_history``.

    Raises:
        RecipeError: Invalid sections (unknown reward, contradicting keys, missing tasks or model).
    """
    from medagentgym.medcopilot.modeling import load_model, load_tokenizer, resume_checkpoint, trainable_parameter_count
    from medagentgym.medcopilot.trainers._common import finish_run, make_env_pool, rl_summary

    if cfg.method != "grpo":
        raise RecipeError(f"method={cfg.method!r} reached the GRPO trainer; set method: grpo")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental upstream; trl is pinned
    started = time.monotonic()
    verifier = make_verifier(cfg)  # the verifier_score term's scorer (None without one); fails before the model

    # ---- env first: a sandbox pool (one Env per episode on it), whose workers for the first step's episodes start
    # in the background (pool.prewarm) while the model loads
    pool = make_env_pool(cfg)
    layers = [f"env servers {', '.join(cfg.env.urls)}"] if pool is None else list(getattr(pool, "layers", []))
    try:
        if callable(getattr(pool, "prewarm", None)):
            pool.prewarm(cfg.rollout.concurrency)
        # ---- model; then dataset, rollout hook and trainer
        tokenizer = load_tokenizer(cfg.model.name_or_path)
        model = load_model(cfg.model)
        trainer, _, index = build_trainer(cfg, model=model, tokenizer=tokenizer, pool=pool, verifier=verifier)
        args = trainer.args
        trainable, total = trainable_parameter_count(trainer.model)
        resumed_from = resume_checkpoint(cfg.trainer, cfg.output.dir)
        print(f"[grpo] {len(index.rows)} tasks x {args.num_generations} generations; sandbox {cfg.env.sandbox} "
              f"({', '.join(layers) or 'no isolation'}); trainable parameters {trainable:,} of {total:,}; "
              f"resuming from {resumed_from or 'scratch'}", flush=True)

        # ---- train
        output = trainer.train(resume_from_checkpoint=resumed_from)
    finally:
        if pool is not None:
            pool.close()

    # ---- save
    return finish_run(trainer, cfg, output, resumed_from=resumed_from, n_rows=len(index.rows),
                      extra=rl_summary(trainer.state.log_history, layers=layers, started=started))
