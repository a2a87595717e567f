#!/usr/bin/env bash
# One device call for the measurements the docs still mark "pending" (the
# benches, per-kernel profiles, the two-GPU weight sync), each step under its
# own time limit, with a summary last. The correctness gate is
# scripts/gpu/verify.sh (the whole suite, check-ops, compute-sanitizer).
#
# Here:   bash scripts/gpu/pack_deps.sh   (once; .gpu-deps/hart-deps.tar.xz)
#         git archive HEAD -- . ':!tests/data' | xz -1 > .gpu-deps/src.tar.xz
#         cp scripts/gpu/run_pending.sh .gpu-deps/
# Device: carry [".gpu-deps"]:
#           bash .gpu-deps/run_pending.sh benches   # requant, G1, hart bench, T1/C1/A1, W1 (skip some:
#                                                   # the limits add up past 10 minutes)
#           bash .gpu-deps/run_pending.sh ncu       # per-kernel time per decode step (ncu, ~4 min):
#                                                   # b=1/4K, b=32/4K, b=32/256K
#           bash .gpu-deps/run_pending.sh prefill   # per-kernel time per prefill call (ncu): b=4 x 2048
#                                                   # new tokens on 4K, b=1 x 512 on 256K
#           bash .gpu-deps/run_pending.sh two_gpus  # on nvidia-h200-x2: weight sync by NCCL (tests, W1)
#         It builds from the archive of HEAD, so other engineers' uncommitted work in
#         the carried tree cannot break it; tests/data comes from the carried tree.
# Logs land in $OUT. HART_PENDING_SKIP="bench sda" skips steps by name.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
phase=${1:-benches}
LOG=${OUT:-/tmp/hart-pending}
mkdir -p "$LOG"
src=/tmp/hart-src
if [ ! -x "$src/build-gpu/hart" ]; then
  rm -rf "$src" && mkdir -p "$src/.gpu-deps"
  tar -C "$src" -xJf .gpu-deps/src.tar.xz && cp -r tests/data "$src/tests/" && cp .gpu-deps/hart-deps.tar.xz "$src/.gpu-deps/"
  fresh=1
fi
cd "$src"
export LD_LIBRARY_PATH=/tmp/hart-deps/usr/lib/x86_64-linux-gnu:/tmp/hart-deps/usr/lib/x86_64-linux-gnu/openblas-openmp
summary=()
skip() { [[ " ${HART_PENDING_SKIP:-} " == *" $1 "* ]]; }
step() {  # step NAME LIMIT_S COMMAND...: runs, logs, records rc and seconds
  local name=$1 limit=$2
  shift 2
  if skip "$name"; then summary+=("$name: skipped"); return; fi
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  summary+=("$name: rc=$rc in $(( $(date +%s) - t0 )) s (log $name.log)")
}

if [ "$phase" = two_gpus ]; then
  # Weight sync by NCCL from GPU 1 into hart serve on GPU 0 (perf-notes W1 v9).
  [ -n "${fresh:-}" ] && step build 300 bash scripts/gpu/build.sh -R '^none$'
  grep -m1 NCCL "$LOG/build.log" 2>/dev/null
  step nccl_serve 120 ./build-gpu/tests/serve_device_test --gtest_filter='serve_device_gpu.weights_*'
  step nccl_faults 90 ./build-gpu/tests/weight_sync_serve_test --gtest_filter='*nccl*'
  ./build-gpu/hart serve -m tests/data/tiny-a --device cuda --bind tcp://127.0.0.1:5557 \
    --weight-sync-endpoint tcp://127.0.0.1:5558 > "$LOG/serve_w1.log" 2>&1 &
  w1_pid=$!
  sleep 6
  step w1_nccl 90 ./build-gpu/rollout/weight_sync_client_bench tcp://127.0.0.1:5558 tests/data/tiny-a 2 128 5 4096 3000 1 nccl
  kill $w1_pid; wait $w1_pid 2>/dev/null
elif [ "$phase" = ncu ]; then
  # Where a decode step's time goes, kernel by kernel (scripts/gpu/ncu_summary.py).
  [ -n "${fresh:-}" ] && step build 300 bash scripts/gpu/build.sh -R '^none$'
  for point in "1 4K" "32 4K" "32 256K"; do
    set -- $point
    step "ncu_b$1_$2" 150 ncu --clock-control none --csv --metrics gpu__time_duration.sum \
      ./build-gpu/hart bench --batch "$1" --context "$2" --steps 1 --warmup 1 --prefill-chunk 0
  done
elif [ "$phase" = prefill ]; then
  # Where a prefill call's time goes (issue 26: prefill is 84x its floor). The bench makes
  # 1 + --prefill-reps prefill calls and warmup + steps decode steps: 2 and 2 here.
  [ -n "${fresh:-}" ] && step build 300 env HART_BUILD_TARGET=hart bash scripts/gpu/build.sh -R '^none$'
  for point in "4 4K 2048" "1 256K 512"; do
    set -- $point
    step "ncu_prefill_b$1_$2_c$3" 240 ncu --clock-control none --csv --metrics gpu__time_duration.sum \
      ./build-gpu/hart bench --batch "$1" --context "$2" --steps 1 --warmup 1 --prefill-chunk "$3" --prefill-reps 1
  done
else
  # The benches behind docs/perf-notes.md's tables (G1, W1, D1/D2, T1, C1, A1).
  [ -n "${fresh:-}" ] && step build 300 bash scripts/gpu/build.sh -R '^none$'
  step requant 60 ./build-gpu/runtime/gpu/weight_requant_bench 20
  step linear_bench 300 env OUT="$LOG/linear" bash scripts/gpu/bench_linear.sh  # G1: CUDA vs tensor cores; G2: ours vs cuBLASLt
  step bench 180 ./build-gpu/hart bench --batch 1,32 --context 4K,256K
  step hf_peer 200 python3 scripts/gpu/hf_peer_decode.py --context 4096  # D1's peer, the same run
  step bench_cc 120 ./build-gpu/hart bench --batch 1,32 --context 4K --fp8-cuda-cores  # tensor cores off
  step hot 420 env OUT="$LOG" bash scripts/gpu/bench_hot_kernels.sh  # T1, C1, A1 and their peers, one summary
  # W1 on this host's cores: 1.96 GB pushes into a fresh server (the first faults its staging in),
  # over 4 lanes (the default here) in 128 MiB buckets.
  ./build-gpu/hart serve -m tests/data/tiny-a --bind tcp://127.0.0.1:5557 --weight-sync-endpoint tcp://127.0.0.1:5558 \
    > "$LOG/serve_w1.log" 2>&1 &
  w1_pid=$!
  sleep 5
  step w1 150 ./build-gpu/rollout/weight_sync_client_bench tcp://127.0.0.1:5558 tests/data/tiny-a 2 128 5 4096 1000 4
  # The same tensors from device memory of this process, by CUDA IPC (a colocated trainer).
  step w1_ipc 150 ./build-gpu/rollout/weight_sync_client_bench tcp://127.0.0.1:5558 tests/data/tiny-a 2 128 5 4096 2000 1 cuda
  kill $w1_pid; wait $w1_pid 2>/dev/null
  # S1: the gap between decode steps and its phases, the scheduler's spin off and at its default
  # (perf-notes S1 v13-v14), at output lengths that do and do not cross a page.
  for c in 0 -1 0 -1; do
    for len in 64 200; do
      OMP_NUM_THREADS=4 ./build-gpu/hart serve -m tests/data/tiny-a --bind tcp://127.0.0.1:5557 --catch-step-us $c \
        > /dev/null 2>&1 &
      s1_pid=$!
      sleep 3
      timeout 60 ./build-gpu/hart bench-serve --connect tcp://127.0.0.1:5557 --concurrency 1 4 --input-len 64 \
        --output-len $len --requests-per-user 4 2>&1 | grep -E "^(conc|[14]) " | sed "s/^/catch=$c len=$len /" >> "$LOG/s1.log"
      kill $s1_pid; wait $s1_pid 2>/dev/null
    done
  done
fi

echo "=== failures"
for f in nccl_serve nccl_faults; do
  [ -f "$LOG/$f.log" ] && grep -E "FAILED|PASSED|Skipped|error|worst|ERROR SUMMARY" "$LOG/$f.log" | head -6
done
echo "=== tables"
for f in requant bench hf_peer bench_cc hot_kernels w1 w1_ipc w1_nccl s1; do
  [ -f "$LOG/$f.log" ] && { echo "--- $f"; grep -E "^\||FAIL|error|gb_per_s|GB/s|^catch=" "$LOG/$f.log" | tail -32; }
done
for f in "$LOG"/ncu_prefill_b*.log; do
  [ -f "$f" ] && { echo "--- $(basename "$f" .log) (per prefill call, the 2 decode steps included)"; python3 scripts/gpu/ncu_summary.py "$f" 2 30; }
done
for f in "$LOG"/ncu_b*.log; do
  [ -f "$f" ] && { echo "--- $(basename "$f" .log) (per step)"; python3 scripts/gpu/ncu_summary.py "$f" 2 25; }
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
