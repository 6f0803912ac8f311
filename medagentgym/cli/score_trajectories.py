"""Score finished episodes with the learned verifier, for Best@K: writes the JSONL that medagentgym eval --scores reads.

    medagentgym score --verifier runs/verifier_tiny --trajectories runs/eval/hf_sft/trajectories.jsonl
    medagentgym score --verifier http://127.0.0.1:8100 --trajectories t.jsonl --out scores.jsonl

``--verifier`` is a trained verifier folder (scored in this process) or the URL of ``medagentgym serve-verifier``.
Every episode of ``--trajectories`` (a trajectory JSONL, e.g. the ``trajectories.jsonl`` of a medagentgym eval run)
gets one line ``{"task_id", "sample_idx", "score"}`` in ``--out`` (default ``scores.jsonl`` beside the
trajectories), written atomically. If any episode cannot be scored (a failed service call), nothing is written
and the exit status is 2: Best@K needs a score for every episode. Then rerun the evaluation with the scores
(the rollout resumes from the same ``--out``, so nothing is rolled out again):

    medagentgym eval --policy hf:runs/sft --families toy_sql -k 8 --out runs/eval/hf_sft \\
        --scores runs/eval/hf_sft/scores.jsonl
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import Any

from medagentgym.env_client.argtypes import positive_int

__all__ = ["main", "score_store"]


def score_store(scorer: Any, path: Path) -> list[dict[str, Any]]:
    """``{"task_id", "sample_idx", "score"}`` for every episode of the trajectory JSONL ``path``.

    Raises:
        ValueError: The store is missing or empty, holds an episode twice, or the scorer returned None for some
            episode (names how many and the first).
    """
    from medagentgym.env_client.trajectory import TrajectoryStore
    from medagentgym.medcopilot.verifier import score_rows

    if not path.is_file():
        raise ValueError(f"trajectory store {path} does not exist; pass the trajectories.jsonl of a rollout")
    trajs = list(TrajectoryStore(path).read())
    if not trajs:
        raise ValueError(f"{path} holds no finished episodes; nothing to score")
    return score_rows(scorer, trajs)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 with one line on any error)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", required=True, help="trained verifier folder, or http(s):// URL of its service")
    p.add_argument("--trajectories", type=Path, required=True, help="trajectory JSONL to score")
    p.add_argument("--out", type=Path, default=None, help="scores JSONL (default scores.jsonl beside the input)")
    p.add_argument("--device", default=None, help="torch device of a local verifier; default the GPU if any")
    p.add_argument("--batch-size", type=positive_int, default=8, help="rows per forward pass (local) or per call (URL)")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = p.parse_args(argv)
    out = args.out or args.trajectories.with_name("scores.jsonl")
    try:
        from medagentgym.medcopilot.verifier import make_scorer, write_score_rows

        scorer = make_scorer(args.verifier, batch_size=args.batch_size,
                             **({} if args.verifier.startswith(("http://", "https://")) else {"device": args.device}))
        rows = score_store(scorer, args.trajectories)
        write_score_rows(rows, out)
    except KeyboardInterrupt:
        print(f"\ninterrupted: nothing written to {out} (scores are written once all are done); rerun to score",
              file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one line for the user, the traceback with --debug
        if args.debug:
            traceback.print_exc()
        print(f"error: {' '.join(str(exc).split()) or type(exc).__name__}", file=sys.stderr)
        return 2
    mean = sum(r["score"] for r in rows) / len(rows)
    print(f"scored {len(rows)} episodes (mean P(correct) {mean:.3f}) into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
