#!/usr/bin/env bash
# A one-machine Slurm cluster for the tests (Debian's slurm-wlm and munge, as root): munged,
# slurmctld and one slurmd per node entry. Two node entries, node1 and node2, both this host
# (their names resolve to 127.0.0.1 through /etc/hosts), where slurmd runs twice on one host;
# otherwise one node. Each node declares 8 CPUs. Prints the nodes, idle, and exits 0; exits 1 with
# one line saying what is missing when it cannot start a cluster. Idempotent: a cluster already up
# is stopped first. State lives under $WEBSHARD_SLURM_DIR (default /tmp/webshard-slurm), the
# daemons' own output under its log/. Stop with stop-cluster.sh.
#
# [Note: a host whose name does not resolve]
# A fresh machine's hostname may resolve nowhere (a Debian root whose /etc/hosts lacks it: CI's
# "vm"). munged then warns that it cannot look up its origin, and every lookup of the name by the
# daemons waits on DNS, which on a machine without a resolver that answers can take longer than
# the test gives the whole start. So munged gets its origin as an address (127.0.0.1, where every
# daemon talks), and a name that does not resolve gets a 127.0.0.1 line in /etc/hosts, marked, as
# node1 and node2 do; stop-cluster.sh removes the marked lines. Where /etc/hosts cannot be written,
# the start fails saying so.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${WEBSHARD_SLURM_DIR:-/tmp/webshard-slurm}"
fail() { echo "slurm: $*" >&2; exit 1; }
# The end of the lines this script adds to /etc/hosts (stop-cluster.sh removes them).
mark="# webshard-slurm"

[ "$(id -u)" = 0 ] || fail "not root: slurmctld, slurmd and munged need root here"
for bin in munged slurmctld slurmd sinfo sbatch srun scancel getent timeout; do
  command -v "$bin" >/dev/null 2>&1 || fail "no $bin: apt-get install slurm-wlm munge"
done
bash "$here/stop-cluster.sh" >/dev/null 2>&1 || true
mkdir -p "$dir"/{spool,state,log} /etc/slurm /run/munge /var/log/munge /var/lib/munge /etc/munge
rm -f "$dir"/log/*.log
chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key

# Names the daemons look up: this host's ([Note: a host whose name does not resolve]) and the nodes'.
host=$(hostname)
add_host() { # $1: a name for 127.0.0.1, in /etc/hosts with the mark
  { echo "127.0.0.1 $1 $mark" >>/etc/hosts; } 2>/dev/null ||
    fail "$1 does not resolve and /etc/hosts is not writable: add '127.0.0.1 $1' to /etc/hosts"
}
timeout 5 getent hosts "$host" >/dev/null 2>&1 || add_host "$host"
for name in node1 node2; do
  grep -qE "^127\.0\.0\.1[[:space:]].*\b$name\b" /etc/hosts || add_host "$name"
done

# munged as its own user (it refuses root); --force past an old socket of a killed daemon.
log="$dir/log/munged.log"
if ! timeout 20 su -s /bin/sh munge -c "/usr/sbin/munged --force --origin=127.0.0.1" >"$log" 2>&1; then
  fail "munged did not start: $(tail -n 1 "$log")"
fi

nodes="${WEBSHARD_SLURM_NODES:-2}"
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
  timeout 20 slurmctld -i || return 1
  timeout 20 slurmd -N node1 || return 1
  if [ "$1" = 2 ]; then timeout 20 slurmd -N node2 || return 1; fi
  wait_idle "$1"
}
not_up() { # the one line of a start that failed: the daemons' last error
  local last
  last=$(grep -h 'error:' "$dir"/log/slurm*.log 2>/dev/null | tail -n 1)
  fail "slurmctld or slurmd did not come up${last:+: $last} (logs in $dir/log)"
}
if ! start "$nodes"; then
  if [ "$nodes" = 2 ]; then
    echo "slurm: two slurmd on one host did not come up; one node"
    bash "$here/stop-cluster.sh" --keep-munge >/dev/null 2>&1 || true
    start 1 || not_up
  else
    not_up
  fi
fi
sinfo -N -o '%N %t %c'
