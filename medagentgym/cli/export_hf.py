"""Export a trained run as a standalone Hugging Face model folder (LoRA merged, model card), optionally pushing it.

    medagentgym export runs/sft_tiny --out artifacts/export/sft_tiny --base-model Qwen/Qwen2.5-0.5B-Instruct
    HF_TOKEN=hf_... medagentgym export runs/grpo_qwen7b --out artifacts/export/grpo_qwen7b \\
        --eval runs/eval/grpo_qwen7b/report.json --push my-org/med-copilot-7b
    HF_TOKEN=hf_... medagentgym export --upload artifacts/export/grpo_qwen7b --push my-org/med-copilot-7b

Writes model weights (safetensors), tokenizer + chat template, generation config and README.md into --out. The
README is a Hub model card (huggingface_hub.ModelCard): metadata with the base model's Hub id, license, datasets,
tags and ``model-index`` results from each --eval report (``medagentgym eval --out DIR`` writes
``DIR/report.json``), then training recipe and data, evaluation tables, intended use and limitations. --push
uploads the folder (token: HF_TOKEN); if the upload fails the export is kept and one line says how to retry it
with --upload, which uploads an existing export without redoing it. The folder appears whole or not at all, so
Ctrl-C leaves the previous export (or none) and says which, exit 130.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from medagentgym.medcopilot.config import RecipeError
from medagentgym.medcopilot.export import ExportError, export_model, push_folder


def interrupted_line(out: str | None, push: str | None, since: float) -> str:
    """What an interrupted export or upload left, and the command that finishes it.

    Example:
        >>> interrupted_line("artifacts/export/sft", None, time.time())
        'interrupted: no new export in artifacts/export/sft (it is written whole, at the end); rerun the same command'
    """
    try:
        fresh = out is not None and (Path(out) / "config.json").stat().st_mtime >= since
    except OSError:
        fresh = False
    if fresh and push:
        return (f"interrupted: the export is complete in {out}, the upload did not finish; retry it alone with "
                f"--upload {out} --push {push}")
    if fresh:
        return f"interrupted: the export is complete in {out}; nothing is left to do"
    return f"interrupted: no new export in {out} (it is written whole, at the end); rerun the same command"


def main(argv: list[str] | None = None) -> int:
    """Parse flags, export (or upload), print where it went; errors are one line with exit status 2."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", help="a run's output.dir (full model or LoRA adapter) or any model folder")
    parser.add_argument("--out", help="destination folder (replaced if it exists)")
    parser.add_argument("--push", metavar="ORG/NAME", default=None, help="Hub repo to upload to (needs HF_TOKEN)")
    parser.add_argument("--upload", metavar="EXPORT_DIR", default=None,
                        help="upload this existing export folder to --push instead of exporting (retry a failed push)")
    parser.add_argument("--base-model", metavar="ORG/NAME", default=None,
                        help="Hub id of the model the run started from (default: the run's, when it is a Hub id)")
    parser.add_argument("--license", default=None,
                        help="license id for the card, e.g. apache-2.0 (default: the base model's, when known)")
    parser.add_argument("--dataset", action="append", default=[], metavar="ORG/NAME",
                        help="Hub dataset id the model was trained on, for the card's metadata (repeatable)")
    parser.add_argument("--eval", action="append", default=[], metavar="REPORT",
                        help="medagentgym eval report.json (or its --out folder) for the card's model-index (repeatable)")
    parser.add_argument("--dtype", choices=["auto", "bfloat16", "float16", "float32"], default=None,
                        help="weights of the export (default: float32 for a LoRA run, which keeps small updates a "
                             "bf16 export rounds away; a full model's stored dtype); the merge is fp32 either way")
    parser.add_argument("--public", action="store_true", help="create the Hub repo public (default: private)")
    parser.add_argument("--debug", action="store_true", help="show the traceback on errors")
    args = parser.parse_args(argv)
    if args.upload and (args.run_dir or not args.push):
        parser.error("--upload EXPORT_DIR takes no run_dir and needs --push ORG/NAME")
    if not args.upload and not (args.run_dir and args.out):
        parser.error("give a run_dir and --out (or --upload EXPORT_DIR --push ORG/NAME)")
    started = time.time() - 1.0  # files written by this run are newer (mtimes may be coarse)
    try:
        if args.upload:
            url = push_folder(args.upload, args.push, private=not args.public)
            print(f"uploaded {args.upload} to {args.push}: {url}")
            return 0
        out = export_model(args.run_dir, args.out, push=args.push, private=not args.public,
                           base_model=args.base_model, license=args.license, datasets=args.dataset,
                           eval_reports=args.eval, dtype=args.dtype)
    except KeyboardInterrupt:
        line = (f"interrupted: the upload of {args.upload} did not finish (the folder is unchanged); rerun the same "
                f"command" if args.upload else interrupted_line(args.out, args.push, started))
        print(f"\n{line}", file=sys.stderr)
        return 130
    except (ExportError, RecipeError) as exc:
        if args.debug:
            raise
        print(f"export_hf.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"exported to {out}" + (f" and pushed to {args.push}" if args.push else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
