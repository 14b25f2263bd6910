#!/usr/bin/env bash
# bench_train.sh [BUILD_DIR] [-- shape options]: training tokens/s of attnlim's trainer
# (build/bench_train) beside PyTorch CPU eager float32 (bench/train_torch.py, the same model,
# batch and threads) as alternating A/B pairs in one run: per round and normalizer one run of
# each side, back to back (the order flips every round), so both see the same load. Prints
# every pair's ratio (ours / torch tokens/s) with the load average around it, then per
# normalizer the median and range of the pair ratios, each normalizer's cost relative to
# softmax on each side (the base's median tokens/s over its median tokens/s) and the peak
# memory of each process (maximum RSS from /usr/bin/time -v; torch's includes the interpreter
# and its libraries). On a shared machine quote the ratios only.
# Env: PYTHON (default python3), THREADS (2), STEPS (5: the median step of each run),
# ROUNDS (3: the pairs run this many times, interleaved), NORMS (the normalizers,
# space-separated; the first is the base of the cost columns).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
[ "${1:-}" = "--" ] && shift
py=${PYTHON:-python3}
threads=${THREADS:-2}
steps=${STEPS:-5}
rounds=${ROUNDS:-3}
shape=(--layers 4 --heads 4 --embd 128 --T 256 --batch 8 --vocab 256 "$@")
read -r -a norms <<< "${NORMS:-softmax sparsemax entmax15 entmax ssmax sa-softmax}"
[ -x /usr/bin/time ] || { echo "bench_train.sh: /usr/bin/time (GNU time) is needed for the peak RSS" >&2; exit 1; }

out=$(mktemp) tv=$(mktemp)
trap 'rm -f "$out" "$tv"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
# side NAME NORM: one run under /usr/bin/time -v; prints its JSON with "max_rss_mb" added
side() {
  local json
  if [ "$1" = ours ]; then
    json=$(/usr/bin/time -v -o "$tv" "$build/bench_train" "${shape[@]}" --steps "$steps" \
           --threads "$threads" --normalizer "$2")
  else
    json=$(OMP_NUM_THREADS=$threads /usr/bin/time -v -o "$tv" "$py" "$here/train_torch.py" \
           "${shape[@]}" --steps "$steps" --threads "$threads" --normalizer "$2")
  fi
  local kb
  kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tv")
  echo "${json%\}}, \"max_rss_mb\": $(awk "BEGIN {print $kb / 1024}")}"
}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "shape: ${shape[*]}, threads $threads, steps $steps, rounds $rounds; load at start $(load)"
for r in $(seq "$rounds"); do
  for n in "${norms[@]}"; do
    l0=$(load)
    if [ $((r % 2)) = 1 ]; then c=$(side ours "$n"); t=$(side torch "$n")
    else t=$(side torch "$n"); c=$(side ours "$n"); fi
    echo "$r	$n	$l0 $(load)	$c	$t" >> "$out"
  done
done
"$py" - "$out" <<'PY'
import json, statistics, sys
pairs = {}
print(f"{'round':>5} {'normalizer':<12} {'load':>11} {'ours tok/s':>10} {'torch tok/s':>11} {'ours/torch':>10}")
for line in open(sys.argv[1]):
    r, n, ld, c, t = line.rstrip("\n").split("\t")
    c, t = json.loads(c), json.loads(t)
    pairs.setdefault(n, []).append((c, t))
    print(f"{r:>5} {n:<12} {ld:>11} {c['tokens_per_s']:>10.0f} {t['tokens_per_s']:>11.0f} "
          f"{c['tokens_per_s'] / t['tokens_per_s']:>10.2f}")
med = lambda xs: statistics.median(xs)
print()
print(f"{'normalizer':<12} {'ours/torch median':>17} {'(range)':>13} {'cost vs base ours':>17} "
      f"{'torch':>6} {'max RSS ours MB':>15} {'torch MB':>8}")
base = None
for n, ps in pairs.items():
    ratio = [c["tokens_per_s"] / t["tokens_per_s"] for c, t in ps]
    oc, ot = med([c["tokens_per_s"] for c, _ in ps]), med([t["tokens_per_s"] for _, t in ps])
    if base is None:
        base = (oc, ot)
    rc, rt = max(c["max_rss_mb"] for c, _ in ps), max(t["max_rss_mb"] for _, t in ps)
    print(f"{n:<12} {med(ratio):>17.2f} {min(ratio):>6.2f}-{max(ratio):<6.2f} "
          f"{base[0] / oc:>17.2f} {base[1] / ot:>6.2f} {rc:>15.0f} {rt:>8.0f}")
PY
echo "load at end $(load)"
