#!/usr/bin/env bash
# fetch-results' memory against the number of files, on one loopback sshd in the same run: N
# small JSON result files (default 1,000 and 10,000) fetched by `rigrun run` (records off, and
# on: each file a record), and by `ssh host tar cf - | tar xf -` and `scp -r` through one
# ControlMaster as the baseline. For each: the peak RSS of the whole process (rigrun's own
# VmHWM, through /usr/bin/time; for the baselines, the largest of their processes) and the
# wall time, best of $REPEAT. The machine's load is printed with the table (three agents may
# share these cores).
#
#   bench/fetch_memory.sh                        # 1,000 and 10,000 files
#   COUNTS="1000 10000 30000" bench/fetch_memory.sh
#   BEFORE=/path/to/older/rigrun bench/fetch_memory.sh   # also an older build, side by side
#   RIGRUN=/path/to/rigrun bench/fetch_memory.sh         # that binary, not this tree's release build
#
# Needs sshd (apt-get install openssh-server), /usr/bin/time (apt-get install time) and python3.
# Prints a Markdown table (docs/fetch.md keeps the last one measured); $WORK keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/.."

COUNTS=${COUNTS:-1000 10000}
REPEAT=${REPEAT:-3}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-fetch-memory.XXXXXX)}
TARGET=${CARGO_TARGET_DIR:-target}
BEFORE=${BEFORE:-}
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time: apt-get install -y time" >&2; exit 1; }

BIN=${RIGRUN:-}
if [ -z "$BIN" ]; then
  cargo build --release --quiet --bin rigrun
  BIN=$TARGET/release/rigrun
fi

source bench/lib/sshd.sh
# The baselines' ControlMaster: connecting is paid once, outside what is measured, as rigrun
# pays it once per run.
MUX=$WORK/mux.sock
ssh -M -f -N -S "$MUX" -p "$PORT" "${SSH_OPTS[@]}" "$USER_NAME@127.0.0.1"
trap 'ssh -S "$MUX" -O exit x 2>/dev/null || true; kill $SSHD 2>/dev/null || true' EXIT
MUXED=(-o "ControlPath=$MUX" -p "$PORT" "${SSH_OPTS[@]}")
SCP_MUXED=(-o "ControlPath=$MUX" -P "$PORT" "${SSH_OPTS[@]}")
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

OUT=$WORK/out
{ echo "hosts:"; host_entry h; } > "$WORK/hosts.yaml"

# $1 files of ~250 bytes, each a JSON object (a result file), in $WORK/host/n$1/.
make_files() {
  python3 - "$WORK/host/n$1" "$1" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
for i in range(n):
    with open(os.path.join(d, f"r{i}.json"), "w") as f:
        f.write('{"output_throughput": %d, "completed": 5, "note": "%s"}\n' % (i, "x" * 200))
PY
}

# Runs a command $REPEAT times into a fresh $OUT; prints "seconds max_rss_kib" of the fastest
# run and the largest peak RSS seen (the figures of a run are its own; the peak is the worst).
best() {
  local name=$1; shift
  local best_s="" best_kb="" worst_kb=0
  for _ in $(seq "$REPEAT"); do
    rm -rf "$OUT" && mkdir -p "$OUT/dest" && sync
    /usr/bin/time -f '%e %M' -o "$WORK/$name.time" "$@" >"$WORK/$name.log" 2>&1 \
      || { echo "$name failed: $(tail -5 "$WORK/$name.log")" >&2; exit 1; }
    read -r s kb < "$WORK/$name.time"
    [ "$kb" -gt "$worst_kb" ] && worst_kb=$kb
    if [ -z "$best_s" ] || python3 -c "import sys; sys.exit(not $s < $best_s)"; then
      best_s=$s; best_kb=$kb
    fi
  done
  echo "$best_s $worst_kb"
}

# The files fetched must all be there, byte for byte: a fast run that lost files is no figure.
check_fetched() {
  local n=$1 dir
  dir=$(ls -d "$OUT"/runs/[0-9]*/hosts/h/fetched)
  got=$(find "$dir" -type f | wc -l)
  [ "$got" = "$n" ] || { echo "rigrun fetched $got of $n files" >&2; exit 1; }
  diff -r -q "$WORK/host/n$n" "$dir" >/dev/null || { echo "fetched files differ from the host's" >&2; exit 1; }
}

rows=()
for n in $COUNTS; do
  make_files "$n"
  for records in false true; do
    printf 'name: fetch-%s\nsteps:\n  - fetch-results: {src: "%s/*.json", records: %s}\n' \
      "$n" "$WORK/host/n$n" "$records" > "$WORK/fetch-$n-$records.yaml"
  done
  run_rigrun() { best "$1" "$2" run "$WORK/fetch-$n-$3.yaml" -i "$WORK/hosts.yaml" --runs-dir "$OUT/runs" -q; }
  R_OFF=$(run_rigrun "rigrun-$n-off" "$BIN" false); check_fetched "$n"
  R_ON=$(run_rigrun "rigrun-$n-on" "$BIN" true); check_fetched "$n"
  B_OFF="- -"; B_ON="- -"
  if [ -n "$BEFORE" ]; then
    B_OFF=$(run_rigrun "before-$n-off" "$BEFORE" false)
    B_ON=$(run_rigrun "before-$n-on" "$BEFORE" true)
  fi
  TAR=$(best "tar-$n" sh -c "ssh ${MUXED[*]} $USER_NAME@127.0.0.1 'tar cf - -C $WORK/host n$n' | tar xf - -C $OUT/dest")
  SCP=$(best "scp-$n" scp -q -r "${SCP_MUXED[@]}" "$USER_NAME@127.0.0.1:$WORK/host/n$n" "$OUT/dest/")
  rows+=("$n|$R_OFF|$R_ON|$B_OFF|$B_ON|$TAR|$SCP")
done

python3 - "$(nproc)" "$LOAD_BEFORE / $(cut -d' ' -f1-3 /proc/loadavg)" "$BEFORE" "${rows[@]}" <<'PY'
import sys
cores, load, before = sys.argv[1], sys.argv[2], sys.argv[3]
mib = lambda kb: f"{float(kb) / 1024:.1f} MiB"
print("| files | rigrun, records: false | rigrun, records: true |"
      + (" before, records: false | before, records: true |" if before else "")
      + " ssh tar \\| tar | scp -r |")
print("|---|---|---|" + ("---|---|" if before else "") + "---|---|")
for row in sys.argv[4:]:
    n, *cells = row.split("|")
    if not before:
        del cells[2:4]
    shown = []
    for cell in cells:
        s, kb = cell.split()
        shown.append(f"{mib(kb)}, {float(s):.2f} s")
    print(f"| {int(n):,} | " + " | ".join(shown) + " |")
print(f"\nPeak RSS (the largest of the repeats; for the pipelines, their largest process) and wall "
      f"time (the fastest); {cores} cores shared by client and server; load average (1, 5, 15 min) "
      f"at the start / at the end: {load}. rigrun's time includes connecting and gathering facts; the baselines share "
      f"one ControlMaster opened beforehand.")
PY
