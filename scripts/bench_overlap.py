"""Benchmark generation overlapping sandbox execution: the generator's idle share of a GRPO rollout, lockstep vs
continuous batching, on the tiny model on CPU.

    python scripts/bench_overlap.py [--episodes 8] [--turns 3] [--exec-s 0.4] [--repeats 3] [--json]

Runs ``medagentgym.medcopilot.rollout_func.EnvRolloutFunc.run`` (the GRPO rollout hook) over toy_sql episodes with both
batching modes, alternating, ``--repeats`` times each, and prints per mode the median wall time of a rollout, the
time spent inside generation calls, the generator's idle share (wall time with no generation call in flight: on
a GPU, the GPU's idle time) and the number of calls; then the ratios continuous / lockstep.

The tiny model really generates every turn (``--max-new-tokens`` tokens per row, batched), but the episode's
actions are scripted: a random model's text never parses into an action, so it would never reach the sandbox.
Each turn runs Python in the sandbox that sleeps for a time drawn per episode and turn from
``[0.25, 1.75] x --exec-s`` (sandbox calls differ in length, as real ones do). Builds the tiny model and toy_sql in
a temporary directory; writes nothing else. Numbers on a shared machine are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
from pathlib import Path


def scripted_generator(model, tokenizer, *, max_new_tokens: int, exec_s: float):
    """A ``BatchGenerate`` that runs the real model on the batch, then answers each row with a sandbox call."""
    from medagentgym.env_client.policies import render_action
    from medagentgym.medcopilot.rollout_func import hf_batch_generate

    def gen(contexts, seeds):
        hf_batch_generate(model, tokenizer, contexts, seeds=seeds, max_new_tokens=max_new_tokens, temperature=1.0)
        out = []
        for ctx in contexts:
            draw = int(hashlib.sha256(str(ctx).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
            code = f"import time\ntime.sleep({exec_s * (0.25 + 1.5 * draw):.3f})\nprint('ok')"
            text = render_action("code_execution", {"lang": "python", "code": code})
            out.append(tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
        return out, [[0.0] * len(ids) for ids in out]

    return gen


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=8, help="episodes per rollout (GRPO rows); default 8")
    p.add_argument("--turns", type=int, default=3, help="turns per episode (each runs code); default 3")
    p.add_argument("--exec-s", type=float, default=0.4, help="mean seconds of one sandbox call; default 0.4")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens the model generates per row; default 32")
    p.add_argument("--repeats", type=int, default=3, help="rollouts per mode (alternating); default 3")
    p.add_argument("--sandbox", choices=["bwrap", "local"], default="bwrap", help="sandbox backend; default bwrap")
    p.add_argument("--json", action="store_true", help="end stdout with the results as one JSON line")
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym import sandbox
    from medagentgym import tasks
    from medagentgym.env_client import Env, EnvConfig
    from medagentgym.env_client.prompts import initial_messages
    from medagentgym.medcopilot.rollout_func import EnvRolloutFunc, PromptIndex
    from medagentgym.medcopilot.tiny import build_tiny_model

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny", seed=0)
        model, tok = AutoModelForCausalLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)
        root = Path(tmp) / "tasks"
        family = tasks.make("toy_sql", root=root)
        family.build(root, size="tiny", seed=0)
        instances = family.instances("train")[: max(1, args.episodes // 2)]
        index = PromptIndex.from_instances(instances, render=lambda inst: initial_messages(inst, family.actions))
        prompts = [row["prompt"] for row in index.rows for _ in range(2)][: args.episodes]
        gen = scripted_generator(model, tok, max_new_tokens=args.max_new_tokens, exec_s=args.exec_s)
        results: dict[str, list[dict]] = {"lockstep": [], "continuous": []}
        with sandbox.make_pool(args.sandbox, workers=args.episodes, allow_unisolated=args.sandbox == "local") as pool:
            for _ in range(args.repeats):
                for mode, runs in results.items():
                    hook = EnvRolloutFunc(
                        make_env=lambda: Env(pool, tasks_root=root, config=EnvConfig(max_turns=args.turns)),
                        index=index, tokenizer=tok, max_new_tokens=args.max_new_tokens, concurrency=args.episodes,
                        batching=mode)
                    hook.run(prompts, gen)
                    runs.append(dict(hook.timing))
    summary = {mode: {key: round(statistics.median(r[key] for r in rows), 4)
                      for key in ("wall_s", "generate_s", "idle_share", "calls")} for mode, rows in results.items()}
    summary["ratio_continuous_to_lockstep"] = {
        key: round(summary["continuous"][key] / summary["lockstep"][key], 3)
        for key in ("wall_s", "idle_share") if summary["lockstep"][key] > 0}
    summary["setup"] = {k: getattr(args, k) for k in ("episodes", "turns", "exec_s", "max_new_tokens", "repeats",
                                                      "sandbox")}
    for mode in ("lockstep", "continuous"):
        row = summary[mode]
        print(f"{mode:>10}: rollout {row['wall_s']:.2f} s, generating {row['generate_s']:.2f} s, "
              f"generator idle {100 * row['idle_share']:.1f} %, {row['calls']:.0f} calls")
    print(f"continuous / lockstep: wall {summary['ratio_continuous_to_lockstep'].get('wall_s')}, "
          f"idle share {summary['ratio_continuous_to_lockstep'].get('idle_share')}")
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
