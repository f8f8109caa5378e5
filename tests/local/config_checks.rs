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
