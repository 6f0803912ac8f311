"""Weight sync to vLLM that never touches the frozen base: merged LoRA weights computed into fresh tensors.

TRL 1.16 pushes a LoRA policy to its vLLM engine by merging the adapters into the base weights *in place*
(``model.merge_adapter()``), streaming the parameters, and unmerging them (``unmerge_adapter()``), once per step.
In bf16 each merge and unmerge rounds: ``(W + d) - d != W``. Over a run the frozen base drifts (measured on CPU:
500 cycles with a changing adapter changed about half of the base's weights, by a fifth of the update's own size),
so the model being trained is no longer "base + adapter", and the KL reference (the base with adapters off)
moves too.

:func:`install_exact_sync` replaces the parameter walk of one ``trl.generation.vllm_generation.VLLMGeneration``:
every LoRA-adapted weight is computed as ``(W.float() + scaling * B.float() @ A.float()).to(W.dtype)`` in a new
tensor (fp32 arithmetic, rounded once) and handed to vLLM under the name TRL would have used; every other
parameter is passed as it is. The base is only read. Everything else of TRL's sync (waking a sleeping engine,
server or colocate mode, resetting the prefix cache, gathering ZeRO-3 shards) is TRL's own code.

Example:
    >>> trainer = GRPOTrainer(..., args=GRPOConfig(use_vllm=True, ...), peft_config=lora)  # doctest: +SKIP
    >>> install_exact_sync(trainer.vllm_generation)  # doctest: +SKIP
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["exact_named_params", "install_exact_sync", "merged_weight"]


def merged_weight(layer: Any) -> torch.Tensor:
    """``base + sum of active adapters' deltas`` of one peft LoRA ``Linear``, in fp32, cast once to the base dtype.

    Raises:
        NotImplementedError: A layer this cannot merge exactly (DoRA, a non-Linear LoRA layer, merged adapters).
    """
    from peft.tuners.lora.layer import Linear as LoraLinear

    if not isinstance(layer, LoraLinear):
        raise NotImplementedError(f"exact vLLM sync merges LoRA Linear layers only, not {type(layer).__name__}; "
                                  f"target linear modules (model.lora.target_modules: all-linear)")
    if getattr(layer, "merged", False):
        raise NotImplementedError("the adapters are merged into the base already; exact sync needs them unmerged")
    weight = layer.get_base_layer().weight
    out = weight.detach().to(torch.float32, copy=True)
    for name in layer.active_adapters:
        if name not in layer.lora_A:
            continue
        if layer.use_dora.get(name, False):
            raise NotImplementedError("exact vLLM sync does not merge DoRA adapters; set use_dora=False")
        a = layer.lora_A[name].weight.detach().to(device=out.device, dtype=torch.float32)
        b = layer.lora_B[name].weight.detach().to(device=out.device, dtype=torch.float32)
        delta = (b @ a) * float(layer.scaling[name])
        out += delta.T if layer.fan_in_fan_out else delta
    return out.to(weight.dtype)


def exact_named_params(vg: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The ``(vLLM name, tensor)`` stream of ``vg.model`` with LoRA merged exactly (see the module docstring).

    Args:
        vg: TRL's ``VLLMGeneration`` (its ``model``, ``_dist`` and name mapping are used).

    Raises:
        NotImplementedError: FSDP (whose parameter walk is TRL's own, merge included) or a layer
            :func:`merged_weight` cannot merge.
    """
    from accelerate.utils import is_peft_model
    from peft.tuners.lora import LoraLayer

    model = vg.model
    if not is_peft_model(model):  # nothing is merged: TRL's walk only reads the parameters
        yield from type(vg)._iter_named_params(vg)
        return
    if vg._dist.is_fsdp:
        raise NotImplementedError("exact LoRA sync to vLLM is not implemented under FSDP; use DDP or DeepSpeed")
    owners = {f"{name}.base_layer.weight": module for name, module in model.named_modules()
              if isinstance(module, LoraLayer)}
    with vg._dist.gather_params(list(model.parameters())):  # ZeRO-3: whole weights; otherwise a no-op
        for name, param in model.named_parameters():
            clean = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in clean or "original_module" in clean:  # adapter weights; modules_to_save copies
                continue
            clean = vg._fix_param_name_to_vllm(clean, extra_prefixes=["modules_to_save.default."])
            layer = owners.get(name)
            yield clean, (merged_weight(layer) if layer is not None else param.data)


def install_exact_sync(vg: Any) -> Any:
    """Make ``vg.sync_weights()`` (TRL's) stream :func:`exact_named_params`; returns ``vg``.

    Only the parameter walk changes: TRL's ``sync_weights`` still wakes the engine, loads the weights in colocate
    or server mode and resets the prefix cache.
    """
    vg._iter_named_params = types.MethodType(exact_named_params, vg)
    return vg
