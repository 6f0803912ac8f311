"""Learned verifier: a Qwen2 sequence classifier trained to predict an episode's success (BCE loss).

Reads top to bottom: data → split → model → trainer → train → held-out metrics → save.

* **Data**: every episode of ``rollout.store`` (generated from ``rollout.policy`` when missing; use a mix such as
  ``oracle+constant:0+shotgun`` so both outcomes occur), as the verifier's text (:mod:`medagentgym.medcopilot.verifier`:
  the chat without system turns, head and tail kept within ``trainer.max_length``) and a label (1 = correct).
  A store with only successes or only failures is a one-line error.
* **Split**: ``trainer.eval_fraction`` of the *task ids* is held out (no task has episodes on both sides), tasks
  with and without a success split separately so the held-out side has both labels.
* **Model**: ``AutoModelForSequenceClassification`` with one output (a fresh score head on the causal LM), pad id
  set; LoRA (``task_type=SEQ_CLS``, the score head trained in full) when ``model.lora`` is set.
* **Loss**: ``BCEWithLogitsLoss`` with ``pos_weight`` = failures / successes of the training side (balanced
  classes) unless ``trainer.pos_weight`` fixes it; a ``transformers.Trainer`` subclass does the rest (resume,
  checkpoints, logging, distributed).
* **Metrics**: AUROC and accuracy (threshold 0.5) on the held-out tasks, as ``eval_auroc`` /
  ``eval_accuracy`` in the summary and in ``verifier_config.json``; also at every ``eval_steps`` when
  ``trainer.eval_strategy: steps``.

The ``trainer`` section is :class:`VerifierConfig`: ``transformers.TrainingArguments`` plus ``max_length``,
``eval_fraction`` and ``pos_weight``.

Example:
    >>> summary = run(load_recipe("verifier_tiny", ["trainer.max_steps=20"]))   # doctest: +SKIP
    >>> summary["heldout"]["eval_auroc"]
    1.0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import Trainer, TrainingArguments

from medagentgym.medcopilot.config import RecipeConfig, RecipeError
from medagentgym.medcopilot.modeling import (
    load_tokenizer,
    lora_config,
    resume_checkpoint,
    trainable_parameter_count,
)
from medagentgym.medcopilot.trainers._common import episodes_for, finish_run
from medagentgym.medcopilot.verifier import (
    auroc,
    encode_messages,
    load_verifier_model,
    split_by_task,
    verifier_messages,
    write_verifier_config,
)

__all__ = ["BCETrainer", "VerifierConfig", "build_trainer", "run"]


@dataclass
class VerifierConfig(TrainingArguments):
    """``transformers.TrainingArguments`` plus the verifier's own keys (the recipe's ``trainer`` section)."""

    max_length: int = field(default=2048, metadata={"help": "Tokens the verifier reads per episode (head + tail)."})
    eval_fraction: float = field(default=0.25, metadata={"help": "Share of task ids held out for AUROC/accuracy."})
    pos_weight: float | None = field(default=None, metadata={
        "help": "BCE weight of the positive class; null = failures / successes of the training split (balanced)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_length < 16:
            raise ValueError(f"max_length={self.max_length} is too small; use at least 16 (e.g. 2048)")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction={self.eval_fraction} must be in [0, 1)")
        if self.pos_weight is not None and not self.pos_weight > 0:
            raise ValueError(f"pos_weight={self.pos_weight} must be > 0 (or null for balanced classes)")


class BCETrainer(Trainer):
    """``Trainer`` with a binary cross-entropy loss on the one-output score head.

    Args:
        pos_weight: Weight of the positive class in the loss (``BCEWithLogitsLoss(pos_weight=...)``).
        *args, **kwargs: As for ``transformers.Trainer``.
    """

    def __init__(self, *args: Any, pos_weight: float = 1.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pos_weight = float(pos_weight)

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """Mean BCE of the logits against the 0/1 labels; the logits are returned for evaluation."""
        labels = inputs.pop("labels").float()
        logits = model(**inputs, use_cache=False).logits.view(-1).float()
        weight = torch.tensor(self.pos_weight, device=logits.device)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, pos_weight=weight)
        return (loss, {"logits": logits}) if return_outputs else loss


def collate(pad_id: int):
    """A collator padding ``input_ids`` on the right with ``pad_id``; adds ``attention_mask`` and float labels."""
    def fn(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row["input_ids"])] = torch.tensor(row["input_ids"], dtype=torch.long)
            mask[i, :len(row["input_ids"])] = 1
        labels = torch.tensor([float(r["labels"]) for r in rows], dtype=torch.float32)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}
    return fn


def compute_metrics(prediction: Any) -> dict[str, float]:
    """Held-out accuracy at P = 0.5 and AUROC (left out when the held-out side has a single label)."""
    logits = torch.as_tensor(prediction.predictions).view(-1).float()
    labels = [int(y) for y in torch.as_tensor(prediction.label_ids).view(-1).tolist()]
    probs = torch.sigmoid(logits).tolist()
    metrics = {"accuracy": sum((p >= 0.5) == bool(y) for p, y in zip(probs, labels)) / max(len(labels), 1),
               "positives": float(sum(labels)), "n": float(len(labels))}
    area = auroc(labels, probs)
    if area is not None:
        metrics["auroc"] = area
    return metrics


def _rows(episodes: list[Any], tokenizer: Any, max_length: int) -> list[dict[str, Any]]:
    return [{"input_ids": encode_messages(verifier_messages(ep.messages), tokenizer, max_length),
             "labels": int(ep.success), "task_id": ep.task_id} for ep in episodes]


def build_trainer(cfg: RecipeConfig) -> tuple[BCETrainer, dict[str, Any]]:
    """Data, split, model and :class:`BCETrainer` for ``cfg`` (nothing trained yet).

    Returns:
        ``(trainer, info)``; ``info`` has ``train_rows``, ``heldout_rows``, ``train_positives``, ``pos_weight``,
        ``heldout_tasks``.

    Raises:
        RecipeError: Bad trainer keys, a store lacking successes or failures, or an unloadable model.
    """
    from datasets import Dataset

    args = cfg.trainer_args(label_names=["labels"], remove_unused_columns=False)
    episodes = episodes_for(cfg)  # data first: a useless store fails before a large model loads
    wins = sum(ep.success for ep in episodes)
    if wins == 0 or wins == len(episodes):
        have = "no episode" if not episodes else ("only successes" if wins else "only failures")
        raise RecipeError(f"the verifier needs successes and failures, but rollout.store={cfg.rollout.store!r} has "
                          f"{have} ({len(episodes)} episodes of {', '.join(cfg.tasks.families)}); mix policies, "
                          f"e.g. rollout.policy=oracle+constant:0+shotgun, and use a new rollout.store")
    train_eps, held_eps = split_by_task(episodes, args.eval_fraction, seed=args.seed)
    train_wins = sum(ep.success for ep in train_eps)
    if train_wins == 0 or train_wins == len(train_eps):
        raise RecipeError(f"after holding out {len(held_eps)} episodes the training split has only one label; "
                          f"lower trainer.eval_fraction (now {args.eval_fraction}) or add episodes")
    pos_weight = args.pos_weight or (len(train_eps) - train_wins) / train_wins
    tokenizer = load_tokenizer(cfg.model.name_or_path)
    train_ds = Dataset.from_list(_rows(train_eps, tokenizer, args.max_length))
    eval_ds = Dataset.from_list(_rows(held_eps, tokenizer, args.max_length)) if held_eps else None
    if eval_ds is None and args.eval_strategy != "no":
        raise RecipeError(f"trainer.eval_strategy={args.eval_strategy.value!r} needs held-out tasks; set "
                          f"trainer.eval_fraction > 0 or trainer.eval_strategy=no")
    model = load_verifier_model(cfg.model, tokenizer)
    if cfg.model.lora is not None:
        from peft import get_peft_model

        model = get_peft_model(model, dataclasses.replace(lora_config(cfg.model.lora), task_type="SEQ_CLS"))
    if getattr(args, "gradient_checkpointing", False) or getattr(args, "activation_checkpointing", False):
        model.config.use_cache = False
    trainer = BCETrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                         processing_class=tokenizer, data_collator=collate(tokenizer.pad_token_id),
                         compute_metrics=compute_metrics, pos_weight=pos_weight)
    info = {"train_rows": len(train_eps), "train_positives": train_wins, "heldout_rows": len(held_eps),
            "heldout_tasks": len({ep.task_id for ep in held_eps}), "pos_weight": round(pos_weight, 6),
            "max_length": args.max_length}
    return trainer, info


def run(cfg: RecipeConfig) -> dict[str, Any]:
    """Train the verifier as the recipe says and save it into ``cfg.output.dir``; see the trainers' contract.

    Returns:
        The run summary of :func:`medagentgym.medcopilot.trainers._common.finish_run` plus ``heldout`` (``eval_auroc``,
        ``eval_accuracy``, ``eval_loss``, ...; empty without held-out tasks) and the data counts.
    """
    if cfg.method != "verifier":
        raise RecipeError(f"method={cfg.method!r} reached the verifier trainer; set method: verifier")
    trainer, info = build_trainer(cfg)
    trainable, total = trainable_parameter_count(trainer.model)
    resumed_from = resume_checkpoint(cfg.trainer, cfg.output.dir)
    print(f"[verifier] {info['train_rows']} training episodes ({info['train_positives']} correct, pos_weight "
          f"{info['pos_weight']:.3g}), {info['heldout_rows']} held out from {info['heldout_tasks']} tasks; "
          f"trainable parameters {trainable:,} of {total:,}; resuming from {resumed_from or 'scratch'}", flush=True)
    output = trainer.train(resume_from_checkpoint=resumed_from)
    heldout = trainer.evaluate() if trainer.eval_dataset is not None else {}
    heldout = {k: v for k, v in heldout.items() if isinstance(v, (int, float))}
    summary = finish_run(trainer, cfg, output, resumed_from=resumed_from, n_rows=info["train_rows"],
                         extra={**{k: v for k, v in info.items() if k != "train_rows"}, "heldout": heldout})
    if trainer.is_world_process_zero():  # mark the folder as a verifier, with how it reads text
        base = trainer.model.config._name_or_path if hasattr(trainer.model, "config") else cfg.model.name_or_path
        write_verifier_config(cfg.output.dir, max_length=info["max_length"], base_model=str(base), metrics=heldout)
    auc = heldout.get("eval_auroc")
    print(f"[verifier] held out: AUROC {'n/a' if auc is None else f'{auc:.3f}'}, accuracy "
          f"{heldout.get('eval_accuracy', float('nan')):.3f}", flush=True)
    return summary
