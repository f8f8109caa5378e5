//! Mistakes `check` (and `plan`, and `run` before anything starts) catches that would otherwise
//! cost a GPU hour: a matrix value of another kind, a zero timeout, a variable's typo (placed at
//! the typo, with a suggestion), a `-l` typo.

use crate::common::*;
use crate::config_errors::{assert_rejected, inventory};

#[test]
fn a_matrix_value_of_another_kind_is_an_error_at_that_value() {
    let stderr = assert_rejected(
        "name: t\nsteps:\n  - run-sweep:\n      matrix: {concurrency: [1, 4, l6, 64]}\n      skip_if: concurrency * 2000 > 100000\n      command: echo {{ concurrency }}\n",
        "4:36: matrix `concurrency`: `l6` is text while the other values are numbers",
        "every value of an axis is of one kind; did you mean 16?",
    );
    assert_eq!(
        stderr.matches("error:").count(),
        1,
        "said once for both hosts: {stderr}"
    );
    assert_rejected(
        "name: t\nsteps:\n  - run-sweep:\n      matrix:\n        model: [qwen, llama, 7]\n      command: echo\n",
        "5:30: matrix `model`: `7` is a number while the other values are text",
        "write every value of `model` as text",
    );
}

#[test]
fn a_zero_timeout_is_an_error_where_it_is_written() {
    for (kind, fields) in [
        ("run-sweep", "command: echo"),
        ("shell", "command: echo"),
        ("verify-server", "url: http://x"),
    ] {
        assert_rejected(
            &format!("name: t\nsteps:\n  - {kind}:\n      {fields}\n      timeout: 0s\n"),
            "5:16: a timeout of 0s would stop the step before it does anything",
            "like 30m, or leave timeout: out for no limit",
        );
    }
}

#[test]
fn a_variable_typo_is_placed_at_the_typo_inside_a_folded_command_and_suggests_the_name() {
    let stderr = assert_rejected(
        "name: t\nhosts: [gpu1]\nvars: {input_len: 1000}\nsteps:\n  - run-sweep:\n      matrix: {c: [1]}\n      command: >-\n        bench --url {{ url }}\n        --concurrency {{ c }} --input-len {{ input_lne }}\n",
        "9:46: `input_lne` is not defined for host gpu1; did you mean `input_len`?",
        "Otherwise define it under vars: in the inventory, the host or the playbook, or pass -e input_lne=VALUE",
    );
    let caret = stderr.lines().nth(3).unwrap_or_default();
    let line = stderr.lines().nth(2).unwrap_or_default();
    let at = caret.find('^').expect("a caret");
    assert!(
        line[at..].starts_with("input_lne"),
        "the caret is under the typo:\n{stderr}"
    );
}

#[test]
fn a_limit_typo_suggests_the_host_or_group() {
    let dir = tempfile::tempdir().unwrap();
    inventory(dir.path(), 1);
    std::fs::write(dir.path().join("ok.yaml"), "name: t\nsteps: []\n").unwrap();
    for (typo, best) in [("gpu11", "gpu1"), ("gpu3", "gpu1")] {
        let out = run_rigrun(dir.path(), &["check", "ok.yaml", "-l", typo]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "-l: `{typo}` is not one of this playbook's hosts or their groups; did you mean `{best}`?"
            )),
            "{stderr}"
        );
    }
}

/// A folder with a local host and `playbook` as p.yaml.
fn local_playbook(playbook: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hosts.yaml"),
        "hosts:\n  here:\n    connection: local\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("p.yaml"), playbook).unwrap();
    dir
}

/// `check`, `plan` and `run` of p.yaml with `extra` all refuse (exit 2, nothing run) with
/// `message` on stderr.
fn assert_refused(dir: &std::path::Path, extra: &[&str], message: &str) {
    for command in ["check", "plan", "run"] {
        let mut args = vec![command, "p.yaml", "--runs-dir", "runs"];
        if command != "run" {
            args.truncate(2);
        }
        args.extend_from_slice(extra);
        let out = run_rigrun(dir, &args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(message),
            "{command}: expected `{message}` in:\n{stderr}"
        );
    }
    assert!(!dir.join("runs").exists(), "nothing runs");
}

/// A sweep over `c` whose command prints a record, failing for `c` = 2.
const SWEEP: &str = "name: t\nvars: {output_len: 32}\nsteps:\n  - run-sweep:\n      matrix: {c: [1, 2, 4]}\n      command: \"test {{ c }} != 2 && echo '{\\\"x\\\": {{ c }}, \\\"n\\\": {{ output_len }}}'\"\n";

#[test]
fn an_extra_var_no_template_uses_is_an_error_with_the_closest_name() {
    let dir = local_playbook(SWEEP);
    assert_refused(
        dir.path(),
        &["-e", "outptu_len=64"],
        "error: -e: `outptu_len` is not used by any template of p.yaml; did you mean `output_len`?",
    );
    let out = run_rigrun(dir.path(), &["check", "p.yaml", "-e", "output_len=64"]);
    assert!(out.status.success(), "{:?}", text(&out));
}

#[test]
fn an_extra_var_a_matrix_axis_replaces_is_an_error_naming_only() {
    let dir = local_playbook(SWEEP);
    assert_refused(
        dir.path(),
        &["-e", "c=4"],
        "error: -e: `c=4` would be ignored: `c` is an axis of the matrix of step 1 (run-sweep), whose values replace it; to run chosen points, pass --only c=4 instead",
    );
}

#[test]
fn only_names_an_axis_and_values_some_sweep_has() {
    let dir = local_playbook(SWEEP);
    assert_refused(
        dir.path(),
        &["--only", "d=1"],
        "error: --only: no sweep has the axis `d`; did you mean `c`?",
    );
    assert_refused(
        dir.path(),
        &["--only", "c=3"],
        "error: --only: no sweep has the point c=3 (c is 1, 2, 4); did you mean `c=2`?",
    );
    assert_refused(
        dir.path(),
        &["--only", "c"],
        "error: --only: `c` is not AXIS=VALUE",
    );
}

#[test]
fn only_runs_the_chosen_points_and_the_run_keeps_the_filter() {
    let dir = local_playbook(SWEEP);
    let out = run_rigrun(dir.path(), &["plan", "p.yaml", "--only", "c=2", "--only", "c=4"]);
    let (plan, _) = text(&out);
    assert!(
        plan.contains("1 step; 2 sweep points to run (1 more left out by --only)"),
        "{plan}"
    );
    assert!(
        plan.contains("run-sweep: 2 points (1 more point left out by --only)"),
        "{plan}"
    );
    assert!(!plan.contains("c=1"), "{plan}");

    let out = run_rigrun(
        dir.path(),
        &["run", "p.yaml", "--runs-dir", "runs", "--only", "c=2,c=4"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "c=2 fails: {stdout}\n{stderr}");
    let run_dir = only_run_dir(&dir.path().join("runs"));
    let points: Vec<String> = records(&run_dir)
        .iter()
        .map(|r| r["point"]["c"].to_string())
        .collect();
    assert_eq!(points, ["2", "4"], "only the chosen points ran");
    assert_eq!(
        manifest(&run_dir)["playbook"]["only"],
        serde_json::json!(["c=2", "c=4"])
    );

    // The report does not list the point left out as `not run`.
    let out = run_rigrun(
        dir.path(),
        &["show", run_dir.to_str().unwrap(), "--format", "csv"],
    );
    let (csv, _) = text(&out);
    assert!(csv.contains("c=4"), "{csv}");
    assert!(!csv.contains("c=1"), "{csv}");
    assert!(!csv.contains("not run"), "{csv}");

    // A resume has nothing left: the point left out is not work.
    let out = run_rigrun(dir.path(), &["run", "--resume", run_dir.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("nothing left to run; its failed points stand"),
        "{stderr}"
    );
    assert!(!stderr.contains("c=1"), "{stderr}");
    let points = records(&run_dir).len();
    assert_eq!(points, 2, "the resume ran nothing");
}

#[test]
fn check_and_plan_count_what_runs_with_repetitions_and_variants() {
    let playbook = "name: t\nserver:\n  command: serve\n  url: http://127.0.0.1:1\n  variants: {spec: [off, on]}\nsteps:\n  - run-sweep:\n      matrix: {c: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n      skip_if: c > 9\n      repeat: 3\n      command: echo {{ c }}\n";
    let dir = local_playbook(playbook);
    let out = run_rigrun(dir.path(), &["check", "p.yaml"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    // 9 points run (10 is skipped), each 3 times, against each of 2 variants: 54 runs.
    assert_eq!(
        stdout.trim_end(),
        "p.yaml and hosts.yaml are valid: 1 host, 1 step; in all, 9 sweep points to run, 54 runs counting repetitions and 2 server variants (1 more skipped by skip_if)"
    );
    let out = run_rigrun(dir.path(), &["plan", "p.yaml"]);
    let (plan, _) = text(&out);
    assert!(
        plan.contains("host here (local, workdir ~/.rigrun): 1 step; 9 sweep points to run, 54 runs counting repetitions and 2 server variants (1 more skipped by skip_if)"),
        "{plan}"
    );
    assert!(plan.contains("server, 2 variants, one after another"), "{plan}");
    assert!(
        plan.contains("1. run-sweep: 10 points, each measured 3 times"),
        "{plan}"
    );
}

#[test]
fn a_server_variants_axis_is_named_as_such_for_extra_vars_and_only() {
    let playbook = "name: t\nserver:\n  command: serve --spec {{ spec }}\n  url: http://127.0.0.1:1\n  variants: {spec: [off, on]}\nsteps:\n  - run-sweep:\n      matrix: {c: [1, 2]}\n      command: echo {{ c }}\n";
    let dir = local_playbook(playbook);
    assert_refused(
        dir.path(),
        &["-e", "spec=on"],
        "error: -e: `spec=on` would be ignored: `spec` is an axis of the server's variants, whose values replace it; to measure chosen variants, list only those under `variants:`",
    );
    assert_refused(
        dir.path(),
        &["--only", "spec=on"],
        "error: --only: `spec` is an axis of the server's variants, not of a sweep; --only chooses sweep points (the sweeps' axes are c)",
    );
}
