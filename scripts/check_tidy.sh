#!/usr/bin/env bash
# clang-tidy's small check set (.clang-tidy) over the C++ files the CPU build
# compiles (build-cpu/compile_commands.json), or over the files given; any
# finding fails. About 8 minutes for the whole tree on 2 cores, so not part of
# scripts/test.sh: run it before a change lands, on what the change touches.
#   bash scripts/check_tidy.sh                     # every file
#   bash scripts/check_tidy.sh $(git diff --name-only main -- '*.cpp')
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-tidy >/dev/null || { echo "check_tidy: clang-tidy is missing (apt-get install clang-tidy)"; exit 2; }
[ -f build-cpu/compile_commands.json ] || { echo "check_tidy: configure build-cpu first (scripts/setup.sh)"; exit 2; }
if (($#)); then
  printf '%s\n' "$@" | grep -E '\.cpp$' > /tmp/hart_tidy_files || true
else
  python3 - > /tmp/hart_tidy_files <<'PY'
import json
cc = json.load(open("build-cpu/compile_commands.json"))
for f in sorted({e["file"] for e in cc if e["file"].endswith(".cpp") and "/build" not in e["file"]}):
    print(f)
PY
fi
[ -s /tmp/hart_tidy_files ] || { echo "check_tidy: no C++ files"; exit 0; }
xargs -P"$(nproc)" -n8 clang-tidy -p build-cpu --quiet < /tmp/hart_tidy_files > /tmp/hart_tidy.log 2>&1 || true
if grep -E "(warning|error):" /tmp/hart_tidy.log; then
  echo "check_tidy: findings above"
  exit 1
fi
echo "check_tidy: $(wc -l < /tmp/hart_tidy_files) files clean"
