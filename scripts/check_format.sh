#!/usr/bin/env bash
# The house format (.clang-format; Debian 12's clang-format 14) on every tracked
# C++ file outside kernels/ and runtime/gpu/, whose CUDA code is reformatted in
# a commit of its own that the H200 verifies (docs/gpu-verified.md). Lists the
# files that differ and fails; `--fix` rewrites them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is missing (scripts/setup.sh installs it)"; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | grep -v -E '^(kernels|runtime/gpu)/')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'check_format: not in the house format (bash scripts/check_format.sh --fix):\n'
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files in the house format"
