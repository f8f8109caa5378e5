//! Server variants on two hosts in network namespaces of their own, over SSH, with `rigrun sim`
//! as the server: each variant's server is started, measured and stopped in turn on each host;
//! a variant with a bad flag fails to start and the next one runs; a server that ignores
//! SIGTERM is killed after the grace; afterwards no server of the run is left on either host
//! (checked in each namespace's process table).

use std::path::Path;

use serde_json::Value;

use crate::common::*;

/// `launch.sh MODE COMMAND...`: runs COMMAND, ignoring SIGTERM when MODE is `deaf` (the
/// disposition survives the `exec`, as a server that traps TERM would behave).
const LAUNCHER: &str = "mode=$1; shift\n[ \"$mode\" = deaf ] && trap '' TERM\nexec \"$@\"\n";

/// `TOKEN` is the marker of this test's servers in the hosts' process tables.
const PLAYBOOK: &str = r#"
name: variants-netns
hosts: [gpu]
server:
  command: "sh {{ launcher }} {{ mode }} {{ rigrun }} sim --profile tiny --port 30000 --model rigrun/TOKEN"
  url: http://127.0.0.1:30000
  model: rigrun/TOKEN
  wait: 30s
  stop_grace: 2s
  variants: {mode: [plain, badflag, deaf]}
  args: {mode=badflag: [--no-such-flag]}
steps:
  - copy-script:
      src: bench_throughput.py
      dest: "{{ workdir }}/bench_throughput.py"
  - run-sweep:
      matrix: {concurrency: [1, 2]}
      command: >-
        python3 {{ workdir }}/bench_throughput.py --url http://127.0.0.1:30000 --model rigrun/TOKEN
        --concurrency {{ concurrency }} --input-len 32 --output-len 8 --num-requests {{ concurrency }}
      timeout: 2m
"#;

#[test]
fn each_variant_is_started_measured_and_stopped_in_turn_on_two_namespaced_hosts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let token = format!("variants{}", std::process::id());
    let hosts = NetnsHosts::start(dir);
    let launcher = dir.join("launch.sh");
    std::fs::write(&launcher, LAUNCHER).unwrap();
    let vars = format!("    vars: {{launcher: {}}}\n", launcher.display());
    let inventory = hosts.inventory(dir, [&vars, &vars]);
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
    std::fs::write(dir.join("p.yaml"), PLAYBOOK.replace("TOKEN", &token)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_throughput.py");
    std::fs::copy(script, dir.join("bench_throughput.py")).unwrap();

    let out = run_rigrun(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the bad flag fails the run:\n{stdout}\n{stderr}"
    );

    // Nothing of the run serves on either host any more.
    for ns in &hosts.ns {
        let left = ns.processes(&format!("rigrun/{token}"));
        assert!(left.is_empty(), "servers left in {}: {left:?}", ns.name);
    }

    let run_dir = only_run_dir(&dir.join("runs"));
    let recs = records(&run_dir);
    let manifest = manifest(&run_dir);
    for host in ["h1", "h2"] {
        let sweep = |mode: &str| -> Vec<&Value> {
            let of = recs
                .iter()
                .filter(|r| r["host"] == host && r["step"] == "run-sweep");
            of.filter(|r| r["variant"]["mode"] == mode).collect()
        };
        for mode in ["plain", "deaf"] {
            let ok: Vec<_> = sweep(mode).into_iter().filter(|r| r["status"] == "ok").collect();
            assert_eq!(ok.len(), 2, "{host} mode={mode}: {recs:?}");
            assert!(ok.iter().all(|r| r["metrics"]["completed"].as_u64() > Some(0)));
        }
        let bad = sweep("badflag");
        assert_eq!(bad.len(), 2, "{host}: {recs:?}");
        assert_failed_on_a_bad_flag(&bad);

        let variants = &manifest["hosts"][host]["variants"];
        let labels: Vec<&String> = variants.as_object().unwrap().keys().collect();
        assert_eq!(
            labels,
            ["mode=plain", "mode=badflag", "mode=deaf"],
            "in the order they ran"
        );
        let bad = &variants["mode=badflag"];
        assert_eq!(bad["status"], "failed");
        assert!(
            bad["startup"]["log_tail"].to_string().contains("--no-such-flag"),
            "{bad}"
        );
        for mode in ["plain", "deaf"] {
            let startup = &variants[format!("mode={mode}")]["startup"];
            let ready = startup["ready_seconds"].as_f64().unwrap();
            let first = startup["first_token_seconds"].as_f64().unwrap();
            assert!(ready > 0.0 && first >= ready, "{host} {mode}: {startup}");
        }
        // The plain server went at TERM; the deaf one only at KILL, after its 2 s grace.
        let stopped = |mode: &str| {
            variants[format!("mode={mode}")]["stop"]["stop_seconds"]
                .as_f64()
                .unwrap()
        };
        assert!(stopped("plain") < 2.0, "{host}: plain took {}s", stopped("plain"));
        assert!(stopped("deaf") >= 2.0, "{host}: deaf took {}s", stopped("deaf"));
    }

    // On each host a variant starts only once the one before it was stopped.
    let journal = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let events: Vec<Value> = journal
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for host in ["h1", "h2"] {
        let order: Vec<String> = events
            .iter()
            .filter(|e| e["host"] == host && e["event"].as_str().unwrap().starts_with("variant_"))
            .map(|e| {
                format!(
                    "{} {}",
                    e["event"].as_str().unwrap(),
                    e["variant"].as_str().unwrap()
                )
            })
            .collect();
        let expected: Vec<String> = ["mode=plain", "mode=badflag", "mode=deaf"]
            .iter()
            .flat_map(|v| ["variant_started", "variant_ready", "variant_stopped"].map(|e| format!("{e} {v}")))
            .collect();
        assert_eq!(order, expected, "{host}");
    }
    assert!(stdout.contains("h2/mode=deaf / h2/mode=plain"), "{stdout}");
}
