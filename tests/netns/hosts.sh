#!/usr/bin/env bash
# Several hosts for real, made of network namespaces (run as root; ctest skips it otherwise):
# h0 runs gsched and the client, h1..h3 one CPU gworker each, over TCP (control) and UCX TCP
# (chunks) through a bridge. Measures, one JSON line each:
#   base     the seed reduction, checked against its exact value from the random definition;
#   cut      the same job with h2's link cut (ip link set down) once 10% of its tasks are done:
#            same value bit for bit, h2 removed after the heartbeat timeout, extra seconds;
#   rejoin   h2's link restored: h2 registers again as a new incarnation (new id) and the job
#            gives the same value (the old incarnation's chunks are gone with it);
#   netem    5 ms added to every host's egress (tc netem): the job's time, same value.
# Usage: hosts.sh BIN_DIR JOB_BIN   (BIN_DIR holds gsched and gworker; JOB_BIN is gs-netns-job)
# Environment: GS_NETNS_N (array side, default 24000), GS_NETNS_CHUNK (default 500),
#              GS_NETNS_HB_TIMEOUT_MS (gsched --heartbeat-timeout, default 2000).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$here/lib.sh"

[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR JOB_BIN" >&2; exit 2; }
bin=$1
job=$2
n=${GS_NETNS_N:-24000}
chunk=${GS_NETNS_CHUNK:-500}
hb_ms=${GS_NETNS_HB_TIMEOUT_MS:-2000}
nworkers=3
port=8786

netns_require
command -v tc >/dev/null 2>&1 || skip "tc (iproute2) is not installed"
for b in "$bin/gsched" "$bin/gworker" "$job"; do
  [ -x "$b" ] || fail "$b is not an executable"
done

test_begin netns

netns_setup $((nworkers + 1)) || fail "cannot build the namespaces"
sched_addr=$(ns_addr 0)
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token"
chmod 600 "$dir/token"

netns_spawn 0 "$dir/gsched.log" "$bin/gsched" --host "$sched_addr" --port "$port" \
  --token-file "$dir/token" --heartbeat-interval 250ms --heartbeat-timeout "${hb_ms}ms" \
  --log-level info
wait_log "$dir/gsched.log" "listening on" 30 || fail "gsched did not start"
for ((i = 1; i <= nworkers; i++)); do
  netns_spawn "$i" "$dir/h$i.log" "$bin/gworker" "tcp://$sched_addr:$port" --name "h$i" \
    --token-file "$dir/token" --backend cpu --nthreads 1 --memory-limit 1GB \
    --connect-timeout 60000 --fetch-timeout 10000 --log-level info
done
wait_log "$dir/gsched.log" "registered from" 60 "$nworkers" || fail "the workers did not register"

# run_job NAME ARGS...: the job in h0, its output in $dir/NAME.out; the JSON line in $job_json
run_job() {  # NAME [ARGS...] [/dev/stdout]: output to $dir/NAME.out unless the last is /dev/stdout
  local name=$1 out
  shift
  out="$dir/$name.out"
  if [ "${*: -1}" = /dev/stdout ]; then out=/dev/stdout; set -- "${@:1:$#-1}"; fi
  ip netns exec "$(ns_name 0)" "$job" --scheduler "tcp://$sched_addr:$port" \
    --token-file "$dir/token" --workers "$nworkers" --n "$n" --chunk "$chunk" --timeout 400 "$@" \
    >"$out" 2>"$dir/$name.log"
}
job_result() {
  grep '^{' "$dir/$1.out" | tail -n 1
}
report() {  # what json extra-fields
  local v s
  v=$(json_field "$2" value)
  s=$(json_field "$2" seconds)
  echo "{\"bench\":\"netns-hosts\",\"what\":\"$1\",\"hosts\":$((nworkers + 1)),\"workers\":$nworkers,\"n\":$n,\"chunk\":$chunk,\"value\":$v,\"seconds\":$s${3:+,$3}}"
}

# 1. base: exact value
run_job base --reference || fail "the base job failed"
base=$(job_result base)
value=$(json_field "$base" value)
ref=$(json_field "$base" ref)
awk -v v="$value" -v r="$ref" 'BEGIN { d = v - r; if (d < 0) d = -d; exit !(d <= 1e-12 * (r < 0 ? -r : r)) }' ||
  fail "base value $value differs from the exact $ref by more than 1e-12 relative"
for ((i = 1; i <= nworkers; i++)); do
  grep -q "\"name\":\"h$i\"" <<<"$base" || fail "worker h$i is not registered after the base job"
done
base_s=$(json_field "$base" seconds)
report base "$base" "\"ref\":$ref"

# 1b. each worker's UCX data port listens on its host's own address only (gworker limits UCX's
# tcp transport to the interface that reaches gsched), never on every interface
for ((i = 1; i <= nworkers; i++)); do
  listen=$(ip netns exec "$(ns_name "$i")" ss -ltnpH 2>/dev/null | awk '/"gworker"/ { print $4 }')
  [ -n "$listen" ] || fail "h$i: gworker listens on no TCP port (ss -ltnp)"
  while read -r a; do
    [ "${a%:*}" = "$(ns_addr "$i")" ] ||
      fail "h$i: gworker listens on $a, not only on its address $(ns_addr "$i")"
  done <<<"$listen"
done
echo "{\"bench\":\"netns-hosts\",\"what\":\"ucx-listen\",\"workers\":$nworkers,\"only_own_address\":true}"

# 2. cut h2's link once 10% of the tasks are done (gsched reports progress every 100 ms: the
# first report that reaches 10% comes while most of h2's share is still to run)
old_id=$(sed -n 's/.*"name":"h2","id":\([0-9]*\).*/\1/p' <<<"$base")
# the job's stdout comes through a pipe: the link goes down as soon as "progress" arrives
# (a fifo; its exit status comes last, as "exit N")
mkfifo "$dir/cut.fifo" || fail "cannot make a fifo in $dir"
{ run_job cut --notify-at 0.1 /dev/stdout; echo "exit $?"; } >"$dir/cut.fifo" &
cutpid=$!
exec {cutfd}<"$dir/cut.fifo"
t_cut=
cut_rc=
while IFS= read -r line <&"$cutfd"; do
  echo "$line" >>"$dir/cut.out"
  case $line in
    progress*) if [ -z "$t_cut" ]; then netns_link 2 down || fail "cannot cut h2's link"; t_cut=$SECONDS; fi ;;
    exit*) cut_rc=${line#exit } ;;
  esac
done
exec {cutfd}<&-
wait "$cutpid"
[ "$cut_rc" = 0 ] || fail "the job with h2's link cut failed (status ${cut_rc:-unknown})"
[ -n "$t_cut" ] || fail "the cut job reported no progress"
cut=$(job_result cut)
[ "$(json_field "$cut" value)" = "$value" ] ||
  fail "the value with h2's link cut, $(json_field "$cut" value), is not the base value $value"
grep -q "worker h2 (id $old_id) removed" "$dir/gsched.log" ||
  fail "gsched did not remove h2 (id $old_id) while its link was down"
grep -q "\"name\":\"h2\"" <<<"$cut" && fail "h2 is still registered with its link down"
cut_s=$(json_field "$cut" seconds)
# the job waited for the loss: the cut came while it ran, not after it
awk -v c="$cut_s" -v hb="$hb_ms" 'BEGIN { exit !(c >= hb / 1000) }' ||
  fail "the job with h2's link cut took $cut_s s, less than the heartbeat timeout: the cut came too late"
extra=$(awk -v a="$cut_s" -v b="$base_s" 'BEGIN { printf "%.3f", a - b }')
# the loss costs the heartbeat timeout and the recomputation of h2's chunks: bounded by the
# timeout plus the whole base job plus 20 s of slack for a loaded machine
awk -v e="$extra" -v hb="$hb_ms" -v b="$base_s" 'BEGIN { exit !(e <= hb / 1000 + b + 20) }' ||
  fail "the cut cost $extra s more than the base job: more than the heartbeat timeout allows"
report cut "$cut" "\"extra_seconds\":$extra,\"heartbeat_timeout_s\":$(awk -v h="$hb_ms" 'BEGIN{print h/1000}')"

# 3. restore the link: h2 notices gsched dropped it and rejoins as a new incarnation
netns_link 2 up || fail "cannot restore h2's link"
wait_log "$dir/h2.log" "rejoining as a new incarnation" 120 ||
  fail "h2 did not notice it had been removed after its link came back"
wait_log "$dir/gsched.log" "worker h2 \(id [0-9]+.*registered from" 120 2 || fail "h2 did not register again"
rejoin_s=$((SECONDS - t_cut))
run_job rejoin || fail "the job after h2 rejoined failed"
rj=$(job_result rejoin)
new_id=$(sed -n 's/.*"name":"h2","id":\([0-9]*\).*/\1/p' <<<"$rj")
[ -n "$new_id" ] || fail "h2 is not registered after it rejoined"
[ "$new_id" != "$old_id" ] || fail "h2 came back with its old id $old_id, not as a new incarnation"
[ "$(json_field "$rj" value)" = "$value" ] ||
  fail "the value after h2 rejoined, $(json_field "$rj" value), is not the base value $value"
awk '/rejoining as a new incarnation/ { after = 1 } after && / (error|fatal) / { bad = 1; print }
     END { exit bad }' "$dir/h2.log" || fail "h2 logged an error after it rejoined"
report rejoin "$rj" "\"old_id\":$old_id,\"new_id\":$new_id,\"link_down_to_rejoined_s\":$rejoin_s"

# 4. 5 ms of latency on every host's egress (needs the kernel's netem qdisc)
if ! err=$(ip netns exec "$(ns_name 0)" tc qdisc add dev eth0 root netem delay 5ms 2>&1); then
  echo "{\"bench\":\"netns-hosts\",\"what\":\"netem\",\"skipped\":\"tc netem: $err\"}"
  echo "SKIP: the 5 ms latency run: this kernel has no netem qdisc (tc said: $err)"
else
  for ((i = 1; i <= nworkers; i++)); do
    ip netns exec "$(ns_name "$i")" tc qdisc add dev eth0 root netem delay 5ms ||
      fail "tc netem failed on h$i after it worked on h0"
  done
  run_job netem || fail "the job with 5 ms latency failed"
  ne=$(job_result netem)
  [ "$(json_field "$ne" value)" = "$value" ] ||
    fail "the value with 5 ms latency, $(json_field "$ne" value), is not the base value $value"
  report netem "$ne" "\"netem_delay_ms\":5,\"base_seconds\":$base_s"
fi

ok=1
echo "netns hosts: all checks passed"
