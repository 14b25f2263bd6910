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
OMP_NUM_THREADS=2 /usr/bin/time -o "$WORK/time.txt" -f "%U %S %M" \
    "$BIN" reproduce --model "$WORK/g124" --out "$WORK/out" --threads 2 --quiet
end=$(date +%s.%N)
wall=$(echo "$end - $start" | bc)
read -r user sys rss < "$WORK/time.txt"
cpu=$(echo "$user + $sys" | bc)
echo "wall: $wall s, CPU: $cpu s (user $user, sys $sys), max RSS: $rss KB"
"$PY" -c "import json; t = json.load(open('$WORK/out/results.json'))['manifest']['timings']; print('timings (s):', {k: round(v, 2) if isinstance(v, float) else v for k, v in t.items()})"
echo "== numpy reference, same algorithms (CPU time of $ROWS sampled rows per L of one head, extrapolated to all rows and 144 heads; no forward pass)"
ref=$(OMP_NUM_THREADS=2 PYTHONPATH="$SRC/tests/python" "$PY" "$SRC/tests/python/reproduce_ref.py" bench "$BIN" "$WORK/g124" "$WORK" "$ROWS" 144)
echo "reference CPU estimate (s): $ref"
"$PY" -c "
import json
r = json.loads('$ref'); t = json.load(open('$WORK/out/results.json'))['manifest']['timings']
ours = t['distance_alg1_alg2_alg3_cpu_s'] + t['separability_alg4_cpu_s'] + t['sensitivity_alg5_cpu_s'] + t['vanishing_cpu_s']
print('metrics CPU: attnlim %.1f s, reference %.0f s: %.0fx' % (ours, r['total'], r['total'] / ours))
print('whole command CPU (incl. forward, figures): %.1f s: reference / attnlim = %.0fx' % ($cpu, r['total'] / $cpu))
for k, o in (('distance', 'distance_alg1_alg2_alg3_cpu_s'), ('separability', 'separability_alg4_cpu_s'), ('sensitivity', 'sensitivity_alg5_cpu_s')):
    print('  %-12s attnlim %8.1f s  reference %10.0f s  %6.0fx' % (k, t[o], r[k], r[k] / max(t[o], 1e-9)))
"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
