//! A sweep over offered request rates, measured by `rigrun bench` against the real sim: the
//! report charts what each host served against what was offered and TTFT against the rate, and
//! labels where it falls behind and where its latency departs, as the records say when read
//! here independently; `show` tells the same under the table, with the highest rate within
//! an SLO, and gives no concurrency capacity (every point shares one cap).

use serde_json::Value;

use crate::common::*;
use crate::sim_support::Sim;

/// A closed-loop cap of 2 requests: 5 req/s are served, 2000 req/s queue in the client.
fn playbook(url: &str) -> String {
    format!(
        r#"name: rates
steps:
  - run-sweep:
      matrix: {{request_rate: [5, 2000]}}
      command: >-
        {{{{ rigrun }}}} bench --url {url} --concurrency 2 --request-rate {{{{ request_rate }}}}
        --num-requests 20 --input-len 64 --output-len 8 --seed 1
"#
    )
}

/// The `<svg>` of the chart `kind` in the report.
fn chart<'a>(html: &'a str, kind: &str) -> &'a str {
    let start = html
        .find(&format!(r#"data-chart="{kind}""#))
        .unwrap_or_else(|| panic!("no {kind} chart"));
    let end = start + html[start..].find("</svg>").unwrap();
    &html[start..end]
}

/// The tooltips (`<title>`s) of a chart's points that contain `words`.
fn tooltips_saying<'a>(svg: &'a str, words: &str) -> Vec<&'a str> {
    svg.split("<title>")
        .skip(1)
        .filter(|t| t.contains(words))
        .collect()
}

#[test]
fn a_rate_sweep_charts_served_against_offered_and_where_latency_departs() {
    let sim = Sim::start("tiny", &[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hosts.yaml"),
        "hosts:\n  sim: {connection: local}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("rates.yaml"), playbook(&sim.base)).unwrap();
    let out = run_rigrun(dir.path(), &["run", "rates.yaml", "--runs-dir", "runs", "-q"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let run = only_run_dir(&dir.path().join("runs"));
    let html_path = dir.path().join("report.html");
    let out = run_rigrun(
        dir.path(),
        &[
            "report",
            run.to_str().unwrap(),
            "--out",
            html_path.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{:?}", text(&out));
    let html = std::fs::read_to_string(&html_path).unwrap();

    // What the records say, by offered rate: the share served and the p99 TTFT.
    let records = records(&run);
    let at = |rate: u64| -> &Value {
        records
            .iter()
            .find(|r| r["point"]["request_rate"] == rate)
            .map(|r| &r["metrics"])
            .unwrap_or_else(|| panic!("no record at {rate}: {records:?}"))
    };
    let f = |m: &Value, k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k}: {m}"));
    let (low, high) = (at(5), at(2000));
    let behind = |rate: f64, m: &Value| f(m, "request_throughput") < 0.95 * rate;
    assert!(!behind(5.0, low), "the sim keeps up with 5 req/s: {low}");
    assert!(
        behind(2000.0, high),
        "2 in flight cannot serve 2000 req/s: {high}"
    );
    assert!(
        f(high, "p99_ttft_ms") > 2.0 * f(low, "p99_ttft_ms"),
        "requests queue at 2000 req/s: {low} {high}"
    );

    let marked = tooltips_saying(chart(&html, "served"), "falls behind");
    assert_eq!(marked.len(), 1, "{marked:?}");
    assert!(marked[0].contains("offered 2000 req/s:"), "{}", marked[0]);
    let departs = tooltips_saying(chart(&html, "ttft-rate"), "latency departs");
    assert_eq!(departs.len(), 1, "{departs:?}");
    assert!(departs[0].contains("request_rate=2000:"), "{}", departs[0]);

    // The same story in words, judged by a limit between the two rates' p99 TTFT.
    let limit = (f(low, "p99_ttft_ms") * f(high, "p99_ttft_ms")).sqrt();
    let slo = format!("p99_ttft_ms={limit:.3}");
    let show = |format: &str| {
        let args = ["show", run.to_str().unwrap(), "--slo", &slo, "--format", format];
        let out = run_rigrun(dir.path(), &args);
        assert!(out.status.success(), "{:?}", text(&out));
        text(&out).0
    };
    let table = show("table");
    let story = table
        .lines()
        .find(|l| l.trim_start().starts_with("sim: 5→"))
        .unwrap_or_else(|| panic!("no rate story:\n{table}"));
    let share = |rate: f64, m: &Value| 100.0 * f(m, "request_throughput") / rate;
    assert!(story.contains(&format!("({:.0}%)", share(5.0, low))), "{story}");
    assert!(
        story.contains(&format!("({:.0}%)", share(2000.0, high))),
        "{story}"
    );
    assert!(story.contains("falls behind at 2000 req/s"), "{story}");
    assert!(story.contains("p99 TTFT departs at 2000 req/s"), "{story}");
    assert!(story.contains("up to 5 req/s"), "{story}");
    assert!(
        !table.contains("— within SLO"),
        "no capacity by concurrency:\n{table}"
    );
    let json: Value = serde_json::from_str(&show("json")).unwrap();
    let rates = &json["tables"][0]["rates"][0];
    assert_eq!(rates["falls_behind"], 2000.0, "{rates}");
    assert_eq!(rates["latency_departs"], 2000.0, "{rates}");
    assert_eq!(rates["within_slo"]["rate"], 5.0, "{rates}");
    assert_eq!(json["tables"][0]["slo"], Value::Null, "{json}");
    let csv = show("csv");
    assert!(csv.contains(",rate,sim,falls behind,2000,falls behind,"), "{csv}");
    assert!(csv.contains(",rate,sim,within slo,5,within slo,"), "{csv}");

    // Two runs compared: each run's story per host, judged alike, and still no concurrency
    // capacity.
    let out = run_rigrun(dir.path(), &["run", "rates.yaml", "--runs-dir", "runs", "-q"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let mut runs: Vec<_> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.is_symlink() && p.join("run.json").is_file())
        .collect();
    runs.sort();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let (first, second) = (runs[0].to_str().unwrap(), runs[1].to_str().unwrap());
    let args = ["compare", first, second, "--slo", &slo, "--format", "json"];
    let out = run_rigrun(dir.path(), &args);
    assert!(out.status.success(), "{:?}", text(&out));
    let json: Value = serde_json::from_str(&text(&out).0).unwrap();
    let stories = json["tables"][0]["rates"].as_array().unwrap();
    assert_eq!(stories.len(), 2, "{json}");
    for story in stories {
        assert!(story["name"].as_str().unwrap().starts_with("sim @"), "{story}");
        assert_eq!(story["falls_behind"], 2000.0, "{story}");
    }
    assert_ne!(stories[0]["name"], stories[1]["name"], "{stories:?}");
    assert_eq!(json["tables"][0]["slo"], Value::Null, "{json}");
    let out = run_rigrun(dir.path(), &["compare", first, second, "--slo", &slo]);
    let table = text(&out).0;
    let told = table
        .lines()
        .filter(|l| l.trim_start().starts_with("sim @"))
        .count();
    assert_eq!(told, 2, "{table}");
    assert!(!table.contains("— within SLO"), "{table}");
}
