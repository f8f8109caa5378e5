#!/usr/bin/env bash
# Runs the configuration property test (tests/fuzz_config) for many inputs in release and prints
# how many ran, cases/s and the slowest input. Usage: bash fuzz/config.sh [CASES] (default 1000000).
# Not part of CI: CI runs the same test with a few hundred cases.
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-1000000}"
PROPTEST_CASES="$cases" cargo test --release --test fuzz_config -- --ignored --nocapture fuzz_many
