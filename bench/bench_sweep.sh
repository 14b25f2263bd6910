#!/bin/sh
# bench_sweep.sh BUILD [MODEL] [K]: the whole-book sweep `attnlim reproduce --windows all` (every
# window of War and Peace at the longest L) measured on its first K windows (default 3), as one
# process with 2 OpenMP threads and as `mpirun -np 2` with 1 thread per rank (each rank computes
# half the heads; src/dist/dist.c), side by side in one session. Prints each run's wall and CPU
# seconds, the seconds per window, how many windows --windows all has (the corpus's tokens through
# the model's tokenizer / L), and each way's whole-book wall time extrapolated from the K windows:
# an estimate (every window costs about the same: the same L and grids), not a measurement of
# the hours-long run itself. MODEL: default smollm2 (`attnlim fetch smollm2`). L: 1024 (the
# default long length; reproduce's longest L). BENCH_ARGS adds reproduce options to both runs,
# MPIRUN_ARGS mpirun options (default --bind-to none: OpenMPI binds each rank to one core).
set -eu
BUILD=${1:?usage: bench_sweep.sh BUILD [MODEL] [K]}
MODEL=${2:-smollm2}
K=${3:-3}
BIN=$BUILD/attnlim
ARGS=${BENCH_ARGS:-}
MARGS=${MPIRUN_ARGS:---bind-to none}
L=1024
command -v mpirun >/dev/null || { echo "bench_sweep: mpirun is missing (apt install openmpi-bin)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
ntok=$("$BIN" tokenize --model "$MODEL" --corpus war-and-peace | wc -l)
ALL=$((ntok / L))
# run NAME COMMAND...: "wall cpu" seconds of the command and its children
run() {
  name=$1
  shift
  /usr/bin/time -f '%e %U %S' -o "$W/$name.time" "$@" >/dev/null
  awk '{printf "%.1f %.1f", $1, $2 + $3}' "$W/$name.time"
}
# shellcheck disable=SC2086
one=$(run one env OMP_NUM_THREADS=2 "$BIN" reproduce --model "$MODEL" --windows "$K" --threads 2 \
  --quiet --out "$W/one" $ARGS)
# shellcheck disable=SC2086
two=$(run mpi mpirun -np 2 $MARGS env OMP_NUM_THREADS=1 "$BIN" reproduce --model "$MODEL" \
  --windows "$K" --threads 1 --quiet --out "$W/mpi" $ARGS)
printf 'corpus: %d tokens through %s tokenizer: --windows all = %d windows of L = %d\n' \
  "$ntok" "$MODEL" "$ALL" "$L"
for r in "1 process x 2 threads:$one" "2 ranks x 1 thread:$two"; do
  what=${r%%:*} t=${r#*:}
  wall=${t% *} cpu=${t#* }
  printf '%-22s %d windows: wall %s s, CPU %s s; %.1f s a window; whole book ~%.1f h (estimate)\n' \
    "$what" "$K" "$wall" "$cpu" "$(echo "$wall / $K" | bc -l)" \
    "$(echo "$wall / $K * $ALL / 3600" | bc -l)"
done
printf 'MPI 2 ranks / 1 process (wall): %.2f\n' "$(echo "${two% *} / ${one% *}" | bc -l)"
