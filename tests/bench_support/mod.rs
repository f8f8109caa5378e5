//! Helpers for the `rigrun bench` tests: a real `rigrun sim` on a free port, and running the real
//! binary's `bench` with its JSON lines parsed.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A `rigrun sim` process, killed when dropped.
pub struct Sim {
    child: Child,
    pub url: String,
}

impl Sim {
    /// Starts `rigrun sim --profile PROFILE --port 0` and reads its URL from the "serving" line.
    pub fn start(profile: &str) -> Sim {
        Sim::start_with(profile, &[])
    }

    /// The same, with more arguments of `rigrun sim`.
    pub fn start_with(profile: &str, extra: &[&str]) -> Sim {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rigrun"))
            .args(["sim", "--profile", profile, "--port", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start rigrun sim");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = match lines.next() {
                Some(Ok(line)) => line,
                _ => panic!("rigrun sim exited before serving: {:?}", child.wait()),
            };
            // rigrun sim: serving MODEL on http://HOST:PORT (profile NAME)
            if let Some(rest) = line.split(" on http://").nth(1) {
                let address = rest.split_whitespace().next().unwrap();
                break format!("http://{address}");
            }
        };
        // Keep reading so that the sim never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Sim { child, url }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let out = Command::new(env!("CARGO_BIN_EXE_rigrun"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
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
