#!/bin/sh
# bench_llamacpp.sh BUILD CACHE [GGUF]: SmolLM2's forward without capture (bench_llama
# --no-capture) against llama.cpp's prompt processing (llama-bench -p T -n 0) on the same GGUF,
# 2 threads each, T = 1024 and 2048, runs alternated A/B (the machine is shared: quote ratios).
# llama.cpp is built for this benchmark only, in CACHE (a directory outside the repository:
# refused inside it), from the source the llama-cpp-python sdist vendors (downloaded from PyPI by
# pip; never a test dependency, nothing of it committed): llama-bench and llama-quantize (which
# bench/bench_families.sh uses), in CACHE/build/bin. Both sides compute the last token's logits.
set -eu
BUILD=$1
CACHE=$2
mkdir -p "$CACHE"
REPO=$(cd "$(dirname "$0")/.." && pwd -P)
case "$(cd "$CACHE" && pwd -P)/" in "$REPO"/*)
    echo "bench_llamacpp: CACHE $CACHE is inside the repository: give a directory outside it" >&2
    exit 1 ;;
esac
GGUF=${3:-$HOME/.cache/attnlim/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-python3}
LB="$CACHE/build/bin/llama-bench"
if [ ! -x "$LB" ] || [ ! -x "$CACHE/build/bin/llama-quantize" ]; then
    (cd "$CACHE" && "$PY" -m pip download --no-binary :all: --no-deps --no-build-isolation \
        llama-cpp-python -d .)
    SD=$(ls -d "$CACHE"/llama_cpp_python-*.tar.gz | tail -1)
    tar xzf "$SD" -C "$CACHE"
    SRC=$(ls -d "$CACHE"/llama_cpp_python-*/vendor/llama.cpp | tail -1)
    # explicit instruction sets (never GGML_NATIVE): AVX2, plus AVX-512 where this CPU has it,
    # as attnlim's kernels pick at run time, so that both sides use the same vector width
    ISA="-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    if grep -qw avx512f /proc/cpuinfo; then
        ISA="$ISA -DGGML_AVX512=ON"
        for f in vnni:AVX512_VNNI vbmi:AVX512_VBMI bf16:AVX512_BF16; do
            grep -qw "avx512_${f%%:*}\|avx512${f%%:*}" /proc/cpuinfo && ISA="$ISA -DGGML_${f#*:}=ON"
        done
    fi
    # shellcheck disable=SC2086
    nice -n 5 cmake -S "$SRC" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF $ISA -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    nice -n 10 cmake --build "$CACHE/build" -j2 --target llama-bench llama-quantize
fi
# both sides with passive threads; CPU seconds by /usr/bin/time for llama.cpp, minus those of a
# run at T = 8 (loading), as bench/bench_families.sh; ours prints the forward's own CPU seconds
REPS=${REPS:-2}
uptime
echo "== llama.cpp T=8 (the CPU of loading, subtracted)"
/usr/bin/time -f "llama.cpp process CPU %U user + %S sys s" nice -n 5 "$LB" -m "$GGUF" -t 2 -p 8 \
    -n 0 -r 1 --no-warmup --poll 0 -o md 2>&1 | grep "pp8\|process CPU"
for T in ${TS:-1024 2048}; do
    for rep in $(seq "$REPS"); do
        echo "== attnlim T=$T run $rep"
        OMP_WAIT_POLICY=PASSIVE nice -n 5 "$BUILD/bench_llama" --model "$GGUF" --threads 2 --T $T \
            --reps 1 --long 0 --no-capture | grep "^T =\|^CPU"
        echo "== llama.cpp T=$T run $rep"
        /usr/bin/time -f "llama.cpp process CPU %U user + %S sys s" nice -n 5 "$LB" -m "$GGUF" \
            -t 2 -p $T -n 0 -r 1 --no-warmup --poll 0 -o md 2>&1 | grep "pp$T\|process CPU"
    done
done
uptime
