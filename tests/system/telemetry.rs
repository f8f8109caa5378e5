//! GPU and server telemetry through a real sshd in a network namespace: the host has an
//! executable named `nvidia-smi` on its PATH (a stand-in for the driver's tool, since these
//! machines have no GPU) printing the query mode's CSV in nvidia-smi's documented format, with
//! varying values, stale samples that no window may include, one unreadable line, and a power
//! cap on GPU 1; the server is `rigrun sim`, scraped through the SSH forward.

use crate::common::*;
use serde_json::Value;

/// Answers the facts' query (two A6000s) and, in query-loop mode, 3 samples a second per GPU:
/// power alternating 100/150 W (GPU 1 power-capped), plus a sample stamped an hour ago at 999 W.
const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
case "$*" in
  *--query-gpu=name,*)
    echo "NVIDIA RTX A6000, 49140 MiB, 550.54.14, 300.00 W"
    echo "NVIDIA RTX A6000, 49140 MiB, 550.54.14, 300.00 W" ;;
  *-lms*)
    echo "this line is not a sample"
    i=0
    while :; do
      now=$(date '+%Y/%m/%d %H:%M:%S.%3N')
      old=$(date -d '1 hour ago' '+%Y/%m/%d %H:%M:%S.%3N')
      p=$((100 + (i % 2) * 50))
      echo "$now, 0, $p.00, 90, 40, 20000, 1800, 65, 0x0000000000000000"
      echo "$now, 1, $p.00, 80, 35, 21000, 1700, 71, 0x0000000000000004"
      echo "$old, 0, 999.00, 100, 100, 1, 1, 99, 0x0000000000000000"
      i=$((i + 1))
      sleep 0.333
    done ;;
  *) exit 1 ;;
esac
"#;

const PLAYBOOK: &str = r#"
name: telemetry
steps:
  - start-server:
      command: "{{ rigrun }} sim --profile tiny --port 30000"
      url: http://127.0.0.1:30000
      wait: 30s
  - verify-server:
      url: http://127.0.0.1:30000
  - run-sweep:
      matrix: {concurrency: [1, 2]}
      command: >-
        {{ rigrun }} bench --url http://127.0.0.1:30000 --concurrency {{ concurrency }}
        --duration 2s --input-len 32 --output-len 64
      timeout: 1m
"#;

#[test]
fn telemetry_gpu_samples_through_ssh_are_clipped_to_each_window_and_judge_the_cell() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = dir.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("nvidia-smi");
    std::fs::write(&tool, FAKE_NVIDIA_SMI).unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let key = ClientKey::new(dir);
    let ns = Netns::new();
    let path = format!("SetEnv PATH={}:/usr/local/bin:/usr/bin:/bin\n", bin.display());
    let host = Sshd::start_in_with(dir, "h1", &key, &ns, &|c| c + &path);
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, host.known_hosts_line()).unwrap();
    let entry = host.inventory_entry("h1", &key, &known_hosts, &dir.join("w1"), "");
    std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{entry}")).unwrap();
    std::fs::write(dir.join("t.yaml"), PLAYBOOK).unwrap();

    let out = run_rigrun(dir, &["run", "t.yaml", "--runs-dir", "runs", "-q"]);
    let (stdout, stderr) = text(&out);
    // The records are invalid (GPU 1 is power-capped), which is not a failed run.
    assert!(out.status.success(), "rigrun failed:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("nvidia-smi printed a line that is not a sample") && stderr.contains("h1"),
        "the unreadable line is said, naming the host:\n{stderr}"
    );
    let run_dir = only_run_dir(&dir.join("runs"));
    let recs = records(&run_dir);
    let measured: Vec<&Value> = recs.iter().filter(|r| r["status"] == "ok").collect();
    assert_eq!(measured.len(), 2, "{recs:#?}");
    for r in &measured {
        let m = &r["metrics"];
        let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {m:#}"));
        // Two GPUs at 100 or 150 W each: the 999 W samples of an hour ago are outside.
        assert!(
            f("gpu_power_peak_w") <= 300.0 && f("gpu_power_peak_w") >= 200.0,
            "{m:#}"
        );
        assert!((200.0..=300.0).contains(&f("gpu_power_mean_w")), "{m:#}");
        assert!(f("gpu_samples") >= 4.0, "{m:#}");
        assert_eq!(m["gpu_energy_window"], "steady_state", "{m:#}");
        let window = f("steady_state_end_unix") - f("steady_state_start_unix");
        assert!(
            (f("gpu_energy_j") - f("gpu_power_mean_w") * window).abs() < 1.0,
            "{m:#}"
        );
        let tokens = f("steady_state_output_throughput") * f("steady_state_duration");
        assert!(
            (f("joules_per_output_token") - f("gpu_energy_j") / tokens).abs() < 1e-3,
            "{m:#}"
        );
        assert!((f("output_tokens_per_joule") * f("joules_per_output_token") - 1.0).abs() < 1e-3);
        assert_eq!(m["gpu_temperature_peak_c"], 71.0, "{m:#}");
        assert_eq!(m["gpu_throttle_reasons"], "gpu1:sw_power_cap", "{m:#}");
        assert_eq!(m["valid"], false, "{m:#}");
        let problems = m["problems"].to_string();
        assert!(
            problems.contains("gpu_throttle_reasons = gpu1:sw_power_cap"),
            "{problems}"
        );
        // The sim's vLLM names, scraped through the SSH forward before, during and after.
        assert!(f("server_scrapes") >= 3.0, "{m:#}");
        assert!(f("server_running_peak") >= 1.0, "{m:#}");
        assert!(f("server_generation_tokens") >= f("total_output_tokens"), "{m:#}");
    }
    // Each point's samples beside its logs: inside the point, none of the stale ones.
    let step_dir = run_dir.join("hosts/h1/03-run-sweep");
    for point in ["001-concurrency=1", "002-concurrency=2"] {
        let file = step_dir.join(format!("{point}.telemetry.jsonl"));
        let body = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let lines: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let gpu: Vec<&Value> = lines.iter().filter(|l| l["source"] == "gpu").collect();
        assert!(gpu.len() >= 8, "{body}");
        assert!(gpu.iter().all(|l| l["sample"]["power_w"] != 999.0), "{body}");
        assert!(lines.iter().any(|l| l["source"] == "server"), "{body}");
    }
    // Every scrape is kept for the sweep, those of each point among them.
    let scrapes = std::fs::read_to_string(step_dir.join("server-scrapes.jsonl")).unwrap();
    let in_points: f64 = measured
        .iter()
        .map(|r| r["metrics"]["server_scrapes"].as_f64().unwrap())
        .sum();
    assert!(scrapes.lines().count() as f64 >= in_points, "{scrapes}");
    let raw = std::fs::read_to_string(step_dir.join("gpu-samples.log")).unwrap();
    assert!(
        raw.contains("999.00"),
        "the raw log keeps every line nvidia-smi printed"
    );
    let details = &manifest(&run_dir)["hosts"]["h1"]["steps"][2]["details"]["telemetry"];
    assert_eq!(details["gpu"]["source"], "nvidia-smi", "{details:#}");
    assert_eq!(details["gpu"]["unreadable_lines"], 1, "{details:#}");
    assert_eq!(details["server"]["server"], "vLLM", "{details:#}");
    // The sampler is stopped with the sweep: no nvidia-smi left in the host's namespace.
    assert!(
        ns.processes("nvidia-smi").is_empty(),
        "{:?}",
        ns.processes("nvidia-smi")
    );
}
