//! End-to-end runs of the real binary against real sshd servers on loopback.

use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::Value;

/// A temp dir with a client key, a known_hosts file and helpers to write files into it.
struct Env {
    tmp: tempfile::TempDir,
    key: ClientKey,
    known_hosts: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let key = ClientKey::new(tmp.path());
        let known_hosts = tmp.path().join("known_hosts");
        std::fs::write(&known_hosts, "").unwrap();
        Env {
            tmp,
            key,
            known_hosts,
        }
    }

    /// An environment with one host `a` in its inventory.
    fn with_one_host() -> (Env, Sshd) {
        let env = Env::new();
        let a = env.host("a");
        env.inventory(&[env.entry("a", &a)], "");
        (env, a)
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Starts an sshd whose key is recorded in known_hosts.
    fn host(&self, name: &str) -> Sshd {
        let sshd = Sshd::start(self.path(), name, &self.key);
        let mut known = std::fs::read_to_string(&self.known_hosts).unwrap();
        known.push_str(&sshd.known_hosts_line());
        std::fs::write(&self.known_hosts, known).unwrap();
        sshd
    }

    fn entry(&self, name: &str, sshd: &Sshd) -> String {
        sshd.inventory_entry(
            name,
            &self.key,
            &self.known_hosts,
            &self.path().join(format!("work-{name}")),
            "",
        )
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path().join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    fn inventory(&self, entries: &[String], extra: &str) -> PathBuf {
        self.write("hosts.yaml", &format!("hosts:\n{}{extra}", entries.concat()))
    }

    /// Starts `rigrun run playbook` in the background, its output piped; returns it and the
    /// runs folder.
    fn spawn(&self, playbook: &str) -> (std::process::Child, PathBuf) {
        let runs = self.path().join("runs");
        let child = rigrun()
            .current_dir(self.path())
            .args(["run", playbook, "--runs-dir", runs.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        (child, runs)
    }

    fn run(&self, playbook: &str, more: &[&str]) -> (std::process::Output, PathBuf) {
        let runs = self.path().join("runs");
        let mut args = vec![
            "run",
            playbook,
            "-i",
            "hosts.yaml",
            "--runs-dir",
            runs.to_str().unwrap(),
        ];
        args.extend_from_slice(more);
        (run_rigrun(self.path(), &args), runs)
    }
}

/// A stand-in benchmark: prints one JSON result line and writes it to a result file.
const BENCH_SCRIPT: &str = r#"#!/bin/sh
c=$1; out=$2
echo "warming up c=$c"
echo "some log on stderr" >&2
mkdir -p "$out"
line="{\"output_throughput\": $((c * 100)), \"max_concurrency\": $c, \"completed\": $((c * 5))}"
echo "$line"
echo "$line" > "$out/throughput_c$c.json"
"#;

const SWEEP_PLAYBOOK: &str = r#"
name: sweep
vars: {capacity: 8}
steps:
  - shell:
      command: uname -s
  - copy-script:
      src: bench.sh
      dest: "{{ workdir }}/bench.sh"
      mode: "0755"
  - run-sweep:
      matrix: {concurrency: [1, 4, 16]}
      skip_if: "concurrency > capacity"
      command: "{{ workdir }}/bench.sh {{ concurrency }} {{ workdir }}/results/{{ run_id }}"
  - fetch-results:
      src: "{{ workdir }}/results/{{ run_id }}/*.json"
"#;

fn step_details(manifest: &Value, host: &str, kind: &str) -> Value {
    let steps = manifest["hosts"][host]["steps"].as_array().unwrap();
    steps
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} step"))["details"]
        .clone()
}

#[test]
fn runs_every_step_kind_over_ssh_and_keeps_the_records() {
    let (env, _a) = Env::with_one_host();
    env.write("bench.sh", BENCH_SCRIPT);
    env.write("sweep.yaml", SWEEP_PLAYBOOK);

    let (out, runs) = env.run("sweep.yaml", &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "rigrun failed:\n{stdout}\n{stderr}");
    let run_dir = only_run_dir(&runs);

    let recs = records(&run_dir);
    let sweep: Vec<&Value> = recs.iter().filter(|r| r["step"] == "run-sweep").collect();
    assert_eq!(sweep.len(), 3, "{recs:#?}");
    assert_eq!(sweep[0]["status"], "ok");
    assert_eq!(sweep[0]["point"]["concurrency"], 1);
    assert_eq!(sweep[0]["metrics"]["output_throughput"], 100);
    assert_eq!(sweep[1]["metrics"]["output_throughput"], 400);
    assert_eq!(sweep[2]["status"], "skipped");
    assert_eq!(sweep[2]["reason"], "concurrency = 16 > capacity = 8");
    let fetched: Vec<&Value> = recs.iter().filter(|r| r["step"] == "fetch-results").collect();
    assert_eq!(fetched.len(), 2, "one record per fetched result file");

    // Files and logs land in the run directory.
    let host_dir = run_dir.join("hosts/a");
    assert!(host_dir.join("fetched/throughput_c4.json").is_file());
    let point_log =
        std::fs::read_to_string(host_dir.join("03-run-sweep/002-concurrency=4.stdout.log")).unwrap();
    assert!(point_log.contains("warming up c=4"));
    let err_log =
        std::fs::read_to_string(host_dir.join("03-run-sweep/002-concurrency=4.stderr.log")).unwrap();
    assert!(err_log.contains("some log on stderr"));
    let shell_log = std::fs::read_to_string(host_dir.join("01-shell/output.stdout.log")).unwrap();
    assert_eq!(shell_log.trim(), "Linux");

    // The manifest keeps the context.
    let manifest = manifest(&run_dir);
    assert_eq!(manifest["status"], "ok");
    assert_eq!(manifest["hosts"]["a"]["status"], "ok");
    assert!(manifest["hosts"]["a"]["facts"]["kernel"]
        .as_str()
        .unwrap()
        .starts_with("Linux"));
    let copy = step_details(&manifest, "a", "copy-script");
    assert_eq!(copy["uploaded"], true);
    assert_eq!(copy["sha256"].as_str().unwrap().len(), 64);
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    assert!(events.lines().count() > 10);

    // The closing table shows the host's column.
    assert!(
        stdout.contains("concurrency=4") && stdout.contains("400"),
        "{stdout}"
    );
    assert!(stdout.contains("skipped [1]"), "{stdout}");
    assert!(stdout.contains("[1] concurrency = 16 > capacity = 8"), "{stdout}");
    assert!(
        !stdout.contains("fetch-results"),
        "fetched files repeat the sweep: {stdout}"
    );

    // A second run finds the script unchanged and does not upload it again.
    let (out, runs) = env.run("sweep.yaml", &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    let newest = newest_run_dir(&runs);
    let copy = step_details(&crate::common::manifest(&newest), "a", "copy-script");
    assert_eq!(copy["uploaded"], false);
}

#[test]
fn a_script_edited_on_the_host_is_never_replaced_in_silence() {
    let (env, _a) = Env::with_one_host();
    env.write("bench.sh", BENCH_SCRIPT);
    env.write(
        "copy.yaml",
        "name: copy\nsteps:\n  - copy-script: {src: bench.sh, dest: \"{{ workdir }}/bench.sh\"}\n",
    );
    let (out, runs) = env.run("copy.yaml", &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    // Someone edits the script on the host.
    let remote = env.path().join("work-a/bench.sh");
    let edited = BENCH_SCRIPT.replace("warming up", "EDITED ON HOST");
    std::fs::write(&remote, &edited).unwrap();

    let (out, _) = env.run("copy.yaml", &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    let newest = newest_run_dir(&runs);
    let copy = step_details(&manifest(&newest), "a", "copy-script");
    assert_eq!(copy["uploaded"], true);
    assert_eq!(copy["previous_sha256"].as_str().unwrap().len(), 64);
    let diff = std::fs::read_to_string(newest.join(copy["diff"].as_str().unwrap())).unwrap();
    assert!(diff.contains("-echo \"EDITED ON HOST c=$c\""), "{diff}");
    assert!(diff.contains("+echo \"warming up c=$c\""), "{diff}");
    let previous = std::fs::read_to_string(newest.join("hosts/a/01-copy-script/bench.sh.previous")).unwrap();
    assert_eq!(previous, edited);
    assert_eq!(std::fs::read_to_string(&remote).unwrap(), BENCH_SCRIPT);
    // Said on the terminal, live and again when the run ends: host, file, lines, where the diff is.
    let stderr = text(&out).1;
    let said = format!(
        "{} on a holds a version rigrun did not upload (edited there?): 2 lines differ from",
        remote.display()
    );
    assert_eq!(stderr.matches(&said).count(), 2, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "overwritten, the host's version and the diff are in {}",
            copy["diff"].as_str().unwrap()
        )),
        "{stderr}"
    );

    // The playbook's script changed, the host's copy did not: uploaded without a word.
    env.write("bench.sh", &format!("{BENCH_SCRIPT}# v2\n"));
    let (out, _) = env.run("copy.yaml", &[]);
    assert!(
        out.status.success() && !text(&out).1.contains("did not upload"),
        "{:?}",
        text(&out)
    );

    // Edited on the host again: `keep` uses the host's copy, `fail` stops.
    std::fs::write(&remote, &edited).unwrap();
    for (choice, code) in [("keep", 0), ("fail", 1)] {
        env.write(
            "copy.yaml",
            &format!("name: copy\nsteps:\n  - copy-script: {{src: bench.sh, dest: \"{{{{ workdir }}}}/bench.sh\", on_host_edit: {choice}}}\n"),
        );
        let (out, _) = env.run("copy.yaml", &[]);
        let stderr = text(&out).1;
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(stderr.contains(&format!("on_host_edit: {choice}")), "{stderr}");
        assert_eq!(
            std::fs::read_to_string(&remote).unwrap(),
            edited,
            "{choice}: the host's copy stays"
        );
    }
}

#[test]
fn a_hostile_value_reaches_the_program_as_one_literal_argument() {
    let (env, _a) = Env::with_one_host();
    let marker = env.path().join("pwned");
    env.write(
        "echo.yaml",
        "name: echo\nsteps:\n  - shell: {command: \"printf '<%s>\\\\n' {{ evil }}\"}\n",
    );
    let evil = format!(
        "evil=$(touch {}); y `touch {}` 'q\"",
        marker.display(),
        marker.display()
    );
    let (out, runs) = env.run("echo.yaml", &["-e", &evil]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(!marker.exists(), "the substituted value was executed");
    let log =
        std::fs::read_to_string(only_run_dir(&runs).join("hosts/a/01-shell/output.stdout.log")).unwrap();
    let expected = format!(
        "<$(touch {}); y `touch {}` 'q\">",
        marker.display(),
        marker.display()
    );
    assert_eq!(log.trim(), expected);
}

#[test]
fn unknown_host_keys_are_refused_by_default() {
    let env = Env::new();
    let a = Sshd::start(env.path(), "a", &env.key); // its key is not in known_hosts
    env.inventory(&[env.entry("a", &a)], "");
    env.write("echo.yaml", "name: echo\nsteps:\n  - shell: {command: echo hi}\n");
    let (out, _) = env.run("echo.yaml", &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("host key verification failed"), "{stderr}");
    assert!(stderr.contains("accept-new"), "{stderr}");

    // With accept-new the key is recorded on first contact.
    env.inventory(&[env.entry("a", &a)], "known_hosts: accept-new\n");
    let (out, _) = env.run("echo.yaml", &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    let known = std::fs::read_to_string(&env.known_hosts).unwrap();
    assert!(known.contains(a.host_key_public.split_whitespace().nth(1).unwrap()));
}

#[test]
fn a_changed_host_key_is_refused_even_with_accept_new() {
    let env = Env::new();
    let a = Sshd::start(env.path(), "a", &env.key);
    let impostor = Sshd::start(env.path(), "impostor", &env.key);
    // known_hosts holds another server's key for a's address.
    let line = impostor
        .known_hosts_line()
        .replace(&format!("]:{} ", impostor.port), &format!("]:{} ", a.port));
    assert!(line.contains(&format!("]:{} ", a.port)));
    std::fs::write(&env.known_hosts, line).unwrap();
    env.inventory(&[env.entry("a", &a)], "known_hosts: accept-new\n");
    env.write("echo.yaml", "name: echo\nsteps:\n  - shell: {command: echo hi}\n");
    let (out, _) = env.run("echo.yaml", &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("CHANGED"), "{stderr}");
    // The way out names this host's port and the known_hosts file the inventory uses.
    let remove = format!(
        "ssh-keygen -R '[127.0.0.1]:{}' -f {}",
        a.port,
        env.known_hosts.display()
    );
    assert!(stderr.contains(&remove), "{stderr}");
}

#[test]
fn a_dead_host_stops_only_itself() {
    let env = Env::new();
    let a = env.host("alive");
    let mut b = env.host("dead");
    env.inventory(&[env.entry("alive", &a), env.entry("dead", &b)], "");
    env.write("bench.sh", BENCH_SCRIPT);
    env.write("sweep.yaml", SWEEP_PLAYBOOK);
    b.stop();
    let (out, runs) = env.run("sweep.yaml", &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("dead: failed at connect: connection refused"),
        "{stderr}"
    );
    let run_dir = only_run_dir(&runs);
    let recs = records(&run_dir);
    assert!(recs
        .iter()
        .any(|r| r["host"] == "alive" && r["metrics"]["output_throughput"] == 400));
    let manifest = manifest(&run_dir);
    assert_eq!(manifest["hosts"]["alive"]["status"], "ok");
    assert_eq!(manifest["hosts"]["dead"]["status"], "failed");
    assert_eq!(manifest["status"], "failed");
}

/// Every host refuses the connection: each reason said once (no table of points that could
/// not run, no note repeating it), one line saying no host connected, exit 1.
#[test]
fn when_no_host_connects_each_reason_is_said_once_and_no_table_is_shown() {
    let env = Env::new();
    let (mut a, mut b) = (env.host("a"), env.host("b"));
    env.inventory(&[env.entry("a", &a), env.entry("b", &b)], "");
    env.write("bench.sh", BENCH_SCRIPT);
    env.write("sweep.yaml", SWEEP_PLAYBOOK);
    a.stop();
    b.stop();
    let (out, runs) = env.run("sweep.yaml", &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(stdout, "", "no table of points that could not run");
    for host in ["a", "b"] {
        let port = if host == "a" { a.port } else { b.port };
        let reason = format!("connection refused by {}@127.0.0.1:{port}", whoami());
        assert_eq!(
            stderr.matches(&reason).count(),
            1,
            "{host}'s reason once: {stderr}"
        );
        assert!(
            stderr.contains(&format!("error: {host}: failed at connect: {reason}")),
            "{stderr}"
        );
    }
    let run_dir = only_run_dir(&runs);
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!(
            "run {0}: no host connected, nothing ran; once they are reachable: rigrun run --resume {0}",
            run_dir.display()
        )
    );
    assert!(!stderr.contains("not run"), "{stderr}");
}

/// A command prints 200,000 lines (and its record) as fast as it can while rigrun's stderr is
/// read slowly (a slow terminal): every line is either shown or counted in the closing
/// `N output lines not shown in all` line, exactly, and the logs keep them all.
#[test]
fn behind_a_slow_terminal_every_output_line_is_shown_or_counted() {
    use std::io::Read;
    const LINES: usize = 200_000;
    let (env, _a) = Env::with_one_host();
    env.write(
        "many.yaml",
        &format!(
            "name: many\nsteps:\n  - run-sweep:\n      command: \"seq -f 'line %.0f' 1 {LINES}; echo '{{\\\"x\\\": 1}}'\"\n"
        ),
    );
    let (mut child, runs) = env.spawn("many.yaml");
    let mut stdout = child.stdout.take().unwrap();
    let drained = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    // The slow terminal: 4 KiB at a time, a millisecond apart.
    let mut stderr = child.stderr.take().unwrap();
    let (mut shown, mut chunk) = (Vec::new(), [0u8; 4096]);
    loop {
        let n = stderr.read(&mut chunk).unwrap();
        if n == 0 {
            break;
        }
        shown.extend_from_slice(&chunk[..n]);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let status = child.wait().unwrap();
    let (stdout, stderr) = (drained.join().unwrap(), String::from_utf8(shown).unwrap());
    assert_eq!(status.code(), Some(0), "{stdout}");
    let prefix = "[a run-sweep (single)] ";
    let mut numbers: Vec<usize> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|l| l.rsplit_once("line ").map_or(Some(0), |(_, n)| n.parse().ok()))
        .collect();
    let shown_lines = numbers.len();
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), shown_lines, "a line shown twice");
    let counted: usize = stderr
        .lines()
        .find_map(|l| l.strip_suffix(" output lines not shown in all: the display fell behind (the logs in the run directory keep every line)"))
        .map_or(0, |n| n.parse().unwrap());
    assert!(
        shown_lines <= LINES,
        "the display never fell behind: the test proves nothing"
    );
    assert_eq!(
        shown_lines + counted,
        LINES + 1,
        "shown {shown_lines} + counted {counted} != printed {}",
        LINES + 1
    );
    let step_dir = only_run_dir(&runs).join("hosts/a/01-run-sweep");
    let logs: Vec<PathBuf> = std::fs::read_dir(&step_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".stdout.log"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    assert_eq!(log.lines().count(), LINES + 1, "the log keeps every line");
}

#[test]
fn a_point_past_its_timeout_fails_and_its_remote_processes_are_gone() {
    let (env, _a) = Env::with_one_host();
    let pid_file = env.path().join("sleep.pid");
    env.write(
        "slow.yaml",
        &format!(
            "name: slow\nsteps:\n  - run-sweep:\n      matrix: {{n: [1, 2]}}\n      timeout: 2s\n      \
             command: \"if [ {{{{ n }}}} = 1 ]; then sleep 300 & echo $! > {}; wait; else echo '{{\\\"x\\\": 1}}'; fi\"\n",
            pid_file.display()
        ),
    );
    let (out, runs) = env.run("slow.yaml", &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let recs = records(&only_run_dir(&runs));
    let failed = recs
        .iter()
        .find(|r| r["status"] == "failed")
        .expect("a failed record");
    assert_eq!(failed["point"]["n"], 1);
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .starts_with("timed out after 2s"),
        "{failed}"
    );
    // The sweep went on to the next point.
    assert!(recs
        .iter()
        .any(|r| r["point"]["n"] == 2 && r["metrics"]["x"] == 1));
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    assert!(wait_until_gone(&pid), "the remote sleep {pid} is still running");
}

#[test]
fn a_server_that_never_answers_fails_verify_with_the_last_error() {
    let (env, _a) = Env::with_one_host();
    let port = free_port();
    env.write(
        "verify.yaml",
        &format!("name: v\nsteps:\n  - verify-server: {{url: \"http://127.0.0.1:{port}\", wait: 1s}}\n  - shell: {{command: echo never}}\n"),
    );
    let (out, runs) = env.run("verify.yaml", &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("did not answer within 1s; last error:"),
        "{stderr}"
    );
    let manifest = manifest(&only_run_dir(&runs));
    let steps = manifest["hosts"]["a"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "the host stops at the failed step");
}

#[test]
fn ctrl_c_sigterm_and_sighup_stop_the_remote_commands_and_keep_what_was_measured() {
    for signal in ["INT", "TERM", "HUP"] {
        interrupt_mid_sweep(signal);
    }
}

/// Sends `signal` to rigrun once the first point runs; checks what must hold afterwards.
fn interrupt_mid_sweep(signal: &str) {
    let (env, _a) = Env::with_one_host();
    let pid_file = env.path().join("sleep.pid");
    env.write(
        "long.yaml",
        &format!(
            "name: long\nsteps:\n  - run-sweep:\n      matrix: {{n: [1, 2]}}\n      \
             command: \"echo '{{\\\"x\\\": {{{{ n }}}}}}'; sleep 300 & echo $! > {}.{{{{ n }}}}; wait\"\n",
            pid_file.display()
        ),
    );
    let (child, runs) = env.spawn("long.yaml");
    let first = env.path().join("sleep.pid.1");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !first.exists() || std::fs::read_to_string(&first).unwrap().trim().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first point never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // This run's ControlMaster, found by the known_hosts file only this test uses.
    let master = master_of(&env.known_hosts).expect("the run's ControlMaster is running");
    sh("kill", &[&format!("-{signal}"), &child.id().to_string()]);
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "SIG{signal}: {stderr}");
    assert!(stderr.contains("interrupted"), "SIG{signal}: {stderr}");
    let pid = std::fs::read_to_string(&first).unwrap().trim().to_string();
    assert!(
        wait_until_gone(&pid),
        "SIG{signal}: the remote sleep {pid} survived"
    );
    assert!(
        wait_until_gone(&master.0),
        "SIG{signal}: the ControlMaster {} lingers",
        master.0
    );
    assert!(
        !master.1.exists(),
        "SIG{signal}: the control directory {} is left",
        master.1.display()
    );
    assert!(
        !env.path().join("sleep.pid.2").exists(),
        "SIG{signal}: the sweep went on"
    );
    let run_dir = only_run_dir(&runs);
    let recs = records(&run_dir);
    assert!(
        recs.iter().any(|r| r["metrics"]["x"] == 1),
        "SIG{signal}: the record measured before is kept"
    );
    let manifest = manifest(&run_dir);
    assert_eq!(manifest["status"], "interrupted", "SIG{signal}");
    assert!(manifest["finished_at"].is_string(), "SIG{signal}");
    assert_eq!(manifest["hosts"]["a"]["steps"][0]["status"], "interrupted");
}

/// The pid and control directory of the ssh ControlMaster whose options name `known_hosts`.
fn master_of(known_hosts: &Path) -> Option<(String, PathBuf)> {
    let needle = format!("UserKnownHostsFile={}", known_hosts.display());
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.ends_with("ssh"))
            && args.contains(&needle)
            && args.iter().any(|a| a == "-M")
        {
            let socket = args.iter().skip_while(|a| *a != "-S").nth(1)?;
            let dir = Path::new(socket).parent()?.to_path_buf();
            return Some((entry.file_name().to_string_lossy().into_owned(), dir));
        }
    }
    None
}

#[test]
fn a_templated_script_is_rendered_with_the_hosts_variables() {
    let env = Env::new();
    let a = env.host("a");
    let b = env.host("b");
    let mut entries = vec![env.entry("a", &a), env.entry("b", &b)];
    entries[0].push_str("    vars: {model: big-model}\n");
    entries[1].push_str("    vars: {model: small-model}\n");
    env.inventory(&entries, "");
    env.write("bench.py.j2", "MODEL = \"{{ model }}\"\nHOST = \"{{ host }}\"\n");
    env.write(
        "t.yaml",
        "name: t\nsteps:\n  - copy-script: {src: bench.py.j2, dest: \"{{ workdir }}/bench.py\", template: true, mode: \"0640\"}\n",
    );
    let (out, _) = env.run("t.yaml", &["--forks", "1"]);
    assert!(out.status.success(), "{:?}", text(&out));
    for (host, model) in [("a", "big-model"), ("b", "small-model")] {
        let path = env.path().join(format!("work-{host}/bench.py"));
        let rendered = std::fs::read_to_string(&path).unwrap();
        assert_eq!(rendered, format!("MODEL = \"{model}\"\nHOST = \"{host}\"\n"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
    }
}

#[test]
fn a_kept_server_outlives_the_playbook_and_a_plain_one_does_not() {
    let (env, _a) = Env::with_one_host();
    let (kept, plain) = (free_port(), free_port());
    let rigrun = env!("CARGO_BIN_EXE_rigrun");
    env.write(
        "servers.yaml",
        &format!(
            "name: servers\nsteps:\n  - start-server: {{command: \"{rigrun} sim --profile tiny --port {kept}\", url: \"http://127.0.0.1:{kept}\", keep: true}}\n  - start-server: {{command: \"{rigrun} sim --profile tiny --port {plain}\", url: \"http://127.0.0.1:{plain}\"}}\n  - verify-server: {{url: \"http://127.0.0.1:{plain}\", model: rigrun/tiny}}\n"
        ),
    );
    let (out, runs) = env.run("servers.yaml", &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    let listening = |p: u16| std::net::TcpStream::connect(("127.0.0.1", p)).is_ok();
    assert!(listening(kept), "the kept server should still run");
    assert!(
        wait_for(|| !listening(plain)),
        "the plain server should be stopped with the playbook"
    );
    // The kept server logs on the host, and its process group is recorded to stop it later.
    let manifest = manifest(&only_run_dir(&runs));
    let details = &manifest["hosts"]["a"]["steps"][0]["details"];
    let remote_log = details["remote_log"].as_str().unwrap();
    assert!(std::fs::read_to_string(remote_log)
        .unwrap()
        .contains("serving rigrun/tiny"));
    let group = format!("-{}", details["remote_process_group"].as_u64().unwrap());
    sh("kill", &["-TERM", "--", &group]);
    assert!(
        wait_for(|| !listening(kept)),
        "the kept server did not stop on kill -TERM -- {group}"
    );
}

/// A plain server is gone when rigrun exits, even one that ignores SIGTERM (killed after
/// job.sh's grace, which closing the transport waits for): a run started next on the same port
/// cannot reach it.
#[test]
fn a_plain_server_that_ignores_sigterm_is_gone_when_the_run_ends() {
    let (env, _a) = Env::with_one_host();
    let port = free_port();
    let rigrun = env!("CARGO_BIN_EXE_rigrun");
    env.write(
        "stubborn.yaml",
        &format!(
            "name: stubborn\nsteps:\n  - start-server: {{command: \"trap '' TERM; exec {rigrun} sim --profile tiny --port {port}\", url: \"http://127.0.0.1:{port}\"}}\n  - verify-server: {{url: \"http://127.0.0.1:{port}\", model: rigrun/tiny}}\n"
        ),
    );
    let (out, _runs) = env.run("stubborn.yaml", &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server still answers after rigrun exited"
    );
}

/// Polls `done` for up to 10 s.
fn wait_for(done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn the_ssh_agent_authenticates_when_the_inventory_names_no_key() {
    let env = Env::new();
    let a = env.host("a");
    let sock = env.path().join("agent.sock");
    let mut agent = std::process::Command::new("ssh-agent")
        .args(["-D", "-a", sock.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("cannot start ssh-agent");
    assert!(wait_for(|| sock.exists()), "ssh-agent did not create its socket");
    let added = std::process::Command::new("ssh-add")
        .env("SSH_AUTH_SOCK", &sock)
        .arg(&env.key.private)
        .output()
        .unwrap();
    assert!(added.status.success(), "{:?}", text(&added));
    // No identity_file: only the agent holds the key.
    let entry = format!(
        "  a:\n    address: 127.0.0.1\n    port: {}\n    user: {}\n    workdir: {}\n    \
         ssh_options: {{UserKnownHostsFile: {}, GlobalKnownHostsFile: /dev/null}}\n",
        a.port,
        whoami(),
        env.path().join("work-a").display(),
        env.known_hosts.display()
    );
    env.inventory(&[entry], "");
    env.write(
        "echo.yaml",
        "name: echo\nsteps:\n  - shell: {command: echo through the agent}\n",
    );
    let run = |agent_sock: Option<&Path>| {
        let mut cmd = rigrun();
        cmd.current_dir(env.path())
            .args(["run", "echo.yaml", "--runs-dir", "runs"]);
        match agent_sock {
            Some(s) => cmd.env("SSH_AUTH_SOCK", s),
            None => cmd.env_remove("SSH_AUTH_SOCK"),
        };
        cmd.output().unwrap()
    };
    let with_agent = run(Some(&sock));
    assert!(with_agent.status.success(), "{:?}", text(&with_agent));
    let without = run(None);
    let _ = agent.kill();
    let _ = agent.wait();
    assert_eq!(without.status.code(), Some(1), "{:?}", text(&without));
    assert!(
        text(&without).1.contains("authentication refused"),
        "{:?}",
        text(&without)
    );
}

/// Where an SSH host has a copy of this rigrun, the copy starts each command (`rigrun job-run`);
/// where it has none, job.sh does. A run that sends the copy uses it from then on, and a later
/// run that has no `{{ rigrun }}` finds it there. Told by the process the command's `sh` was
/// started by, as the host's process table has it.
#[test]
fn a_host_with_rigruns_copy_has_it_start_each_command() {
    let (env, _a) = Env::with_one_host();
    let workdir = env.path().join("work-a");
    let starter = |playbook: &str| {
        let (out, _) = env.run(playbook, &[]);
        assert!(out.status.success(), "{}", text(&out).1);
        let seen = std::fs::read(workdir.join("starter")).unwrap();
        String::from_utf8_lossy(&seen).replace('\0', " ")
    };
    let tell = "      name: starter\n      command: \"cat /proc/$PPID/cmdline > {{ workdir }}/starter\"\n";
    env.write("plain.yaml", &format!("name: plain\nsteps:\n  - shell:\n{tell}"));
    env.write(
        "copy.yaml",
        &format!("name: copy\nsteps:\n  - shell: {{name: copy, command: \"{{{{ rigrun }}}} --version\"}}\n  - shell:\n{tell}"),
    );
    let job_sh = starter("plain.yaml");
    assert!(job_sh.starts_with("sh -c # rigrun's detached jobs"), "{job_sh}");
    let runner = format!("{}/bin/rigrun job-run run ", workdir.display());
    let sent = starter("copy.yaml");
    assert!(sent.starts_with(&runner), "{sent}");
    let found = starter("plain.yaml");
    assert!(found.starts_with(&runner), "{found}");
}

/// At the end of a run the host's ControlMaster is asked to exit over its control socket (what
/// `ssh -O exit` asks, without starting an `ssh` for it), and it is gone. `ssh` here is a
/// wrapper that notes each invocation before running the real one.
#[test]
fn the_master_is_asked_to_exit_over_its_socket_and_goes() {
    let (env, _a) = Env::with_one_host();
    let bin = env.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let calls = env.path().join("ssh-calls");
    let real = std::process::Command::new("sh")
        .args(["-c", "command -v ssh"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    assert!(!real.is_empty(), "the OpenSSH client is not installed");
    let wrapper = bin.join("ssh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{real}' \"$@\"\n",
            calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.write("t.yaml", "name: t\nsteps:\n  - shell: {command: \"true\"}\n");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = rigrun()
        .current_dir(env.path())
        .env("PATH", path)
        .args(["run", "t.yaml", "-i", "hosts.yaml", "--runs-dir", "runs"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let calls = std::fs::read_to_string(&calls).unwrap();
    assert!(
        calls.lines().any(|l| l.starts_with("-M ")),
        "the master was started through the wrapper: {calls}"
    );
    assert!(
        !calls.contains("-O exit"),
        "no `ssh -O exit` should be needed: {calls}"
    );
    assert!(
        wait_for(|| master_of(&env.known_hosts).is_none()),
        "the ControlMaster lingers after the run"
    );
}
