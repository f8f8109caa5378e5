#!/usr/bin/env bash
# The store's cost per event: 40 trivial steps on 8, 32 and 128 `connection: local` hosts, the
# wall time, the events journaled, how often run.json was rewritten and the bytes written per
# event (events.jsonl + records.jsonl + every rewrite of run.json). Both should stay flat as the
# hosts grow: run.json is rewritten at a bounded rate, not on every step start and finish.
#
#   bench/store-cost.sh                 # HOSTS="8 32 128" STEPS=40
#
# Prints a Markdown table (docs/store.md keeps the last one measured).
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS=${HOSTS:-"8 32 128"}
STEPS=${STEPS:-40}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-store.XXXXXX)}
mkdir -p "$WORK"

cargo build --release --quiet
BIN=$PWD/target/release/rigrun

{
  echo "name: store-cost"
  echo "steps:"
  for s in $(seq "$STEPS"); do echo "  - shell: {command: \"true\"}"; done
} >"$WORK/steps.yaml"

echo "| hosts | wall s | events | run.json writes | bytes per event | µs per event |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in $HOSTS; do
  {
    echo "hosts:"
    for h in $(seq "$n"); do echo "  h$h: {connection: local, workdir: $WORK/wd/h$h}"; done
  } >"$WORK/hosts-$n.yaml"
  rm -rf "$WORK/runs-$n"
  start=$(date +%s.%N)
  NO_COLOR=1 RIGRUN_LOG=rigrun::store=debug "$BIN" run "$WORK/steps.yaml" -i "$WORK/hosts-$n.yaml" \
    --runs-dir "$WORK/runs-$n" -q >/dev/null 2>"$WORK/log-$n"
  end=$(date +%s.%N)
  run=$(ls -d "$WORK/runs-$n"/*)
  events=$(wc -l <"$run/events.jsonl")
  sed -i 's/\x1b\[[0-9;]*m//g' "$WORK/log-$n"
  writes=$(grep -c 'run.json written' "$WORK/log-$n" || true)
  manifest_bytes=$(grep -o 'bytes=[0-9]*' "$WORK/log-$n" | cut -d= -f2 | awk '{s += $1} END {print s + 0}')
  journal_bytes=$(cat "$run/events.jsonl" "$run/records.jsonl" | wc -c)
  python3 - "$n" "$start" "$end" "$events" "$writes" "$manifest_bytes" "$journal_bytes" <<'PY'
import sys
n, start, end, events, writes, manifest, journal = sys.argv[1:]
wall = float(end) - float(start)
events, writes = int(events), int(writes)
per_event = (int(manifest) + int(journal)) / events
print(f"| {n} | {wall:.2f} | {events} | {writes} | {per_event:,.0f} | {wall / events * 1e6:,.0f} |")
PY
done
