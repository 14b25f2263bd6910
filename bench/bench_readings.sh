#!/bin/sh
# bench_readings.sh BUILD [MODEL] [EXTRA...]: the cost of `reproduce --readings all` against the
# default `reproduce`, as ratios measured side by side in one session (interleaved: default,
# all readings, the one-at-a-time readings only), so that the load of a shared machine falls on
# every side alike. MODEL: default smollm2 (`attnlim fetch smollm2`). EXTRA: more reproduce
# options for every run (e.g. --lengths 32,64,128,256 --long-length 256 for a shorter run).
# Prints each run's wall and CPU seconds and the ratios all / default and one-at-a-time /
# default (the issue's bounds: 10x and 4x), and what dominates (results.json timings: the run's
# parts, and each reading's own CPU seconds).
# ROUNDS=R (default 1): R rounds of (default, one at a time), then one `all`; each round's
# one-at-a-time ratio is against the default run just before it (a VM's speed drifts by several
# per cent from one minute to the next), and the median of the R ratios is printed.
# KEEP=DIR keeps the runs' outputs in DIR/default<r>, DIR/one<r>, DIR/all (the --readings all one
# is a findings run: readings.json, report.html).
set -eu
BUILD=${1:?usage: bench_readings.sh BUILD [MODEL] [EXTRA...]}
MODEL=${2:-smollm2}
[ $# -ge 2 ] && shift 2 || shift 1
T=${OMP_NUM_THREADS:-2}
R=${ROUNDS:-1}
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
  rm -rf "${W:?}/$name"
  /usr/bin/time -f '%e %U %S' -o "$W/$name.time" "$BUILD/attnlim" reproduce --model "$MODEL" \
    --threads "$T" --quiet --out "$W/$name" "$@" >/dev/null
  awk '{printf "%.2f %.2f", $1, $2 + $3}' "$W/$name.time"
}
ratio() { echo "$1 / $2" | bc -l; }
ONE="vectors=key;vectors=hidden;vectors=residual;vectors=embedding;distance=norm-of-sum"
ONE="$ONE;distance=sum-vector;temperature-scale=raw;directions=fresh"
ratios=""
r=1
while [ "$r" -le "$R" ]; do
  d=$(one "default$r" "$@")
  o=$(one "one$r" "$@" --readings "$ONE")
  q=$(ratio "${o% *}" "${d% *}")
  ratios="$ratios $q"
  printf 'round %d: default wall %s s, CPU %s s; one at a time wall %s s, CPU %s s: ' "$r" \
    "${d% *}" "${d#* }" "${o% *}" "${o#* }"
  printf 'ratio %.2f (CPU %.2f)\n' "$q" "$(ratio "${o#* }" "${d#* }")"
  r=$((r + 1))
done
a=$(one all "$@" --readings all)
printf 'readings all:   wall %s s, CPU %s s (ratio %.2f against the last default)\n' "${a% *}" \
  "${a#* }" "$(ratio "${a% *}" "${d% *}")"
printf 'one at a time:  median ratio %.2f over %d rounds\n' \
  "$(echo "$ratios" | tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')" "$R"
python3 - "$W" "$R" <<'EOF'
import glob, json, os, sys
w, r = sys.argv[1], sys.argv[2]
def timings(d):
    t = json.load(open(f"{d}/results.json"))["manifest"]["timings"]
    return {k: round(v, 2) for k, v in t.items() if isinstance(v, (int, float)) and v > 0}
for name in (f"default{r}", f"one{r}", "all"):
    print(name, "timings:", timings(f"{w}/{name}"))
for f in sorted(glob.glob(f"{w}/one{r}/readings/*/results.json")):
    d = os.path.dirname(f)
    print("  reading", os.path.basename(d), "CPU s:",
          {k: v for k, v in timings(d).items() if k.endswith("cpu_s")})
EOF
