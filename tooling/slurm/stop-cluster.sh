#!/usr/bin/env bash
# Stops what start-cluster.sh started: every job cancelled, slurmd and slurmctld, and (unless
# --keep-munge, which start-cluster.sh uses to retry with one node) munged and the /etc/hosts lines
# it added ([Note: a host whose name does not resolve] in start-cluster.sh). Each daemon is found by
# its pid file: daemons of the same name that others run are left alone. Exits 0 when nothing runs.
set -uo pipefail
dir="${WEBSHARD_SLURM_DIR:-/tmp/webshard-slurm}"
mark="# webshard-slurm"
running() { # $1: pid file, $2: process name; prints the pid when that process runs
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}
slurm_pids() { # the pids of slurmctld and every slurmd that still run
  running "$dir/slurmctld.pid" slurmctld
  for file in "$dir"/slurmd-*.pid; do running "$file" slurmd; done
}
if command -v scancel >/dev/null 2>&1 && running "$dir/slurmctld.pid" slurmctld >/dev/null; then
  scancel --full --quiet --user=root 2>/dev/null
  sleep 1
fi
pids=$(slurm_pids)
[ -z "$pids" ] || kill $pids 2>/dev/null
keep_munge=false
[ "${1:-}" = --keep-munge ] && keep_munge=true
if ! $keep_munge; then
  munged=$(running /run/munge/munged.pid munged) && kill "$munged" 2>/dev/null
fi
for _ in $(seq 1 20); do
  [ -n "$(slurm_pids)" ] || break
  sleep 0.25
done
pids=$(slurm_pids)
[ -z "$pids" ] || kill -9 $pids 2>/dev/null
# In place (not a new file renamed over it): /etc/hosts may be a bind mount, as in containers.
if ! $keep_munge && grep -qF -- "$mark" /etc/hosts 2>/dev/null; then
  kept=$(grep -vF -- "$mark" /etc/hosts)
  printf '%s\n' "$kept" >/etc/hosts
fi
exit 0
