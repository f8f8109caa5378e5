//! Bad input: exit code 2, the file, line and column, and no host contacted.

use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::*;

/// A TCP listener standing in for a host's sshd that counts the connections it gets.
struct Tripwire {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Tripwire {
    fn new() -> Tripwire {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        Tripwire { port, hits }
    }
}

fn inventory(dir: &Path, port: u16) {
    let text = format!(
        "vars: {{url: \"http://127.0.0.1:30000\"}}\nhosts:\n  gpu1:\n    address: 127.0.0.1\n    port: {port}\n    vars: {{kv: 1000}}\n  gpu2:\n    address: 127.0.0.1\n    port: {port}\ngroups:\n  gpu: [gpu1, gpu2]\n"
    );
    std::fs::write(dir.join("hosts.yaml"), text).unwrap();
}

/// Runs `check` and `run` on a bad playbook; both must exit 2 naming `file:line:col` and
/// containing `message`, and no host may be contacted.
fn assert_rejected(playbook: &str, location: &str, message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let trip = Tripwire::new();
    inventory(dir.path(), trip.port);
    std::fs::write(dir.path().join("bench.py"), "print('{}')\n").unwrap();
    std::fs::write(dir.path().join("bad.yaml"), playbook).unwrap();
    for command in ["check", "run", "plan"] {
        let out = run_rigrun(
            dir.path(),
            &[command, "bad.yaml", "--runs-dir", "runs"][..if command == "run" { 4 } else { 2 }],
        );
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!("bad.yaml:{location}")),
            "{command}: expected bad.yaml:{location} in:\n{stderr}"
        );
        assert!(
            stderr.contains(message),
            "{command}: expected `{message}` in:\n{stderr}"
        );
    }
    assert_eq!(trip.hits.load(Ordering::SeqCst), 0, "a host was contacted");
    assert!(!dir.path().join("runs").exists(), "a run directory was created");
}

#[test]
fn a_step_kind_typo_lists_the_kinds_and_suggests_the_closest() {
    assert_rejected(
        "name: t\nsteps:\n  - run-swep:\n      command: echo\n",
        "3:5",
        "did you mean `run-sweep`?",
    );
}

#[test]
fn an_unknown_field_is_named() {
    assert_rejected(
        "name: t\nsteps:\n  - shell:\n      comand: echo\n",
        "4:7",
        "unknown field `comand`",
    );
}

#[test]
fn a_wrong_type_is_named() {
    assert_rejected(
        "name: t\nsteps:\n  - run-sweep:\n      command: echo\n      stop_on_failure: maybe\n",
        "5:24",
        "invalid boolean",
    );
}

#[test]
fn an_undefined_variable_names_the_hosts_it_is_missing_on() {
    assert_rejected(
        "name: t\nhosts: [gpu]\nsteps:\n  - shell:\n      command: echo {{ kv }} {{ url }}\n",
        "5:16",
        "`kv` is not defined for host gpu2",
    );
}

#[test]
fn an_unknown_host_suggests_the_closest() {
    assert_rejected(
        "name: t\nhosts: [gpu3]\nsteps: []\n",
        "2:9",
        "did you mean `gpu1`?",
    );
}

#[test]
fn a_missing_script_is_an_error_before_any_host_is_touched() {
    assert_rejected(
        "name: t\nsteps:\n  - copy-script: {src: nothere.py, dest: /tmp/x}\n",
        "3:24",
        "nothere.py does not exist",
    );
}

#[test]
fn a_bad_duration_explains_the_format() {
    assert_rejected(
        "name: t\nsteps:\n  - shell: {command: echo, timeout: soon}\n",
        "3:37",
        "write it like 90s, 10m or 1h",
    );
}

#[test]
fn an_alias_bomb_is_refused_quickly() {
    let mut yaml = String::from("name: t\nvars:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..30 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        yaml.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
    }
    yaml.push_str("steps: []\n");
    assert_rejected(&yaml, "", "budget breached");
}

#[test]
fn deep_nesting_is_refused_quickly() {
    let yaml = format!("name: t\nvars: {{x: {}}}\nsteps: []\n", "[".repeat(200_000));
    assert_rejected(&yaml, "2:", "");
}

#[test]
fn a_huge_file_is_refused_without_parsing() {
    let yaml = format!("name: t\nsteps: []\n# {}\n", "x".repeat(5 * 1024 * 1024));
    let dir = tempfile::tempdir().unwrap();
    inventory(dir.path(), 1);
    std::fs::write(dir.path().join("bad.yaml"), yaml).unwrap();
    let out = run_rigrun(dir.path(), &["check", "bad.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("at most 4194304 bytes"), "{:?}", text(&out));
}

#[test]
fn a_bad_extra_var_is_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    inventory(dir.path(), 1);
    std::fs::write(dir.path().join("ok.yaml"), "name: t\nsteps: []\n").unwrap();
    let out = run_rigrun(dir.path(), &["check", "ok.yaml", "-e", "novalue"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("is not KEY=VALUE"));
    let out = run_rigrun(dir.path(), &["check", "ok.yaml", "-l", "nohost"]);
    assert_eq!(out.status.code(), Some(2));
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("`nohost` is not one of this playbook's hosts or their groups (gpu1, gpu2)"),
        "{stderr}"
    );
    let out = run_rigrun(dir.path(), &["plan", "ok.yaml", "-l", "gpu"]);
    assert!(
        out.status.success(),
        "a group name limits to its hosts: {:?}",
        text(&out)
    );
}

#[test]
fn a_host_name_that_would_not_be_a_plain_folder_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hosts.yaml"),
        "hosts:\n  ../evil:\n    connection: local\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("ok.yaml"), "name: t\nsteps: []\n").unwrap();
    let out = run_rigrun(dir.path(), &["check", "ok.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("hosts.yaml:3:"), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("host name `../evil` may only use"),
        "{:?}",
        text(&out)
    );
}

#[test]
fn a_valid_playbook_checks_clean() {
    let dir = tempfile::tempdir().unwrap();
    inventory(dir.path(), 1);
    std::fs::write(
        dir.path().join("ok.yaml"),
        "name: t\nhosts: [gpu1]\nsteps:\n  - run-sweep:\n      matrix: {c: [1, 2, 4]}\n      skip_if: c * 500 > kv\n      command: echo {{ c }}\n",
    )
    .unwrap();
    let out = run_rigrun(dir.path(), &["check", "ok.yaml"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        text(&out).0.contains("1 hosts, 1 steps, 3 sweep points"),
        "{:?}",
        text(&out)
    );
    let out = run_rigrun(dir.path(), &["plan", "ok.yaml"]);
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("c=4  SKIP: c * 500 = 2000 > kv = 1000"),
        "{stdout}"
    );
    assert!(stdout.contains("c=2  $ echo 2"), "{stdout}");
}
