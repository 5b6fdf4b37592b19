#!/usr/bin/env bash
# Fault benchmark (issue 7): SIGKILL one of N workers in the middle of a seed reduction and
# report the value and the time against an undisturbed run on the same cluster.
#   bash bench/gs-bench/kill-worker.sh [--n 500000] [--chunk 10000] [--backend cuda|cpu]
#                                      [--workers N] [--runs R]
# Starts gsched and N gworkers by hand (gs-local-cluster stops everything when a worker dies),
# runs gs-bench seed once undisturbed (value V0, seconds S0, process wall W0), then R times:
# start gs-bench, SIGKILL worker 1 at (W0 - S0) + S0/2 after the start (half-way through the
# computation), wait, and print one JSON line with the value, its difference to V0, the
# seconds and the extra seconds against S0; then restart the killed worker under its name.
# Binaries from $GS_BIN_DIR (default build-gpu/bin). Logs in $OUT (default ./gpu-out).
set -uo pipefail
n=500000 chunk=10000 backend=cuda workers=4 runs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --chunk) chunk=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    *) echo "kill-worker.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
bin=${GS_BIN_DIR:-build-gpu/bin}
out=${OUT:-gpu-out}
mkdir -p "$out"
port=$((20000 + RANDOM % 20000))
addr=tcp://127.0.0.1:$port
ngpu=0
[ "$backend" = cuda ] && ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

"$bin/gsched" --port "$port" --heartbeat-timeout 2s >"$out/kill-gsched.log" 2>&1 &
spid=$!
declare -a wpid
start_worker() {
  local i=$1 env=()
  if [ "$backend" = cuda ] && [ "$ngpu" -gt 0 ]; then
    local vis="" k
    for ((k = 0; k < ngpu; k++)); do vis+="$(( (i + k) % ngpu )),"; done
    env=(CUDA_VISIBLE_DEVICES="${vis%,}")
  fi
  env "${env[@]}" "$bin/gworker" "$addr" --backend "$backend" --name "w$i" \
    >>"$out/kill-worker$i.log" 2>&1 &
  wpid[$i]=$!
}
for ((i = 0; i < workers; i++)); do start_worker "$i"; done
cleanup() {
  for p in "${wpid[@]}"; do kill -TERM "$p" 2>/dev/null; done
  kill -TERM "$spid" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT

run_bench() {
  timeout 120 "$bin/gs-bench" seed --scheduler "$addr" --workers "$1" --n "$n" --chunk "$chunk" \
    --repeat 1 2>>"$out/kill-bench.err"
}
now() { date +%s.%N; }
# warm-up (CUDA contexts, UCX endpoints) and the undisturbed reference
run_bench "$workers" >/dev/null
t0=$(now)
ref=$(run_bench "$workers")
t1=$(now)
v0=$(grep -o '"value":[^,]*' <<<"$ref" | cut -d: -f2)
s0=$(grep -o '"seconds":[^,]*' <<<"$ref" | cut -d: -f2)
w0=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
delay=$(awk -v w="$w0" -v s="$s0" 'BEGIN { d = (w - s) + s / 2; if (d < 0) d = 0; print d }')
echo "{\"bench\":\"kill-worker\",\"phase\":\"reference\",\"n\":$n,\"chunk\":$chunk,\"backend\":\"$backend\",\"workers\":$workers,\"value\":$v0,\"seconds\":$s0,\"process_wall_s\":$w0,\"kill_delay_s\":$delay}"
for ((r = 0; r < runs; r++)); do
  tmp="$out/kill-run$r.json"
  run_bench "$workers" >"$tmp" &
  bpid=$!
  sleep "$delay"
  kill -KILL "${wpid[1]}" 2>/dev/null
  killed_at=$(now)
  wait "$bpid"
  rc=$?
  res=$(cat "$tmp")
  v=$(grep -o '"value":[^,]*' <<<"$res" | cut -d: -f2)
  s=$(grep -o '"seconds":[^,]*' <<<"$res" | cut -d: -f2)
  if [ $rc -ne 0 ] || [ -z "$v" ]; then
    echo "{\"bench\":\"kill-worker\",\"run\":$r,\"rc\":$rc,\"error\":\"gs-bench failed (see kill-bench.err)\"}"
  else
    awk -v r="$r" -v v="$v" -v v0="$v0" -v s="$s" -v s0="$s0" 'BEGIN {
      d = v - v0; rel = (v0 != 0) ? d / v0 : d; if (rel < 0) rel = -rel;
      printf "{\"bench\":\"kill-worker\",\"run\":%d,\"value\":%.17g,\"rel_diff\":%.3g,\"seconds\":%.6f,\"extra_s\":%.6f}\n", r, v, rel, s, s - s0 }'
  fi
  # the killed worker comes back under its name; wait until it has registered again
  start_worker 1
  sleep 1
  run_bench "$workers" >/dev/null || true
done
