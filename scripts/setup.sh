#!/usr/bin/env bash
# Installs hart's build dependencies from Debian 12's registry (idempotent:
# only missing packages are installed) and configures + builds hart in
# ./build. Usage: bash scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config ccache git
  libopenblas-openmp-dev  # GEMMs of the CPU engine (OpenMP build: one thread pool)
  nlohmann-json3-dev  # config.json, safetensors headers, tokenizer.json
  libpcre2-dev        # tokenizer pre-tokenizer regexes (Unicode classes)
  libcli11-dev        # the hart command line
  capnproto libcapnp-dev      # wire schemas (Cap'n Proto 0.9)
  libzmq3-dev cppzmq-dev      # transport (ZeroMQ 4.3 + cppzmq)
  libcaf-dev                  # actors (CAF 0.17)
  libcpp-httplib-dev          # the HTTP gateway (cpp-httplib 0.11)
  zlib1g-dev                  # tests: the fuzz corpus archives (fuzz/corpus/*.tar.gz)
  python3-prometheus-client   # tests: /metrics parsed by the Prometheus client's own parser
  libtorch-dev                # training/: the LibTorch V4 model and trainer (CPU build)
  libgtest-dev libgmock-dev
  clang-format                # tests: the house format, checked by scripts/check_format.sh
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "${1:-}" = "--no-build" ] && exit 0
# CUDA sources compile wherever nvcc exists (sm_90a only); set HART_CUDA=OFF to skip.
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
# Warnings are errors with this machine's compiler (HART_WERROR=OFF to build anyway).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHART_WERROR="${HART_WERROR:-ON}" ${HART_CUDA:+-DHART_CUDA=$HART_CUDA} >/dev/null
cmake --build build -j"$(nproc)"
