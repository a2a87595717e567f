#!/usr/bin/env bash
# Flash compressor (issue 6, C1) on the GPU machine: builds the bench with nvcc
# directly (no CMake on the GPU image), times a PyTorch eager peer of the same
# math (fp32 projections → per-channel softmax pooling with the position bias,
# CSA A/B overlap, RMSNorm, RoPE, FP8 QDQ of the main entries, Hadamard + FP4
# QDQ of the indexer keys, like the HF compressor plus the reference's QDQ),
# runs compute-sanitizer on the checks, then the bench (checks against the CPU
# reference, then times T = 4K..1M). The table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${OUT:-/tmp}
SRCS="kernels/flash_compressor/flash_compressor_bench.cu kernels/flash_compressor/flash_compressor.cu kernels/flash_compressor/flash_compressor_cpu.cpp kernels/flash_compressor/flash_compressor_args.cpp kernels/compress_pool/compress_pool_cpu.cpp kernels/rms_norm/rms_norm_cpu.cpp kernels/rope/rope_cpu.cpp kernels/quant/quant_cpu.cpp kernels/quant/quant_args.cpp kernels/sparse_decode_attention/kv_entry.cpp runtime/core/codecs.cpp runtime/core/status.cpp runtime/core/check.cpp runtime/core/log.cpp"
NVCC="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -DHART_CUDA=1 -Xptxas -v"
t0=$(date +%s)
$NVCC $SRCS -o /tmp/fc_bench > "$LOG/fc_build.log" 2>&1 &
pa=$!
PYTHONUNBUFFERED=1 python3 scripts/gpu/peers/compressor_peer.py > /tmp/fc_peer.txt
echo "torch peer:"; cat /tmp/fc_peer.txt
wait $pa || { echo "build failed"; cat "$LOG/fc_build.log"; exit 1; }
echo "build done after $(( $(date +%s) - t0 )) s"; grep -E "registers|spill" "$LOG/fc_build.log" | head -8
if [ "${FC_SANITIZE:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
  timeout 300 compute-sanitizer --tool memcheck --print-limit 5 /tmp/fc_bench --check-only 2>&1 \
    | grep -E "check|ERROR SUMMARY|Invalid" | head -16
fi
timeout 500 /tmp/fc_bench /tmp/fc_peer.txt 2>&1 | tee "$LOG/fc_bench.log"
if [ "${FC_NCU:-1}" != 0 ] && command -v ncu >/dev/null; then
  timeout 120 ncu --clock-control none -k regex:fc_prefill --launch-skip 30 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy /tmp/fc_bench --only csa --T 65536 \
    > "$LOG/fc_ncu_csa.log" 2>&1
  echo "ncu csa:"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers" "$LOG/fc_ncu_csa.log" | head -10
fi
