"""Training math that holds on the GPU path (issue #24), checked on the tiny model on CPU.

- vLLM weight sync: TRL's own sync merges LoRA into the bf16 base and back every step, which changes the frozen
  base; ours (:mod:`medagentgym.medcopilot.vllm_sync`) hands vLLM weights merged in fp32 into fresh tensors. Only the vLLM
  engine is faked (it cannot be installed here): TRL's ``VLLMGeneration.sync_weights`` runs as it is.
- Merges of chained stages and exports are fp32, cast once: a 1e-3 relative update survives.
- Small updates (1e-4 and 1e-3 relative) on a base stored in bf16 reach the sampler's weights (the merge is rounded
  to bf16 without bias) and the default export (float32 for a LoRA run) (issue #32).
- PPO's KL term in the reward pulls along the true KL gradient (k1; k3's gradient is nearly orthogonal).
- The dry-run's memory arithmetic counts ``model.generate``'s KV cache and each method's logits correctly.
- RL recipes train the policy that sampled, keep long episodes, end an episode before a call that cannot fit.
- A resumed GRPO run continues the sampling seeds; the paper table shows the difference from base with intervals.
"""

from __future__ import annotations

import copy
import json
import math
import re
import types
from pathlib import Path

import pytest
import torch

from medagentgym.medcopilot.config import RECIPES_DIR, ModelConfig, RecipeError, check_recipe, load_recipe

QWEN_RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*_qwen*.yaml"))
GRPO_QWEN = [r for r in QWEN_RECIPES if r.startswith("grpo")]
PPO_RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("ppo_*.yaml"))


# --------------------------------------------------------------------------------------------- vLLM weight sync
class _Engine:
    """vLLM's ``LLM`` as TRL's colocated sync reaches it: it keeps what it was sent (the only fake here)."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}
        self.loads = 0
        runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=self._load))
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner)))

    def _load(self, pairs) -> None:
        for name, tensor in pairs:
            self.weights[name] = tensor.detach().clone()
            self.loads += 1

    def reset_prefix_cache(self) -> None:
        pass


def _vllm_generation(model):
    """A real ``trl.generation.vllm_generation.VLLMGeneration`` around ``model`` whose engine is :class:`_Engine`."""
    from accelerate import Accelerator
    from trl.distributed import DistributedBackend
    from trl.generation.vllm_generation import VLLMGeneration

    vg = VLLMGeneration.__new__(VLLMGeneration)  # __init__ would start vLLM
    vg.model, vg.accelerator = model, Accelerator(cpu=True)
    vg._dist, vg.mode, vg.enable_sleep_mode, vg._weight_metadata = DistributedBackend(vg.accelerator), "colocate", \
        False, None
    vg.llm = _Engine()
    return vg


def _bf16_lora_policy(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    return get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear"))


def _base_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def _train_adapters(model, generator) -> None:
    """What an optimizer step does to the adapters (B starts at 0; updates of ~1e-2 of the weights' size)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn(p.shape, generator=generator) * 0.02)


def _sync_cycles(tiny_model_dir, cycles: int, *, exact: bool):
    from medagentgym.medcopilot.vllm_sync import install_exact_sync

    model = _bf16_lora_policy(tiny_model_dir)
    vg = _vllm_generation(model)
    if exact:
        install_exact_sync(vg)
    before = _base_weights(model)
    generator = torch.Generator().manual_seed(0)
    for _ in range(cycles):
        _train_adapters(model, generator)
        vg.sync_weights()  # TRL's own method: wake, walk the parameters, load them, reset the cache
    after = _base_weights(model)
    changed = sum(int((before[n] != after[n]).sum()) for n in before) / sum(t.numel() for t in before.values())
    return model, vg, changed


def _check_exact_sync(tiny_model_dir, cycles: int) -> None:
    model, vg, changed = _sync_cycles(tiny_model_dir, cycles, exact=True)
    assert changed == 0.0, f"{changed:.1%} of the frozen base changed over {cycles} syncs"
    # what vLLM holds is the fp32 merge of the current adapters, rounded once to one of its two bf16 neighbours
    merged = copy.deepcopy(model).float().merge_and_unload()
    reference = {name: p.detach() for name, p in merged.named_parameters()}  # tied weights once, as vLLM wants
    pushed = vg.llm.weights
    assert set(pushed) == set(reference), set(pushed) ^ set(reference)
    for name, exact in reference.items():
        _assert_rounded_from(pushed[name], exact, name)


def _assert_rounded_from(sent: torch.Tensor, exact: torch.Tensor, name: str) -> None:
    """``sent`` (bf16) is one of the two bf16 neighbours of ``exact`` (fp32) everywhere, and ``exact`` itself where
    it is a bf16 value."""
    assert sent.dtype == torch.bfloat16, name
    down = exact.contiguous().view(torch.int32) & -65536  # truncated towards zero; + 65536: one step further out
    down, up = down.view(torch.float32), (down + 65536).view(torch.float32)
    assert bool(((sent.float() == down) | (sent.float() == up)).all()), name
    representable = down == exact  # no bits below bf16: sent exactly
    assert torch.equal(sent.float()[representable], exact[representable]), name


def test_weight_sync_to_vllm_leaves_the_frozen_base_bit_identical(tiny_model_dir):
    _check_exact_sync(tiny_model_dir, cycles=300)
    # TRL's own walk (merge into the base, stream, unmerge) on the same run changes the base: what is guarded
    _, _, drift = _sync_cycles(tiny_model_dir, 300, exact=False)
    assert drift > 0.05, f"TRL's in-place merge/unmerge changed only {drift:.1%} of the base"


@pytest.mark.slow
def test_weight_sync_leaves_the_base_bit_identical_over_a_long_run(tiny_model_dir):
    _check_exact_sync(tiny_model_dir, cycles=3000)


def test_exact_sync_streams_trls_names_and_refuses_what_it_cannot_merge(tiny_model_dir):
    from peft import LoraConfig, get_peft_model

    from medagentgym.medcopilot.vllm_sync import exact_named_params, install_exact_sync

    model = _bf16_lora_policy(tiny_model_dir)
    theirs = [name for name, _ in _vllm_generation(copy.deepcopy(model))._iter_named_params()]
    ours = [name for name, _ in exact_named_params(_vllm_generation(model))]
    assert ours == theirs and not any("lora" in n or "base_layer" in n for n in ours)
    dora = get_peft_model(_bf16_lora_policy(tiny_model_dir).get_base_model(),
                          LoraConfig(r=4, target_modules=["q_proj"], use_dora=True))
    with pytest.raises(NotImplementedError, match="DoRA"):
        list(install_exact_sync(_vllm_generation(dora))._iter_named_params())


@pytest.fixture(scope="module")
def bf16_tiny_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model stored in bf16, as Qwen2.5's published weights are (its config.json says bfloat16)."""
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("bf16_tiny")
    AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).save_pretrained(out)
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    return out


def _policy_with_update(base_dir: Path, rel: float, seed: int):
    """A LoRA policy on the bf16 model at ``base_dir`` whose every adapted weight moved by ``rel`` of its norm;
    returns the policy and its deltas (fp32) by the merged model's parameter name."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear"))
    return model, _move_adapters(model, rel, seed)


def _move_adapters(model, rel: float, seed: int) -> dict[str, torch.Tensor]:
    """Set every LoRA layer of ``model`` so its delta is ``rel`` of its weight's norm; return the deltas (fp32, by
    the merged model's parameter name)."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    generator = torch.Generator().manual_seed(seed)
    deltas = {}
    with torch.no_grad():
        for name, layer in model.named_modules():
            if isinstance(layer, LoraLinear):
                a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
                a.copy_(torch.randn(a.shape, generator=generator))
                b.copy_(torch.randn(b.shape, generator=generator))
                norm = layer.base_layer.weight.float().norm()
                b.mul_(rel * norm / ((b.float() @ a.float()) * layer.scaling["default"]).norm())
                deltas[name.removeprefix("base_model.model.") + ".weight"] = \
                    (b.float() @ a.float()) * layer.scaling["default"]
    return deltas


def _share(weights: dict[str, torch.Tensor], base: dict[str, torch.Tensor], deltas: dict[str, torch.Tensor]) -> float:
    """Share of the update that ``weights`` carry over the base, projected on the update, over all adapted weights."""
    num = sum(float(((weights[n].float() - base[n].float()) * d).sum()) for n, d in deltas.items())
    return num / sum(float((d * d).sum()) for d in deltas.values())


@pytest.mark.parametrize("rel", [1e-4, 1e-3])
def test_small_updates_reach_the_samplers_weights_on_a_bf16_stored_base(bf16_tiny_dir, rel):
    from medagentgym.medcopilot.vllm_sync import install_exact_sync

    shares, nearest = [], []
    for seed in range(3):
        model, deltas = _policy_with_update(bf16_tiny_dir, rel, seed)
        base = {n: p.detach().clone() for n, p in model.get_base_model().state_dict().items()}
        base = {n.replace(".base_layer", ""): t for n, t in base.items() if "lora_" not in n}
        vg = install_exact_sync(_vllm_generation(model), seed=seed)
        vg.sync_weights()  # TRL's own method, our parameter walk: what vLLM receives
        shares.append(_share(vg.llm.weights, base, deltas))
        exact = {n: base[n].float() + d for n, d in deltas.items()}
        nearest.append(_share({n: t.to(torch.bfloat16) for n, t in exact.items()}, base, deltas))
    # rounded to nearest (the sync before issue #32) the sampler kept 0.07 of a 1e-4 update and 0.54 of a 1e-3 one
    assert max(nearest) < (0.1 if rel < 5e-4 else 0.75), nearest
    assert all(0.9 < s < 1.1 for s in shares), (rel, shares, nearest)


@pytest.mark.parametrize("rel", [1e-4, 1e-3])
def test_the_default_export_keeps_small_updates_on_a_bf16_stored_base(bf16_tiny_dir, tmp_path, capsys, rel):
    from safetensors.torch import load_file

    from medagentgym.medcopilot.export import export_model

    deltas = _adapter(bf16_tiny_dir, tmp_path / "run", rel=rel, seed=4)
    (tmp_path / "run" / "recipe.yaml").write_text("model:\n  dtype: bfloat16\n")  # as the Qwen recipes train
    base = load_file(bf16_tiny_dir / "model.safetensors")
    out = export_model(tmp_path / "run", tmp_path / "export")  # no dtype: the default
    assert "[export] weights: float32 (a LoRA adapter merged in fp32" in capsys.readouterr().out
    weights = load_file(out / "model.safetensors")
    assert _share(weights, base, deltas) == pytest.approx(1.0, abs=1e-3)
    # what a bf16 export (the default before issue #32: the recipe's model.dtype) keeps of the same update
    bf16 = {n: w.to(torch.bfloat16) for n, w in weights.items() if n in deltas}
    assert _share(bf16, base, deltas) < (0.1 if rel < 5e-4 else 0.75)


# --------------------------------------------------------------------------------------------- merges
def _adapter(base_dir: Path, out: Path, rel: float, seed: int) -> dict[str, torch.Tensor]:
    """Save a LoRA adapter on ``base_dir`` whose every delta is ``rel`` of its weight's norm; return the deltas
    (fp32, by the merged model's parameter name)."""
    from peft import LoraConfig, get_peft_model

    from medagentgym.medcopilot.modeling import load_model

    model = get_peft_model(load_model(ModelConfig(name_or_path=str(base_dir), dtype="float32")),
                           LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear"))
    deltas = _move_adapters(model, rel, seed)
    model.save_pretrained(out)
    return deltas


def _effect(merged: torch.Tensor, base: torch.Tensor, delta: torch.Tensor) -> float:
    """Share of ``delta`` that ``merged`` carries over the (equally rounded) base, projected on ``delta``."""
    return float(((merged.float() - base.float()) * delta).sum() / (delta * delta).sum())


def test_a_chained_stage_merges_in_fp32_and_keeps_a_small_update(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from medagentgym.medcopilot.modeling import load_model

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    sft_deltas = _adapter(tiny_model_dir, tmp_path / "sft", rel=1e-3, seed=1)
    dpo_deltas = _adapter(tmp_path / "sft", tmp_path / "dpo", rel=1e-3, seed=2)  # stacked: DPO on merged SFT
    merged = load_model(ModelConfig(name_or_path=str(tmp_path / "dpo"), dtype="bfloat16")).state_dict()
    effects = []
    for name, d1 in sft_deltas.items():
        exact = (base[name] + d1) + dpo_deltas[name]  # the chain in fp32, rounded once
        assert torch.equal(merged[name], exact.to(torch.bfloat16)), name
        effects.append(_effect(merged[name], base[name].to(torch.bfloat16), d1 + dpo_deltas[name]))
    # merging into bf16 (the code before) kept about half of it (0.55 when measured); fp32 keeps it, up to noise
    assert min(effects) > 0.8 and sum(effects) / len(effects) == pytest.approx(1.0, abs=0.05), effects


def test_an_export_merges_in_fp32_and_float32_keeps_the_update_exactly(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from medagentgym.medcopilot.export import ExportError, export_model

    # a base stored in bf16, as Qwen2.5's published weights are: a bf16 export can keep only part of a small update
    bf16_base = tmp_path / "base"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    model.save_pretrained(bf16_base)
    base = model.float().state_dict()
    deltas = _adapter(bf16_base, tmp_path / "run", rel=1e-3, seed=3)
    out32 = export_model(tmp_path / "run", tmp_path / "e32", dtype="float32")
    out16 = export_model(tmp_path / "run", tmp_path / "e16", dtype="bfloat16")
    w32, w16 = load_file(out32 / "model.safetensors"), load_file(out16 / "model.safetensors")
    for name, delta in deltas.items():
        assert torch.equal(w32[name], base[name] + delta), name  # exact
        assert torch.equal(w16[name], (base[name] + delta).to(torch.bfloat16)), name  # rounded once
        assert _effect(w32[name], base[name], delta) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ExportError, match="not a weight dtype"):
        export_model(tmp_path / "run", tmp_path / "bad", dtype="int8")


# --------------------------------------------------------------------------------------------- KL that pulls
def _expected_kl_gradient(kind: str, *, vocab: int = 64, spread: float = 0.05, seed: int = 0) -> float:
    """Cosine between the expected gradient of PPO's loss from the KL term alone and the true KL gradient.

    One-token episodes with reward 0, so the only reward is ``-kl_coef * kl`` from :func:`token_rewards`; the
    expectation over the sampled token is exact (every token, weighted by its probability). The loss is our
    :func:`policy_loss` on the :func:`gae` advantages at ratio 1 (the first epoch): descending it must descend
    ``KL(policy || reference)``.
    """
    from medagentgym.medcopilot.ppo import gae, kl_estimate, policy_loss, token_rewards

    generator = torch.Generator().manual_seed(seed)
    ref_logits = torch.randn(vocab, generator=generator)
    theta = (ref_logits + spread * torch.randn(vocab, generator=generator)).requires_grad_(True)
    logp_all = theta.log_softmax(-1)
    ref_all = ref_logits.log_softmax(-1)
    probs = logp_all.exp().detach()
    mask = torch.ones(1, 1)
    loss = torch.zeros(())
    for token in range(vocab):
        logp = logp_all[token].reshape(1, 1)
        kl = kl_estimate(logp.detach(), ref_all[token].reshape(1, 1), kind)
        rewards = token_rewards(torch.zeros(1), kl, mask, kl_coef=1.0)
        advantages, _ = gae(rewards, torch.zeros(1, 1), mask, gamma=1.0, lam=1.0)
        step, _ = policy_loss(logp, logp.detach(), advantages, mask, cliprange=0.2)
        loss = loss + probs[token] * step
    (grad,) = torch.autograd.grad(loss, theta)
    true = theta.detach().clone().requires_grad_(True)
    kl_true = (true.softmax(-1) * (true.log_softmax(-1) - ref_all)).sum()
    (true_grad,) = torch.autograd.grad(kl_true, true)
    return float(torch.nn.functional.cosine_similarity(grad, true_grad, dim=0))


def test_k1_in_the_reward_pulls_along_the_kl_gradient_and_k3_does_not():
    k3 = []
    for seed in range(3):
        assert _expected_kl_gradient("k1", seed=seed) > 0.999
        k3.append(_expected_kl_gradient("k3", seed=seed))
    # k3's score-function gradient is second order near the reference: its direction is noise (here 0.54, -0.54,
    # -0.42: it can push away from the reference)
    assert max(k3) < 0.7 and min(k3) < 0, k3


@pytest.mark.parametrize("name", PPO_RECIPES)
def test_every_ppo_recipe_puts_a_kl_in_the_reward_that_pulls(name):
    from medagentgym.medcopilot.trainers.ppo import ppo_args

    kind = ppo_args(load_recipe(name)).kl_estimator
    assert _expected_kl_gradient(kind) > 0.99, f"{name}: kl_estimator={kind} barely pulls towards the reference"


# --------------------------------------------------------------------------------------------- memory arithmetic
@pytest.mark.parametrize("name", QWEN_RECIPES)
def test_every_qwen_recipe_passes_its_own_dry_run_and_prints_generation_kv(name, train_main, capsys, tmp_path):
    assert train_main([f"recipe={name}", "--dry-run", f"output.dir={tmp_path / 'o'}"]) == 0
    out = capsys.readouterr().out
    assert "generation KV" in out, out[-2000:]


def test_model_generate_kv_and_prefill_are_counted_and_32_ppo_episodes_do_not_fit(capsys):
    notes: list[str] = []
    check_recipe(load_recipe("ppo_qwen14b"), notes=notes)
    (line,) = [n for n in notes if n.startswith("memory")]
    # 8 episodes x 12,288 tokens x 192 KiB = 18.0 GiB of KV cache; their prefill 8 x 12,288 x one layer's
    # activations (6 x 5,120 + 3 x 13,824) x 2 bytes = 13.2 GiB
    assert "8 episodes in flight x 12,288 tokens" in line and "generation KV 18.0 GiB (192 KiB/token)" in line
    assert "prefill activations 13.2" in line and "generating 63.8 GiB" in line
    with pytest.raises(RecipeError) as exc:  # the recipe's settings before: 32 in flight, all of a step
        check_recipe(load_recipe("ppo_qwen14b", ["rollout.concurrency=32"]))
    assert "72.0 GiB of KV cache" in str(exc.value) and "set rollout.concurrency=11 or lower" in str(exc.value)
    with pytest.raises(RecipeError, match="generation with model.generate does not fit"):  # GRPO, HF backend
        check_recipe(load_recipe("grpo_qwen14b", ["rollout.backend=transformers"]))


def test_logits_are_estimated_as_each_trainer_computes_them():
    from medagentgym.medcopilot.recipe_checks import logits_gib, model_shape

    shape = model_shape("Qwen/Qwen2.5-14B-Instruct")
    # TRL's GRPO scores through its fused LM head in 4,096 x 32,768 tiles: no (tokens, vocab) tensor
    assert logits_gib(shape, "grpo", 1, 8192) == pytest.approx(1.39, abs=0.01)
    assert logits_gib(shape, "grpo", 1, 16384) < 2.0
    # our PPO loss keeps fp32 logits and their gradients: 20 bytes per entry (measured), not 10
    assert logits_gib(shape, "ppo", 1, 8192) == pytest.approx(8192 * 152064 * 20 / 2 ** 30)
    assert logits_gib(shape, "sft", 1, 8192) == pytest.approx(8192 * 152064 * 10 / 2 ** 30)


def test_ppo_logits_measure_what_the_estimate_says():
    """The 20 bytes per logit of :data:`LOGITS_BYTES`: torch's profiler on our PPO scoring, forward and backward."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from medagentgym.medcopilot.ppo import completion_logprobs
    from medagentgym.medcopilot.recipe_checks import LOGITS_BYTES

    vocab, prompt, completion = 32768, 16, 256
    lm = Qwen2ForCausalLM(Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, vocab_size=vocab))
    lm.requires_grad_(False)
    lm.model.norm.weight.requires_grad_(True)
    ids = torch.randint(0, vocab, (1, prompt + completion))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _, logprobs, _ = completion_logprobs(lm, ids, torch.ones_like(ids), torch.arange(ids.shape[1])[None], prompt)
        logprobs.sum().backward()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    per_entry = peak / (completion * vocab)
    assert LOGITS_BYTES["ppo"] - 2 <= per_entry <= LOGITS_BYTES["ppo"] + 1, per_entry


# --------------------------------------------------------------------------------------------- RL settings
@pytest.mark.parametrize("name", [r for r in QWEN_RECIPES if r.startswith(("grpo", "ppo"))])
def test_rl_recipes_update_the_policy_that_sampled(name):
    cfg = load_recipe(name)
    assert cfg.model.lora is not None and cfg.model.lora.dropout == 0.0
    if cfg.method == "grpo":
        from medagentgym.medcopilot.trainers.grpo import _trainer_args

        args = _trainer_args(cfg)
        assert args.disable_dropout is True
        assert args.vllm_importance_sampling_mode == "token_truncate"  # sequence_mask drops long episodes whole
        assert args.ddp_find_unused_parameters is False


def _echo_family(root: Path) -> Path:
    fam = root / "echo_digit"
    fam.mkdir(parents=True)
    (fam / "family.yaml").write_text("name: echo_digit\nanswer_type: integer\nactions: [code_execution, "
                                     "submit_answer]\nmax_turns: 3\nsplits: [train, test]\n", encoding="utf-8")
    rows = [{"question": f"Submit the number {n}.", "answer": n, "split": split} for n in range(4)
            for split in ("train", "test")]
    (fam / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def test_grpo_switches_lora_dropout_off_for_the_update(tiny_model_dir, tmp_path, quiet_training_env):
    from datasets import Dataset
    from trl import GRPOTrainer

    from medagentgym.medcopilot.modeling import load_model, load_tokenizer, lora_config
    from medagentgym.medcopilot.trainers.grpo import _trainer_args, build_index

    root = _echo_family(tmp_path / "tasks")
    cfg = load_recipe("grpo_tiny", [f"model.name_or_path={tiny_model_dir}", f"tasks.root={root}",
                                    "tasks.families=[echo_digit]", f"output.dir={tmp_path / 'o'}",
                                    "model.lora={r: 4, alpha: 8, dropout: 0.1, target_modules: all-linear}"])
    index = build_index(cfg)
    trainer = GRPOTrainer(model=load_model(cfg.model), reward_funcs=[lambda **kw: [0.0] * len(kw["prompts"])],
                          args=_trainer_args(cfg), train_dataset=Dataset.from_list(index.rows),
                          processing_class=load_tokenizer(cfg.model.name_or_path),
                          rollout_func=lambda prompts, trainer: None, peft_config=lora_config(cfg.model.lora))
    dropouts = [m for n, m in trainer.model.named_modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(m.p == 0.0 for m in dropouts), "LoRA's dropout would make the trained policy differ"


# --------------------------------------------------------------------------------------------- context guard
@pytest.fixture(scope="module")
def echo_env(tiny_model_dir, tmp_path_factory):
    from transformers import AutoTokenizer

    from medagentgym import sandbox
    from medagentgym.env_client import Env, EnvConfig
    from medagentgym.env_client.prompts import initial_messages
    from medagentgym import tasks
    from medagentgym.medcopilot.rollout_func import PromptIndex

    root = _echo_family(tmp_path_factory.mktemp("tasks"))
    family = tasks.make("echo_digit", root=root)
    index = PromptIndex.from_instances(family.instances("train"),
                                       render=lambda inst: initial_messages(inst, family.actions))
    pool = sandbox.make_pool("local", workers=2, allow_unisolated=True)
    yield {"index": index, "tokenizer": AutoTokenizer.from_pretrained(tiny_model_dir),
           "make_env": lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=3))}
    pool.close()


def _babbler(tokenizer, n: int, seen: list[int]):
    """A generator that records each context length and answers ``n`` tokens without ending its turn."""
    word = tokenizer("x", add_special_tokens=False)["input_ids"][0]

    def generate(context, seed):
        seen.append(len(context))
        return [word] * n, [-1.0] * n
    return generate


def test_an_episode_ends_as_truncated_before_a_turn_that_cannot_fit(echo_env):
    from medagentgym.env_client.tokens import token_rollout

    tok, index = echo_env["tokenizer"], echo_env["index"]
    inst = index.instances[index.rows[0]["instance_id"]]
    seen: list[int] = []
    env = echo_env["make_env"]()
    try:
        free = token_rollout(env, inst, tokenizer=tok, generate_fn=_babbler(tok, 8, seen), max_new_tokens=8)
    finally:
        env.close()
    assert free.turns == 3 and len(seen) == 3
    limit = seen[1] + 8  # the second turn fits exactly, the third would not
    seen.clear()
    env = echo_env["make_env"]()
    try:
        ep = token_rollout(env, inst, tokenizer=tok, generate_fn=_babbler(tok, 8, seen), max_new_tokens=8,
                           max_context_tokens=limit)
    finally:
        env.close()
    assert ep.truncated and ep.turns == 2 and all(n + 8 <= limit for n in seen), (seen, limit)
    assert ep.env_mask[-1] == 0, "the episode ended on the observation, before the call"
    # a prompt that cannot take one turn: no call, one end-of-turn token that is never trained on
    seen.clear()
    env = echo_env["make_env"]()
    try:
        ep = token_rollout(env, inst, tokenizer=tok, generate_fn=_babbler(tok, 8, seen), max_new_tokens=8,
                           max_context_tokens=len(ep.prompt_ids) + 7)
    finally:
        env.close()
    assert seen == [] and ep.truncated and ep.completion_ids == [tok.eos_token_id] and ep.env_mask == [0]


def test_the_vllm_hook_guards_calls_with_vllm_max_model_length(echo_env):
    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc

    tok, index = echo_env["tokenizer"], echo_env["index"]
    rollout = EnvRolloutFunc(make_env=echo_env["make_env"], index=index, tokenizer=tok, max_new_tokens=8,
                             concurrency=2, seed=0)
    word = tok("x", add_special_tokens=False)["input_ids"][0]
    asked: list[int] = []

    class Engine:  # the surface of TRL's VLLMGeneration the hook uses
        mode, tensor_parallel_size, enable_sleep_mode, max_completion_length = "colocate", 1, False, 16

        def generate(self, prompts, images, num_generations):
            asked.extend(len(p) for p in prompts)
            return prompts, [[word] * 8 for _ in prompts], [[[-1.0]] * 8 for _ in prompts], None

    prompt_len = len(rollout.run([index.rows[0]["prompt"]], lambda c, s: ([[tok.eos_token_id] for _ in c], None))
                     ["prompt_ids"][0])
    limit = prompt_len + 40
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(use_vllm=True, vllm_max_model_length=limit, gradient_accumulation_steps=1,
                                   steps_per_generation=1, num_iterations=1),
        state=types.SimpleNamespace(global_step=0), vllm_generation=Engine(),
        accelerator=types.SimpleNamespace(process_index=0))
    out = rollout([index.rows[0]["prompt"]] * 2, trainer)
    assert asked and all(n + 8 <= limit for n in asked), (asked, limit)
    assert all(stats["truncated"] for stats in out["episode_stats"])


# --------------------------------------------------------------------------------------------- resume seeds
def _trainer_at(step: int, accumulation: int, per_generation: int, iterations: int = 1):
    return types.SimpleNamespace(args=types.SimpleNamespace(gradient_accumulation_steps=accumulation,
                                                            steps_per_generation=per_generation,
                                                            num_iterations=iterations),
                                 state=types.SimpleNamespace(global_step=step))


@pytest.mark.parametrize("accumulation, per_generation, iterations", [(1, 1, 1), (4, 4, 1), (4, 2, 1), (2, 2, 2)])
def test_a_resumed_grpo_run_continues_the_sampling_rounds(accumulation, per_generation, iterations):
    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc

    def rounds(start_step: int, n: int) -> list[int]:
        hook = EnvRolloutFunc.__new__(EnvRolloutFunc)
        hook.calls, hook._rounds_before = 0, None
        trainer = _trainer_at(start_step, accumulation, per_generation, iterations)
        return [hook.round_index(trainer) for _ in range(n)]

    every = per_generation * iterations  # micro-steps per generation round
    per_step = accumulation / every  # rounds per optimizer step
    straight = rounds(0, 12)
    assert straight == list(range(1, 13)), "a fresh run numbers its rounds as before"
    for stop in (1, 2, 3):
        if (stop * accumulation) % every:
            continue  # TRL itself regenerates at a resume that falls inside a round
        resumed = rounds(stop, 3)
        first = round(stop * per_step) + 1
        assert resumed == straight[first - 1:first + 2], (stop, resumed)


@pytest.mark.slow
def test_a_real_grpo_run_resumes_with_the_next_rounds_seeds(tiny_model_dir, tmp_path, train_main,
                                                            quiet_training_env, monkeypatch):
    from medagentgym.medcopilot import rollout_func

    calls: list[int] = []
    real = rollout_func.episode_seed

    def recording(seed, rank, call, row):
        if row == 0:
            calls.append(call)
        return real(seed, rank, call, row)

    monkeypatch.setattr(rollout_func, "episode_seed", recording)
    root = _echo_family(tmp_path / "tasks")
    out = tmp_path / "run"
    argv = ["recipe=grpo_tiny", f"model.name_or_path={tiny_model_dir}", f"tasks.root={root}",
            "tasks.families=[echo_digit]", "env.sandbox=local", "env.allow_unisolated=true", "env.workers=2", "env.max_turns=1",
            "rollout.concurrency=4", "rollout.max_new_tokens=4", "trainer.per_device_train_batch_size=4",
            "trainer.num_generations=2", "trainer.max_completion_length=64", f"output.dir={out}",
            "trainer.save_strategy=steps", "trainer.save_steps=1"]
    assert train_main([*argv, "trainer.max_steps=2"]) == 0
    assert calls == [1, 2]
    calls.clear()
    assert train_main([*argv, "trainer.max_steps=4"]) == 0  # resumes from checkpoint-2
    assert calls == [3, 4], "the resumed run samples the rounds that follow, not the first ones again"


# --------------------------------------------------------------------------------------------- paper table
def test_the_paper_table_shows_the_difference_from_base_with_n_and_intervals():
    from medagentgym.env_client.paper_table import PAPER_COLUMNS, paper_table, render_paper_table
    from medagentgym.tasks import SUITES

    def report(rate: float, n: int = 100) -> dict:
        families = [f for f, _ in PAPER_COLUMNS] + list(SUITES["ood"])
        return {"per_family": {f: {"success_rate": rate, "n": n, "ci95": [rate - 0.1, rate + 0.1]}
                               for f in families}}

    table = paper_table({"base": [report(0.3)], "sft": [report(0.4)], "grpo": [report(0.32)]})
    base, sft, grpo = table["rows"]
    assert table["base"] == "base" and base["delta_id"] is None and base["id_episodes"] == 800
    assert sft["delta_id"] == pytest.approx(10.0) and sft["ci95"]["mimic_iii"] == pytest.approx([30.0, 50.0])
    # each family's se is 20 / 3.92; the mean over 8 has se / sqrt(8); two rows add in quadrature
    se = math.hypot(20 / (2 * 1.959964) / math.sqrt(8), 20 / (2 * 1.959964) / math.sqrt(8))
    assert sft["delta_id_ci95"] == pytest.approx([10.0 - 1.959964 * se, 10.0 + 1.959964 * se])
    assert sft["delta_id_ci95"][0] > 0 > grpo["delta_id_ci95"][0], "+10 is seen, +2 is not"
    md = render_paper_table(table)
    assert "| Δ ID vs base | Δ OOD vs base | n (ID episodes) |" in md
    assert "| +10.0 [+5.0, +15.0] |" in md and "(n=100)" in md and "30.0–50.0" in md
    # a report without an interval gets Wilson's from n
    wilson = paper_table({"base": [{"per_family": {"eicu": {"success_rate": 0.8, "n": 10}}}]})["rows"][0]
    assert wilson["ci95"]["eicu"] == pytest.approx([49.0, 94.3], abs=0.1)


def test_a_grpo_run_on_vllm_syncs_exact_weights_through_trls_trainer(tiny_model_dir, tmp_path, train_main,
                                                                    quiet_training_env, monkeypatch):
    """``train.py`` with ``rollout.backend=vllm``: TRL's GRPOTrainer, its VLLMGeneration and its sync, with only the
    engine faked (it starts no vLLM; a turn is a submit, right half of the time). After the run the frozen bf16 base
    is bit-identical and a sync hands the engine the fp32 merge of the trained adapter."""
    from transformers import AutoModelForCausalLM
    from trl.generation.vllm_generation import VLLMGeneration
    from trl.trainer import grpo_trainer

    made: list = []
    coin = torch.Generator().manual_seed(0)

    class EngineFaked(VLLMGeneration):
        def _init_vllm(self):  # where TRL starts vLLM's LLM
            self.llm = _Engine()
            made.append(self)

        def generate(self, prompts, images, num_generations, profiler=None):  # vLLM's sampling
            tok = self.processing_class
            replies = []
            for prompt in prompts:  # submit the asked number half of the time: rewards differ within a group
                asked = re.findall(r"Submit the number (\d+)", tok.decode(prompt))[-1]
                answer = asked if torch.rand((), generator=coin) < 0.5 else "x"
                text = f'<tool_call>\n{{"name": "submit_answer", "arguments": {{"answer": "{answer}"}}}}\n</tool_call>'
                replies.append(tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
            return prompts, replies, [[[-0.5]] * len(r) for r in replies], None

    monkeypatch.setattr(grpo_trainer, "VLLMGeneration", EngineFaked)
    root = _echo_family(tmp_path / "tasks")
    assert train_main(["recipe=grpo_tiny", f"model.name_or_path={tiny_model_dir}", "model.dtype=bfloat16",
                       "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: all-linear}", f"tasks.root={root}",
                       "tasks.families=[echo_digit]", "env.sandbox=local", "env.allow_unisolated=true", "env.workers=2", "env.max_turns=2",
                       "rollout.backend=vllm", "rollout.concurrency=4", "rollout.max_new_tokens=32",
                       "trainer.per_device_train_batch_size=4", "trainer.num_generations=2", "trainer.max_steps=3",
                       "trainer.learning_rate=5e-2", "trainer.vllm_mode=colocate",
                       "trainer.vllm_max_model_length=4096", "trainer.max_completion_length=64",
                       f"output.dir={tmp_path / 'grpo'}"]) == 0
    (vg,) = made
    assert vg.llm.loads > 0, "TRL synced the weights before generating"
    policy = vg.model
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).state_dict()
    base = {n.removeprefix("base_model.model.").replace(".base_layer", ""): p
            for n, p in policy.named_parameters() if "lora_" not in n}
    assert all(torch.equal(base[n], start[n]) for n in base), "the frozen base changed"
    assert any(p.abs().sum() > 0 for n, p in policy.named_parameters() if "lora_B" in n), "the adapter trained"
    vg.sync_weights()
    merged = copy.deepcopy(policy).float().merge_and_unload()
    for name, p in merged.named_parameters():
        _assert_rounded_from(vg.llm.weights[name], p.detach(), name)
