#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/check_format.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
