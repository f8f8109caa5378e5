//! Making the server a sweep measures die during a point, for the tests of what rigrun does
//! then (tests/local/server_dies.rs, tests/sshd/server_dies.rs): a sweep whose point n=2 waits
//! until the test lets it go, the sim's pid found by its port, the records read back.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::resume_support::{point_started, spawn, wait_for_event};

/// A sweep of three points; n=2 touches `started` and, until `killed` exists, waits far longer
/// than any test (its `timeout:` is what a sweep that missed the death would show).
pub fn sweep(dir: &Path, retries: u32) -> String {
    let (started, killed) = (dir.join("started"), dir.join("killed"));
    format!(
        "  - run-sweep:\n      matrix: {{n: [1, 2, 3]}}\n      timeout: 5m\n      retries: {retries}\n      \
         command: \"{{% if n == 2 %}}touch {s}; i=0; while [ ! -e {k} ] && [ $i -lt 3000 ]; do sleep 0.1; \
         i=$((i+1)); done; {{% endif %}}echo '{{\\\"x\\\": {{{{ n }}}}}}'\"\n",
        s = started.display(),
        k = killed.display()
    )
}

/// Runs `playbook` in `dir`; once point n=2 has started, `kill` makes the server die; returns
/// rigrun's output and the run directory.
pub fn run_and_kill(dir: &Path, playbook: &str, kill: impl FnOnce()) -> (Output, PathBuf) {
    std::fs::write(dir.join("p.yaml"), playbook).unwrap();
    let child = spawn(dir, &["run", "p.yaml", "--runs-dir", "runs"]);
    let run_dir = wait_for_event(&dir.join("runs"), |e| point_started(e, "n=2"));
    kill();
    // Point n=2 waits for `killed` (at most 300 s): it ends before only when rigrun ends it.
    // Later attempts of it, run once the server is back, find the file and end at once.
    wait_for_event(&dir.join("runs"), |e| {
        e["event"] == "point_finished" && e["point"] == "n=2"
    });
    std::fs::write(dir.join("killed"), "").unwrap();
    (child.wait_with_output().unwrap(), run_dir)
}

/// The pids of the `rigrun sim`s serving `port` (their own processes, not the shells around them).
pub fn sims_at(port: u16) -> Vec<String> {
    let pattern = format!("^/\\S*rigrun sim --profile tiny --port {port}$");
    let out = std::process::Command::new("pgrep")
        .args(["-f", "--", &pattern])
        .output()
        .unwrap();
    // pgrep: 0 found, 1 none found, anything else an error.
    assert!(out.status.code().is_some_and(|c| c < 2), "pgrep: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// The pid of the one `rigrun sim` serving `port`.
pub fn sim_pid(port: u16) -> String {
    let pids = sims_at(port);
    assert_eq!(pids.len(), 1, "one sim on port {port}: {pids:?}");
    pids[0].clone()
}

/// The latest record of point n=`n` (by attempt).
pub fn latest(records: &[Value], n: u64) -> Value {
    let of_point = records.iter().filter(|r| r["point"]["n"] == n);
    of_point
        .max_by_key(|r| r["attempt"].as_u64().unwrap_or(1))
        .unwrap_or_else(|| panic!("no record of n={n}: {records:#?}"))
        .clone()
}

/// A playbook whose `start-server` starts a tiny sim on `port` (`restarts:` as given), then
/// [`sweep`] with `retries`.
pub fn started_server_playbook(dir: &Path, port: u16, restarts: u32, retries: u32) -> String {
    format!(
        "name: dies\nsteps:\n  - start-server:\n      command: \"{{{{ rigrun }}}} sim --profile tiny --port {port}\"\n      \
         url: \"http://127.0.0.1:{port}\"\n      restarts: {restarts}\n{}",
        sweep(dir, retries)
    )
}

/// Kills the sim serving `port` as the kernel's OOM killer would (SIGKILL, by its pid).
pub fn kill_sim(port: u16) {
    let pid = sim_pid(port);
    let out = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .output()
        .unwrap();
    assert!(out.status.success(), "kill -KILL {pid}: {out:?}");
}
