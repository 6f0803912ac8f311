"""Run a grid or a stage chain (SFT -> DPO -> GRPO) of train.py runs from a sweep file.

    medagentgym sweep recipes/sweeps/sft_tiny_lr.yaml --dry-run     # validate every run, print the plan
    medagentgym sweep recipes/sweeps/sft_tiny_lr.yaml               # run the grid, rank it, plot it
    medagentgym sweep recipes/sweeps/pipeline_tiny.yaml             # SFT -> DPO -> GRPO, a stage table
    medagentgym sweep recipes/sweeps/grpo_qwen7b_lr.yaml \
        --launcher "accelerate launch --config_file recipes/accelerate/single_gpu.yaml"
    medagentgym sweep pipeline_tiny --dry-run                       # a bundled sweep by name, from any folder

The sweep file format, resuming and outputs are described in :mod:`medagentgym.medcopilot.sweep`.
"""

from __future__ import annotations

import sys

from medagentgym.medcopilot.sweep import (
    Run,
    Stage,
    Sweep,
    load_sweep,
    main,
    plan_runs,
    plot_grid,
    rank,
    run_metric,
)

__all__ = ["Run", "Stage", "Sweep", "load_sweep", "main", "plan_runs", "plot_grid", "rank", "run_metric"]

if __name__ == "__main__":
    sys.exit(main())
