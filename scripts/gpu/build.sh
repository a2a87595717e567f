#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04, CUDA 13, no network): unpacks the carried
# Debian dependencies (scripts/gpu/pack_deps.sh) into a prefix, configures hart
# with CUDA for sm_90a against them, builds, and runs the test suite (GPU tests
# included). Usage: [HART_CMAKE_ARGS=...] [HART_BUILD_TARGET=hart] bash scripts/gpu/build.sh [ctest args...]
# (HART_BUILD_TARGET builds that target alone, for a bench or a profile.)
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=/tmp/hart-deps
arch=x86_64-linux-gnu
mkdir -p "$deps" && tar -C "$deps" -xJf .gpu-deps/hart-deps.tar.xz
# The Debian .pc/.cmake files say /usr; pkg-config re-roots them, CMake searches the prefix.
export PKG_CONFIG_SYSROOT_DIR="$deps"
export PKG_CONFIG_PATH="$deps/usr/lib/$arch/pkgconfig:$deps/usr/share/pkgconfig"
export LD_LIBRARY_PATH="$deps/usr/lib/$arch:$deps/usr/lib/$arch/openblas-openmp:${LD_LIBRARY_PATH:-}"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DHART_CUDA=ON \
  -DHART_DEPS_PREFIX="$deps" \
  -DCMAKE_PREFIX_PATH="$deps/usr;$deps/usr/lib/$arch/cmake;$deps/usr/share/cmake" \
  -DCAPNP_EXECUTABLE="$deps/usr/bin/capnp" -DCAPNPC_CXX_EXECUTABLE="$deps/usr/bin/capnpc-c++" \
  -DCAPNPC_IMPORT_DIRS="$deps/usr/include" ${HART_CMAKE_ARGS:-} | grep -E "NCCL" || true
target=(${HART_BUILD_TARGET:+--target "$HART_BUILD_TARGET"})
cmake --build build-gpu -j"$(nproc)" "${target[@]}" 2>&1 | grep -E "error|warning: " || true
cmake --build build-gpu -j"$(nproc)" "${target[@]}" >/dev/null
cd build-gpu && OMP_WAIT_POLICY=PASSIVE ctest --output-on-failure -j12 --timeout 500 "$@"
