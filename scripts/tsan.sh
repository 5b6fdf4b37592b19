#!/usr/bin/env bash
# ThreadSanitizer run of gsched's daemons and multi-threaded programs.
#
# Builds gsched, gworker, gs-local-cluster, gs-bench and the socket fuzz harness with
# -DGS_TSAN=ON (build-tsan), then drives them:
#   - the normal build's integration, deploy, scheduler-daemon and worker-daemon suites with
#     GS_BIN_DIR pointing at the TSan binaries: every gsched / gworker / gs-local-cluster those
#     tests start (faults, kills, pauses, rejoins, replication, linear algebra, gathers) is
#     instrumented;
#   - the TSan sockfuzz (instrumented client library too) for $GS_TSAN_FUZZ_SECONDS (default 60),
#     in a network namespace of its own (scripts/own-netns.sh);
#   - the TSan gs-bench soak (instrumented client library, 300 mixed jobs) and seed / tasks runs.
# Criterion's test programs themselves cannot run under TSan: its sandbox (BoxFort) maps its
# arena at random addresses in 0x2000_0000_0000-0x7f00_0000_0000, all of which TSan reserves
# (criterion: "Could not initialize inheritable arena", Snaipe/Criterion#274); the in-process
# tests are single-threaded on the scheduler side and covered by ASan. Reports of every process
# go to $OUT/tsan.<pid>; scripts/tsan.supp holds the suppressions (third-party only, each
# explained). Exits 1 when any report was written or a suite failed.
#
# Usage: bash scripts/tsan.sh [normal-build-dir (default build)]
#   OUT                    where reports and logs go (default build-tsan/tsan-out)
#   GS_TSAN_FUZZ_SECONDS   sockfuzz duration (default 60)
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/own-netns.sh
normal=${1:-build}
tsan=build-tsan
out=${OUT:-$tsan/tsan-out}
jobs=$(nproc 2>/dev/null || echo 2)
secs=${GS_TSAN_FUZZ_SECONDS:-60}
status=0

echo "=== gsched: TSan build ($tsan) ==="
cmake -S . -B "$tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGS_TSAN=ON -DGS_WITH_CUDA=OFF \
  -DGS_BUILD_BENCH=ON >"$tsan.configure.log" 2>&1 || { cat "$tsan.configure.log"; exit 1; }
cmake --build "$tsan" -j"$jobs" --target gsched_daemon gworker gs-local-cluster gs-bench gsched-example sockfuzz \
  >"$tsan.build.log" 2>&1 || { tail -n 60 "$tsan.build.log"; exit 1; }
if [ ! -x "$normal/tests/test_integration" ]; then
  echo "=== gsched: normal build ($normal) for the test drivers ==="
  cmake -S . -B "$normal" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$normal.configure.log" 2>&1 &&
    cmake --build "$normal" -j"$jobs" >"$normal.build.log" 2>&1 || { tail -n 60 "$normal.build.log"; exit 1; }
fi

rm -rf "$out"
mkdir -p "$out"
export TSAN_OPTIONS="log_path=$PWD/$out/tsan second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp ${TSAN_OPTIONS:-}"
export GS_BIN_DIR=$PWD/$tsan/bin
# UCX's memory hooks (UCM) patch mmap/munmap/brk in the loaded objects; with TSan's interceptors
# in place a worker crashes in its teardown (seen when a paused worker rejoins: SIGSEGV, no
# report). The TCP / shared-memory transports of these CPU runs do not need them.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no

run() {  # name command...
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc, $(( $(date +%s) - t0 )) s"
  if [ $rc -ne 0 ]; then
    status=1
    # the failed tests with their assertion messages (Criterion prints them on [----] lines)
    grep -E "\[FAIL\]|\[----\] .*(Assert|:[0-9]+:)|\[----\]   [^ ]|Synthesis|\"verdict\"|sockfuzz\": *\"fail" \
      "$out/$name.log" | tail -n 40
  fi
}

echo "=== gsched: suites with TSan daemons ==="
run integration "$normal/tests/test_integration" --verbose=0 -j"$jobs"
run deploy "$normal/tests/test_deploy" --verbose=0 -j"$jobs" --filter 'deploy_local_cluster/*'
run scheduler_daemon "$normal/tests/test_scheduler" --verbose=0 -j"$jobs" --filter 'scheduler_daemon/*'
run worker_daemon "$normal/tests/test_worker" --verbose=0 -j"$jobs" --filter 'worker_daemon/*'
echo "=== gsched: TSan programs ==="
# The full mix (4 attackers, 2,000 idle and 200 slow connections), as the normal build runs it.
# It used to be reduced here: gsched's RSS grew to 1-2.6 GB under it, which exhausted TSan's
# allocator, and the TSan-slowed gsched then lost the real client's handshakes. With one read
# buffer per thread and drained buffers released (issue 12) a 60 s TSan run peaks at ~80 MB
# with no lock-out (slowest fresh client connection 1.1 s) and no report.
# A real client locked out during the storm is reported, not fatal, here (--lockout warn): CI
# saw "no answer within 20 s" from the TSan gsched in 2 of 4 runs (host namespace and its own)
# and once from the normal build's gsched (1 of 5), so the cause is likely gsched's own, not
# only TSan's slowdown; the normal build's sockfuzz keeps the lock-out fatal, this run is for
# data races, crashes and inexact results.
run sockfuzz gs_in_own_netns "$tsan/tests/sockfuzz" --seconds "$secs" --lockout warn \
  --daemon-log "$out/sockfuzz.daemons.log"
run soak "$tsan/bin/gs-bench" soak --jobs 300 --n 256 --backend cpu
run seed "$tsan/bin/gs-bench" seed --n 2000 --chunk 250 --workers 3 --backend cpu --repeat 3
run tasks "$tsan/bin/gs-bench" tasks --tasks 20000 --workers 2 --backend cpu --shape tree

reports=$(ls "$out"/tsan.* 2>/dev/null | wc -l)
if [ "$reports" -gt 0 ]; then
  status=1
  echo "=== gsched: $reports process(es) wrote ThreadSanitizer reports ==="
  grep -h "^SUMMARY: ThreadSanitizer" "$out"/tsan.* | sort | uniq -c | sort -rn | head -n 40
  echo "(full reports in $out/tsan.<pid>)"
else
  echo "gsched: no ThreadSanitizer report"
fi
[ $status -eq 0 ] && echo "gsched: TSan run passed" || echo "gsched: TSan run FAILED"
exit $status
