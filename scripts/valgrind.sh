#!/usr/bin/env bash
# valgrind.sh BIN: memcheck of the attnlim CLI on a small random model (capture, reproduce
# --quick, tokenize, jacobian, malformed inputs): every run must have zero errors and no leak that
# is definite, indirect or possible (tests/sanitizer/valgrind.supp: only third-party libraries'
# process-lifetime allocations are suppressed).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build/attnlim}")
# a portable build only: valgrind cannot decode every instruction -march=native may emit (AVX-512
# on recent Intel), and reports the CPU as AVX2 at most, so the run-time dispatch stays within it
cache="$(dirname "$bin")/CMakeCache.txt"
if [ -f "$cache" ] && grep -q '^AL_NATIVE:BOOL=ON' "$cache"; then
  echo "valgrind.sh: $bin is a -DAL_NATIVE=ON build; valgrind needs a portable one (-DAL_NATIVE=OFF)" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# the CLI re-executes itself to set OMP_WAIT_POLICY when it is unset (tools/attnlim.c), and
# valgrind would not follow that exec: set the policy here
export OMP_WAIT_POLICY=PASSIVE
vg=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible
    --show-leak-kinds=definite,indirect,possible --suppressions=tests/sanitizer/valgrind.supp)
export OMP_NUM_THREADS=2 ATTNLIM_NO_DOWNLOAD=1
"$bin" make-model --layers 2 --heads 2 --embd 32 --ctx 64 --vocab 50257 --seed 3 --out "$work/m" >/dev/null
# run: the command must succeed; run_fails: it must fail cleanly (exit 1 or 2, its own error);
# valgrind's own exit code 99 fails both.
run() { echo "valgrind: attnlim $*"; "${vg[@]}" "$bin" "$@" >/dev/null; }
run_fails() {
  echo "valgrind: attnlim $* (must fail cleanly)"
  local rc=0
  "${vg[@]}" "$bin" "$@" >/dev/null 2>"$work/err" || rc=$?
  if [ "$rc" != 1 ] && [ "$rc" != 2 ]; then cat "$work/err"; echo "valgrind: exit $rc"; exit 1; fi
}
run capture --model "$work/m" --corpus war-and-peace --window 1 --length 48 --what q,k,v,logits,weights,hidden \
    --out "$work/cap"
printf 'The quick brown fox \xff\xfe jumps.\n' > "$work/t.txt"
run tokenize "$work/t.txt"
run_fails normalize --method entmax15 --input "$work/t.txt"
echo "0.1 2 3 -1" > "$work/z.txt"
run jacobian --method sa-softmax --input "$work/z.txt"
run reproduce --model "$work/m" --quick --quiet --out "$work/rep"
run_fails info --model tests/bad/inputs/st/wrong_shape
run_fails info --model tests/bad/inputs/gguf/tensor_offset_past_end.gguf
run_fails normalize --method softmax --input tests/bad/inputs/npy/overflow_dims.npy
run_fails info --model tests/bad/inputs/st/shards_overlap
run_fails info --model tests/bad/inputs/llmc/header_only.bin
run_fails info --model tests/bad/inputs/gguf/cut_in_data.gguf
run_fails embed --model tests/bad/inputs/wordpiece/no_unk --text hello
run info --no-hash --model tests/bad/inputs/gguf/nan_f32.gguf  # a warning, exit 0
echo "valgrind: no errors, no leaks"
