"""Direct preference optimisation on success-vs-failure pairs of the same task (TRL ``DPOTrainer``).

Reads top to bottom: data → model → trainer → train → save (data first, so a bad store fails fast).

* Data: for each task in the trajectory store ``rollout.store``, a successful and a failed episode are cut at the
  first message where they differ, which must be an assistant turn: the shared history is the ``prompt``, the
  success's turn ``chosen`` and the failure's turn ``rejected`` (:func:`medagentgym.medcopilot.data.dpo_pairs`). DPO cannot
  mask tokens inside a completion, so a completion is exactly one assistant turn: no environment text is trained.
* Model: ``model.name_or_path`` may be an SFT output folder; a LoRA adapter there is merged into its base first
  (SFT-warmed DPO), and the merged weights are also the reference model. ``model.lora`` adds fresh adapters; the
  reference is then the same model with adapters disabled (no second copy in memory).
* Resumes from the newest checkpoint in ``output.dir`` automatically.

Example:
    >>> summary = run(load_recipe("dpo_tiny", ["model.name_or_path=runs/sft_tiny"]))   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from medagentgym.medcopilot.config import RecipeConfig
from medagentgym.medcopilot.data import dpo_pairs, fit_rows, to_dataset
from medagentgym.medcopilot.mixture import mixed_rows
from medagentgym.medcopilot.modeling import load_model, load_tokenizer, lora_config, resume_checkpoint, trainable_parameter_count
from medagentgym.medcopilot.trainers._common import episodes_for, finish_run

#: Pairs kept per task, so tasks with many samples do not dominate the preference data.
MAX_PAIRS_PER_TASK = 4

__all__ = ["MAX_PAIRS_PER_TASK", "build_trainer", "run"]


def build_trainer(cfg: RecipeConfig) -> tuple[Any, int]:
    """Model, preference pairs and ``DPOTrainer`` for ``cfg`` (nothing trained yet).

    Returns:
        ``(trainer, n_pairs)``.

    Raises:
        RecipeError: Bad trainer keys, an unloadable model, or a store without a usable pair.
    """
    from trl import DPOTrainer

    # Data first (fail fast on a bad store): shared history + one divergent assistant turn per pair.
    rows = mixed_rows(cfg.tasks, episodes_for(cfg), lambda eps: dpo_pairs(eps, max_pairs_per_task=MAX_PAIRS_PER_TASK),
                      seed=int(cfg.trainer.get("seed", 0)), tag="dpo")
    to_dataset(rows, what="dpo")  # an empty store fails here, before any loading
    # Model (an SFT adapter folder is merged into its base here); a template that drops `tools` gets the
    # schemas in the system message.
    tokenizer = load_tokenizer(cfg.model.name_or_path)
    dataset = to_dataset(fit_rows(rows, tokenizer), what="dpo").remove_columns(["task_id"])
    model = load_model(cfg.model)
    # Trainer: with LoRA the reference is the adapter-free model; without, TRL keeps a frozen copy.
    trainer = DPOTrainer(
        model=model,
        args=cfg.trainer_args(),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg.model.lora),
    )
    return trainer, len(rows)


def run(cfg: RecipeConfig) -> dict[str, Any]:
    """Train DPO as the recipe says and save into ``cfg.output.dir``; see the trainers' contract.

    Returns:
        The run summary (``output_dir``, ``global_step``, ``resumed_from``, ``train_rows``, ``metrics``).
    """
    trainer, n_pairs = build_trainer(cfg)
    trainable, total = trainable_parameter_count(trainer.model)
    resumed_from = resume_checkpoint(cfg.trainer, cfg.output.dir)
    print(f"[dpo] {n_pairs} preference pairs; trainable parameters {trainable:,} of {total:,}; "
          f"resuming from {resumed_from or 'scratch'}", flush=True)
    output = trainer.train(resume_from_checkpoint=resumed_from)
    return finish_run(trainer, cfg, output, resumed_from=resumed_from, n_rows=n_pairs)
