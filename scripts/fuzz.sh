#!/usr/bin/env bash
# libFuzzer over every decoder of outside bytes (fuzz/targets.h), built with clang, ASan and
# UBSan (any report aborts the run). Not part of CI (which replays the corpus: fuzz_replay_test).
#
#   bash scripts/fuzz.sh                 # each target 1M inputs (FUZZ_RUNS), corpus grown in a temp copy
#   FUZZ_RUNS=100000 bash scripts/fuzz.sh client_frames sync_frames
#   FUZZ_MERGE=1 bash scripts/fuzz.sh    # also merge what was found into fuzz/corpus/<target>.tar.gz (minimized)
#
# Prints one line per target (runs, corpus size, crashes) and exits 1 if any target crashed;
# the crashing input is left in build-fuzz/crashes/<target>/.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "fuzz: needs clang (apt-get install clang)"; exit 2; }
runs=${FUZZ_RUNS:-1000000}
all="client_frames worker_frames sync_frames pd_frames safetensors_header config_json tokenizer_json"
targets=${*:-$all}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p build-fuzz
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHART_CUDA=OFF -DHART_FUZZ=ON -DHART_BUILD_TESTS=OFF \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $san" -DCMAKE_EXE_LINKER_FLAGS="$san" \
  ${CCACHE_DIR:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache} > build-fuzz/build.log 2>&1 || { tail -20 build-fuzz/build.log; exit 2; }
for t in $targets; do
  cmake --build build-fuzz -j"$(nproc)" --target "fuzz_$t" >> build-fuzz/build.log 2>&1 || { tail -30 build-fuzz/build.log; exit 2; }
done
failed=0
printf "| target | runs | corpus | result | seconds |\n|---|---|---|---|---|\n" > build-fuzz/summary.md
for t in $targets; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work" "build-fuzz/crashes/$t"
  # A target without a committed corpus yet starts from its seeds (libfuzzer_main.cpp).
  [ -f fuzz/corpus/"$t".tar.gz ] && tar -xzf fuzz/corpus/"$t".tar.gz -C "$work"
  t0=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1 ./build-fuzz/fuzz/fuzz_"$t" "$work" -runs="$runs" -max_len=65536 -timeout=10 \
    -rss_limit_mb=4096 -artifact_prefix="build-fuzz/crashes/$t/" -print_final_stats=1 > "build-fuzz/$t.log" 2>&1
  rc=$?
  done_runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "build-fuzz/$t.log" | grep -oE "[0-9]+$")
  result=$([ $rc = 0 ] && echo "0 crashes" || { failed=1; echo "CRASH rc=$rc (build-fuzz/$t.log)"; })
  printf "| %s | %s | %s | %s | %s |\n" "$t" "${done_runs:-?}" "$(ls "$work" | wc -l)" "$result" "$(( $(date +%s) - t0 ))" >> build-fuzz/summary.md
  if [ "${FUZZ_MERGE:-0}" = 1 ] && [ $rc = 0 ]; then
    merged=build-fuzz/merged/$t
    rm -rf "$merged" && mkdir -p "$merged"
    [ -f fuzz/corpus/"$t".tar.gz ] && tar -xzf fuzz/corpus/"$t".tar.gz -C "$merged"
    ./build-fuzz/fuzz/fuzz_"$t" -merge=1 "$merged" "$work" >> "build-fuzz/$t.log" 2>&1
    (cd "$merged" && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=ustar -cf - .) \
      | gzip -9 -n > fuzz/corpus/"$t".tar.gz
  fi
done
cat build-fuzz/summary.md
exit $failed
