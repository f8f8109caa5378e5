//! The native run-sweep path end to end over a real sshd: the shipped
//! `playbooks/throughput-sweep-native.yaml` uploads this rigrun binary to the host's workdir,
//! runs `{{ rigrun }} bench` there once per point against a `rigrun sim`, records each JSON line,
//! fetches the result files, and does not upload the binary again when it is unchanged.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use crate::common::*;
use serde_json::Value;

#[test]
fn the_native_sweep_playbook_measures_a_host_with_the_uploaded_binary() {
    let sim = crate::bench_support::Sim::start("tiny", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let key = ClientKey::new(dir);
    let sshd = Sshd::start(dir, "a", &key);
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let workdir = dir.join("work");
    // 32 + 64 tokens per request and a KV capacity of 400 tokens: C=1 and C=4 fit, C≥16 do not.
    // Requests of 64 tokens last long enough that a loaded machine's few milliseconds of delay
    // in sending (the parallel tests) do not keep the client from holding C=4 in flight.
    let host_vars = "    vars: {model: rigrun/tiny, kv_capacity_tokens: 400}\n";
    let inventory = format!(
        "vars: {{server_url: \"{}\"}}\nhosts:\n{}groups:\n  gpu: [a]\n",
        sim.base,
        sshd.inventory_entry("a", &key, &known_hosts, &workdir, host_vars)
    );
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
    let playbook = Path::new(env!("CARGO_MANIFEST_DIR")).join("playbooks/throughput-sweep-native.yaml");
    let run = |runs: &str| {
        let out = run_rigrun(
            dir,
            &[
                "run",
                playbook.to_str().unwrap(),
                "--runs-dir",
                runs,
                "-e",
                "input_len=32",
                "-e",
                "output_len=64",
            ],
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "rigrun run failed:\n{stdout}\n{stderr}");
        only_run_dir(&dir.join(runs))
    };

    let run_dir = run("runs");
    let recs = records(&run_dir);
    for c in [1u64, 4] {
        let rec = sweep_record(&recs, c);
        assert_eq!(rec["status"], "ok", "{rec}");
        let m = &rec["metrics"];
        assert_eq!(m["backend"], "rigrun-bench");
        assert_eq!(m["valid"], true, "{m}");
        assert_eq!(m["completed"], 5 * c);
        assert_eq!(m["total_input_tokens"], 5 * c * 32);
        assert_eq!(m["total_output_tokens"], 5 * c * 64);
        assert_eq!(m["peak_concurrency"], c);
    }
    for c in [16u64, 32, 64, 128, 256, 512, 1024] {
        assert_eq!(sweep_record(&recs, c)["status"], "skipped");
    }
    let fetched = recs.iter().filter(|r| r["step"] == "fetch-results").count();
    assert_eq!(fetched, 2, "one record per level's result file");
    let log =
        std::fs::read_to_string(run_dir.join("hosts/a/02-run-sweep/002-concurrency=4.stderr.log")).unwrap();
    assert!(log.contains("rigrun bench: "), "{log}");

    // The host runs an exact copy of this binary, uploaded once.
    let remote = workdir.join("bin/rigrun");
    let local = std::fs::read(env!("CARGO_BIN_EXE_rigrun")).unwrap();
    assert!(
        std::fs::read(&remote).unwrap() == local,
        "the uploaded copy differs"
    );
    let before = std::fs::metadata(&remote).unwrap();
    run("runs2");
    let after = std::fs::metadata(&remote).unwrap();
    assert_eq!(
        (before.ino(), before.mtime_nsec()),
        (after.ino(), after.mtime_nsec()),
        "an unchanged binary is not uploaded again"
    );
}

fn sweep_record(recs: &[Value], concurrency: u64) -> &Value {
    recs.iter()
        .find(|r| r["step"] == "run-sweep" && r["point"]["concurrency"] == concurrency)
        .unwrap_or_else(|| panic!("no record for concurrency {concurrency}: {recs:#?}"))
}
