#!/usr/bin/env bash
# bench_train.sh [BUILD_DIR] [-- shape options]: training tokens/s of attnlim's trainer
# (build/bench_train) beside PyTorch CPU eager float32 (bench/train_torch.py, the same model,
# batch and threads), alternating the two per normalizer in one run; prints each side's
# tokens/s and peak RSS, our speed over torch's, and each normalizer's cost relative to softmax
# (our softmax step time / its step time). On a shared machine quote the ratios only.
# Env: PYTHON (default python3), THREADS (2), STEPS (5: the median step of each run),
# ROUNDS (2: the pairs run this many times, interleaved; the best run of each side is kept),
# NORMS (the normalizers, space-separated; the first is the base of the cost column).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
[ "${1:-}" = "--" ] && shift
py=${PYTHON:-python3}
threads=${THREADS:-2}
steps=${STEPS:-5}
rounds=${ROUNDS:-2}
shape=(--layers 4 --heads 4 --embd 128 --T 256 --batch 8 --vocab 256 "$@")
read -r -a norms <<< "${NORMS:-softmax sparsemax entmax15 entmax ssmax sa-softmax}"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  for n in "${norms[@]}"; do
    c=$("$build/bench_train" "${shape[@]}" --steps "$steps" --threads "$threads" --normalizer "$n")
    t=$(OMP_NUM_THREADS=$threads "$py" "$here/train_torch.py" "${shape[@]}" --steps "$steps" \
        --threads "$threads" --normalizer "$n")
    echo "$n	$c	$t" >> "$out"
  done
done
"$py" - "$out" "${shape[*]}" "$threads" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    n, c, t = line.rstrip("\n").split("\t")
    c, t = json.loads(c), json.loads(t)
    b = best.setdefault(n, [c, t])
    if c["tokens_per_s"] > b[0]["tokens_per_s"]: b[0] = c
    if t["tokens_per_s"] > b[1]["tokens_per_s"]: b[1] = t
rows = [(n, c, t) for n, (c, t) in best.items()]
print(f"shape: {sys.argv[2]}, threads {sys.argv[3]}")
print(f"{'normalizer':<12} {'ours tok/s':>10} {'torch tok/s':>11} {'ours/torch':>10} "
      f"{'cost vs softmax (ours)':>22} {'(torch)':>8} {'ours MB':>8} {'torch MB':>8}")
base = {}
for n, c, t in rows:
    if not base:
        base = {"c": c["tokens_per_s"], "t": t["tokens_per_s"]}
    print(f"{n:<12} {c['tokens_per_s']:>10.0f} {t['tokens_per_s']:>11.0f} "
          f"{c['tokens_per_s'] / t['tokens_per_s']:>10.2f} {base['c'] / c['tokens_per_s']:>22.2f} "
          f"{base['t'] / t['tokens_per_s']:>8.2f} {c['peak_rss_mb']:>8.0f} {t['peak_rss_mb']:>8.0f}")
PY
