#!/usr/bin/env bash
# One gsched with many CPU workers on this machine: what the scheduler pays per worker.
# Usage: scripts/gs-many-workers-bench.sh BIN_DIR NWORKERS [TASKS]
# Starts gsched and NWORKERS gworkers (--nthreads 1, small memory limit), then prints one JSON
# line per measurement (gsched's CPU time from /proc/PID/stat, so the figures hold on a loaded
# machine too):
#   register  seconds until every worker registered; gsched CPU for the registrations (each
#             newcomer's PEERS goes to every worker: quadratic in NWORKERS)
#   idle      gsched CPU per second and per worker-heartbeat over 10 s with nothing to do
#   tasks     gs-bench tasks --tasks TASKS (default 100000) independent and tree: tasks/s and
#             gsched CPU per task, with the fan-out to NWORKERS workers
#   seed      gs-bench seed --n 8000 --chunk 250 (1024 leaves + the combine tree)
#   memory    gsched's resident memory with NWORKERS workers
#   removed   workers gsched removed during the run (heartbeat timeouts under load)
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BIN_DIR NWORKERS [TASKS]" >&2; exit 2; }
bin=$1
n=$2
tasks=${3:-100000}
[[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || { echo "$0: NWORKERS '$n' is not a positive number" >&2; exit 2; }
for b in gsched gworker gs-bench; do
  [ -x "$bin/$b" ] || { echo "$0: no $bin/$b (build with -DGS_BUILD_BENCH=ON)" >&2; exit 2; }
done
dir=$(mktemp -d /tmp/gs-many.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$dir/token")
GSCHED_TOKEN=$(<"$dir/token")
export GSCHED_TOKEN
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# Every worker comes from 127.0.0.1, and starting hundreds of them on a few cores starves their
# heartbeats: a long heartbeat timeout and no churn cap (which counts workers per address),
# so that start-up measures registration, not the load (docs/SCALING.md).
"$bin/gsched" --port 0 --log-level info --max-connections $((n + 64)) \
  --max-connections-per-address $((n + 64)) --heartbeat-timeout "${GS_BENCH_HB_TIMEOUT:-120s}" \
  --churn-max 0 >"$dir/gsched.log" 2>&1 &
gp=$!
pids+=("$gp")
for _ in $(seq 300); do grep -q "listening on" "$dir/gsched.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on tcp:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$dir/gsched.log")
[ -n "$port" ] || { echo "$0: gsched did not start: $(tail -n 2 "$dir/gsched.log")" >&2; exit 1; }
addr="tcp://127.0.0.1:$port"

t0=$SECONDS
c0=$(cpu_ticks "$gp")
for ((i = 0; i < n; i++)); do
  "$bin/gworker" "$addr" --name "w$i" --backend cpu --nthreads 1 --memory-limit 64MB \
    --connect-timeout 600000 --log-level warn >"$dir/w$i.log" 2>&1 &
  pids+=($!)
done
deadline=$((SECONDS + 600))
until [ "$(grep -c "registered from" "$dir/gsched.log")" -ge "$n" ]; do
  [ "$SECONDS" -lt "$deadline" ] || { echo "$0: only $(grep -c "registered from" "$dir/gsched.log") of $n workers registered in 600 s" >&2; exit 1; }
  sleep 0.2
done
c1=$(cpu_ticks "$gp")
echo "{\"bench\":\"many-workers\",\"what\":\"register\",\"workers\":$n,\"seconds\":$((SECONDS - t0)),\"gsched_cpu_s\":$(awk -v c=$((c1 - c0)) -v h="$hz" 'BEGIN { print c / h }')}"

# idle: heartbeats only (one per worker per second by default)
c0=$(cpu_ticks "$gp")
s0=$(date +%s.%N)
sleep 10
c1=$(cpu_ticks "$gp")
s1=$(date +%s.%N)
awk -v c=$((c1 - c0)) -v h="$hz" -v a="$s0" -v b="$s1" -v n="$n" 'BEGIN {
  t = b - a; cpu = c / h
  printf "{\"bench\":\"many-workers\",\"what\":\"idle\",\"workers\":%d,\"seconds\":%.1f,\"gsched_cpu_per_s\":%.4f,\"gsched_us_per_heartbeat\":%.1f}\n", n, t, cpu / t, cpu * 1e6 / (n * t) }'

run_bench() {  # WHAT ARGS...
  local what=$1 line c0 c1
  shift
  c0=$(cpu_ticks "$gp")
  line=$("$bin/gs-bench" "$@" --scheduler "$addr" --workers "$n" 2>"$dir/bench.log" | tail -n 1)
  c1=$(cpu_ticks "$gp")
  [ -n "$line" ] || { echo "$0: gs-bench $*: $(tail -n 3 "$dir/bench.log"); gsched: $(grep -v "registered from\|connected from" "$dir/gsched.log" | tail -n 5)" >&2; return 1; }
  echo "{\"bench\":\"many-workers\",\"what\":\"$what\",\"workers\":$n,\"gsched_cpu_s_all_runs\":$(awk -v c=$((c1 - c0)) -v h="$hz" 'BEGIN { print c / h }'),\"gs_bench\":$line}"
}
run_bench tasks-independent tasks --tasks "$tasks" --repeat 3 || exit 1
run_bench tasks-tree tasks --tasks "$tasks" --shape tree --repeat 3 || exit 1
run_bench seed seed --n 8000 --chunk 250 --repeat 3 --backend cpu || exit 1
echo "{\"bench\":\"many-workers\",\"what\":\"memory\",\"workers\":$n,\"gsched_rss_kb\":$(awk '/VmRSS/ { print $2 }' "/proc/$gp/status"),\"gworker_rss_kb\":$(awk '/VmRSS/ { print $2 }' "/proc/${pids[1]}/status")}"
echo "{\"bench\":\"many-workers\",\"what\":\"removed\",\"workers\":$n,\"removed\":$(grep -c "removed:" "$dir/gsched.log")}"
