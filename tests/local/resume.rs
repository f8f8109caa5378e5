//! `rigrun run --resume` on `connection: local` hosts: signals mid-sweep, a playbook edited
//! since, `--redo-failed`, `retries:`, and show / compare on a resumed run.

use std::path::Path;

use serde_json::Value;

use crate::common::{records, rigrun, text};
use crate::resume_support::{interrupt_then_resume, latest_records};

const INVENTORY: &str = "hosts:\n  a: {connection: local}\n";

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.yaml"), INVENTORY).unwrap();
    dir
}

/// Runs rigrun in `dir`; returns the exit code, stdout and stderr.
fn rigrun_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = rigrun().current_dir(dir).args(args).output().unwrap();
    let (stdout, stderr) = text(&out);
    (out.status.code(), stdout, stderr)
}

/// Runs `playbook` (written to `p.yaml`) to its end; returns the run directory.
fn run_to_end(dir: &Path, playbook: &str, code: i32) -> std::path::PathBuf {
    std::fs::write(dir.join("p.yaml"), playbook).unwrap();
    let (got, stdout, stderr) = rigrun_in(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    assert_eq!(got, Some(code), "{stdout}\n{stderr}");
    crate::common::only_run_dir(&dir.join("runs"))
}

#[test]
fn sigint_sigterm_sighup_and_sigkill_mid_sweep_then_resume_completes_it() {
    let dir = setup();
    for signal in ["INT", "TERM", "HUP", "KILL"] {
        interrupt_then_resume(dir.path(), signal);
    }
}

/// Point n=2 fails until `fixed` exists.
fn failing_sweep(fixed: &Path, matrix: &str) -> String {
    format!(
        "name: fails\nsteps:\n  - run-sweep:\n      matrix: {{n: [{matrix}]}}\n      \
         command: \"{{% if n == 2 %}}test -e {} || exit 3; {{% endif %}}echo '{{\\\"x\\\": {{{{ n }}}}}}'\"\n",
        fixed.display()
    )
}

#[test]
fn resume_refuses_a_playbook_whose_points_changed() {
    let dir = setup();
    let fixed = dir.path().join("fixed");
    let run = run_to_end(dir.path(), &failing_sweep(&fixed, "1, 2, 3"), 1);
    std::fs::write(dir.path().join("p.yaml"), failing_sweep(&fixed, "1, 2, 9")).unwrap();
    let (code, _, stderr) = rigrun_in(dir.path(), &["run", "--resume", run.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("changed since the run started")
            && stderr.contains("its points changed (removed: n=3; added: n=9)"),
        "{stderr}"
    );
}

#[test]
fn redo_failed_runs_the_failed_points_again_as_their_next_attempt() {
    let dir = setup();
    let fixed = dir.path().join("fixed");
    let run = run_to_end(dir.path(), &failing_sweep(&fixed, "1, 2, 3"), 1);
    let resume = ["run", "--resume", run.to_str().unwrap(), "-q"];
    let (code, _, stderr) = rigrun_in(dir.path(), &resume);
    assert_eq!(code, Some(1), "the failed point stands: {stderr}");
    assert!(stderr.contains("--redo-failed"), "{stderr}");
    assert_eq!(records(&run).len(), 3, "nothing ran again");
    std::fs::write(&fixed, "").unwrap();
    let (code, _, stderr) = rigrun_in(dir.path(), &[&resume[..], &["--redo-failed"]].concat());
    assert_eq!(code, Some(0), "{stderr}");
    let latest = latest_records(&run);
    let two: Vec<&Value> = latest.iter().filter(|r| r["point"]["n"] == 2).collect();
    assert_eq!(two.len(), 1, "{latest:?}");
    assert_eq!(
        (two[0]["status"].as_str(), two[0]["attempt"].as_u64()),
        (Some("ok"), Some(2))
    );
    let attempts: Vec<u64> = records(&run)
        .iter()
        .filter(|r| r["point"]["n"] == 1)
        .map(|r| r["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1], "a point measured ok is not run again");

    for command in ["show", "compare"] {
        let (code, stdout, _) = rigrun_in(dir.path(), &[command, run.to_str().unwrap()]);
        assert_eq!(code, Some(0));
        let rows: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("│ n="))
            .map(|l| &l[..1])
            .collect();
        assert_eq!(
            rows,
            ["1", "2", "3"],
            "{command}: rows in the matrix's order: {stdout}"
        );
        assert!(
            stdout.contains("took 3 attempts (resumed 2 times); 1 point ran more than once"),
            "{command}: {stdout}"
        );
        assert!(
            !stdout.contains("FAILED"),
            "{command} shows the latest attempt: {stdout}"
        );
    }
    let (_, json, _) = rigrun_in(dir.path(), &["show", run.to_str().unwrap(), "--format", "json"]);
    let json: Value = serde_json::from_str(&json).unwrap();
    let attempts = &json["tables"][0]["attempts"][0];
    assert_eq!(attempts["attempts"], 3, "{json}");
    assert_eq!(attempts["points_rerun"], 1, "{json}");
    let (code, _, stderr) = rigrun_in(dir.path(), &resume);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("finished ok: nothing to do"), "{stderr}");
}

#[test]
fn retries_run_a_failing_command_again_and_record_every_attempt_with_its_reason() {
    let dir = setup();
    let count = dir.path().join("count");
    let playbook = format!(
        "name: retried\nsteps:\n  - run-sweep:\n      retries: 2\n      \
         command: \"c=$(cat {0} 2>/dev/null || echo 0); c=$((c+1)); echo $c > {0}; [ $c -ge 3 ] || exit 7; echo '{{\\\"x\\\": 1}}'\"\n",
        count.display()
    );
    let run = run_to_end(dir.path(), &playbook, 0);
    let recs = records(&run);
    let got: Vec<(u64, &str)> = recs
        .iter()
        .map(|r| (r["attempt"].as_u64().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(got, [(1, "failed"), (2, "failed"), (3, "ok")], "{recs:?}");
    let reason = |i: usize| recs[i]["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason(0).starts_with("exit code 7; retry 1 of 2 in 1s (attempt 2)"),
        "{}",
        reason(0)
    );
    assert!(
        reason(1).starts_with("exit code 7; retry 2 of 2 in 2s (attempt 3)"),
        "{}",
        reason(1)
    );
    let (_, shown, _) = rigrun_in(dir.path(), &["show", run.to_str().unwrap()]);
    assert!(
        shown.contains(": 1 point ran more than once (retried)"),
        "{shown}"
    );

    std::fs::write(
        dir.path().join("bad.yaml"),
        "name: b\nsteps:\n  - run-sweep: {retries: 11, command: \"true\"}\n",
    )
    .unwrap();
    let (code, _, stderr) = rigrun_in(dir.path(), &["check", "bad.yaml", "-i", "hosts.yaml"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("retries: 11 is too many: at most 10"), "{stderr}");
}

#[test]
fn resume_refuses_what_it_cannot_go_on_with() {
    let dir = setup();
    let (code, _, stderr) = rigrun_in(dir.path(), &["run", "--resume", "."]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("is not a run directory"), "{stderr}");
    let (code, _, stderr) = rigrun_in(dir.path(), &["run", "p.yaml", "--resume", "."]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let (code, _, stderr) = rigrun_in(dir.path(), &["run", "p.yaml", "--redo-failed"]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// A repeated sweep (`repeat: 3`, interleaved) stopped by SIGTERM during its third run of a
/// point (n=1, repetition 2), then resumed: the repetitions that finished are kept, the cut one
/// runs again, the rest run once each — every (point, repetition) ends with one ok record.
#[test]
fn a_repeated_sweep_resumes_at_the_repetition_it_was_stopped_in() {
    use crate::resume_support::{spawn, wait_for_event};
    let dir = setup();
    let (log, go) = (dir.path().join("ran"), dir.path().join("go"));
    let playbook = format!(
        "name: reps\nsteps:\n  - run-sweep:\n      repeat: 3\n      matrix: {{n: [1, 2]}}\n      command: >-\n        \
         echo {{{{ n }}}} >> {log}; if [ $(wc -l < {log}) -eq 3 ]; then i=0; while [ ! -e {go} ] && [ $i -lt 3000 ];\n        \
         do sleep 0.1; i=$((i+1)); done; fi; echo '{{\"x\": {{{{ n }}}}}}'\n",
        log = log.display(),
        go = go.display()
    );
    std::fs::write(dir.path().join("p.yaml"), playbook).unwrap();
    let child = spawn(dir.path(), &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    let run_dir = wait_for_event(&dir.path().join("runs"), |e| {
        e["event"] == "point_started" && e["point"] == "n=1" && e["repetition"] == 2
    });
    // The event comes before the command runs: wait until it has written its line (it then
    // waits for `go`), so that the signal cuts it short rather than prevents it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(&log).map_or(0, |t| t.lines().count()) < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the third run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    crate::common::sh("kill", &["-TERM", &child.id().to_string()]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));

    std::fs::write(&go, "").unwrap();
    let (code, stdout, stderr) = rigrun_in(dir.path(), &["run", "--resume", run_dir.to_str().unwrap(), "-q"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let ran = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        ran.split_whitespace().collect::<Vec<_>>(),
        ["1", "2", "1", "1", "2", "1", "2"],
        "finished repetitions are not run again; the cut one is"
    );
    let mut measured: Vec<(u64, u64)> = latest_records(&run_dir)
        .iter()
        .filter(|r| r["status"] == "ok")
        .map(|r| {
            (
                r["point"]["n"].as_u64().unwrap(),
                r["repetition"].as_u64().unwrap_or(1),
            )
        })
        .collect();
    measured.sort_unstable();
    assert_eq!(measured, [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]);
    let shown = rigrun_in(
        dir.path(),
        &["show", run_dir.to_str().unwrap(), "--format", "json"],
    )
    .1;
    let table: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(table["tables"][0]["rows"][0]["cells"][1]["n"], 3, "{shown}");
}

/// A run whose journals were damaged afterwards (a disk that filled, a kill mid-write): a cut
/// line in records.jsonl and a garbled one in events.jsonl are each warned about with file and
/// line, by show and by resume; the point whose record line was cut, but whose events say it
/// finished ok, shows as such rather than as never run.
#[test]
fn damaged_journal_lines_are_named_and_a_point_whose_record_was_cut_shows_it_finished() {
    let dir = setup();
    let fixed = dir.path().join("fixed");
    std::fs::write(&fixed, "").unwrap();
    let run = run_to_end(dir.path(), &failing_sweep(&fixed, "1, 2, 3"), 0);
    let (records_path, events_path) = (run.join("records.jsonl"), run.join("events.jsonl"));
    let mut lines: Vec<String> = std::fs::read_to_string(&records_path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert!(lines[1].contains("\"n\":2"), "{lines:?}");
    lines[1].truncate(30);
    std::fs::write(&records_path, lines.join("\n") + "\n").unwrap();
    let mut events: Vec<String> = std::fs::read_to_string(&events_path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let garbled = events
        .iter()
        .position(|e| e.contains("\"host_connected\""))
        .unwrap();
    events[garbled] = "{\"event\": \"host_conn\u{0}".into();
    std::fs::write(&events_path, events.join("\n") + "\n").unwrap();

    let (code, stdout, stderr) = rigrun_in(dir.path(), &["show", run.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let warned =
        |path: &Path, line: usize, what: &str| format!("warning: {}:{line}: not {what} (", path.display());
    assert!(stderr.contains(&warned(&records_path, 2, "a record")), "{stderr}");
    assert!(
        stderr.contains(&warned(&events_path, garbled + 1, "an event")),
        "{stderr}"
    );
    let row = crate::resume_support::row(&stdout, "n=2");
    assert!(row.contains("ok, record lost ["), "{stdout}");
    assert!(
        stdout.contains("] events.jsonl says it finished ok, but its record could not be read"),
        "{stdout}"
    );
    assert!(!stdout.contains("not run"), "{stdout}");

    let (code, _, stderr) = rigrun_in(dir.path(), &["run", "--resume", run.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(&warned(&events_path, garbled + 1, "an event")),
        "{stderr}"
    );
}
