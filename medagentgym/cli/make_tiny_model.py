"""Build the tiny random Qwen2 model used by the tiny recipes and CPU tests.

    medagentgym tiny-model                       # writes artifacts/tiny-qwen2/
    medagentgym tiny-model /tmp/tiny --seed 1    # (--out /tmp/tiny works too)

Writes config.json, model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json and
chat_template.jinja (TRL's Qwen2.5 template, unchanged). Takes about a second after imports.
"""

from __future__ import annotations

import argparse
import sys

from medagentgym.env_client.argtypes import nonneg_int
from medagentgym.medcopilot.tiny import build_tiny_model


def main(argv: list[str] | None = None) -> int:
    """Parse flags, build the model, print where it went."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=None, help="output folder (default artifacts/tiny-qwen2; replaced)")
    parser.add_argument("--out", dest="out_flag", default=None, help="same as the positional OUT")
    parser.add_argument("--seed", type=nonneg_int, default=0, help="seed for the tokenizer corpus and the weights")
    args = parser.parse_args(argv)
    if args.out and args.out_flag and args.out != args.out_flag:
        parser.error(f"two output folders given ({args.out!r} and --out {args.out_flag!r}); give one")
    path = build_tiny_model(args.out or args.out_flag or "artifacts/tiny-qwen2", seed=args.seed)
    print(f"tiny Qwen2 model written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
