//! Interrupting real runs and resuming them: a sweep whose later points wait for a file, a
//! signal sent to rigrun by pid once a point has started (seen in events.jsonl, never after a
//! fixed sleep), then `rigrun run --resume`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{records, rigrun, sh, text};

/// A sweep of five points; points 2 to 4 wait (up to 300 s) until `go` exists, then print one
/// record each, so a run can be stopped while point 2 runs; the plan skips point 5
/// (`skip_if: n > 4`).
pub fn waiting_sweep(go: &Path) -> String {
    format!(
        "name: waits\nsteps:\n  - shell: {{command: \"true\"}}\n  - run-sweep:\n      matrix: {{n: [1, 2, 3, 4, 5]}}\n      \
         skip_if: \"n > 4\"\n      \
         command: \"{{% if n > 1 %}}i=0; while [ ! -e {} ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done; {{% endif %}}echo '{{\\\"x\\\": {{{{ n }}}}}}'\"\n",
        go.display()
    )
}

/// Starts `rigrun run` in `dir` with `args`, output piped.
pub fn spawn(dir: &Path, args: &[&str]) -> Child {
    rigrun()
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (up to 60 s) until the one run directory under `runs` journals an event for which
/// `found` is true; returns that run directory.
pub fn wait_for_event(runs: &Path, found: impl Fn(&Value) -> bool) -> PathBuf {
    event_within(runs, Duration::from_secs(60), found).expect("the awaited event never came")
}

/// Waits up to `within` until the one run directory under `runs` journals an event for which
/// `found` is true; that run directory, or None when the time ran out.
pub fn event_within(runs: &Path, within: Duration, found: impl Fn(&Value) -> bool) -> Option<PathBuf> {
    let deadline = Instant::now() + within;
    loop {
        let dir = crate::common::run_dirs(runs).into_iter().next();
        if let Some(dir) = dir {
            let journal = std::fs::read_to_string(dir.join("events.jsonl")).unwrap_or_default();
            let events = journal
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok());
            if events.into_iter().any(|e| found(&e)) {
                return Some(dir);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `event` is the start of point `point`.
pub fn point_started(event: &Value, point: &str) -> bool {
    event["event"] == "point_started" && event["point"] == point
}

/// Per host, step, point and repetition: the records of its latest attempt.
pub fn latest_records(run_dir: &Path) -> Vec<Value> {
    let all = records(run_dir);
    let key = |r: &Value| {
        (
            r["host"].to_string(),
            r["step_index"].to_string(),
            r["point"].to_string(),
            r["repetition"].as_u64().unwrap_or(1),
        )
    };
    let attempt = |r: &Value| r["attempt"].as_u64().unwrap_or(1);
    all.iter()
        .filter(|r| {
            let latest = all.iter().filter(|o| key(o) == key(r)).map(attempt).max();
            latest == Some(attempt(r))
        })
        .cloned()
        .collect()
}

/// The row of point `label` in a table `rigrun show` printed.
pub fn row<'a>(shown: &'a str, label: &str) -> &'a str {
    let start = format!("│ {label} ");
    shown.lines().find(|l| l.starts_with(&start)).unwrap_or_default()
}

/// Runs `playbook` (in `dir`, with `inventory`), sends `signal` to rigrun once point n=2 has
/// started, checks the run is kept as interrupted in plain words (no `error:`), point n=2 lost
/// (cut short by the interrupt; SIGKILL leaves no word: not run), the plan's skip of n=5 shown as
/// such, and the way on named; then resumes it, checks that the resume says once what it does
/// (no internal job id, nothing FAILED), and that every point has exactly one ok record in its
/// latest attempt.
pub fn interrupt_then_resume(dir: &Path, signal: &str) {
    let go = dir.join("go");
    let _ = std::fs::remove_file(&go);
    std::fs::write(dir.join("waits.yaml"), waiting_sweep(&go)).unwrap();
    let runs = dir.join(format!("runs-{signal}"));
    let runs_arg = runs.display().to_string();
    let child = spawn(
        dir,
        &[
            "run",
            "waits.yaml",
            "-i",
            "hosts.yaml",
            "--runs-dir",
            &runs_arg,
            "-q",
        ],
    );
    let run_dir = wait_for_event(&runs, |e| point_started(e, "n=2"));
    sh("kill", &[&format!("-{signal}"), &child.id().to_string()]);
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    let resume = format!("rigrun run --resume {}", run_dir.display());
    let cut = signal != "KILL";
    if cut {
        assert_eq!(out.status.code(), Some(1), "SIG{signal}: {stderr}");
        assert!(
            stderr.contains(&resume),
            "SIG{signal}: the message names the resume command: {stderr}"
        );
        assert!(
            !stderr.contains("error:"),
            "SIG{signal}: an interrupt is no error: {stderr}"
        );
        let said = stderr.lines().filter(|l| l.starts_with("interrupted")).count();
        assert_eq!(said, 1, "SIG{signal}: the interrupt said once: {stderr}");
    }
    let shown = rigrun()
        .args(["show", run_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let (shown, _) = text(&shown);
    assert!(
        shown.contains(&resume),
        "SIG{signal}: show names the resume command: {shown}"
    );
    assert!(
        shown.contains("not run [") && shown.contains("not run: the run was interrupted"),
        "SIG{signal}: {shown}"
    );
    assert!(
        row(&shown, "n=5").contains("skipped [") && shown.contains("] n = 5 > 4"),
        "SIG{signal}: the plan's skip is known: {shown}"
    );
    assert_eq!(
        row(&shown, "n=2").contains("lost [") && shown.contains("] lost: cut short by the interrupt"),
        cut,
        "SIG{signal}: {shown}"
    );

    std::fs::write(&go, "").unwrap();
    let out = rigrun()
        .current_dir(dir)
        .args(["run", "--resume", run_dir.to_str().unwrap(), "-q"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "SIG{signal} resumed:\n{stdout}\n{stderr}"
    );
    let id = run_dir.file_name().unwrap().to_str().unwrap();
    let resuming: Vec<&str> = stderr.lines().filter(|l| l.contains("resuming")).collect();
    assert_eq!(
        resuming,
        [format!("resuming {id}: 3 points left on a")],
        "SIG{signal}: said once, the plan's skip not counted: {stderr}"
    );
    let how = match cut {
        true => "  a run-sweep n=2: cut short by the interrupt; runs again as attempt 2\n",
        false => {
            "  a run-sweep n=2: was cut short (rigrun stopped without a word); runs again as \
                  attempt 1, its command re-attached if it still runs on the host\n"
        }
    };
    assert!(stderr.contains(how), "SIG{signal}: {stderr}");
    assert!(
        !stderr.contains("FAILED") && !stderr.contains("s02-p002"),
        "SIG{signal}: no failure, no job id: {stderr}"
    );
    let sweep: Vec<Value> = latest_records(&run_dir)
        .into_iter()
        .filter(|r| r["step_index"] == 1)
        .collect();
    for n in 1..=4 {
        let ok: Vec<&Value> = sweep
            .iter()
            .filter(|r| r["point"]["n"] == n && r["status"] == "ok")
            .collect();
        assert_eq!(ok.len(), 1, "SIG{signal}: point n={n}: {sweep:?}");
        assert_eq!(ok[0]["metrics"]["x"], n);
    }
    let lost: Vec<u64> = records(&run_dir)
        .iter()
        .filter(|r| r["point"]["n"] == 2 && r["status"] == "lost")
        .map(|r| r["attempt"].as_u64().unwrap())
        .collect();
    if cut {
        assert_eq!(lost, [1], "SIG{signal}: attempt 1 of n=2 lost: {sweep:?}");
    }
    let manifest = crate::common::manifest(&run_dir);
    assert_eq!(manifest["status"], "ok", "SIG{signal}");
    assert_eq!(
        manifest["resumed"].as_array().map(Vec::len),
        Some(1),
        "SIG{signal}"
    );
}
