//! Host facts on real runs (local hosts): with a stand-in `nvidia-smi` on the PATH that prints
//! output in the shape real nvidia-smi prints (an 8-GPU box without NVLink), without one (recorded
//! as absent, not an error), and the server's own description fetched by verify-server.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{manifest, rigrun, text};
use crate::reporting::rigrun_ok;
use serde_json::json;

const INVENTORY: &str = r#"
hosts:
  box:
    connection: local
    labels: {gpu: "8x RTX PRO 6000 Blackwell"}
"#;

const PLAYBOOK: &str = r#"
name: facts
steps:
  - run-sweep:
      matrix: {concurrency: [1, 2]}
      command: >-
        echo '{"output_throughput": {{ concurrency * 100 }}}'
"#;

/// Answers the two queries rigrun makes like nvidia-smi 575 on a dual-socket PCIe server.
const NVIDIA_SMI: &str = r#"#!/bin/sh
case "$*" in
  *--query-gpu=name,memory.total,driver_version,power.limit*)
    for i in 0 1 2 3 4 5 6 7; do
      echo "NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887 MiB, 575.57.08, 600.00 W"
    done ;;
  "topo -m")
    printf '\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n'
    printf 'GPU0\t X \tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t0-63,128-191\t0\t\tN/A\n'
    printf 'GPU1\tNODE\t X \tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t0-63,128-191\t0\t\tN/A\n'
    printf 'GPU2\tNODE\tNODE\t X \tNODE\tSYS\tSYS\tSYS\tSYS\t0-63,128-191\t0\t\tN/A\n'
    printf 'GPU3\tNODE\tNODE\tNODE\t X \tSYS\tSYS\tSYS\tSYS\t0-63,128-191\t0\t\tN/A\n'
    printf 'GPU4\tSYS\tSYS\tSYS\tSYS\t X \tNODE\tNODE\tNODE\t64-127,192-255\t1\t\tN/A\n'
    printf 'GPU5\tSYS\tSYS\tSYS\tSYS\tNODE\t X \tNODE\tNODE\t64-127,192-255\t1\t\tN/A\n'
    printf 'GPU6\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\t X \tNODE\t64-127,192-255\t1\t\tN/A\n'
    printf 'GPU7\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tNODE\t X \t64-127,192-255\t1\t\tN/A\n'
    printf '\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n'
    printf '  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n'
    printf '  NV#  = Connection traversing a bonded set of # NVLinks\n' ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
"#;

fn setup(playbook: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.yaml"), INVENTORY).unwrap();
    std::fs::write(dir.path().join("sweep.yaml"), playbook).unwrap();
    dir
}

/// Runs the playbook with `path` as the rigrun process's PATH; returns the run directory.
fn run_with_path(dir: &Path, path: &str) -> std::path::PathBuf {
    let out = rigrun()
        .current_dir(dir)
        .env("PATH", path)
        .args(["run", "sweep.yaml", "--runs-dir", "runs", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    crate::common::only_run_dir(&dir.join("runs"))
}

/// This process's PATH without any directory that holds an nvidia-smi.
fn path_without_nvidia_smi() -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<_> = std::env::split_paths(&path)
        .filter(|d| !d.join("nvidia-smi").exists())
        .collect();
    std::env::join_paths(dirs).unwrap().into_string().unwrap()
}

#[test]
fn gpus_and_their_topology_come_from_nvidia_smi() {
    let dir = setup(PLAYBOOK);
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let stand_in = bin.join("nvidia-smi");
    std::fs::write(&stand_in, NVIDIA_SMI).unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), path_without_nvidia_smi());
    let run = run_with_path(dir.path(), &path);

    let facts = &manifest(&run)["hosts"]["box"]["facts"];
    assert_eq!(facts["nvidia_smi"], "present");
    assert_eq!(facts["gpu_count"], 8);
    assert_eq!(
        facts["gpus"][7],
        json!({"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "memory": "97887 MiB", "driver": "575.57.08", "power_limit": "600.00 W"})
    );
    assert_eq!(
        facts["gpu_interconnect"],
        "no NVLink: GPUs talk over PCIe (up to SYS)"
    );
    let topology = facts["gpu_topology"].as_str().unwrap();
    assert!(
        topology.contains("GPU7\tSYS") && !topology.contains("Legend"),
        "{topology}"
    );
    for key in ["hostname", "kernel", "arch", "cpus", "memory_kib"] {
        assert!(!facts[key].is_null(), "{key} missing from {facts}");
    }

    let table = rigrun_ok(&["show", run.to_str().unwrap()], 0);
    assert!(
        table.contains("GPUs: 8× NVIDIA RTX PRO 6000 Blackwell Server Edition (97887 MiB, power limit 600.00 W), driver 575.57.08"),
        "{table}"
    );
    assert!(
        table.contains("GPU links: no NVLink: GPUs talk over PCIe (up to SYS)"),
        "{table}"
    );
    let md = rigrun_ok(&["compare", run.to_str().unwrap(), "--format", "markdown"], 0);
    assert!(
        md.starts_with("- **box: gpu: 8x RTX PRO 6000 Blackwell**\n  - GPUs: 8×"),
        "{md}"
    );
    let html = dir.path().join("r.html");
    rigrun_ok(
        &["report", run.to_str().unwrap(), "-o", html.to_str().unwrap()],
        0,
    );
    let html = std::fs::read_to_string(html).unwrap();
    assert!(html.contains("GPU topology (nvidia-smi topo -m)") && html.contains("GPU7\tSYS"));
}

#[test]
fn a_host_without_nvidia_smi_records_it_as_absent() {
    let dir = setup(PLAYBOOK);
    let run = run_with_path(dir.path(), &path_without_nvidia_smi());
    let facts = &manifest(&run)["hosts"]["box"]["facts"];
    assert_eq!(facts["nvidia_smi"], "absent");
    assert!(facts.get("gpus").is_none() && facts.get("gpu_topology").is_none());
    let table = rigrun_ok(&["show", run.to_str().unwrap()], 0);
    assert!(table.contains("GPUs: none found (nvidia-smi absent)"), "{table}");
}

/// A stand-in SGLang server on loopback: `/v1/models` and `/get_server_info` (fields as SGLang
/// 0.5 reports them), nothing at `/version` or `/props`.
fn sglang_stub() -> u16 {
    use axum::routing::get;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .route(
            "/v1/models",
            get(|| async {
                axum::Json(json!({"object": "list", "data": [{"id": "Qwen/Qwen3.6-27B", "object": "model", "owned_by": "sglang", "max_model_len": 262144}]}))
            }),
        )
        .route(
            "/get_server_info",
            get(|| async {
                axum::Json(json!({
                    "model_path": "Qwen/Qwen3.6-27B", "served_model_name": "Qwen/Qwen3.6-27B",
                    "tp_size": 2, "dp_size": 1, "context_length": null, "kv_cache_dtype": "auto",
                    "quantization": null, "mem_fraction_static": 0.88, "max_running_requests": 256,
                    "chunked_prefill_size": 8192, "attention_backend": "flashinfer",
                    "internal_states": [{"last_gen_throughput": 812.3}], "version": "0.5.2"
                }))
            }),
        );
    std::thread::spawn(move || runtime.block_on(async { axum::serve(listener, app).await }));
    port
}

#[test]
fn verify_server_keeps_what_the_server_says_about_itself() {
    let port = sglang_stub();
    let playbook = format!(
        "name: server-facts\nsteps:\n  - verify-server:\n      url: http://127.0.0.1:{port}\n      model: Qwen/Qwen3.6-27B\n{}",
        PLAYBOOK.split_once("steps:\n").unwrap().1
    );
    let dir = setup(&playbook);
    let run = run_with_path(dir.path(), &path_without_nvidia_smi());
    let step = &manifest(&run)["hosts"]["box"]["steps"][0];
    let server = &step["details"]["server_facts"];
    assert_eq!(server["engine"], "sglang");
    assert_eq!(server["version"], "0.5.2");
    assert_eq!(server["launch_args"]["tp_size"], 2);
    assert!(server["launch_args"].get("internal_states").is_none());
    assert_eq!(server["endpoints"]["/get_server_info"], "ok");
    assert!(
        server["endpoints"]["/version"]
            .as_str()
            .unwrap()
            .starts_with("absent (HTTP 404"),
        "{server}"
    );
    let table = rigrun_ok(&["show", run.to_str().unwrap()], 0);
    assert!(
        table.contains("server: sglang 0.5.2, model_path=Qwen/Qwen3.6-27B, tp_size=2, dp_size=1, kv_cache_dtype=auto, max_running_requests=256, mem_fraction_static=0.88, chunked_prefill_size=8192, attention_backend=flashinfer"),
        "{table}"
    );
}
