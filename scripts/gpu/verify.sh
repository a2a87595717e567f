#!/usr/bin/env bash
# The GPU gate: everything on the H200 that CI (no GPU) cannot run, for the
# commit in the tree. A commit that changes CUDA code lands only after this
# passed at it, recorded in docs/gpu-verified.md.
#
# Here:   bash scripts/gpu/pack_deps.sh        (once: .gpu-deps/hart-deps.tar.xz)
#         commit, and keep the tree clean (the device builds the tree as it is)
# Device: carry [".gpu-deps"], two calls while the machine stays warm (each fits
#         the 10-minute limit; the second reuses the first's build-gpu/):
#           HART_COMMIT=<hash> bash scripts/gpu/verify.sh suite   # build + the whole suite (~8 min)
#           HART_COMMIT=<hash> bash scripts/gpu/verify.sh checks  # check-ops, compute-sanitizer on T1, C1, A1
#         (`all` runs both in one call when the build is already there.)
# Logs land in $OUT (verify-<phase>.log, suite.log, ...); the summary table is last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
phase=${1:-all}
commit=${HART_COMMIT:-unknown}
LOG=${OUT:-/tmp/hart-verify}
mkdir -p "$LOG"
export LD_LIBRARY_PATH=/tmp/hart-deps/usr/lib/x86_64-linux-gnu:/tmp/hart-deps/usr/lib/x86_64-linux-gnu/openblas-openmp
summary=()
failed=0
step() {  # step NAME LIMIT_S COMMAND...: runs, logs, records rc and seconds
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || failed=1
  summary+=("| $name | $([ $rc = 0 ] && echo pass || echo "FAIL rc=$rc") | $(( $(date +%s) - t0 )) s | $1 |")
}
memcheck() {  # memcheck NAME BINARY FILTER: compute-sanitizer, pass only with 0 errors
  local name=$1
  step "$name" 300 compute-sanitizer --tool memcheck --print-limit 10 --error-exitcode 3 "$2" --gtest_filter="$3"
}

if [ "$phase" = suite ] || [ "$phase" = all ]; then
  [ -f .gpu-deps/hart-deps.tar.xz ] || { echo "verify: carry .gpu-deps (scripts/gpu/pack_deps.sh)"; exit 2; }
  for m in tiny-a tiny-b tiny-c; do
    [ -f tests/data/$m/config.json ] || { echo "verify: tests/data/$m is missing"; exit 2; }
  done
  # Build + the whole suite (GPU tests included; the NCCL one needs two GPUs and skips on one),
  # but the HTTP clients' tests: they need npm's registry and Debian's python3-prometheus-client,
  # which the machine cannot reach (CI runs them; no CUDA code is under them).
  step suite 560 bash scripts/gpu/build.sh -E '^http_npm_setup$|^http_serve'
fi
if [ "$phase" = checks ] || [ "$phase" = all ]; then
  step check_ops 120 ./build-gpu/hart check-ops
  # The hot kernels' CUDA tests under compute-sanitizer: T1, C1, A1 and the FP8 KV entry writer.
  memcheck memcheck_topk ./build-gpu/kernels/lightning_topk/lightning_topk_test '*Cuda*'
  memcheck memcheck_flash_compressor ./build-gpu/kernels/flash_compressor/flash_compressor_test '*Cuda*'
  memcheck memcheck_sparse_decode ./build-gpu/kernels/sparse_decode_attention/sparse_decode_attention_test '*Cuda*'
fi

echo "=== failures"
[ -f "$LOG/suite.log" ] && grep -E "tests passed|\*\*\*Failed|Not Run|\(Failed\)|\(Timeout\)" "$LOG/suite.log" | head -30
[ -f "$LOG/check_ops.log" ] && grep -E "FAIL|ERROR|checks," "$LOG/check_ops.log" | head -30
for f in "$LOG"/memcheck_*.log; do
  [ -f "$f" ] && { echo "--- $(basename "$f" .log)"; grep -E "ERROR SUMMARY|FAILED|PASSED" "$f" | tail -3; }
done
echo "=== verify $commit on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%Y-%m-%d)"
echo "| step | result | time | command |"
echo "|---|---|---|---|"
printf '%s\n' "${summary[@]}"
exit $failed
