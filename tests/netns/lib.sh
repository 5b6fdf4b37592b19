# shellcheck shell=bash
# Shared helpers of the network-namespace tests (sourced, not run).
#
# A "cluster of hosts" here is a set of network namespaces NS_PREFIX.h0 .. hN-1, each with one
# interface eth0 (10.77.0.(i+1)/24) whose veth peer sits in a switch namespace NS_PREFIX.sw,
# enslaved to a bridge. Everything lives in namespaces created for this run (names carry the
# shell's PID, so concurrent runs do not meet); nothing touches the root namespace's network.
# netns_cleanup (installed as the EXIT trap by netns_setup's caller) kills the processes
# started through netns_spawn and deletes the namespaces, whatever happened before.
#
# Functions return non-zero with a message on stderr; skip() exits with 77 (ctest's skip code).

NS_PREFIX="gs$$"
NS_SUBNET="10.77.0"
NS_PIDS=()
NS_CREATED=()

skip() {
  echo "SKIP: $*"
  exit 77
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Exit 77 with the reason when this machine cannot run the namespace tests.
netns_require() {
  local err
  [ "$(id -u)" -eq 0 ] || skip "network-namespace tests need root (ip netns, veth, tc); running as uid $(id -u)"
  command -v ip >/dev/null 2>&1 || skip "iproute2 (ip) is not installed"
  if ! err=$(ip netns add "${NS_PREFIX}probe" 2>&1); then
    skip "cannot create a network namespace: $err"
  fi
  if ! err=$(ip -n "${NS_PREFIX}probe" link add name probe0 type veth peer name probe1 2>&1); then
    ip netns del "${NS_PREFIX}probe" 2>/dev/null
    skip "cannot create a veth pair: $err"
  fi
  ip netns del "${NS_PREFIX}probe" 2>/dev/null
  return 0
}

ns_name() { echo "${NS_PREFIX}h$1"; }
ns_addr() { echo "${NS_SUBNET}.$(( $1 + 1 ))"; }

# netns_setup N: hosts h0..h(N-1) on one bridge. Returns non-zero on any failure.
netns_setup() {
  local n=$1 i sw="${NS_PREFIX}sw" h
  ip netns add "$sw" || return 1
  NS_CREATED+=("$sw")
  ip -n "$sw" link set lo up || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  for ((i = 0; i < n; i++)); do
    h=$(ns_name "$i")
    ip netns add "$h" || return 1
    NS_CREATED+=("$h")
    ip -n "$h" link set lo up || return 1
    ip link add name eth0 netns "$h" type veth peer name "p$i" netns "$sw" || return 1
    ip -n "$sw" link set "p$i" master br0 || return 1
    ip -n "$sw" link set "p$i" up || return 1
    ip -n "$h" addr add "$(ns_addr "$i")/24" dev eth0 || return 1
    ip -n "$h" link set eth0 up || return 1
  done
}

# netns_spawn HOST LOG CMD...: start CMD in host HOST's namespace, stdout+stderr to LOG;
# its PID goes to NS_PIDS (killed by netns_cleanup) and to $NS_LAST_PID.
netns_spawn() {
  local host=$1 log=$2
  shift 2
  ip netns exec "$(ns_name "$host")" "$@" >"$log" 2>&1 &
  NS_LAST_PID=$!
  NS_PIDS+=("$NS_LAST_PID")
}

# Link of host I: "down" cuts its cable (the switch-side port), "up" restores it.
netns_link() {
  ip -n "${NS_PREFIX}sw" link set "p$1" "$2"
}

netns_cleanup() {
  local p ns
  for p in "${NS_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${NS_PIDS[@]}"; do
    # a daemon that ignores SIGTERM for 10 s is killed
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  for ns in "${NS_CREATED[@]}"; do ip netns del "$ns" 2>/dev/null; done
  NS_PIDS=()
  NS_CREATED=()
}

# wait_log FILE PATTERN TIMEOUT_S [COUNT]: until FILE holds COUNT (default 1) lines matching
# the extended regex PATTERN; returns 1 at the deadline. Polls the file (10 per second): the
# deadline is a bound on a broken run, not a guess at how long things take.
wait_log() {
  local file=$1 pat=$2 deadline=$((SECONDS + $3)) count=${4:-1} got
  while :; do
    got=$(grep -E -c -- "$pat" "$file" 2>/dev/null)
    [ "${got:-0}" -ge "$count" ] && return 0
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.1
  done
}

# json_field JSON NAME: the value of a top-level number field of a one-line JSON object.
json_field() {
  sed -n "s/.*\"$2\":\\([-+0-9.eE]*\\).*/\\1/p" <<<"$1"
}

# show_logs DIR: the tail of every log in DIR and its subdirectories, for a failed run
show_logs() {
  local f
  for f in "$1"/*.log "$1"/*/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f (last 30 lines)"
    tail -n 30 "$f"
  done
}

# daemons_left HOST...: "hI:PID:NAME" for each gsched/gworker process in those hosts' namespaces
daemons_left() {
  local h p c
  for h in "$@"; do
    for p in $(ip netns pids "$(ns_name "$h")" 2>/dev/null); do
      c=$(cat "/proc/$p/comm" 2>/dev/null)
      case $c in gsched|gworker) echo "h$h:$p:$c" ;; esac
    done
  done
}

# wait_no_daemons TIMEOUT_S HOST...: until no gsched/gworker runs in those hosts; 1 at the deadline
wait_no_daemons() {
  local deadline=$((SECONDS + $1))
  shift
  while [ -n "$(daemons_left "$@")" ]; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.1
  done
}

# token_on_cmdline FILE: succeeds (and names the process files) when the token in FILE appears
# on any process's command line (read with -f, so that grep's own command line holds no token)
token_on_cmdline() {
  grep -l -a -F -f "$1" /proc/[0-9]*/cmdline 2>/dev/null | grep -v "/proc/self/"
}

# test_begin NAME: a fresh work directory in $dir and the traps that clean up whatever happens:
# the EXIT trap runs before_cleanup (when the test defines it), netns_cleanup, and removes $dir
# when the test set ok=1, else shows the logs and keeps it.
test_begin() {
  dir=$(mktemp -d "/tmp/gs-$1.XXXXXX") || fail "cannot create a work directory under /tmp"
  ok=0
  trap test_finish EXIT
  trap 'exit 1' INT TERM
}
test_finish() {
  if declare -F before_cleanup >/dev/null; then before_cleanup; fi
  netns_cleanup
  if [ "$ok" -eq 1 ]; then rm -rf "$dir"; else show_logs "$dir"; echo "logs kept in $dir"; fi
}
