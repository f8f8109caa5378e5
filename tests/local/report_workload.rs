//! Across runs, the workload is compared as well as the numbers: a change between runs that
//! measured different workloads (`-e output_len=32` and `40`) is marked as such and never
//! judged, what differs names the workload, and runs that share no sweep point say so in a line.

use crate::common::text;
use crate::reporting::{rigrun_ok, run, setup};

/// One host-independent sweep whose throughput depends on the output length it is given.
const LENGTHS: &str = r#"
name: lengths
vars: {output_len: 32}
steps:
  - run-sweep:
      matrix: {concurrency: [1, 4]}
      command: >-
        echo '{"output_throughput": {{ 1000 + output_len }}, "output_len": {{ output_len }},
        "out_dir": "/results/{{ run_id }}"}'
"#;

#[test]
fn a_change_between_different_workloads_is_marked_and_not_judged() {
    let dir = setup(LENGTHS);
    let (a, out) = run(dir.path(), &["-e", "output_len=32"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let (b, _) = run(dir.path(), &["-e", "output_len=32"]);
    let (c, _) = run(dir.path(), &["-e", "output_len=64"]);
    let (a, b, c) = (a.to_str().unwrap(), b.to_str().unwrap(), c.to_str().unwrap());

    // The same workload (the run ids in the commands aside): plain changes, nothing marked.
    let same = rigrun_ok(&["compare", a, b, "--metric", "output_throughput"], 0);
    assert!(!same.contains("other workload"), "{same}");
    assert!(same.contains("+0.0%"), "{same}");

    let md = rigrun_ok(
        &[
            "compare",
            a,
            c,
            "--metric",
            "output_throughput",
            "--format",
            "markdown",
        ],
        0,
    );
    let row = md.lines().find(|l| l.starts_with("| concurrency=1 |")).unwrap();
    // 1064 against 1032: +3.1%, which would otherwise read as a plain change.
    assert!(row.contains("+3.1% other workload [1]"), "{md}");
    assert!(!md.contains("improvement") && !md.contains("regression"), "{md}");
    assert!(
        md.contains(
            "[1] another workload than the first run's (output_len 32 → 64): not a like-for-like change"
        ),
        "{md}"
    );
    // What differs names the workload: the -e value and the benchmark's parameter.
    let facts = rigrun_ok(&["compare", a, c, "--facts"], 0);
    let line = |name: &str| {
        facts
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name}: {facts}"))
    };
    assert!(
        line("-e output_len").contains("32") && line("-e output_len").contains("64"),
        "{facts}"
    );
    assert!(line("step 1 output_len").contains("64"), "{facts}");
    assert!(!facts.contains("all facts the same"), "{facts}");
    let json = rigrun_ok(
        &[
            "compare",
            a,
            c,
            "--metric",
            "output_throughput",
            "--format",
            "json",
        ],
        0,
    );
    assert!(
        json.contains("\"other_workload\": \"output_len 32 → 64"),
        "{json}"
    );
}

/// Another playbook, whose only sweep is named otherwise: it shares no point with `lengths`.
const OTHER: &str = r#"
name: other
steps:
  - run-sweep:
      name: elsewhere
      matrix: {concurrency: [1]}
      command: "echo '{\"output_throughput\": 1}'"
"#;

#[test]
fn runs_that_share_no_sweep_point_say_so_in_one_line() {
    let dir = setup(LENGTHS);
    let (a, _) = run(dir.path(), &[]);
    let (b, _) = run(dir.path(), &[]);
    std::fs::write(dir.path().join("sweep.yaml"), OTHER).unwrap();
    let (other, _) = run(dir.path(), &[]);
    let (a, b, other) = (a.to_str().unwrap(), b.to_str().unwrap(), other.to_str().unwrap());
    let out = crate::common::rigrun()
        .args(["compare", a, other])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "no table of `not run`: {stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("(playbook other) shares no sweep point with run"),
        "{stderr}"
    );
    // With a run that does share points, the other is left out, and said.
    let out = crate::common::rigrun()
        .args(["compare", a, b, other])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("shares no sweep point") && stderr.contains("left out of the comparison"),
        "{stderr}"
    );
    assert!(
        stdout.contains("across 2 runs") && !stdout.contains("not run"),
        "{stdout}"
    );
}
