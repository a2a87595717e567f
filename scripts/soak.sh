#!/usr/bin/env bash
# The long soak (issue 27): `hart serve` on tiny-a with weight sync, then `hart soak` with
# 10,000 requests (aborts, dropped connections, pauses, a weight push every 10 s) and the
# server's RSS; stops by itself and prints the summary line. Exit 1 on any loss or leak.
#   bash scripts/soak.sh            # after scripts/setup.sh (uses build/hart)
#   REQUESTS=2000 bash scripts/soak.sh
set -uo pipefail
cd "$(dirname "$0")/.."
hart=${HART:-./build/hart}
export OMP_WAIT_POLICY=PASSIVE
log=$(mktemp)
$hart --log warn serve -m tests/data/tiny-a --bind 'tcp://127.0.0.1:*' --weight-sync-endpoint 'tcp://127.0.0.1:*' > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 300); do grep -q "hart: serving" "$log" && break; sleep 0.1; done
ep=$(sed -n 's/^hart: serving .* on //p' "$log")
ws=$(sed -n 's/^hart: weight sync on //p' "$log")
[ -n "$ep" ] && [ -n "$ws" ] || { cat "$log"; exit 2; }
$hart --log warn soak --connect "$ep" --requests "${REQUESTS:-10000}" --users 8 --max-new-tokens 32 --pause-ms 2000 \
  --weight-sync-endpoint "$ws" -m tests/data/tiny-a --push-ms 10000 --server-pid "$pid"
