//! `show` and `compare` on a run with an invalid record, a skipped point and references: cells
//! are marked and never compared, and the scaling story sits under each sweep table.

use crate::common::text;
use crate::reporting::{rigrun_ok, run, setup, PLAYBOOK};

#[test]
fn invalid_cells_are_marked_and_never_compared() {
    let dir = setup(PLAYBOOK);
    let (run_dir, out) = run(dir.path(), &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    let run = run_dir.to_str().unwrap();

    let md = rigrun_ok(&["compare", run, "--format", "markdown"], 0);
    let row = md.lines().find(|l| l.starts_with("| concurrency=4 |")).unwrap();
    assert_eq!(row, "| concurrency=4 | 527.8 | invalid [1] | — |");
    assert!(md.contains("[1] invalid: 2 of 12 requests failed"), "{md}");
    let row = md.lines().find(|l| l.starts_with("| concurrency=64 |")).unwrap();
    assert!(row.ends_with("| skipped [3] | — |"), "{row}");

    let json: serde_json::Value =
        serde_json::from_str(&rigrun_ok(&["show", run, "--format", "json"], 0)).unwrap();
    let cell = &json["tables"][0]["rows"][1]["cells"][2];
    assert_eq!(cell["status"], "invalid");
    assert_eq!(cell["reason"], "2 of 12 requests failed");
    let csv = rigrun_ok(&["show", run, "--format", "csv"], 0);
    assert!(csv.contains(",concurrency=4,slow,263.9"), "{csv}");
    assert!(csv.contains(",invalid,2 of 12 requests failed"), "{csv}");
}

#[test]
fn the_scaling_story_is_told_under_each_sweep() {
    let dir = setup(PLAYBOOK);
    let (run_dir, _) = run(dir.path(), &[]);
    let run = run_dir.to_str().unwrap();
    let table = rigrun_ok(&["show", run], 0);
    // Throughput ∝ C^0.7: each ×4 in concurrency gives ×2.64, 66% efficient, +62% per doubling.
    assert!(
        table.contains("  fast: 1→4 ×2.64 (66% efficient), 4→16 ×2.64 (66% efficient), 16→64 ×2.64 (66% efficient); no knee up to C=64 (still +62% per doubling); no capacity limit reached up to C=64"),
        "{table}"
    );
    assert!(
        table.contains("  slow: 1→16 ×6.96 (44% efficient); C=4 left out (invalid: 2 of 12 requests failed); no knee up to C=16 (still +62% per doubling); capacity limit: C=64 skipped (concurrency = 64 > cap = 16)"),
        "{table}"
    );
    let md = rigrun_ok(&["show", run, "--format", "markdown"], 0);
    assert!(
        md.contains("**scaling of output_throughput with concurrency:**"),
        "{md}"
    );
    assert!(md.contains("\n- fast: 1→4 ×2.64"), "{md}");
    let csv = rigrun_ok(&["show", run, "--format", "csv"], 0);
    assert!(
        csv.contains(",output_throughput,slow,limit,64,skipped,concurrency = 64 > cap = 16"),
        "{csv}"
    );
    assert!(
        csv.contains(",output_throughput,fast,C=1→4,0.6598,efficiency,"),
        "{csv}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&rigrun_ok(&["show", run, "--format", "json"], 0)).unwrap();
    let tables = &json["tables"];
    assert_eq!(tables[0]["scaling"][1]["limit"]["concurrency"], 64.0);
    assert!(
        tables[1].get("scaling").is_none(),
        "one level per host in the long-context sweep: no story"
    );
}

#[test]
fn show_compare_and_report_refuse_bad_input_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["show", "compare", "report"] {
        let out = crate::common::rigrun()
            .args([command, dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            text(&out).1.contains("is not a run directory"),
            "{command}: {:?}",
            text(&out)
        );
    }

    let setup_dir = setup(PLAYBOOK);
    let (run_dir, _) = run(setup_dir.path(), &[]);
    let out = crate::common::rigrun()
        .args([
            "report",
            run_dir.to_str().unwrap(),
            "--out",
            "/nonexistent/dir/r.html",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out)
            .1
            .contains("--out /nonexistent/dir/r.html: cannot write the report"),
        "{:?}",
        text(&out)
    );
    let out = crate::common::rigrun()
        .args(["report", run_dir.to_str().unwrap(), "--baseline", "nope"])
        .current_dir(setup_dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out)
            .1
            .contains("no such host in the run (hosts: fast, slow)"),
        "{:?}",
        text(&out)
    );
}
