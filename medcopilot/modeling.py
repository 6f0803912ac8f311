"""Model, tokenizer and LoRA loading for the trainers: one place that picks dtype and device.

``model.name_or_path`` may name a Hub model, a full local model folder, or a folder that holds only a LoRA adapter
(``adapter_config.json``, e.g. the output of an SFT run with LoRA). An adapter is loaded on its base model and merged,
so a later stage (DPO after SFT, GRPO after SFT) starts from the SFT weights and may add fresh adapters of its own.
Merges are done in fp32 (the base and every adapter of a chain) and the result is cast to the recipe's dtype once:
merging into bf16 weights rounds every stage's update away where it is smaller than half a bf16 step of the
weight (a 1e-3 relative update kept about half its effect per merge when measured).

Example:
    >>> model = load_model(cfg.model)            # doctest: +SKIP
    >>> tokenizer = load_tokenizer(cfg.model.name_or_path)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from medagentgym.medcopilot.config import LoraSpec, ModelConfig, RecipeError

ADAPTER_CONFIG = "adapter_config.json"


def resolve_dtype(name: str = "auto") -> Any:
    """Map a recipe dtype to a ``torch.dtype``: ``auto`` is bfloat16 on a GPU and float32 on CPU.

    Args:
        name: ``auto``, ``bfloat16``, ``float16`` or ``float32``.

    Returns:
        The ``torch.dtype``.
    """
    import torch

    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def adapter_base(path: str | os.PathLike) -> str | None:
    """Base model named by a LoRA adapter folder, or None when ``path`` is not an adapter folder."""
    config = Path(path) / ADAPTER_CONFIG
    if not config.is_file():
        return None
    base = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base:
        raise RecipeError(f"{config} names no base_model_name_or_path; set it to the model the adapter was trained on")
    return base


def load_tokenizer(name_or_path: str) -> Any:
    """Load the tokenizer of a model (or of an adapter folder's base model when the folder has none).

    Qwen2.5 tokenizers come with ``<|endoftext|>`` as pad; a tokenizer without a pad token gets eos as pad.

    Raises:
        RecipeError: If nothing loadable is at ``name_or_path``.
    """
    from transformers import AutoTokenizer

    source = name_or_path
    for _ in range(8):  # an adapter folder without tokenizer files: use its base's (adapters may stack)
        if not adapter_base(source) or (Path(source) / "tokenizer_config.json").is_file():
            break
        source = adapter_base(source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise RecipeError(f"cannot load a tokenizer from model.name_or_path={source!r}: {_first_line(exc)}") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(spec: ModelConfig, *, _depth: int = 0) -> Any:
    """Load the causal LM named by ``spec`` with the chosen dtype, merging a LoRA adapter folder into its base.

    Adapters stack: a DPO adapter trained on a merged SFT adapter names the SFT folder as its base, so loading it
    merges SFT first, then DPO. The merged model's ``name_or_path`` is set to the adapter folder, so a new adapter
    trained on it records that folder (not the original base) as its base model. Local folders are recorded as
    absolute paths. A chain is loaded and merged in fp32 (4 bytes per parameter in CPU memory: ~59 GB for a 14B
    model) and cast to ``spec.dtype`` once at the end.

    Args:
        spec: The recipe's ``model`` section (``lora`` is not applied here: see :func:`lora_config`).

    Returns:
        A ``transformers`` ``PreTrainedModel`` on CPU (the trainer moves it to the accelerator).

    Raises:
        RecipeError: If the model or adapter cannot be loaded, or adapters chain more than 8 deep.
    """
    from transformers import AutoModelForCausalLM

    path = _absolute_if_local(spec.name_or_path)
    base = adapter_base(path)
    if base is not None:
        if _depth >= 8:
            raise RecipeError(f"{path}: adapters chain more than 8 deep; export a merged model and start from it")
        # The whole chain in fp32: every merge adds an update to exact weights; one rounding at the end.
        model = load_model(dataclasses.replace(spec, name_or_path=base, dtype="float32"), _depth=_depth + 1)
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, path).merge_and_unload()
        if _depth == 0:
            model = model.to(resolve_dtype(spec.dtype))
        model.requires_grad_(True)  # merged weights come back frozen; full fine-tuning after an adapter needs them
        model.name_or_path = path
        model.config._name_or_path = path
        return model
    kwargs: dict[str, Any] = {"dtype": resolve_dtype(spec.dtype)}
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as exc:
        raise RecipeError(f"cannot load model.name_or_path={path!r}: {_first_line(exc)}") from exc


def _absolute_if_local(name_or_path: str) -> str:
    """Absolute path for an existing local folder (so adapters record a cwd-independent base); else unchanged."""
    return str(Path(name_or_path).resolve()) if Path(name_or_path).is_dir() else name_or_path


def lora_config(spec: LoraSpec | None) -> Any:
    """peft ``LoraConfig`` for causal-LM training from the recipe's ``model.lora`` (None: full fine-tuning)."""
    if spec is None:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=spec.target_modules,
        task_type="CAUSAL_LM",
    )


def last_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest ``checkpoint-<step>`` folder under ``output_dir`` that holds a trainer state, or None."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    steps = []
    for child in root.iterdir():
        name = child.name
        if name.startswith("checkpoint-") and name[11:].isdigit() and (child / "trainer_state.json").is_file():
            steps.append((int(name[11:]), child))
    return str(max(steps)[1]) if steps else None


def resume_checkpoint(cfg_trainer: dict[str, Any], output_dir: str | os.PathLike) -> str | None:
    """Checkpoint to resume from: the recipe's ``trainer.resume_from_checkpoint`` if set, else the newest one.

    Set ``trainer.resume_from_checkpoint`` to a checkpoint path to pick one; to start over, use a new ``output.dir``.
    """
    explicit = cfg_trainer.get("resume_from_checkpoint")
    if explicit:
        if not Path(explicit).is_dir():
            raise RecipeError(f"trainer.resume_from_checkpoint={explicit!r} does not exist; point it at a "
                              f"checkpoint-<step> folder or remove it to resume from the newest one")
        return str(explicit)
    return last_checkpoint(output_dir)


def trainable_parameter_count(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts of ``model``."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def save_pretrained_atomic(out: str | os.PathLike, model: Any, tokenizer: Any,
                           extra_files: dict[str, str] | None = None) -> Path:
    """Save ``model`` and ``tokenizer`` (plus text ``extra_files``, name -> content) as the folder ``out``.

    Everything is written into a temporary sibling first, which then replaces ``out``: a killed run leaves the
    old folder or the new one, never half of one. Returns ``out`` as a ``Path``.
    """
    import shutil
    import tempfile

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is meant to be shared
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = [
    "adapter_base",
    "last_checkpoint",
    "load_model",
    "load_tokenizer",
    "lora_config",
    "resolve_dtype",
    "resume_checkpoint",
    "save_pretrained_atomic",
    "trainable_parameter_count",
]
