#!/usr/bin/env bash
# fuzz.sh [SECONDS] [HARNESS...]: builds every libFuzzer harness of tests/fuzz with clang
# (-fsanitize=fuzzer,address,undefined) and runs each for SECONDS (default 20) from a scratch
# copy of its committed seed corpus (tests/fuzz/corpus/<name>). Any crash, leak, timeout or
# sanitizer report fails the run; the input that caused it is kept in build-fuzz/findings/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
CC=clang cmake -S . -B build-fuzz -DAL_FUZZ=ON -DAL_BUILD_TESTS=OFF -DAL_BUILD_BENCH=OFF \
      -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-fuzz -j"$(nproc)" >/dev/null
names=("$@")
if [ "${#names[@]}" = 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do n=$(basename "$f" .c); names+=("${n#fuzz_}"); done
fi
mkdir -p build-fuzz/findings
export ATTNLIM_NO_DOWNLOAD=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$PWD/tests/sanitizer/lsan.supp
status=0
for n in "${names[@]}"; do
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$n/." "$work/" 2>/dev/null || true
  log="build-fuzz/fuzz_$n.log"
  if build-fuzz/"fuzz_$n" "$work" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 \
       -artifact_prefix=build-fuzz/findings/"$n"- -print_final_stats=1 >"$log" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz $n: ${secs} s, $execs executions, no findings"
  else
    echo "fuzz $n: FAILED (see $log)"; tail -40 "$log"; status=1
  fi
  rm -rf "$work"
done
exit $status
