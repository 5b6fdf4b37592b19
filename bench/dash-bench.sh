#!/usr/bin/env bash
# Dashboard benchmarks (docs/PERFORMANCE.md), bash + curl only:
#   overhead  N tiny tasks (gs-bench tasks, its own local cluster each time) in ROUNDS pairs
#             (at least 5) of back-to-back runs: gsched with --dashboard-address none, and gsched
#             whose dashboard is polled like an open page (every endpoint every 0.5 s,
#             /api/tasks incrementally); the order within a pair alternates (off-on, on-off, ...)
#             so that drift of the machine's load cancels. The slowdown of each pair is
#             100 * (on - off) / off: the median of the pairs is the result, their min, max and
#             quartiles its spread; also the median seconds and gsched CPU us/task of each arm
#   load      a job's time on one cluster without, then with hostile HTTP load on its dashboard:
#             1,000 connections each holding half a request line, plus a loop of malformed
#             requests, huge headers and unknown paths
# Usage: bench/dash-bench.sh BUILD_DIR [overhead|load|all] [TASKS] [ROUNDS] [BACKEND]
# Prints one JSON line per measurement.
set -uo pipefail
build=${1:?usage: dash-bench.sh BUILD_DIR [overhead|load|all] [TASKS] [ROUNDS] [BACKEND]}
what=${2:-all}
ntasks=${3:-1000000}
rounds=${4:-5}
backend=${5:-cpu}
bin=$build/bin
command -v curl >/dev/null || { echo "dash-bench: needs curl (apt-get install curl)" >&2; exit 2; }
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
export GSCHED_TOKEN=dash-bench-$$

start_cluster() {  # name dashboard-address -> sets SCHED_<name>, DASH_<name>
  local name=$1 addr=$2
  "$bin/gs-local-cluster" --port 0 --nworkers 2 --backend "$backend" --dashboard-address "$addr" \
    --bin-dir "$bin" >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  for _ in $(seq 600); do grep -q "ready tcp://" "$work/$name.out" 2>/dev/null && break; sleep 0.1; done
  printf -v "SCHED_$name" '%s' "$(sed -n 's/^gs-local-cluster ready //p' "$work/$name.out")"
  printf -v "DASH_$name" '%s' "$(sed -n 's/^gsched dashboard at http:\/\///p' "$work/$name.err" | tr -d /)"
}

job_seconds() {  # scheduler -> median seconds of the timed runs
  "$bin/gs-bench" tasks --tasks "$ntasks" --scheduler "$1" --workers 2 --repeat 3 --no-check |
    sed -n 's/.*"seconds":\([0-9.e+-]*\).*/\1/p'
}

poll_page() {  # host:port; polls like an open page until killed
  local since=0 body
  while :; do
    curl -s "http://$1/api/workers" >/dev/null
    curl -s "http://$1/api/graphs" >/dev/null
    body=$(curl -s "http://$1/api/tasks?since=$since")
    since=$(printf '%s' "$body" | sed -n 's/.*"next":\([0-9]*\).*/\1/p')
    since=${since:-0}
    curl -s "http://$1/api/transfers" >/dev/null
    curl -s "http://$1/metrics" >/dev/null
    sleep 0.5
  done
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# quantile Q (0..1) of numbers on stdin, linear between order statistics
quantile() { sort -g | awk -v q="$1" '{a[NR]=$1} END {if (NR == 0) {print "null"; exit} p = 1 + q * (NR - 1); i = int(p); f = p - i; print (i < NR) ? a[i] + f * (a[i+1] - a[i]) : a[NR]}'; }

if [ "$what" = overhead ] || [ "$what" = all ]; then
  if [ "$rounds" -lt 5 ]; then
    echo "dash-bench: overhead needs at least 5 pairs (ROUNDS $rounds): fewer say nothing against the noise" >&2
    exit 2
  fi
  # local clusters started by gs-bench itself (so that it measures gsched's CPU time too),
  # alternately without a dashboard and with one on a fixed port that a poller keeps reading
  dport=$(( 20000 + $$ % 20000 ))
  poll_page "127.0.0.1:$dport" & poller=$!
  pids+=($poller)
  : >"$work/off.s"; : >"$work/on.s"; : >"$work/pair.pct"
  for r in $(seq "$rounds"); do
    order="off on"
    [ $((r % 2)) -eq 0 ] && order="on off"
    for arm in $order; do
      addr=none
      [ $arm = on ] && addr=127.0.0.1:$dport
      line=$("$bin/gs-bench" tasks --tasks "$ntasks" --workers 2 --backend "$backend" --repeat 3 --no-check \
        --dashboard-address "$addr" 2>/dev/null |
        sed -n 's/.*"seconds":\([0-9.e+-]*\).*"sched_cpu_us_per_task":\([0-9.e+-]*\).*/\1 \2/p')
      if [ -z "$line" ]; then
        echo "dash-bench: gs-bench tasks failed (pair $r, dashboard $arm)" >&2
        exit 1
      fi
      echo "$line" >>"$work/$arm.s"
    done
    poff=$(tail -n1 "$work/off.s" | cut -d' ' -f1); pon=$(tail -n1 "$work/on.s" | cut -d' ' -f1)
    awk -v a="$poff" -v b="$pon" 'BEGIN{printf "%.3f\n", 100*(b-a)/a}' >>"$work/pair.pct"
  done
  kill "$poller" 2>/dev/null
  off=$(cut -d' ' -f1 "$work/off.s" | median); on=$(cut -d' ' -f1 "$work/on.s" | median)
  coff=$(cut -d' ' -f2 "$work/off.s" | median); con=$(cut -d' ' -f2 "$work/on.s" | median)
  printf '{"bench":"dash-overhead","tasks":%s,"pairs":%s,"backend":"%s","slowdown_pct_median":%s,"slowdown_pct_min":%s,"slowdown_pct_q1":%s,"slowdown_pct_q3":%s,"slowdown_pct_max":%s,"pair_slowdowns_pct":[%s],"seconds_disabled":%s,"seconds_polled":%s,"sched_cpu_us_per_task_disabled":%s,"sched_cpu_us_per_task_polled":%s,"disabled_runs":[%s],"polled_runs":[%s]}\n' \
    "$ntasks" "$rounds" "$backend" "$(quantile 0.5 <"$work/pair.pct")" "$(quantile 0 <"$work/pair.pct")" \
    "$(quantile 0.25 <"$work/pair.pct")" "$(quantile 0.75 <"$work/pair.pct")" "$(quantile 1 <"$work/pair.pct")" \
    "$(paste -sd, "$work/pair.pct")" "$off" "$on" "$coff" "$con" \
    "$(cut -d' ' -f1 "$work/off.s" | paste -sd,)" "$(cut -d' ' -f1 "$work/on.s" | paste -sd,)"
fi

if [ "$what" = load ] || [ "$what" = all ]; then
  start_cluster load 127.0.0.1:0
  port=${DASH_load##*:}
  : >"$work/quiet.s"; : >"$work/loaded.s"
  for r in $(seq "$rounds"); do job_seconds "$SCHED_load" >>"$work/quiet.s"; done
  # 1,000 slow clients: half a request line each, held open
  ulimit -n 4096 2>/dev/null
  slow=0
  for i in $(seq 1000); do
    if exec {fd}<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
      printf 'GET /api/wor' >&"$fd" 2>/dev/null
      slow=$((slow + 1))
    fi
  done
  # and a stream of bad requests
  big=$(head -c 200000 /dev/zero | tr '\0' a)
  ( while :; do
      curl -s -o /dev/null "http://$DASH_load/no/such/path"
      curl -s -o /dev/null -H "X-Big: $big" "http://$DASH_load/metrics"
      exec {b}<>"/dev/tcp/127.0.0.1/$port" && { printf 'GARBAGE\r\n\r\n' >&"$b"; exec {b}>&-; }
      curl -s -o /dev/null -X POST --data abc "http://$DASH_load/metrics"
    done ) 2>/dev/null & bad=$!
  pids+=($bad)
  for r in $(seq "$rounds"); do job_seconds "$SCHED_load" >>"$work/loaded.s"; done
  kill "$bad" 2>/dev/null
  ok=$(curl -s -o /dev/null -w '%{http_code}' "http://$DASH_load/health")
  quiet=$(median <"$work/quiet.s"); loaded=$(median <"$work/loaded.s")
  printf '{"bench":"dash-load","tasks":%s,"rounds":%s,"backend":"%s","slow_clients":%s,"seconds_quiet":%s,"seconds_loaded":%s,"slowdown_pct":%s,"health_after":%s}\n' \
    "$ntasks" "$rounds" "$backend" "$slow" "$quiet" "$loaded" \
    "$(awk -v a="$quiet" -v b="$loaded" 'BEGIN{printf "%.2f", 100*(b-a)/a}')" "$ok"
fi
