//! Run directories for the report tests, made by real runs on `connection: local` hosts whose
//! sweep commands print crafted JSON records (fast, and every number is known).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{rigrun, text};

/// Two hosts; `slow` holds less (a capacity guard skips its C=64) and has a point the
/// benchmark marks invalid.
pub const INVENTORY: &str = r#"
hosts:
  fast:
    connection: local
    labels: {gpu: "8x RTX PRO 6000 Blackwell"}
    vars: {speed: 200, cap: 64}
  slow:
    connection: local
    labels: {gpu: "RTX A6000"}
    vars: {speed: 100, cap: 16}
"#;

/// A concurrency sweep (throughput ∝ C^0.7, TTFT and TPOT growing with C) with references for
/// `fast`, and a long-context sweep over input lengths. The records carry their workload's
/// parameters (`output_len`, `input_len`), as real benchmarks' do: runs with another `speed`
/// measured the same workload, so their changes are judged.
pub const PLAYBOOK: &str = r#"
name: report-sweep
steps:
  - run-sweep:
      name: throughput
      matrix: {concurrency: [1, 4, 16, 64]}
      skip_if: concurrency > cap
      command: >-
        echo '{"output_len": 64, "output_throughput": {{ speed * concurrency ** 0.7 }}, "median_ttft_ms": {{ 20 + concurrency }},
        "p99_ttft_ms": {{ 40 + 2 * concurrency }}, "median_tpot_ms": {{ 10 + concurrency / 4 }}
        {%- if concurrency == 4 and host == "slow" %}, "valid": false, "problems": ["2 of 12 requests failed"]{% endif %}}'
      references:
        fast:
          1: {output_throughput: 200 ±5%}
          16: {output_throughput: 9999 ±5%}
  - run-sweep:
      name: long-context
      matrix: {concurrency: [1], input_len: [30000, 60000, 100000]}
      command: >-
        echo '{"output_throughput": 50, "median_ttft_ms": {{ input_len / speed }}, "input_len": {{ input_len }}}'
"#;

/// A directory with the inventory and `sweep.yaml` (the given playbook).
pub fn setup(playbook: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.yaml"), INVENTORY).unwrap();
    std::fs::write(dir.path().join("sweep.yaml"), playbook).unwrap();
    dir
}

/// Runs `sweep.yaml` with `extra` arguments; returns the new run directory and the output.
pub fn run(dir: &Path, extra: &[&str]) -> (PathBuf, Output) {
    let runs = dir.join("runs");
    let before = list(&runs);
    let out = rigrun()
        .current_dir(dir)
        .args(["run", "sweep.yaml", "--runs-dir", "runs", "-q"])
        .args(extra)
        .output()
        .unwrap();
    let run = list(&runs)
        .into_iter()
        .find(|d| !before.contains(d))
        .unwrap_or_else(|| panic!("no new run directory: {:?}", text(&out)));
    (run, out)
}

fn list(dir: &Path) -> Vec<PathBuf> {
    crate::common::run_dirs(dir)
}

/// Runs rigrun with `args`, expecting `code`; returns stdout.
pub fn rigrun_ok(args: &[&str], code: i32) -> String {
    let out = rigrun().args(args).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(code),
        "rigrun {args:?}:\n{stdout}\n{stderr}"
    );
    stdout
}
