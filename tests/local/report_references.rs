//! Expected values: references met and missed on real runs (local hosts), `run
//! --check-references` exit codes, and `show`/`compare` marking misses from the run directory
//! alone.

use crate::common::text;
use crate::reporting::{rigrun_ok, run, setup};

/// Throughput = concurrency × speed (fast 200, slow 100); slow's cap (16) skips its C=64. The
/// references are `refs`, indented for the run-sweep step.
fn playbook(refs: &str) -> String {
    format!(
        r#"
name: refs
steps:
  - run-sweep:
      matrix: {{concurrency: [1, 4, 16, 64]}}
      skip_if: concurrency > cap
      command: >-
        echo '{{"output_throughput": {{{{ concurrency * speed }}}}}}'
      references:
{refs}"#
    )
}

#[test]
fn references_met_pass_the_check() {
    let dir = setup(&playbook(
        "        fast:\n          1: {output_throughput: 200 ±5%}\n          concurrency=4: {output_throughput: 800 +-1%}\n        slow:\n          16: {output_throughput: 1590 ±20}\n",
    ));
    let (run_dir, out) = run(dir.path(), &["--check-references"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stderr.contains("reference missed"), "{stderr}");
    let row = stdout.lines().find(|l| l.contains("concurrency=4 ")).unwrap();
    assert!(row.contains("800 ✓"), "{row}");
    let md = rigrun_ok(&["show", run_dir.to_str().unwrap(), "--format", "markdown"], 0);
    assert!(
        md.contains("| concurrency=16 | slow | output_throughput (step 1) | 1590 ±20 | 1600 | +0.6% | met |"),
        "{md}"
    );
}

#[test]
fn a_missed_reference_fails_the_check_and_is_marked_everywhere() {
    let dir = setup(&playbook(
        "        fast:\n          4: {output_throughput: 1000 ±10%}\n          1: {output_throughput: 200 ±5%}\n        slow:\n          64: {output_throughput: 6400 ±10%}\n",
    ));
    let (run_dir, out) = run(dir.path(), &["--check-references"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: reference missed: fast at concurrency=4 (step 1): output_throughput reference 1000 ±10%: 800 is 20.0% below it"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error: reference missed: slow at concurrency=64 (step 1): output_throughput reference 6400 ±10%: no valid value (skipped: concurrency = 64 > cap = 16)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("all hosts succeeded"),
        "the steps themselves succeeded: {stderr}"
    );

    // Without the flag the run succeeds and the misses are warnings.
    let (_, out) = run(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out)
        .1
        .contains("warning: reference missed: fast at concurrency=4"));

    // The run directory alone is enough to check the references again.
    std::fs::remove_file(dir.path().join("sweep.yaml")).unwrap();
    let run = run_dir.to_str().unwrap();
    let table = rigrun_ok(&["show", run], 0);
    let row = table.lines().find(|l| l.contains("concurrency=4 ")).unwrap();
    assert!(row.contains("800 ✗ [1]"), "{row}");
    assert!(
        table.contains("[1] reference 1000 ±10%: 800 is 20.0% below it"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("concurrency=1 ") && l.contains("200 ✓")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("concurrency=64") && l.contains("slow") && l.contains("MISSED")),
        "{table}"
    );

    let md = rigrun_ok(&["compare", run, "--format", "markdown"], 0);
    assert!(md.contains("| concurrency=4 | 800 ✗ [1] | 400 | ×0.50 |"), "{md}");

    let json: serde_json::Value =
        serde_json::from_str(&rigrun_ok(&["show", run, "--format", "json"], 0)).unwrap();
    let cell = &json["tables"][0]["rows"][1]["cells"][1];
    assert_eq!(cell["reference"]["expected"], "1000 ±10%");
    assert_eq!(cell["reference"]["met"], false);
    let csv = rigrun_ok(&["show", run, "--format", "csv"], 0);
    assert!(
        csv.contains(",concurrency=4,fast,800,ok,reference 1000 ±10%: 800 is 20.0% below it"),
        "{csv}"
    );
    assert!(
        csv.contains(",concurrency=1,fast,200,ok,reference 200 ±5%: met"),
        "{csv}"
    );
}
