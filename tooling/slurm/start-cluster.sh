#!/usr/bin/env bash
# A one-machine Slurm cluster for the tests (Debian's slurm-wlm and munge, as root): munged,
# slurmctld and one slurmd per node entry. Two node entries, node1 and node2, both this host
# (their names resolve to 127.0.0.1 through /etc/hosts), where slurmd runs twice on one host;
# otherwise one node. Each node declares 8 CPUs. Prints the nodes, idle, and exits 0; exits 1 with the reason
# when it cannot start a cluster. Idempotent: a cluster already up is stopped first.
# State lives under $WEBSHARD_SLURM_DIR (default /tmp/webshard-slurm). Stop with stop-cluster.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${WEBSHARD_SLURM_DIR:-/tmp/webshard-slurm}"
fail() { echo "slurm: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "not root: slurmctld, slurmd and munged need root here"
for bin in munged slurmctld slurmd sinfo sbatch srun scancel; do
  command -v "$bin" >/dev/null 2>&1 || fail "no $bin: apt-get install slurm-wlm munge"
done
bash "$here/stop-cluster.sh" >/dev/null 2>&1 || true
mkdir -p "$dir"/{spool,state,log} /etc/slurm /run/munge /var/log/munge /var/lib/munge /etc/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
# munged as its own user (it refuses root); --force past an old socket of a killed daemon.
su -s /bin/sh munge -c "/usr/sbin/munged --force" || fail "munged did not start"

host=$(hostname)
nodes="${WEBSHARD_SLURM_NODES:-2}"
for name in node1 node2; do
  grep -qE "^127\.0\.0\.1[[:space:]].*\b$name\b" /etc/hosts || echo "127.0.0.1 $name" >>/etc/hosts
done
write_conf() { # $1: node count
  {
    echo "ClusterName=webshard"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "AuthType=auth/munge"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SchedulerType=sched/backfill"
    echo "ReturnToService=2"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "MpiDefault=none"
    echo "KillWait=5"
    echo "InactiveLimit=0"
    # The nodes declare 8 CPUs whatever the host has, so the README's `--cpus-per-task=8` is
    # accepted as written on a 2-core machine (slurmd takes the configured count).
    echo "SlurmdParameters=config_overrides"
    if [ "$1" = 2 ]; then
      echo "NodeName=node1 NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 CPUs=8 State=UNKNOWN"
      echo "NodeName=node2 NodeHostname=$host NodeAddr=127.0.0.1 Port=17002 CPUs=8 State=UNKNOWN"
      echo "PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
    else
      echo "NodeName=node1 NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 CPUs=8 State=UNKNOWN"
      echo "PartitionName=debug Nodes=node1 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
    fi
  } >/etc/slurm/slurm.conf
  echo "ConstrainCores=no" >/etc/slurm/cgroup.conf
}
wait_idle() { # $1: node count; true once that many nodes are idle
  for _ in $(seq 1 40); do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$idle" -ge "$1" ] && return 0
    sleep 0.5
  done
  return 1
}
start() { # $1: node count
  write_conf "$1"
  mkdir -p "$dir/spool/node1" "$dir/spool/node2"
  slurmctld -i || return 1
  slurmd -N node1 || return 1
  if [ "$1" = 2 ]; then slurmd -N node2 || return 1; fi
  wait_idle "$1"
}
if ! start "$nodes"; then
  if [ "$nodes" = 2 ]; then
    echo "slurm: two slurmd on one host did not come up; one node" >&2
    bash "$here/stop-cluster.sh" --keep-munge >/dev/null 2>&1 || true
    start 1 || fail "slurmctld or slurmd did not come up: see $dir/log"
  else
    fail "slurmctld or slurmd did not come up: see $dir/log"
  fi
fi
sinfo -N -o '%N %t %c'
