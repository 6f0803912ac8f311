"""What the tiny model needs to learn to copy a value out of a tool observation (``toy_lookup``), one change at a time.

    python scripts/ablate_copy_warmup.py [--seeds 3] [--steps 400] [--json]

Each variant warms a fresh tiny model up on the exact demonstrator (run the query, submit what it returned) for
``--steps`` supervised steps, then scores sampled episodes on the held-out records (3 per record, 48 episodes) and
the same model with every observed value made wrong (the control). Variants:

- ``shipped``: what :func:`medagentgym.medcopilot.learning.warm_up` does: the compact prompt, weights at std 0.1, the first
  ``WARM_DEFAULTS['toy_lookup']['last_turn']`` steps on each demonstration's last turn alone, then whole episodes;
- ``init_0.02``: the same with the weights at ``Qwen2Config``'s default std 0.02;
- ``no_last_turn``: every step on whole episodes;
- ``full_prompt``: the full prompt (tool block) instead of the compact one.

Prints one line per (variant, seed) and, with ``--json``, ends with one JSON line. docs/benchmarks.md ("Learning")
quotes its numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

for _key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VARIANTS = ("shipped", "init_0.02", "no_last_turn", "full_prompt")


def one(variant: str, seed: int, steps: int, work: Path) -> dict:
    """Warm one model up as ``variant`` says; its held-out success and control."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from medagentgym.medcopilot import tiny
    from medagentgym.medcopilot.learning import OBSERVATION, PROMPT, WARM_DEFAULTS, copy_check

    model_dir = tiny.build_tiny_model(work / f"tiny-{variant}", seed=0,
                                      initializer_range=0.02 if variant == "init_0.02" else None)
    defaults = WARM_DEFAULTS[OBSERVATION]
    last_turn = 0 if variant == "no_last_turn" else min(defaults["last_turn"], steps)
    settings = {**defaults, "steps": steps, "last_turn": last_turn, "clean": steps - last_turn}
    prompt = "full" if variant == "full_prompt" else PROMPT
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    cpu0 = time.process_time()
    held, control = copy_check(model, tok, work / f"{variant}-{seed}", settings, seed=seed, prompt=prompt)
    return {"variant": variant, "seed": seed, "steps": steps, "last_turn": last_turn, "prompt": prompt,
            "heldout": round(held.success, 4), "control": round(control.success, 4), "episodes": held.episodes,
            "cpu_s": round(time.process_time() - cpu0, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1; default 3")
    p.add_argument("--steps", type=int, default=400, help="warm-up steps on the exact demonstrator; default 400")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS), help="variants to run")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.steps < 1:
        p.error(f"--seeds={args.seeds} and --steps={args.steps} must be >= 1")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for variant in args.variants:
            for seed in range(args.seeds):
                rows.append(one(variant, seed, args.steps, Path(work)))
                r = rows[-1]
                print(f"{variant:13} seed {seed}: held-out {r['heldout']:.3f}, control {r['control']:.3f} "
                      f"({r['episodes']} episodes, {r['cpu_s']:.0f} s CPU)", flush=True)
    if args.json:
        print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
