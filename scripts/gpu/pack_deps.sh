#!/usr/bin/env bash
# Packs the Debian 12 build dependencies the GPU machine lacks (OpenBLAS, PCRE2,
# nlohmann-json, CLI11, GoogleTest, Cap'n Proto, ZeroMQ + cppzmq, CAF 0.17,
# cpp-httplib with the brotli and zlib its pkg-config file requires) into
# .gpu-deps/hart-deps.tar.xz (git-ignored), pruned of docs and static libraries,
# to be carried to the device run and unpacked by scripts/gpu/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu-deps
rm -rf "$out" && mkdir -p "$out/debs" "$out/root"
pkgs=(libopenblas0-openmp libopenblas-openmp-dev libgfortran5 nlohmann-json3-dev libpcre2-dev libpcre2-8-0
      libcli11-dev libgtest-dev libgmock-dev capnproto libcapnp-dev libcapnp-0.9.2 libzmq3-dev libzmq5 cppzmq-dev
      libsodium23 libpgm-5.3-0 libnorm1 libssl-dev libssl3 libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17
      libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 zlib1g-dev)
(cd "$out/debs" && apt-get download "${pkgs[@]}" >/dev/null)
for d in "$out"/debs/*.deb; do dpkg -x "$d" "$out/root"; done
rm -rf "$out/root/usr/share/doc" "$out/root/usr/share/man" "$out/root/usr/share/lintian"
find "$out/root" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
tar -C "$out/root" -cJf "$out/hart-deps.tar.xz" .
rm -rf "$out/debs" "$out/root"
du -h "$out/hart-deps.tar.xz"
