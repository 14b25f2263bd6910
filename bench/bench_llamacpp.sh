#!/bin/sh
# bench_llamacpp.sh BUILD CACHE [GGUF]: SmolLM2's forward without capture (bench_llama
# --no-capture) against llama.cpp's prompt processing (llama-bench -p T -n 0) on the same GGUF,
# 2 threads each, T = 1024 and 2048, runs alternated A/B (the machine is shared: quote ratios).
# llama.cpp is built for this benchmark only, in CACHE, from the source the llama-cpp-python
# sdist vendors (downloaded from PyPI by pip; never a test dependency, nothing of it committed).
set -eu
BUILD=$1
CACHE=$2
GGUF=${3:-$HOME/.cache/attnlim/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-python3}
mkdir -p "$CACHE"
LB="$CACHE/build/bin/llama-bench"
if [ ! -x "$LB" ]; then
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
    nice -n 5 cmake -S "$SRC" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF $ISA -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    nice -n 5 cmake --build "$CACHE/build" -j2 --target llama-bench
fi
uptime
for T in 1024 2048; do
    for rep in 1 2; do
        echo "== attnlim T=$T run $rep"
        OMP_WAIT_POLICY=PASSIVE nice -n 5 "$BUILD/bench_llama" --model "$GGUF" --threads 2 --T $T \
            --reps 1 --long 0 --no-capture | grep "^T ="
        echo "== llama.cpp T=$T run $rep"
        nice -n 5 "$LB" -m "$GGUF" -t 2 -p $T -n 0 -r 1 -o md | grep "pp$T"
    done
done
uptime
