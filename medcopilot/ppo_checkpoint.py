"""PPO checkpoints: what ``checkpoint-<step>/`` holds, written atomically, and read back on resume.

A checkpoint of :class:`medagentgym.medcopilot.trainers.ppo.PPOTrainer` holds:

- the policy: ``adapter_model.safetensors`` + ``adapter_config.json`` under LoRA, else ``model*.safetensors`` +
  ``config.json``; the tokenizer files; ``value_head.safetensors``;
- ``optimizer.pt`` (AdamW state, policy and value head) and ``scheduler.pt``;
- ``rng_state_<rank>.pth`` per process (Python, NumPy, torch CPU and CUDA generators);
- ``trainer_state.json`` (:class:`TrainerState`: step, KL coefficient, log history), written last.

The folder is filled under ``.checkpoint-<step>.tmp`` and renamed, so ``checkpoint-<step>`` exists only when
complete (``medagentgym.medcopilot.modeling.last_checkpoint`` also requires its ``trainer_state.json``). Episode seeds and
the data order are functions of the step, so they need no state of their own.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medagentgym.medcopilot.config import RecipeError
from medagentgym.tasks.base import write_bytes_atomic

__all__ = ["TrainerState", "load_checkpoint", "load_policy_weights", "save_checkpoint", "write_json"]

VALUE_HEAD = "value_head.safetensors"


@dataclass
class TrainerState:
    """What ``trainer_state.json`` holds (the fields ``finish_run`` and the tests read)."""

    global_step: int = 0
    max_steps: int = 0
    kl_coef: float = 0.0
    log_history: list[dict[str, Any]] = field(default_factory=list)


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON atomically (temporary file + rename)."""
    write_bytes_atomic(path, (json.dumps(data, indent=2, default=str) + "\n").encode("utf-8"))


def save_checkpoint(trainer: Any) -> Path:
    """Write ``<output_dir>/checkpoint-<step>`` of a ``PPOTrainer`` (all processes call it; rank 0 writes most).

    Returns:
        The checkpoint folder.
    """
    acc, step = trainer.accelerator, trainer.state.global_step
    final = trainer.output_dir / f"checkpoint-{step}"
    tmp = trainer.output_dir / f".checkpoint-{step}.tmp"
    if acc.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    acc.wait_for_everyone()
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
           "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    torch.save(rng, tmp / f"rng_state_{acc.process_index}.pth")
    if acc.is_main_process:
        trainer.save_model(tmp)
        torch.save(trainer.optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(trainer.scheduler.state_dict(), tmp / "scheduler.pt")
        trainer.save_state(tmp)  # last: last_checkpoint only counts folders that have it
    acc.wait_for_everyone()
    if acc.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _rotate(trainer.output_dir, trainer.args.save_total_limit)
    acc.wait_for_everyone()
    return final


def _rotate(output_dir: Path, limit: int | None) -> None:
    """Delete the oldest checkpoints beyond ``limit`` (None keeps all)."""
    found = sorted((int(p.name[11:]), p) for p in output_dir.glob("checkpoint-*") if p.name[11:].isdigit())
    for _, path in found[:-limit] if limit else []:
        shutil.rmtree(path, ignore_errors=True)


def load_checkpoint(trainer: Any, path: str | os.PathLike) -> TrainerState:
    """Restore a ``PPOTrainer``'s weights, value head, optimizer, scheduler and RNG from ``path``.

    Returns:
        The saved :class:`TrainerState` (the caller installs it and the KL coefficient).

    Raises:
        RecipeError: A checkpoint whose weights do not fit this model (another model or LoRA setting).
    """
    from safetensors.torch import load_file

    path, acc = Path(path), trainer.accelerator
    unwrapped = acc.unwrap_model(trainer.model)
    device = str(acc.device)
    load_policy_weights(unwrapped.policy, path, device)
    unwrapped.value_head.load_state_dict(load_file(str(path / VALUE_HEAD), device=device))
    trainer.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device))
    trainer.scheduler.load_state_dict(torch.load(path / "scheduler.pt"))
    rng_file = path / f"rng_state_{acc.process_index}.pth"
    rng = torch.load(rng_file if rng_file.is_file() else path / "rng_state_0.pth", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    saved = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    return TrainerState(global_step=int(saved["global_step"]), max_steps=int(saved.get("max_steps", 0)),
                        kl_coef=float(saved["kl_coef"]), log_history=list(saved["log_history"]))


def load_policy_weights(policy: Any, path: Path, device: str) -> None:
    """Load a checkpoint's LoRA adapter (into a ``PeftModel``) or full weights into ``policy`` in place.

    Weights tied to another tensor (the tiny model's LM head) are not in the saved file and are not required.

    Raises:
        RecipeError: The checkpoint lacks the weights this policy needs, or they do not fit it.
    """
    from safetensors.torch import load_file

    if hasattr(policy, "disable_adapter"):
        from peft import set_peft_model_state_dict

        adapter = path / "adapter_model.safetensors"
        if not adapter.is_file():
            raise RecipeError(f"{path} holds no LoRA adapter but model.lora is set; resume with the same model.lora "
                              f"or start a new output.dir")
        set_peft_model_state_dict(policy, load_file(str(adapter), device=device))
        return
    files = sorted(path.glob("model*.safetensors"))
    if not files:
        raise RecipeError(f"{path} holds no full model weights (model*.safetensors) but model.lora is null; resume "
                          f"with the same model.lora or start a new output.dir")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file), device=device))
    missing, unexpected = policy.load_state_dict(state, strict=False)
    current = policy.state_dict()
    loaded_storage = {current[k].data_ptr() for k in state if k in current}
    untied = [k for k in missing if current[k].data_ptr() not in loaded_storage]
    if unexpected or untied:
        raise RecipeError(f"{path} does not fit the model: missing {untied[:3]}, unexpected {unexpected[:3]}; "
                          f"resume with the same model.name_or_path or start a new output.dir")
