#!/usr/bin/env bash
# What telemetry costs, against `rigrun sim` on a local host (this machine, which has no GPU):
#   1. host CPU per sampled second, over an idle point of $IDLE s: the GPU sampler's job (its
#      session: job.sh's supervisor and the two tees; the stand-in nvidia-smi's own CPU is shown
#      apart, since the driver's tool costs what it costs), the server's extra CPU for being
#      scraped (the sim's CPU with scrapes less without), and rigrun's own extra CPU;
#   2. a sweep's throughput with and without telemetry: `rigrun bench` at C = $LEVELS for
#      $DURATION each against the sim, $REPEAT runs of each alternating; the ratio of the mean
#      output throughput and of the sweep's seconds (target: within 1%).
# "Without" is the same playbook with no verify-server step (nothing to scrape) and no
# nvidia-smi on PATH; "with" adds both (a stand-in nvidia-smi printing 8 GPUs at 3 Hz).
#
#   bench/telemetry.sh
#   REPEAT=5 IDLE=30 bench/telemetry.sh
#
# Needs python3. Prints a Markdown table (docs/bench.md keeps the last one measured); $WORK
# keeps the runs.
set -euo pipefail
cd "$(dirname "$0")/.."

REPEAT=${REPEAT:-3}
IDLE=${IDLE:-20}
LEVELS=${LEVELS:-1,4,16,64}
OUTPUT_LEN=${OUTPUT_LEN:-64}
DURATION=${DURATION:-5s}
WORK=${WORK:-$(mktemp -d /tmp/rigrun-telemetry.XXXXXX)}
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release --quiet
RIGRUN=$(realpath "$TARGET/release/rigrun")
mkdir -p "$WORK/bin"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The stand-in: the facts' query, and the query loop for 8 GPUs at the asked interval.
cat > "$WORK/bin/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in
  *--query-gpu=name,*) for i in 0 1 2 3 4 5 6 7; do echo "NVIDIA RTX PRO 6000, 97887 MiB, 580.65, 600.00 W"; done ;;
  *-lms*) while :; do
      now=$(date '+%Y/%m/%d %H:%M:%S.%3N')
      for i in 0 1 2 3 4 5 6 7; do echo "$now, $i, 312.40, 97, 61, 88000, 2400, 67, 0x0000000000000000"; done
      sleep 0.333
    done ;;
  *) exit 1 ;;
esac
SH
chmod +x "$WORK/bin/nvidia-smi"

# Run as an idle point: the sim's CPU over $1 s, and, at the end, the sampler job's CPU (its
# process group, found from its .pid file in the run's jobs folder) and how long it has run.
cat > "$WORK/measure.py" <<'PY'
import glob, json, os, sys, time
idle, workdir = float(sys.argv[1]), sys.argv[2]
tick = os.sysconf("SC_CLK_TCK")
def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime stime cutime cstime, process group, start time (fields 14-17, 5, 22 of stat)
    return [int(x) for x in fields[11:15]], int(fields[2]), int(fields[19])
def pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]
def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
def cpu(pid):
    """CPU seconds of a live process: its threads' on-CPU time (schedstat, in ns, finer than the
    10 ms ticks of stat) and its reaped children's (ticks)."""
    ns = 0
    for task in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with open(task) as f:
            ns += int(f.read().split()[0])
    return ns / 1e9 + sum(stat(pid)[0][2:]) / tick
# The sim itself (argv: .../rigrun sim ...), not the shells that started it.
def started(pid):
    try:
        return stat(pid)[2]
    except (OSError, IndexError):
        return -1
sims = [p for p in pids() if cmdline(p).split(" ")[:2][-1:] == ["sim"] and cmdline(p).split(" ")[0].endswith("rigrun")]
# The newest one alive: the previous run's may still be on its way out.
sim = sorted((p for p in sims if started(p) >= 0), key=started)[-1:]
sim_before = cpu(sim[0]) if sim else 0.0
time.sleep(idle)
out = {"idle_s": idle, "sim_cpu_s": round(cpu(sim[0]) - sim_before, 6) if sim else None}
jobs = sorted(glob.glob(f"{workdir}/.rigrun/jobs/*/*/*-gpu-*.pid"), key=os.path.getmtime)
if jobs:
    group = int(open(jobs[-1]).read().split()[0])
    job, stand_in = 0.0, 0.0
    for p in pids():
        try:
            if stat(p)[1] != group:
                continue
            used = cpu(p)
        except (OSError, IndexError):
            continue
        if "nvidia-smi" in cmdline(p):
            stand_in += used
        else:
            job += used
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    out.update(sampler_job_cpu_s=round(job, 6), stand_in_cpu_s=round(stand_in, 6),
               sampled_s=round(uptime - stat(group)[2] / tick, 3))
print(json.dumps(out))
PY

cat > "$WORK/hosts.yaml" <<YAML
hosts:
  local:
    connection: local
    workdir: $WORK/host
YAML
playbook() {  # $1 name, $2 with telemetry (1/0), $3 the sweep's matrix and command
  {
    echo "name: $1"
    echo "steps:"
    echo "  - start-server: {command: \"{{ rigrun }} sim --profile tiny --port {{ port }}\", url: \"http://127.0.0.1:{{ port }}\"}"
    [ "$2" = 1 ] && echo "  - verify-server: {url: \"http://127.0.0.1:{{ port }}\"}"
    echo "  - run-sweep:"
    echo "$3"
  } > "$WORK/$1.yaml"
}
IDLE_SWEEP="      matrix: {i: [1]}
      command: python3 $WORK/measure.py $IDLE $WORK/host"
LOAD_SWEEP="      matrix: {concurrency: [$LEVELS]}
      command: \"{{ rigrun }} bench --url http://127.0.0.1:{{ port }} --concurrency {{ concurrency }} --duration $DURATION --input-len 256 --output-len $OUTPUT_LEN\""
playbook idle-off 0 "$IDLE_SWEEP"; playbook idle-on 1 "$IDLE_SWEEP"
playbook load-off 0 "$LOAD_SWEEP"; playbook load-on 1 "$LOAD_SWEEP"

run() {  # $1 playbook, $2 PATH; prints rigrun's own CPU seconds on fd 3
  rm -rf "$WORK/runs" "$WORK/host/.rigrun/jobs"   # measure.py finds this run's sampler there
  # A port of its own: the last run's server may still be on its way out.
  PATH="$2" /usr/bin/time -f '%U %S' -o "$WORK/time" "$RIGRUN" run "$WORK/$1.yaml" -i "$WORK/hosts.yaml" \
    -e "port=$(free_port)" --runs-dir "$WORK/runs" -q > "$WORK/$1.out" 2>&1 || { cat "$WORK/$1.out"; exit 1; }
  cp "$WORK"/runs/[0-9]*/records.jsonl "$WORK/$1.$3.records.jsonl"
  awk '{print $1 + $2}' "$WORK/time" > "$WORK/$1.$3.cpu"
  cat "$WORK"/runs/[0-9]*/events.jsonl | python3 -c '
import json, sys
print(next(e["seconds"] for e in map(json.loads, sys.stdin) if e["event"] == "step_finished" and e.get("name") == "run-sweep"))' > "$WORK/$1.$3.seconds"
}
for r in $(seq "$REPEAT"); do
  run idle-off "$PATH" "$r"; run idle-on "$WORK/bin:$PATH" "$r"
  run load-off "$PATH" "$r"; run load-on "$WORK/bin:$PATH" "$r"
done

python3 - "$WORK" "$REPEAT" <<'PY'
import json, statistics as st, sys
work, repeat = sys.argv[1], int(sys.argv[2])
def recs(name, r):
    return [json.loads(l) for l in open(f"{work}/{name}.{r}.records.jsonl")]
def num(name, r, what):
    return float(open(f"{work}/{name}.{r}.{what}").read())
idle_on = [recs("idle-on", r)[0]["metrics"] for r in range(1, repeat + 1)]
idle_off = [recs("idle-off", r)[0]["metrics"] for r in range(1, repeat + 1)]
per_s = lambda xs, key, seconds: st.mean(x[key] / x[seconds] for x in xs)
job = per_s(idle_on, "sampler_job_cpu_s", "sampled_s")
stand_in = per_s(idle_on, "stand_in_cpu_s", "sampled_s")
sim_extra = st.mean(x["sim_cpu_s"] for x in idle_on) / idle_on[0]["idle_s"] - \
            st.mean(x["sim_cpu_s"] for x in idle_off) / idle_off[0]["idle_s"]
rigrun_extra = (st.mean(num("idle-on", r, "cpu") for r in range(1, repeat + 1)) -
                st.mean(num("idle-off", r, "cpu") for r in range(1, repeat + 1))) / idle_on[0]["idle_s"]
def tput(name):
    out = []
    for r in range(1, repeat + 1):
        out.append(st.mean(x["metrics"]["output_throughput"] for x in recs(name, r) if x["status"] == "ok"))
    return st.mean(out)
on, off = tput("load-on"), tput("load-off")
secs_on = st.mean(num("load-on", r, "seconds") for r in range(1, repeat + 1))
secs_off = st.mean(num("load-off", r, "seconds") for r in range(1, repeat + 1))
print(f"| what (mean of {repeat} runs) | figure |")
print("|---|---|")
print(f"| sampler job on the host (job.sh, tees), CPU per sampled second | {job * 100:.3f}% of a core |")
print(f"| stand-in nvidia-smi (a shell loop, 8 GPUs at 3 Hz; not the driver's tool) | {stand_in * 100:.3f}% of a core |")
print(f"| server scraped at 1 Hz (the sim's extra CPU) | {sim_extra * 100:.3f}% of a core |")
print(f"| rigrun's own extra CPU (samples read, scrapes, records annotated) | {rigrun_extra * 100:.3f}% of a core |")
print(f"| sweep output throughput, with / without telemetry | {on:.1f} / {off:.1f} tok/s = {on / off:.4f} |")
print(f"| sweep seconds, with / without | {secs_on:.2f} / {secs_off:.2f} s = {secs_on / secs_off:.4f} |")
PY
