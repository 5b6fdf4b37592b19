#!/usr/bin/env bash
# gs-ssh-cluster against real OpenSSH servers (Debian's sshd, a generated host key and user
# key), one per network-namespace host: h0 runs the launcher, gsched and the client; h1 and h2
# two CPU workers each; h3 has no sshd. Checks: the cluster comes up and computes the exact
# seed reduction; the generated token is on no command line; SIGINT stops every daemon on
# every host; a worker killed with SIGKILL makes the launcher report it and stop the rest; a
# host without sshd and a host without the binaries are reported by name and nothing is left.
# Usage: test_ssh_cluster.sh BIN_DIR JOB_BIN   (root; exits 77 with the reason otherwise)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/../netns/lib.sh
. "$here/../netns/lib.sh"

[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR JOB_BIN" >&2; exit 2; }
bin=$(cd "$1" && pwd)
job=$2
netns_require
sshd=$(command -v sshd || echo /usr/sbin/sshd)
[ -x "$sshd" ] || skip "no sshd (Debian package openssh-server)"
command -v ssh >/dev/null 2>&1 || skip "no ssh client (Debian package openssh-client)"
command -v ssh-keygen >/dev/null 2>&1 || skip "no ssh-keygen"
for b in "$bin/gsched" "$bin/gworker" "$bin/gs-ssh-cluster" "$job"; do
  [ -x "$b" ] || fail "$b is not an executable"
done

launcher_pid=
before_cleanup() {
  if [ -n "$launcher_pid" ]; then kill -KILL "$launcher_pid" 2>/dev/null; fi
}
test_begin sshc

netns_setup 4 || fail "cannot build the namespaces"
ssh-keygen -q -t ed25519 -N '' -C gs-test-host -f "$dir/hostkey" || fail "ssh-keygen failed"
ssh-keygen -q -t ed25519 -N '' -C gs-test-user -f "$dir/userkey" || fail "ssh-keygen failed"
cp "$dir/userkey.pub" "$dir/authorized_keys"
echo "$NS_SUBNET.* $(cut -d' ' -f1,2 "$dir/hostkey.pub")" >"$dir/known_hosts"
cat >"$dir/sshd_config" <<EOF
Port 22
HostKey $dir/hostkey
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
LogLevel VERBOSE
EOF
cat >"$dir/ssh_config" <<EOF
Host $NS_SUBNET.*
  User root
  IdentityFile $dir/userkey
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  ConnectTimeout 10
EOF
mkdir -p /run/sshd   # sshd's privilege-separation directory
"$sshd" -t -f "$dir/sshd_config" 2>"$dir/sshd-check.log" || fail "sshd rejects the generated config: $(cat "$dir/sshd-check.log")"
for i in 0 1 2; do
  netns_spawn "$i" "$dir/sshd-h$i.log" "$sshd" -D -e -f "$dir/sshd_config"
  wait_log "$dir/sshd-h$i.log" "Server listening on .* port 22" 30 || fail "sshd did not start on h$i"
done
H0=$(ns_addr 0) H1=$(ns_addr 1) H2=$(ns_addr 2) H3=$(ns_addr 3)

# wait_launcher RC WHAT: the launcher exits with status RC (WHAT says after what)
wait_launcher() {
  local rc
  wait "$launcher_pid"
  rc=$?
  launcher_pid=
  [ "$rc" -eq "$1" ] || fail "the launcher exited with $rc, not $1, $2"
}
# launch NAME ARGS...: the launcher in h0, stdout in $dir/NAME.out, stderr in $dir/NAME.log
launch() {
  local name=$1
  shift
  # job control on: a background job of a script otherwise starts with SIGINT ignored
  set -m
  ip netns exec "$(ns_name 0)" "$bin/gs-ssh-cluster" --ssh-config "$dir/ssh_config" \
    --scheduler-host "$H0" --remote-bin-dir "$bin" --ready-timeout 120 --nthreads 1 \
    --memory-limit 1GB "$@" >"$dir/$name.out" 2>"$dir/$name.log" &
  launcher_pid=$!
  set +m
}

# 1. two hosts of two CPU workers: ready, exact value, token on no command line
launch up --hosts "$H1,$H2" --workers-per-host 2 --log-dir "$dir/cluster" \
  --scheduler-option=--heartbeat-timeout=5s
wait_log "$dir/up.out" "^gs-ssh-cluster ready tcp://$H0:8786$" 180 || fail "the cluster did not come up"
for w in "$H1-0" "$H1-1" "$H2-0" "$H2-1"; do
  grep -q "^gs-ssh-cluster worker $w on " "$dir/up.out" || fail "worker $w was not reported"
done
sed -n 's/^gs-ssh-cluster token //p' "$dir/up.out" >"$dir/token"
[ "$(wc -c <"$dir/token")" -eq 65 ] || fail "the launcher printed no generated token"
if token_on_cmdline "$dir/token"; then
  fail "the token is on a command line"
fi
ip netns exec "$(ns_name 0)" "$job" --scheduler "tcp://$H0:8786" --token-file "$dir/token" \
  --workers 4 --n 4000 --chunk 500 --reference >"$dir/job.out" 2>"$dir/job.log" ||
  fail "the job on the ssh cluster failed"
res=$(grep '^{' "$dir/job.out")
v=$(json_field "$res" value)
r=$(json_field "$res" ref)
awk -v v="$v" -v r="$r" 'BEGIN { d = v - r; if (d < 0) d = -d; exit !(d <= 1e-12 * r) }' ||
  fail "the ssh cluster computed $v, not the exact $r"
echo "{\"test\":\"ssh-cluster\",\"workers\":4,\"value\":$v,\"ref\":$r,\"seconds\":$(json_field "$res" seconds)}"

# 2. SIGINT stops every daemon on every host
kill -INT "$launcher_pid"
wait_launcher 0 "after SIGINT"
wait_no_daemons 60 0 1 2 || fail "daemons left after SIGINT: $(daemons_left 0 1 2)"
grep -q "received SIGINT, stopping the cluster" "$dir/up.log" || fail "no stop message after SIGINT"

# 3. a worker killed with SIGKILL: reported by name, the rest stopped, status 1
launch crash --hosts "$H1,$H2" --workers-per-host 1
wait_log "$dir/crash.out" "^gs-ssh-cluster ready" 180 || fail "the second cluster did not come up"
victim=$(daemons_left 2 | grep gworker | head -n 1 | cut -d: -f2)
[ -n "$victim" ] || fail "no worker process found on h2"
kill -KILL "$victim"
wait_launcher 1 "after a worker died"
grep -q "worker $H2-0 on $H2 stopped" "$dir/crash.log" || fail "the dead worker was not named"
wait_no_daemons 60 0 1 2 || fail "daemons left after a worker died: $(daemons_left 0 1 2)"

# 4. a host without sshd: named, nothing left behind
launch nossh --hosts "$H1,$H3" --workers-per-host 1
wait_launcher 1 "for a host without sshd"
grep -q "host $H3 failed to start: ssh failed" "$dir/nossh.log" || fail "the host without sshd was not named"
wait_no_daemons 60 0 1 2 || fail "daemons left after a failed start: $(daemons_left 0 1 2)"

# 5. a host without the binaries: named
ip netns exec "$(ns_name 0)" "$bin/gs-ssh-cluster" --ssh-config "$dir/ssh_config" \
  --hosts "$H1" --remote-bin-dir /nonexistent --workers-per-host 1 >"$dir/nobin.out" 2>"$dir/nobin.log"
rc=$?
[ "$rc" -eq 1 ] || fail "the launcher exited with $rc, not 1, for missing binaries"
grep -q "host $H1 failed to start: no executable /nonexistent/gworker" "$dir/nobin.log" ||
  fail "the missing binaries were not named"

ok=1
echo "ssh cluster: all checks passed"
