#!/usr/bin/env bash
# Install dependencies, build gsched and run the whole test suite twice: a normal build
# (with the CUDA backend compiled when nvcc exists; its GPU tests skip without a device) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build (CPU backend); the normal build's suite
# runs once more under CPU load (stress-ng), then the socket fuzz harness drives its daemons for
# $GS_SOCKFUZZ_SECONDS (default 60); last, ThreadSanitizer daemons and programs (scripts/tsan.sh).
# Usage: bash .ci/test.sh            (from the repository root)
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/own-netns.sh
bash .ci/install-deps.sh --hosts || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
status=0

run_suite() {  # name builddir cmake-args...
  local name=$1 dir=$2; shift 2
  echo "=== gsched: $name build ($dir) ==="
  cmake -S . -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j"$jobs" >"$dir.build.log" 2>&1 || { tail -n 80 "$dir.build.log"; return 1; }
  echo "=== gsched: $name tests ==="
  ctest --test-dir "$dir" -V -j"$jobs" --timeout 900 >"$dir.test.log" 2>&1
  local rc=$?
  grep -E "Synthesis|SKIP|FAIL|CRASH|\"bench\":\"netns-hosts\"" "$dir.test.log" | grep -v "^\s*$" || true
  if [ $rc -ne 0 ]; then
    grep -E -B2 -A30 "\[FAIL\]|CRASH|ERROR: AddressSanitizer|runtime error|Failed|\*\*\*Timeout" "$dir.test.log" | tail -n 200
  fi
  grep -E "tests passed|tests failed" "$dir.test.log" | tail -n 1
  return $rc
}

# One more pass of the normal build's suite while stress-ng keeps every core busy (2 CPU hogs
# per core): tests must wait on events, not on the clock. stress-ng is bounded by its own
# --timeout and killed when the pass ends, whatever its outcome.
loaded_pass() {  # builddir
  local dir=$1 hogs=$(( 2 * jobs )) spid rc
  echo "=== gsched: normal tests under load (stress-ng --cpu $hogs) ==="
  stress-ng --cpu "$hogs" --timeout 1200 --quiet >"$dir.stress.log" 2>&1 &
  spid=$!
  trap 'kill "$spid" 2>/dev/null' EXIT
  trap 'kill "$spid" 2>/dev/null; exit 1' INT TERM
  ctest --test-dir "$dir" -V -j"$jobs" --timeout 900 >"$dir.test-load.log" 2>&1
  rc=$?
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  trap - EXIT INT TERM
  if [ $rc -ne 0 ]; then
    grep -E -B2 -A30 "\[FAIL\]|CRASH|Failed|\*\*\*Timeout" "$dir.test-load.log" | tail -n 200
  fi
  grep -E "tests passed|tests failed" "$dir.test-load.log" | tail -n 1
  return $rc
}

# The socket-level fuzz harness against running daemons (tests/fuzz/sockfuzz.c) for a bounded
# time: one JSON line of counters; fails on a dead daemon, an inexact result, a locked-out
# client or a bound exceeded. Daemon logs in build-ci.sockfuzz.log.
# It runs in a network namespace of its own (scripts/own-netns.sh says why).
sockfuzz_pass() {  # builddir
  local dir=$1 secs=${GS_SOCKFUZZ_SECONDS:-60}
  echo "=== gsched: socket fuzzing of running daemons (${secs} s) ==="
  # the full mix with every bound fatal, gsched's RSS included (peak and after the attack)
  GS_BIN_DIR="$PWD/$dir/bin" gs_in_own_netns timeout $((secs + 300)) "$dir/tests/sockfuzz" --seconds "$secs" \
    --rss-bound fail --daemon-log "$dir.sockfuzz.log"
}

if run_suite normal build-ci -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
  loaded_pass build-ci || status=1
  sockfuzz_pass build-ci || status=1
else
  status=1
fi
# The dashboard in a real browser (chromium, installed for this step only; skipped with a
# message when it cannot be installed). The screenshot's path is printed.
echo "=== gsched: dashboard browser test ==="
bash .ci/install-deps.sh --browser >/dev/null 2>&1 || echo "gsched: chromium could not be installed"
bash tests/integration/dash_browser.sh build-ci build-ci/dash-browser || status=1
run_suite "asan+ubsan" build-ci-asan -DCMAKE_BUILD_TYPE=Debug -DGS_ASAN=ON -DGS_UBSAN=ON \
  -DGS_WITH_CUDA=OFF -DGS_BUILD_BENCH=ON || status=1
# ThreadSanitizer: TSan daemons driven by the normal build's suites, TSan sockfuzz and soak
# (scripts/tsan.sh; about 7 minutes on 2 cores). Needs the normal build.
if [ -x build-ci/tests/test_integration ]; then
  echo "=== gsched: ThreadSanitizer (scripts/tsan.sh) ==="
  OUT=build-ci-tsan.out bash scripts/tsan.sh build-ci || status=1
fi
if [ $status -eq 0 ]; then echo "gsched: all suites passed"; else echo "gsched: test failures"; fi
exit $status
