//! The real-server tier: the same paths as the sim tests, against llama.cpp's `llama-server`
//! serving SmolLM2-135M on loopback, so that our parsing is proven against a real server's replies
//! (`/v1/models` shape, usage counts, SSE framing, error bodies). `tests/llama/prepare.sh` builds
//! the server once per machine; when it cannot, these tests fail loudly.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const ALIAS: &str = "smollm2";

struct LlamaServer {
    port: u16,
    child: Child,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server binary and model, prepared (or found in the cache) by `tests/llama/prepare.sh`.
fn prepared() -> (PathBuf, PathBuf) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/llama/prepare.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("cannot run tests/llama/prepare.sh");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "the llama.cpp tier could not be prepared:\n{stdout}\n{stderr}"
    );
    let value = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("prepare.sh printed no {key}=: {stdout}"))
    };
    (value("SERVER"), value("MODEL"))
}

fn start_server(dir: &Path) -> LlamaServer {
    let (server, model) = prepared();
    let port = free_port();
    let log = std::fs::File::create(dir.join("llama-server.log")).unwrap();
    let child = Command::new(server)
        .args([
            "-m",
            model.to_str().unwrap(),
            "--alias",
            ALIAS,
            "--host",
            "127.0.0.1",
        ])
        .args(["--port", &port.to_string(), "-t", "1", "-c", "4096", "-np", "2"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("cannot start llama-server");
    let mut server = LlamaServer { port, child };
    wait_healthy(&mut server, dir);
    server
}

/// Polls `/health` until the model is loaded (bounded; the server's own log on failure).
fn wait_healthy(server: &mut LlamaServer, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "llama-server exited ({status}): {}",
                std::fs::read_to_string(dir.join("llama-server.log")).unwrap()
            );
        }
        let probe = Command::new("python3")
            .args([
                "-c",
                "import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)",
            ])
            .arg(format!("http://127.0.0.1:{}/health", server.port))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if probe.success() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("llama-server did not become healthy within 120 s");
}

fn local_inventory(dir: &Path, port: u16) {
    let inventory = format!(
        "hosts:\n  cpu:\n    connection: local\n    workdir: {}\n    labels: {{gpu: none, model: SmolLM2-135M}}\n    vars: {{url: \"http://127.0.0.1:{port}\"}}\n",
        dir.join("work").display()
    );
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
}

#[test]
fn verify_server_reads_a_real_model_list_and_smoke_tests_it() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start_server(tmp.path());
    local_inventory(tmp.path(), server.port);
    std::fs::write(
        tmp.path().join("verify.yaml"),
        format!("name: verify\nsteps:\n  - verify-server: {{url: \"{{{{ url }}}}\", model: {ALIAS}, smoke: true}}\n"),
    )
    .unwrap();
    let out = run_rigrun(tmp.path(), &["run", "verify.yaml", "--runs-dir", "runs"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let manifest = manifest(&only_run_dir(&tmp.path().join("runs")));
    let details = &manifest["hosts"]["cpu"]["steps"][0]["details"];
    assert_eq!(details["models"], serde_json::json!([ALIAS]));
    assert!(
        details["smoke"]["completion_tokens"].as_u64().unwrap() > 0,
        "{details}"
    );

    // A model the server does not serve: the error lists what it serves.
    std::fs::write(
        tmp.path().join("wrong.yaml"),
        "name: wrong\nsteps:\n  - verify-server: {url: \"{{ url }}\", model: Qwen/Qwen3.6-27B}\n",
    )
    .unwrap();
    let out = run_rigrun(tmp.path(), &["run", "wrong.yaml", "--runs-dir", "runs"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out)
        .1
        .contains(&format!("is not served at http://127.0.0.1:{}", server.port)));
    assert!(
        text(&out).1.contains(&format!("it serves: {ALIAS}")),
        "{:?}",
        text(&out)
    );
}

/// Runs the shipped benchmark script against the server and returns its one JSON line.
fn bench_script(port: u16, extra: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_throughput.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--url", &format!("http://127.0.0.1:{port}"), "--concurrency", "2"])
        .args(["--input-len", "32", "--output-len", "8", "--num-requests", "4"])
        .args(extra)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "bench_throughput.py failed:\n{stdout}\n{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line per level: {stdout}");
    serde_json::from_str(lines[0]).unwrap()
}

#[test]
fn the_benchmark_script_counts_real_usage_streamed_and_not() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start_server(tmp.path());
    for stream in [false, true] {
        let extra: &[&str] = if stream { &["--stream"] } else { &[] };
        let m = bench_script(server.port, extra);
        assert_eq!(m["model"], ALIAS);
        assert_eq!(m["completed"], 4, "{m}");
        assert_eq!(m["failed"], 0, "{m}");
        assert_eq!(
            m["total_output_tokens"],
            4 * 8,
            "ignore_eos honoured and usage counted: {m}"
        );
        assert_eq!(m["total_input_tokens"], 4 * 32, "{m}");
        assert!(m["output_throughput"].as_f64().unwrap() > 0.0);
        if stream {
            let ttft = m["median_ttft_ms"].as_f64().unwrap();
            let e2e = m["median_e2el_ms"].as_f64().unwrap();
            assert!(ttft > 0.0 && ttft <= e2e, "TTFT {ttft} within E2E {e2e}: {m}");
            assert!(m["median_itl_ms"].as_f64().unwrap() > 0.0, "{m}");
        }
    }
}

#[test]
fn a_small_playbook_sweeps_the_real_server() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start_server(tmp.path());
    local_inventory(tmp.path(), server.port);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_throughput.py");
    std::fs::write(
        tmp.path().join("sweep.yaml"),
        format!(
            "name: llama\nsteps:\n  - verify-server: {{url: \"{{{{ url }}}}\"}}\n  - copy-script: {{src: {}, dest: \"{{{{ workdir }}}}/bench.py\"}}\n  - run-sweep:\n      matrix: {{concurrency: [1, 2]}}\n      command: python3 {{{{ workdir }}}}/bench.py --url {{{{ url }}}} --concurrency {{{{ concurrency }}}} --input-len 16 --output-len 4 --num-requests 2 --stream --out-dir {{{{ workdir }}}}/results/{{{{ run_id }}}}\n  - fetch-results: {{src: \"{{{{ workdir }}}}/results/{{{{ run_id }}}}/*.json\"}}\n",
            script.display()
        ),
    )
    .unwrap();
    let out = run_rigrun(tmp.path(), &["run", "sweep.yaml", "--runs-dir", "runs"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let recs = records(&only_run_dir(&tmp.path().join("runs")));
    let sweep: Vec<&Value> = recs.iter().filter(|r| r["step"] == "run-sweep").collect();
    assert_eq!(sweep.len(), 2);
    for r in sweep {
        assert_eq!(r["status"], "ok");
        assert_eq!(r["metrics"]["total_output_tokens"], 2 * 4, "{r}");
    }
    assert_eq!(recs.iter().filter(|r| r["step"] == "fetch-results").count(), 2);
}

#[test]
fn error_bodies_from_the_real_server_reach_the_user() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start_server(tmp.path());
    // Input + output beyond the context: the server refuses, the script reports the status and body.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_throughput.py");
    let out = Command::new("python3")
        .arg(script)
        .args([
            "--url",
            &format!("http://127.0.0.1:{}", server.port),
            "--concurrency",
            "1",
        ])
        .args(["--input-len", "5000", "--output-len", "4", "--num-requests", "1"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "no request completed: {stdout}\n{stderr}"
    );
    let m: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(m["completed"], 0);
    let errors = m["errors"].as_object().unwrap();
    assert!(
        errors
            .keys()
            .any(|k| k.starts_with("http_4") || k.starts_with("http_5")),
        "{m}"
    );
    assert!(
        stderr.contains("context") || stderr.contains("exceed"),
        "the server's words reach stderr: {stderr}"
    );
}
