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

pub(crate) fn inventory(dir: &Path, port: u16) {
    let text = format!(
        "vars: {{url: \"http://127.0.0.1:30000\"}}\nhosts:\n  gpu1:\n    address: 127.0.0.1\n    port: {port}\n    vars: {{kv: 1000}}\n  gpu2:\n    address: 127.0.0.1\n    port: {port}\ngroups:\n  gpu: [gpu1, gpu2]\n"
    );
    std::fs::write(dir.join("hosts.yaml"), text).unwrap();
}

/// Runs `check`, `plan` and `run` on a bad playbook; each must exit 2 naming `file:line:col` and
/// containing `message`, and no host may be contacted. Returns `check`'s stderr.
pub(crate) fn assert_rejected(playbook: &str, location: &str, message: &str) -> String {
    assert_rejected_with(playbook, &[], location, message)
}

/// [`assert_rejected`] with more arguments after the playbook (`-e`, `--only`, ...).
pub(crate) fn assert_rejected_with(playbook: &str, extra: &[&str], location: &str, message: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let trip = Tripwire::new();
    inventory(dir.path(), trip.port);
    std::fs::write(dir.path().join("bench.py"), "print('{}')\n").unwrap();
    std::fs::write(dir.path().join("bad.yaml"), playbook).unwrap();
    let mut first = String::new();
    for command in ["check", "run", "plan"] {
        let mut args = vec![command, "bad.yaml"];
        if command == "run" {
            args.extend(["--runs-dir", "runs"]);
        }
        args.extend_from_slice(extra);
        let out = run_rigrun(dir.path(), &args);
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
        if first.is_empty() {
            first = stderr;
        }
    }
    assert_eq!(trip.hits.load(Ordering::SeqCst), 0, "a host was contacted");
    assert!(!dir.path().join("runs").exists(), "a run directory was created");
    first
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
        "`maybe` is not true or false",
    );
}

#[test]
fn an_undefined_variable_names_the_hosts_it_is_missing_on() {
    assert_rejected(
        "name: t\nhosts: [gpu]\nsteps:\n  - shell:\n      command: echo {{ kv }} {{ url }}\n",
        "5:24",
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
    let stderr = assert_rejected(
        &yaml,
        "7:47: this alias expands the anchor `&a3` (at line 6, column 11) so far that the YAML holds more than 100,000 values",
        "(an \"alias bomb\"): write the values out, or use fewer aliases",
    );
    assert!(
        !stderr.contains("Nodes") && !stderr.contains("budget breached"),
        "Debug text: {stderr}"
    );
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
        stderr.contains("`nohost` is not one of this playbook's hosts or their groups (gpu1, gpu2, gpu)"),
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
        text(&out)
            .0
            .contains("are valid: 1 host, 1 step; in all, 2 sweep points to run (1 more skipped by skip_if)"),
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

/// Writes `playbook` and the test inventory to a new folder and runs `rigrun ARGS... bad.yaml`.
fn check_playbook(command: &str, playbook: &[u8], extra: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    inventory(dir.path(), 1);
    std::fs::write(dir.path().join("bad.yaml"), playbook).unwrap();
    let mut args = vec![command, "bad.yaml"];
    args.extend_from_slice(extra);
    let out = run_rigrun(dir.path(), &args);
    let (stdout, stderr) = text(&out);
    (out.status.code(), stdout, stderr)
}

#[test]
fn a_nested_loop_template_runs_out_of_its_budget() {
    assert_rejected(
        "name: t\nsteps:\n  - shell:\n      command: \"{% for a in range(10000) %}{% for b in range(10000) %}x{% endfor %}{% endfor %}\"\n",
        "4:16",
        "the template ran out of its budget of 1000000 steps",
    );
}

#[test]
fn a_matrix_too_large_is_counted_not_expanded() {
    let axes: String = (0..7)
        .map(|a| format!("        a{a}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"))
        .collect();
    let playbook = format!("name: t\nsteps:\n  - run-sweep:\n      matrix:\n{axes}      command: echo\n");
    assert_rejected(
        &playbook,
        "5:13",
        "this matrix has 10,000,000 points (a0: 10 × a1: 10 × a2: 10 × a3: 10 × a4: 10 × a5: 10 × a6: 10); rigrun runs at most 10,000 points per sweep",
    );
}

#[test]
fn invalid_utf8_is_placed_at_its_line_and_column() {
    for command in ["check", "plan"] {
        let (code, _, stderr) = check_playbook(
            command,
            b"name: t\nsteps:\n  - shell: {command: \"echo \xff\"}\n",
            &[],
        );
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains("bad.yaml:3:28: the byte 0xff is not UTF-8 text"),
            "{stderr}"
        );
    }
}

#[test]
fn minijinja_functions_are_known_and_unknown_ones_are_named() {
    let playbook = b"name: t\nhosts: [gpu1]\nsteps:\n  - shell:\n      command: \"echo {% for i in range(3) %}{{ i }}{% endfor %}\"\n";
    let (code, stdout, stderr) = check_playbook("plan", playbook, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("echo 012"), "{stdout}");
    assert_eq!(check_playbook("check", playbook, &[]).0, Some(0));
    assert_rejected(
        "name: t\nsteps:\n  - shell:\n      command: \"echo {{ nosuch(3) }}\"\n",
        "4:25",
        "the template function `nosuch` is not supported (rigrun's templates offer: ",
    );
}

#[test]
fn extra_vars_need_an_identifier_and_one_line() {
    let ok = b"name: t\nsteps: []\n";
    let (code, _, stderr) = check_playbook("check", ok, &["-e", "na\np=1"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("-e: `na\\np` is not a variable name"), "{stderr}");
    let (code, _, stderr) = check_playbook("plan", ok, &["-e", "k=a\nb"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("-e: the value of `k` holds a control character") && stderr.contains("under vars:"),
        "{stderr}"
    );
}

/// Runs a `template: true` copy-script whose template loops, with `timeout`; returns stderr
/// after asserting that the run ended with exit 1 (the step failed; nothing hung).
fn run_looping_script(timeout: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hosts.yaml"),
        "hosts:\n  here:\n    connection: local\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("loop.sh"),
        "{% for a in range(10000) %}{% for b in range(10000) %}x{% endfor %}{% endfor %}\n",
    )
    .unwrap();
    let playbook = format!(
        "name: t\nsteps:\n  - copy-script: {{src: loop.sh, dest: {}/loop.sh, template: true, timeout: {timeout}}}\n",
        dir.path().join("work").display()
    );
    std::fs::write(dir.path().join("p.yaml"), playbook).unwrap();
    let out = run_rigrun(dir.path(), &["run", "p.yaml", "--runs-dir", "runs"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    stderr
}

#[test]
fn a_looping_template_script_fails_its_step_on_the_budget() {
    let stderr = run_looping_script("30s");
    assert!(
        stderr.contains("cannot render ./loop.sh as a template: the template ran out of its budget"),
        "{stderr}"
    );
}

/// The render runs off the host's task, so the step's timeout fires while it renders (1 ms is far
/// shorter than a million steps take).
#[test]
fn a_looping_template_script_still_obeys_its_timeout() {
    let stderr = run_looping_script("1ms");
    assert!(stderr.contains("copy-script: timed out after 1ms"), "{stderr}");
}

#[test]
fn a_plan_whose_templates_together_run_too_long_is_refused() {
    let axes: String = (0..3)
        .map(|a| format!("        a{a}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"))
        .collect();
    let playbook = format!(
        "name: t\nhosts: [gpu1]\nsteps:\n  - run-sweep:\n      matrix:\n{axes}      command: \"{{% for i in range(1000) %}}{{{{ i }}}}{{% endfor %}}\"\n"
    );
    // `check` only: `plan` and `run` build the same plan, and each build spends the whole budget.
    let (code, _, stderr) = check_playbook("check", playbook.as_bytes(), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "bad.yaml:9:16: planning ran out of its budget of 5000000 template steps for the whole playbook"
        ),
        "{stderr}"
    );
}

#[test]
fn a_dcgm_exporter_that_is_not_a_url_is_refused_naming_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = "hosts:\n  gpu1:\n    connection: local\n    dcgm_exporter: 127.0.0.1:9400\n";
    std::fs::write(dir.path().join("hosts.yaml"), inventory).unwrap();
    std::fs::write(
        dir.path().join("p.yaml"),
        "name: p\nsteps:\n  - shell: {command: \"true\"}\n",
    )
    .unwrap();
    let out = run_rigrun(dir.path(), &["check", "p.yaml"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("hosts.yaml:3:"), "{stderr}");
    assert!(
        stderr.contains("host `gpu1`: `dcgm_exporter:` must be the exporter's URL"),
        "{stderr}"
    );
}

/// A playbook whose server block has `variants` and `args` as given.
fn variants_playbook(variants: &str, args: &str) -> String {
    format!(
        "name: t\nserver:\n  command: serve --port 1\n  url: http://127.0.0.1:1\n  variants: {variants}\n  args: {args}\nsteps:\n  - shell: {{command: \"true\"}}\n"
    )
}

#[test]
fn server_variants_errors_name_their_place_and_what_there_is() {
    assert_rejected(
        &variants_playbook("{spec: [off, nextn3]}", "{spec=nextn9: [--x]}"),
        "6:23",
        "args `spec=nextn9`: no variant has spec=nextn9 (the variants are spec: off, nextn3)",
    );
    assert_rejected(
        &variants_playbook("{spec: [off, nextn3]}", "{nextn3: [--x]}"),
        "6:18",
        "write it as axis=value",
    );
    assert_rejected(
        &variants_playbook("{spec: []}", "{}"),
        "5:20",
        "variants `spec` has no values",
    );
    assert_rejected(
        &variants_playbook("{host: [a, b]}", "{}"),
        "5:20",
        "`host` is a built-in variable",
    );
    assert_rejected(
        "name: t\nserver:\n  command: serve --tp {{ tp }}\n  url: http://127.0.0.1:1\n  variants: {spec: [off]}\nsteps:\n  - shell: {command: \"true\"}\n",
        "3:26",
        "`tp` is not defined for host gpu1, gpu2",
    );
}

#[test]
fn with_server_variants_a_reference_names_its_column() {
    let reference = |column: &str| {
        format!(
            "name: t\nserver:\n  command: serve\n  url: http://127.0.0.1:1\n  variants: {{spec: [off, on]}}\nsteps:\n  - run-sweep:\n      matrix: {{c: [1]}}\n      command: echo\n      references:\n        {column}: {{1: {{x: 1}}}}\n"
        )
    };
    assert_rejected(
        &reference("gpu1"),
        "11:9",
        "with server variants each variant is a column of its own: name one of gpu1/spec=off, gpu1/spec=on",
    );
    assert_rejected(
        &reference("gpu1/spec=maybe"),
        "11:9",
        "`gpu1/spec=maybe`: no such variant",
    );
}

#[test]
fn a_search_needs_limits_an_axis_of_its_own_sane_candidates_and_one_measurement_per_probe() {
    let sweep = |slo: &str, extra: &str| {
        format!("name: t\n{slo}steps:\n  - run-sweep:\n      command: echo {{{{ concurrency }}}}\n{extra}")
    };
    let slo = "slo: {p99_ttft_ms: 2000}\n";
    let search = "      search: {axis: concurrency, from: 1, to: 64}\n";
    assert_rejected(
        &sweep("", search),
        "5:22",
        "search: needs the limits each probe must meet: give the playbook an `slo:`",
    );
    assert_rejected(
        &sweep(slo, &format!("      matrix: {{concurrency: [1, 2]}}\n{search}")),
        "7:22",
        "search: `concurrency` is also a matrix axis",
    );
    assert_rejected(
        &sweep(slo, &format!("{search}      repeat: 3\n")),
        "7:15",
        "repeat: a search judges each probe by one measurement",
    );
    assert_rejected(
        &sweep(slo, "      search: {axis: concurrency, from: 64, to: 1}\n"),
        "6:49",
        "search: to: 1 is below from: 64",
    );
    assert_rejected(
        &sweep(
            slo,
            "      search: {axis: concurrency, from: 1, to: 64, probes: 0}\n",
        ),
        "6:60",
        "search: probes: at least 1",
    );
}

#[test]
fn a_rigrun_binary_that_is_not_a_file_is_named_before_any_host_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let trip = Tripwire::new();
    let missing = dir.path().join("builds/rigrun");
    let inventory = format!(
        "hosts:\n  gpu1:\n    address: 127.0.0.1\n    port: {}\n    rigrun_binary: {}\n",
        trip.port,
        missing.display()
    );
    std::fs::write(dir.path().join("hosts.yaml"), inventory).unwrap();
    let uses = "name: t\nsteps:\n  - shell: {command: \"{{ rigrun }} --version\"}\n";
    std::fs::write(dir.path().join("uses.yaml"), uses).unwrap();
    std::fs::write(
        dir.path().join("plain.yaml"),
        "name: t\nsteps:\n  - shell: {command: \"true\"}\n",
    )
    .unwrap();
    for command in ["check", "run"] {
        let args = [command, "uses.yaml", "-i", "hosts.yaml", "--runs-dir", "runs"];
        let args = if command == "check" { &args[..4] } else { &args[..] };
        let out = run_rigrun(dir.path(), args);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let said = format!(
            "hosts.yaml:3:5: host `gpu1`: `rigrun_binary:` names {}, which is not a file here",
            missing.display()
        );
        assert!(stderr.contains(&said), "{stderr}");
    }
    assert_eq!(trip.hits.load(Ordering::SeqCst), 0, "no host contacted");
    // A playbook that never sends a rigrun never needs one.
    let out = run_rigrun(dir.path(), &["check", "plain.yaml", "-i", "hosts.yaml"]);
    assert!(out.status.success(), "{:?}", text(&out));
}

/// A host's `slurm:` block is checked with the rest, before anything is asked of Slurm: each
/// mistake names the inventory's file, line and column and says what to write; a good block
/// shows in `rigrun plan` as the `sbatch` options it becomes, each shell-quoted.
#[test]
fn a_slurm_block_is_checked_and_planned() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ok.yaml"),
        "name: t\nsteps:\n  - shell: {command: hostname}\n",
    )
    .unwrap();
    let cases = [
        ("{partition: gpu}", "hosts.yaml:4:", "missing field `time`"),
        (
            "{time: 30s}",
            "hosts.yaml:4:",
            "shorter than Slurm's smallest limit",
        ),
        ("{time: 1h, gpus: 0}", "hosts.yaml:4:", "gpus"),
        ("{time: 1h, extra: [qos=high]}", "hosts.yaml:4:", "qos=high"),
        ("{time: 1h, partiton: gpu}", "hosts.yaml:4:", "partiton"),
    ];
    for (block, location, words) in cases {
        std::fs::write(
            dir.path().join("hosts.yaml"),
            format!("hosts:\n  cluster:\n    address: login.example\n    slurm: {block}\n"),
        )
        .unwrap();
        let out = run_rigrun(dir.path(), &["check", "ok.yaml"]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{block}: {stderr}");
        assert!(
            stderr.contains(location) && stderr.contains(words),
            "{block}: {stderr}"
        );
    }
    std::fs::write(
        dir.path().join("hosts.yaml"),
        "hosts:\n  cluster:\n    address: login.example\n    slurm: {time: 90m, partition: gpu, constraint: \"h100&ib\", extra: [--qos=high]}\n",
    )
    .unwrap();
    let out = run_rigrun(dir.path(), &["plan", "ok.yaml"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains(
            "sbatch --nodes=1 --ntasks=1 --time=0-01:30:00 --partition=gpu '--constraint=h100&ib' --qos=high; every step runs there through srun"
        ),
        "{stdout}"
    );
}
