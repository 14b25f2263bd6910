#!/bin/sh
# bench_reproduce.sh BUILD_DIR [WORK_DIR]: `attnlim reproduce` on a GPT-2 124M-shape checkpoint
# (random weights), one window per L, the paper's default grids, 2 threads; then the numpy
# fp64 reference of the same algorithms (tests/python/reproduce_ref.py), timed on a sample
# of rows of one head per L and extrapolated to every row and all 144 heads.
# Prints wall and CPU time of attnlim, its per-algorithm timings, and the reference estimate.
set -eu
BUILD=${1:?usage: bench_reproduce.sh BUILD_DIR [WORK_DIR]}
WORK=${2:-/tmp/attnlim-bench-reproduce}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$BUILD/attnlim
PY=${ATTNLIM_PYTHON:-$SRC/.venv/bin/python}
ROWS=${BENCH_ROWS:-8}
mkdir -p "$WORK"
[ -f "$WORK/g124/model.safetensors" ] || "$BIN" make-model --preset 124M --out "$WORK/g124" >/dev/null
rm -rf "$WORK/out"
echo "== attnlim reproduce (GPT-2 124M shape, default grids, 1 window, 2 threads)"
start=$(date +%s.%N)
OMP_NUM_THREADS=2 /usr/bin/env time -f "cpu: user %U s, sys %S s, max RSS %M KB" \
    "$BIN" reproduce --model "$WORK/g124" --out "$WORK/out" --threads 2 --quiet
end=$(date +%s.%N)
wall=$(echo "$end - $start" | bc)
echo "wall: $wall s"
"$PY" -c "import json; t = json.load(open('$WORK/out/results.json'))['manifest']['timings']; print('timings (s):', {k: round(v, 2) for k, v in t.items()})"
echo "== numpy reference (sampled $ROWS rows per L of one head, extrapolated to 144 heads)"
ref=$(OMP_NUM_THREADS=2 PYTHONPATH="$SRC/tests/python" "$PY" "$SRC/tests/python/reproduce_ref.py" bench "$BIN" "$WORK/g124" "$WORK" "$ROWS" 144)
echo "reference estimate (s): $ref"
"$PY" -c "import json; r = json.loads('$ref'); print('speed-up: %.0fx (reference %.0f s / attnlim %.1f s wall)' % (r['total'] / $wall, r['total'], $wall))"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
