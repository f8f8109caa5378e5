//! `rigrun run --resume` over a real sshd on loopback: a sweep stopped by SIGTERM and by
//! SIGKILL mid-point, then resumed to its end; a point still running on the host re-attached.

use crate::common::{
    assert_none_left, free_port, processes_with, records, rigrun, sh, text, ClientKey, Sshd,
};
use crate::resume_support::{interrupt_then_resume, latest_records, point_started, spawn, wait_for_event};

/// A loopback sshd as host `a`, written to `dir/hosts.yaml`; it runs while the value lives.
pub fn loopback_host(dir: &std::path::Path) -> Sshd {
    let key = ClientKey::new(dir);
    let sshd = Sshd::start(dir, "a", &key);
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let entry = sshd.inventory_entry("a", &key, &known_hosts, &dir.join("work-a"), "");
    std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{entry}")).unwrap();
    sshd
}

#[test]
fn sigterm_and_sigkill_mid_sweep_over_ssh_then_resume_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let _sshd = loopback_host(dir.path());
    for signal in ["TERM", "KILL"] {
        interrupt_then_resume(dir.path(), signal);
    }
}

/// rigrun SIGKILLed while a point runs over SSH: the point's command lives on on the host (its
/// lease has not run out), and the resumed run attaches to it instead of starting it again.
#[test]
fn a_point_still_running_when_rigrun_was_killed_is_reattached_not_run_twice() {
    let dir = tempfile::tempdir().unwrap();
    let _sshd = loopback_host(dir.path());
    let (go, starts) = (dir.path().join("go"), dir.path().join("starts"));
    std::fs::create_dir(&starts).unwrap();
    // Each point notes that it started, prints a line, waits for `go` (point 2 only), then
    // prints its record.
    let playbook = format!(
        "name: reattach\nsteps:\n  - run-sweep:\n      matrix: {{n: [1, 2, 3]}}\n      command: >-\n        \
         echo started >> {starts}/{{{{ n }}}}; echo 'before the wait';\n        \
         {{% if n == 2 %}}while [ ! -e {go} ]; do sleep 0.1; done;{{% endif %}}\n        \
         echo '{{\"n\": {{{{ n }}}}}}'\n",
        starts = starts.display(),
        go = go.display()
    );
    std::fs::write(dir.path().join("reattach.yaml"), playbook).unwrap();
    let runs = dir.path().join("runs");
    let runs_arg = runs.display().to_string();
    let args = [
        "run",
        "reattach.yaml",
        "-i",
        "hosts.yaml",
        "--runs-dir",
        &runs_arg,
        "-q",
    ];
    let child = spawn(dir.path(), &args);
    let run_dir = wait_for_event(&runs, |e| point_started(e, "n=2"));
    let waiting = || std::fs::read_to_string(starts.join("2")).is_ok_and(|s| s == "started\n");
    wait_on_host("point 2 never started on the host", waiting);
    let needle = go.display().to_string();
    let out = kill_and_resume(dir.path(), child, &run_dir, (&needle, "point 2's command"), &go);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(starts.join("2")).unwrap(),
        "started\n",
        "point 2 started twice"
    );
    let two: Vec<serde_json::Value> = latest_records(&run_dir)
        .into_iter()
        .filter(|r| r["point"]["n"] == 2)
        .collect();
    assert_eq!(two.len(), 1, "{two:?}");
    assert_eq!(
        (two[0]["status"].as_str(), two[0]["attempt"].as_u64()),
        (Some("ok"), Some(1))
    );
    assert_none_left(&needle, "point 2's command, after the resume");
}

/// rigrun SIGKILLed in the second server variant over SSH: the variant's server and its point
/// live on on the host (their lease has not run out). The resume stops both before it starts
/// that variant's server again (the port would be taken), measures the cut-short point as its
/// next attempt against the new server, skips the first variant, and leaves nothing behind.
#[test]
fn a_variant_cut_short_by_sigkill_is_restarted_once_what_it_left_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let _sshd = loopback_host(dir.path());
    let server = format!("rigrun/killed{}", std::process::id());
    let (go, waiting) = (dir.path().join("go"), dir.path().join("waiting"));
    let playbook = format!(
        "name: killed\nserver:\n  command: \"{{{{ rigrun }}}} sim --profile tiny --port {port} --model {server}\"\n  \
         url: http://127.0.0.1:{port}\n  variants: {{v: [one, two]}}\nsteps:\n  - run-sweep:\n      \
         matrix: {{n: [1, 2]}}\n      command: >-\n        \
         {{% if v == 'two' and n == 2 %}}touch {waiting}; while [ ! -e {go} ]; do sleep 0.1; done;{{% endif %}}\n        \
         echo '{{\"n\": {{{{ n }}}}}}'\n",
        port = free_port(),
        waiting = waiting.display(),
        go = go.display()
    );
    std::fs::write(dir.path().join("killed.yaml"), playbook).unwrap();
    let runs = dir.path().join("runs");
    let runs_arg = runs.display().to_string();
    let child = spawn(dir.path(), &["run", "killed.yaml", "--runs-dir", &runs_arg, "-q"]);
    let run_dir = wait_for_event(&runs, |e| e["variant"] == "v=two" && point_started(e, "n=2"));
    wait_on_host("the point never started on the host", || waiting.exists());
    let out = kill_and_resume(
        dir.path(),
        child,
        &run_dir,
        (&server, "the variant's server"),
        &go,
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_none_left(&server, "the variant's server, after the resume");
    let journal = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let resumed = journal.find("\"event\":\"run_resumed\"").unwrap();
    let started: Vec<&str> = journal[resumed..]
        .lines()
        .filter(|l| l.contains("\"event\":\"variant_started\""))
        .collect();
    assert!(
        started.len() == 1 && started[0].contains("\"variant\":\"v=two\""),
        "{started:?}"
    );
    let recs = records(&run_dir);
    let two = |n: u64| -> Vec<(String, u64)> {
        let of = recs
            .iter()
            .filter(|r| r["variant"]["v"] == "two" && r["point"]["n"] == n);
        of.map(|r| {
            (
                r["status"].as_str().unwrap().to_string(),
                r["attempt"].as_u64().unwrap(),
            )
        })
        .collect()
    };
    assert_eq!(two(1), [("ok".to_string(), 1)], "measured before the kill, kept");
    assert_eq!(
        two(2),
        [("ok".to_string(), 2)],
        "the cut-short point, measured again"
    );
}

/// Waits (up to 30 s) until `ready` holds; `never` says what did not happen otherwise.
fn wait_on_host(never: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{never}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// SIGKILLs rigrun (`child`), checks that what `needle` names (`what`) lives on on the host
/// (its lease has not run out), creates `go` and resumes the run; returns the resume's output.
fn kill_and_resume(
    dir: &std::path::Path,
    child: std::process::Child,
    run_dir: &std::path::Path,
    (needle, what): (&str, &str),
    go: &std::path::Path,
) -> std::process::Output {
    sh("kill", &["-KILL", &child.id().to_string()]);
    let _ = child.wait_with_output();
    assert!(
        !processes_with(needle).is_empty(),
        "{what} died with rigrun; it should wait for its lease"
    );
    std::fs::write(go, "").unwrap();
    rigrun()
        .current_dir(dir)
        .args(["run", "--resume", run_dir.to_str().unwrap(), "-q"])
        .output()
        .unwrap()
}
