//! A sweep whose points run and exit 0 but print no record: every format says `ran, no record`
//! (never `not run`, which is for points that did not run), charts mark such a point with the
//! same words, and the run exits 1 when nothing at all was measured on a host (0 when a later
//! step's fetched files hold its results).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;
use crate::report::show;

/// Runs `playbook` on one local host in a fresh folder; returns the folder, the output and the
/// run directory.
fn run(playbook: &str) -> (tempfile::TempDir, std::process::Output, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    one_local_host(dir.path(), "", "");
    std::fs::write(dir.path().join("p.yaml"), playbook).unwrap();
    let out = run_rigrun(dir.path(), &["run", "p.yaml", "--runs-dir", "runs"]);
    let run_dir = only_run_dir(&dir.path().join("runs"));
    (dir, out, run_dir)
}

/// The `status` of each point's cell in the sweep's table (`show --format json`).
fn json_statuses(run: &Path) -> Vec<String> {
    let output: Value = serde_json::from_str(&show(run, "json")).unwrap();
    let tables = &output["tables"];
    let sweep = tables
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["title"].as_str().unwrap().ends_with("run-sweep"))
        .unwrap_or_else(|| panic!("no sweep table: {tables:#}"));
    sweep["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["cells"][1]["status"].as_str().unwrap().to_string())
        .collect()
}

const SILENT_SWEEP: &str = "name: silent\nsteps:\n  - run-sweep:\n      matrix: {n: [1, 2, 3]}\n      \
    command: \"echo 'benchmark done, n={{ n }}'\"\n";

#[test]
fn points_that_ran_without_a_record_say_so_in_every_format_and_the_run_exits_1() {
    let (_dir, out, run_dir) = run(SILENT_SWEEP);
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing measured is not a success:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains(
            "error: h: nothing measured: 3 points of run-sweep ran and exited 0 but printed no record"
        ) && stderr.contains("every step succeeded, but nothing was measured on h"),
        "{stderr}"
    );
    // The closing table: each point's cell, one note saying why; nothing reads `not run`.
    assert_eq!(stdout.matches("ran, no record [1]").count(), 3, "{stdout}");
    assert!(
        stdout.contains("[1] ran, no record: its command exited 0 and printed no record on stdout"),
        "{stdout}"
    );
    for shown in [
        stdout.clone(),
        show(&run_dir, "table"),
        show(&run_dir, "markdown"),
    ] {
        assert!(!shown.contains("not run"), "{shown}");
    }
    assert_eq!(json_statuses(&run_dir), ["ran, no record"; 3]);
    let csv = show(&run_dir, "csv");
    // Each point's line: no value, status `ran, no record` (quoted: it holds a comma), why.
    let points: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(points.len(), 3, "{csv}");
    assert!(
        points
            .iter()
            .all(|l| l.contains(",h,,\"ran, no record\",its command exited 0")),
        "{csv}"
    );
    let markdown = show(&run_dir, "markdown");
    assert_eq!(
        markdown.matches("| ran, no record [1] |").count(),
        3,
        "{markdown}"
    );
}

/// A sweep that writes its results to files a later step fetches measured something: exit 0,
/// and its own cells still say that its points printed no record.
#[test]
fn a_silent_sweep_whose_files_are_fetched_measured_something() {
    let playbook = "name: files\nsteps:\n  - run-sweep:\n      matrix: {n: [1, 2]}\n      \
        command: \"mkdir -p {{ workdir }}/out && echo '{\\\"output_throughput\\\": {{ n }}}' > {{ workdir }}/out/n{{ n }}.json\"\n  \
        - fetch-results:\n      src: \"{{ workdir }}/out/*.json\"\n";
    let (_dir, out, run_dir) = run(playbook);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("nothing measured"), "{stderr}");
    assert_eq!(json_statuses(&run_dir), ["ran, no record"; 2]);
    assert_eq!(records(&run_dir).len(), 2, "one record per fetched file");
}

/// A concurrency sweep whose first point prints no record: its chart marks that point
/// `ran, no record` with the reason, as the table does, not `not run`.
#[test]
fn a_chart_marks_a_point_without_a_record_as_its_table_does() {
    let playbook = "name: partly\nsteps:\n  - run-sweep:\n      matrix: {concurrency: [1, 2, 4]}\n      \
        command: \"[ {{ concurrency }} = 1 ] || echo '{\\\"output_throughput\\\": {{ concurrency * 10 }}}'\"\n";
    let (dir, out, run_dir) = run(playbook);
    assert!(out.status.success(), "{:?}", text(&out));
    let html = dir.path().join("r.html");
    let report = rigrun()
        .args([
            "report",
            run_dir.to_str().unwrap(),
            "--out",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(report.status.success(), "{:?}", text(&report));
    let html = std::fs::read_to_string(html).unwrap();
    assert!(html.contains("class=\"norecord\""), "the table's cell");
    assert!(html.contains("<svg"), "no chart drawn");
    assert!(
        html.contains("ran, no record: its command exited 0"),
        "the chart's mark says why"
    );
    assert!(!html.contains("not run"), "a point that ran is never `not run`");
}
