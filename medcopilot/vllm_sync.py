"""Weight sync to vLLM that never touches the frozen base and keeps small updates: merged LoRA weights computed
into fresh tensors in fp32, rounded to bf16 without bias.

TRL 1.16 pushes a LoRA policy to its vLLM engine by merging the adapters into the base weights *in place*
(``model.merge_adapter()``), streaming the parameters, and unmerging them (``unmerge_adapter()``), once per step.
In bf16 each merge and unmerge rounds: ``(W + d) - d != W``. Over a run the frozen base drifts (measured on CPU:
500 cycles with a changing adapter changed about half of the base's weights, by a fifth of the update's own size),
so the model being trained is no longer "base + adapter", and the KL reference (the base with adapters off)
moves too.

:func:`install_exact_sync` replaces the parameter walk of one ``trl.generation.vllm_generation.VLLMGeneration``:
every LoRA-adapted weight is computed as ``W.float() + scaling * B.float() @ A.float()`` in a new tensor (fp32
arithmetic) and handed to vLLM under the name TRL would have used; every other parameter is passed as it is. The
base is only read.

Rounding the merged weight to the engine's bf16 is where a small update is lost: rounded to nearest, a weight
whose update is below half a bf16 step of it (2^-9 of its size) stays the base's, so vLLM sampled from a model
that had 0.53 of a 1e-3 relative update and none of a 1e-4 one (early RL at a LoRA learning rate of 1e-5 lives
there; the policy being trained computes ``base + adapter`` unmerged and has all of it). Here bf16 weights are
rounded **stochastically** (:func:`round_bf16_unbiased`): up or down to the two neighbouring bf16 values with
the probabilities that make the expectation the exact fp32 merge. The sampler's weights then carry the whole
update in expectation (measured on the bf16-stored tiny model, 3 seeds: 0.96-1.00 of a 1e-4 and 0.99-1.00 of a
1e-3 update, where rounding to nearest kept 0.07 and 0.54-0.55; tests/medcopilot/test_gpu_path.py), every weight is within one
bf16 step of the exact merge (the lag is bounded by one step, and zero mean), and a weight whose merge is a bf16
value (every weight with no update) is sent exactly. Each sync draws fresh rounding (seeded by the sync's number,
so a run repeats). fp16 and fp32 engines get the merge rounded to nearest. vLLM's own LoRA (adapters served
unmerged) would avoid the rounding altogether, but TRL 1.16 builds its colocated engine without LoRA support. Everything else of TRL's sync (waking a sleeping engine,
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

__all__ = ["exact_named_params", "install_exact_sync", "merged_weight", "round_bf16_unbiased"]


def round_bf16_unbiased(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` (fp32) rounded stochastically to bf16: to the bf16 value below or above with the probabilities that
    make ``E[result] == x`` exactly; values already representable in bf16 come back unchanged.

    bf16 is fp32 with the low 16 bits cut off, so adding 16 uniform random bits to the fp32 bit pattern and then
    cutting them rounds the magnitude up with probability (cut bits) / 2**16. Non-finite values round to nearest.
    """
    if x.dtype != torch.float32:
        raise TypeError(f"round_bf16_unbiased takes fp32, not {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, dtype=torch.int32, device=x.device, generator=generator)
    # no carry reaches the sign bit: the largest finite magnitude 0x7F7FFFFF plus 0xFFFF stays below 0x80000000
    out = ((bits + noise) & -65536).view(torch.float32).to(torch.bfloat16)  # low bits zero: the cast is exact
    return torch.where(torch.isfinite(x), out, x.to(torch.bfloat16))


def merged_weight(layer: Any, generator: torch.Generator | None = None) -> torch.Tensor:
    """``base + sum of active adapters' deltas`` of one peft LoRA ``Linear``, in fp32, cast once to the base dtype
    (bf16: :func:`round_bf16_unbiased` with ``generator``; others: to nearest).

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
    if weight.dtype == torch.bfloat16:
        return round_bf16_unbiased(out, generator)
    return out.to(weight.dtype)


def exact_named_params(vg: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The ``(vLLM name, tensor)`` stream of ``vg.model`` with LoRA merged exactly and rounded without bias (see
    the module docstring). Each call is one sync: its rounding is seeded by ``vg``'s sync count and seed.

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
    vg._medcopilot_syncs = getattr(vg, "_medcopilot_syncs", 0) + 1
    generators: dict[torch.device, torch.Generator] = {}

    def generator(device: torch.device) -> torch.Generator:
        if device not in generators:  # one stream per device, seeded by (seed, sync number)
            seed = int(getattr(vg, "_medcopilot_seed", 0)) * 1_000_003 + vg._medcopilot_syncs
            generators[device] = torch.Generator(device=device).manual_seed(seed)
        return generators[device]

    with vg._dist.gather_params(list(model.parameters())):  # ZeRO-3: whole weights; otherwise a no-op
        for name, param in model.named_parameters():
            clean = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in clean or "original_module" in clean:  # adapter weights; modules_to_save copies
                continue
            clean = vg._fix_param_name_to_vllm(clean, extra_prefixes=["modules_to_save.default."])
            layer = owners.get(name)
            yield clean, (merged_weight(layer, generator(param.device)) if layer is not None else param.data)


def install_exact_sync(vg: Any, seed: int = 0) -> Any:
    """Make ``vg.sync_weights()`` (TRL's) stream :func:`exact_named_params`; returns ``vg``.

    ``seed`` seeds the unbiased rounding (with the sync's number): the same run sends the same weights.

    Only the parameter walk changes: TRL's ``sync_weights`` still wakes the engine, loads the weights in colocate
    or server mode and resets the prefix cache.
    """
    vg._medcopilot_seed = int(seed)
    vg._iter_named_params = types.MethodType(exact_named_params, vg)
    return vg
