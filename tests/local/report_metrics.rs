//! The metrics of the tables: a name no record has is refused with the closest one and the
//! list (`--metric`, `--slo`), several metrics give a table each, and without `--metric` a sweep
//! shows a summary (throughput, TTFT, TPOT, ITL) of the metrics its records have.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{rigrun, text};

/// A demo run kept as a fixture (streamed: it has TTFT, TPOT and ITL).
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/20261201T102538Z-demo")
}

fn refused(args: &[&str]) -> String {
    let out = rigrun().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {:?}", text(&out));
    assert!(
        text(&out).0.is_empty(),
        "nothing printed on stdout: {:?}",
        text(&out)
    );
    text(&out).1
}

#[test]
fn a_metric_or_slo_no_record_has_is_refused_with_the_closest_name_and_the_list() {
    let run = fixture();
    let run = run.to_str().unwrap();
    let said = refused(&["show", run, "--metric", "foo"]);
    assert!(
        said.contains("--metric foo: no record of run 20261201T102538Z-demo has this metric"),
        "{said}"
    );
    assert!(
        said.contains("the records hold (") && said.contains("median_tpot_ms"),
        "{said}"
    );
    let said = refused(&["show", run, "--metric", "output_throughput,p99_ttft"]);
    assert!(
        said.contains("--metric p99_ttft: ") && said.contains("did you mean `p99_ttft_ms`?"),
        "{said}"
    );
    let said = refused(&["compare", run, "--slo", "p99_ttft=2000"]);
    assert!(
        said.contains("--slo p99_ttft: ") && said.contains("did you mean `p99_ttft_ms`?"),
        "{said}"
    );
    let said = refused(&["compare", run, run, "--metric", "outptu_throughput"]);
    assert!(
        said.contains("no record of the 2 runs compared has this metric; did you mean `output_throughput`?"),
        "{said}"
    );
    let html = tempfile::NamedTempFile::new().unwrap();
    let said = refused(&[
        "report",
        run,
        "--metric",
        "p99_tpot",
        "--out",
        html.path().to_str().unwrap(),
    ]);
    assert!(said.contains("did you mean `p99_tpot_ms`?"), "{said}");
}

/// The JSON tables of `args`: (step, metric) of each.
fn tables(args: &[&str]) -> Vec<(String, String)> {
    let out = rigrun().args(args).args(["--format", "json"]).output().unwrap();
    assert!(out.status.success(), "{args:?}: {:?}", text(&out));
    let json: Value = serde_json::from_str(&text(&out).0).unwrap();
    json["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["title"].as_str().unwrap().to_string(),
                t["metric"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn several_metrics_give_a_table_each_and_a_sweep_shows_a_summary_by_default() {
    let run = fixture();
    let run = run.to_str().unwrap();
    let sweep = |tables: &[(String, String)]| -> Vec<String> {
        tables
            .iter()
            .filter(|(title, _)| title.ends_with("run-sweep"))
            .map(|(_, metric)| metric.clone())
            .collect()
    };
    let asked = tables(&["show", run, "--metric", "p99_ttft_ms,output_throughput"]);
    assert_eq!(sweep(&asked), ["p99_ttft_ms", "output_throughput"], "{asked:?}");
    let summary = [
        "output_throughput",
        "median_ttft_ms",
        "p99_ttft_ms",
        "median_tpot_ms",
        "p99_itl_ms",
    ];
    for command in ["show", "compare"] {
        let shown = tables(&[command, run]);
        assert_eq!(sweep(&shown), summary, "{command}: {shown:?}");
    }
    // The fetched result files repeat the sweep's numbers: one table, not the summary.
    let fetched: Vec<_> = tables(&["show", run])
        .into_iter()
        .filter(|(t, _)| t.ends_with("fetch-results"))
        .collect();
    assert_eq!(fetched.len(), 1, "{fetched:?}");
}

/// A playbook's `slo:` on a metric no record has cannot be judged, and says so, naming the
/// closest metric, rather than finding every host without a point within it.
#[test]
fn a_playbook_slo_on_a_metric_no_record_has_says_it_cannot_be_judged() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("20261201T102538Z-demo");
    std::fs::create_dir_all(&run).unwrap();
    for file in ["records.jsonl", "events.jsonl"] {
        std::fs::copy(fixture().join(file), run.join(file)).unwrap();
    }
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("run.json")).unwrap()).unwrap();
    manifest["slo"] = serde_json::json!({"p99_ttft": 2000});
    std::fs::write(run.join("run.json"), manifest.to_string()).unwrap();
    let out = rigrun().args(["show", run.to_str().unwrap()]).output().unwrap();
    let (shown, said) = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        shown.contains("within SLO (p99_ttft ≤ 2000): cannot be judged: no record has p99_ttft (did you mean p99_ttft_ms?)"),
        "{shown}"
    );
    assert!(!shown.contains("no point within SLO"), "{shown}");
}
