#!/usr/bin/env bash
# fetch-results against scp and `tar cz | ssh`, on one loopback sshd in the same run: a 1 GiB
# file (rigrun vs scp: throughput, and rigrun's peak RSS) and 10,000 small files (rigrun vs
# `ssh host tar czf - | tar xzf -`). Each is timed $REPEAT times and the best kept; everything
# shares this machine's cores (client, sshd, sftp-server, cipher).
#
#   bench/fetch.sh                       # defaults below
#   BIG_MB=256 SMALL=2000 bench/fetch.sh
#   TMPFS=1 bench/fetch.sh               # (root) every tool writes to a tmpfs: the transfer alone,
#                                        # without this disk's cost of creating and deleting files
#
# Needs sshd (apt-get install openssh-server), /usr/bin/time (apt-get install time) and python3.
# Prints a Markdown table (docs/fetch.md keeps the last one measured); $WORK keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/.."

BIG_MB=${BIG_MB:-1024}
SMALL=${SMALL:-10000}
REPEAT=${REPEAT:-2}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-fetch.XXXXXX)}
TARGET=${CARGO_TARGET_DIR:-target}
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time: apt-get install -y time" >&2; exit 1; }

cargo build --release --quiet
BIN=$TARGET/release/rigrun

source bench/lib/sshd.sh
# Where the fetched files land, for rigrun (its run directory) and the baselines alike.
OUT=$WORK/out
mkdir -p "$OUT"
if [ "${TMPFS:-0}" = 1 ]; then
  mountpoint -q "$OUT" || mount -t tmpfs -o size=$(( BIG_MB * 3 + 1024 ))m tmpfs "$OUT"
  trap 'kill $SSHD 2>/dev/null || true; umount "$OUT" 2>/dev/null || true' EXIT
fi

# The "host's" files: random bytes (nothing compresses them) and small JSON result files.
HOST_DIR=$WORK/host
mkdir -p "$HOST_DIR/big" "$HOST_DIR/small"
[ -f "$HOST_DIR/big/big.bin" ] || head -c "${BIG_MB}M" /dev/urandom > "$HOST_DIR/big/big.bin"
python3 - "$HOST_DIR/small" "$SMALL" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, f"r{i}.json"), "w") as f:
        f.write('{"output_throughput": %d, "completed": 5, "note": "%s"}\n' % (i, "x" * 200))
PY

{ echo "hosts:"; host_entry h; } > "$WORK/hosts.yaml"
for kind in big small; do
  glob=$([ $kind = big ] && echo "big/*.bin" || echo "small/*.json")
  printf 'name: fetch-%s\nsteps:\n  - fetch-results: {src: "%s/%s", records: false}\n' \
    "$kind" "$HOST_DIR" "$glob" > "$WORK/$kind.yaml"
done

# The fetch step's own seconds in the last rigrun run (0 for the other tools).
step_seconds() {
  cat "$OUT"/runs/[0-9]*/events.jsonl 2>/dev/null | python3 -c '
import json, sys
print(next((e["seconds"] for e in map(json.loads, sys.stdin) if e["event"] == "step_finished"), 0))'
}

# Runs a command $REPEAT times (a fresh destination each time); prints "seconds max_rss_kib
# step_seconds" of the fastest.
best() {
  local name=$1; shift
  local best_s="" best_kb="" best_step=""
  for i in $(seq "$REPEAT"); do
    # sync: the deletes of the previous round (and the discards they cause on this disk) land
    # before the clock starts, not inside the next tool's time.
    rm -rf "$OUT/dest" "$OUT/runs" && mkdir -p "$OUT/dest" && sync
    /usr/bin/time -f '%e %M' -o "$WORK/$name.time" "$@" >"$WORK/$name.log" 2>&1 \
      || { echo "$name failed: $(tail -5 "$WORK/$name.log")" >&2; exit 1; }
    read -r s kb < "$WORK/$name.time"
    if [ -z "$best_s" ] || python3 -c "import sys; sys.exit(not $s < $best_s)"; then
      best_s=$s; best_kb=$kb; best_step=$(step_seconds)
    fi
  done
  echo "$best_s $best_kb $best_step"
}

R_BIG=$(best rigrun-big "$BIN" run "$WORK/big.yaml" -i "$WORK/hosts.yaml" --runs-dir "$OUT/runs" -q)
S_BIG=$(best scp-big scp -q -P "$PORT" "${SSH_OPTS[@]}" "$USER_NAME@127.0.0.1:$HOST_DIR/big/big.bin" "$OUT/dest/")
# Like for like: rigrun puts AES-GCM first where the CPU has AES instructions (transport/cipher.rs),
# scp keeps OpenSSH's default (chacha20-poly1305); this is scp with the cipher rigrun negotiates.
GCM=$(grep -qw aes /proc/cpuinfo && echo aes128-gcm@openssh.com || echo chacha20-poly1305@openssh.com)
S_GCM=$(best scp-gcm scp -q -c "$GCM" -P "$PORT" "${SSH_OPTS[@]}" "$USER_NAME@127.0.0.1:$HOST_DIR/big/big.bin" "$OUT/dest/")
R_SMALL=$(best rigrun-small "$BIN" run "$WORK/small.yaml" -i "$WORK/hosts.yaml" --runs-dir "$OUT/runs" -q)
T_SMALL=$(best tar-small sh -c "ssh -p $PORT ${SSH_OPTS[*]} $USER_NAME@127.0.0.1 'tar czf - -C $HOST_DIR small' | tar xzf - -C $OUT/dest")

python3 - "$BIG_MB" "$SMALL" "$(nproc)" "$GCM" "$R_BIG" "$S_BIG" "$R_SMALL" "$T_SMALL" "$S_GCM" <<'PY'
import sys
mb, n, cores, gcm = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
(rb, rb_kb, rb_step), (sb, sb_kb, _), (rs, rs_kb, rs_step), (ts, ts_kb, _), (sg, _, _) = [
    tuple(map(float, a.split())) for a in sys.argv[5:]]
print(f"| {mb} MiB file | seconds | MiB/s | peak RSS |")
print("|---|---|---|---|")
print(f"| rigrun fetch-results | {rb:.2f} | {mb / rb:.0f} | {rb_kb / 1024:.0f} MiB |")
print(f"| … its fetch step alone | {rb_step:.2f} | {mb / rb_step:.0f} | |")
print(f"| scp | {sb:.2f} | {mb / sb:.0f} | {sb_kb / 1024:.0f} MiB |")
print(f"| scp -c {gcm} | {sg:.2f} | {mb / sg:.0f} | |")
print(f"| **rigrun / scp throughput** | | **{sb / rb:.0%}** (step alone: {sb / rb_step:.0%}; target ≥ 90%) | |")
print(f"| … against scp with rigrun's cipher | | {sg / rb:.0%} (step alone: {sg / rb_step:.0%}) | |")
print()
print(f"| {n} small files | seconds | files/s | peak RSS |")
print("|---|---|---|---|")
print(f"| rigrun fetch-results | {rs:.2f} | {n / rs:.0f} | {rs_kb / 1024:.0f} MiB |")
print(f"| … its fetch step alone | {rs_step:.2f} | {n / rs_step:.0f} | |")
print(f"| ssh tar czf - \\| tar xzf - | {ts:.2f} | {n / ts:.0f} | |")
print(f"| **rigrun / tar time** | **{rs / ts:.2f}×** (step alone: {rs_step / ts:.2f}×; target ≤ 2×) | | |")
print(f"\n{cores} cores shared by client and server; best of the repeats; rigrun's whole-run times include connecting and gathering the host's facts; scp and tar include their connection.")
PY
