#!/bin/sh
# The GPU device call of issue #21, prepared to fit one call: install the carried pack (make gpu-pack), probe the
# image, run scripts/bench_gpu.py for the 7B shape (GRPO + SFT steps), then the 14B SFT step (and the 14B GRPO step
# when BENCH_14B_GRPO=1), one JSON line each into $OUT/bench.jsonl. Tried at the tiny shape on CPU first (Python
# 3.11 here: the cp312/py312-only wheels, pydantic-core and multiprocess, are left to the venv's own):
#   PY=.venv/bin/python SHAPES=tiny OUT=/tmp/out \
#       WHEELS="$(ls .gpu_pack/wheels/*.whl | grep -v -e multiprocess -e pydantic_core)" sh scripts/bench_gpu_device.sh
# On the device (its python3 is the image's torch venv; the pack travels with run(carry=[".gpu_pack"])):
#   sh scripts/bench_gpu_device.sh
set -u
PY=${PY:-python3}
OUT=${OUT:-/tmp/bench_gpu_out}
SITE=${SITE:-/tmp/site}
SHAPES=${SHAPES:-7b 14b}
WHEELS=${WHEELS:-.gpu_pack/wheels/*.whl}
mkdir -p "$OUT" "$SITE"
# shellcheck disable=SC2086
"$PY" -m pip install -q --no-index --no-deps --target "$SITE" $WHEELS || exit 3
export PYTHONPATH="$SITE:$PWD" PATH="$PWD/.gpu_pack/bwrap/usr/bin:$PATH" WANDB_MODE=disabled HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false
{
    "$PY" -c "import torch, transformers, trl, datasets, pydantic; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'trl', trl.__version__, 'datasets', datasets.__version__, 'pydantic', pydantic.__version__)"
    "$PY" -m pip show pyarrow pandas 2>/dev/null | grep -E '^(Name|Version)'
    if unshare -Ur true 2>/dev/null; then echo "user namespaces: yes"; else echo "user namespaces: no"; fi
    command -v bwrap || echo "bwrap: not on PATH"
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
} > "$OUT/image.txt" 2>&1
for shape in $SHAPES; do
    skip=""
    if [ "$shape" = "14b" ] && [ "${BENCH_14B_GRPO:-0}" != "1" ]; then skip="--skip grpo"; fi
    # shellcheck disable=SC2086
    timeout "${BENCH_TIMEOUT:-420}" "$PY" scripts/bench_gpu.py --shape "$shape" --json $skip \
        >> "$OUT/bench.jsonl" 2> "$OUT/$shape.err" || echo "{\"shape\": \"$shape\", \"failed\": $?}" >> "$OUT/bench.jsonl"
done
cat "$OUT/image.txt" "$OUT/bench.jsonl"
