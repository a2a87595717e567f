#!/usr/bin/env bash
# Sparse decode attention (issue 6, A1) on the GPU machine: builds the bench with
# nvcc directly (no CMake on the GPU image), times a PyTorch eager peer of the same
# math (bf16 gather + einsum + softmax with the sink; entries pre-dequantized, so the
# peer skips the FP8 decode), then the bench (checks against the CPU reference, then
# times). The table is printed last. (memcheck: run_pending's tests phase runs the CUDA
# test under compute-sanitizer.)
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${OUT:-/tmp}
SRCS="kernels/sparse_decode_attention/sparse_decode_attention_bench.cu kernels/sparse_decode_attention/sparse_decode_attention.cu kernels/sparse_decode_attention/sparse_decode_attention_cpu.cpp kernels/sparse_decode_attention/kv_entry.cpp kernels/sparse_attention/sparse_attention_cpu.cpp kernels/quant/quant_cpu.cpp kernels/quant/quant_args.cpp runtime/core/codecs.cpp runtime/core/status.cpp runtime/core/check.cpp runtime/core/log.cpp"
NVCC="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -DHART_CUDA=1"
t0=$(date +%s)
$NVCC $SRCS -o /tmp/sda_bench > "$LOG/sda_build.log" 2>&1 &
pa=$!
PYTHONUNBUFFERED=1 python3 scripts/gpu/peers/attention_peer.py > /tmp/sda_peer.txt
echo "torch peer:"; cat /tmp/sda_peer.txt
wait $pa || { echo "build failed"; cat "$LOG/sda_build.log"; exit 1; }
echo "build done after $(( $(date +%s) - t0 )) s"
timeout 300 /tmp/sda_bench /tmp/sda_peer.txt 2>&1 | tee "$LOG/sda_bench.log"
if [ "${SDA_NCU:-1}" != 0 ] && command -v ncu >/dev/null; then
  # Where the time goes at batch 1: Flash CSA (case 0) and SWA only (case 9).
  for c in 0 9; do
    timeout 120 ncu --clock-control none -k regex:sda_ --launch-skip 10 --launch-count 2 \
      --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
      /tmp/sda_bench --case $c > "$LOG/sda_ncu_$c.log" 2>&1
    echo "ncu case $c:"; grep -E "sda_|Duration|Registers|Warp Cycles Per Issued|Achieved Occupancy|Block Limit Shared|Grid Size" "$LOG/sda_ncu_$c.log" | head -24
  done
fi
