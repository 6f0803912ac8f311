"""Measure Med-Copilot's own trainers on one GPU: a GRPO step and an SFT step of a randomly initialised Qwen2.5 shape.

    python scripts/bench_gpu.py --shape 7b --json          # one JSON line: times, token rates, peak memory
    python scripts/bench_gpu.py --shape 14b --json --skip grpo
    python scripts/bench_gpu.py --shape tiny --json        # the same code on CPU (a slow test runs it)
    python scripts/bench_gpu.py --shape 7b --json --deadline-s 480 --out-json OUT/bench_gpu.json

``--deadline-s`` bounds the whole run (the device call's limit): a step that would start too late is skipped and
said so, and ``--out-json`` is rewritten atomically after every step, so a run stopped from outside keeps what it
measured. ``scripts/bench_gpu_device.sh`` is the device call around it (issue #32).

What runs, on a model with Qwen2.5-7B's or 14B's published shape and random weights (no Hub here):

- **GRPO step**: :func:`medagentgym.medcopilot.trainers.grpo.build_trainer` (TRL's ``GRPOTrainer`` with our multi-turn rollout
  hook, the ``transformers`` generate backend: an **HF-generate step**, not the flagship recipe's vLLM-colocate one,
  since vLLM cannot be carried to the device; LoRA r32 on every linear layer, bf16 on a GPU, activation
  checkpointing) on the ``grpo_qwen*`` recipe with a few episodes of a generated EHR-SQL family (``mimic_iii``,
  tiny build). The first turn of every episode is the task's reference SQL, written into the episode as the
  model's turn, so every episode runs real SQL in the sandbox; the later turns are the random model's. The step
  time is split into generation (``model.generate``), environment (the rest of the rollout: the generator
  waits on sandbox calls and episode bookkeeping) and update (rescoring, loss, backward, optimizer); it reports
  generated and trained tokens per second, the generator's idle share, the sandbox's share of the step (the
  environment phase's wall time over the step's) and the sandbox seconds summed over episodes, and the GPU's peak
  memory per phase (rollout: generation with the sandbox waits; update: rescoring, loss, backward, optimizer).
- **SFT step**: :func:`medagentgym.medcopilot.trainers.sft.build_trainer` on the ``sft_qwen*`` recipe, one optimizer step on
  conversations as long as the recipe's ``trainer.max_length``.

Both print the GPU's peak allocated and reserved memory next to ``train.py --dry-run``'s estimate for the same
settings (:func:`medagentgym.medcopilot.recipe_checks.recipe_memory_plan`), and the same arithmetic at the lengths measured.
Weights are random, so the policy never answers right and rewards are 0: the output says so. The tokenizer is
the tiny test tokenizer (ids it does not know decode to nothing), so episodes are shorter in text than a real
model's would be; token counts are the model's.

The sandbox is bubblewrap when this machine can run it (user namespaces), else the unisolated ``local`` backend
(acceptable for random weights' code; the output says which and why).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

#: Published Qwen2.5 shapes (config.json): layers, hidden, query / KV heads, intermediate, vocabulary.
SHAPES: dict[str, dict[str, Any]] = {
    "7b": {"num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
           "intermediate_size": 18944, "vocab_size": 152064, "recipe": "qwen7b"},
    "14b": {"num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8,
            "intermediate_size": 13824, "vocab_size": 152064, "recipe": "qwen14b"},
    "tiny": {"recipe": "qwen7b"},  # medagentgym.medcopilot.tiny's shape, with the 7B recipes' settings (scaled down)
}
FAMILY = "mimic_iii"
GIB = 1024 ** 3
GENERATION_NOTE = ("HF-generate step: model.generate inside our rollout hook (rollout.backend=transformers); the "
                   "flagship recipe generates with vLLM colocated, which cannot be carried to the device")
REWARD_NOTE = ("weights are random (no Hub on the device), so the policy never answers right: rewards are 0; "
               "times, token rates and memory are what this measures")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    p.add_argument("--json", action="store_true", help="print only the JSON line on stdout (progress on stderr)")
    p.add_argument("--skip", action="append", choices=["grpo", "sft"], default=[], help="leave a step out")
    p.add_argument("--tasks", type=int, default=2, help="tasks in the GRPO step")
    p.add_argument("--generations", type=int, default=4, help="episodes per task (GRPO group size)")
    p.add_argument("--max-turns", type=int, default=3, help="turns per episode")
    p.add_argument("--max-new-tokens", type=int, default=256, help="tokens per assistant turn")
    p.add_argument("--max-completion", type=int, default=None,
                   help="tokens per episode after the prompt (default: the recipe's; tiny: 512)")
    p.add_argument("--sft-length", type=int, default=None,
                   help="tokens per SFT conversation (default: the recipe's max_length; tiny: 4096)")
    p.add_argument("--sandbox", choices=["auto", "bwrap", "local"], default="auto")
    p.add_argument("--work-dir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="wall seconds this run may take from its start; a step that cannot finish in time is skipped")
    p.add_argument("--out-json", type=Path, default=None,
                   help="also write the result here, atomically, after every step (partial results survive a kill)")
    return p.parse_args(argv)


#: Wall seconds a step is assumed to need at least, to decide whether to start it before the deadline (a 7B GRPO
#: step of the bench's size: model init, 8 episodes x 3 turns of HF generate, the update; the SFT step is shorter).
MIN_STEP_S = {"grpo": 150.0, "sft": 60.0}
STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[bench_gpu] {text}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------------- setup
def device_info() -> dict[str, Any]:
    import torch
    import transformers
    import trl

    cuda = torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()}, "
                                                                    f"{os.cpu_count()} cores)",
            "gpu_gib": round(torch.cuda.get_device_properties(0).total_memory / GIB, 1) if cuda else None,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            **{name: _version(name) for name in ("datasets", "peft", "pydantic", "pyarrow")},
            "python": platform.python_version()}


def _version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def make_pool(choice: str, workers: int) -> tuple[Any, str]:
    """A sandbox pool and a line saying which backend runs and why."""
    from medagentgym import sandbox

    if choice in ("auto", "bwrap"):
        try:
            pool = sandbox.make_pool("bwrap", workers=workers)
            return pool, f"bwrap ({', '.join(getattr(pool, 'layers', [])) or 'isolated'})"
        except Exception as exc:  # noqa: BLE001 - any reason bubblewrap cannot run here is reported
            if choice == "bwrap":
                raise
            reason = " ".join(str(exc).split())[:200]
    else:
        reason = "asked for"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pool = sandbox.make_pool("local", workers=workers, allow_unisolated=True)
    return pool, f"local (UNISOLATED; bubblewrap not used: {reason})"


def random_model(shape: str, tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    """A randomly initialised Qwen2 causal LM of ``shape`` on the GPU (bf16) or CPU (fp32), and its config dict."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from medagentgym.medcopilot.tiny import TINY_ARCH

    if shape == "tiny":
        arch = dict(TINY_ARCH, vocab_size=len(tokenizer))
    else:  # Qwen2.5's published configs: 32,768 positions, untied embeddings, rope theta 1e6
        arch = {k: v for k, v in SHAPES[shape].items() if k != "recipe"}
        arch.update(max_position_embeddings=32768, tie_word_embeddings=False, rope_theta=1000000.0)
    cuda = torch.cuda.is_available()
    config = Qwen2Config(**arch, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None, attn_implementation="sdpa")
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    return model, config.to_dict()


def build_family(root: Path) -> Any:
    from medagentgym import tasks

    family = tasks.make(FAMILY, root=root)
    family.build(root, size="tiny", seed=0)
    return family


class StepClock:
    """A ``TrainerCallback`` timing the first optimizer step and reading the GPU's peak memory over it."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from transformers import TrainerCallback

        class _Clock(TrainerCallback):
            def __init__(self) -> None:
                self.began = self.step_s = None

            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                import torch

                if self.began is None:
                    gc.collect()
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                    self.began = time.monotonic()

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                import torch

                if self.step_s is None and self.began is not None:
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
                    self.step_s = time.monotonic() - self.began

        return _Clock()


def peak_memory() -> dict[str, float | None]:
    import torch

    if not torch.cuda.is_available():
        return {"peak_allocated_gib": None, "peak_reserved_gib": None}
    return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 2)}


def reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------------------- GRPO
def scripted_rollout_class(reference_turns: dict[tuple[int, ...], list[int]]) -> type:
    """An :class:`~medagentgym.medcopilot.rollout_func.EnvRolloutFunc` whose episodes open with the task's reference SQL turn.

    ``reference_turns`` maps an episode's prompt ids to the ids of its first turn; every other context goes to
    ``model.generate`` as usual, in one batch. Each call's wall time, generator time and output are kept.
    """
    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc

    class ScriptedFirstTurn(EnvRolloutFunc):
        calls_log: list[dict[str, Any]]

        def hf_generator(self, model: Any, **kwargs: Any) -> Any:
            generate = super().hf_generator(model, **kwargs)

            def gen(contexts: list[list[int]], seeds: list[int]) -> tuple[list[list[int]], list[list[float]]]:
                ids: list[list[int] | None] = [reference_turns.get(tuple(c)) for c in contexts]
                logprobs: list[list[float] | None] = [None if i is None else [0.0] * len(i) for i in ids]
                todo = [k for k, i in enumerate(ids) if i is None]
                if todo:
                    new, lps = generate([contexts[k] for k in todo], [seeds[k] for k in todo])
                    for k, n, lp in zip(todo, new, lps):
                        ids[k], logprobs[k] = n, lp
                return ids, logprobs  # type: ignore[return-value]
            return gen

        def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
            began = time.monotonic()
            reset_peak()
            out = super().__call__(prompts, trainer)
            memory = peak_memory()  # the rollout phase: generation and the sandbox waits
            reset_peak()  # what follows in the step is the update
            log = getattr(self, "calls_log", None)
            if log is None:
                log = self.calls_log = []
            log.append({"wall_s": time.monotonic() - began, **self.timing, "out": out, "memory": memory})
            return out

    return ScriptedFirstTurn


def reference_turns(index: Any, family: Any, tokenizer: Any) -> dict[tuple[int, ...], list[int]]:
    """Prompt ids -> the ids of the reference solution's first action (the SQL), for every task of ``index``."""
    from medagentgym.env_client import tool_schemas
    from medagentgym.env_client.policies import render_action
    from medagentgym.env_client.tokens import render_prompt

    tools = tool_schemas(family.actions)
    out = {}
    for row in index.rows:
        first = family.reference_solution(index.instances[row["instance_id"]])[0]
        text = render_action(first["action"], first.get("params", {}), "tool_call")
        key = tuple(render_prompt(tokenizer, row["prompt"], tools))
        out[key] = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return out


def grpo_step(opts: argparse.Namespace, tokenizer: Any, root: Path, family: Any, gpu_gib: float) -> dict[str, Any]:
    import torch

    from medagentgym.medcopilot.config import load_recipe
    from medagentgym.medcopilot.recipe_checks import memory_plan, recipe_memory_plan, shape_from_config
    from medagentgym.medcopilot.trainers.grpo import build_index, build_trainer

    cuda = torch.cuda.is_available()
    episodes = opts.tasks * opts.generations
    recipe = f"grpo_{SHAPES[opts.shape]['recipe']}"
    completion = opts.max_completion or (512 if opts.shape == "tiny" else None)
    overrides = [f"tasks.root={root}", f"tasks.families=[{FAMILY}]", "tasks.mixture=null", f"tasks.limit={opts.tasks}",
                 f"env.max_turns={opts.max_turns}", f"env.workers={episodes}", "rollout.backend=transformers",
                 f"rollout.concurrency={episodes}", f"rollout.max_new_tokens={opts.max_new_tokens}",
                 "trainer.max_steps=1", "trainer.per_device_train_batch_size=1",
                 f"trainer.gradient_accumulation_steps={episodes}", f"trainer.num_generations={opts.generations}",
                 "trainer.save_strategy='no'", "trainer.report_to=[]", "trainer.logging_steps=1",
                 f"output.dir={root.parent / 'grpo'}"]
    if completion:
        overrides.append(f"trainer.max_completion_length={completion}")
    if not cuda:
        overrides += ["model.dtype=float32", "trainer.bf16=false"]
    cfg = load_recipe(recipe, overrides)
    say(f"GRPO: {recipe} with {opts.tasks} tasks x {opts.generations} episodes, {opts.max_turns} turns of "
        f"<= {opts.max_new_tokens} tokens")
    model, config = random_model(opts.shape, tokenizer)
    resident = peak_memory()
    pool, sandbox_line = make_pool(opts.sandbox, workers=episodes)
    clock = StepClock()
    try:
        turns = reference_turns(build_index(cfg), family, tokenizer)
        trainer, rollout, _ = build_trainer(cfg, model=model, tokenizer=tokenizer, pool=pool,
                                            rollout_cls=scripted_rollout_class(turns), callbacks=[clock])
        trainer.train()
    finally:
        pool.close()
    update_memory = peak_memory()  # reset at the rollout's end: the update phase alone
    (call,) = rollout.calls_log
    out = call["out"]
    lengths = [len(p) + len(c) for p, c in zip(out["prompt_ids"], out["completion_ids"])]
    scripted = sum(len(turns.get(tuple(p), [])) for p in out["prompt_ids"])
    generated = sum(sum(m) for m in out["env_mask"]) - scripted
    update_s = clock.step_s - call["wall_s"]
    stats = out["episode_stats"]
    args = trainer.args
    shape = shape_from_config(config)
    estimate = recipe_memory_plan(cfg, args, shape, gpu_gib)
    longest, longest_completion = max(lengths), max(len(c) for c in out["completion_ids"])
    measured = memory_plan(shape, lora_rank=cfg.model.lora.r if cfg.model.lora else None, micro_batch=1,
                           seq_tokens=longest, scored_tokens=longest_completion, checkpointing=True, gpu=gpu_gib,
                           method="grpo", generation={"batch": episodes, "tokens": longest})
    history = [row for row in trainer.state.log_history if "loss" in row]
    environment_s = call["wall_s"] - call["generate_s"]
    result = {
        "recipe": recipe, "generation_backend": GENERATION_NOTE, "episodes": episodes, "max_turns": opts.max_turns, "max_new_tokens": opts.max_new_tokens,
        "max_completion_length": int(args.max_completion_length), "sandbox": sandbox_line,
        "step_s": round(clock.step_s, 2),
        "split_s": {"generation": round(call["generate_s"], 2),
                    "environment": round(call["wall_s"] - call["generate_s"], 2), "update": round(update_s, 2)},
        "sandbox_share_of_step": round(environment_s / clock.step_s, 4),
        "generator_idle_share": round(call["idle_share"], 3), "generate_calls": int(call["calls"]),
        "sandbox_s_summed_over_episodes": round(sum(s.get("sandbox_seconds", 0.0) for s in stats), 3),
        "sandbox_calls": int(sum(s.get("sandbox_calls", 0) for s in stats)),
        "generated_tokens": int(generated), "generated_tokens_per_s": round(generated / max(call["generate_s"], 1e-9), 1),
        "trained_tokens": int(sum(lengths)), "trained_tokens_per_s": round(sum(lengths) / max(update_s, 1e-9), 1),
        "tokens_per_episode": {"mean": round(sum(lengths) / len(lengths), 1), "max": longest,
                               "prompt_mean": round(sum(map(len, out["prompt_ids"])) / len(lengths), 1)},
        "turns_mean": round(sum(s.get("turns", 0) for s in stats) / len(stats), 2),
        "reward": history[-1].get("reward") if history else None,
        "peak_gib_by_phase": {"model_loaded": resident, "rollout": call["memory"], "update": update_memory},
        **{k: None if update_memory[k] is None else max(call["memory"][k], update_memory[k])
           for k in ("peak_allocated_gib", "peak_reserved_gib")},
        "dry_run_estimate_gib": {"training": round(estimate["train"], 2),
                                 "generating": round(estimate.get("generating", 0.0), 2),
                                 "assumes": f"{estimate['seq']:,} tokens per episode, {episodes} in flight"},
        "estimate_at_measured_lengths_gib": {"training": round(measured["train"], 2),
                                             "generating": round(measured["generating"], 2),
                                             "assumes": f"{longest:,} tokens per episode, {episodes} in flight"},
    }
    del trainer, rollout, model
    free_memory()
    return result


# ----------------------------------------------------------------------------------------------------------- SFT
def sft_rows(index: Any, tokenizer: Any, n: int, length: int) -> list[dict[str, Any]]:
    """``n`` conversations of about ``length`` tokens: a real task prompt and one long assistant turn."""
    import random

    words = [w for w in (tokenizer.decode([i]) for i in range(len(tokenizer))) if w.strip().isalpha()] or ["word"]
    rng = random.Random(0)
    rows = []
    for k in range(n):
        prompt = index.rows[k % len(index.rows)]["prompt"]
        text, size = "", len(tokenizer.apply_chat_template(prompt, tokenize=True))
        while size < length + 16:
            chunk = " ".join(rng.choice(words) for _ in range(256))
            text += " " + chunk
            size += len(tokenizer(chunk, add_special_tokens=False)["input_ids"])
        rows.append({"messages": [*prompt, {"role": "assistant", "content": text.strip()}]})
    return rows


def sft_step(opts: argparse.Namespace, tokenizer: Any, root: Path, gpu_gib: float) -> dict[str, Any]:
    import torch

    from medagentgym.medcopilot.config import load_recipe
    from medagentgym.medcopilot.recipe_checks import memory_plan, recipe_memory_plan, shape_from_config
    from medagentgym.medcopilot.trainers.grpo import build_index
    from medagentgym.medcopilot.trainers.sft import build_trainer

    cuda = torch.cuda.is_available()
    recipe = f"sft_{SHAPES[opts.shape]['recipe']}"
    overrides = [f"tasks.root={root}", f"tasks.families=[{FAMILY}]", "tasks.mixture=null", "tasks.limit=4",
                 "trainer.max_steps=1", "trainer.gradient_accumulation_steps=1", "trainer.report_to=[]",
                 "trainer.save_strategy='no'", "trainer.logging_steps=1", f"output.dir={root.parent / 'sft'}"]
    length = opts.sft_length or (4096 if opts.shape == "tiny" else None)  # tiny: its whole context
    if length:
        overrides.append(f"trainer.max_length={length}")
    if not cuda:
        overrides += ["model.dtype=float32", "trainer.bf16=false"]
    cfg = load_recipe(recipe, overrides)
    max_length = int(cfg.trainer["max_length"])
    micro = int(cfg.trainer.get("per_device_train_batch_size", 1))
    say(f"SFT: {recipe}, {micro} x {max_length} tokens")
    model, config = random_model(opts.shape, tokenizer)
    rows = sft_rows(build_index(cfg), tokenizer, micro, max_length)
    clock = StepClock()
    trainer, _ = build_trainer(cfg, model=model, tokenizer=tokenizer, rows=rows)
    trainer.add_callback(clock)
    trainer.train()
    memory = peak_memory()
    tokens = sum(min(max_length, len(r)) for r in trainer.train_dataset["input_ids"][:micro])
    shape = shape_from_config(config)
    estimate = recipe_memory_plan(cfg, trainer.args, shape, gpu_gib)
    measured = memory_plan(shape, lora_rank=cfg.model.lora.r if cfg.model.lora else None, micro_batch=micro,
                           seq_tokens=tokens // micro, scored_tokens=tokens // micro, checkpointing=True, gpu=gpu_gib,
                           method="sft")
    result = {"recipe": recipe, "micro_batch": micro, "max_length": max_length, "tokens": int(tokens),
              "step_s": round(clock.step_s, 2), "trained_tokens_per_s": round(tokens / clock.step_s, 1), **memory,
              "dry_run_estimate_gib": {"training": round(estimate["train"], 2),
                                       "assumes": f"{micro} x {estimate['seq']:,} tokens"},
              "estimate_at_measured_lengths_gib": {"training": round(measured["train"], 2),
                                                   "assumes": f"{micro} x {tokens // micro:,} tokens"}}
    del trainer, model
    free_memory()
    return result


# ----------------------------------------------------------------------------------------------------------- main
def run(opts: argparse.Namespace) -> dict[str, Any]:
    """Run the steps ``opts`` asks for; returns the result dict (the JSON line)."""
    import torch

    from medagentgym.medcopilot.recipe_checks import gpu_gib
    from medagentgym.medcopilot.tiny import build_tiny_tokenizer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    if not torch.cuda.is_available():
        if opts.shape != "tiny":
            raise SystemExit(f"bench_gpu.py: error: --shape {opts.shape} needs a CUDA GPU (this machine has none); "
                             f"--shape tiny runs the same code on CPU")
        torch.set_num_threads(1)  # the tiny model gains nothing from threads; on a busy machine they cost ~10x
    work = opts.work_dir or Path(tempfile.mkdtemp(prefix="bench_gpu."))
    root = work / "tasks"
    result: dict[str, Any] = {"bench": "bench_gpu", "shape": opts.shape, **device_info(), "rewards": REWARD_NOTE,
                              "tokenizer": "medagentgym.medcopilot.tiny (ids it does not know decode to nothing)"}
    try:
        tokenizer = build_tiny_tokenizer(seed=0)
        say(f"building {FAMILY} (tiny) under {root}")
        family = build_family(root)
        gib = gpu_gib()
        steps = {"grpo": lambda: grpo_step(opts, tokenizer, root, family, gib),
                 "sft": lambda: sft_step(opts, tokenizer, root, gib)}
        for name, step in steps.items():
            if name in opts.skip:
                continue
            left = None if opts.deadline_s is None else opts.deadline_s - (time.monotonic() - STARTED)
            if left is not None and left < MIN_STEP_S[name]:
                result.setdefault("skipped", {})[name] = (f"{left:.0f} s left of --deadline-s {opts.deadline_s:.0f}, "
                                                          f"less than the {MIN_STEP_S[name]:.0f} s a step needs")
                say(f"{name}: skipped ({result['skipped'][name]})")
                continue
            result[name] = step()
            result["elapsed_s"] = round(time.monotonic() - STARTED, 1)
            write_json(opts.out_json, result)
    finally:
        if opts.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return result


def write_json(path: Path | None, result: dict[str, Any]) -> None:
    """Write ``result`` to ``path`` atomically (nothing when ``path`` is None)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    redirect = contextlib.redirect_stdout(sys.stderr) if opts.json else contextlib.nullcontext()
    with redirect:  # TRL's and transformers' prints go to stderr, the JSON line alone to stdout
        result = run(opts)
    result["elapsed_s"] = round(time.monotonic() - STARTED, 1)
    write_json(opts.out_json, result)
    if not opts.json:
        for step in ("grpo", "sft"):
            if step in result:
                print(f"{step}: " + json.dumps({k: v for k, v in result[step].items() if k != "recipe"}))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
