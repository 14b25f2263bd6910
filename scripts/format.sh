#!/usr/bin/env bash
# format.sh [--check]: formats every tracked C source and header with the committed
# .clang-format (clang-format 14, Debian 12's), or with --check fails naming the files that are
# not formatted (CI runs the check in scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$cf" ] || { echo "format.sh: clang-format is not installed (apt install clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ "${#bad[@]}" -gt 0 ]; then
    echo "format.sh: not formatted with .clang-format (run scripts/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
else
  "$cf" -i "${files[@]}"
fi
