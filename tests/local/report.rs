//! `show` and `compare` on run directories produced by real runs (local hosts).

use std::path::{Path, PathBuf};

use crate::common::*;

const INVENTORY: &str = r#"
hosts:
  fast:
    connection: local
    labels: {gpu: "8x RTX PRO 6000 Blackwell"}
    vars: {speed: 200}
  slow:
    connection: local
    labels: {gpu: "RTX A6000"}
    vars: {speed: 100}
"#;

const PLAYBOOK: &str = r#"
name: local-sweep
vars: {cap: 8}
steps:
  - run-sweep:
      matrix: {concurrency: [1, 4, 16]}
      skip_if: concurrency > cap
      command: >-
        echo "{\"output_throughput\": $(( {{ concurrency * speed }} * SPEED_PERCENT / 100 )),
        \"mean_ttft_ms\": {{ 10 * concurrency }}}"
"#;

/// Runs the playbook once with the hosts at `factor` of their speed, returns the new run
/// directory. The factor reaches the command through its environment, so that both runs
/// measure the same workload (the same command) and only the numbers differ.
fn run_once(dir: &Path, factor: f64) -> PathBuf {
    let before: Vec<PathBuf> = list(dir);
    let out = rigrun()
        .current_dir(dir)
        .env("SPEED_PERCENT", format!("{}", (factor * 100.0).round()))
        .args(["run", "sweep.yaml", "--runs-dir", "runs"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    list(dir)
        .into_iter()
        .find(|d| !before.contains(d))
        .expect("a new run directory")
}

fn list(dir: &Path) -> Vec<PathBuf> {
    crate::common::run_dirs(&dir.join("runs"))
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.yaml"), INVENTORY).unwrap();
    std::fs::write(dir.path().join("sweep.yaml"), PLAYBOOK).unwrap();
    dir
}

/// `rigrun show RUN --format FORMAT`, which must succeed; its stdout.
pub(crate) fn show(run: &Path, format: &str) -> String {
    let out = rigrun()
        .args(["show", run.to_str().unwrap(), "--format", format])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    text(&out).0
}

#[test]
fn show_prints_points_by_hosts_in_every_format() {
    let dir = setup();
    let run = run_once(dir.path(), 1.0);

    let table = show(&run, "table");
    assert!(table.contains("fast: gpu: 8x RTX PRO 6000 Blackwell"), "{table}");
    assert!(table.contains("output_throughput"), "{table}");
    let row = table.lines().find(|l| l.contains("concurrency=4")).unwrap();
    assert!(row.contains("800") && row.contains("400"), "{row}");
    let row = table.lines().find(|l| l.contains("concurrency=16")).unwrap();
    assert!(row.contains("skipped [1]"), "{row}");
    assert!(table.contains("[1] concurrency = 16 > cap = 8"), "{table}");

    let md = show(&run, "markdown");
    assert!(md.contains("| point | fast | slow |"), "{md}");
    assert!(md.contains("| concurrency=1 | 200 | 100 |"), "{md}");

    let csv = show(&run, "csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "table,metric,row,column,value,status,reason"
    );
    assert!(
        csv.lines().any(|l| l.ends_with(",concurrency=4,fast,800,ok,")),
        "{csv}"
    );
    assert!(
        csv.lines()
            .any(|l| l.contains(",concurrency=16,slow,,skipped,concurrency = 16 > cap = 8")),
        "{csv}"
    );

    let json: serde_json::Value = serde_json::from_str(&show(&run, "json")).unwrap();
    assert_eq!(json["format_version"], 1);
    let json = &json["tables"];
    assert_eq!(json[0]["metric"], "output_throughput");
    assert_eq!(json[0]["columns"], serde_json::json!(["point", "fast", "slow"]));
    assert_eq!(
        json[0]["rows"][1]["cells"][1],
        serde_json::json!({"status": "value", "value": 800.0})
    );
    assert_eq!(json[0]["rows"][2]["cells"][2]["status"], "skipped");

    let out = rigrun()
        .args(["show", run.to_str().unwrap(), "--metric", "mean_ttft_ms"])
        .output()
        .unwrap();
    assert!(text(&out)
        .0
        .lines()
        .any(|l| l.contains("concurrency=4") && l.contains("40")));
}

#[test]
fn compare_gives_ratios_within_a_run_and_changes_across_runs() {
    let dir = setup();
    let first = run_once(dir.path(), 1.0);
    let out = rigrun()
        .args(["compare", first.to_str().unwrap(), "--format", "markdown"])
        .output()
        .unwrap();
    let (md, _) = text(&out);
    assert!(md.contains("| point | fast | slow | slow / fast |"), "{md}");
    assert!(md.contains("| concurrency=4 | 800 | 400 | ×0.50 |"), "{md}");

    let out = rigrun()
        .args([
            "compare",
            first.to_str().unwrap(),
            "--baseline",
            "slow",
            "--format",
            "csv",
        ])
        .output()
        .unwrap();
    assert!(text(&out).0.contains("fast / slow,2.0000,x,"), "{:?}", text(&out));

    let out = rigrun()
        .args(["compare", first.to_str().unwrap(), "--baseline", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out)
        .1
        .contains("no such host in the run (hosts: fast, slow)"));

    let second = run_once(dir.path(), 0.9);
    let out = rigrun()
        .args([
            "compare",
            first.to_str().unwrap(),
            second.to_str().unwrap(),
            "--format",
            "csv",
        ])
        .output()
        .unwrap();
    let (csv, _) = text(&out);
    let change = csv
        .lines()
        .find(|l| l.contains(",concurrency=4,fast Δ"))
        .expect("a change column");
    assert!(change.ends_with(",-10.0000,%,regression"), "{change}");

    let (first, second) = (first.to_str().unwrap(), second.to_str().unwrap());
    let out = rigrun()
        .args(["compare", first, second, "--format", "markdown"])
        .output()
        .unwrap();
    let (md, _) = text(&out);
    assert!(md.contains("changes beyond ±5% marked"), "{md}");
    let row = md.lines().find(|l| l.starts_with("| concurrency=4 |")).unwrap();
    assert!(row.contains("| -10.0% regression [1] |"), "{row}");
    assert!(
        md.contains("[1] one measurement a side: judged against the tolerance alone"),
        "with one repetition the note says what the verdict rests on: {md}"
    );
    let out = rigrun()
        .args(["compare", first, second, "--tolerance", "15%"])
        .output()
        .unwrap();
    let (table, _) = text(&out);
    assert!(
        table.contains("-10.0%") && !table.contains("regression"),
        "{table}"
    );
    let out = rigrun()
        .args(["compare", first, second, "--tolerance", "five"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--tolerance"), "{:?}", text(&out));
}

/// The two demo runs kept as fixtures (written by the release before run.json had a format
/// version; run.json, records.jsonl and events.jsonl only).
fn fixture(name: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/runs")
        .join(name);
    dir.to_str().unwrap().to_string()
}

/// Every output of show, compare and report on the fixture runs is what it was when recorded in
/// tests/fixtures/expected/ (`RIGRUN_BLESS=1 cargo test --test report` records them anew, for
/// a change that means to alter them).
#[test]
fn outputs_on_the_fixture_runs_are_as_recorded() {
    let (a, b) = (fixture("20261201T102538Z-demo"), fixture("20261201T102606Z-demo"));
    let expected = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/expected");
    let tmp = tempfile::tempdir().unwrap();
    let html = tmp.path().join("report.html");
    let html = html.to_str().unwrap();
    let mut cases: Vec<(String, Vec<&str>)> = vec![];
    for format in ["table", "markdown", "csv", "json"] {
        cases.push((format!("show.{format}"), vec!["show", &a, "--format", format]));
        let hosts = vec!["compare", &a, "--baseline", "a6000", "--format", format];
        cases.push((format!("compare-hosts.{format}"), hosts));
        cases.push((
            format!("compare-runs.{format}"),
            vec!["compare", &a, &b, "--format", format],
        ));
    }
    cases.push((
        "show-ttft.table".into(),
        vec!["show", &a, "--metric", "median_ttft_ms"],
    ));
    cases.push(("report.html".into(), vec!["report", &a, &b, "--out", html]));
    let bless = std::env::var_os("RIGRUN_BLESS").is_some();
    let mut differ = vec![];
    for (name, args) in &cases {
        // Tables are fitted to COLUMNS when it is set: the recorded ones are whole.
        let out = rigrun().args(args).env_remove("COLUMNS").output().unwrap();
        assert!(out.status.success(), "{args:?}: {:?}", text(&out));
        let got = if name.ends_with(".html") {
            std::fs::read_to_string(html).unwrap()
        } else {
            text(&out).0
        };
        let path = expected.join(name);
        if bless {
            std::fs::create_dir_all(&expected).unwrap();
            std::fs::write(&path, &got).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(got.as_str()) {
            let at = tmp.path().join(name);
            std::fs::write(&at, &got).unwrap();
            differ.push(format!("{args:?}: diff {} {}", path.display(), at.display()));
        }
    }
    // Keep what differs to look at.
    if !differ.is_empty() {
        let keep = tmp.keep();
        panic!(
            "outputs changed (new ones in {}):\n{}",
            keep.display(),
            differ.join("\n")
        );
    }
}

/// Outputs real benchmark scripts produce: Python's `json.dumps` writes NaN, a line cut short.
const DAMAGED: &str = r#"
name: damaged
hosts: [fast]
steps:
  - run-sweep:
      matrix: {concurrency: [1, 2]}
      command: >-
        {% if concurrency == 1 %}echo '{"output_throughput": NaN, "completed": 4}'{% else %}echo '{"output_throughput": 17'{% endif %}
"#;

#[test]
fn records_that_json_cannot_hold_are_kept_marked_and_a_damaged_journal_still_reads() {
    let dir = setup();
    std::fs::write(dir.path().join("damaged.yaml"), DAMAGED).unwrap();
    let out = run_rigrun(dir.path(), &["run", "damaged.yaml", "--runs-dir", "runs"]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("[fast] warning: run-sweep concurrency=2: stdout line 1 is not a record"),
        "{stderr}"
    );
    let run = only_run_dir(&dir.path().join("runs"));
    let recs = records(&run);
    assert_eq!(recs.len(), 2, "one record per point, none dropped: {recs:?}");
    let nan = &recs[0]["metrics"];
    assert_eq!(
        (nan["output_throughput"].clone(), nan["completed"].clone()),
        (serde_json::Value::Null, 4.into())
    );
    assert_eq!(nan["valid"], false);
    assert!(
        nan["problems"][0]
            .as_str()
            .unwrap()
            .contains("`output_throughput` was NaN"),
        "{nan}"
    );
    assert_eq!(recs[1]["metrics"]["valid"], false);
    let table = show(&run, "markdown");
    assert!(table.matches("invalid").count() >= 2, "both points show: {table}");

    // A journal whose last line was cut short (a full disk, a kill mid-write): the rest reads.
    let journal = run.join("records.jsonl");
    let mut text_now = std::fs::read_to_string(&journal).unwrap();
    text_now.push_str(r#"{"run":"x","host":"fast","ste"#);
    std::fs::write(&journal, text_now).unwrap();
    let out = rigrun().args(["show", run.to_str().unwrap()]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("concurrency=1"), "{stdout}");
    assert!(
        stderr.contains(&format!("warning: {}:3: not a record", journal.display())),
        "{stderr}"
    );
}

/// A point that prints binary bytes and a 3 MiB line among its records.
const NOISY: &str = r#"
name: noisy
hosts: [fast]
steps:
  - run-sweep:
      matrix: {concurrency: [1]}
      command: >-
        printf 'bin \377\000\r\n'; head -c 3145728 /dev/zero | tr '\0' x; echo;
        echo '{"output_throughput": 5}'
"#;

#[test]
fn output_is_logged_as_printed_and_an_overlong_line_is_not_read() {
    let dir = setup();
    std::fs::write(dir.path().join("noisy.yaml"), NOISY).unwrap();
    let out = run_rigrun(dir.path(), &["run", "noisy.yaml", "--runs-dir", "runs"]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("stdout line 2 is longer than 1 MiB; it is kept in the point's log"),
        "{stderr}"
    );
    let run = only_run_dir(&dir.path().join("runs"));
    let recs = records(&run);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["metrics"]["output_throughput"], 5);
    let log = std::fs::read(run.join("hosts/fast/01-run-sweep/001-concurrency=1.stdout.log")).unwrap();
    let mut printed = b"bin \xff\x00\r\n".to_vec();
    printed.extend(std::iter::repeat_n(b'x', 3 << 20));
    printed.extend_from_slice(b"\n{\"output_throughput\": 5}\n");
    assert!(
        log == printed,
        "the log holds the bytes as printed ({} bytes, {} expected)",
        log.len(),
        printed.len()
    );
}

/// A run's status as run.json says it, with the process that wrote it.
fn set_status(run: &Path, status: &str, pid: u32) {
    let path = run.join("run.json");
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["status"] = status.into();
    manifest["process"]["pid"] = pid.into();
    std::fs::write(&path, manifest.to_string()).unwrap();
}

#[test]
fn a_run_that_did_not_finish_never_looks_finished() {
    let dir = setup();
    let run = run_once(dir.path(), 1.0);
    let id = run.file_name().unwrap().to_string_lossy().into_owned();
    let said = |format: &str| show(&run, format);

    set_status(&run, "interrupted", std::process::id());
    let interrupted = format!("run {id} was interrupted: it shows what it measured before");
    for format in ["table", "markdown", "csv", "json"] {
        assert!(said(format).contains(&interrupted), "{format}: {}", said(format));
    }

    // Left `running` by a process that is gone: shown as interrupted.
    let gone = u32::MAX - 7;
    set_status(&run, "running", gone);
    let table = said("table");
    assert!(
        table.contains(&format!("run {id} was left running by rigrun process {gone} on")),
        "{table}"
    );
    assert!(
        table.contains("which no longer exists: it is shown as interrupted"),
        "{table}"
    );

    // Still running: a rigrun process with that pid is alive here.
    let mut alive = std::process::Command::new(env!("CARGO_BIN_EXE_rigrun"))
        .args(["sim", "--profile", "tiny", "--port", "0"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    set_status(&run, "running", alive.id());
    let table = said("table");
    let _ = alive.kill();
    let _ = alive.wait();
    assert!(
        table.contains(&format!(
            "run {id} is still running (rigrun process {}",
            alive.id()
        )),
        "{table}"
    );
}
