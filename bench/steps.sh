#!/usr/bin/env bash
# What a step costs on the detached path (every point and shell command runs in its own session
# on the host, output to files and live through tee, a lease renewed), against a raw `ssh` loop
# through a ControlMaster on the same loopback sshd in the same run:
#   1. trivial commands per second through one host (a sweep of $POINTS points of `true`, timed
#      by the step's own seconds; raw: $POINTS `ssh -S master host true` one after another);
#   2. a $STEPS-step playbook (`shell: true` each) on 1 and $FLEET hosts, whole runs (connect,
#      facts, steps, close) against a loop per host that starts a master, runs $STEPS commands
#      and stops it, the hosts' loops in parallel.
# With BASELINE_REV=<git revision>, the same runs of rigrun built at that revision (e.g. the one
# before detached jobs, whose commands ran attached to their channel) are measured beside.
#
#   bench/steps.sh
#   POINTS=100 FLEET=8 BASELINE_REV=fdf6cfb bench/steps.sh
#
# Needs sshd (apt-get install openssh-server) and python3. Prints a Markdown table (docs/bench.md
# keeps the last one measured); $WORK keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/.."

POINTS=${POINTS:-200}
STEPS=${STEPS:-20}
FLEET=${FLEET:-16}
REPEAT=${REPEAT:-3}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-steps.XXXXXX)}
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release --quiet
BINS=("$TARGET/release/rigrun")
NAMES=("rigrun")
if [ -n "${BASELINE_REV:-}" ]; then
  base=$WORK/baseline-src
  git worktree add --detach -q "$base" "$BASELINE_REV"
  (cd "$base" && cargo build --release --quiet --target-dir "$WORK/baseline-target")
  git worktree remove --force "$base"   # the binary is all it was for
  BINS+=("$WORK/baseline-target/release/rigrun")
  NAMES+=("rigrun at $BASELINE_REV")
fi

source bench/lib/sshd.sh

{ echo "hosts:"; host_entry h1; } > "$WORK/one.yaml"
{ echo "hosts:"; for i in $(seq "$FLEET"); do host_entry "h$i"; done; } > "$WORK/fleet.yaml"
python3 - "$WORK" "$POINTS" "$STEPS" <<'PY'
import sys
work, points, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(f"{work}/sweep.yaml", "w") as f:
    f.write("name: trivial-sweep\nsteps:\n  - run-sweep:\n      command: \"true\"\n")
    f.write("      matrix: {i: [%s]}\n" % ", ".join(str(i) for i in range(points)))
with open(f"{work}/steps.yaml", "w") as f:
    f.write("name: twenty-steps\nsteps:\n")
    f.write("".join("  - shell: {name: step%d, command: \"true\"}\n" % i for i in range(steps)))
PY

# Seconds of the last run's sweep step, from its journal.
sweep_seconds() {
  cat "$WORK"/runs/[0-9]*/events.jsonl | python3 -c '
import json, sys
print(next(e["seconds"] for e in map(json.loads, sys.stdin) if e["event"] == "step_finished"))'
}

# Runs "$@" $REPEAT times; prints the fastest wall time in seconds (or, with STEP=1, the
# fastest sweep step as the journal timed it).
best() {
  local best="" t
  for _ in $(seq "$REPEAT"); do
    rm -rf "$WORK/runs"
    local start=$(date +%s.%N)
    # A failed run is a result too (printed as such), not the end of the benchmark.
    if ! "$@" >"$WORK/last.log" 2>&1; then
      echo "failed: $* $(tail -3 "$WORK/last.log")" >&2
      echo nan
      return
    fi
    t=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
    [ "${STEP:-0}" = 1 ] && t=$(sweep_seconds)
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(not $t < $best)"; then best=$t; fi
  done
  echo "$best"
}

ssh_to() { ssh -p "$PORT" "${SSH_OPTS[@]}" -S "$WORK/ctl-$1" "$USER_NAME@127.0.0.1" "${@:2}"; }
master() { ssh -p "$PORT" "${SSH_OPTS[@]}" -M -S "$WORK/ctl-$1" -f -N -o ControlPersist=60 "$USER_NAME@127.0.0.1"; }
# One host's raw loop: a master, $2 commands through it, the master stopped.
raw_loop() {
  master "$1"
  for _ in $(seq "$2"); do ssh_to "$1" true; done
  ssh_to "$1" -O exit 2>/dev/null
}
raw_fleet() {
  local pids=()
  for i in $(seq "$1"); do raw_loop "f$i" "$STEPS" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
}
raw_commands() { for _ in $(seq "$POINTS"); do ssh_to cmd true; done; }

master cmd
RAW_CMD=$(best raw_commands)
ssh_to cmd -O exit 2>/dev/null
RAW_ONE=$(best raw_loop one "$STEPS")
RAW_FLEET=$(best raw_fleet "$FLEET")

rows=()
for n in "${!BINS[@]}"; do
  bin=${BINS[$n]}
  run() { "$bin" run "$1" -i "$2" --runs-dir "$WORK/runs" -q; }
  sweep=$(STEP=1 best run "$WORK/sweep.yaml" "$WORK/one.yaml")
  one=$(best run "$WORK/steps.yaml" "$WORK/one.yaml")
  fleet=$(best run "$WORK/steps.yaml" "$WORK/fleet.yaml")
  rows+=("${NAMES[$n]}|$sweep|$one|$fleet")
done

python3 - "$POINTS" "$STEPS" "$FLEET" "$(nproc)" "$RAW_CMD" "$RAW_ONE" "$RAW_FLEET" "${rows[@]}" <<'PY'
import sys
points, steps, fleet, cores = map(int, sys.argv[1:5])
raw_cmd, raw_one, raw_fleet = map(float, sys.argv[5:8])
print(f"| | {points} trivial commands, 1 host: commands/s | {steps}-step playbook, 1 host: s | {steps} steps × {fleet} hosts: s |")
print("|---|---|---|---|")
print(f"| raw `ssh` through a ControlMaster | {points / raw_cmd:.0f} | {raw_one:.2f} | {raw_fleet:.2f} |")
for row in sys.argv[8:]:
    name, sweep, one, fleet_s = row.split("|")
    sweep, one, fleet_s = float(sweep), float(one), float(fleet_s)
    cell = lambda text, t: "failed (see the log)" if t != t else text
    print(f"| {name} | {cell(f'{points / sweep:.0f} (×{sweep / raw_cmd:.2f} the raw time)', sweep)} "
          f"| {cell(f'{one:.2f} (×{one / raw_one:.2f})', one)} | {cell(f'{fleet_s:.2f} (×{fleet_s / raw_fleet:.2f})', fleet_s)} |")
print(f"\n{cores} cores shared by client and sshd; best of the repeats; ×: rigrun's time over the raw loop's (target ≤ 1.1 for the playbooks). "
      "rigrun's playbook times are whole runs: connecting, the host's facts, the run's jobs folder and lease, the steps, stopping the jobs and the masters.")
PY
