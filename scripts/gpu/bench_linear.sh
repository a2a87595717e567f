#!/usr/bin/env bash
# FP8 linear (issue 5, targets G1 and G2) on the GPU machine, in one go: builds
# the two benches with nvcc directly (the GPU image has no GTest/OpenBLAS, so no
# CMake), runs them (checks against a host reference first, then times): decode
# shapes (linear_bench, G1), then prefill shapes against cuBLASLt's block-scaled
# FP8 GEMM (linear_prefill_bench, G2), then the routed experts' grouped linears,
# FP8 beside MXFP4 (linear_grouped_bench, M1). The tables are printed last.
#
#   scripts/gpu/bench_linear.sh            all three
#   scripts/gpu/bench_linear.sh grouped    the grouped bench only
#   GROUPED_BASELINE=old_fp4.cu ...        also the grouped bench built with that
#                                          linear_grouped_fp4.cu (a previous version), run first
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${OUT:-/tmp}
mkdir -p "$LOG"
SRCS="kernels/linear/linear_bench.cu kernels/linear/linear.cu kernels/linear/linear_fp8.cu kernels/linear/linear_fp8_tc.cu kernels/linear/linear_fp8_wgmma.cu kernels/quant/quant_cpu.cpp kernels/quant/quant_args.cpp runtime/core/codecs.cpp runtime/core/status.cpp runtime/core/check.cpp runtime/core/log.cpp"
NVCC="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -DHART_CUDA=1"

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader || true
$NVCC $SRCS -o /tmp/linear_bench -lcublasLt 2>&1 | tee "$LOG/build.log" || { echo "build failed"; exit 1; }
[ -x /tmp/linear_bench ] || { echo "build failed"; exit 1; }
$NVCC kernels/linear/linear_prefill_bench.cu ${SRCS#kernels/linear/linear_bench.cu } -o /tmp/linear_prefill_bench -lcublasLt \
  2>&1 | tee "$LOG/build_prefill.log"
$NVCC kernels/linear/linear_grouped_bench.cu kernels/linear/linear_grouped_tc.cu kernels/linear/linear_grouped_fp4.cu \
  kernels/linear/linear_mxfp4_order.cpp \
  ${SRCS#kernels/linear/linear_bench.cu } -o /tmp/linear_grouped_bench -lcublasLt 2>&1 | tee "$LOG/build_grouped.log"
[ "${1:-}" = grouped ] || timeout 300 /tmp/linear_bench 2>&1 | tee "$LOG/bench.log"
[ "${1:-}" = grouped ] || { [ -x /tmp/linear_prefill_bench ] && timeout 300 /tmp/linear_prefill_bench 2>&1 | tee "$LOG/bench_prefill.log"; }
if [ -n "${GROUPED_BASELINE:-}" ]; then
  $NVCC kernels/linear/linear_grouped_bench.cu kernels/linear/linear_grouped_tc.cu "$GROUPED_BASELINE" \
    kernels/linear/linear_mxfp4_order.cpp ${SRCS#kernels/linear/linear_bench.cu } -o /tmp/linear_grouped_bench_base \
    -lcublasLt 2>&1 | tee "$LOG/build_grouped_base.log"
  [ -x /tmp/linear_grouped_bench_base ] && timeout 300 /tmp/linear_grouped_bench_base 2>&1 | tee "$LOG/bench_grouped_base.log"
fi
[ -x /tmp/linear_grouped_bench ] && timeout 300 /tmp/linear_grouped_bench 2>&1 | tee "$LOG/bench_grouped.log"
