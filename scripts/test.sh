#!/usr/bin/env bash
# test.sh: sets up everything the tests need (apt, pip), builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure -j2 --timeout 900 "$@"
