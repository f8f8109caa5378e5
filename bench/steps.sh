#!/usr/bin/env bash
# What a trivial step costs, in one run, across the tools people would otherwise use: a
# $STEPS-step playbook (`true` each) on 1, 2 and 16 hosts, whole runs (connect, steps,
# disconnect), by
#   - a raw `ssh` loop through a ControlMaster per host (start the master, $STEPS commands, stop
#     it; the hosts' loops in parallel): the floor every tool pays on top of;
#   - rigrun: $STEPS `shell:` steps, and a `run-sweep` of $STEPS points, on hosts that have
#     rigrun's copy (any run that used `{{ rigrun }}` there leaves it: each job is then
#     `rigrun job-run`); and the steps again on hosts without it (each job is then job.sh);
#   - rigrun's steps again with the key exchange pyinfra negotiates (curve25519-sha256: paramiko
#     has no post-quantum one), since at 16 hosts the connections' key exchanges weigh most;
#   - pyinfra 3 and Ansible (ansible-core), installed from PyPI into a venv of their own
#     ($VENV, kept between runs), each with its defaults, all hosts in parallel.
# Every host is the same loopback sshd (bench/lib/sshd.sh), reached as the user below, with
# strict host keys. The runs are interleaved (repeat r of every tool and host count, then
# repeat r+1), and the median of $REPEAT is printed with its ratio to the raw loop.
#
#   bench/steps.sh                    # LOGIN=quiet: a user whose rc files are empty
#   LOGIN=slow bench/steps.sh         # root, whose .bashrc runs `pyenv init` (a slow login shell)
#   HOSTS="1 2" REPEAT=3 TOOLS="raw rigrun" bench/steps.sh
#   BASELINE_REV=<rev> bench/steps.sh # also rigrun built at that revision
#
# Needs root (LOGIN=quiet creates the user `rigrun-bench`), sshd (apt-get install
# openssh-server), python3 with venv, and PyPI for the venv. Prints a Markdown table (docs/detached.md
# keeps the last one measured); $WORK keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${STEPS:-20}
HOSTS=${HOSTS:-"1 2 16"}
REPEAT=${REPEAT:-5}
LOGIN=${LOGIN:-quiet}
TOOLS=${TOOLS:-"raw rigrun pyinfra ansible"}
VENV=${VENV:-$HOME/.cache/rigrun/bench-venv}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-steps.XXXXXX)}
TARGET=${CARGO_TARGET_DIR:-target}
QUIET_USER=rigrun-bench

cargo build --release --quiet
RIGRUNS=("$TARGET/release/rigrun")
# An empty host-binaries folder: the copy sent to the hosts is this very rigrun.
export RIGRUN_HOST_BINARIES=$WORK/host-binaries
mkdir -p "$RIGRUN_HOST_BINARIES"
if [ -n "${BASELINE_REV:-}" ]; then
  base=$WORK/baseline-src
  git worktree add --detach -q "$base" "$BASELINE_REV"
  (cd "$base" && cargo build --release --quiet --target-dir "$WORK/baseline-target")
  git worktree remove --force "$base"   # the binary is all it was for
  RIGRUNS+=("$WORK/baseline-target/release/rigrun")
fi

case " $TOOLS " in *" pyinfra "*|*" ansible "*)
  if [ ! -x "$VENV/bin/pyinfra" ] || [ ! -x "$VENV/bin/ansible-playbook" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet "pyinfra>=3,<4" "ansible-core>=2.16,<3"
  fi;;
esac

source bench/lib/sshd.sh
case $LOGIN in
quiet)
  # A plain user whose login shell reads empty rc files: what a step costs shows undiluted.
  id "$QUIET_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$QUIET_USER"
  # No password, yet not locked: sshd refuses a locked account (without PAM) even with a key.
  usermod -p '*' "$QUIET_USER"
  home=$(getent passwd "$QUIET_USER" | cut -d: -f6)
  for rc in .bashrc .profile .bash_profile .bash_logout; do : > "$home/$rc"; done
  chown "$QUIET_USER:" "$home"/.bash*  "$home/.profile"
  # sshd reads the authorized key as that user.
  chmod 755 "$WORK"; chmod 644 "$WORK/client_key.pub"
  USER_NAME=$QUIET_USER
  HOST_WORKDIR=$home/work;;
slow) HOST_WORKDIR=$WORK/work;;
*) echo "LOGIN must be quiet or slow, not $LOGIN" >&2; exit 2;;
esac

# The playbooks, inventories and deploy files for $n hosts (h1..hn); hosts-jobsh-$n.yaml has
# them work in a folder where rigrun's copy never goes.
for n in $HOSTS; do
  { echo "hosts:"; for i in $(seq "$n"); do host_entry "h$i"; done; } > "$WORK/hosts-$n.yaml"
  { echo "hosts:"; for i in $(seq "$n"); do HOST_WORKDIR=$HOST_WORKDIR-jobsh host_entry "h$i"; done; } \
    > "$WORK/hosts-jobsh-$n.yaml"
  # The key exchange pyinfra's paramiko negotiates (it has no post-quantum one); OpenSSH's
  # default, sntrup761x25519, costs each connection about twice the CPU on both ends.
  { echo "hosts:"; for i in $(seq "$n"); do SSH_EXTRA="KexAlgorithms: curve25519-sha256" host_entry "h$i"; done; } \
    > "$WORK/hosts-kex-$n.yaml"
  {
    echo "[bench]"
    for i in $(seq "$n"); do
      # Each host its own ControlMaster, as rigrun and the raw loop have (the default path is
      # a hash of address, port and user, which every host here shares).
      echo "h$i ansible_host=127.0.0.1 ansible_port=$PORT ansible_ssh_extra_args='-o ControlPath=$WORK/ans-%C-h$i'"
    done
    echo "[bench:vars]"
    echo "ansible_user=$USER_NAME"
    echo "ansible_ssh_private_key_file=$WORK/client_key"
    echo "ansible_ssh_common_args='-o UserKnownHostsFile=$WORK/known_hosts -o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes'"
    echo "ansible_python_interpreter=/usr/bin/python3"
  } > "$WORK/ansible-$n.ini"
  python3 - "$WORK/pyinfra-$n.py" "$n" "$PORT" "$USER_NAME" "$WORK" <<'PY'
import sys
path, n, port, user, work = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
data = {"ssh_hostname": "127.0.0.1", "ssh_port": int(port), "ssh_user": user,
        "ssh_key": f"{work}/client_key", "ssh_known_hosts_file": f"{work}/known_hosts",
        "ssh_strict_host_key_checking": "yes"}
with open(path, "w") as f:
    f.write(f"hosts = [(f'h{{i}}', {data!r}) for i in range(1, {n} + 1)]\n")
PY
done
python3 - "$WORK" "$STEPS" <<'PY'
import sys
work, steps = sys.argv[1], int(sys.argv[2])
with open(f"{work}/steps.yaml", "w") as f:
    f.write("name: trivial-steps\nsteps:\n")
    f.write("".join(f"  - shell: {{name: step{i}, command: \"true\"}}\n" for i in range(steps)))
with open(f"{work}/sweep.yaml", "w") as f:
    # A record per point (`echo` is a shell builtin): a sweep that measures nothing fails.
    f.write("name: trivial-sweep\nsteps:\n  - run-sweep:\n      command: \"echo '{\\\"i\\\": {{ i }}}'\"\n")
    f.write("      matrix: {i: [%s]}\n" % ", ".join(str(i) for i in range(steps)))
with open(f"{work}/copy.yaml", "w") as f:
    f.write("name: rigrun-copy\nsteps:\n  - shell: {name: copy, command: \"{{ rigrun }} --version\"}\n")
with open(f"{work}/deploy.py", "w") as f:
    f.write("from pyinfra.operations import server\n")
    f.write(f"for i in range({steps}):\n    server.shell(name=f'step{{i}}', commands=['true'])\n")
with open(f"{work}/play.yml", "w") as f:
    f.write("- hosts: bench\n  tasks:\n")
    f.write("".join(f"    - name: step{i}\n      ansible.builtin.command: \"true\"\n" for i in range(steps)))
PY

ssh_to() { ssh -p "$PORT" "${SSH_OPTS[@]}" -S "$WORK/ctl-$1" "$USER_NAME@127.0.0.1" "${@:2}"; }
master() { ssh -p "$PORT" "${SSH_OPTS[@]}" -M -S "$WORK/ctl-$1" -f -N -o ControlPersist=60 "$USER_NAME@127.0.0.1"; }
raw_loop() {
  master "$1"
  for _ in $(seq "$STEPS"); do ssh_to "$1" true; done
  ssh_to "$1" -O exit 2>/dev/null
}
raw() {
  local pids=()
  for i in $(seq "$1"); do raw_loop "h$i" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
}
rigrun_with() { "$1" run "$2" -i "$WORK/$3.yaml" --runs-dir "$WORK/runs" -q; }
rigrun() { rigrun_with "${RIGRUNS[0]}" "$WORK/steps.yaml" "hosts-$1"; }
rigrun_sweep() { rigrun_with "${RIGRUNS[0]}" "$WORK/sweep.yaml" "hosts-$1"; }
rigrun_jobsh() { rigrun_with "${RIGRUNS[0]}" "$WORK/steps.yaml" "hosts-jobsh-$1"; }
rigrun_kex() { rigrun_with "${RIGRUNS[0]}" "$WORK/steps.yaml" "hosts-kex-$1"; }
rigrun_baseline() { rigrun_with "${RIGRUNS[1]}" "$WORK/steps.yaml" "hosts-$1"; }

# rigrun's copy on the hosts (they share one workdir), as a run with `{{ rigrun }}` leaves it.
case " $TOOLS " in *" rigrun "*)
  rigrun_with "${RIGRUNS[0]}" "$WORK/copy.yaml" "hosts-${HOSTS%% *}" >"$WORK/copy.log" 2>&1 \
    || { echo "could not put rigrun's copy on the hosts: $(tail -3 "$WORK/copy.log")" >&2; exit 1; };;
esac
pyinfra() { "$VENV/bin/pyinfra" -y "$WORK/pyinfra-$1.py" "$WORK/deploy.py"; }
ansible() {
  ANSIBLE_HOST_KEY_CHECKING=True ANSIBLE_FORKS=$1 ANSIBLE_LOCAL_TEMP=$WORK/ansible-tmp \
    "$VENV/bin/ansible-playbook" -i "$WORK/ansible-$1.ini" "$WORK/play.yml"
}

COLUMNS_=()
for t in $TOOLS; do
  COLUMNS_+=("$t")
  [ "$t" = rigrun ] && COLUMNS_+=(rigrun_sweep rigrun_jobsh rigrun_kex)
  [ "$t" = rigrun ] && [ ${#RIGRUNS[@]} -gt 1 ] && COLUMNS_+=(rigrun_baseline)
done

# Seconds "$@" took; nan (and its log's tail on stderr) when it failed: a result too.
timed() {
  local start end log=$WORK/last.log
  rm -rf "$WORK/runs"
  start=$(date +%s.%N)
  if ! "$@" >"$log" 2>&1; then echo "failed: $* $(tail -3 "$log")" >&2; echo nan; return; fi
  end=$(date +%s.%N)
  python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$end"
}

: > "$WORK/times"
for r in $(seq "$REPEAT"); do
  for n in $HOSTS; do
    for t in "${COLUMNS_[@]}"; do
      echo "$t $n $(timed "$t" "$n")" >> "$WORK/times"
    done
  done
  echo "repeat $r of $REPEAT done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

# Read whole: Ansible exits 250 on the broken pipe a `head` would leave it.
ansible_version=$("$VENV/bin/ansible" --version 2>/dev/null || true)
versions="$("$VENV/bin/pyinfra" --version 2>/dev/null || true), ${ansible_version%%$'\n'*}"
python3 - "$WORK/times" "$LOGIN" "$STEPS" "$REPEAT" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$versions" "${COLUMNS_[@]}" <<'PY'
import statistics, sys
path, login, steps, repeat, cores, load, versions, *columns = sys.argv[1:]
times = {}
for line in open(path):
    tool, n, t = line.split()
    times.setdefault((tool, int(n)), []).append(float(t))
hosts = sorted({n for _, n in times})
names = {"raw": "raw `ssh` loop (ControlMaster)", "rigrun": "rigrun, shell steps",
         "rigrun_sweep": "rigrun, sweep points",
         "rigrun_jobsh": "rigrun, shell steps, host without rigrun's copy (job.sh)",
         "rigrun_kex": "rigrun, shell steps, pyinfra's key exchange (curve25519)",
         "rigrun_baseline": "rigrun at BASELINE_REV",
         "pyinfra": "pyinfra", "ansible": "Ansible"}
def median(tool, n):
    ts = times.get((tool, n), [])
    return float("nan") if not ts or any(t != t for t in ts) else statistics.median(ts)
print(f"| {steps} trivial steps | " + " | ".join(f"{n} host{'s' if n > 1 else ''}" for n in hosts) + " |")
print("|---|" + "---|" * len(hosts))
for tool in columns:
    cells = []
    for n in hosts:
        t, raw = median(tool, n), median("raw", n)
        if t != t:
            cells.append("failed (see the log)")
        elif tool == "raw" or raw != raw:
            cells.append(f"{t:.2f} s")
        else:
            cells.append(f"{t:.2f} s (×{t / raw:.2f})")
    print(f"| {names[tool]} | " + " | ".join(cells) + " |")
print(f"\nLogin shell: {login}. Median of {repeat} interleaved runs; ×: the tool's time over the raw loop's. "
      f"{cores} cores shared by the tools and sshd; load average at the end {load}. {versions}.")
PY
