//! `rigrun check --connect`: every host reached in parallel over real SSH, its facts in one line;
//! a host that cannot be reached is named with ssh's reason and makes the exit code 1.

use crate::common::{free_port, run_rigrun, text};
use crate::resume::loopback_host;

#[test]
fn check_connect_prints_each_hosts_facts_and_names_the_one_it_cannot_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let sshd = loopback_host(dir);
    // Beside host `a`, the same host as `b` on a port nothing listens on.
    let inventory = std::fs::read_to_string(dir.join("hosts.yaml")).unwrap();
    let entry = inventory.strip_prefix("hosts:\n").unwrap();
    let gone = entry
        .replacen("  a:", "  b:", 1)
        .replace("work-a", "work-b")
        .replace(&format!("port: {}", sshd.port), &format!("port: {}", free_port()));
    std::fs::write(dir.join("hosts.yaml"), format!("{inventory}{gone}")).unwrap();
    std::fs::write(
        dir.join("p.yaml"),
        "name: c\nsteps:\n  - shell: {command: \"true\"}\n",
    )
    .unwrap();

    let out = run_rigrun(dir, &["check", "p.yaml", "--connect"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let line = |host: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{host}: ")))
            .unwrap_or_default()
            .to_string()
    };
    let arch = String::from_utf8(
        std::process::Command::new("uname")
            .arg("-m")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let a = line("a");
    assert!(a.starts_with(&format!("a: {}, ", arch.trim())), "{stdout}");
    assert!(a.contains(" CPUs, ") && a.contains(" GiB"), "{a}");
    assert!(line("b").starts_with("b: unreachable: "), "{stdout}");
    assert!(line("b").contains("connection refused"), "ssh's reason: {stdout}");
    assert!(stderr.contains("1 host of 2 could not be reached"), "{stderr}");

    // Nothing was run: no workdir was made on the host.
    assert!(!dir.join("work-a").exists());
}
