//! Judging against noise, end to end: a sweep repeated against simulated servers whose requests
//! wait a seeded random delay (`rigrun sim --jitter`), so repetitions vary by a known amount.
//! A host 10% slower than another carries a ratio interval that excludes 1, and is an
//! improvement across runs once it is as fast; a run against the same server and seed differs
//! only by the noise and is judged `within noise`, even with no tolerance at all. The metric is
//! the mean end-to-end latency, which the delays are part of.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;
use crate::reporting::{rigrun_ok, run};
use crate::sim_support::{path_str, profile_yaml, Sim};

const PLAYBOOK: &str = r#"
name: noise
steps:
  - run-sweep:
      repeat: 5
      matrix: {concurrency: [1, 2]}
      command: >-
        {{ rigrun }} bench --url {{ url }} --model test/model --concurrency {{ concurrency }}
        --num-requests {{ concurrency * 5 }} --warmup 0 --input-len 100 --output-len 64
"#;

/// A sim of the test profile with `batch_ms` per decode step, each request delayed by 0–40 ms
/// (mean 20 ms, sd 11.5 ms: about 3.5% of a 5-request repetition's mean latency), its own seed
/// per host.
fn sim(dir: &Path, name: &str, batch_ms: f64, seed: &str) -> Sim {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, profile_yaml(1 << 20, 4096, batch_ms, 200_000, 2048)).unwrap();
    Sim::start(path_str(&path), &["--jitter", "20ms", "--seed", seed])
}

/// Runs the playbook with hosts `a` and `b` served by sims with these decode steps.
fn measure(dir: &Path, a_ms: f64, b_ms: f64) -> PathBuf {
    let (a, b) = (sim(dir, "a", a_ms, "1"), sim(dir, "b", b_ms, "2"));
    let inventory = format!(
        "hosts:\n  a:\n    connection: local\n    vars: {{url: \"{}\"}}\n  b:\n    connection: local\n    vars: {{url: \"{}\"}}\n",
        a.base, b.base
    );
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
    let (run, out) = run(dir, &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    run
}

/// The cells of the first table of `rigrun <args> --format json`, by column name.
fn cells(args: &[&str]) -> Vec<(String, Value)> {
    let out = rigrun_ok(
        &[args, &["--metric", "mean_e2el_ms", "--format", "json"]].concat(),
        0,
    );
    let json: Value = serde_json::from_str(&out).unwrap();
    let grid = &json["tables"][0];
    let columns: Vec<String> = serde_json::from_value(grid["columns"].clone()).unwrap();
    columns
        .into_iter()
        .zip(grid["rows"][0]["cells"].as_array().unwrap().clone())
        .collect()
}

fn cell<'a>(cells: &'a [(String, Value)], column: &str) -> &'a Value {
    &cells
        .iter()
        .find(|(c, _)| c == column)
        .unwrap_or_else(|| panic!("no column {column}: {cells:?}"))
        .1
}

#[test]
fn a_slower_host_is_told_from_noise_and_the_same_server_is_within_noise() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sweep.yaml"), PLAYBOOK).unwrap();
    // b's decode steps take 15% longer: about 11% more latency at C=1 (the delays are the rest).
    let first = measure(dir.path(), 2.0, 2.3);
    let within = cells(&["compare", first.to_str().unwrap(), "--baseline", "a"]);
    let a = cell(&within, "a");
    assert_eq!(a["n"], 5, "{a}");
    assert!(
        a["ci95"].as_f64().unwrap() > 0.0,
        "the delays make the repetitions vary: {a}"
    );
    let ratio = cell(&within, "b / a");
    let [low, high] = [
        ratio["interval"][0].as_f64().unwrap(),
        ratio["interval"][1].as_f64().unwrap(),
    ];
    let value = ratio["value"].as_f64().unwrap();
    assert!(
        low < value && value < high && low > 1.0,
        "b is slower beyond the noise: {ratio}"
    );
    assert!((1.05..1.2).contains(&value), "{ratio}");
    let html = dir.path().join("report.html");
    rigrun_ok(
        &["report", first.to_str().unwrap(), "--out", html.to_str().unwrap()],
        0,
    );
    let html = std::fs::read_to_string(html).unwrap();
    let throughput = &html[html.find(r#"data-chart="throughput""#).unwrap()..];
    let throughput = &throughput[..throughput.find("</svg>").unwrap()];
    assert_eq!(
        throughput.matches(r#"<path class="error""#).count(),
        4,
        "an error bar per host and level on the throughput chart: {throughput}"
    );
    assert!(
        throughput.contains("(mean of 5 repetitions, 95% interval)"),
        "{throughput}"
    );

    // Again, with b now as fast as a and served with the same seed as before.
    let second = measure(dir.path(), 2.0, 2.0);
    let across = cells(&[
        "compare",
        first.to_str().unwrap(),
        second.to_str().unwrap(),
        "--tolerance",
        "0%",
    ]);
    let changes: Vec<&(String, Value)> = across.iter().filter(|(c, _)| c.contains(" Δ @")).collect();
    let (a_change, b_change) = (&changes[0].1, &changes[1].1);
    assert!(
        changes[0].0.starts_with("a ") && changes[1].0.starts_with("b "),
        "{changes:?}"
    );
    assert_eq!(
        a_change["verdict"], "within noise",
        "same server, same delays: {a_change}"
    );
    assert!(
        a_change["welch"]["p_value"].as_f64().unwrap() > 0.05,
        "{a_change}"
    );
    assert_eq!(b_change["verdict"], "improvement", "{b_change}");
    assert!(
        b_change["welch"]["p_value"].as_f64().unwrap() < 0.01,
        "{b_change}"
    );
    assert!(b_change["value"].as_f64().unwrap() < -5.0, "{b_change}");
    // Read the other way round (from the fast run to the slow one), b's change is a regression.
    let back = cells(&["compare", second.to_str().unwrap(), first.to_str().unwrap()]);
    let b_back = back
        .iter()
        .filter(|(c, _)| c.starts_with("b ") && c.contains(" Δ @"))
        .map(|(_, v)| v)
        .next()
        .unwrap();
    assert_eq!(b_back["verdict"], "regression", "{b_back}");

    let table = rigrun_ok(
        &[
            "compare",
            first.to_str().unwrap(),
            second.to_str().unwrap(),
            "--metric",
            "mean_e2el_ms",
        ],
        0,
    );
    assert!(table.contains("improvement ["), "{table}");
    assert!(
        table.contains("significant (Welch's t-test of the repetitions: p "),
        "{table}"
    );
}
