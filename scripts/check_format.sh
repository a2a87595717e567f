#!/usr/bin/env bash
# The house format (.clang-format; Debian 12's clang-format 14) on every tracked
# C++ and CUDA file. Lists the files that differ and fails; `--fix` rewrites
# them in place (a change under kernels/ or runtime/gpu/, even a format one, is
# a CUDA change: the H200 verifies it, docs/gpu-verified.md).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is missing (scripts/setup.sh installs it)"; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
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
