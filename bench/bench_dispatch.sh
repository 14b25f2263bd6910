#!/bin/sh
# bench_dispatch.sh OLD_BUILD NEW_BUILD [PAIRS]: the cost of run-time kernel dispatch, as a ratio.
# OLD_BUILD: a build with the kernels fixed at compile time (-DAL_NATIVE=ON, -march=native, as
# before the dispatch); NEW_BUILD: a portable build (-DAL_NATIVE=OFF) that picks its kernels at
# run time. Runs, of each build in turn, PAIRS times (default 5):
#   forward: bench_forward (GPT-2 124M shape, T = 256, 2 threads, the weights of every head
#            streamed to a consumer), CPU seconds per forward (median of 3);
#   metrics: bench_metrics 1024 64 3 1 (distance + separability of one causal head, one thread,
#            best of 3): code the compiler vectorises itself (no hand-written kernels), so this
#            is what -march=native's auto-vectorisation was worth;
# and prints each run and the median of the per-pair ratios new / old (interleaved pairs, so
# that load from other work on a shared machine falls on both sides alike). 1.00 = no cost.
set -eu
OLD=${1:?usage: bench_dispatch.sh OLD_BUILD NEW_BUILD [PAIRS]}
NEW=${2:?usage: bench_dispatch.sh OLD_BUILD NEW_BUILD [PAIRS]}
PAIRS=${3:-5}
T=${BENCH_T:-256}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=passive
cpu_of() { # bench_forward's median CPU seconds per forward
  "$1/bench_forward" --threads "$OMP_NUM_THREADS" --T "$T" --reps 3 --no-torch --no-loops |
    sed -n 's/.*CPU time per forward: median \([0-9.]*\) s.*/\1/p'
}
metrics_of() { # bench_metrics' CPU seconds for distance + separability of one head
  OMP_NUM_THREADS=1 "$1/bench_metrics" 1024 64 3 1 | sed -n '1s/.*, \([0-9.]*\) s CPU.*/\1/p'
}
median() {
  tr ' ' '\n' | grep . | sort -n |
    awk '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
         printf "%.3f (min %.3f, max %.3f, %d pairs)", m, a[1], a[NR], NR}'
}
echo "new build kernels: $("$NEW/attnlim" --version | sed -n 's/^kernels: //p')"
rf="" rm=""
i=1
while [ "$i" -le "$PAIRS" ]; do
  o=$(cpu_of "$OLD") n=$(cpu_of "$NEW")
  mo=$(metrics_of "$OLD") mn=$(metrics_of "$NEW")
  r=$(echo "$n / $o" | bc -l) q=$(echo "$mn / $mo" | bc -l)
  printf 'pair %d: forward old %.3f s, new %.3f s (new/old %.3f); metrics old %.4f s, new %.4f s (new/old %.3f)\n' \
    "$i" "$o" "$n" "$r" "$mo" "$mn" "$q"
  rf="$rf $r" rm="$rm $q"
  i=$((i + 1))
done
echo "forward CPU per forward, median new/old: $(echo "$rf" | median)"
echo "metrics CPU per head,    median new/old: $(echo "$rm" | median)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
