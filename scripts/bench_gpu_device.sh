#!/bin/sh
# The GPU device call (issues #21, #32): ONE command that, from the bare image plus the carried pack (make gpu-pack,
# under 64 MiB), measures the 7B-shaped GRPO step of the flagship recipe (grpo_qwen7b, on model.generate: an
# HF-generate step, since vLLM cannot travel; the JSON says so), with peak GPU memory per phase, tokens/s and the
# sandbox's share of the step, then the SFT step if time is left; and stops itself before its budget.
#   run(command="sh scripts/bench_gpu_device.sh", carry=[".gpu_pack"], timeout_s=560)
# Writes $OUT/bench_gpu.json (rewritten after every step, so a stopped run keeps what it measured) and
# $OUT/bench_gpu.log (the image probe, the pack install, the bench's progress).
# Tried on CPU at the tiny shape with the same pack's versions built for this machine's Python 3.11 and a fresh
# venv holding only the image's packages (docs/benchmarks.md):
#   make gpu-pack GPU_PY=3.11 GPU_PACK=.gpu_pack311
#   PY=.gpu_image/venv/bin/python PACK=.gpu_pack311 SHAPE=tiny OUT=/tmp/out sh scripts/bench_gpu_device.sh
set -u
STARTED=$(date +%s)
BUDGET_S=${BUDGET_S:-520}   # the whole call, pack install included; the device allows one command 600 s
if [ -z "${PY:-}" ]; then
    if [ -x /opt/torch/.venv/bin/python ]; then PY=/opt/torch/.venv/bin/python; else PY=python3; fi
fi
OUT=${OUT:-/tmp/bench_gpu_out}
PACK=${PACK:-.gpu_pack}
SHAPE=${SHAPE:-7b}
# The pack's folder must have "site-packages" in its path: dill (datasets' fingerprints) pickles classes of modules
# outside such a path by value, and pyarrow's cannot be (PicklingError: Can't pickle <class 'MonthDayNano'>, seen
# when it was /tmp/site)
SITE=${SITE:-/tmp/bench_gpu/site-packages}
LOG="$OUT/bench_gpu.log"
JSON="$OUT/bench_gpu.json"
mkdir -p "$OUT" "$SITE"
: > "$LOG"
say() { echo "[device $(( $(date +%s) - STARTED ))s] $*" | tee -a "$LOG" >&2; }
fail() {  # one JSON saying what stopped the call, when the bench wrote none
    rc=$1; shift
    if [ ! -s "$JSON" ]; then
        printf '{"bench": "bench_gpu", "shape": "%s", "failed": %s, "reason": "%s", "log": "bench_gpu.log"}\n' \
            "$SHAPE" "$rc" "$*" > "$JSON"
    fi
    say "stopped: $* (exit $rc)"
    exit "$rc"
}

say "python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1)); pack: $PACK; shape: $SHAPE; budget ${BUDGET_S}s"
[ -d "$PACK/wheels" ] || fail 2 "no $PACK/wheels: run make gpu-pack and carry $PACK"
# pyarrow travels for datasets 5.2 (it requires >= 24); the image's own is kept when it is new enough
ARROW=$("$PY" -c 'import pyarrow; print(pyarrow.__version__)' 2>/dev/null || echo none)
WHEELS=$(ls "$PACK"/wheels/*.whl | grep -v '/pyarrow-')
case "$ARROW" in
    none|1[0-9].*|2[0-3].*) WHEELS="$WHEELS $(ls "$PACK"/wheels/pyarrow-*.whl)"; say "image pyarrow $ARROW < 24: installing the pack's";;
    *) say "image pyarrow $ARROW: kept";;
esac
# shellcheck disable=SC2086
"$PY" -m pip install -q --no-index --no-deps --target "$SITE" $WHEELS >> "$LOG" 2>&1 || fail 3 "pack install failed"
export PYTHONPATH="$SITE:$PWD" PATH="$PWD/$PACK/bwrap/usr/bin:$PATH" WANDB_MODE=disabled HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
{
    "$PY" -c "import torch, transformers, trl, datasets, pydantic, pyarrow, peft, accelerate; print('torch', \
torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'datasets', datasets.__version__, \
'pydantic', pydantic.__version__, 'pyarrow', pyarrow.__version__, 'peft', peft.__version__, 'accelerate', \
accelerate.__version__)"
    if unshare -Ur true 2>/dev/null; then echo "user namespaces: yes"; else echo "user namespaces: no"; fi
    command -v bwrap || echo "bwrap: not on PATH"
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
} >> "$LOG" 2>&1 || fail 4 "the image cannot import the stack with the pack (see the log)"
say "image probed; starting the bench"
LEFT=$(( BUDGET_S - ($(date +%s) - STARTED) ))
[ "$LEFT" -gt 60 ] || fail 5 "only ${LEFT}s left after the install"
# the bench skips a step it cannot finish before its deadline; timeout stops it for certain 10 s later
timeout -k 5 $(( LEFT - 10 )) "$PY" scripts/bench_gpu.py --shape "$SHAPE" --json --deadline-s $(( LEFT - 25 )) \
    --out-json "$JSON" > "$OUT/bench_gpu.stdout" 2>> "$LOG"
rc=$?
rm -f "$OUT/bench_gpu.stdout"
[ "$rc" -eq 0 ] || fail "$rc" "bench_gpu.py exited $rc (124: stopped at the budget; partial steps stay in the JSON)"
say "done in $(( $(date +%s) - STARTED ))s: $JSON"
