#!/usr/bin/env bash
# gs-slurm-cluster and deploy/slurm/gsched.sbatch on a real single-node Slurm (Debian's
# slurmctld + slurmd + munged, generated config, all under a temporary directory). The node
# lives in a network namespace (h0 of tests/netns/lib.sh, so that it has a non-loopback address)
# and slurmd in a private mount namespace with the cgroup file systems it needs mounted there.
# Checks: `sbatch --wait gsched.sbatch PROGRAM` starts gsched and 2 CPU workers through srun,
# PROGRAM reads the address file and computes the exact seed reduction, the job ends with
# PROGRAM's status, the token is on no command line, and no daemon outlives the job.
# Where Slurm cannot run here, the test says exactly why and exits 77 (skipped).
# Usage: test_slurm_cluster.sh BIN_DIR JOB_BIN
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/../netns/lib.sh
. "$here/../netns/lib.sh"

[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR JOB_BIN" >&2; exit 2; }
bin=$(cd "$1" && pwd)
job=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
netns_require
for t in slurmctld slurmd munged srun sbatch scontrol sinfo unshare mount; do
  p=$(command -v "$t" || ls "/usr/sbin/$t" 2>/dev/null)
  [ -n "$p" ] || skip "no $t (Debian packages slurmctld, slurmd, slurm-client, munge)"
done
for b in "$bin/gsched" "$bin/gworker" "$bin/gs-slurm-cluster" "$job"; do
  [ -x "$b" ] || fail "$b is not an executable"
done

test_begin slurm
chmod 755 "$dir"

netns_setup 1 || fail "cannot build the namespace"
addr=$(ns_addr 0)
me=$(hostname -s)
ncpu=$(nproc)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge" "$dir/work"
chmod 700 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$dir/munge/munge.key"

# cgroups as slurmd wants them, inside its own mount namespace (ip netns exec gives it a
# fresh /sys without /sys/fs/cgroup): the same version as the machine's
if [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
  cg=v2
  mount_cg='mount -t cgroup2 none /sys/fs/cgroup'
else
  cg=v1
  mount_cg='mount -t tmpfs none /sys/fs/cgroup && for c in cpuset memory devices freezer; do mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || exit 1; done'
fi
cat >"$dir/cgroup.conf" <<EOF
CgroupPlugin=cgroup/$cg
CgroupAutomount=no
EOF
cat >"$dir/slurm.conf" <<EOF
ClusterName=gstest
SlurmctldHost=$me($addr)
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=gsnode NodeAddr=$addr CPUs=$ncpu State=UNKNOWN
PartitionName=gs Nodes=gsnode Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"

netns_spawn 0 "$dir/munged.log" "$(command -v munged || echo /usr/sbin/munged)" -F -f \
  --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" --log-file="$dir/munge/munged.log"
wait_log "$dir/munged.log" "Created [0-9]+ work thread" 30 ||
  skip "munged cannot start here: $(tail -n 1 "$dir/munged.log")"
netns_spawn 0 "$dir/slurmctld.out" "$(command -v slurmctld || echo /usr/sbin/slurmctld)" -D -i
netns_spawn 0 "$dir/slurmd.out" unshare -m sh -c "$mount_cg && exec $(command -v slurmd || echo /usr/sbin/slurmd) -D -N gsnode"
# the node is idle once slurmctld and slurmd talk (either may stop first: say why and skip)
deadline=$((SECONDS + 60))
until [ "$(ip netns exec "$(ns_name 0)" sinfo -h -n gsnode -o %T 2>/dev/null)" = idle ]; do
  for d in slurmctld slurmd; do
    if ! pgrep -F "$dir/$d.pid" >/dev/null 2>&1 && grep -q -E "fatal|error" "$dir/$d.out"; then
      skip "$d cannot run here: $(grep -E "fatal|error" "$dir/$d.out" | grep -v pmix | tail -n 1)"
    fi
  done
  [ "$SECONDS" -lt "$deadline" ] ||
    skip "the Slurm node did not become idle within 60 s: slurmd: $(tail -n 1 "$dir/slurmd.out"); slurmctld: $(tail -n 1 "$dir/slurmctld.out")"
  sleep 0.2
done

# a job: 2 CPU workers on the one node, the program reads the address file
cat >"$dir/program.sh" <<EOF
#!/bin/sh
. "\$GSCHED_ADDRESS_FILE" || exit 3
[ "\$GSCHED_ADDRESS" = "tcp://$addr:8786" ] || { echo "address file: \$GSCHED_ADDRESS" >&2; exit 4; }
exec "$job" --address-file "\$GSCHED_ADDRESS_FILE" --workers 2 \
  --n 4000 --chunk 500 --reference
EOF
chmod 755 "$dir/program.sh"
ip netns exec "$(ns_name 0)" env GS_BIN_DIR="$bin" \
  GS_SLURM_ARGS="--workers-per-node 2 --nthreads 1 --memory-limit 1GB --dir $dir/work/cluster" \
  sbatch --wait --chdir="$dir/work" --output="$dir/job.log" --nodes=1 --ntasks-per-node=2 \
  --cpus-per-task=1 --gpus-per-node=0 --time=10 \
  "$here/../../deploy/slurm/gsched.sbatch" "$dir/program.sh" >"$dir/sbatch.out" 2>&1 &
spid=$!
# while the job runs: the token is on no command line
wait_log "$dir/job.log" "gs-slurm-cluster ready" 120 || { kill "$spid"; fail "the Slurm cluster did not come up"; }
[ -s "$dir/work/cluster/token" ] || fail "no token file under the cluster directory"
if token_on_cmdline "$dir/work/cluster/token"; then
  fail "the token is on a command line"
fi
wait "$spid"
rc=$?
[ "$rc" -eq 0 ] || fail "sbatch --wait returned $rc: $(cat "$dir/sbatch.out")"
grep -q "ready tcp://$addr:8786 (2 cpu workers on 1 nodes" "$dir/job.log" || fail "no ready line in the job's output"
res=$(grep '^{' "$dir/job.log" | tail -n 1)
v=$(json_field "$res" value)
r=$(json_field "$res" ref)
[ -n "$v" ] || fail "the program printed no result"
awk -v v="$v" -v r="$r" 'BEGIN { d = v - r; if (d < 0) d = -d; exit !(d <= 1e-12 * r) }' ||
  fail "the Slurm cluster computed $v, not the exact $r"
for w in gsnode-0 gsnode-1; do
  grep -q "\"name\":\"$w\"" <<<"$res" || fail "worker $w did not take part"
done
grep -q "GSCHED_TOKEN_FILE=$dir/work/cluster/token" "$dir/work/cluster/address" || fail "the address file names no token file"
# nothing outlives the job
wait_no_daemons 60 0 || fail "daemons left after the job: $(daemons_left 0)"
echo "{\"test\":\"slurm-cluster\",\"workers\":2,\"value\":$v,\"ref\":$r,\"seconds\":$(json_field "$res" seconds)}"
ok=1
echo "slurm cluster: all checks passed"
