"""Checks that a recipe can run as configured, before any model is loaded (``train.py --dry-run``).

:func:`medagentgym.medcopilot.config.check_recipe` calls :func:`check_runnable` after the trainer section has been built.
It refuses, with one line each:

- an attention kernel that no extra of this package installs (``sdpa`` and ``eager`` come with torch,
  ``flash_attention_2`` with the ``flash`` extra and needs bf16/fp16 weights);
- a vLLM stage whose starting model is an adapter-only folder whose chain of bases does not end at a full model
  (the GRPO trainer hands vLLM that base model and syncs the merged weights before the first generation);
- nothing about logging: a recipe whose ``trainer.report_to`` names wandb on a machine with no wandb key
  (``WANDB_API_KEY`` or a ``~/.netrc`` entry) and no ``WANDB_MODE`` runs wandb **offline** (:func:`wandb_mode`
  sets ``WANDB_MODE=offline`` and ``--dry-run`` says so), where wandb would otherwise stop the launch;
- memory settings that cannot work on the target GPU: a vLLM engine whose KV cache cannot hold one sequence of
  ``vllm_max_model_length`` tokens, a colocated engine plus the training step that do not fit together (or, in
  sleep mode, a training step that does not fit alone), and activations of one micro-batch larger than the GPU.

The memory arithmetic is an estimate for bf16 Qwen2-shaped models, deliberately simple so a recipe header can
repeat it (see :func:`memory_plan`):

- weights: ``2 * params`` bytes; vLLM's KV cache: ``2 (K, V) * layers * kv_heads * head_dim * 2`` bytes per
  token (Qwen2.5-14B: 192 KiB, 7B: 56 KiB); vLLM's engine budget is ``gpu_memory_utilization * GPU``, of which
  the weights and ~2 GiB of activations and CUDA graphs are taken before the KV cache;
- training: weights, LoRA adapters with their gradients and Adam states (16 bytes per adapter parameter; full
  fine-tuning: 16 bytes per parameter), 3 GiB of CUDA context and allocator slack, and per micro-batch the
  checkpointed hidden states (``layers * hidden * 2`` bytes per token), one layer's recomputed activations
  (``(6 * hidden + 3 * intermediate) * 2`` bytes per token) and the logits of the scored tokens, which depend on
  how the trainer computes them (:data:`LOGITS_BYTES`): SFT/DPO materialise them (``vocab * 10`` bytes per token:
  bf16 logits, their fp32 log-softmax and its gradient); our PPO loss (:func:`medagentgym.medcopilot.ppo.completion_logprobs`)
  peaks at ``vocab * 20`` bytes per token (measured: fp32 logits kept for backward, the log-sum-exp and gather
  gradients, the no-grad entropy); TRL's GRPO never materialises them (its fused LM head works in tiles of
  4,096 tokens x 32,768 vocabulary entries: ~4 such bf16 tiles plus ``hidden * 10`` bytes per token);
- generation with ``model.generate`` (the ``transformers`` backend: PPO always, GRPO with ``rollout.backend:
  transformers``): the weights and trainable states stay resident, and the episodes in flight
  (``rollout.concurrency``, each up to prompt + whole episode tokens, left-padded to the longest) hold their KV
  cache (``kv_bytes_per_token`` each) plus, during the prefill of a batch, one layer's activations for every
  context token (no gradient, so nothing else is kept). Turns re-read their whole context, so a late turn
  prefills nearly the whole episode.

The target GPU is ``$MEDCOPILOT_GPU_GIB`` when set, else the visible CUDA device, else an 80 GB card (79.2 GiB
usable); the recipes' headers state their arithmetic against that figure.

Example:
    >>> shape = model_shape("Qwen/Qwen2.5-14B-Instruct")
    >>> round(shape.kv_bytes_per_token / 1024)
    192
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medagentgym.medcopilot.config import RecipeConfig, RecipeError

__all__ = ["ATTENTION_KERNELS", "LOGITS_BYTES", "ModelShape", "check_runnable", "gpu_gib", "logits_gib", "memory_plan",
           "model_shape", "recipe_memory_plan", "shape_from_config", "vllm_base_model", "wandb_mode"]

GIB = 1024 ** 3
#: Usable memory of an 80 GB GPU (H100/A100-80G report ~79.2 GiB to torch).
DEFAULT_GPU_GIB = 79.2
#: vLLM's own activations (profiling peak) and CUDA graphs, taken from its budget before the KV cache.
VLLM_OVERHEAD_GIB = 2.0
#: CUDA context, NCCL buffers and allocator fragmentation on the training side.
TRAIN_SLACK_GIB = 3.0
#: Memory a colocated run must leave free on the GPU while vLLM generates (GiB): the arithmetic's own error (vLLM's
#: activations and CUDA graphs are the ~2 GiB guess above, the allocator's fragmentation after an update is not
#: counted) must not be what decides whether a run fits. Issue #32: the 14B GRPO recipe had 3.1 GiB.
GENERATION_HEADROOM_GIB = 4.0
#: What a sleeping vLLM engine (level 1: weights offloaded to CPU, KV cache freed) still holds.
VLLM_ASLEEP_GIB = 1.0
#: Prompt tokens assumed when a recipe gives no bound (the MedAgentGym opening chats are 1-4k tokens).
PROMPT_TOKENS = 4096
#: Bytes per (scored token x vocabulary entry) of the logits in one training micro-batch, per method (see the module
#: docstring; ``ppo`` was measured on CPU with torch's profiler: 20.0 with gradients, 12.0 without).
LOGITS_BYTES = {"sft": 10, "dpo": 10, "verifier": 10, "ppo": 20}
#: TRL's fused LM head (GRPO): tokens x vocabulary entries of one projection tile (trl.kernels.chunked_logprob).
TRL_LOGPROB_TILE = (4096, 32768)
#: attn_implementation -> the extra that installs it (None: torch itself).
ATTENTION_KERNELS: dict[str, str | None] = {"sdpa": None, "eager": None, "flash_attention_2": "flash"}


@dataclass(frozen=True)
class ModelShape:
    """What the memory arithmetic needs to know about a decoder-only model."""

    params: float  # parameters (count)
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int

    @property
    def weight_gib(self) -> float:
        """bf16 weights (GiB)."""
        return 2 * self.params / GIB

    @property
    def kv_bytes_per_token(self) -> int:
        """vLLM's bf16 K and V for one token over all layers (bytes)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    def lora_params(self, rank: int) -> float:
        """Adapter parameters of rank ``rank`` on every linear layer (q, k, v, o, gate, up, down)."""
        kv = self.kv_heads * self.head_dim
        per_layer = (2 * self.hidden + 2 * (self.hidden + kv) + 2 * self.hidden
                     + 3 * (self.hidden + self.intermediate))
        return rank * per_layer * self.layers


#: The Qwen2.5 family by size (published configs): params, layers, hidden, intermediate, KV heads, head dim, vocab.
QWEN25 = {
    "0.5b": ModelShape(0.494e9, 24, 896, 4864, 2, 64, 151936),
    "1.5b": ModelShape(1.54e9, 28, 1536, 8960, 2, 128, 151936),
    "3b": ModelShape(3.09e9, 36, 2048, 11008, 2, 128, 151936),
    "7b": ModelShape(7.62e9, 28, 3584, 18944, 4, 128, 152064),
    "14b": ModelShape(14.77e9, 48, 5120, 13824, 8, 128, 152064),
    "32b": ModelShape(32.76e9, 64, 5120, 27648, 8, 128, 152064),
}


def model_shape(name_or_path: str) -> ModelShape | None:
    """The shape of a Hub Qwen2.5 id, of a local folder's ``config.json``, or of an adapter folder's base.

    Returns:
        The shape, or None when it cannot be known without loading anything (another Hub model, a folder a
        previous sweep stage has not written yet).
    """
    base = vllm_base_model(name_or_path)
    path = Path(base)
    if (path / "config.json").is_file():
        return shape_from_config(json.loads((path / "config.json").read_text(encoding="utf-8")))
    name = base.lower().rsplit("/", 1)[-1]
    if name.startswith("qwen2.5-"):
        return QWEN25.get(name.split("-")[1])
    return None


def shape_from_config(conf: dict[str, Any]) -> ModelShape:
    """The :class:`ModelShape` of a model ``config.json`` (a dict)."""
    hidden, layers = int(conf["hidden_size"]), int(conf["num_hidden_layers"])
    heads = int(conf["num_attention_heads"])
    kv_heads = int(conf.get("num_key_value_heads") or heads)
    head_dim = int(conf.get("head_dim") or hidden // heads)
    inter, vocab = int(conf.get("intermediate_size") or 4 * hidden), int(conf["vocab_size"])
    per_layer = hidden * (heads * head_dim) * 2 + hidden * kv_heads * head_dim * 2 + 3 * hidden * inter
    embed = vocab * hidden * (1 if conf.get("tie_word_embeddings") else 2)
    return ModelShape(float(per_layer * layers + embed), layers, hidden, inter, kv_heads, head_dim, vocab)


def vllm_base_model(name_or_path: str) -> str:
    """The full model at the root of an adapter chain (``name_or_path`` itself when it is not an adapter folder).

    vLLM cannot load an adapter-only folder: the GRPO trainer starts vLLM on this model instead and pushes the
    merged weights into it before the first generation.

    Raises:
        RecipeError: An adapter folder without a base, a chain longer than 8, or a local base that is missing.
    """
    current = name_or_path
    for _ in range(8):
        config = Path(current) / "adapter_config.json"
        if not config.is_file():
            # Adapters record local bases as absolute paths (medagentgym.medcopilot.modeling.load_model); others are Hub ids.
            looks_local = current.startswith((".", "/", "~"))
            if current != name_or_path and looks_local and not (Path(current) / "config.json").is_file():
                raise RecipeError(f"model.name_or_path={name_or_path!r} is an adapter whose base {current!r} is not "
                                  f"a model folder (no config.json); point the adapter at its base model or export "
                                  f"a merged model with medagentgym export and start from it")
            return current
        base = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
        if not base:
            raise RecipeError(f"{config} names no base_model_name_or_path, so vLLM has no model to start from; set "
                              f"it, or export a merged model with medagentgym export and start from that")
        current = base
    raise RecipeError(f"model.name_or_path={name_or_path!r}: adapters chain more than 8 deep; export a merged model")


def gpu_gib() -> float:
    """Memory of the target GPU (GiB): ``$MEDCOPILOT_GPU_GIB``, else the visible CUDA device, else an 80 GB card.

    Raises:
        RecipeError: ``MEDCOPILOT_GPU_GIB`` is not a positive number.
    """
    override = os.environ.get("MEDCOPILOT_GPU_GIB", "").strip()
    if override:
        try:
            value = float(override)
        except ValueError:
            value = 0.0
        if value <= 0:
            raise RecipeError(f"MEDCOPILOT_GPU_GIB={override!r} must be the target GPU's memory in GiB, e.g. 79.2")
        return value
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / GIB
    return DEFAULT_GPU_GIB


def logits_gib(shape: ModelShape, method: str, micro_batch: int, scored_tokens: int) -> float:
    """GiB of the logits of one training micro-batch (see the module docstring and :data:`LOGITS_BYTES`)."""
    tokens = micro_batch * scored_tokens
    if method == "grpo":  # TRL's fused, tiled LM head: a few tiles, whatever the length
        tile_tokens, tile_vocab = TRL_LOGPROB_TILE
        return (4 * min(tokens, tile_tokens) * min(shape.vocab, tile_vocab) * 2 + tokens * shape.hidden * 10) / GIB
    return tokens * shape.vocab * LOGITS_BYTES.get(method, 10) / GIB


def memory_plan(shape: ModelShape, *, lora_rank: int | None, micro_batch: int, seq_tokens: int,
                scored_tokens: int, checkpointing: bool, gpu: float, vllm: dict[str, Any] | None = None,
                method: str = "sft", generation: dict[str, int] | None = None) -> dict[str, float]:
    """The GiB estimate of one training process (and its generator), as the module docstring says.

    Args:
        shape: The model.
        lora_rank: Adapter rank, or None for full fine-tuning.
        micro_batch: Sequences in one forward/backward.
        seq_tokens: Tokens of each sequence (prompt + completion).
        scored_tokens: Tokens of each sequence whose logits are computed.
        checkpointing: Activation checkpointing on.
        gpu: GPU memory (GiB).
        vllm: ``{"utilization", "max_len", "sleep"}`` for a colocated engine, else None.
        method: How the logits are computed (``grpo``: TRL's tiled head; ``ppo``; else materialised).
        generation: ``{"batch", "tokens"}`` for ``model.generate`` in this process (episodes in flight, tokens of
            each), else None.

    Returns:
        ``weights``, ``adapters`` (trainable states), ``activations`` (one micro-batch, ``logits`` included),
        ``train`` (their sum plus slack); with vLLM also ``vllm`` (its budget), ``kv`` (its KV cache) and
        ``kv_seqs`` (full-length sequences the KV cache holds); with ``generation`` also ``gen_kv``,
        ``gen_prefill`` and ``generating`` (the generation phase's total).
    """
    trainable = shape.lora_params(lora_rank) if lora_rank else shape.params
    layer = (6 * shape.hidden + 3 * shape.intermediate) * 2  # one layer's activations per token (bytes)
    per_token = shape.layers * shape.hidden * 2 if checkpointing else shape.layers * (layer + 4 * shape.hidden * 2)
    per_token += layer
    logits = logits_gib(shape, method, micro_batch, scored_tokens)
    activations = micro_batch * seq_tokens * per_token / GIB + logits
    plan = {"gpu": gpu, "weights": shape.weight_gib, "adapters": 16 * trainable / GIB, "activations": activations,
            "logits": logits}
    plan["train"] = plan["weights"] + plan["adapters"] + activations + TRAIN_SLACK_GIB
    if vllm is not None:
        budget = vllm["utilization"] * gpu
        plan["vllm"] = budget
        plan["kv"] = budget - shape.weight_gib - VLLM_OVERHEAD_GIB
        plan["kv_seqs"] = plan["kv"] * GIB / (shape.kv_bytes_per_token * vllm["max_len"])
    if generation is not None:
        tokens = generation["batch"] * generation["tokens"]
        plan["gen_kv"] = tokens * shape.kv_bytes_per_token / GIB
        plan["gen_prefill"] = tokens * layer / GIB
        plan["generating"] = (plan["weights"] + plan["adapters"] + TRAIN_SLACK_GIB + plan["gen_kv"]
                              + plan["gen_prefill"])
    return plan


def check_runnable(cfg: RecipeConfig, args: Any, *, base_model: str | None = None,
                   gpu: float | None = None) -> list[str]:
    """Refuse a recipe that cannot run as configured; return notes for ``--dry-run`` to print.

    Args:
        cfg: The recipe.
        args: Its built trainer config (TRL's config, ``VerifierConfig`` or ``PPOArgs``).
        base_model: The full model a later sweep stage starts from when its ``model.name_or_path`` (an earlier
            stage's output) does not exist yet.
        gpu: Target GPU memory in GiB (default :func:`gpu_gib`).

    Returns:
        Lines describing the run and the checks (families and shares, ood families trained on, attention kernel,
        vLLM source, memory arithmetic).

    Raises:
        RecipeError: One line naming the setting, the numbers and what to change.
    """
    from medagentgym.medcopilot.mixture import describe_mixture
    from medagentgym.tasks import SUITES

    notes = [describe_mixture(cfg.tasks)]
    notes.append(cfg.env.isolation())
    ood = [f for f in cfg.tasks.families if f in SUITES["ood"]]
    if ood and cfg.tasks.split == "train":
        notes.append(f"trains on out-of-distribution families {', '.join(ood)}: their --suite ood numbers are no "
                     f"longer out of distribution")
    notes.append(_check_attention(cfg))
    reporting = wandb_mode(getattr(args, "report_to", None) or [])
    if reporting:
        notes.append(reporting)
    uses_vllm = cfg.method == "grpo" and cfg.rollout.backend == "vllm"
    source = cfg.model.name_or_path
    if not Path(source).exists() and base_model:
        source = base_model
    if uses_vllm:
        root = vllm_base_model(source)
        if root != cfg.model.name_or_path:
            notes.append(f"vLLM starts from the full model {root} and receives the merged weights of "
                         f"{cfg.model.name_or_path} before the first generation")
    shape = model_shape(source)
    if shape is None:  # e.g. a chained stage whose input an earlier stage has not written yet
        generation = ("none (trains on the trajectories of rollout.store)" if cfg.method in ("sft", "dpo", "verifier")
                      else "counted once the model's shape is known")
        notes.append(f"memory: not estimated: the shape of {source} is unknown until it exists (a sweep's --dry-run "
                     f"checks a chained stage against its chain's base model); generation KV: {generation}")
        return notes
    if shape.params < 1e9:
        return notes  # a tiny CPU model
    notes.append(_check_memory(cfg, args, shape, gpu if gpu is not None else gpu_gib(), uses_vllm))
    return notes


def wandb_mode(report_to: Any) -> str | None:
    """Make a run that reports to wandb start without a wandb key: offline unless a key or ``WANDB_MODE`` is set.

    wandb stops a launch that has no key (``UsageError: No API key configured``), so the GPU recipes'
    ``report_to: [wandb]`` would stop on any machine that never ran ``wandb login``. With no ``WANDB_MODE``, no
    ``WANDB_API_KEY`` and no ``~/.netrc`` entry for wandb's host, this sets ``WANDB_MODE=offline`` in this
    process (and so in the trainers it starts): the run logs under ``./wandb`` and ``wandb sync`` uploads it later.

    Args:
        report_to: The trainer config's ``report_to`` (a list, or a string).

    Returns:
        The line ``--dry-run`` prints, or None when the run does not report to wandb.
    """
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    if "wandb" not in names:
        return None
    mode = os.environ.get("WANDB_MODE", "").strip()
    if mode:
        return f"wandb: WANDB_MODE={mode} (as set)"
    if os.environ.get("WANDB_API_KEY", "").strip() or _netrc_has_wandb():
        return "wandb: online (a wandb key is configured)"
    os.environ["WANDB_MODE"] = "offline"
    return ("wandb: offline (no WANDB_API_KEY or ~/.netrc entry; WANDB_MODE=offline set): logs stay under ./wandb, "
            "`wandb sync` uploads them; set WANDB_API_KEY for live logging or trainer.report_to=[] for none")


def _netrc_has_wandb() -> bool:
    """``~/.netrc`` (``$NETRC``) holds a login for wandb's host (where ``wandb login`` writes the key)."""
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _check_attention(cfg: RecipeConfig) -> str:
    kernel = cfg.model.attn_implementation or "sdpa"
    if kernel not in ATTENTION_KERNELS:
        raise RecipeError(f"model.attn_implementation={kernel!r} is installed by no extra of this package; use sdpa "
                          f"(the default), eager, or flash_attention_2 with `pip install -e '.[flash]'`")
    extra = ATTENTION_KERNELS[kernel]
    if extra is None:
        return f"attention: {kernel} (comes with torch)"
    if cfg.model.dtype not in ("auto", "bfloat16", "float16"):  # auto is bf16 on a GPU
        raise RecipeError(f"model.attn_implementation={kernel} needs bf16 or fp16 weights but model.dtype="
                          f"{cfg.model.dtype!r}; set model.dtype=bfloat16 or model.attn_implementation=sdpa")
    import importlib.util

    here = "installed here" if importlib.util.find_spec("flash_attn") else "NOT installed here"
    return f"attention: {kernel} (extra [{extra}]: pip install -e '.[{extra}]'; {here})"


def recipe_memory_plan(cfg: RecipeConfig, args: Any, shape: ModelShape, gpu: float) -> dict[str, Any]:
    """:func:`memory_plan` for a recipe as ``--dry-run`` computes it (``scripts/bench_gpu.py`` sets the estimate
    next to what it measures with this).

    Returns:
        The plan plus ``micro``, ``seq`` (tokens per trained sequence), ``generation`` (``model.generate``'s
        ``{"batch", "tokens"}`` or None) and ``vllm_settings`` (the colocated engine's, or None).

    Raises:
        RecipeError: A colocated vLLM engine without ``trainer.vllm_max_model_length``.
    """
    uses_vllm = cfg.method == "grpo" and cfg.rollout.backend == "vllm"
    micro, seq, scored = _batch_geometry(cfg, args)
    lora = cfg.model.lora.r if cfg.model.lora else None
    checkpointing = bool(getattr(args, "activation_checkpointing", getattr(args, "gradient_checkpointing", True)))
    vllm = None
    if uses_vllm and getattr(args, "vllm_mode", "colocate") == "colocate":
        max_len = args.vllm_max_model_length
        if not max_len:
            raise RecipeError("trainer.vllm_max_model_length is unset, so vLLM reserves the model's whole context "
                              "(32,768 tokens for Qwen2.5); set it to the longest episode, e.g. 12288")
        vllm = {"utilization": float(args.vllm_gpu_memory_utilization), "max_len": int(max_len),
                "sleep": bool(args.vllm_enable_sleep_mode)}
        seq = min(seq, int(max_len))
    generation = _hf_generation(cfg, args, seq) if not uses_vllm else None
    plan: dict[str, Any] = memory_plan(shape, lora_rank=lora, micro_batch=micro, seq_tokens=seq,
                                       scored_tokens=min(scored, seq), checkpointing=checkpointing, gpu=gpu,
                                       vllm=vllm, method=cfg.method, generation=generation)
    return {**plan, "micro": micro, "seq": seq, "generation": generation, "vllm_settings": vllm}


def _check_memory(cfg: RecipeConfig, args: Any, shape: ModelShape, gpu: float, uses_vllm: bool) -> str:
    plan = recipe_memory_plan(cfg, args, shape, gpu)
    micro, seq, generation, vllm = plan["micro"], plan["seq"], plan["generation"], plan["vllm_settings"]
    line = (f"memory on a {gpu:.1f} GiB GPU: weights {plan['weights']:.1f} + trainable states "
            f"{plan['adapters']:.1f} + activations {plan['activations']:.1f} ({micro} x {seq} tokens; logits "
            f"{plan['logits']:.1f}) + slack {TRAIN_SLACK_GIB:.0f} = training {plan['train']:.1f} GiB")
    if plan["activations"] + TRAIN_SLACK_GIB > gpu:
        raise RecipeError(f"one micro-batch of {micro} x {seq} tokens needs ~{plan['activations']:.0f} GiB of "
                          f"activations and logits, more than the {gpu:.0f} GiB GPU (no sharding divides them); "
                          f"lower the per-device batch size or the maximum length")
    if generation is not None:
        line += (f"; generating with model.generate ({generation['batch']} episodes in flight x "
                 f"{generation['tokens']:,} tokens): weights {plan['weights']:.1f} + trainable states "
                 f"{plan['adapters']:.1f} + slack {TRAIN_SLACK_GIB:.0f} + generation KV {plan['gen_kv']:.1f} GiB "
                 f"({shape.kv_bytes_per_token // 1024} KiB/token) + prefill activations {plan['gen_prefill']:.1f} = "
                 f"generating {plan['generating']:.1f} GiB")
        if plan["generating"] > gpu:
            fits = _episodes_that_fit(plan, gpu, generation)
            raise RecipeError(f"generation with model.generate does not fit the {gpu:.0f} GiB GPU: "
                              f"{generation['batch']} episodes in flight x {generation['tokens']:,} tokens hold "
                              f"{plan['gen_kv']:.1f} GiB of KV cache and {plan['gen_prefill']:.1f} GiB of prefill "
                              f"activations on top of {plan['weights'] + plan['adapters']:.1f} GiB of weights and "
                              f"trainable states ({plan['generating']:.1f} GiB); set rollout.concurrency={fits} "
                              f"or lower, or shorten trainer.max_completion_length")
    if vllm is None:
        if generation is None and cfg.method in ("sft", "dpo", "verifier"):
            line += f"; generation KV: none ({cfg.method} trains on the trajectories of rollout.store)"
        if plan["train"] > gpu:
            line += (f" (> {gpu:.0f} GiB unsharded: needs ZeRO-3/FSDP over several GPUs, which divide weights and "
                     f"trainable states)")
        return line
    line += (f"; vLLM {vllm['utilization']:.2f} x {gpu:.1f} = {plan['vllm']:.1f} GiB - weights "
             f"{plan['weights']:.1f} - {VLLM_OVERHEAD_GIB:.0f} = generation KV {plan['kv']:.1f} GiB "
             f"({shape.kv_bytes_per_token // 1024} KiB/token) = {plan['kv_seqs']:.1f} sequences of {vllm['max_len']:,}")
    if plan["kv_seqs"] < 1:
        raise RecipeError(f"vLLM's KV cache cannot hold one {vllm['max_len']:,}-token sequence: "
                          f"{vllm['utilization']} x {gpu:.0f} GiB = {plan['vllm']:.1f} GiB minus weights "
                          f"{plan['weights']:.1f} GiB and ~{VLLM_OVERHEAD_GIB:.0f} GiB overhead leaves "
                          f"{plan['kv']:.1f} GiB, and one sequence needs "
                          f"{shape.kv_bytes_per_token * vllm['max_len'] / GIB:.2f} GiB; raise "
                          f"trainer.vllm_gpu_memory_utilization (with trainer.vllm_enable_sleep_mode=true) or lower "
                          f"trainer.vllm_max_model_length")
    if vllm["sleep"]:
        generating = plan["weights"] + plan["adapters"] + TRAIN_SLACK_GIB + plan["vllm"]
        training = plan["train"] + VLLM_ASLEEP_GIB
        phases = f"; generating {generating:.1f} GiB, training with vLLM asleep {training:.1f} GiB"
        if generating > gpu or training > gpu:
            raise RecipeError(f"the colocated run does not fit one {gpu:.0f} GiB GPU{phases}; lower "
                              f"trainer.vllm_gpu_memory_utilization or trainer.per_device_train_batch_size")
        if gpu - generating < GENERATION_HEADROOM_GIB:
            raise RecipeError(f"the colocated run's generating phase ({generating:.1f} GiB: weights, trainable "
                              f"states, slack and vLLM's {plan['vllm']:.1f} GiB) leaves {gpu - generating:.1f} GiB of "
                              f"the {gpu:.1f} GiB GPU, less than the {GENERATION_HEADROOM_GIB:.0f} GiB this estimate "
                              f"needs to be trusted; lower trainer.vllm_gpu_memory_utilization (each 0.05 frees "
                              f"{0.05 * gpu:.1f} GiB)")
        return line + phases + f" (headroom {gpu - generating:.1f} GiB)"
    together = plan["train"] + plan["vllm"]
    if together > gpu - GENERATION_HEADROOM_GIB and together <= gpu:
        raise RecipeError(f"training ({plan['train']:.1f} GiB) and a colocated vLLM engine ({plan['vllm']:.1f} GiB) "
                          f"need {together:.1f} GiB together, leaving {gpu - together:.1f} GiB of the {gpu:.0f} GiB "
                          f"GPU, less than the {GENERATION_HEADROOM_GIB:.0f} GiB this estimate needs to be trusted; "
                          f"lower trainer.vllm_gpu_memory_utilization or set trainer.vllm_enable_sleep_mode=true")
    if together > gpu:
        raise RecipeError(f"training ({plan['train']:.1f} GiB) and a colocated vLLM engine ({plan['vllm']:.1f} GiB) "
                          f"need {together:.1f} GiB together, more than the {gpu:.0f} GiB GPU; set "
                          f"trainer.vllm_enable_sleep_mode=true (vLLM frees its memory during the update), lower "
                          f"trainer.per_device_train_batch_size, or use vllm_mode: server on a second GPU")
    return line + f"; together {together:.1f} GiB"


def _hf_generation(cfg: RecipeConfig, args: Any, seq: int) -> dict[str, int] | None:
    """``{"batch", "tokens"}`` of ``model.generate`` in the training process (None: no generation there).

    PPO always generates with ``model.generate``; GRPO does with ``rollout.backend: transformers``. At most
    ``rollout.concurrency`` episodes are in flight, and no more than one round of this process holds.
    """
    if cfg.method == "ppo":
        round_size = int(args.rollout_batch_size)
    elif cfg.method == "grpo":
        round_size = int(args.per_device_train_batch_size) * int(args.steps_per_generation or 1)
    else:
        return None
    return {"batch": max(1, min(cfg.rollout.concurrency, round_size)), "tokens": seq}


def _episodes_that_fit(plan: dict[str, float], gpu: float, generation: dict[str, int]) -> int:
    """The largest ``rollout.concurrency`` whose generation phase fits ``gpu`` (0 when not even one does)."""
    fixed = plan["generating"] - plan["gen_kv"] - plan["gen_prefill"]
    per_episode = (plan["gen_kv"] + plan["gen_prefill"]) / generation["batch"]
    return max(0, int((gpu - fixed) // per_episode))


def _batch_geometry(cfg: RecipeConfig, args: Any) -> tuple[int, int, int]:
    """(sequences per micro-batch, tokens per sequence, scored tokens per sequence) of one training process."""
    if cfg.method in ("grpo", "ppo"):
        micro = int(getattr(args, "micro_batch_size", 0) or getattr(args, "per_device_train_batch_size", 1))
        completion = int(args.max_completion_length)
        return micro, completion + PROMPT_TOKENS, completion
    micro = int(getattr(args, "per_device_train_batch_size", 1))
    length = int(getattr(args, "max_length", None) or 8192)
    if cfg.method == "dpo":
        return 2 * micro, length, length  # chosen and rejected
    if cfg.method == "verifier":
        return micro, length, 1  # one score logit per sequence
    return micro, length, length
