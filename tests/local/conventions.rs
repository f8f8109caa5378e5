//! The conventions people bring from other CLIs: `--version` with its commit, `-e @FILE`,
//! `RIGRUN_INVENTORY` / `RIGRUN_RUNS_DIR`, `--label`, `rigrun runs`, `runs/latest` and
//! `show latest`.

use crate::common::*;

#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = rigrun().arg("--version").output().unwrap();
    let (stdout, _) = text(&out);
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let expected = match head.status.success() {
        true => String::from_utf8_lossy(&head.stdout).trim().to_string(),
        false => "unknown".into(),
    };
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(stdout.trim(), format!("rigrun {version} (commit {expected})"));
}

/// From a directory with no inventory and no runs: the environment names both; `-e @FILE`
/// sets the sweep's value; the label is kept, listed by `runs` and shown by `show latest`.
#[test]
fn runs_are_found_from_any_directory_by_their_label_and_as_latest() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, elsewhere) = (tmp.path().join("project"), tmp.path().join("elsewhere"));
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    one_local_host(&home, "", "");
    let playbook = home.join("p.yaml");
    let sweep = "name: conv\nsteps:\n  - run-sweep:\n      matrix: {n: [1]}\n      \
                 command: \"echo '{\\\"tokens\\\": {{ tokens }}}'\"\n";
    std::fs::write(&playbook, sweep).unwrap();
    std::fs::write(elsewhere.join("vars.yaml"), "tokens: 4096\n").unwrap();
    let runs = home.join("runs");
    let in_env = |args: &[&str]| {
        rigrun()
            .current_dir(&elsewhere)
            .env("RIGRUN_INVENTORY", home.join("hosts.yaml"))
            .env("RIGRUN_RUNS_DIR", &runs)
            .args(args)
            .output()
            .unwrap()
    };
    let playbook = playbook.to_str().unwrap();
    for label in ["first", "driver 580"] {
        let out = in_env(&["run", playbook, "-e", "@vars.yaml", "--label", label, "-q"]);
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    }
    let dirs = run_dirs(&runs);
    assert_eq!(dirs.len(), 2, "both runs in RIGRUN_RUNS_DIR: {dirs:?}");
    let newest = newest_run_dir(&runs);
    assert_eq!(manifest(&newest)["label"], "driver 580");
    assert_eq!(records(&newest)[0]["metrics"]["tokens"], 4096, "the file's value");
    let latest = std::fs::canonicalize(runs.join("latest")).unwrap();
    assert_eq!(latest, std::fs::canonicalize(&newest).unwrap());

    let (shown, stderr) = text(&in_env(&["show", "latest"]));
    assert!(shown.contains("label: driver 580"), "{shown}{stderr}");
    assert!(shown.contains("4096"), "{shown}");
    let listed = in_env(&["runs"]);
    let (listed, _) = text(&listed);
    let rows: Vec<&str> = listed.lines().filter(|l| l.contains("conv")).collect();
    assert_eq!(rows.len(), 2, "{listed}");
    assert!(
        rows[0].contains("first") && rows[1].contains("driver 580"),
        "oldest first: {listed}"
    );
    assert!(rows.iter().all(|r| r.contains(" ok ")), "{listed}");
    assert!(!listed.contains("latest"), "the link is not a run: {listed}");
}

#[test]
fn completions_and_the_man_page_come_from_the_command_line_itself() {
    let run = |args: &[&str]| {
        let out = rigrun().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {:?}", text(&out));
        text(&out).0
    };
    let bash = run(&["completions", "bash"]);
    let checked = std::process::Command::new("bash")
        .args(["-n", "-c", &bash])
        .output()
        .unwrap();
    assert!(checked.status.success(), "bash reads it: {checked:?}");
    for shell in ["bash", "zsh", "fish"] {
        let script = run(&["completions", shell]);
        for command in [
            "run", "check", "runs", "show", "compare", "report", "bench", "sim",
        ] {
            assert!(script.contains(command), "{shell} completes `{command}`");
        }
        assert!(
            script.contains("--resume") && script.contains("--label"),
            "{shell}: run's flags"
        );
    }
    let man = run(&["man"]);
    assert!(man.contains(".TH rigrun 1"), "{man}");
    assert!(
        man.contains(".SH SUBCOMMANDS") && man.contains("rigrun\\-runs"),
        "{man}"
    );
    let bad = rigrun().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "an unknown shell is bad input");
}
