#!/usr/bin/env bash
# A one-node Slurm on this machine, for testing the launchers under a real scheduler (as root):
#   bash tools/slurm_local.sh install   # Debian's slurm-wlm and munge, when missing (apt-get)
#   bash tools/slurm_local.sh start     # munged, slurmctld, slurmd for this machine's CPUs/memory
#   bash tools/slurm_local.sh stop
#   bash tools/slurm_local.sh status    # sinfo; exit 0 when the node is idle or allocated
# The configuration (SLURM_LOCAL_DIR, default /tmp/hyrl-slurm) is written at every start from
# `slurmd -C` (the node's real CPUs and memory), with TASK_PLUGIN (default task/affinity) and
# TASK_PLUGIN_PARAM (default Cores: every step is bound to the cores it was given, as on many
# clusters, so a step that asks for too few CPUs sees too few; without a binding a step saw
# all the job's CPUs here whatever it asked for), and
# proctrack/linuxproc (no cgroups needed), a credential lifetime of 10 s (a requeued job waits
# that long before it starts again; Slurm's default is 120 s). One partition "debug", no
# accounting.
set -euo pipefail
DIR="${SLURM_LOCAL_DIR:-/tmp/hyrl-slurm}"
TASK_PLUGIN="${TASK_PLUGIN:-task/affinity}"
TASK_PLUGIN_PARAM="${TASK_PLUGIN_PARAM:-Cores}"
CONF=/etc/slurm/slurm.conf
fail() { echo "tools/slurm_local.sh: $*" >&2; exit 2; }

install() {
  if command -v slurmctld >/dev/null && command -v munged >/dev/null; then return 0; fi
  [[ "$(id -u)" == 0 ]] || fail "installing needs root; allowed: run as root, or install slurm-wlm and munge"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
}

write_config() {
  local node
  node="$(slurmd -C | head -1)"  # NodeName=HOST CPUs=... RealMemory=...
  [[ "$node" == NodeName=* ]] || fail "slurmd -C printed no node line: $node"
  local host="${node#NodeName=}"
  host="${host%% *}"
  mkdir -p "$DIR"/{state,spool,log} /etc/slurm
  cat > "$CONF" <<EOF
# written by tools/slurm_local.sh: a one-node Slurm on $host
ClusterName=hyrl-local
SlurmctldHost=$host
AuthType=auth/munge
# a requeued job may start again after the credential lifetime (default 120 s)
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=$TASK_PLUGIN
TaskPluginParam=$TASK_PLUGIN_PARAM
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
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
  install
  stop >/dev/null 2>&1 || true
  local host
  host="$(write_config)"
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  munged --force 2>/dev/null || su -s /bin/sh munge -c "munged --force"
  slurmctld -c
  slurmd -c
  for _ in $(seq 1 60); do
    if sinfo -h -n "$host" -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      echo "slurm up: node $host ($(sinfo -h -o '%c CPUs, %m MB'))"
      return 0
    fi
    sleep 1
  done
  fail "the node did not come up in 60 s; see $DIR/log"
}

stop() {
  local pidfile
  for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid"; do
    [[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  pkill -x munged 2>/dev/null || true
  for _ in $(seq 1 40); do  # gone before a restart binds their ports again
    pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || pgrep -x munged >/dev/null \
      || return 0
    sleep 0.5
  done
}

status() {
  sinfo -h -o '%n %t %c %m' 2>/dev/null | grep -qE ' (idle|mix|alloc) ' && sinfo && return 0
  return 1
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) fail "usage: bash tools/slurm_local.sh install|start|stop|status" ;;
esac
