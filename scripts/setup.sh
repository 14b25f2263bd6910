#!/usr/bin/env bash
# setup.sh: installs what attnlim needs on Debian 12 (apt), a Python venv for the tests
# (pip), and builds it in ./build. Safe to run again. Usage: scripts/setup.sh [--no-tests]
set -euo pipefail
cd "$(dirname "$0")/.."
want_tests=1
[ "${1:-}" = "--no-tests" ] && want_tests=0

APT_BUILD=(build-essential cmake pkg-config libopenblas-dev libpcre2-dev libicu-dev libcjson-dev libssl-dev
           libcairo2-dev libopenmpi-dev openmpi-bin curl unzip python3 python3-venv python3-pip)
APT_TEST=(libcmocka-dev python3-numpy python3-scipy python3-mpmath python3-torch valgrind clang libclang-rt-14-dev clang-format chromium chromium-driver)
pkgs=("${APT_BUILD[@]}")
[ "$want_tests" = 1 ] && pkgs+=("${APT_TEST[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$want_tests" = 1 ]; then
  # Debian's python (numpy, scipy from apt) plus the PyPI-only references (tokenizers, ...).
  if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
fi

tests_flag=-DAL_BUILD_TESTS=ON
[ "$want_tests" = 1 ] || tests_flag=-DAL_BUILD_TESTS=OFF
# portable (no -march=native, also in a build/ configured before with it): the kernels pick
# AVX2 / AVX-512 at run time, and valgrind (stage 3 of test.sh) can decode every instruction
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAL_WERROR=ON -DAL_NATIVE=OFF "$tests_flag" \
      ${AL_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/attnlim"
