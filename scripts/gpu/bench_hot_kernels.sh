#!/usr/bin/env bash
# Issue 6's three hot kernels — Lightning top-k (T1), the Flash compressor (C1),
# sparse decode attention (A1) — in one binary and one call on the GPU machine:
# builds hot_kernels_bench with nvcc directly (no CMake on the GPU image) while
# the PyTorch peers run on the same card (scripts/gpu/peers/*.py), then runs it:
# each kernel is checked against its CPU reference on fresh random inputs, then
# timed; its own table, then one summary table (size, time, floor, % of floor,
# peer) last. HK_SANITIZE=1 also runs the checks under compute-sanitizer (slow).
# The per-kernel scripts (bench_lightning_topk.sh, ...) add variants and ncu.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${OUT:-/tmp}
OBJ=/tmp/hot_kernels_obj
SRCS="kernels/testing/hot_kernels_bench.cu
  kernels/lightning_topk/lightning_topk_bench.cu kernels/lightning_topk/lightning_topk.cu
  kernels/lightning_topk/lightning_topk_cpu.cpp kernels/indexer/indexer_cpu.cpp
  kernels/flash_compressor/flash_compressor_bench.cu kernels/flash_compressor/flash_compressor.cu
  kernels/flash_compressor/flash_compressor_cpu.cpp kernels/flash_compressor/flash_compressor_args.cpp
  kernels/compress_pool/compress_pool_cpu.cpp kernels/rms_norm/rms_norm_cpu.cpp kernels/rope/rope_cpu.cpp
  kernels/sparse_decode_attention/sparse_decode_attention_bench.cu
  kernels/sparse_decode_attention/sparse_decode_attention.cu
  kernels/sparse_decode_attention/sparse_decode_attention_cpu.cpp kernels/sparse_decode_attention/kv_entry.cpp
  kernels/sparse_attention/sparse_attention_cpu.cpp kernels/quant/quant_cpu.cpp kernels/quant/quant_args.cpp
  runtime/core/codecs.cpp runtime/core/status.cpp runtime/core/check.cpp runtime/core/log.cpp"
NVCC="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -DHART_CUDA=1 -DHART_HOT_KERNELS_BENCH=1"
t0=$(date +%s)
rm -rf "$OBJ" && mkdir -p "$OBJ"
# One nvcc per source, in parallel, then one link.
( for s in $SRCS; do echo "$s"; done | xargs -P "$(nproc)" -I{} sh -c \
    '$0 -c {} -o '"$OBJ"'/$(echo {} | tr / _).o' "$NVCC" && $NVCC "$OBJ"/*.o -o /tmp/hot_kernels_bench ) \
  > "$LOG/hot_build.log" 2>&1 &
build=$!
for p in topk compressor attention; do
  PYTHONUNBUFFERED=1 python3 scripts/gpu/peers/${p}_peer.py > /tmp/hk_${p}_peer.txt 2> "$LOG/hk_${p}_peer.err" ||
    echo "peer $p failed (see hk_${p}_peer.err); its column stays empty"
done
wait $build || { echo "build failed"; cat "$LOG/hot_build.log"; exit 1; }
echo "build done after $(( $(date +%s) - t0 )) s"
if [ "${HK_SANITIZE:-0}" != 0 ] && command -v compute-sanitizer >/dev/null; then
  timeout 600 compute-sanitizer --tool memcheck --print-limit 10 /tmp/hot_kernels_bench > "$LOG/hot_memcheck.log" 2>&1
  echo "compute-sanitizer: rc=$?"; grep -E "ERROR SUMMARY" "$LOG/hot_memcheck.log" | tail -1
fi
timeout 900 /tmp/hot_kernels_bench --topk-peer /tmp/hk_topk_peer.txt --compressor-peer /tmp/hk_compressor_peer.txt \
  --attention-peer /tmp/hk_attention_peer.txt 2> "$LOG/hot_kernels_stderr.log" | tee "$LOG/hot_kernels.log"
