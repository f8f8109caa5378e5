//! Server variants on `connection: local` hosts: the real binary starts a real `rigrun sim` per
//! variant, the tables put host × variant side by side with ratios against a variant or a host,
//! a variant that fails to start shows as such, a run interrupted in its second variant resumes
//! there, and the shipped demo compares speculative decoding off and on.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{assert_none_left, free_port, manifest, only_run_dir, records, rigrun, text};
use crate::resume_support::{spawn, wait_for_event};

/// Runs rigrun in `dir`; returns the exit code, stdout and stderr.
fn rigrun_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = rigrun().current_dir(dir).args(args).output().unwrap();
    let (stdout, stderr) = text(&out);
    (out.status.code(), stdout, stderr)
}

/// Two local hosts, each with a port of its own for its server and a speed.
fn inventory(dir: &Path) -> String {
    let host = |name: &str, speed: u32| {
        format!(
            "  {name}:\n    connection: local\n    workdir: {}\n    vars: {{port: {}, speed: {speed}}}\n",
            dir.join(name).display(),
            free_port()
        )
    };
    format!("hosts:\n{}{}", host("fast", 200), host("slow", 100))
}

/// The tiny sim per variant (`broken` starts it with a flag it refuses); the sweep prints a
/// record whose throughput doubles with speculation.
const PLAYBOOK: &str = r#"
name: variants
server:
  command: "{{ rigrun }} sim --profile tiny --port {{ port }}"
  url: "http://127.0.0.1:{{ port }}"
  wait: 30s
  stop_grace: 1s
  variants: {spec: [off, on, broken]}
  args: {spec=broken: [--no-such-flag]}
steps:
  - run-sweep:
      matrix: {concurrency: [1, 4]}
      command: >-
        echo '{"output_throughput": {{ speed * concurrency * (2 if spec == "on" else 1) }}}'
        | tee {{ workdir }}/out-{{ concurrency }}.json
      references:
        fast/spec=on: {4: {output_throughput: 1600 ±1%}}
  - fetch-results:
      src: "{{ workdir }}/out-*.json"
"#;

/// Runs `PLAYBOOK` on both hosts (exit 1: one variant fails to start); returns the run directory.
fn variant_run(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("hosts.yaml"), inventory(dir)).unwrap();
    std::fs::write(dir.join("p.yaml"), PLAYBOOK).unwrap();
    let (code, stdout, stderr) = rigrun_in(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    assert_eq!(
        code,
        Some(1),
        "the broken variant fails the run:\n{stdout}\n{stderr}"
    );
    only_run_dir(&dir.join("runs"))
}

/// `compare RUN --format json [extra]`: the first table's columns and rows.
fn compared(run: &Path, extra: &[&str]) -> Value {
    let run = run.to_str().unwrap();
    let args = [&["compare", run, "--format", "json"][..], extra].concat();
    let (code, stdout, stderr) = rigrun_in(Path::new("."), &args);
    assert_eq!(code, Some(0), "{stderr}");
    let grids: Value = serde_json::from_str(&stdout).unwrap();
    let sweep = grids["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["title"].as_str().unwrap().contains("run-sweep"));
    sweep
        .cloned()
        .unwrap_or_else(|| panic!("no run-sweep table: {stdout}"))
}

#[test]
fn variants_are_columns_compared_against_a_variant_or_a_host() {
    let tmp = tempfile::tempdir().unwrap();
    let run = variant_run(tmp.path());

    // Records carry their variant; the broken one's points failed to start, with the reason.
    let recs = records(&run);
    let of = |host: &str, spec: &str| -> Vec<&Value> {
        let sweep = recs.iter().filter(|r| r["step"] == "run-sweep");
        sweep
            .filter(|r| r["host"] == host && r["variant"]["spec"] == spec)
            .collect()
    };
    for host in ["fast", "slow"] {
        assert_eq!(of(host, "off").len(), 2);
        assert!(of(host, "on").iter().all(|r| r["status"] == "ok"));
        let broken = of(host, "broken");
        assert_eq!(broken.len(), 2, "{recs:?}");
        crate::common::assert_failed_on_a_bad_flag(&broken);
    }
    // Each variant's fetched files are its own, though their names are the same.
    for (spec, value) in [("off", "400"), ("on", "800")] {
        let file = run.join(format!("hosts/slow/spec={spec}/fetched/out-4.json"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains(&format!("\"output_throughput\": {value}")),
            "{text}"
        );
    }
    // The manifest keeps each variant's start: timed when ready, the log's tail when not.
    let manifest = crate::common::manifest(&run);
    let variants = &manifest["hosts"]["fast"]["variants"];
    assert!(variants["spec=off"]["startup"]["ready_seconds"].as_f64().unwrap() > 0.0);
    assert!(
        variants["spec=on"]["startup"]["first_token_seconds"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert_eq!(variants["spec=broken"]["status"], "failed");
    let tail = variants["spec=broken"]["startup"]["log_tail"].to_string();
    assert!(tail.contains("--no-such-flag"), "{tail}");

    // Without --baseline: each host's first variant.
    let by_variant = compared(&run, &[]);
    assert_eq!(
        by_variant["columns"],
        serde_json::json!([
            "point",
            "fast/spec=off",
            "fast/spec=on",
            "fast/spec=broken",
            "slow/spec=off",
            "slow/spec=on",
            "slow/spec=broken",
            "fast/spec=on / fast/spec=off",
            "fast/spec=broken / fast/spec=off",
            "slow/spec=on / slow/spec=off",
            "slow/spec=broken / slow/spec=off"
        ])
    );
    assert_eq!(by_variant, compared(&run, &["--baseline", "spec=off"]));
    let row = &by_variant["rows"][0]["cells"];
    assert_eq!(row[7]["value"], 2.0, "{row}");
    assert_eq!(row[3]["status"], "failed", "{row}");
    assert!(
        row[3]["reason"].as_str().unwrap().starts_with("failed to start"),
        "{row}"
    );

    // Against a host: each variant of the other host against the same variant on it.
    let by_host = compared(&run, &["--baseline", "fast"]);
    let columns = by_host["columns"].as_array().unwrap();
    assert_eq!(
        columns[7..],
        [
            "slow/spec=off / fast/spec=off",
            "slow/spec=on / fast/spec=on",
            "slow/spec=broken / fast/spec=broken"
        ]
    );
    assert_eq!(by_host["rows"][0]["cells"][7]["value"], 0.5, "{by_host}");

    let run_arg = run.to_str().unwrap();
    let (code, _, stderr) = rigrun_in(tmp.path(), &["compare", run_arg, "--baseline", "spec=maybe"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("no such host, column or variant") && stderr.contains("fast/spec=off"),
        "{stderr}"
    );

    // A reference names its column.
    let (_, shown, _) = rigrun_in(tmp.path(), &["show", run_arg]);
    assert!(
        shown.contains("1600 ±1%") && shown.contains("fast/spec=on") && shown.contains("✓"),
        "{shown}"
    );

    // show in every format, and the report, carry the same columns; the startup has its table.
    for format in ["table", "markdown", "csv", "json"] {
        let (code, stdout, stderr) = rigrun_in(tmp.path(), &["show", run_arg, "--format", format]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stdout.contains("slow/spec=on"), "{format}: {stdout}");
        if format != "csv" {
            assert!(stdout.contains("failed to start"), "{format}: {stdout}");
        }
        assert!(
            stdout.contains("server startup") && stdout.contains("ready_seconds"),
            "{format}: {stdout}"
        );
    }
    let html = tmp.path().join("report.html");
    let (code, _, stderr) = rigrun_in(tmp.path(), &["report", run_arg, "--out", html.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let html = std::fs::read_to_string(html).unwrap();
    assert!(
        html.contains("<th>slow/spec=on / slow/spec=off</th>"),
        "report lacks the variant ratios"
    );

    // A resume keeps the variant that failed to start failed (it says how to redo it) and starts
    // no server: every other variant finished.
    let journal = || std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    let starts = |text: String| text.matches("\"event\":\"variant_started\"").count();
    let before = starts(journal());
    assert_eq!(before, 6, "three variants on each of two hosts");
    let (code, _, stderr) = rigrun_in(tmp.path(), &["run", "--resume", run_arg, "-q"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--redo-failed"), "{stderr}");
    assert_eq!(starts(journal()), before, "a server was started again");
}

/// Two variants; in the second, points after the first wait for `go`.
fn waiting_variants(port: u16, go: &Path) -> String {
    format!(
        r#"name: resumable
server:
  command: "{{{{ rigrun }}}} sim --profile tiny --port {port}"
  url: "http://127.0.0.1:{port}"
  variants: {{v: [one, two]}}
steps:
  - run-sweep:
      matrix: {{n: [1, 2, 3]}}
      command: >-
        {{% if v == "two" and n > 1 %}}i=0; while [ ! -e {go} ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done;{{% endif %}}
        echo '{{"x": {{{{ n }}}}}}'
"#,
        go = go.display()
    )
}

#[test]
fn a_run_interrupted_in_its_second_variant_resumes_that_variant_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (port, go) = (free_port(), dir.join("go"));
    let server = format!("sim --profile tiny --port {port}");
    std::fs::write(dir.join("hosts.yaml"), "hosts:\n  a: {connection: local}\n").unwrap();
    std::fs::write(dir.join("p.yaml"), waiting_variants(port, &go)).unwrap();
    let child = spawn(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    let run = wait_for_event(&dir.join("runs"), |e| {
        e["event"] == "point_started" && e["variant"] == "v=two" && e["point"] == "n=2"
    });
    crate::common::sh("kill", &["-INT", &child.id().to_string()]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    assert_none_left(&server, "the variant's server, after the interrupt");

    std::fs::write(&go, "").unwrap();
    let run_arg = run.to_str().unwrap();
    let (code, stdout, stderr) = rigrun_in(dir, &["run", "--resume", run_arg, "-q"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_none_left(&server, "the variant's server, after the resume");

    // The resume started only the second variant's server again, and ran only what it lacked.
    let journal = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    let events: Vec<Value> = journal
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let resumed = events.iter().position(|e| e["event"] == "run_resumed").unwrap();
    let started: Vec<&Value> = events[resumed..]
        .iter()
        .filter(|e| e["event"] == "variant_started")
        .map(|e| &e["variant"])
        .collect();
    assert_eq!(started, ["v=two"]);
    let recs = records(&run);
    let ok = |v: &str, n: u64| {
        let of = recs
            .iter()
            .filter(|r| r["variant"]["v"] == v && r["point"]["n"] == n);
        of.filter(|r| r["status"] == "ok")
            .map(|r| r["attempt"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    for n in 1..=3 {
        assert_eq!(ok("one", n), [1], "v=one n={n} ran once, in the first session");
    }
    assert_eq!(
        ok("two", 1),
        [1],
        "v=two n=1 was measured before the interrupt and kept"
    );
    // n=2 was cut short: against the server started anew it runs as its next attempt.
    assert_eq!(ok("two", 2), [2], "v=two n=2: {recs:?}");
    assert_eq!(ok("two", 3), [1], "v=two n=3: {recs:?}");
    let (_, shown, _) = rigrun_in(dir, &["show", run_arg]);
    assert!(
        shown.contains("a/v=one") && shown.contains("a/v=two") && !shown.contains("not run"),
        "{shown}"
    );
}

#[test]
fn the_shipped_demo_shows_speculative_decoding_off_and_on_on_both_hosts() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The shipped inventory, with ports and workdirs of this test's own.
    let shipped = std::fs::read_to_string(repo.join("playbooks/demo-hosts.yaml")).unwrap();
    // Every mention of a port: the servers' and their DCGM exporters'.
    let inventory = shipped
        .replace("31001", &free_port().to_string())
        .replace("31002", &free_port().to_string())
        .replace("~/.rigrun/demo", &tmp.path().join("w").display().to_string());
    std::fs::write(tmp.path().join("hosts.yaml"), inventory).unwrap();
    let playbook = repo.join("playbooks/demo-variants.yaml");
    let runs = tmp.path().join("runs");
    let args = [
        "run",
        playbook.to_str().unwrap(),
        "-i",
        "hosts.yaml",
        "--runs-dir",
        runs.to_str().unwrap(),
        "-q",
    ];
    let (code, stdout, stderr) = rigrun_in(tmp.path(), &args);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("blackwell/spec=nextn3 / blackwell/spec=off"),
        "{stdout}"
    );
    let run = only_run_dir(&runs);
    // Each variant's server states its facts as verify-server would, and the GPUs the DCGM
    // exporter describes are the host's facts: nothing says "none found" beside their power.
    let manifest = manifest(&run);
    for host in ["blackwell", "a6000"] {
        let startup = &manifest["hosts"][host]["variants"]["spec=off"]["startup"];
        assert_eq!(startup["server_facts"]["engine"], "sglang", "{startup:#}");
        assert!(startup["max_model_len"].as_u64().unwrap() > 0, "{startup:#}");
    }
    assert!(
        stdout.contains("  server spec=nextn3: sglang rigrun-sim"),
        "{stdout}"
    );
    assert!(
        stdout.contains("max model length"),
        "what differs names it: {stdout}"
    );
    assert!(!stdout.contains("none found"), "{stdout}");
    let table = compared(&run, &["--baseline", "spec=off"]);
    let first = table["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(first[0]["text"], "concurrency=1", "{table}");
    // At C=1 decoding is memory bound: speculation's accepted tokens come nearly free.
    for (column, name) in [(5, "blackwell"), (6, "a6000")] {
        let ratio = first[column]["value"]
            .as_f64()
            .unwrap_or_else(|| panic!("{table}"));
        assert!(ratio > 1.3, "{name}: speculation ×{ratio} at C=1");
    }
}

#[test]
fn a_server_not_ready_by_its_wait_fails_to_start_is_stopped_and_the_next_variant_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A server that never answers: a sleep of a length no other test uses.
    let sleeper = format!("sleep {}", 7000 + std::process::id() % 1000);
    let playbook = format!(
        r#"name: deadline
server:
  command: "{{% if v == 'silent' %}}{sleeper}{{% else %}}{{{{ rigrun }}}} sim --profile tiny --port {port}{{% endif %}}"
  url: "http://127.0.0.1:{port}"
  wait: 2s
  variants: {{v: [silent, answers]}}
steps:
  - run-sweep:
      matrix: {{n: [1]}}
      command: "echo '{{\"x\": 1}}'"
"#,
        port = free_port()
    );
    std::fs::write(dir.join("hosts.yaml"), "hosts:\n  a: {connection: local}\n").unwrap();
    std::fs::write(dir.join("p.yaml"), playbook).unwrap();
    let (code, stdout, stderr) = rigrun_in(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert_none_left(&sleeper, "the silent server");
    let recs = records(&only_run_dir(&dir.join("runs")));
    let sweep = |v: &str| {
        let of = recs
            .iter()
            .filter(|r| r["step"] == "run-sweep" && r["variant"]["v"] == v);
        of.cloned().collect::<Vec<Value>>()
    };
    let silent = sweep("silent");
    let reason = silent[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("failed to start: the server did not answer within 2s"),
        "{reason}"
    );
    assert_eq!(sweep("answers")[0]["status"], "ok", "{recs:?}");
}

#[test]
fn a_variant_whose_url_another_server_answers_fails_to_start_and_leaves_that_server_alone() {
    let other = crate::sim_support::Sim::start("tiny", &["--model", "someone/else"]);
    let port = other
        .base
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let playbook = format!(
        "name: taken\nserver:\n  command: \"{{{{ rigrun }}}} sim --profile tiny --port {port}\"\n  \
         url: http://127.0.0.1:{port}\n  variants: {{v: [a]}}\nsteps:\n  - run-sweep:\n      \
         matrix: {{n: [1]}}\n      command: \"echo '{{\\\"x\\\": 1}}'\"\n"
    );
    std::fs::write(dir.join("hosts.yaml"), "hosts:\n  a: {connection: local}\n").unwrap();
    std::fs::write(dir.join("p.yaml"), playbook).unwrap();
    let (code, stdout, stderr) = rigrun_in(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let recs = records(&only_run_dir(&dir.join("runs")));
    let point = recs.iter().find(|r| r["step"] == "run-sweep").unwrap();
    let reason = point["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("failed to start: something already answers at")
            && reason.contains("someone/else"),
        "{reason}"
    );
    let alive = std::path::Path::new(&format!("/proc/{}", other.pid())).exists();
    assert!(alive, "the other server was stopped");
}
