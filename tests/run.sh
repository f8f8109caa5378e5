#!/usr/bin/env bash
# The tests, on any machine: installs what they need, then runs them.
#
#   bash tests/run.sh          everything (what CI runs)
#   bash tests/run.sh --fast   the edit-compile-test loop: unit tests, the simulator and bench
#                              tests, the layering, and the tests against real sshd servers on
#                              loopback; no network namespaces, no Chromium, no llama.cpp, no
#                              Slurm, no tmpfs mounts
#
# Anything after `--` goes to `cargo test` (e.g. `-- --test ssh_run`). The OS packages the tests
# need are installed with apt-get when run as root; otherwise the one command that would install
# them is printed and nothing runs. The llama.cpp tier builds llama-server once per machine into
# ~/.cache/rigrun (~13 minutes on 2 cores). Ends with one line: `tests: N passed, N failed`.
set -euo pipefail
cd "$(dirname "$0")/.."

fast=false
cargo_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) fast=true ;;
    --) shift; cargo_args=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tests/run.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

# The test binaries (tests/<name>/main.rs) that need only this machine and a loopback sshd
# (fuzz_config runs a few hundred generated configurations; `bash fuzz/config.sh` a million;
# layering reads the sources for imports against ARCHITECTURE.md's floors); the others are
# system (root: namespaces, tmpfs), browser (Chromium), llama (llama.cpp) and host_binary (the
# rigrun built by tools/host-binary.sh for hosts) and slurm (root: a one-node Slurm cluster,
# tests/slurm/cluster.sh, under each test's own folder).
fast_tests=(local sshd fuzz_config layering)

# What the tests start: sshd and ssh always; for the full run also ip (network namespaces),
# Chromium (the HTML report), cmake, g++ and unzip (building llama-server), and Slurm's
# daemons, its commands and munge (the Slurm tier).
need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
if ! $fast; then
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v cmake >/dev/null 2>&1 || need+=(cmake)
  command -v g++ >/dev/null 2>&1 || need+=(g++)
  command -v unzip >/dev/null 2>&1 || need+=(unzip)
  [ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
  [ -x /usr/sbin/slurmd ] || need+=(slurmd)
  command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)
  [ -x /usr/sbin/munged ] || need+=(munge)
fi
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/run.sh: the tests need ${need[*]}; install them with:" >&2
    echo "  sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "tests: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# sshd refuses to start without its privilege-separation directory.
if [ ! -d /run/sshd ]; then
  if [ "$(id -u)" -eq 0 ]; then mkdir -p /run/sshd; else
    echo "tests/run.sh: sshd needs /run/sshd; create it with: sudo mkdir -p /run/sshd" >&2
    exit 1
  fi
fi

if $fast; then
  targets=(--lib)
  for t in "${fast_tests[@]}"; do targets+=(--test "$t"); done
else
  targets=()
  # Built first, so that its progress shows here rather than inside a test.
  echo "tests: preparing the llama.cpp tier"
  bash tests/llama/prepare.sh
  # The host_binary tier checks the rigrun that is sent to hosts, built as users build it.
  echo "tests: building the host binary (glibc 2.17)"
  bash tools/host-binary.sh
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked "${targets[@]}" "${cargo_args[@]}" 2>&1 | tee "$log" || status=$?
# One closing line for all the test binaries together.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
  END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
