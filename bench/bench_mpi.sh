#!/bin/sh
# bench_mpi.sh BUILD_DIR [WORK_DIR]: `attnlim reproduce` on a GPT-2 124M-shape checkpoint (random
# weights; the same one as bench_reproduce.sh), one window per L, the paper's default grids, run
# twice on this machine with the same 2 cores: one process with 2 OpenMP threads, then
# `mpirun -np 2` with 1 thread per rank (src/dist.c: every rank runs the forward passes, each
# computes the metrics of half the heads). Prints wall and CPU time of each (CPU: the command and
# its children, from /usr/bin/time; and each rank's, from results.json), and the median and
# largest relative difference between the two runs' per-head arrays (not 0: the forward pass's
# float32 matrix products round differently with 2 threads than with 1, and a top-N selection or
# a count can flip on a near tie; with the same threads per process MPI gives one process's
# numbers bit for bit, tests/python/test_mpi.py). BENCH_ARGS adds reproduce options (e.g.
# "--lengths 32,64,128 --long-length 256" for a shorter run), MPIRUN_ARGS mpirun options (e.g.
# "--bind-to none": by default OpenMPI binds each rank to one core).
set -eu
BUILD=${1:?usage: bench_mpi.sh BUILD_DIR [WORK_DIR]}
WORK=${2:-/tmp/attnlim-bench-reproduce}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$BUILD/attnlim
PY=${ATTNLIM_PYTHON:-$SRC/.venv/bin/python}
ARGS=${BENCH_ARGS:-}
MARGS=${MPIRUN_ARGS:-}
command -v mpirun >/dev/null || { echo "bench_mpi: mpirun is missing (apt install openmpi-bin)" >&2; exit 1; }
"$PY" -c "import ctypes, sys; sys.exit(0 if ctypes.CDLL('$BUILD/libattnlim.so').al_dist_has_mpi() else 1)" ||
    { echo "bench_mpi: $BIN was built without MPI (install libopenmpi-dev, reconfigure)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$WORK"
[ -f "$WORK/g124/model.safetensors" ] || "$BIN" make-model --preset 124M --out "$WORK/g124" >/dev/null

# run NAME COMMAND...: wall and CPU of the command (children included)
run() {
    name=$1
    shift
    rm -rf "$WORK/$name"
    start=$(date +%s.%N)
    /usr/bin/time -o "$WORK/time-$name.txt" -f "%U %S %M" "$@"
    end=$(date +%s.%N)
    read -r user sys rss < "$WORK/time-$name.txt"
    echo "$name: wall $(echo "$end - $start" | bc) s, CPU $(echo "$user + $sys" | bc) s (user $user, sys $sys), max RSS of one process $rss KB"
    "$PY" -c "
import json
t = json.load(open('$WORK/$name/results.json'))['manifest']['timings']
print('  per rank CPU s:', [round(c, 1) for c in t['per_rank_cpu_s']], ' jobs wall s: %.1f' % t['jobs_wall_s'])
print('  CPU s summed over ranks: forward %.1f, distance %.1f, separability %.1f, sensitivity %.1f, vanishing %.1f' % (
    t['forward_cpu_s'], t['distance_alg1_alg2_alg3_cpu_s'], t['separability_alg4_cpu_s'],
    t['sensitivity_alg5_cpu_s'], t['vanishing_cpu_s']))"
}

echo "== attnlim reproduce, GPT-2 124M shape, default grids${ARGS:+ + $ARGS}, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086
OMP_NUM_THREADS=2 run 1x2 "$BIN" reproduce --model "$WORK/g124" --out "$WORK/1x2" --threads 2 --quiet $ARGS
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 run 2x1 mpirun -np 2 $MARGS -x OMP_NUM_THREADS "$BIN" reproduce --model "$WORK/g124" \
    --out "$WORK/2x1" --threads 1 --quiet $ARGS
"$PY" - "$WORK/1x2" "$WORK/2x1" <<'EOF'
import glob, os, sys
import numpy as np
a, b = sys.argv[1:]
rel = []
for f in glob.glob(os.path.join(a, "partial", "*", "*.npy")):
    x, y = np.load(f), np.load(os.path.join(b, os.path.relpath(f, a)))
    assert x.shape == y.shape and (np.isnan(x) == np.isnan(y)).all(), f
    ok = np.isfinite(x)
    rel.append(np.abs(x[ok] - y[ok]) / np.maximum(np.abs(x[ok]), 1e-300))
rel = np.concatenate(rel)
print("per-head arrays, 1x2 vs 2x1: same NaNs; relative difference median %.2g, largest %.2g"
      % (np.median(rel), rel.max()))
EOF
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
