//! Hosts whose login shell prints: a banner and a JSON line from the login shell itself, and
//! lines on stdout and stderr (one without its newline) from ~/.bashrc, which Debian's bash
//! sources for every ssh command. The sshd runs the sftp subsystem as a stock Debian host does
//! (`/usr/lib/openssh/sftp-server`, started through the login shell, so the noise lands in the
//! SFTP stream too). Each test logs in as a user of its own (see [`TestUser`]).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

/// What the login shell prints before anything else, on stdout.
const BANNER: &str = "Welcome to gpu-box: 8x RTX PRO 6000, be nice";

/// The login shell: a banner and a line that looks like a record, then bash.
const NOISY_SHELL: &str = r#"#!/bin/sh
echo 'Welcome to gpu-box: 8x RTX PRO 6000, be nice'
echo '{"banner": 1}'
exec /bin/bash "$@"
"#;

/// ~/.bashrc as shared GPU boxes have it: conda and module lines, on both streams, and one
/// without a newline (so that what follows it starts on the same line).
const NOISY_BASHRC: &str = r#"echo '(base) conda: environment activated'
echo 'module: cuda/12.4 loaded' >&2
printf 'motd: no newline here'
"#;

/// The benchmark: one record per point on stdout, a result file per point, and at the first
/// point one more whose name is not UTF-8 (fetched through `cat`, not SFTP).
const BENCH: &str = r#"#!/bin/sh
c=$1
d=$(dirname "$0")/results
mkdir -p "$d"
printf '{"concurrency": %s, "output_throughput": %s}\n' "$c" "$((c * 100))" | tee "$d/c$c.json"
[ "$c" = 1 ] && printf '{"odd": 1}' > "$d/$(printf 'odd\377.json')"
exit 0
"#;

const PLAYBOOK: &str = r#"name: quiet
steps:
  - copy-script:
      src: bench.sh
      dest: "{{ workdir }}/bench.sh"
      mode: "0755"
  - run-sweep:
      matrix: {concurrency: [1, 2, 4]}
      command: "{{ workdir }}/bench.sh {{ concurrency }}"
  - fetch-results:
      src: "{{ workdir }}/results/*.json"
  - shell:
      name: uploaded rigrun
      command: "{{ rigrun }} --version"
  - shell:
      name: prints
      command: "echo shell-out; echo shell-err >&2"
  - shell:
      name: fails
      command: "exit 3"
"#;

/// A host `h` reached as a user of its own, with `shell` as login shell and `bashrc` as its
/// ~/.bashrc, behind an sshd whose sftp subsystem goes through that shell.
struct Host {
    // Dropped in order: sshd first, then the user, then the directory.
    sshd: Sshd,
    user: TestUser,
    tmp: tempfile::TempDir,
}

impl Host {
    fn new(shell: Option<&str>, bashrc: &str) -> Host {
        let tmp = tempfile::tempdir().unwrap();
        let key = ClientKey::new(tmp.path());
        let shell_path = match shell {
            Some(script) => {
                let path = tmp.path().join("login-shell");
                std::fs::write(&path, script).unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
                path
            }
            None => PathBuf::from("/bin/bash"),
        };
        let user = TestUser::new(tmp.path(), &shell_path);
        user.write(".bashrc", bashrc);
        let sshd = Sshd::start_with(tmp.path(), "h", &key, &|config| {
            config.replace(
                "Subsystem sftp internal-sftp",
                "Subsystem sftp /usr/lib/openssh/sftp-server",
            )
        });
        let known_hosts = tmp.path().join("known_hosts");
        std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
        let inventory = format!(
            "hosts:\n  h:\n    address: {}\n    port: {}\n    user: {}\n    identity_file: {}\n    \
             workdir: {}\n    ssh_options: {{UserKnownHostsFile: {}, GlobalKnownHostsFile: /dev/null, \
             IdentitiesOnly: \"yes\"}}\n",
            sshd.address,
            sshd.port,
            user.name,
            key.private.display(),
            user.home.join("work").display(),
            known_hosts.display()
        );
        std::fs::write(tmp.path().join("hosts.yaml"), inventory).unwrap();
        std::fs::write(tmp.path().join("bench.sh"), BENCH).unwrap();
        std::fs::write(tmp.path().join("playbook.yaml"), PLAYBOOK).unwrap();
        Host { sshd, user, tmp }
    }

    fn run(&self) -> (std::process::Output, PathBuf) {
        let runs = self.tmp.path().join("runs");
        let out = run_rigrun(
            self.tmp.path(),
            &[
                "run",
                "playbook.yaml",
                "-i",
                "hosts.yaml",
                "--runs-dir",
                runs.to_str().unwrap(),
            ],
        );
        (out, only_run_dir(&runs))
    }
}

fn step<'a>(manifest: &'a Value, name: &str) -> &'a Value {
    manifest["hosts"]["h"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name || s["kind"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {manifest:#}"))
}

/// The warnings about the login shell in events.jsonl.
fn login_warnings(run_dir: &Path) -> Vec<String> {
    std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "warning" && e["message"].as_str().unwrap().contains("login shell"))
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect()
}

/// The step's folder in the host's log (`hosts/h/NN-<name>/`).
fn step_dir(run_dir: &Path, suffix: &str) -> PathBuf {
    std::fs::read_dir(run_dir.join("hosts/h"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().ends_with(suffix))
        .unwrap_or_else(|| panic!("no step folder ending in {suffix}"))
}

#[test]
fn a_login_shell_that_prints_breaks_nothing_and_is_named_once() {
    let host = Host::new(Some(NOISY_SHELL), NOISY_BASHRC);
    let (out, run_dir) = host.run();
    let (stdout, stderr) = text(&out);
    let said = format!("{stdout}{stderr}");
    assert_eq!(out.status.code(), Some(1), "only the last step fails:\n{said}");
    let manifest = manifest(&run_dir);

    // copy-script: over SFTP, whose stream the shell's output would corrupt.
    let copy = step(&manifest, "copy-script");
    assert_eq!(copy["status"], "ok", "{copy:#}\n{said}");
    assert_eq!(
        std::fs::read(host.user.home.join("work/bench.sh")).unwrap(),
        BENCH.as_bytes()
    );

    // The sweep: one record per point, from the command's own line; no banner record.
    let sweep = step(&manifest, "run-sweep");
    assert_eq!(sweep["status"], "ok", "{sweep:#}\n{said}");
    let recs = records(&run_dir);
    assert!(
        !recs.iter().any(|r| r["metrics"].get("banner").is_some()),
        "the login shell's JSON line became a record: {recs:#?}"
    );
    let sweep_records: Vec<&Value> = recs.iter().filter(|r| r["step"] == sweep["name"]).collect();
    assert_eq!(sweep_records.len(), 3, "one record per point: {sweep_records:#?}");
    for (r, c) in sweep_records.iter().zip([1, 2, 4]) {
        assert_eq!(r["status"], "ok", "{r:#}");
        assert_eq!(r["point"]["concurrency"], c);
        assert_eq!(r["metrics"]["output_throughput"], c * 100);
    }

    // fetch-results: every file with its bytes, the non-UTF-8 name through `cat`.
    let fetch = step(&manifest, "fetch-results");
    assert_eq!(fetch["status"], "ok", "{fetch:#}\n{said}");
    let fetched = run_dir.join("hosts/h/fetched");
    for c in [1, 2, 4] {
        assert_eq!(
            std::fs::read_to_string(fetched.join(format!("c{c}.json"))).unwrap(),
            format!("{{\"concurrency\": {c}, \"output_throughput\": {}}}\n", c * 100)
        );
    }
    assert_eq!(
        std::fs::read_to_string(fetched.join("odd%FF.json")).unwrap(),
        "{\"odd\": 1}"
    );

    // {{ rigrun }}: uploaded over SFTP and run.
    let rigrun = step(&manifest, "uploaded rigrun");
    assert_eq!(rigrun["status"], "ok", "{rigrun:#}\n{said}");

    // shell: its own output and exit code; a failure's reason is its own, not the noise.
    assert_eq!(step(&manifest, "prints")["status"], "ok");
    let prints = step_dir(&run_dir, "-prints");
    assert_eq!(
        std::fs::read_to_string(prints.join("output.stdout.log")).unwrap(),
        "shell-out\n"
    );
    assert_eq!(
        std::fs::read_to_string(prints.join("output.stderr.log")).unwrap(),
        "shell-err\n"
    );
    let fails = step(&manifest, "fails");
    assert_eq!(fails["status"], "failed");
    assert_eq!(fails["error"], "exit code 3", "{fails:#}");

    // Once per host: a warning that names the noise and its cost, and the noise in the log.
    let warnings = login_warnings(&run_dir);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let warning = &warnings[0];
    assert!(
        warning.contains(&format!("first: `{BANNER}`")) && warning.contains("ms per command"),
        "{warning}"
    );
    assert!(warning.contains("[ -z \"$PS1\" ] && return"), "{warning}");
    assert!(
        stderr.contains(warning.as_str()),
        "the warning is not shown:\n{stderr}"
    );
    let log = std::fs::read_to_string(run_dir.join("hosts/h/login-shell.log")).unwrap();
    for line in [
        BANNER,
        "{\"banner\": 1}",
        "(base) conda: environment activated",
        "module: cuda/12.4 loaded",
        "motd: no newline here",
    ] {
        assert!(log.contains(line), "{line} is not in the host's log:\n{log}");
    }
    assert_eq!(
        manifest["hosts"]["h"]["facts"]["home"],
        host.user.home.to_str().unwrap(),
        "the facts read the noise"
    );
}

#[test]
fn a_quiet_login_shell_gets_no_warning_and_keeps_the_sftp_subsystem() {
    let mut host = Host::new(None, "# quiet\n");
    host.sshd.restart_verbose();
    let (out, run_dir) = host.run();
    let said = format!("{:?}", text(&out));
    assert_eq!(out.status.code(), Some(1), "only the last step fails:\n{said}");
    assert!(login_warnings(&run_dir).is_empty());
    assert!(!run_dir.join("hosts/h/login-shell.log").exists());
    assert_eq!(step(&manifest(&run_dir), "copy-script")["status"], "ok", "{said}");
    let log = std::fs::read_to_string(host.sshd.dir.join("sshd.log")).unwrap();
    // sshd names subsystem sessions (a command session does not say which command it runs).
    assert_eq!(
        log.matches("Starting session: subsystem 'sftp'").count(),
        1,
        "SFTP did not go through the subsystem, once:\n{log}"
    );
}

/// A run that ended leaves nothing of its own on the host: closing the host ends the run's
/// watchdog, which would otherwise poll there until the lease (2 min) ran out. The user's
/// processes (rigrun's sessions, the watchdog) are waited for well within that lease.
#[test]
fn a_finished_run_leaves_no_process_on_the_host() {
    let host = Host::new(None, "# quiet\n");
    let (out, run_dir) = host.run();
    assert_eq!(
        out.status.code(),
        Some(1),
        "only the last step fails: {:?}",
        text(&out)
    );
    assert!(
        std::fs::read_to_string(run_dir.join("events.jsonl"))
            .unwrap()
            .contains("\"run_finished\""),
        "the run did not end"
    );
    let jobs = host.user.home.join("work/.rigrun/jobs");
    let folder = std::fs::read_dir(&jobs)
        .unwrap()
        .flatten()
        .next()
        .expect("a run's jobs folder");
    assert!(folder.path().join("h/done").exists(), "the host was not closed");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while host.user.has_processes() {
        let ps = || sh("ps", &["-u", &host.user.name, "-o", "pid,etimes,args"]);
        assert!(
            std::time::Instant::now() < deadline,
            "left on the host 30 s after the run:\n{}",
            ps()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left: Vec<_> = std::fs::read_dir(folder.path().join("h"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".end") || n == "watchdog.pid")
        .collect();
    assert_eq!(left, Vec::<String>::new(), "rooms or the watchdog's pid left");
}
