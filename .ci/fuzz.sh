#!/usr/bin/env bash
# Build gsched's libFuzzer targets (tests/fuzz: clang, AddressSanitizer + UndefinedBehaviorSanitizer)
# and run each for a bounded time from the generated seed corpus plus the checked-in inputs in
# tests/fuzz/corpus/<target>/ (reproducers of fixed bugs). One summary line per target; exits
# non-zero if any target crashed, leaked, timed out on an input or ran out of memory (the input
# is then in build-fuzz/fuzz-artifacts/).
#
# Usage: bash .ci/fuzz.sh           (from anywhere)
#   GS_FUZZ_SECONDS   seconds per target (default 60)
#   GS_FUZZ_BUILD_DIR build directory (default build-fuzz)
#   CC                the clang to use (default clang)
# Needs, besides .ci/install-deps.sh's packages: clang and its libFuzzer runtime; on Debian 12
# `clang libclang-rt-14-dev` (clang-14), on Ubuntu `clang libclang-rt-<ver>-dev` or
# `libclang-common-<ver>-dev` for older releases. See tests/fuzz/README.md to run longer.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${GS_FUZZ_SECONDS:-60}
dir=${GS_FUZZ_BUILD_DIR:-build-fuzz}
cc=${CC:-clang}
jobs=$(nproc 2>/dev/null || echo 2)
targets="fuzz_msg fuzz_layer fuzz_graph_submit"

command -v "$cc" >/dev/null 2>&1 || {
  echo "gsched fuzz: $cc not found (Debian/Ubuntu: apt-get install clang libclang-rt-14-dev)"; exit 1; }
ccxx=${CXX:-${cc/clang/clang++}}
command -v "$ccxx" >/dev/null 2>&1 || ccxx=$cc
bash .ci/install-deps.sh --fuzz || exit 1

echo "=== gsched: fuzz build ($dir, $cc) ==="
# RelWithDebInfo at -O1 without NDEBUG: gs_assert stays on. GS_BUILD_BENCH stays ON because
# tests/integration depends on the gs-bench target; only the fuzz targets are built below.
cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$ccxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" \
  -DGS_FUZZ=ON -DGS_ASAN=ON -DGS_UBSAN=ON -DGS_WITH_CUDA=OFF -DGS_BUILD_BENCH=ON \
  >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" -j"$jobs" --target gs_fuzz >"$dir.build.log" 2>&1 || {
  tail -n 80 "$dir.build.log"; exit 1; }

rm -rf "$dir/fuzz-seeds"
"$dir/fuzz/fuzz_seeds" "$dir/fuzz-seeds" || { echo "gsched fuzz: seed generation failed"; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "=== gsched: fuzzing $secs s per target ==="
status=0
for t in $targets; do
  corpus="$dir/fuzz-corpus/$t"      # grows across runs of this script
  arts="$dir/fuzz-artifacts"
  log="$dir/fuzz-$t.log"
  mkdir -p "$corpus" "$arts"
  dirs=("$corpus" "$dir/fuzz-seeds/$t")
  [ -d "tests/fuzz/corpus/$t" ] && dirs+=("tests/fuzz/corpus/$t")
  "$dir/fuzz/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
    -artifact_prefix="$arts/$t-" "${dirs[@]}" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
  if [ $rc -eq 0 ]; then
    echo "$t: ok, ${secs} s, ${runs:-?} runs, ${eps:-?} exec/s, cov ${cov:-?} edges, ft ${ft:-?}, corpus ${corp:-?}, peak rss ${rss:-?} MB"
  else
    status=1
    art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    echo "$t: FAILED (exit $rc) after ${runs:-?} runs, cov ${cov:-?} edges; input: ${art:-none written}; log: $log"
    grep -E -A40 "==fuzz==|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY" "$log" | head -n 80
  fi
done
if [ $status -eq 0 ]; then echo "gsched fuzz: no crash"; else echo "gsched fuzz: CRASHES FOUND"; fi
exit $status
