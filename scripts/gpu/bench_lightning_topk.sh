#!/usr/bin/env bash
# Lightning top-k (issue 6, T1) on the GPU machine, in one go: builds the bench with
# nvcc directly (the GPU image has no GTest/OpenBLAS/nlohmann-json, so no CMake), runs
# the adversarial checks under compute-sanitizer, times torch.topk as the peer, then
# runs the bench (checks against the CPU reference, then times). The table is printed last.
#
#   scripts/gpu/bench_lightning_topk.sh            # shipped build + A/B variants b, c
#   LT_NCU=0 ...                                   # skip the ncu stall breakdown
#   LT_VARIANTS=0 scripts/gpu/bench_lightning_topk.sh   # shipped build only
#   LT_SANITIZE=0 ...                              # skip compute-sanitizer
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${OUT:-/tmp}
SRCS="kernels/lightning_topk/lightning_topk_bench.cu kernels/lightning_topk/lightning_topk.cu kernels/lightning_topk/lightning_topk_cpu.cpp kernels/indexer/indexer_cpu.cpp runtime/core/status.cpp runtime/core/check.cpp runtime/core/log.cpp"
NVCC="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -DHART_CUDA=1"

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader || true
t0=$(date +%s)
$NVCC $SRCS -o /tmp/lt_bench 2>&1 | tee "$LOG/build.log" &
pa=$!
if [ "${LT_VARIANTS:-1}" != 0 ]; then
  # A/B variants of the shipped build: B counts digit 1 into one histogram copy;
  # C orders the output with a bitonic sort on rank 0 (v2) instead of counting ranks.
  $NVCC -DLT_HCOPIES=1 $SRCS -o /tmp/lt_bench_b > "$LOG/build_b.log" 2>&1 &
  pb=$!
  $NVCC -DLT_RANK_OUT=0 $SRCS -o /tmp/lt_bench_c > "$LOG/build_c.log" 2>&1 &
  pc=$!
fi

# torch.topk peer (same device call), while nvcc runs: per-call CUDA events, launch
# included, rotated inputs (>= 192 MB of sets), median of 200.
PYTHONUNBUFFERED=1 python3 scripts/gpu/peers/topk_peer.py > /tmp/lt_peer.txt
echo "torch peer:"; cat /tmp/lt_peer.txt
wait $pa || { echo "build failed"; exit 1; }
[ -n "${pb:-}" ] && { wait $pb || echo "variant B build failed"; }
[ -n "${pc:-}" ] && { wait $pc || echo "variant C build failed"; }
echo "build done after $(( $(date +%s) - t0 )) s"

if [ "${LT_SANITIZE:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --print-limit 10 /tmp/lt_bench --eval-only > "$LOG/memcheck.log" 2>&1
  echo "memcheck rc=$? : $(grep -E 'ERROR SUMMARY|eval cases' "$LOG/memcheck.log" | tr '\n' ' ')"
fi
for v in b c; do
  if [ -x /tmp/lt_bench_$v ]; then
    echo "=== variant $v ($( [ $v = b ] && echo 'LT_HCOPIES=1' || echo 'LT_RANK_OUT=0')) ==="
    timeout 240 /tmp/lt_bench_$v /tmp/lt_peer.txt > "$LOG/bench_$v.log" 2>&1; echo "rc=$?"
    grep -E "FAIL|^\|" "$LOG/bench_$v.log"
  fi
done
if [ "${LT_NCU:-1}" != 0 ] && command -v ncu >/dev/null; then
  # Where the time goes at batch 1, n = 256K, k = 512 (clocks left alone).
  timeout 120 ncu --clock-control none -k regex:lightning_topk_kernel --launch-skip 5 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
    /tmp/lt_bench --profile 1 262144 512 > "$LOG/ncu.log" 2>&1
  timeout 120 ncu --clock-control none -k regex:lightning_topk_kernel --launch-skip 5 --launch-count 1 \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,gpu__time_duration.sum,smsp__inst_executed.sum \
    /tmp/lt_bench --profile 1 262144 512 > "$LOG/ncu_stalls.log" 2>&1
  echo "ncu (batch 1, n 256K, k 512):"
  grep -E "Duration|Cluster Size|Registers|Warp Cycles Per Issued|Issued Warp" "$LOG/ncu.log" | head -8
  grep -E "stalled|duration|inst_executed" "$LOG/ncu_stalls.log" | awk '{print $1, $NF}' | sort -k2 -g -r | head -10
fi
echo "=== shipped build (defaults: LT_BULK=1 LT_UNROLL=8 LT_MAX_CLUSTER=16 LT_HCOPIES=4 on streaming rows, LT_RANK_OUT on 16-CTA clusters) ==="
timeout 300 /tmp/lt_bench /tmp/lt_peer.txt 2>&1 | tee "$LOG/bench.log"
