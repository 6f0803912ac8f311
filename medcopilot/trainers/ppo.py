"""PPO on multi-turn environment episodes, in house (TRL 1.16 has no ``PPOTrainer``).

Reads top to bottom: model → env → trainer → train → save. The math (GAE, clipped losses, KL control) and the
``trainer`` section (:class:`medagentgym.medcopilot.ppo.PPOArgs`) live in :mod:`medagentgym.medcopilot.ppo`.

- **Model**: ``model.name_or_path`` (as for GRPO), optional new LoRA adapters (``model.lora``), and a value head
  on the policy's last hidden state (:class:`medagentgym.medcopilot.ppo.PolicyWithValue`). The reference model for the KL
  penalty is the same model with its adapters disabled under LoRA, a frozen copy without LoRA, and not loaded
  at all when ``trainer.kl_coef`` is 0 and no ``trainer.target_kl`` is set. Dropout is switched off.
- **Env**: the rollout layer GRPO uses: the recipe's task instances indexed by their opening chat
  (``grpo.build_index``), one ``medagentgym.env_client.Env`` per episode on a shared sandbox pool, and
  :class:`medagentgym.medcopilot.rollout_func.EnvRolloutFunc` running ``trainer.rollout_batch_size`` episodes per step
  (``rollout.k`` per task) with exact token ids, sampling logprobs and the environment mask.
- **Reward**: the weighted sum of the ``reward.weights`` components (``verifier_score`` from the learned
  verifier of ``reward.verifier``, as for GRPO). An episode whose trained component is None
  (an infrastructure failure of grading; one the submission caused scores 0) is dropped from the update (all
  its tokens masked) and counted in ``episodes_dropped``; it is never scored as 0.
- **Step**: roll out with the current policy (``model.generate``, ``rollout.temperature``, top-p 1, top-k 0);
  rescore the episodes under the current policy at the same temperature (old logprobs and values) and under the
  reference; per-token rewards, GAE over assistant tokens, whitening; ``trainer.ppo_epochs`` passes of
  mini-batches (``mini_batch_size`` episodes per optimizer step, ``micro_batch_size`` per forward) with
  gradient clipping; then the KL controller and the learning-rate schedule step.
- **Logged** (``log_history`` in ``trainer_state.json``, and wandb when ``trainer.report_to`` has it, averaged
  over ``trainer.logging_steps`` steps and over processes): ``reward``, ``rewards/<name>/mean``,
  ``episodes_dropped``, the ``env/*`` metrics of :mod:`medagentgym.medcopilot.metrics` (``env/success_rate``, ...), ``kl``
  (summed per episode) and ``kl_coef``, ``policy_loss``, ``value_loss``, ``loss``, ``clipfrac``,
  ``value_clipfrac``, ``approx_kl``, ``entropy``, ``grad_norm``, ``learning_rate``, ``values_mean``,
  ``returns_mean``, ``rollout_s`` and ``step_s``.
- **Saved**: ``checkpoint-<step>/`` every ``trainer.save_steps`` (weights or adapter, tokenizer,
  ``value_head.safetensors``, optimizer, scheduler, RNG states, ``trainer_state.json`` with the step, the KL
  coefficient and ``log_history``), written to a temporary folder and renamed; a rerun resumes from the newest.
  At the end: model (or adapter), tokenizer, value head, ``trainer_state.json``, ``train_results.json`` and
  ``run_summary.json`` (:func:`medagentgym.medcopilot.trainers._common.finish_run`, which :class:`PPOTrainer` serves).
- **Processes**: ``accelerate launch`` (one GPU, or ``--multi_gpu`` DDP): every process rolls out its own
  episodes, whitens its own advantages and averages gradients with the others; DeepSpeed is not supported.

Example:
    >>> from medagentgym.medcopilot.config import load_recipe
    >>> run(load_recipe("ppo_tiny", overrides=["trainer.max_steps=2"]))  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medagentgym.medcopilot.config import RecipeConfig, RecipeError
from medagentgym.medcopilot.metrics import EpisodeStats, batch_metrics
from medagentgym.medcopilot.ppo import (
    PolicyWithValue,
    PPOArgs,
    collate_rows,
    completion_logprobs,
    disable_dropout,
    gae,
    kl_estimate,
    make_kl_controller,
    masked_mean,
    masked_whiten,
    policy_loss,
    token_rewards,
    value_loss,
)
from medagentgym.medcopilot.ppo_checkpoint import (
    VALUE_HEAD,
    TrainerState,
    load_checkpoint,
    save_checkpoint,
    write_json,
)
from medagentgym.rewards import combine

__all__ = ["PPOTrainer", "load_policy", "ppo_args", "run"]

log = logging.getLogger(__name__)


def ppo_args(cfg: RecipeConfig) -> PPOArgs:
    """The recipe's ``trainer`` section as :class:`PPOArgs`, checked against the other sections.

    Raises:
        RecipeError: An unknown or bad trainer key, a vLLM backend, temperature 0, or a batch not made of
            whole ``rollout.k`` groups.
    """
    args = PPOArgs.from_trainer(cfg.trainer)
    if cfg.rollout.backend != "transformers":
        raise RecipeError(f"rollout.backend={cfg.rollout.backend!r} is not supported by PPO (it generates with "
                          f"model.generate between updates); set rollout.backend=transformers")
    if cfg.rollout.temperature <= 0:
        raise RecipeError(f"rollout.temperature={cfg.rollout.temperature!r} is invalid for PPO: sampling must be "
                          f"stochastic; set a positive temperature such as 1.0")
    if args.rollout_batch_size % cfg.rollout.k:
        raise RecipeError(f"trainer.rollout_batch_size={args.rollout_batch_size} is not a multiple of "
                          f"rollout.k={cfg.rollout.k}; a step rolls out whole groups of k episodes per task")
    return args


@dataclass
class Batch:
    """One step's episodes as ``(B, C)`` tensors (completions right-padded; see :func:`collate_rows`)."""

    prompts: list[list[int]]
    completions: list[list[int]]
    lengths: torch.Tensor  # (B,) completion lengths
    mask: torch.Tensor  # (B, C) assistant tokens of kept episodes
    scores: torch.Tensor  # (B,) episode reward, 0 for dropped episodes
    old_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None


class PPOTrainer:
    """The PPO loop over an :class:`~medagentgym.medcopilot.rollout_func.EnvRolloutFunc`; usable without a recipe.

    It also offers what :func:`medagentgym.medcopilot.trainers._common.finish_run` needs from a TRL trainer: ``state``,
    ``save_model``, ``save_metrics``, ``save_state`` and ``is_world_process_zero``.

    Args:
        model: The policy (a causal LM, or a ``PeftModel`` whose adapters are trained).
        tokenizer: Its tokenizer (pad id, chat template).
        rollout: Runs the episodes; built with the policy's tokenizer and the reward components.
        prompts: Dataset prompts (keys of ``rollout.index``); each step takes the next tasks of a seeded shuffle.
        args: The ``trainer`` section.
        output_dir: Where checkpoints and the final model go.
        reward_weights: Component name -> weight (``reward.weights``).
        temperature: Sampling temperature (``rollout.temperature``), also used to rescore.
        group_size: Episodes per task in a step (``rollout.k``).
        ref_model: Frozen reference LM for the KL penalty; None with a ``PeftModel`` uses the disabled adapters.
        accelerator: An ``accelerate.Accelerator``; a new one (CPU when no GPU) when None.
        tracker_config: Config logged to wandb when ``args.report_to`` has it.
        callbacks: ``fn(step, policy)`` run after each step (e.g. an evaluation); ``policy`` is the unwrapped LM.
    """

    def __init__(self, *, model: Any, tokenizer: Any, rollout: Any, prompts: list[Any], args: PPOArgs,
                 output_dir: str | os.PathLike, reward_weights: dict[str, float], temperature: float = 1.0,
                 group_size: int = 1, ref_model: Any = None, accelerator: Any = None,
                 tracker_config: dict[str, Any] | None = None,
                 callbacks: list[Callable[[int, Any], None]] | None = None) -> None:
        from accelerate import Accelerator
        from transformers import get_scheduler

        if args.rollout_batch_size % group_size:
            raise ValueError(f"rollout_batch_size={args.rollout_batch_size} is not a multiple of group_size="
                             f"{group_size}")
        self.args, self.tokenizer, self.rollout, self.prompts = args, tokenizer, rollout, list(prompts)
        self.output_dir, self.reward_weights = Path(output_dir), dict(reward_weights)
        self.temperature, self.group_size, self.tracker_config = temperature, group_size, tracker_config or {}
        self.callbacks = list(callbacks or [])
        self.accelerator = accelerator or Accelerator(cpu=not torch.cuda.is_available(),
                                                      log_with="wandb" if "wandb" in args.report_to else None)
        self.is_peft = hasattr(model, "disable_adapter")
        self.needs_ref = args.kl_coef > 0 or args.target_kl is not None
        if self.needs_ref and ref_model is None and not self.is_peft:
            raise ValueError("kl_coef > 0 needs a reference: pass ref_model= (a frozen copy) or a PeftModel")
        disable_dropout(model)
        if args.activation_checkpointing:  # transformers < 5.18 (the GPU set's 5.17) calls it gradient_checkpointing
            if hasattr(model, "activation_checkpointing_enable"):
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        module = PolicyWithValue(model, model.config.hidden_size).train()  # train mode: checkpointing is active
        groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": args.learning_rate},
                  {"params": list(module.value_head.parameters()),
                   "lr": args.value_head_learning_rate or args.learning_rate}]
        optimizer = torch.optim.AdamW(groups, weight_decay=args.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(module, optimizer)
        # Stepped once per PPO step by hand (accelerate's wrapper would step it once per process).
        self.scheduler = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.warmup_steps,
                                       num_training_steps=args.max_steps)
        self.ref_model = None if ref_model is None else ref_model.to(self.accelerator.device).eval()
        if self.ref_model is not None:
            self.ref_model.requires_grad_(False)
        self.kl_ctl = make_kl_controller(args)
        self.state = TrainerState(max_steps=args.max_steps, kl_coef=self.kl_ctl.value)
        self._window: list[dict[str, float]] = []

    # ------------------------------------------------------------------ one step
    def _step_prompts(self, step: int) -> list[Any]:
        """This process's prompts for ``step``: the next tasks of a per-epoch shuffle, each ``group_size`` times."""
        per = self.args.rollout_batch_size // self.group_size
        first = (step * self.accelerator.num_processes + self.accelerator.process_index) * per
        out = []
        for j in range(first, first + per):
            epoch, pos = divmod(j, len(self.prompts))
            order = np.random.default_rng([self.args.seed, epoch]).permutation(len(self.prompts))
            out.extend([self.prompts[order[pos]]] * self.group_size)
        return out

    def _rollout(self, step: int) -> tuple[Batch, dict[str, float]]:
        """Play this step's episodes with the current policy; return the batch and the episode metrics."""
        policy = self.accelerator.unwrap_model(self.model).policy
        policy.eval()
        try:
            with torch.no_grad():  # episode seeds derive from the step: a resumed run continues the same stream
                out = self.rollout.run(self._step_prompts(step),
                                       self.rollout.hf_generator(policy, temperature=self.temperature),
                                       call=step, rank=self.accelerator.process_index)
        finally:
            policy.train()
        n = len(out["completion_ids"])
        # The weighted total per episode; None (dropped from the update) when a weighted term is missing.
        scores = [combine({name: out[f"reward_{name}"][i] for name in self.reward_weights}, self.reward_weights).total
                  for i in range(n)]
        lengths = torch.tensor([len(c) for c in out["completion_ids"]])
        mask = torch.zeros((n, int(lengths.max())))
        for i, env_mask in enumerate(out["env_mask"]):
            if scores[i] is not None:
                mask[i, :len(env_mask)] = torch.tensor(env_mask, dtype=mask.dtype)
        device = self.accelerator.device
        batch = Batch(prompts=out["prompt_ids"], completions=out["completion_ids"], lengths=lengths,
                      mask=mask.to(device), scores=torch.tensor([s or 0.0 for s in scores], device=device))
        kept = [s for s in scores if s is not None]
        stats = [EpisodeStats.from_dict(dict(s)) for s in out["episode_stats"]]
        metrics = {"reward": float(np.mean(kept)) if kept else math.nan, "episodes_dropped": float(n - len(kept)),
                   "completion_model_tokens_mean": float(np.mean([s.model_tokens for s in stats]))}
        for name in self.reward_weights:
            values = [r for r in out[f"reward_{name}"] if r is not None]
            metrics[f"rewards/{name}/mean"] = float(np.mean(values)) if values else math.nan
        metrics.update(batch_metrics(stats, rewards=scores, group_size=self.group_size))
        return batch, metrics

    def _forward(self, batch: Batch, rows: torch.Tensor, module: Any = None,
                 **kwargs: Any) -> tuple[torch.Tensor, ...]:
        """Forward ``rows`` of the batch through ``module`` (default: the prepared policy + value head)."""
        ids, attention, positions, start = collate_rows([batch.prompts[i] for i in rows.tolist()],
                                                        [batch.completions[i] for i in rows.tolist()],
                                                        self.tokenizer.pad_token_id)
        device = self.accelerator.device
        tensors = (ids.to(device), attention.to(device), positions.to(device))
        if module is not None:
            return completion_logprobs(module, *tensors, start, self.temperature)
        return self.model(*tensors, start, self.temperature, **kwargs)

    def _ref_logprobs(self, batch: Batch, rows: torch.Tensor) -> torch.Tensor:
        if self.ref_model is not None:
            return self._forward(batch, rows, module=self.ref_model)[1]
        unwrapped = self.accelerator.unwrap_model(self.model)
        with unwrapped.policy.disable_adapter():
            return self._forward(batch, rows, module=unwrapped.lm())[1]

    @torch.no_grad()
    def _advantages(self, batch: Batch) -> dict[str, float]:
        """Old logprobs and values under the current policy, reference KL, per-token rewards, GAE."""
        n = batch.mask.shape[0]
        old = torch.zeros_like(batch.mask)
        values, kl = torch.zeros_like(old), torch.zeros_like(old)
        for rows in torch.arange(n).split(self.args.micro_batch_size):
            c = int(batch.lengths[rows].max())
            logprobs, v, _ = self._forward(batch, rows)
            old[rows, :c], values[rows, :c] = logprobs, v
            if self.needs_ref:
                kl[rows, :c] = kl_estimate(logprobs, self._ref_logprobs(batch, rows), self.args.kl_estimator)
        kl = kl * batch.mask
        rewards = token_rewards(batch.scores, kl, batch.mask, self.kl_ctl.value)
        advantages, returns = gae(rewards, values, batch.mask, self.args.gamma, self.args.lam)
        if self.args.whiten_advantages:
            advantages = masked_whiten(advantages, batch.mask)
        batch.old_logprobs, batch.values, batch.advantages, batch.returns = old, values, advantages, returns
        kept = batch.mask.sum(1) > 0
        episode_kl = kl.sum(1)[kept]
        metrics = {"kl_coef": self.kl_ctl.value, "values_mean": masked_mean(values, batch.mask).item(),
                   "returns_mean": masked_mean(returns, batch.mask).item()}
        if self.needs_ref:  # the controller sees every process's episodes, so all ranks keep one coefficient
            totals = torch.stack([episode_kl.sum(), kept.sum().to(episode_kl.dtype)])
            if self.accelerator.num_processes > 1:
                totals = self.accelerator.reduce(totals, "sum")
            kl_sum, n_kept = totals.tolist()
            metrics["kl"] = kl_sum / n_kept if n_kept else math.nan
            self.kl_ctl.update(metrics["kl"], int(n_kept))
        return metrics

    def _update(self, batch: Batch, step: int) -> dict[str, float]:
        """``ppo_epochs`` passes of clipped-loss mini-batch updates; returns token-weighted loss statistics."""
        args, acc = self.args, self.accelerator
        totals: dict[str, float] = {}
        tokens, grad_norms = 0.0, []
        order = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        n = len(batch.prompts)
        for _ in range(args.ppo_epochs):
            for mini in torch.randperm(n, generator=order).split(args.mini_batch_size):
                micros = mini.split(args.micro_batch_size)
                for k, rows in enumerate(micros):
                    c = int(batch.lengths[rows].max())
                    m = batch.mask[rows, :c]
                    with nullcontext() if k == len(micros) - 1 else acc.no_sync(self.model):
                        logprobs, values, entropy = self._forward(batch, rows, entropy_grad=args.ent_coef > 0)
                        pl, pstats = policy_loss(logprobs, batch.old_logprobs[rows, :c], batch.advantages[rows, :c],
                                                 m, args.cliprange)
                        vl, vstats = value_loss(values, batch.values[rows, :c], batch.returns[rows, :c], m,
                                                args.cliprange_value)
                        ent = masked_mean(entropy, m)
                        loss = pl + args.vf_coef * vl - args.ent_coef * ent
                        acc.backward(loss / len(micros))
                    weight = float(m.sum())
                    tokens += weight
                    for key, value in {"loss": loss, "policy_loss": pl, "value_loss": vl, "entropy": ent,
                                       **pstats, **vstats}.items():
                        totals[key] = totals.get(key, 0.0) + float(value.detach()) * weight
                if not batch.mask[mini].any() and acc.num_processes == 1:
                    self.optimizer.zero_grad()  # only dropped episodes: Adam's momentum alone must not move weights
                    continue
                if args.max_grad_norm > 0:
                    grad_norms.append(float(acc.clip_grad_norm_(self.model.parameters(), args.max_grad_norm)))
                self.optimizer.step()
                self.optimizer.zero_grad()
        metrics = {key: value / tokens if tokens else math.nan for key, value in totals.items()}
        if grad_norms:
            metrics["grad_norm"] = float(np.mean(grad_norms))
        metrics["learning_rate"] = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        return metrics

    def step(self) -> dict[str, float]:
        """One PPO step (rollout, advantages, update) at ``state.global_step``; returns its metrics."""
        started = time.monotonic()
        batch, metrics = self._rollout(self.state.global_step)
        metrics["rollout_s"] = time.monotonic() - started
        metrics.update(self._advantages(batch))
        metrics.update(self._update(batch, self.state.global_step))
        metrics["step_s"] = time.monotonic() - started
        return metrics

    # ------------------------------------------------------------------ the loop
    def train(self) -> Any:
        """Run steps from ``state.global_step`` to ``args.max_steps``, logging and checkpointing.

        Returns:
            ``transformers.trainer_utils.TrainOutput`` (global step, mean loss, run metrics).
        """
        from transformers.trainer_utils import TrainOutput

        started, first = time.monotonic(), self.state.global_step
        if self.args.report_to:
            self.accelerator.init_trackers(os.environ.get("WANDB_PROJECT", "medcopilot"), config=self.tracker_config,
                                           init_kwargs={"wandb": {"name": self.output_dir.name}})
        losses = []
        while self.state.global_step < self.args.max_steps:
            metrics = self.step()
            losses.append(metrics.get("loss", math.nan))
            self.state.global_step += 1
            self.state.kl_coef = self.kl_ctl.value
            self._log(metrics)
            if self.args.save_steps and self.state.global_step % self.args.save_steps == 0:
                self.save_checkpoint()
            for callback in self.callbacks:
                callback(self.state.global_step, self.accelerator.unwrap_model(self.model).policy)
        if self.args.report_to:
            self.accelerator.end_training()
        runtime = time.monotonic() - started
        done = self.state.global_step - first
        run_metrics = {"train_runtime": round(runtime, 3), "train_steps": done,
                       "train_steps_per_second": round(done / runtime, 4) if runtime > 0 else 0.0,
                       "train_episodes": done * self.args.rollout_batch_size * self.accelerator.num_processes}
        finite = [x for x in losses if math.isfinite(x)]
        run_metrics["train_loss"] = float(np.mean(finite)) if finite else 0.0
        return TrainOutput(self.state.global_step, run_metrics["train_loss"], run_metrics)

    def _log(self, metrics: dict[str, float]) -> None:
        """Average over processes; every ``logging_steps`` steps, average the window and append to the history."""
        self._window.append(self._reduce(metrics))
        step = self.state.global_step
        if step % self.args.logging_steps and step < self.args.max_steps:
            return
        row: dict[str, Any] = {}
        for key in self._window[-1]:
            values = [w[key] for w in self._window if key in w and math.isfinite(w[key])]
            row[key] = round(float(np.mean(values)), 6) if values else None
        self._window = []
        self.state.log_history.append({**row, "step": step})
        if self.args.report_to:
            self.accelerator.log({k: v for k, v in row.items() if v is not None}, step=step)
        if self.accelerator.is_main_process:
            shown = {k: row.get(k) for k in ("reward", "env/success_rate", "kl", "policy_loss", "value_loss",
                                             "clipfrac", "entropy") if row.get(k) is not None}
            print(f"[ppo] step {step}/{self.args.max_steps} " + " ".join(f"{k}={v:.4g}" for k, v in shown.items()),
                  flush=True)

    def _reduce(self, metrics: dict[str, float]) -> dict[str, float]:
        """Mean of each metric over processes, NaNs (nothing to measure on a process) left out."""
        if self.accelerator.num_processes == 1:
            return metrics
        keys = sorted(metrics)
        values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.accelerator.device)
        finite = torch.isfinite(values)
        sums = self.accelerator.reduce(torch.where(finite, values, 0.0), "sum")
        counts = self.accelerator.reduce(finite.double(), "sum")
        return {k: (s / c).item() if c > 0 else math.nan for k, s, c in zip(keys, sums, counts)}

    # ------------------------------------------------------------------ saving and resuming
    def is_world_process_zero(self) -> bool:
        """True on the process that writes shared files."""
        return self.accelerator.is_main_process

    def save_model(self, output_dir: str | os.PathLike | None = None) -> None:
        """Save the policy (weights, or the LoRA adapter), tokenizer and value head into ``output_dir``."""
        from safetensors.torch import save_file

        if not self.accelerator.is_main_process:
            return
        out = Path(output_dir or self.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        unwrapped = self.accelerator.unwrap_model(self.model)
        unwrapped.policy.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        head = {k: v.detach().cpu().contiguous() for k, v in unwrapped.value_head.state_dict().items()}
        save_file(head, str(out / VALUE_HEAD))

    def save_metrics(self, split: str, metrics: dict[str, Any]) -> None:
        """Write ``<output_dir>/<split>_results.json`` (as TRL's trainers do)."""
        if self.accelerator.is_main_process:
            write_json(self.output_dir / f"{split}_results.json", metrics)

    def save_state(self, output_dir: str | os.PathLike | None = None) -> None:
        """Write ``trainer_state.json`` (step, KL coefficient, log history) into ``output_dir``."""
        if self.accelerator.is_main_process:
            write_json(Path(output_dir or self.output_dir) / "trainer_state.json", vars(self.state))

    def save_checkpoint(self) -> Path:
        """Write ``checkpoint-<step>`` atomically (see :mod:`medagentgym.medcopilot.ppo_checkpoint`); returns its folder."""
        return save_checkpoint(self)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Resume from a checkpoint: weights, value head, optimizer, scheduler, RNG, step, KL coefficient, history.

        Raises:
            RecipeError: A checkpoint whose weights do not fit this model (another model or LoRA setting).
        """
        saved = load_checkpoint(self, path)
        self.state = TrainerState(global_step=saved.global_step, max_steps=self.args.max_steps,
                                  kl_coef=saved.kl_coef, log_history=saved.log_history)
        self.kl_ctl.value = saved.kl_coef

def load_policy(cfg: RecipeConfig, args: PPOArgs) -> tuple[Any, Any, Any]:
    """The tokenizer, the policy (with new LoRA adapters when ``model.lora`` is set) and the KL reference.

    Returns:
        ``(tokenizer, policy, ref_model)``; ``ref_model`` is a second copy only without LoRA and with a KL
        penalty (under LoRA the reference is the policy with its adapters disabled), else None.
    """
    from medagentgym.medcopilot.modeling import load_model, load_tokenizer, lora_config

    tokenizer = load_tokenizer(cfg.model.name_or_path)
    model = load_model(cfg.model)
    if cfg.model.lora is not None:
        from peft import get_peft_model

        return tokenizer, get_peft_model(model, lora_config(cfg.model.lora)), None
    needs_ref = args.kl_coef > 0 or args.target_kl is not None
    return tokenizer, model, load_model(cfg.model) if needs_ref else None


def run(cfg: RecipeConfig) -> dict[str, Any]:
    """Train a policy with PPO on environment episodes and save it to ``output.dir``.

    Args:
        cfg: A validated recipe with ``method: ppo``.

    Returns:
        The run summary of :func:`medagentgym.medcopilot.trainers._common.finish_run` plus ``reward_first`` /
        ``reward_last``, ``success_first`` / ``success_last`` (first and last logged step), ``sandbox_layers``
        and ``wall_s``. The per-step log is in ``<output.dir>/trainer_state.json`` under ``log_history``.

    Raises:
        RecipeError: Invalid sections (unknown trainer key or reward, vLLM backend, missing tasks or model).
    """
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from medagentgym.medcopilot.mixture import apply_mixture
    from medagentgym.medcopilot.modeling import resume_checkpoint, trainable_parameter_count
    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc
    from medagentgym.medcopilot.trainers._common import finish_run, make_env_pool, rl_summary
    from medagentgym.medcopilot.trainers.grpo import (
        build_index,
        make_env_factory,
        make_verifier,
        reward_components,
    )

    if cfg.method != "ppo":
        raise RecipeError(f"method={cfg.method!r} reached the PPO trainer; set method: ppo")
    args = ppo_args(cfg)
    components = reward_components(cfg.reward.weights)
    verifier = make_verifier(cfg)  # the verifier_score term's scorer (None without one), as for GRPO
    started = time.monotonic()
    accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                              log_with="wandb" if "wandb" in args.report_to else None)
    if accelerator.distributed_type.value == "DEEPSPEED":
        raise RecipeError("the PPO loop does not support DeepSpeed; launch with one GPU or --multi_gpu (DDP)")
    set_seed(args.seed)

    # ---- model: policy (+ LoRA), reference for the KL penalty
    tokenizer, model, ref_model = load_policy(cfg, args)

    # ---- env: task prompts, a sandbox pool, one Env per episode
    index = build_index(cfg)
    pool = make_env_pool(cfg)
    layers = [f"env servers {', '.join(cfg.env.urls)}"] if pool is None else list(getattr(pool, "layers", []))
    if pool is not None and cfg.rollout.concurrency > pool.max_workers:
        log.warning("rollout.concurrency=%d > the sandbox pool's cap of %d workers (%s): an episode holds a sandbox "
                    "session from reset to end, so episodes will wait for workers; raise env.max_workers",
                    cfg.rollout.concurrency, pool.max_workers, pool.cap_source)
    if callable(getattr(pool, "prewarm", None)):  # the first step's episodes open at once: start their workers now
        pool.prewarm(cfg.rollout.concurrency)
    rollout = EnvRolloutFunc(
        make_env=make_env_factory(cfg, pool), index=index, tokenizer=tokenizer,
        max_new_tokens=cfg.rollout.max_new_tokens, max_completion_tokens=args.max_completion_length,
        concurrency=cfg.rollout.concurrency, rewards=components, weights=cfg.reward.weights, verifier=verifier,
        seed=args.seed, policy_name="ppo", max_infra_share=cfg.rollout.max_infra_failure_share,
        max_context_tokens=getattr(model.config, "max_position_embeddings", None))  # the context guard

    # ---- trainer, train
    try:
        trainer = PPOTrainer(model=model, tokenizer=tokenizer, rollout=rollout,
                             prompts=[row["prompt"] for row in apply_mixture(cfg.tasks, index.rows, seed=args.seed,
                                                                             tag="ppo")],
                             args=args, output_dir=cfg.output.dir,
                             reward_weights=cfg.reward.weights, temperature=cfg.rollout.temperature,
                             group_size=cfg.rollout.k, ref_model=ref_model, accelerator=accelerator,
                             tracker_config=cfg.to_dict())
        resumed_from = resume_checkpoint(cfg.trainer, cfg.output.dir)
        if resumed_from:
            trainer.load_checkpoint(resumed_from)
        trainable, total = trainable_parameter_count(trainer.model)
        if accelerator.is_main_process:
            print(f"[ppo] {len(index.rows)} tasks, {args.rollout_batch_size} episodes per step per process "
                  f"(k={cfg.rollout.k}); sandbox {cfg.env.sandbox} ({', '.join(layers) or 'no isolation'}); "
                  f"reference {'none' if not trainer.needs_ref else 'frozen copy' if ref_model else 'adapters off'}; "
                  f"trainable parameters {trainable:,} of {total:,} (value head included); "
                  f"resuming from {resumed_from or 'scratch'}", flush=True)
        output = trainer.train()
    finally:
        if pool is not None:
            pool.close()

    # ---- save
    return finish_run(trainer, cfg, output, resumed_from=resumed_from, n_rows=len(index.rows),
                      extra=rl_summary(trainer.state.log_history, layers=layers, started=started))
