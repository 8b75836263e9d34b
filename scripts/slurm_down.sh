#!/usr/bin/env bash
# Stop the cluster scripts/slurm_up.sh started: its jobs, then the daemons it recorded as started (in reverse order,
# each by its pid file; nothing else is touched), and the /etc/slurm/slurm.conf link it made. Nothing of it runs
# afterwards. Safe to call when nothing runs.
#   scripts/slurm_down.sh [STATE_DIR]         # default $SLURM_STATE_DIR, else /tmp/mha-textclf-slurm
set -uo pipefail

STATE=$(realpath -m "${1:-${SLURM_STATE_DIR:-/tmp/mha-textclf-slurm}}")
CONF=$STATE/slurm.conf
ETC_CONF=/etc/slurm/slurm.conf
export SLURM_CONF=$CONF

say() { echo "slurm_down: $*" >&2; }
# running PID DAEMON: the pid is a running process of that name (a pid reused by another process is left alone).
running() { [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]; }
pid_of() { [ -s "$STATE/$1.pid" ] && cat "$STATE/$1.pid"; }
alive() { local pid; pid=$(pid_of "$1") && running "$pid" "$1"; }

# Jobs first, while slurmctld and slurmd can still end them: a job's processes (under slurmstepd) outlive slurmd.
if alive slurmctld && alive slurmd; then
  squeue --noheader --format=%A 2>/dev/null | xargs --no-run-if-empty scancel --full 2>/dev/null
  for _ in $(seq 100); do
    [ -z "$(squeue --noheader --format=%A 2>/dev/null)" ] && break
    sleep 0.2
  done
fi

if [ -s "$STATE/daemons" ]; then
  for daemon in $(tac "$STATE/daemons"); do
    pid=$(pid_of "$daemon") || continue
    if running "$pid" "$daemon"; then
      kill -TERM "$pid"
      for _ in $(seq 100); do running "$pid" "$daemon" || break; sleep 0.2; done
      if running "$pid" "$daemon"; then say "$daemon ($pid) still runs 20 s after SIGTERM: SIGKILL"; kill -KILL "$pid"; fi
      say "stopped $daemon ($pid)"
    fi
    rm -f "$STATE/$daemon.pid"
  done
  rm -f "$STATE/daemons"
fi

if [ "$(readlink "$ETC_CONF")" = "$CONF" ]; then rm -f "$ETC_CONF"; fi
exit 0
