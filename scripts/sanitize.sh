#!/usr/bin/env bash
# The whole CPU test suite built with AddressSanitizer and UndefinedBehaviorSanitizer (gcc, -O1):
# every out-of-bounds access, use after free, leak at exit, signed overflow, misaligned or null
# access a test reaches aborts that test. Not part of CI (the instrumented build and run take
# about an hour on 2 cores); run it before a release and after changes to memory handling.
#
#   bash scripts/sanitize.sh                 # every test
#   bash scripts/sanitize.sh -R transport    # ctest arguments narrow it
#
# The build is build-sanitize/; the test log build-sanitize/ctest.log; exits with ctest's status.
# Do not edit sources while it builds: an object compiled from a header that changes under it is
# newer than the header, so make keeps it, and the mixed layouts show up as false overflows.
set -uo pipefail
cd "$(dirname "$0")/.."
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p build-sanitize
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DHART_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="-O1 $san" -DCMAKE_C_FLAGS="-O1 $san" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" \
  ${CCACHE_DIR:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache} > build-sanitize/configure.log 2>&1 ||
  { tail -20 build-sanitize/configure.log; exit 2; }
cmake --build build-sanitize -j"$(nproc)" > build-sanitize/build.log 2>&1 || { grep -m20 -E "error" build-sanitize/build.log; exit 2; }
# Leaks are checked at each test's exit (none are suppressed).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
OMP_WAIT_POLICY=PASSIVE ctest --test-dir build-sanitize -j"$(nproc)" --timeout 1800 --output-on-failure "$@" \
  > build-sanitize/ctest.log 2>&1
rc=$?
grep -E "tests passed|tests failed" build-sanitize/ctest.log
grep -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" build-sanitize/ctest.log | sort | uniq -c | head -20
exit $rc
