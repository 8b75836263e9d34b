#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the tests, CI and trying `hydra/launcher=slurm` out:
#   sudo scripts/slurm_up.sh [STATE_DIR]      # default $SLURM_STATE_DIR, else /tmp/mha-textclf-slurm
#   scripts/slurm_down.sh [STATE_DIR]         # stops exactly what this started
#
# Debian/Ubuntu, as root. Installs what is missing, writes a short slurm.conf into STATE_DIR and starts, all as root
# and all on 127.0.0.1 (no traffic leaves loopback):
#   munged      authentication, with its own key and socket in STATE_DIR (a munged the machine runs is left alone)
#   mariadbd    a private database for job accounting, on a socket in STATE_DIR, no network
#   slurmdbd    accounting, so that `sacct` answers: submitit asks it whether a job still runs
#   slurmctld   the controller, one partition `debug`
#   slurmd      this machine as the node, with its real CPUs and memory
# Every start is a clean cluster (no jobs, no accounting records left over). Running it again while the cluster is up
# changes nothing.
set -euo pipefail

STATE=$(realpath -m "${1:-${SLURM_STATE_DIR:-/tmp/mha-textclf-slurm}}")
NODE=localnode                      # slurmd is started with -N: the name does not depend on the machine's hostname
PARTITION=debug
CTLD_PORT=${SLURM_CTLD_PORT:-6817}  # Slurm's standard ports; override where they are taken
SLURMD_PORT=${SLURMD_PORT:-6818}
DBD_PORT=${SLURMDBD_PORT:-6819}
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server-core mariadb-client-core)
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)  # in order of start
CONF=$STATE/slurm.conf
ETC_CONF=/etc/slurm/slurm.conf
export SLURM_CONF=$CONF
export MYSQL_UNIX_PORT=$STATE/mariadb/mysqld.sock  # where slurmdbd's MariaDB client finds the database

say() { echo "slurm_up: $*" >&2; }
die() { say "$*"; exit 1; }
own_policy=  # set while a policy-rc.d of ours keeps services from starting
starting=    # set once daemons start: a failure from then on stops them again, so that none is left behind
cleanup() {
  local status=$?
  if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
  if [ $status -ne 0 ] && [ -n "$starting" ]; then "$(dirname "$0")/slurm_down.sh" "$STATE"; fi
}
trap cleanup EXIT
# alive DAEMON: its pid file names a running process of that name (not a reused pid).
alive() { [ -s "$STATE/$1.pid" ] && [ "$(cat "/proc/$(cat "$STATE/$1.pid")/comm" 2>/dev/null)" = "$1" ]; }
# What slurm_down.sh stops, in reverse: each daemon is recorded as it starts, with the pid file it writes.
started() { echo "$1" >>"$STATE/daemons"; }
all_alive() { for d in "${DAEMONS[@]}"; do alive "$d" || return 1; done; }
# wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds; on timeout the logs and a clear failure.
wait_for() {
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  while [ $SECONDS -lt $deadline ]; do timeout 10 "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  tail -n 5 "$STATE"/*.log >&2 || true
  die "$what within $seconds s; the logs above are in $STATE"
}

usage() {
  cat <<EOF2
Slurm is up: partition '$PARTITION', node $NODE ($(sinfo -h -N -o '%c CPUs, %m MB')), state in $STATE.
$(if [ "$(readlink "$ETC_CONF")" = "$CONF" ]; then
    echo "Slurm's commands find it through $ETC_CONF, a link to its config; where that is not so, or in a job:"
  else
    echo "$ETC_CONF belongs to another cluster; to use this one:"
  fi)
export SLURM_CONF=$CONF
Try: sinfo; squeue; sacct
  python -m train -m hydra/launcher=slurm hydra.launcher.partition=$PARTITION hydra.launcher.cpus_per_task=1 hydra.launcher.mem_gb=1 model=naive,efficient,torch
Stop it with: scripts/slurm_down.sh $STATE
EOF2
}

[ "$(id -u)" = 0 ] || die "needs root (it installs packages and runs the daemons as root): sudo $0 $*"

if all_alive; then
  say "already up"
  usage
  exit 0
fi
# Half up (a daemon died, or the machine rebooted and left the state folder): stop the rest, start afresh.
if [ -s "$STATE/daemons" ]; then
  say "not every daemon is running: stopping the rest and starting afresh"
  "$(dirname "$0")/slurm_down.sh" "$STATE"
fi

# --- install -----------------------------------------------------------------------------------------------------
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
mkdir -p "$STATE"
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "needs apt-get (Debian/Ubuntu) to install ${missing[*]}"
  say "installing ${missing[*]}"
  # The packages' own services must not start: they would take the ports and sockets, and nothing would stop them.
  # policy-rc.d is Debian's switch for that; one we put there is removed after the install.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    own_policy=1
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$STATE/apt.log" 2>&1; }
  # A fresh container has no package lists, and old ones may name versions the mirror no longer has: update once.
  apt_install || { apt-get update -qq >>"$STATE/apt.log" 2>&1 && apt_install; } ||
    { tail -n 20 "$STATE/apt.log" >&2; die "apt-get install ${missing[*]} failed (log: $STATE/apt.log)"; }
  if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; own_policy=; fi
fi

# --- configure ---------------------------------------------------------------------------------------------------
rm -rf "$STATE"/{ctld,spool,mariadb} "$STATE"/*.log  # a clean cluster: no jobs or records from an earlier one
mkdir -p "$STATE"/{ctld,spool,munge,mariadb}
chmod 755 "$STATE" "$STATE/munge"  # munged wants its socket reachable by every user (the key itself is 0600)
[ -s "$STATE/munge/munge.key" ] || (umask 077 && head -c 1024 /dev/urandom >"$STATE/munge/munge.key")
# The node exactly as slurmd sees the hardware: a node configured with more than it has would be drained.
hardware=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //')
cpus=$(sed -E 's/.*CPUs=([0-9]+).*/\1/' <<<"$hardware")
memory=$(sed -E 's/.*RealMemory=([0-9]+).*/\1/' <<<"$hardware")
cat >"$CONF" <<EOF2
# Written by scripts/slurm_up.sh: a single-node cluster on loopback, for tests and trying things out.
ClusterName=local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
# Listen on 127.0.0.1 only, not on every interface.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also holds a requeued job back (default 120 s, plus the wait for the scheduler's next pass).
AuthInfo=socket=$STATE/munge/munge.socket,cred_expire=10
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
# No cgroups: containers and CI machines seldom let a daemon use them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# CPUs and memory are consumable, so several 1-CPU jobs run side by side.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/builtin
# A job that asks for no memory gets its share of the CPUs' memory, not the whole node's.
DefMemPerCPU=$((memory / cpus))
JobRequeue=1
ReturnToService=2
MailProg=/bin/true
# Quick timers, so tests do not wait: the scheduler looks at pending jobs every 2 s (default 60), 5 s from SIGTERM to
# SIGKILL (default 30), squeue shows finished jobs for 60 s (default 300).
SchedulerParameters=sched_interval=2
KillWait=5
MinJobAge=60
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# Slurm takes the munge socket for talking to slurmdbd from here, not from AuthInfo.
AccountingStoragePass=$STATE/munge/munge.socket
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=localhost $hardware State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF2
# slurmdbd reads slurmdbd.conf next to slurm.conf, and only if no one else can read it (it may hold a password).
(umask 077 && cat >"$STATE/slurmdbd.conf") <<EOF2
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF2

# Slurm's commands read /etc/slurm/slurm.conf unless SLURM_CONF says otherwise. A link there lets every shell, and
# every process submitit starts, find this cluster without an environment variable; a real config is never replaced.
# (A dangling link, left by a state folder since deleted, is replaced.)
if [ ! -e "$ETC_CONF" ]; then
  mkdir -p "$(dirname "$ETC_CONF")" && ln -sfn "$CONF" "$ETC_CONF"
fi

# --- start -------------------------------------------------------------------------------------------------------
starting=1
munged --socket="$STATE/munge/munge.socket" --key-file="$STATE/munge/munge.key" \
  --pid-file="$STATE/munged.pid" --log-file="$STATE/munged.log" --seed-file="$STATE/munge/munged.seed"
started munged

mariadb-install-db --no-defaults --datadir="$STATE/mariadb/data" --user=root --auth-root-authentication-method=normal \
  --skip-test-db >"$STATE/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $STATE/mariadb-install.log"
# mariadbd stays in the foreground: setsid detaches it from this shell; it writes its own pid file.
setsid mariadbd --no-defaults --datadir="$STATE/mariadb/data" --socket="$MYSQL_UNIX_PORT" --skip-networking \
  --user=root --pid-file="$STATE/mariadbd.pid" --log-error="$STATE/mariadbd.log" </dev/null >/dev/null 2>&1 &
echo $! >"$STATE/mariadbd.pid"  # its own pid file comes only once it is ready; a failed start must find it too
started mariadbd
wait_for 30 "MariaDB did not answer" mariadb --no-defaults --user=root --execute="SELECT 1"

slurmdbd
started slurmdbd
wait_for 30 "slurmdbd did not answer" sacctmgr --noheader list cluster
sacctmgr --immediate add cluster local >/dev/null  # slurmctld reports jobs only to a cluster the database knows

slurmctld -c -f "$CONF"  # -c: no jobs left over from an earlier cluster in this folder
started slurmctld
slurmd -N "$NODE" -f "$CONF"
started slurmd
wait_for 60 "the node did not become idle" bash -c "[ \"\$(sinfo -h -n $NODE -o %T)\" = idle ]"
usage
