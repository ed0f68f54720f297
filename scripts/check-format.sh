#!/usr/bin/env bash
# Every C and C++ file of the project is formatted as .clang-format says (clang-format --dry-run
# --Werror). Run by ctest (lint.clang_format); fix with: git ls-files '*.cc' '*.h' '*.c' '*.cu' |
# xargs clang-format -i
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
command -v clang-format >/dev/null || { echo "clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.c' '*.cu')
else
  mapfile -t files < <(find daemon clients lib plugins cri-shim test e2e -name '*.cc' -o -name '*.h' -o -name '*.c' -o -name '*.cu')
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not formatted (clang-format -i FILE):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "${#files[@]} files formatted as .clang-format says ($(clang-format --version | head -1))"
