#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, every file of it under STATE_DIR: munged on a socket
# of its own, slurmctld and slurmd as root, one partition `debug` holding this node. What the
# Slurm host kind (issue 25) is developed and tested against; docs/slurm.md says what was found.
#
#   bash tests/slurm/cluster.sh start  STATE_DIR   starts it; prints `export SLURM_CONF=...`
#   bash tests/slurm/cluster.sh status STATE_DIR   sinfo's view; exit 1 when it is down
#   bash tests/slurm/cluster.sh stop   STATE_DIR   stops the three daemons by their pids
#
# With NODE_HIDES=DIR in the environment, `start` runs slurmd in a mount namespace of its own
# where an empty tmpfs covers DIR: the node does not share that folder with the login node.
#
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge packages
# (apt-get install -y slurmctld slurmd slurm-client munge).
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -eq 2 ] || usage
action=$1
state=$(mkdir -p "$2" && cd "$2" && pwd)
conf=$state/slurm.conf
node=$(hostname -s)

for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null || {
    echo "cluster.sh: $tool is missing: apt-get install -y slurmctld slurmd slurm-client munge" >&2
    exit 1
  }
done

# Waits up to $1 tenths of a second for the command after it to succeed.
wait_for() {
  local n=$1; shift
  until "$@" >/dev/null 2>&1; do
    n=$((n - 1)); [ "$n" -gt 0 ] || return 1
    sleep 0.1
  done
}

stop_pid() {
  local file=$1
  [ -s "$file" ] || return 0
  local pid; pid=$(cat "$file")
  kill "$pid" 2>/dev/null || return 0
  wait_for 100 sh -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

write_config() {
  local cpus memory
  cpus=$(nproc)
  memory=$(( $(awk '/MemTotal/ { print $2 }' /proc/meminfo) / 1024 - 1024 ))
  mkdir -p "$state/ctld" "$state/slurmd" "$state/munge"
  cat > "$conf" <<CONF
ClusterName=rigrun-test
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$state/munge/socket
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/slurmd
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
SlurmctldPort=$(( 16817 + RANDOM % 1000 ))
SlurmdPort=$(( 17818 + RANDOM % 1000 ))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/backfill
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
NodeName=$node CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
}

start() {
  if [ -s "$state/slurmctld.pid" ] && kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
    echo "cluster.sh: already running in $state" >&2
  else
    write_config
    # munged insists on a key only its user can read and a folder of its own for the socket.
    [ -s "$state/munge/key" ] || { dd if=/dev/urandom bs=1 count=1024 status=none > "$state/munge/key"; }
    chmod 700 "$state/munge"; chmod 400 "$state/munge/key"
    munged --force --socket="$state/munge/socket" --key-file="$state/munge/key" \
      --pid-file="$state/munge/pid" --log-file="$state/munge/log" --seed-file="$state/munge/seed"
    wait_for 50 test -S "$state/munge/socket"
    SLURM_CONF=$conf slurmctld -f "$conf"
    wait_for 100 env SLURM_CONF="$conf" scontrol ping
    if [ -n "${NODE_HIDES:-}" ]; then
      mkdir -p "$NODE_HIDES"
      SLURM_CONF=$conf unshare --mount --propagation private \
        sh -c 'mount -t tmpfs node-only "$1" && exec slurmd -f "$2"' sh "$NODE_HIDES" "$conf"
    else
      SLURM_CONF=$conf slurmd -f "$conf"
    fi
    if ! wait_for 300 sh -c "SLURM_CONF='$conf' sinfo -h -o %T | grep -qx idle"; then
      echo "cluster.sh: the node did not come up idle; see $state/slurmctld.log and slurmd.log" >&2
      SLURM_CONF=$conf sinfo -N -l >&2 || true
      exit 1
    fi
  fi
  echo "export SLURM_CONF=$conf"
}

case $action in
start) start ;;
status) SLURM_CONF=$conf sinfo -N -o '%N %P %T %C' ;;
stop)
  # Jobs first: slurmstepd and the jobs' processes would outlive slurmd.
  if [ -s "$state/slurmctld.pid" ] && kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
    SLURM_CONF=$conf squeue -h -o %i 2>/dev/null | xargs -r env SLURM_CONF="$conf" scancel 2>/dev/null || true
    wait_for 100 sh -c "[ -z \"\$(SLURM_CONF='$conf' squeue -h -o %i)\" ]" || true
  fi
  stop_pid "$state/slurmd.pid"
  stop_pid "$state/slurmctld.pid"
  stop_pid "$state/munge/pid" ;;
*) usage ;;
esac
