#!/usr/bin/env bash
# Client capacity: how many requests and streamed tokens per second `rigrun bench` sustains at
# C = 64, 256, 1024 against a server fast enough that the client is the limit, side by side with
# the Python client (scripts/bench_throughput.py --stream) in the same run, with each client's
# CPU time and peak memory. Both clients and the server share this machine's cores.
#
#   bench/client-capacity.sh                 # defaults below
#   LEVELS="64 256" OUT_LEN=128 bench/client-capacity.sh
#
# Prints a Markdown table (docs/bench.md keeps the last one measured) and leaves the raw JSON
# lines in $WORK (default: a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."

LEVELS=${LEVELS:-"64 256 1024"}
IN_LEN=${IN_LEN:-1000}
OUT_LEN=${OUT_LEN:-1000}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-capacity.XXXXXX)}
mkdir -p "$WORK"

cargo build --release --quiet
BIN=target/release/rigrun

# The server, on a free port; its "serving ... on http://HOST:PORT" line gives the URL.
"$BIN" sim --profile bench/fast-server.yaml --port 0 2>"$WORK/sim.log" >/dev/null &
SIM=$!
trap 'kill $SIM 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q serving "$WORK/sim.log" && break; sleep 0.1; done
URL=$(grep -o 'http://[0-9.:]*' "$WORK/sim.log" | head -1)
[ -n "$URL" ] || { echo "the sim did not start: $(cat "$WORK/sim.log")" >&2; exit 1; }

# Runs a client; writes its JSON line to $1.json and "cpu_seconds max_rss_mb wall_seconds" to
# $1.usage (rusage of the child, by wait4).
measure() {
  local name=$1; shift
  python3 - "$WORK/$name" "$@" <<'PY'
import os, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
start = time.monotonic()
with open(out + ".json", "w") as stdout, open(out + ".log", "w") as stderr:
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr)
    _, status, usage = os.wait4(proc.pid, 0)
wall = time.monotonic() - start
with open(out + ".usage", "w") as f:
    f.write("%.2f %.1f %.2f\n" % (usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, wall))
PY
}

for C in $LEVELS; do
  echo "C=$C: rigrun bench" >&2
  measure "rigrun-c$C" "$BIN" bench --url "$URL" --concurrency "$C" \
    --input-len "$IN_LEN" --output-len "$OUT_LEN" --seed 1 || true
  echo "C=$C: scripts/bench_throughput.py --stream" >&2
  measure "python-c$C" python3 scripts/bench_throughput.py --url "$URL" --concurrency "$C" \
    --input-len "$IN_LEN" --output-len "$OUT_LEN" --stream || true
done

python3 - "$WORK" "$LEVELS" "$IN_LEN" "$OUT_LEN" "$(nproc)" <<'PY'
import json, sys
work, levels, in_len, out_len, cores = sys.argv[1], sys.argv[2].split(), *sys.argv[3:]
def load(name):
    with open("%s/%s.json" % (work, name)) as f:
        line = next((l for l in f if l.startswith("{")), None)
    with open("%s/%s.usage" % (work, name)) as f:
        cpu, rss, wall = map(float, f.read().split())
    return (json.loads(line) if line else {}), cpu, rss, wall
print("Client capacity: rigrun sim --profile bench/fast-server.yaml (1 ms steps), "
      "%s input / %s output tokens, streamed, 5×C measured requests after C warm-up, "
      "%s cores shared by server and client.\n" % (in_len, out_len, cores))
print("| C | rigrun req/s | rigrun tok/s | Python req/s | Python tok/s | tok/s ratio "
      "| rigrun CPU s / peak RSS | Python CPU s / peak RSS | rigrun p50 ITL ms | Python p50 ITL ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
for c in levels:
    r, rcpu, rrss, _ = load("rigrun-c" + c)
    p, pcpu, prss, _ = load("python-c" + c)
    rt, pt = r.get("output_throughput") or 0, p.get("output_throughput") or 0
    ratio = "%.1f×" % (rt / pt) if pt else "-"
    print("| %s | %.0f | %.0f | %.0f | %.0f | %s | %.1f s / %.0f MB | %.1f s / %.0f MB | %s | %s |" % (
        c, r.get("request_throughput") or 0, rt, p.get("request_throughput") or 0, pt, ratio,
        rcpu, rrss, pcpu, prss, r.get("median_itl_ms"), p.get("median_itl_ms")))
PY
echo "raw results: $WORK" >&2
