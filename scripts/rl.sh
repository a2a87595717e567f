#!/usr/bin/env bash
# The RL loop end to end on CPU (examples/rl): a tiny random V4 model gets a
# short supervised warm start, then GRPO on 3-digit sorting with rollouts from
# a `hart serve --precision fp8` it starts and weights pushed into it every
# step. ~3 minutes on 2 cores after the build; writes rl-out/rl.csv and rl.svg.
# Usage: bash scripts/rl.sh [rl_grpo options: --steps N --out DIR --seed S ...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_WAIT_POLICY=PASSIVE  # trainer and server share the cores
exec ./build/examples/rl/rl_grpo --hart ./build/hart "$@"
