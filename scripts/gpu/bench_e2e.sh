#!/usr/bin/env bash
# V4-Flash layers served end to end on one device (docs/perf-notes.md E1):
# `hart serve --device cuda --load-format dummy` on the first N layers of
# configs/deepseek-v4-flash (random weights made on the device in the serving
# formats: FP8 attention, MXFP4 routed experts), KV pages from the memory plan,
# driven by `hart bench-serve` with an InferenceX-style profile (8K-token
# prompts). Needs build-gpu/ (scripts/gpu/build.sh or verify.sh suite).
# Usage: [SERVE_ARGS="--prefill-chunk 4096"] [CONCURRENCY="1 8 32"] bash scripts/gpu/bench_e2e.sh [LAYERS] [FRACTION]
set -uo pipefail
cd "$(dirname "$0")/../.."
layers=${1:-30}
fraction=${2:-0.9}
LOG=${OUT:-/tmp/hart-e2e}
mkdir -p "$LOG"
export LD_LIBRARY_PATH=/tmp/hart-deps/usr/lib/x86_64-linux-gnu:/tmp/hart-deps/usr/lib/x86_64-linux-gnu/openblas-openmp
t0=$(date +%s)
./build-gpu/hart serve -m configs/deepseek-v4-flash --load-format dummy --num-layers "$layers" --device cuda \
  --precision fp8 --max-context 16384 --max-running 64 --gpu-memory-fraction "$fraction" \
  --bind tcp://127.0.0.1:5561 ${SERVE_ARGS:-} > "$LOG/e2e_serve.log" 2>&1 &
srv=$!
for _ in $(seq 600); do
  grep -q "hart: serving" "$LOG/e2e_serve.log" && break
  kill -0 $srv 2>/dev/null || break
  sleep 0.5
done
echo "startup (dummy weights made on the device, memory plan, graphs at first use): $(( $(date +%s) - t0 )) s"
grep -E "memory plan|GiB|capacity|dummy weights|error" "$LOG/e2e_serve.log" | head -20
if grep -q "hart: serving" "$LOG/e2e_serve.log"; then
  bench() { timeout "$1" ./build-gpu/hart bench-serve --connect tcp://127.0.0.1:5561 --input-len 8192 --vocab 129280 "${@:2}"; }
  for c in ${CONCURRENCY:-1 8 32}; do
    # Concurrency 1: the whole 1K output; more users: shorter outputs, so prefill does not take the whole call.
    out=1024; [ "$c" -gt 1 ] && out=$(( c > 8 ? 128 : 256 ))
    bench 200 --concurrency "$c" --output-len "$out" --requests-per-user 1 2>&1 | tee "$LOG/e2e_c$c.log" | grep -E "^[0-9]"
  done
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tail -1
fi
kill $srv 2>/dev/null
wait $srv 2>/dev/null
