"""Supervised fine-tuning on successful multi-turn episodes (TRL ``SFTTrainer``).

Reads top to bottom: data → model → trainer → train → save (data first, so a bad store fails fast).

* Data: the successful episodes in the trajectory store ``rollout.store`` (see :mod:`medagentgym.medcopilot.data`), as
  conversations: system prompt, question, the model's raw turns and the environment's observations.
* Loss: ``assistant_only_loss=True`` (fixed here, not a recipe choice): only assistant turns, each including its
  ``<|im_end|>``, are trained; observations and prompts are context. TRL does this by swapping the Qwen2.5 chat
  template for its training variant with generation markers, which is why the template must be the stock one.
* LoRA when ``model.lora`` is set, full fine-tuning otherwise. Resumes from the newest checkpoint in
  ``output.dir`` automatically.

Example:
    >>> summary = run(load_recipe("sft_tiny", ["trainer.max_steps=2"]))   # doctest: +SKIP
    >>> summary["global_step"]
    2
"""

from __future__ import annotations

from typing import Any

from medagentgym.medcopilot.config import RecipeConfig, RecipeError
from medagentgym.medcopilot.data import fit_rows, sft_rows, to_dataset
from medagentgym.medcopilot.mixture import mixed_rows
from medagentgym.medcopilot.modeling import load_model, load_tokenizer, lora_config, resume_checkpoint, trainable_parameter_count
from medagentgym.medcopilot.trainers._common import episodes_for, finish_run

__all__ = ["build_trainer", "run"]


def build_trainer(cfg: RecipeConfig, *, model: Any = None, tokenizer: Any = None,
                  rows: list[dict[str, Any]] | None = None) -> tuple[Any, int]:
    """Model, data and ``SFTTrainer`` for ``cfg`` (nothing trained yet).

    ``model``, ``tokenizer`` and ``rows`` (conversations: ``{"messages", "tools"?}``) replace what the recipe
    names (``scripts/bench_gpu.py`` passes a randomly initialised model and conversations of a set length).

    Returns:
        ``(trainer, n_rows)``: the trainer, and the number of training conversations.

    Raises:
        RecipeError: Bad trainer keys, an unloadable model, or a store with no successful episode.
    """
    from trl import SFTTrainer

    # Data first: a store with nothing to train on should fail before minutes of loading a large model.
    # Successful episodes only; every row ends on an assistant turn.
    if rows is None:
        rows = mixed_rows(cfg.tasks, episodes_for(cfg), sft_rows, seed=int(cfg.trainer.get("seed", 0)), tag="sft")
    to_dataset(rows, what="sft")  # an empty store fails here, before any loading
    # Model (its tokenizer first: a template that drops `tools` gets the schemas in the system message).
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(cfg.model.name_or_path)
    dataset = to_dataset(fit_rows(rows, tokenizer), what="sft")
    model = model if model is not None else load_model(cfg.model)
    # Trainer: the recipe's trainer keys win, except that only assistant tokens are ever trained.
    if cfg.trainer.get("assistant_only_loss") is False:
        raise RecipeError("trainer.assistant_only_loss=False is not supported: SFT never trains on observations; "
                          "remove the key")
    args = cfg.trainer_args(assistant_only_loss=True)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg.model.lora),
    )
    if len(trainer.train_dataset) == 0:  # TRL drops rows whose assistant turns were all truncated away
        raise RecipeError(f"all {len(rows)} conversations lost every assistant token to truncation at "
                          f"trainer.max_length={args.max_length}; raise trainer.max_length")
    return trainer, len(rows)


def run(cfg: RecipeConfig) -> dict[str, Any]:
    """Train SFT as the recipe says and save into ``cfg.output.dir``; see the trainers' contract.

    Returns:
        The run summary (``output_dir``, ``global_step``, ``resumed_from``, ``train_rows``, ``metrics``).
    """
    trainer, n_rows = build_trainer(cfg)
    trainable, total = trainable_parameter_count(trainer.model)
    resumed_from = resume_checkpoint(cfg.trainer, cfg.output.dir)
    print(f"[sft] {n_rows} conversations; trainable parameters {trainable:,} of {total:,}; "
          f"resuming from {resumed_from or 'scratch'}", flush=True)
    output = trainer.train(resume_from_checkpoint=resumed_from)
    return finish_run(trainer, cfg, output, resumed_from=resumed_from, n_rows=n_rows)
