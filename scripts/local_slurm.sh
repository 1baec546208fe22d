#!/usr/bin/env bash
# A one-node Slurm cluster on localhost for the tests (Debian/Ubuntu slurm-wlm, run as root).
#
#   bash scripts/local_slurm.sh start    # install missing packages, write config, start daemons (idempotent)
#   bash scripts/local_slurm.sh stop     # stop only the daemons this script started
#   bash scripts/local_slurm.sh status   # what runs; exit 0 only when the whole cluster is up
#   bash scripts/local_slurm.sh env      # print the export lines that clients and the tests need
#   bash scripts/local_slurm.sh clean    # stop, then delete the cluster's directory (config, state, DB)
#
# Everything (config, munge key and socket, MariaDB datadir, Slurm state, logs, PID files) lives
# under $NEMOTRON_SLURM_HOME (default ${TMPDIR:-/tmp}/nemotron-slurm). Nothing is written to
# /etc/slurm: clients find the cluster through SLURM_CONF (see `env`). The node declares 8 GPUs
# backed by fake device files (aliases of /dev/null), so `--gpus-per-node=8` jobs run.
# Accounting goes through slurmdbd + a private MariaDB, so sacct works.
#
# The script refuses to start where a real Slurm is configured or running.
#
# Environment (all optional):
#   NEMOTRON_SLURM_HOME       directory for everything (default ${TMPDIR:-/tmp}/nemotron-slurm)
#   NEMOTRON_SLURM_PORT       slurmctld port; slurmd and slurmdbd use the next two (default 6817)
#   NEMOTRON_SLURM_DB_PORT    port of the private MariaDB on 127.0.0.1 (default 13306)
#   NEMOTRON_SLURM_CPUS       CPUs the node declares (default: the larger of nproc and 16)
#   NEMOTRON_SLURM_PARTITION  partition name (default batch)
#   NEMOTRON_SLURM_ACCOUNT    account registered for root (default nemotron)
set -euo pipefail

ACTION="${1:-}"
HOME_DIR="${NEMOTRON_SLURM_HOME:-${TMPDIR:-/tmp}/nemotron-slurm}"
[[ "$HOME_DIR" == /* ]] || HOME_DIR="$PWD/$HOME_DIR"
HOME_DIR="${HOME_DIR%/}"
CLUSTER=nemotron
PARTITION="${NEMOTRON_SLURM_PARTITION:-batch}"
ACCOUNT="${NEMOTRON_SLURM_ACCOUNT:-nemotron}"
CTLD_PORT="${NEMOTRON_SLURM_PORT:-6817}"
SLURMD_PORT=$((CTLD_PORT + 1))
DBD_PORT=$((CTLD_PORT + 2))
DB_PORT="${NEMOTRON_SLURM_DB_PORT:-13306}"
GPUS=8

ETC="$HOME_DIR/etc"; RUN="$HOME_DIR/run"; LOG="$HOME_DIR/log"; STATE="$HOME_DIR/state"
DEV="$HOME_DIR/dev"; MUNGE="$HOME_DIR/munge"; DB="$HOME_DIR/db"
CONF="$ETC/slurm.conf"
MARKER="$HOME_DIR/.nemotron-local-slurm"
MUNGE_SOCKET="$MUNGE/munged.sock"
DB_SOCKET="$RUN/mariadbd.sock"
# start order (stop goes the other way, in stages)
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
# openssh-server and rsync: the SSH-tunnel tests start a private sshd of their own (tests/ssh_support.py);
# the system's ssh service is never started (the policy-rc.d below) nor configured
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server openssh-server rsync)

say() { printf '[local-slurm] %s\n' "$*"; }
die() { printf '[local-slurm] error: %s\n' "$*" >&2; exit 1; }

# --- processes --------------------------------------------------------------------------------

# a live process called $2 has pid $1 (zombies do not count: an init that reaps slowly keeps them
# around for seconds, and `kill -0` still succeeds on them)
is_running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ "$stat" == "$1 ($2) "* && "${stat#*) }" != Z* ]]
}

# pid of one of our daemons if it runs (checked against the program name, so a re-used pid is not ours)
our_pid() {
  local name=$1 f="$RUN/$1.pid" pid
  [[ -s "$f" ]] || return 1
  pid=$(tr -dc '0-9' <"$f")
  [[ -n "$pid" ]] && is_running "$pid" "$name" || return 1
  echo "$pid"
}

# pids of running processes called $1 that are not ours
foreign_pids() {
  local name=$1 mine="" p out=()
  mine=$(our_pid "$name" || true)
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ "$p" != "$mine" ]] && is_running "$p" "$name" && out+=("$p")
  done
  echo "${out[*]:-}"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND (each try bounded) until it succeeds
  local secs=$1 what=$2; shift 2
  local end=$((SECONDS + secs))
  while ((SECONDS < end)); do
    timeout 10 "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "$what did not come up within ${secs}s (logs: $LOG)"
}

stop_pids() {  # stop_pids NAME... : SIGTERM our running daemons of those names together, wait, SIGKILL stragglers
  local name pid names=() pids=() n=150 i alive
  for name in "$@"; do
    if pid=$(our_pid "$name"); then
      say "stopping $name (pid $pid)"; kill -TERM "$pid" 2>/dev/null || true; names+=("$name"); pids+=("$pid")
    fi
  done
  while ((n-- > 0)); do
    alive=0
    for i in "${!pids[@]}"; do is_running "${pids[$i]}" "${names[$i]}" && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if is_running "${pids[$i]}" "${names[$i]}"; then
      say "${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for 15s: SIGKILL"; kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  for name in "$@"; do rm -f "$RUN/$name.pid"; done
}

# --- safety checks ----------------------------------------------------------------------------

refuse_if_real_slurm() {
  local f real p
  for f in /etc/slurm/slurm.conf /etc/slurm-llnl/slurm.conf; do
    [[ -e "$f" ]] || continue
    real=$(readlink -f "$f")
    [[ "$real" == "$CONF" ]] && continue
    die "a Slurm configuration exists at $f: this looks like a real Slurm installation, and this
  test cluster will not run beside it. Run the tests against a throwaway machine or container."
  done
  if [[ -n "${SLURM_CONF:-}" && "$SLURM_CONF" != "$CONF" ]]; then
    die "SLURM_CONF=$SLURM_CONF points at another Slurm configuration; unset it to use the local test cluster"
  fi
  for p in slurmctld slurmd slurmdbd; do
    real=$(foreign_pids "$p")
    [[ -z "$real" ]] || die "$p is already running (pid $real) and was not started by this script:
  a real Slurm seems to run here. Refusing to start a test cluster beside it."
  done
  if [[ -d "$HOME_DIR" && ! -e "$MARKER" && -n "$(ls -A "$HOME_DIR" 2>/dev/null)" ]]; then
    die "$HOME_DIR exists, is not empty and was not made by this script; set NEMOTRON_SLURM_HOME to another directory"
  fi
}

check_ports() {
  local name port
  for name in mariadbd:$DB_PORT slurmdbd:$DBD_PORT slurmctld:$CTLD_PORT slurmd:$SLURMD_PORT; do
    port=${name#*:}; name=${name%%:*}
    our_pid "$name" >/dev/null && continue
    if port_open "$port"; then
      die "port $port (for $name) is already in use on 127.0.0.1; choose others with NEMOTRON_SLURM_PORT / NEMOTRON_SLURM_DB_PORT"
    fi
  done
}

# --- packages ---------------------------------------------------------------------------------

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get to install them"
  say "installing ${missing[*]} (apt; under a minute with a nearby mirror)"
  # Keep the packages' own services (system munge, MariaDB, slurm) from starting at install time:
  # the Debian way is a policy-rc.d that denies service starts. Only if none is there already.
  local policy=/usr/sbin/policy-rc.d added_policy=0
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; added_policy=1
  fi
  local rc=0
  {
    if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -print -quit 2>/dev/null)" ]]; then
      apt-get update -qq
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}"; }
  } >"$LOG/apt.log" 2>&1 || rc=$?
  ((added_policy)) && rm -f "$policy"
  ((rc == 0)) || { tail -20 "$LOG/apt.log" >&2; die "apt-get install failed"; }
}

# --- configuration ----------------------------------------------------------------------------

CHANGED=0
put() {  # put FILE MODE: write stdin to FILE if its content differs
  local f=$1 mode=$2 tmp
  tmp=$(mktemp "$f.XXXXXX")
  cat >"$tmp"; chmod "$mode" "$tmp"
  if cmp -s "$tmp" "$f" 2>/dev/null; then rm -f "$tmp"; else mv -f "$tmp" "$f"; CHANGED=1; fi
}

write_config() {
  mkdir -p "$ETC" "$RUN" "$LOG" "$STATE/ctld" "$STATE/d" "$DEV" "$MUNGE" "$DB"
  touch "$MARKER"
  chmod 755 "$HOME_DIR" "$MUNGE"   # munged wants its socket directory writable by its owner only
  local i cpus mem
  for ((i = 0; i < GPUS; i++)); do   # fake GPUs: character devices aliasing /dev/null
    [[ -c "$DEV/nvidia$i" ]] || { rm -f "$DEV/nvidia$i"; mknod -m 666 "$DEV/nvidia$i" c 1 3 \
      || die "mknod failed: the fake GPU device files need CAP_MKNOD (a container without it cannot host the cluster)"; }
  done
  cpus="${NEMOTRON_SLURM_CPUS:-$(($(nproc) > 16 ? $(nproc) : 16))}"
  mem=$(awk '/MemTotal/ {m = int($2 / 1024) - 512; print (m > 1024 ? m : 1024)}' /proc/meminfo)
  [[ -s "$ETC/db.pass" ]] || { head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$ETC/db.pass"; chmod 600 "$ETC/db.pass"; }

  put "$CONF" 644 <<EOF
# Local one-node test cluster, generated by scripts/local_slurm.sh. Do not edit: it is rewritten.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this long before it may start again (Slurm default 120 s)
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# use the node shape declared below as-is (the test machine has fewer CPUs and no GPUs)
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
# fast turnaround for tests; MinJobAge stays long enough for afterok/afternotok on just-finished jobs
KillWait=2
MinJobAge=30
MessageTimeout=10
PriorityType=priority/basic
# refuse at submission what can never run here (e.g. 2 nodes) instead of pending forever
EnforcePartLimits=ALL
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# for slurmdbd connections (sacct, sacctmgr, slurmctld) this names the munge socket, not a password
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
NodeName=localhost NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$mem Gres=gpu:$GPUS State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

  put "$ETC/gres.conf" 644 <<EOF
# $GPUS fake GPUs: character devices aliasing /dev/null (a count-only line leaves the node INVAL)
AutoDetect=off
NodeName=localhost Name=gpu File=$DEV/nvidia[0-$((GPUS - 1))]
EOF

  put "$ETC/slurmdbd.conf" 600 <<EOF
# generated by scripts/local_slurm.sh
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$ETC/db.pass")
StorageLoc=slurm_acct_db
EOF
}

# --- daemons ----------------------------------------------------------------------------------

start_munged() {
  our_pid munged >/dev/null && return 0
  if [[ ! -s "$MUNGE/munge.key" ]]; then
    if command -v mungekey >/dev/null; then mungekey --create --keyfile="$MUNGE/munge.key"
    else head -c 1024 /dev/urandom >"$MUNGE/munge.key"; fi
    chmod 400 "$MUNGE/munge.key"
  fi
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  munged --force --socket="$MUNGE_SOCKET" --key-file="$MUNGE/munge.key" \
    --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" --seed-file="$MUNGE/munged.seed" \
    </dev/null 8>&- >>"$LOG/munged.out" 2>&1 || die "munged failed to start: $(tail -3 "$LOG/munged.log" 2>/dev/null)"
  wait_for 10 munged bash -c "munge --socket='$MUNGE_SOCKET' -n </dev/null | unmunge --socket='$MUNGE_SOCKET'"
}

sql() { mariadb --no-defaults --socket="$DB_SOCKET" -uroot --batch -e "$1"; }

start_mariadbd() {
  if ! our_pid mariadbd >/dev/null; then
    local opts=(--no-defaults --user=root --datadir="$DB" --socket="$DB_SOCKET" --port="$DB_PORT"
                --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$RUN/mariadbd.pid"
                --log-error="$LOG/mariadbd.log" --innodb-buffer-pool-size=128M --innodb-log-file-size=64M
                --innodb-lock-wait-timeout=900 --skip-log-bin)
    if [[ ! -d "$DB/mysql" ]]; then
      say "initialising MariaDB datadir"
      mariadb-install-db --no-defaults --user=root --datadir="$DB" --auth-root-authentication-method=socket \
        --skip-test-db >"$LOG/mariadb-install-db.log" 2>&1 || die "mariadb-install-db failed (see $LOG/mariadb-install-db.log)"
    fi
    setsid mariadbd "${opts[@]}" </dev/null 8>&- >>"$LOG/mariadbd.out" 2>&1 &
    wait_for 30 MariaDB mariadb-admin --no-defaults --socket="$DB_SOCKET" -uroot ping
  fi
  local pass; pass=$(cat "$ETC/db.pass")
  sql "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
       CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
       ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
       GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "could not prepare the accounting database"
}

start_slurmdbd() {
  if ! our_pid slurmdbd >/dev/null; then
    slurmdbd </dev/null 8>&- >>"$LOG/slurmdbd.out" 2>&1 || die "slurmdbd failed to start (see $LOG/slurmdbd.log)"
  fi
  wait_for 60 slurmdbd sacctmgr -n list cluster
}

register_accounts() {
  # idempotent: sacctmgr refuses duplicates, so add only what is missing
  sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >/dev/null
  sacctmgr -n -P list account format=account | grep -qx "$ACCOUNT" \
    || sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description="nemotron tests" Organization=nemotron >/dev/null
  sacctmgr -n -P list assoc cluster="$CLUSTER" account="$ACCOUNT" user=root format=user | grep -qx root \
    || sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" Cluster="$CLUSTER" >/dev/null
  sacctmgr -n -P list assoc cluster="$CLUSTER" account="$ACCOUNT" user=root format=user | grep -qx root \
    || die "could not register cluster/account/user with sacctmgr"
}

node_state() { sinfo -h -n localhost -o '%T' 2>/dev/null | head -1; }

start_slurm_daemons() {
  if ((CHANGED)) && { our_pid slurmctld >/dev/null || our_pid slurmd >/dev/null; }; then
    say "configuration changed: restarting slurmctld and slurmd"
    stop_pids slurmd slurmctld
  fi
  our_pid slurmctld >/dev/null || slurmctld </dev/null 8>&- >>"$LOG/slurmctld.out" 2>&1 \
    || die "slurmctld failed to start: $(tail -3 "$LOG/slurmctld.log")"
  wait_for 30 slurmctld scontrol ping
  our_pid slurmd >/dev/null || slurmd -N localhost </dev/null 8>&- >>"$LOG/slurmd.out" 2>&1 \
    || die "slurmd failed to start: $(tail -3 "$LOG/slurmd.log")"
  local n=300 st=""
  while ((n-- > 0)); do
    st=$(node_state)
    case "$st" in idle | mixed | allocated | completing) return 0 ;;
      down* | drain*) scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.1
  done
  die "node localhost is '$st' instead of idle: $(sinfo -h -R 2>/dev/null) (logs: $LOG)"
}

# --- actions ----------------------------------------------------------------------------------

print_env() {
  printf 'export %s=%q\n' SLURM_CONF "$CONF" NEMOTRON_SLURM_HOME "$HOME_DIR" NEMOTRON_SLURM_CLUSTER "$CLUSTER" \
    NEMOTRON_SLURM_PARTITION "$PARTITION" NEMOTRON_SLURM_ACCOUNT "$ACCOUNT" NEMOTRON_SLURM_GPUS_PER_NODE "$GPUS"
}

# start, stop and clean run one at a time (several test runs may share the cluster); the lock fd (8)
# is closed for every daemon, or a daemon would hold the lock for its whole life
take_lock() {
  mkdir -p "$(dirname "$HOME_DIR")"
  exec 8>>"$HOME_DIR.lock"
  flock -w 300 8 || die "another local_slurm.sh has held $HOME_DIR.lock for 5 minutes"
}

do_start() {
  [[ $(id -u) == 0 ]] || die "needs root (slurmd runs jobs as any user, and the fake GPUs need mknod)"
  [[ "$(uname -s)" == Linux ]] || die "needs Linux"
  refuse_if_real_slurm
  export SLURM_CONF="$CONF"
  local t0=$SECONDS
  mkdir -p "$LOG"; touch "$MARKER"
  install_packages
  check_ports
  write_config
  start_munged
  start_mariadbd
  start_slurmdbd
  register_accounts
  start_slurm_daemons
  say "up in $((SECONDS - t0))s: partition $PARTITION, account $ACCOUNT, node localhost with $GPUS GPUs"
  say "use it with: export SLURM_CONF=$CONF"
}

do_stop() {
  # PID files elsewhere are not ours to act on (a mistaken NEMOTRON_SLURM_HOME could name a real Slurm's)
  [[ -e "$MARKER" ]] || { say "nothing to stop: $HOME_DIR was not made by this script"; return 0; }
  export SLURM_CONF="$CONF"
  if our_pid slurmctld >/dev/null; then
    # cancel what still runs so that no job step outlives the cluster
    local jobs; jobs=$(squeue -h -o '%A' 2>/dev/null | tr '\n' ' ')
    if [[ -n "${jobs// /}" ]]; then
      say "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      local n=100
      while ((n-- > 0)) && [[ -n "$(squeue -h -t running,completing -o '%A' 2>/dev/null)" ]]; do sleep 0.1; done
    fi
  fi
  # in stages: slurmctld hands its last records to slurmdbd, which needs MariaDB and munge meanwhile
  stop_pids slurmd slurmctld
  stop_pids slurmdbd
  stop_pids mariadbd munged
  rm -f "$RUN"/*.marker
  say "stopped"
}

do_status() {
  export SLURM_CONF="$CONF"
  local d pid up=0
  echo "home:       $HOME_DIR"
  echo "SLURM_CONF: $CONF"
  for d in "${DAEMONS[@]}"; do
    if pid=$(our_pid "$d"); then printf '%-10s  running (pid %s)\n' "$d" "$pid"; up=$((up + 1))
    else printf '%-10s  not running\n' "$d"; fi
  done
  if our_pid slurmctld >/dev/null; then
    sinfo -o '%P %a %D %T %G %c %m' 2>&1 || true
    squeue 2>&1 || true
  fi
  ((up == ${#DAEMONS[@]}))
}

case "$ACTION" in
  start) take_lock; do_start ;;
  stop) take_lock; do_stop ;;
  status) do_status ;;
  env) print_env ;;
  clean)
    take_lock; do_stop
    if [[ -e "$MARKER" ]]; then rm -rf "$HOME_DIR"; say "removed $HOME_DIR"; fi ;;
  *) echo "usage: $0 start|stop|status|env|clean" >&2; exit 2 ;;
esac
