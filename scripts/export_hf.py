"""Export a trained run as a standalone Hugging Face model folder (LoRA merged, model card), optionally pushing it.

    python scripts/export_hf.py runs/sft_qwen7b --out artifacts/export/sft_qwen7b
    HF_TOKEN=hf_... python scripts/export_hf.py runs/sft_qwen7b --out artifacts/export/sft_qwen7b --push org/name

Writes model weights (safetensors), tokenizer + chat template, generation config and README.md (model card: base
model, recipe, data, final metrics) into --out. --push uploads that folder with huggingface_hub (token: HF_TOKEN).
"""

from __future__ import annotations

import argparse
import sys

from medcopilot.config import RecipeError
from medcopilot.export import ExportError, export_model


def main(argv: list[str] | None = None) -> int:
    """Parse flags, export, print where it went; errors are one line with exit status 2."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a run's output.dir (full model or LoRA adapter) or any model folder")
    parser.add_argument("--out", required=True, help="destination folder (replaced if it exists)")
    parser.add_argument("--push", metavar="ORG/NAME", default=None, help="Hub repo to upload to (needs HF_TOKEN)")
    parser.add_argument("--public", action="store_true", help="create the Hub repo public (default: private)")
    parser.add_argument("--debug", action="store_true", help="show the traceback on errors")
    args = parser.parse_args(argv)
    try:
        out = export_model(args.run_dir, args.out, push=args.push, private=not args.public)
    except (ExportError, RecipeError) as exc:
        if args.debug:
            raise
        print(f"export_hf.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"exported to {out}" + (f" and pushed to {args.push}" if args.push else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
