//! Helpers for the `rigrun bench` tests: running the real binary's `bench` with its JSON lines
//! parsed, against a real `rigrun sim` (started by `sim_support`).

#![allow(dead_code)]

use serde_json::Value;

pub use crate::sim_support::Sim;

/// What one `rigrun bench` run printed.
pub struct BenchRun {
    pub code: i32,
    /// The JSON lines of stdout.
    pub records: Vec<Value>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `rigrun bench --url URL ARGS...`.
pub fn bench(url: &str, args: &[&str]) -> BenchRun {
    let mut all = vec!["bench", "--url", url];
    all.extend_from_slice(args);
    run(&all)
}

/// Runs `rigrun ARGS...`.
pub fn run(args: &[&str]) -> BenchRun {
    let out = crate::common::rigrun()
        .args(args)
        .output()
        .expect("cannot run rigrun");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let records = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    BenchRun {
        code: out.status.code().unwrap_or(-1),
        records,
        stdout,
        stderr,
    }
}

/// A numeric metric of a record.
pub fn num(record: &Value, key: &str) -> f64 {
    record[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {record}"))
}
