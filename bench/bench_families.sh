#!/bin/sh
# bench_families.sh BUILD LLAMA_CACHE WORK [FAMILIES]: every family's forward without capture
# (bench_llama --no-capture) against llama.cpp's prompt processing (llama-bench -p T -n 0) on the
# same GGUF, 2 threads each, T = 1024 and 2048, alternated A/B (the machine is shared: quote
# ratios); and our forward on the HF directory beside the GGUF one (the >= 90% GFLOP/s target).
# Random-weight models of real shapes (bench/family_shapes.py, transformers' own classes) are
# converted by llama.cpp's convert_hf_to_gguf.py (bench/family_gguf.py). LLAMA_CACHE: as for
# bench/bench_llamacpp.sh (llama-bench in LLAMA_CACHE/build/bin, built by that script). Never a
# test dependency. FAMILIES: default "qwen2 mistral gemma2 gptneox"; env REPS (A/B pairs per T,
# default 2), HF (the families whose HF directory is timed too, default all; "" none), TYPES
# (the GGUF weight types, default "f16 q4_1 q8_0": the f16 file quantised by LLAMA_CACHE's
# llama-quantize) and TS (default "1024 2048"). Both sides compute the last token's logits only.
# LLAMA_CACHE must lie outside the repository (bench/bench_llamacpp.sh refuses it inside).
set -eu
BUILD=$1
CACHE=$2
WORK=$3
FAMS=${4:-qwen2 mistral gemma2 gptneox}
PY=${PY:-python3}
REPS=${REPS:-2}
HF=${HF-$FAMS}
TYPES=${TYPES:-f16 q4_1 q8_0}
TS=${TS:-1024 2048}
HERE=$(cd "$(dirname "$0")" && pwd)
LB="$CACHE/build/bin/llama-bench"
LQ="$CACHE/build/bin/llama-quantize"
SRC=$(ls -d "$CACHE"/llama_cpp_python-*/vendor/llama.cpp | tail -1)
[ -x "$LB" ] || { echo "bench_families: no $LB (run bench/bench_llamacpp.sh first)" >&2; exit 1; }
mkdir -p "$WORK"
for f in $FAMS; do
    [ -f "$WORK/$f/config.json" ] || nice -n 5 "$PY" "$HERE/family_shapes.py" "$WORK/$f" "$f"
    [ -f "$WORK/$f.gguf" ] || nice -n 5 "$PY" "$HERE/family_gguf.py" "$SRC" "$WORK/$f" "$WORK/$f.gguf" f16
    for q in $TYPES; do
        [ "$q" = f16 ] || [ -f "$WORK/$f.$q.gguf" ] ||
            nice -n 5 "$LQ" "$WORK/$f.gguf" "$WORK/$f.$q.gguf" "$(echo "$q" | tr a-z A-Z)" > /dev/null
    done
done
gguf_of() { # FAMILY TYPE
    if [ "$2" = f16 ]; then echo "$WORK/$1.gguf"; else echo "$WORK/$1.$2.gguf"; fi
}
# llama.cpp: passive threads (--poll 0, as our OMP_WAIT_POLICY=PASSIVE), no warm-up pass (this
# llama-bench's is a whole prompt pass: it would double the time), the
# process CPU seconds by /usr/bin/time; minus those of a run at T = 8 (loading, a tiny pass),
# / 2 threads = the CPU time of the pass (on a loaded machine the wall time means little)
theirs() { # MODEL T
    /usr/bin/time -f "llama.cpp process CPU %U user + %S sys s" nice -n 5 "$LB" -m "$1" -t 2 -p "$2" \
        -n 0 -r 1 --no-warmup --poll 0 -o md 2>&1 | grep "pp$2\|process CPU"
}
ours() { # MODEL T
    OMP_WAIT_POLICY=PASSIVE nice -n 5 "$BUILD/bench_llama" --model "$1" --threads 2 --T "$2" \
        --reps 1 --long 0 --no-capture | grep "^model\|^T =\|^CPU"
}
uptime
for f in $FAMS; do
  for q in $TYPES; do
    G=$(gguf_of "$f" "$q")
    echo "== $f $q llama.cpp T=8 (the CPU of loading, subtracted)"
    theirs "$G" 8
    for T in $TS; do
        for rep in $(seq "$REPS"); do
            echo "== $f $q attnlim GGUF T=$T run $rep"
            ours "$G" "$T"
            echo "== $f $q llama.cpp T=$T run $rep"
            theirs "$G" "$T"
        done
    done
  done
    case " $HF " in *" $f "*)
        echo "== $f attnlim HF directory T=1024"
        ours "$WORK/$f" 1024
        echo "== $f attnlim GGUF T=1024 (beside the HF run)"
        ours "$WORK/$f.gguf" 1024 ;;
    esac
    uptime
done
