#!/usr/bin/env bash
# A one-node Slurm of its own on this machine, for testing the launchers under a real scheduler
# (the opt-in Slurm tier, `make slurm-test`; as root):
#   bash tools/slurm_local.sh install   # Debian's slurm-wlm and munge, when missing (apt-get;
#                                       # refused as start is)
#   bash tools/slurm_local.sh start     # munged, slurmctld, slurmd for this machine's CPUs/memory;
#                                       # prints SLURM_CONF=PATH, which client commands need
#   bash tools/slurm_local.sh stop      # the daemons it started, by the pids it recorded
#   bash tools/slurm_local.sh status    # sinfo; exit 0 when its node is idle or allocated
# Everything it writes is under SLURM_LOCAL_DIR (default .slurm-local in the checkout):
# slurm.conf, its own munge key, socket, seed and log, the Slurm state, spool, logs and the pid
# files. It never reads or writes /etc/slurm or /etc/munge, and talks to no Slurm but its own
# (SLURM_CONF is set for every Slurm command it runs). The package install is its only change
# outside that directory.
# It refuses to start beside a Slurm or munge it did not start: a slurm.conf in /etc/slurm (or
# /etc/slurm-llnl), or a running slurmctld, slurmd, slurmdbd, slurmrestd, sackd or munged whose
# pid is not in its pid files. On a cluster's node it refuses; it leaves the site's Slurm alone.
# SLURM_LOCAL_ETC (default /etc) is where it looks for a site's slurm.conf (tests point it at a
# scratch directory).
# The configuration is written at every start from `slurmd -C` (the node's real CPUs and
# memory), with TASK_PLUGIN (default task/affinity) and TASK_PLUGIN_PARAM (default Cores: every
# step is bound to the cores it was given, as on many clusters, so a step that asks for too few
# CPUs sees too few; without a binding a step saw all the job's CPUs here whatever it asked
# for), and proctrack/linuxproc (no cgroups needed), a credential lifetime of 10 s (a requeued
# job waits that long before it starts again; Slurm's default is 120 s). One partition "debug",
# no accounting.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${SLURM_LOCAL_DIR:-$ROOT/.slurm-local}"
[[ "$DIR" == /* ]] || DIR="$PWD/$DIR"  # Slurm and munged want absolute paths
ETC="${SLURM_LOCAL_ETC:-/etc}"
TASK_PLUGIN="${TASK_PLUGIN:-task/affinity}"
TASK_PLUGIN_PARAM="${TASK_PLUGIN_PARAM:-Cores}"
export SLURM_CONF="$DIR/slurm.conf"
MUNGE_SOCKET="$DIR/run/munge.socket"
OWN=(slurmd slurmctld munged)  # the daemons it starts, each with a pid file $DIR/run/NAME.pid
OTHERS=(slurmdbd slurmrestd sackd)  # Slurm daemons it never starts: any one running is foreign
fail() { echo "tools/slurm_local.sh: $*" >&2; exit 2; }

alive() {  # $1 a pid, $2 a name: that process runs (and is no zombie) under that name
  [[ "$1" =~ ^[0-9]+$ ]] || return 1
  [[ "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]] || return 1  # not a reused pid
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  [[ "${stat:0:1}" != Z ]]
}

own_pid() {  # the pid of its own daemon $1, when that one runs
  local pid
  pid="$(cat "$DIR/run/$1.pid" 2>/dev/null)" || return 1
  alive "$pid" "$1" && echo "$pid"
}

refuse_beside_others() {
  local conf name pid
  for conf in "$ETC/slurm/slurm.conf" "$ETC/slurm-llnl/slurm.conf"; do
    if [[ -e "$conf" ]]; then
      fail "$conf exists: this machine has a Slurm this script did not set up, and it runs only" \
        "where there is none (it writes nothing under /etc; an older tools/slurm_local.sh may have" \
        "written that file: see docs/testing.md to clean up after it)"
    fi
  done
  for name in "${OWN[@]}" "${OTHERS[@]}"; do
    for pid in $(pgrep -x "$name" || true); do
      alive "$pid" "$name" || continue  # a zombie (here pid 1 may not reap) is gone
      if [[ "$pid" != "$(own_pid "$name" || true)" ]]; then
        fail "a $name it did not start is running (pid $pid): it runs only where no other Slurm" \
          "or munge does, and stops only its own"
      fi
    done
  done
}

install() {
  local missing=()
  for cmd in slurmctld slurmd munged sinfo sbatch; do
    command -v "$cmd" >/dev/null || missing+=("$cmd")
  done
  [[ ${#missing[@]} == 0 ]] && return 0
  [[ "$(id -u)" == 0 ]] || fail "installing needs root; allowed: run as root, or install slurm-wlm and munge"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
}

write_config() {
  local node
  node="$(slurmd -C | head -1)"  # NodeName=HOST CPUs=... RealMemory=...
  [[ "$node" == NodeName=* ]] || fail "slurmd -C printed no node line: $node"
  local host="${node#NodeName=}"
  host="${host%% *}"
  cat > "$SLURM_CONF" <<EOF
# written by tools/slurm_local.sh: a one-node Slurm on $host, all its files under $DIR
ClusterName=hyrl-local
SlurmctldHost=$host
AuthType=auth/munge
# its own munged; a requeued job may start again after the credential lifetime (default 120 s)
AuthInfo=cred_expire=10,socket=$MUNGE_SOCKET
ProctrackType=proctrack/linuxproc
TaskPlugin=$TASK_PLUGIN
TaskPluginParam=$TASK_PLUGIN_PARAM
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmUser=root
MpiDefault=none
JobRequeue=1
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  echo "$host"
}

start() {
  [[ "$(id -u)" == 0 ]] || fail "starting the daemons needs root"
  refuse_beside_others
  install
  refuse_beside_others  # a package's install may start its service (where policy-rc.d allows)
  stop >/dev/null
  mkdir -p "$DIR"/{state,spool,log,run,munge}
  chmod 700 "$DIR/munge"
  local host
  host="$(write_config)"
  if [[ ! -s "$DIR/munge/munge.key" ]]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
  fi
  munged --force --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
  slurmctld -c -f "$SLURM_CONF"
  slurmd -c -f "$SLURM_CONF"
  for _ in $(seq 1 60); do
    if sinfo -h -n "$host" -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      echo "slurm up: node $host ($(sinfo -h -o '%c CPUs, %m MB'))"
      echo "SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 1
  done
  fail "the node did not come up in 60 s; see $DIR/log"
}

stop() {
  local names name pid
  for names in "slurmd slurmctld" munged; do  # munged last: the Slurm daemons use it to the end
    local pids=()
    for name in $names; do
      pid="$(own_pid "$name")" || continue
      kill "$pid" 2>/dev/null || true
      pids+=("$pid:$name")
    done
    for _ in $(seq 1 40); do  # gone before a restart binds their ports again
      local left=()
      for pid in ${pids[@]+"${pids[@]}"}; do
        alive "${pid%%:*}" "${pid#*:}" && left+=("$pid")
      done
      [[ ${#left[@]} == 0 ]] && break
      sleep 0.5
    done
    for name in $names; do
      own_pid "$name" >/dev/null && fail "its $name (pid $(own_pid "$name")) did not stop in 20 s"
      rm -f "$DIR/run/$name.pid"
    done
  done
}

status() {
  [[ -f "$SLURM_CONF" ]] && own_pid slurmctld >/dev/null || return 1  # only its own Slurm
  sinfo -h -o '%n %t %c %m' 2>/dev/null | grep -qE ' (idle|mix|alloc) ' && sinfo && return 0
  return 1
}

case "${1:-}" in
  install) refuse_beside_others; install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) fail "usage: bash tools/slurm_local.sh install|start|stop|status" ;;
esac
