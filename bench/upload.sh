#!/usr/bin/env bash
# What sending `{{ rigrun }}` to a host costs, over a loopback sshd, whole `rigrun run`s of a
# one-step playbook (`{{ rigrun }} --version`), median of $REPEAT:
#   cold, first      the host has no copy and this machine has not sent this build before
#                    (hash and compressed copy made: the cache folder is emptied first);
#   cold host        the host has no copy; this machine has sent this build before;
#   warm             the host has this copy (only the check remains);
#   no rigrun        the same playbook with `true` instead: what a run costs without the binary.
# Beside them, raw `scp` of the same file through a ControlMaster (the floor for sending it
# uncompressed). With BEFORE=<a rigrun binary> (e.g. one built at an earlier revision), that one
# is measured the same way, in the same run.
#
#   bench/upload.sh
#   BEFORE=/tmp/rigrun-before REPEAT=5 bench/upload.sh
#
# Needs sshd (apt-get install openssh-server) and python3. Prints a Markdown table
# (docs/upload.md keeps the last one measured); $WORK keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/.."

REPEAT=${REPEAT:-3}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-upload.XXXXXX)}
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release --quiet
BINS=("$TARGET/release/rigrun")
NAMES=("rigrun")
if [ -n "${BEFORE:-}" ]; then BINS+=("$BEFORE"); NAMES+=("before ($("$BEFORE" --version | cut -d' ' -f2-))"); fi

source bench/lib/sshd.sh
{ echo "hosts:"; host_entry h; } > "$WORK/hosts.yaml"
printf 'name: up\nsteps:\n  - shell: {command: "{{ rigrun }} --version"}\n' > "$WORK/up.yaml"
printf 'name: plain\nsteps:\n  - shell: {command: "true"}\n' > "$WORK/plain.yaml"
mkdir -p "$WORK/empty"

# Seconds of one `rigrun run` of playbook $2 with binary $1.
run_once() {
  local start end
  start=$(date +%s.%N)
  XDG_CACHE_HOME="$WORK/cache" RIGRUN_HOST_BINARIES="$WORK/empty" \
    "$1" run "$WORK/$2.yaml" -i "$WORK/hosts.yaml" --runs-dir "$WORK/runs" -q >"$WORK/last.log" 2>&1 \
    || { cat "$WORK/last.log" >&2; exit 1; }
  end=$(date +%s.%N)
  python3 -c "print($end - $start)"
}
median() { python3 -c 'import sys, statistics; print(f"{statistics.median(map(float, sys.argv[1:])):.2f}")' "$@"; }

echo "| sent | size | cold, first | cold host | warm | no rigrun |"
echo "|---|---|---|---|---|---|"
for i in "${!BINS[@]}"; do
  bin=${BINS[$i]}
  first=(); cold=(); warm=(); plain=()
  for _ in $(seq "$REPEAT"); do
    rm -rf "$WORK/cache" "$WORK/work"; first+=("$(run_once "$bin" up)")
    rm -rf "$WORK/work"; cold+=("$(run_once "$bin" up)")
    warm+=("$(run_once "$bin" up)")
    plain+=("$(run_once "$bin" plain)")
  done
  size=$(du -m "$bin" | cut -f1)
  echo "| ${NAMES[$i]} | $size MB | $(median "${first[@]}") s | $(median "${cold[@]}") s | $(median "${warm[@]}") s | $(median "${plain[@]}") s |"
done

# The floor: the file itself through a master that is already up.
ssh "${SSH_OPTS[@]}" -p "$PORT" -o ControlMaster=yes -o ControlPath="$WORK/cm" -o ControlPersist=60 -fN "$USER_NAME@127.0.0.1"
for i in "${!BINS[@]}"; do
  times=()
  for _ in $(seq "$REPEAT"); do
    start=$(date +%s.%N)
    scp -q "${SSH_OPTS[@]}" -P "$PORT" -o ControlPath="$WORK/cm" "${BINS[$i]}" "$USER_NAME@127.0.0.1:$WORK/scp-copy"
    end=$(date +%s.%N)
    times+=("$(python3 -c "print($end - $start)")")
  done
  echo "| raw scp of ${NAMES[$i]}'s file, master up | $(du -m "${BINS[$i]}" | cut -f1) MB | $(median "${times[@]}") s | | | |"
done
ssh "${SSH_OPTS[@]}" -p "$PORT" -o ControlPath="$WORK/cm" -O exit "$USER_NAME@127.0.0.1" 2>/dev/null || true
echo
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
