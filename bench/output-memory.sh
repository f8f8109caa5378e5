#!/usr/bin/env bash
# What command output costs rigrun in memory: a point that prints 200 MB of lines, one that
# prints 500 MB in one line without a newline, and 200 MB shown live to a terminal that reads
# slowly (a pipe drained at ~1 MB/s). Prints rigrun's peak RSS for each (the goal: ≤ 64 MB) and
# checks that the point's log holds every byte.
#
#   bench/output-memory.sh            # SIZE_MB=200 LONG_MB=500
set -euo pipefail
cd "$(dirname "$0")/.."

SIZE_MB=${SIZE_MB:-200}
LONG_MB=${LONG_MB:-500}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-output.XXXXXX)}
mkdir -p "$WORK"
cargo build --release --quiet
BIN=$PWD/target/release/rigrun
echo "hosts: {here: {connection: local, workdir: $WORK/wd}}" >"$WORK/hosts.yaml"

# A playbook of one point running $1 (a YAML plain scalar: no quoting needed).
playbook() {
  printf 'name: output\nsteps:\n  - run-sweep:\n      matrix: {n: [1]}\n      command: %s\n' "$1" >"$WORK/p.yaml"
}

# Runs rigrun on the playbook with stderr into $1 (a command reading it); prints peak RSS in MB
# (rusage of the child, by wait4) and the bytes in the point's stdout log.
measure() {
  rm -rf "$WORK/runs"
  python3 - "$BIN" "$WORK" "$1" "$2" <<'PY'
import glob, os, subprocess, sys
bin, work, reader, quiet = sys.argv[1:]
args = [bin, "run", f"{work}/p.yaml", "-i", f"{work}/hosts.yaml", "--runs-dir", f"{work}/runs"]
if quiet == "quiet":
    args.append("-q")
drain = subprocess.Popen(reader, shell=True, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=drain.stdin)
drain.stdin.close()
_, status, usage = os.wait4(child.pid, 0)
drain.wait()
log = glob.glob(f"{work}/runs/[0-9]*/hosts/here/01-run-sweep/001-*.stdout.log")[0]
print(f"{usage.ru_maxrss / 1024:.0f} {os.path.getsize(log)} {os.waitstatus_to_exitcode(status)}")
PY
}

echo "| output | shown | rigrun peak RSS MB | bytes logged | expected |"
echo "|---|---|---:|---:|---:|"
lines_cmd="head -c $((SIZE_MB * 3 / 4 * 1048576)) /dev/urandom | base64 -w 100"
expected_lines=$(( (SIZE_MB * 3 / 4 * 1048576 + 2) / 3 * 4 ))
expected_lines=$(( expected_lines + (expected_lines + 99) / 100 ))
playbook "$lines_cmd"
read -r rss bytes _ < <(measure "cat >/dev/null" quiet)
echo "| ${SIZE_MB} MB of 100-byte lines | no (-q) | $rss | $bytes | $expected_lines |"
read -r rss bytes _ < <(measure "python3 -c 'import sys,time
while sys.stdin.buffer.read(65536): time.sleep(0.05)'" shown)
echo "| ${SIZE_MB} MB of 100-byte lines | to a slow terminal (~1 MB/s) | $rss | $bytes | $expected_lines |"
playbook "head -c $((LONG_MB * 1048576)) /dev/zero | tr '\\0' x"
read -r rss bytes _ < <(measure "cat >/dev/null" shown)
echo "| ${LONG_MB} MB in one line, no newline | yes | $rss | $bytes | $((LONG_MB * 1048576 + 1)) |"
