#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for the tests labelled `system`
# (tests/integration/test_slurm.cpp runs dtrain under `srun` on it).
#
#   bash scripts/slurm-local.sh [start]   install, configure and start; exit 0 once usable
#   bash scripts/slurm-local.sh stop      stop the daemons this script started
#   bash scripts/slurm-local.sh status    say what runs; exit 0 when usable
#
# start: installs Debian's slurm-wlm and munge when missing (apt-get, root), makes a
# munge key if there is none, starts munged, writes a one-node /etc/slurm/slurm.conf
# for this machine (NodeName = `hostname -s`, its CPUs, most of its memory, one
# default partition, proctrack/linuxproc and task/none so no cgroups are needed, no
# accounting; state, spool, logs and pid files under /var/spool, /var/log and /run
# in directories named slurm-local), starts slurmctld and slurmd, and waits (up to
# SLURM_LOCAL_DEADLINE seconds, 30 by default) until `sinfo` shows the node idle and
# `srun -N1 -n2 true` succeeds. A slurm.conf this script did not write (it has no
# "# Written by dtrain's scripts/slurm-local.sh" line) is never overwritten: when
# Slurm already works with it, start says so and exits 0; otherwise it fails.
# Idempotent: a second start while everything runs returns 0 at once.
# On failure it exits 1 with one line on stderr: "slurm-local: <reason>".
set -euo pipefail

readonly MARK="# Written by dtrain's scripts/slurm-local.sh"
readonly CONF_DIR=/etc/slurm
readonly CONF="$CONF_DIR/slurm.conf"
readonly RUN_DIR=/run/slurm-local
readonly SPOOL_DIR=/var/spool/slurm-local
readonly LOG_DIR=/var/log/slurm-local
readonly CTLD_PID="$RUN_DIR/slurmctld.pid"
readonly SLURMD_PID="$RUN_DIR/slurmd.pid"
readonly CTLD_LOG="$LOG_DIR/slurmctld.log"
readonly SLURMD_LOG="$LOG_DIR/slurmd.log"
readonly MUNGE_STARTED="$RUN_DIR/munged.started"  # present when this script started munged
readonly MUNGE_PID=/run/munge/munged.pid
readonly DEADLINE="${SLURM_LOCAL_DEADLINE:-30}"
NODE="$(hostname -s)"
readonly NODE

die() {
  echo "slurm-local: $*" >&2
  exit 1
}

# The last lines of a log file on one line, for a failure message.
log_tail() {
  if [ -r "$1" ]; then
    tail -n "${2:-3}" "$1" | tr '\n' ' ' | sed 's/  */ /g; s/ $//'
  else
    echo "(no log at $1)"
  fi
}

# True when the process in pid file $1 is alive.
pid_alive() {
  local pid
  [ -s "$1" ] || return 1
  pid="$(cat "$1" 2>/dev/null)" || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# True when Slurm takes a 2-task step on this node right now (a few seconds at most).
usable() {
  command -v srun >/dev/null 2>&1 || return 1
  timeout 15 srun -N1 -n2 --immediate=10 true >/dev/null 2>&1
}

ours() { [ -f "$CONF" ] && grep -qxF "$MARK" "$CONF"; }

install_packages() {
  local missing=() p
  for p in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "needs root to install ${missing[*]} (apt-get)"
  echo "slurm-local: installing ${missing[*]}"
  # Keep the packages' scripts from starting the daemons (with no slurm.conf yet):
  # a policy-rc.d that says no, for the install only, unless one is there already.
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
  fi
  local log
  log="$(mktemp)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    [ "$made_policy" = 1 ] && rm -f "$policy"
    die "apt-get install ${missing[*]} failed: $(log_tail "$log" 3)"
  fi
  [ "$made_policy" = 1 ] && rm -f "$policy"
  rm -f "$log"
}

start_munge() {
  if ! id munge >/dev/null 2>&1; then die "no munge user (is the munge package installed?)"; fi
  install -d -o munge -g munge -m 0700 /etc/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge
  install -d -o munge -g munge -m 0700 /var/log/munge
  install -d -o munge -g munge -m 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile=/etc/munge/munge.key --force >/dev/null 2>&1 ||
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key

  if pid_alive "$MUNGE_PID" && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  rm -f "$MUNGE_PID" /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  if ! runuser -u munge -- /usr/sbin/munged >/dev/null 2>&1; then
    /usr/sbin/munged --force >/dev/null 2>&1 || die "munged did not start: $(log_tail /var/log/munge/munged.log 2)"
  fi
  touch "$MUNGE_STARTED"
  local i
  for i in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "munged does not answer: $(log_tail /var/log/munge/munged.log 2)"
}

write_conf() {
  if [ -f "$CONF" ] && ! ours; then
    die "$CONF exists and was not written by this script (no '$MARK' line); not overwriting it, and Slurm does not run a 2-task step with it"
  fi
  local cpus mem_mb
  cpus="$(nproc --all 2>/dev/null || nproc)"
  # 90% of MemTotal: slurmd marks a node invalid when the config claims more than it finds.
  mem_mb="$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo 2>/dev/null || true)"
  [ -n "$mem_mb" ] && [ "$mem_mb" -gt 0 ] || mem_mb=1000
  local new
  new="$(mktemp)"
  cat >"$new" <<EOF
$MARK
# A one-node cluster for dtrain's system tests; \`bash scripts/slurm-local.sh stop\` stops it.
# This file is rewritten by every start; remove the line above to keep your own edits.
ClusterName=dtrain-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
# A step whose srun died (e.g. killed at a test's deadline) is ended after 30 s.
InactiveLimit=30
KillWait=5
MinJobAge=60
StateSaveLocation=$SPOOL_DIR/ctld
SlurmdSpoolDir=$SPOOL_DIR/d
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  install -d -m 0755 "$CONF_DIR"
  if [ -f "$CONF" ] && cmp -s "$new" "$CONF"; then
    rm -f "$new"
  else
    install -m 0644 "$new" "$CONF"
    rm -f "$new"
  fi
}

# The node's state as sinfo has it (idle, mix, alloc, down*, drain, unk*, ...), or "".
node_state() { timeout 5 sinfo -h -n "$NODE" -o %t 2>/dev/null | head -n1 | tr -d ' ' || true; }

start() {
  # Already usable (ours with both daemons up, or a Slurm someone else runs here):
  # nothing to do. Ours with a daemon down skips the check (srun would wait for it).
  if [ -f "$CONF" ] && { ! ours || { pid_alive "$CTLD_PID" && pid_alive "$SLURMD_PID"; }; } && usable; then
    echo "slurm-local: slurm is up (node $NODE $(node_state))"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "needs root to install, configure and start slurm"
  install_packages
  command -v slurmctld >/dev/null 2>&1 || die "slurmctld is not installed"
  command -v slurmd >/dev/null 2>&1 || die "slurmd is not installed"
  install -d -m 0755 "$RUN_DIR" "$SPOOL_DIR" "$SPOOL_DIR/ctld" "$SPOOL_DIR/d" "$LOG_DIR"
  start_munge
  write_conf

  if ! pid_alive "$CTLD_PID"; then
    # With slurmd down too nothing runs: start from a clean state (-c), not with
    # the jobs of a controller that was killed, which would hold the node.
    local clean=()
    pid_alive "$SLURMD_PID" || clean=(-c)
    rm -f "$CTLD_PID"
    slurmctld "${clean[@]}" >>"$CTLD_LOG" 2>&1 || die "slurmctld did not start: $(log_tail "$CTLD_LOG")"
  fi
  if ! pid_alive "$SLURMD_PID"; then
    rm -f "$SLURMD_PID"
    slurmd >>"$SLURMD_LOG" 2>&1 || die "slurmd did not start: $(log_tail "$SLURMD_LOG")"
  fi

  local end=$((SECONDS + DEADLINE)) state="" resumed=0
  while :; do
    pid_alive "$CTLD_PID" || { sleep 0.5; pid_alive "$CTLD_PID"; } ||
      die "slurmctld did not start: $(log_tail "$CTLD_LOG")"
    pid_alive "$SLURMD_PID" || { sleep 0.5; pid_alive "$SLURMD_PID"; } ||
      die "slurmd did not start: $(log_tail "$SLURMD_LOG")"
    state="$(node_state)"
    case "$state" in
      idle) break ;;
      drain* | drng* | down | down~ | fail*)
        # Left down or drained by an earlier run (e.g. the daemons killed): back to service.
        if [ "$resumed" = 0 ]; then
          scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
          resumed=1
        fi
        ;;
    esac
    [ "$SECONDS" -lt "$end" ] ||
      die "node $NODE is '${state:-not listed}' after ${DEADLINE} s, not idle: $(log_tail "$SLURMD_LOG" 2) | $(log_tail "$CTLD_LOG" 2)"
    sleep 0.5
  done
  local out
  if ! out="$(timeout $((end - SECONDS > 10 ? end - SECONDS : 10)) srun -N1 -n2 true 2>&1)"; then
    die "srun -N1 -n2 true failed: $(echo "$out" | tail -n 2 | tr '\n' ' ') | $(log_tail "$SLURMD_LOG" 2)"
  fi
  echo "slurm-local: slurm is up (node $NODE $state, partition local, $(grep -o "CPUs=[0-9]*" "$CONF" | cut -d= -f2) CPUs)"
}

# Sends TERM to the process of pid file $1, then KILL after 10 s.
stop_pid() {
  local pidfile="$1" name="$2" pid i
  pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    echo "slurm-local: $name ($pid) killed" >&2
  fi
  rm -f "$pidfile"
  echo "slurm-local: stopped $name ($pid)"
}

stop() {
  if ours; then
    stop_pid "$SLURMD_PID" slurmd
    stop_pid "$CTLD_PID" slurmctld
  fi
  if [ -f "$MUNGE_STARTED" ]; then
    stop_pid "$MUNGE_PID" munged
    rm -f "$MUNGE_STARTED"
  fi
}

status() {
  local name file
  for name in slurmctld slurmd munged; do
    case "$name" in
      slurmctld) file="$CTLD_PID" ;;
      slurmd) file="$SLURMD_PID" ;;
      munged) file="$MUNGE_PID" ;;
    esac
    if pid_alive "$file"; then echo "$name: running ($(cat "$file"))"; else echo "$name: not running"; fi
  done
  if [ -f "$CONF" ]; then
    if ours; then echo "slurm.conf: $CONF (written by this script)"; else echo "slurm.conf: $CONF (not ours)"; fi
  else
    echo "slurm.conf: none"
  fi
  command -v sinfo >/dev/null 2>&1 && timeout 5 sinfo 2>&1 || true
  if usable; then
    echo "usable: yes (srun -N1 -n2 true succeeds)"
  else
    echo "usable: no" >&2
    return 1
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "unknown command '$1' (start, stop or status)" ;;
esac
