//! The whole workflow on two hosts that each have their own loopback: network namespaces, each
//! with its own sshd and its own inference server (`rigrun sim`, started by the playbook) on
//! 127.0.0.1:30000. Needs root (for `ip netns`) and openssh-server, as CI provides.

use std::path::Path;

use crate::common::*;
use serde_json::Value;

const PLAYBOOK: &str = r#"
name: e2e
hosts: [gpu]
vars: {input_len: 64, output_len: 16}
steps:
  - start-server:
      command: "{{ rigrun }} sim --profile tiny --port 30000"
      url: http://127.0.0.1:30000
      wait: 30s
  - verify-server:
      url: http://127.0.0.1:30000
      model: rigrun/tiny
      smoke: true
  - copy-script:
      src: bench_throughput.py
      dest: "{{ workdir }}/bench_throughput.py"
  - run-sweep:
      matrix: {concurrency: [1, 2, 4]}
      skip_if: concurrency > max_concurrency
      command: >-
        python3 {{ workdir }}/bench_throughput.py --url http://127.0.0.1:30000
        --concurrency {{ concurrency }} --input-len {{ input_len }} --output-len {{ output_len }}
        --num-requests {{ concurrency * 2 }} --out-dir {{ workdir }}/results/{{ run_id }}
      timeout: 2m
  - fetch-results:
      src: "{{ workdir }}/results/{{ run_id }}/*.json"
"#;

#[test]
fn two_namespaced_hosts_run_the_whole_workflow_and_compare() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hosts = NetnsHosts::start(dir);
    let [ns1, ns2] = &hosts.ns;
    let inventory = hosts.inventory(
        dir,
        [
            "    vars: {max_concurrency: 4}\n    labels: {gpu: big}\n",
            "    vars: {max_concurrency: 2}\n    labels: {gpu: small}\n",
        ],
    );
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
    std::fs::write(dir.join("e2e.yaml"), PLAYBOOK).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_throughput.py");
    std::fs::copy(script, dir.join("bench_throughput.py")).unwrap();

    let out = run_rigrun(dir, &["run", "e2e.yaml", "--runs-dir", "runs"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "rigrun failed:\n{stdout}\n{stderr}");
    let run_dir = only_run_dir(&dir.join("runs"));
    let recs = records(&run_dir);

    // Every host × point has a record: measured, or skipped with its reason.
    for (host, max) in [("h1", 4), ("h2", 2)] {
        for c in [1u64, 2, 4] {
            let rec = recs
                .iter()
                .find(|r| r["host"] == host && r["step"] == "run-sweep" && r["point"]["concurrency"] == c)
                .unwrap_or_else(|| panic!("no record for {host} c={c}"));
            if c > max {
                assert_eq!(rec["status"], "skipped");
                assert_eq!(
                    rec["reason"],
                    format!("concurrency = {c} > max_concurrency = {max}")
                );
            } else {
                assert_eq!(rec["status"], "ok", "{rec}");
                let m = &rec["metrics"];
                assert_eq!(m["completed"], c * 2);
                assert_eq!(m["failed"], 0);
                assert_eq!(
                    m["total_output_tokens"],
                    c * 2 * 16,
                    "token counts come from the server's usage"
                );
                assert!(m["output_throughput"].as_f64().unwrap() > 0.0);
            }
        }
        let fetched = recs
            .iter()
            .filter(|r| r["host"] == host && r["step"] == "fetch-results")
            .count();
        assert_eq!(
            fetched as u64,
            max.min(3),
            "one record per fetched result file on {host}"
        );
    }

    // The manifest keeps what verify-server saw, through the SSH port forward.
    let manifest = manifest(&run_dir);
    let verify = step(&manifest, "h1", "verify-server");
    assert_eq!(verify["details"]["models"], serde_json::json!(["rigrun/tiny"]));
    assert_eq!(verify["details"]["max_model_len"], 4096);
    assert!(verify["details"]["smoke"]["completion_tokens"].as_u64().unwrap() > 0);
    let server_log = std::fs::read_to_string(run_dir.join("hosts/h1/01-start-server/server.log")).unwrap();
    assert!(server_log.contains("serving rigrun/tiny"), "{server_log}");

    // The sims were stopped when the playbook ended: nothing listens in the namespaces any more.
    for ns in [ns1, ns2] {
        let listening = sh(
            "ip",
            &["netns", "exec", &ns.name, "ss", "-ltnH", "sport = :30000"],
        );
        assert!(
            listening.trim().is_empty(),
            "a sim still listens in {}: {listening}",
            ns.name
        );
    }

    // The closing table has both hosts side by side with the ratio column.
    assert!(stdout.contains("h2 / h1"), "{stdout}");
    let out = rigrun()
        .args(["compare", run_dir.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let grids: Value = serde_json::from_str(&text(&out).0).unwrap();
    assert_eq!(
        grids["tables"][0]["columns"],
        serde_json::json!(["point", "h1", "h2", "h2 / h1"])
    );
    for format in ["table", "markdown", "csv", "json"] {
        let out = rigrun()
            .args(["show", run_dir.to_str().unwrap(), "--format", format])
            .output()
            .unwrap();
        assert!(
            out.status.success() && !out.stdout.is_empty(),
            "show --format {format}"
        );
    }

    // A second run finds the script and the rigrun binary unchanged on both hosts: neither is
    // uploaded again (the binary keeps its file, whose modification time would change).
    let binaries = [dir.join("w1/bin/rigrun"), dir.join("w2/bin/rigrun")];
    let modified = |p: &std::path::PathBuf| std::fs::metadata(p).unwrap().modified().unwrap();
    let before: Vec<_> = binaries.iter().map(modified).collect();
    let out = run_rigrun(dir, &["run", "e2e.yaml", "--runs-dir", "runs2"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let manifest = crate::common::manifest(&only_run_dir(&dir.join("runs2")));
    for host in ["h1", "h2"] {
        assert_eq!(step(&manifest, host, "copy-script")["details"]["uploaded"], false);
    }
    let after: Vec<_> = binaries.iter().map(modified).collect();
    assert_eq!(before, after, "the rigrun binary was uploaded again");
}

fn step(manifest: &Value, host: &str, kind: &str) -> Value {
    let steps = manifest["hosts"][host]["steps"].as_array().unwrap();
    steps
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} on {host}"))
        .clone()
}
