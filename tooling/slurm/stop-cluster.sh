#!/usr/bin/env bash
# Stops what start-cluster.sh started: every job cancelled, slurmd, slurmctld and (unless
# --keep-munge) munged. Exits 0 when nothing runs.
set -uo pipefail
if command -v scancel >/dev/null 2>&1 && pgrep -x slurmctld >/dev/null; then
  scancel --full --quiet --user=root 2>/dev/null
  sleep 1
fi
pkill -x slurmd 2>/dev/null
pkill -x slurmctld 2>/dev/null
[ "${1:-}" = --keep-munge ] || pkill -x munged 2>/dev/null
for _ in $(seq 1 20); do
  pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break
  sleep 0.25
done
pkill -9 -x slurmd 2>/dev/null
pkill -9 -x slurmctld 2>/dev/null
exit 0
