//! Telemetry against `rigrun sim` on local hosts: the sim's state read under vLLM's and SGLang's
//! names, a point that overflows the sim's KV cache flagged for preemptions, and the demo's
//! simulated DCGM telemetry giving energy per output token for both hosts in show and report.

use std::path::Path;

use crate::common::*;
use serde_json::Value;

/// A toy server whose KV cache holds a few requests' prompts but not their outputs, handed
/// out on demand as vLLM does: C=8 × (64 + 128) tokens overflows 600, C=1 does not.
const OVERFLOWING: &str = "model: rigrun/overflow\ndescription: KV cache too small for C=8\n\
max_model_len: 512\nmax_running_requests: 16\nkv_capacity_tokens: 600\nkv_policy: on_demand\n\
prefill: {tokens_per_second: 200000, chunk_tokens: 2048}\n\
decode: {batch_ms: [[1, 2.0], [16, 3.0]], attention_ms: [[0, 0.0], [600, 0.1]]}\n\
natural_length: {min: 8, max: 256}\n";

const SWEEP: &str = r#"
name: overflow
steps:
  - start-server:
      command: "{{ rigrun }} sim --profile {{ profile }} --port {{ port }} --metrics-names {{ names }}"
      url: "http://127.0.0.1:{{ port }}"
  - verify-server: {url: "http://127.0.0.1:{{ port }}"}
  - run-sweep:
      matrix: {concurrency: [1, 8]}
      command: >-
        {{ rigrun }} bench --url http://127.0.0.1:{{ port }} --concurrency {{ concurrency }}
        --input-len 64 --output-len 128 --num-requests {{ concurrency * 5 }}
      timeout: 1m
"#;

#[test]
fn telemetry_flags_a_point_that_overflows_the_sims_kv_cache_in_vllm_and_sglang_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("overflow.yaml"), OVERFLOWING).unwrap();
    let host = |name: &str, names: &str| {
        format!(
            "  {name}:\n    connection: local\n    workdir: {}\n    vars: {{port: {}, names: {names}, profile: {}}}\n",
            dir.join(name).display(),
            free_port(),
            dir.join("overflow.yaml").display()
        )
    };
    let inventory = format!("hosts:\n{}{}", host("vllm", "vllm"), host("sglang", "sglang"));
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
    std::fs::write(dir.join("sweep.yaml"), SWEEP).unwrap();
    let out = run_rigrun(dir, &["run", "sweep.yaml", "--runs-dir", "runs", "-q"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let run_dir = only_run_dir(&dir.join("runs"));
    let recs = records(&run_dir);
    for (host, server) in [("vllm", "vLLM"), ("sglang", "SGLang")] {
        let at = |c: u64| {
            recs.iter()
                .find(|r| r["host"] == host && r["point"]["concurrency"] == c && r["status"] == "ok")
                .unwrap_or_else(|| panic!("{host} C={c}: {recs:#?}"))
        };
        let (small, big) = (&at(1)["metrics"], &at(8)["metrics"]);
        assert!(
            big["server_preemptions"].as_f64().unwrap() >= 1.0,
            "{host}: {big:#}"
        );
        assert_eq!(big["valid"], false, "{host}: {big:#}");
        let problems = big["problems"].to_string();
        assert!(problems.contains("server_preemptions = "), "{host}: {problems}");
        assert_eq!(small["server_preemptions"], 0.0, "{host}: {small:#}");
        assert!(
            !small["problems"].to_string().contains("server_preemptions"),
            "{small:#}"
        );
        assert!(
            big["server_kv_cache_usage_peak"].as_f64().unwrap() <= 1.0,
            "{big:#}"
        );
        let details = &manifest(&run_dir)["hosts"][host]["steps"][2]["details"]["telemetry"];
        assert_eq!(details["server"]["server"], server, "{details:#}");
    }
}

/// The demo's inventory with free ports and a workdir in `dir`, so the test runs beside others.
fn demo_inventory(dir: &Path) -> std::path::PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut inventory = std::fs::read_to_string(repo.join("playbooks/demo-hosts.yaml")).unwrap();
    for port in ["31001", "31002"] {
        inventory = inventory.replace(port, &free_port().to_string());
    }
    inventory = inventory.replace("~/.rigrun/demo", &dir.join("demo").display().to_string());
    let path = dir.join("demo-hosts.yaml");
    std::fs::write(&path, inventory).unwrap();
    path
}

#[test]
fn telemetry_the_demo_shows_energy_per_output_token_for_both_hosts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inventory = demo_inventory(dir);
    let playbook = repo.join("playbooks/demo.yaml");
    let args = [
        "run",
        playbook.to_str().unwrap(),
        "-i",
        inventory.to_str().unwrap(),
    ];
    let out = run_rigrun(dir, &[&args[..], &["--runs-dir", "runs", "-q"]].concat());
    assert!(out.status.success(), "{:?}", text(&out));
    let run_dir = only_run_dir(&dir.join("runs"));
    let run = run_dir.to_str().unwrap();
    let shown = run_rigrun(
        dir,
        &[
            "show",
            run,
            "--metric",
            "output_tokens_per_joule",
            "--format",
            "csv",
        ],
    );
    let (csv, stderr) = text(&shown);
    assert!(shown.status.success(), "{stderr}");
    for host in ["blackwell", "a6000"] {
        let sweep: Vec<Value> = records(&run_dir)
            .into_iter()
            .filter(|r| r["host"] == host && r["step"] == "run-sweep" && r["status"] == "ok")
            .collect();
        assert!(sweep.len() >= 4, "{host}: {sweep:#?}");
        for r in &sweep {
            energy_and_tokens_share_the_benchmarks_window(&run_dir, host, r);
        }
    }
    // The GPUs the DCGM exporter describes are facts of the host: as many as the profile has.
    for (host, profile) in [
        ("blackwell", "blackwell-8x-rtxpro6000-qwen3.5-397b-nvfp4"),
        ("a6000", "a6000-qwen3.6-27b"),
    ] {
        let source = std::fs::read_to_string(repo.join(format!("profiles/{profile}.yaml"))).unwrap();
        let gpu = source.split("\ngpu:").nth(1).unwrap();
        let line = |key: &str| {
            let at = gpu.find(&format!("\n  {key}: ")).unwrap() + key.len() + 5;
            gpu[at..]
                .lines()
                .next()
                .unwrap()
                .trim()
                .trim_matches('"')
                .to_string()
        };
        let facts = &manifest(&run_dir)["hosts"][host]["facts"];
        let count: usize = line("count").parse().unwrap();
        assert_eq!(
            facts["gpus"].as_array().unwrap().len(),
            count,
            "{host}: {facts:#}"
        );
        assert_eq!(facts["gpus"][0]["name"], line("name"), "{host}: {facts:#}");
        assert!(facts["gpu_source"]
            .as_str()
            .unwrap()
            .starts_with("DCGM exporter http://"));
    }
    let (shown, _) = text(&run_rigrun(dir, &["show", run]));
    assert!(
        shown.contains("  GPUs: 8× NVIDIA RTX PRO 6000") && !shown.contains("none found"),
        "{shown}"
    );
    // The model's card limits: 8 × 600 W and 1 × 300 W are never exceeded.
    let peak = |host: &str| {
        records(&run_dir)
            .iter()
            .filter(|r| r["host"] == host)
            .filter_map(|r| r["metrics"]["gpu_power_peak_w"].as_f64())
            .fold(0.0, f64::max)
    };
    assert!(peak("blackwell") > 8.0 * 80.0 && peak("blackwell") < 8.0 * 600.0);
    assert!(peak("a6000") > 25.0 && peak("a6000") < 300.0);
    // `show --metric output_tokens_per_joule` has a measured cell per host and point.
    for host in ["blackwell", "a6000"] {
        let cells = csv
            .lines()
            .filter(|l| l.contains(",output_tokens_per_joule,") && l.contains(&format!(",{host},")))
            .filter(|l| l.ends_with(",ok,"))
            .count();
        assert!(cells >= 4, "{host}:\n{csv}");
    }
    let html = dir.join("report.html");
    let out = run_rigrun(dir, &["report", run, "--out", html.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    let html = std::fs::read_to_string(html).unwrap();
    let energy = html
        .split("data-chart=\"energy\"")
        .nth(1)
        .expect("the report has the energy-per-token chart");
    let energy = energy.split("</svg>").next().unwrap();
    for host in ["blackwell", "a6000"] {
        assert!(
            energy.contains(&format!("data-series=\"{host}\"")),
            "{host}: {energy}"
        );
    }
    assert!(html.contains("data-chart=\"power\"") && html.contains("data-chart=\"utilisation\""));
}

/// Energy per token is the GPUs' mean power over the benchmark's measured window divided by
/// its throughput over the same window: the power is worked out here from the point's raw
/// samples (its telemetry.jsonl), not read from the record.
fn energy_and_tokens_share_the_benchmarks_window(run_dir: &Path, host: &str, record: &Value) {
    let m = &record["metrics"];
    let get = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{host}: no {k} in {m:#}"));
    assert_eq!(m["gpu_energy_window"], "measured", "{host}: {m:#}");
    let (start, end) = (get("measure_start_unix"), get("measure_end_unix"));
    let within = |a: f64, b: f64| (a / b - 1.0).abs() < 0.03;
    assert!(within(end - start, get("duration")), "{host}: {m:#}");
    let label = format!("concurrency={}", record["point"]["concurrency"]);
    let dir = run_dir.join("hosts").join(host).join("04-run-sweep");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.to_string_lossy()
                .ends_with(&format!("-{label}.telemetry.jsonl"))
        })
        .unwrap_or_else(|| panic!("{host} {label}: no telemetry file in {}", dir.display()));
    // The host's power at each sampled moment inside the window: the sum over its GPUs.
    let mut moments: std::collections::BTreeMap<i64, f64> = Default::default();
    for line in std::fs::read_to_string(&file).unwrap().lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let sample = &line["sample"];
        let t = sample["t"].as_f64().unwrap_or(f64::NAN);
        if line["source"] == "gpu" && t >= start && t <= end {
            *moments.entry((t * 1000.0).round() as i64).or_default() += sample["power_w"].as_f64().unwrap();
        }
    }
    assert!(!moments.is_empty(), "{host} {label}: no GPU sample in the window");
    let mean_power = moments.values().sum::<f64>() / moments.len() as f64;
    let expected = mean_power / get("output_throughput");
    let joules = get("joules_per_output_token");
    assert!(
        within(joules, expected),
        "{host} {label}: {joules} J/token, but {mean_power:.1} W / {} tok/s = {expected:.4}",
        get("output_throughput")
    );
}

#[test]
fn telemetry_a_server_without_metrics_is_said_once_and_the_sweep_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A plain file server that lists a model and has no /metrics.
    std::fs::create_dir_all(dir.join("site/v1")).unwrap();
    std::fs::write(
        dir.join("site/v1/models"),
        r#"{"object": "list", "data": [{"id": "m", "object": "model"}]}"#,
    )
    .unwrap();
    let port = free_port();
    let site = dir.join("site");
    one_local_host(dir, "", &format!("port: {port}, site: {}", site.display()));
    let playbook = r#"
name: no-metrics
steps:
  - start-server:
      command: "python3 -m http.server {{ port }} --bind 127.0.0.1 --directory {{ site }}"
      url: "http://127.0.0.1:{{ port }}"
  - verify-server: {url: "http://127.0.0.1:{{ port }}"}
  - run-sweep:
      matrix: {concurrency: [1, 2]}
      command: "echo '{\"output_throughput\": {{ concurrency }}}'"
"#;
    std::fs::write(dir.join("p.yaml"), playbook).unwrap();
    let out = run_rigrun(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let run_dir = only_run_dir(&dir.join("runs"));
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let said: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "warning" && e["message"].to_string().contains("no server telemetry"))
        .collect();
    assert_eq!(said.len(), 1, "once for the sweep, not per point: {said:#?}");
    let message = said[0]["message"].as_str().unwrap();
    assert!(
        message.contains("HTTP 404") && message.contains("/metrics"),
        "{message}"
    );
    assert!(stderr.contains(message), "shown: {stderr}");
    let recs = records(&run_dir);
    let sweep: Vec<&Value> = recs.iter().filter(|r| r["step"] == "run-sweep").collect();
    assert_eq!(sweep.len(), 2, "{recs:#?}");
    for r in sweep {
        assert_eq!(r["status"], "ok", "{r}");
        let names: Vec<&String> = r["metrics"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["output_throughput"], "nothing added: {r}");
    }
}

/// A benchmark that prints no window of its own: the GPU energy over the whole point is kept,
/// and energy per token is said to be unknown, with the reason, in the record and the table.
#[test]
fn telemetry_without_the_benchmarks_window_energy_per_token_is_unknown_and_said() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = free_port();
    let exporter = format!("    dcgm_exporter: http://127.0.0.1:{port}/dcgm-exporter/metrics\n");
    one_local_host(dir, &exporter, &format!("port: {port}"));
    // The command's second is its whole work: a point long enough for the 333 ms sampler.
    let playbook = r#"
name: no-window
steps:
  - start-server:
      command: "{{ rigrun }} sim --profile a6000-qwen3.6-27b --port {{ port }}"
      url: "http://127.0.0.1:{{ port }}"
  - run-sweep:
      matrix: {concurrency: [1]}
      command: "sleep 1; echo '{\"total_output_tokens\": 100, \"output_throughput\": 100}'"
"#;
    std::fs::write(dir.join("p.yaml"), playbook).unwrap();
    let out = run_rigrun(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let run_dir = only_run_dir(&dir.join("runs"));
    let recs = records(&run_dir);
    let m = &recs.iter().find(|r| r["step"] == "run-sweep").unwrap()["metrics"];
    assert_eq!(m["gpu_energy_window"], "point", "{m:#}");
    assert!(m["gpu_energy_j"].as_f64().unwrap() > 0.0, "{m:#}");
    assert!(m.get("joules_per_output_token").is_none(), "{m:#}");
    let why = m["unknown_metrics"]["joules_per_output_token"].as_str().unwrap();
    assert!(why.contains("no measured window"), "{why}");
    let run = run_dir.to_str().unwrap();
    let shown = run_rigrun(dir, &["show", run, "--metric", "joules_per_output_token"]);
    let (table, stderr) = text(&shown);
    assert!(shown.status.success(), "{stderr}");
    assert!(table.contains("unknown [1]"), "{table}");
    assert!(
        table.contains("[1] unknown: the benchmark reported no measured window"),
        "{table}"
    );
    let csv = run_rigrun(
        dir,
        &[
            "show",
            run,
            "--metric",
            "joules_per_output_token",
            "--format",
            "csv",
        ],
    );
    assert!(text(&csv).0.contains(",unknown,"), "{:?}", text(&csv));
}
