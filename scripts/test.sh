#!/usr/bin/env bash
# test.sh: sets up everything the tests need on Debian 12 (apt, pip), builds, and runs every
# test, in four stages:
#   1. every C file formatted as .clang-format says (scripts/format.sh --check), then the whole
#      test suite (ctest: C tests and Python reference tests) on the release build;
#   2. the same suite on an AddressSanitizer + UndefinedBehaviorSanitizer build;
#   3. valgrind memcheck of the CLI on a small model: zero errors, zero definite, indirect or
#      possible leaks;
#   4. every libFuzzer harness (tests/fuzz) for AL_FUZZ_SECONDS (default 10) each, from its
#      committed seed corpus.
# Usage: scripts/test.sh [--fast]   (--fast: stage 1 only)
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
[ "${1:-}" = "--fast" ] && { fast=1; shift; }
jobs=$(nproc)

scripts/setup.sh
echo "== stage 1: source format (.clang-format) and test suite (release build)"
scripts/format.sh --check
(cd build && ctest --output-on-failure -j"$jobs" --timeout 900 "$@")
[ "$fast" = 1 ] && exit 0

echo "== stage 2: test suite under ASan + UBSan"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAL_SANITIZE=ON -DAL_NATIVE=OFF \
      -DAL_BUILD_BENCH=OFF -DAL_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ctest --output-on-failure -j"$jobs" --timeout 1800 "$@")

echo "== stage 3: valgrind memcheck of the CLI"
scripts/valgrind.sh build/attnlim

echo "== stage 4: fuzz harnesses, ${AL_FUZZ_SECONDS:-10} s each"
scripts/fuzz.sh "${AL_FUZZ_SECONDS:-10}"
echo "all stages passed"
