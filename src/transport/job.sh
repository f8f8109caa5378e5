# rigrun's detached jobs on a host; the protocol is described in job.rs.
# $1 action (run, attach, stop, lease, close)  $2 the run's jobs folder  $3 job name  $4 marker
# $5 what stdin's end means (stop: this machine; keep: SSH, where it may be a lost connection)
# $6 $7 stdout and stderr bytes already received (attach)  $8 command (run) or a stop's reason
# $9 the lease in seconds  $10 (end) how long TERM may take, in tenths of a second
m=$4; d=$2; j=$2/$3
# The host's boot id: a job started under another one died with the host (a reboot), whatever
# its pid file says (after a reboot, that pid may be another process's).
boot=; [ -r /proc/sys/kernel/random/boot_id ] && read -r boot < /proc/sys/kernel/random/boot_id
printf '%s:start\n' "$m"; printf '%s:start\n' "$m" >&2
exec 3<&0 </dev/null
finish() { printf '%s:end\n' "$m"; printf '%s:end %s\n' "$m" "$1" >&2; exit 0; }
# Whether job $j was started in this boot (jobs of earlier releases, without .boot, count so).
this_boot() { [ ! -s "$j.boot" ] || { read -r was < "$j.boot"; [ "$was" = "$boot" ]; }; }
# The job's process group in $p; none when the job was started before a reboot.
group() { p=; [ -s "$j.pid" ] && read -r p < "$j.pid"; this_boot || p=; }
# Whether process group $p exists (zombies included): what stop waits for, unless live=alive.
exists() { kill -0 -"$p" 2>/dev/null; }
# Whether process group $p has a process that is not a zombie (where no init reaps orphans,
# the exited stay in the table; they hold no memory). Without ps: whether the group exists.
alive() {
  if s=$(ps -e -o pgid=,stat= 2>/dev/null); then
    printf '%s\n' "$s" | awk -v g="$p" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'
  else kill -0 -"$p" 2>/dev/null; fi
}
stop() {
  group; [ -n "$p" ] || return 0
  [ -s "$j.rc" ] || { echo "$1" > "$j.stopped"; } 2>/dev/null
  kill -TERM -"$p" 2>/dev/null || return 0
  n=0; while ${live:-exists} && [ "$n" -lt "${grace:-20}" ]; do sleep 0.1; n=$((n+1)); done
  kill -KILL -"$p" 2>/dev/null; return 0
}
# The pids of process group $p, to look for on the GPUs once the group is gone.
members() { pids=; [ -n "$p" ] && pids=$(ps -e -o pid=,pgid= 2>/dev/null | awk -v g="$p" '$2 == g { print $1 }'); }
# Waits (up to 30 s) until no pid of $pids holds GPU memory, where nvidia-smi exists.
gpu_free() {
  command -v nvidia-smi >/dev/null 2>&1 && [ -n "$pids" ] || return 0
  n=0; while :; do
    left=; for q in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do
      for x in $pids; do [ "$q" = "$x" ] && left="$left $q"; done; done
    [ -z "$left" ] && return 0
    [ "$n" -ge 30 ] && return 1
    sleep 1; n=$((n+1))
  done
}
# Whether the disk holding the jobs folder is full (what a write there failed of, then).
full() { a=$(df -P "$d" 2>/dev/null | awk 'NR == 2 { print $4 }'); [ "$a" = 0 ]; }
# A write in the jobs folder failed: the disk is full, or $1 says what else.
unwritable() { if full; then finish full; else finish "error $1"; fi; }
outcome() {
  if [ -s "$j.rc" ]; then read -r rc < "$j.rc"
  elif [ -s "$j.stopped" ]; then read -r rc < "$j.stopped"; rc="stopped $rc"
  elif full; then rc=full
  else rc=gone; fi
}
listen() {
  ( while read -r line <&3; do case $line in stop*) stop "${line#stop }"; exit 0;; esac; done
    [ "$5" = stop ] && stop "rigrun let go" ) >/dev/null 2>&1 &
  listener=$!
}
# The job's own session: its pid is its process group; its output goes to files first, and to
# this channel while the channel lasts (tee ignores a closed channel and goes on with the file).
# The command runs in a subshell, as `sh -c` would run it but without one more exec (its
# positional parameters are emptied first). The exit status has its room taken before the
# command starts (`.end`: when `.rc` cannot be written, the status is written into it in place,
# and it is renamed `.rc`), so that a disk the command fills cannot lose it; a disk too full to
# take the pid and that room runs nothing (`full`). The rooms are removed at close, not by each
# job: an `rm` per job was a fork and an exec on every step's path.
supervise='__rigrun_job=$1; __rigrun_command=$2; set --
{ echo $$ > "$__rigrun_job.pid" && printf "%32s\n" "" > "$__rigrun_job.end"; } 2>/dev/null || exit 0
( ( (eval "$__rigrun_command"); r=$?; { printf "%s\n" $r > "$__rigrun_job.rc" || { printf "%s\n" $r 1<> "$__rigrun_job.end" && mv -f "$__rigrun_job.end" "$__rigrun_job.rc"; }; } 2>/dev/null ) 2>&1 >&3 3>&- | (trap "" PIPE; exec tee -a "$__rigrun_job.err" >&2 2>/dev/null) ) 3>&1 | (trap "" PIPE; exec tee -a "$__rigrun_job.out" 2>/dev/null)'
# The run's watchdog: once the lease has not been renewed for $2 seconds it stops every job
# still running. It ends at close (`done`), or when its folder is gone (nothing left to stop).
watch='cd "$1" || exit 1
echo $$ > watchdog.pid; printf "%s\n" "$3" > watchdog.boot; : > seen; idle=0; termed=
while [ ! -e done ] && [ -e lease ]; do
  sleep 1
  if [ lease -nt seen ]; then : > seen; idle=0; else idle=$((idle+1)); fi
  [ "$idle" -lt "$2" ] && continue
  for f in *.pid; do
    [ "$f" = watchdog.pid ] || [ -s "${f%.pid}.rc" ] && continue
    was=; [ -s "${f%.pid}.boot" ] && read -r was < "${f%.pid}.boot"; [ -n "$was" ] && [ "$was" != "$3" ] && continue
    read -r p < "$f" && [ -n "$p" ] && echo lease > "${f%.pid}.stopped" && kill -TERM -"$p" 2>/dev/null && termed="$termed $p"
  done
  sleep 2
  for p in $termed; do kill -KILL -"$p" 2>/dev/null; done
  break
done
rm -f watchdog.pid'
command -v setsid >/dev/null 2>&1 || finish "error setsid (util-linux) is not installed on the host"
# The run's folder, its lease renewed, and its watchdog running.
lease_up() {
  [ -d "$2" ] || mkdir -p "$2" 2>/dev/null || unwritable "cannot create $2"
  { : > "$2/lease"; } 2>/dev/null || unwritable "cannot write in $2"
  [ -e "$2/done" ] && rm -f "$2/done"
  w=; [ -s "$2/watchdog.pid" ] && read -r w < "$2/watchdog.pid"
  wb=; [ -s "$2/watchdog.boot" ] && read -r wb < "$2/watchdog.boot"
  # A watchdog of another boot died with it (its pid may be another process's now).
  if [ -z "$w" ] || { [ -n "$wb" ] && [ "$wb" != "$boot" ]; } || ! kill -0 "$w" 2>/dev/null; then
    setsid sh -c "$watch" rigrun "$2" "$9" "$boot" >/dev/null 2>&1 3<&- &
  fi
}
case $1 in
lease) lease_up "$@"; finish "0 $boot";;
close)
  # Waits for live processes only: where nothing reaps them, the exited stay in the table as
  # zombies, and waiting on those held every close for the whole grace.
  live=alive
  for f in "$2"/*.pid; do
    [ -e "$f" ] && [ "$f" != "$2/watchdog.pid" ] || continue
    j=${f%.pid}; [ -s "$j.rc" ] || stop interrupted
  done
  # `done` ends the watchdog at its next tick.
  : > "$2/done"
  set -- "$2"/*.end; [ -e "$1" ] && rm -f "$@"
  finish 0;;
stop) stop "$8"; outcome; finish "$rc";;
end)
  # Every job whose name matches the pattern $3, stopped and gone; their process groups said.
  grace=${10:-20}; live=alive; ended=
  for f in "$2"/$3.pid; do
    [ -s "$f" ] && [ "$f" != "$2/watchdog.pid" ] || continue
    j=${f%.pid}; group; members; stop ended
    n=0; while alive && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n+1)); done
    alive && finish "error process group $p is still there 10s after SIGKILL"
    gpu_free || finish "error pids$left of process group $p still hold GPU memory (nvidia-smi) 30s after it was stopped"
    ended="$ended $p"
  done
  finish "0$ended";;
run)
  lease_up "$@"
  if [ ! -e "$j.out" ]; then
    { : > "$j.out" && : > "$j.err" && printf '%s\n' "$boot" > "$j.boot"; } 2>/dev/null || unwritable "cannot write in $2"
    setsid sh -c "$supervise" rigrun "$j" "$8" 3<&- &
    sup=$!
    listen "$@"
    wait "$sup"
    kill "$listener" 2>/dev/null
    outcome; finish "$rc"
  fi
  # Started before, by a run now resumed: followed from its first byte.
  set -- attach "$2" "$3" "$4" "$5" 0 0 "$8" "$9";;
esac
[ -e "$j.out" ] || finish gone
# Started before a reboot and not ended: its processes died with the host; its files are not
# its result.
[ -s "$j.rc" ] || [ -s "$j.stopped" ] || this_boot || finish "rebooted $boot"
n=0; while [ ! -s "$j.pid" ] && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n+1)); done
group
listen "$@"
if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
  tail -c +$(($6 + 1)) -s 0.2 --pid="$p" -f "$j.out" 2>/dev/null & a=$!
  tail -c +$(($7 + 1)) -s 0.2 --pid="$p" -f "$j.err" >&2 2>/dev/null & b=$!
  wait "$a"; wait "$b"
else
  tail -c +$(($6 + 1)) "$j.out"; tail -c +$(($7 + 1)) "$j.err" >&2
fi
kill "$listener" 2>/dev/null
outcome; finish "$rc"
