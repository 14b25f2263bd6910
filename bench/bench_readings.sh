#!/bin/sh
# bench_readings.sh BUILD [MODEL] [EXTRA...]: the cost of `reproduce --readings all` against the
# default `reproduce`, as ratios measured side by side in one session (interleaved: default,
# all readings, the one-at-a-time readings only), so that the load of a shared machine falls on
# every side alike. MODEL: default smollm2 (`attnlim fetch smollm2`). EXTRA: more reproduce
# options for every run (e.g. --lengths 32,64,128,256 --long-length 256 for a shorter run).
# Prints each run's wall and CPU seconds and the ratios all / default and one-at-a-time /
# default (the issue's bounds: 10x and 4x), and what dominates (results.json timings).
# KEEP=DIR keeps the three runs' outputs in DIR/default, DIR/all, DIR/one_at_a_time (the
# --readings all one is a findings run: readings.json, report.html).
set -eu
BUILD=${1:?usage: bench_readings.sh BUILD [MODEL] [EXTRA...]}
MODEL=${2:-smollm2}
[ $# -ge 2 ] && shift 2 || shift 1
T=${OMP_NUM_THREADS:-2}
if [ -n "${KEEP:-}" ]; then
  W=$KEEP
  mkdir -p "$W"
else
  W=$(mktemp -d)
  trap 'rm -rf "$W"' EXIT
fi
one() { # name, options...: "wall cpu" seconds of one reproduce
  name=$1
  shift
  /usr/bin/time -f '%e %U %S' -o "$W/$name.time" "$BUILD/attnlim" reproduce --model "$MODEL" \
    --threads "$T" --quiet --out "$W/$name" "$@" >/dev/null
  awk '{printf "%.2f %.2f", $1, $2 + $3}' "$W/$name.time"
}
ONE="vectors=key;vectors=hidden;vectors=residual;vectors=embedding;distance=norm-of-sum"
ONE="$ONE;distance=sum-vector;temperature-scale=raw;directions=fresh"
d=$(one default "$@")
a=$(one all "$@" --readings all)
o=$(one one_at_a_time "$@" --readings "$ONE")
dw=${d% *} aw=${a% *} ow=${o% *}
printf 'default:        wall %s s, CPU %s s\n' "$dw" "${d#* }"
printf 'readings all:   wall %s s, CPU %s s (ratio %.2f)\n' "$aw" "${a#* }" \
  "$(echo "$aw / $dw" | bc -l)"
printf 'one at a time:  wall %s s, CPU %s s (ratio %.2f)\n' "$ow" "${o#* }" \
  "$(echo "$ow / $dw" | bc -l)"
python3 - "$W" <<'EOF'
import json, sys
for name in ("default", "all"):
    t = json.load(open(f"{sys.argv[1]}/{name}/results.json"))["manifest"]["timings"]
    print(name, "timings:", {k: round(v, 2) for k, v in t.items() if isinstance(v, (int, float))})
EOF
