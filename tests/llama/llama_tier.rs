//! The real-server tier: the same paths as the sim tests, against llama.cpp's `llama-server`
//! serving SmolLM2-135M on loopback, so that our parsing is proven against a real server's replies
//! (`/v1/models` shape, usage counts, SSE framing, error bodies), and `rigrun bench` is checked
//! against the server's own Prometheus counters. llama.cpp's server closes the connection after
//! every streamed response (its head says keep-alive), so it also proves that the client loses
//! no request on such connections. `tests/llama/prepare.sh` builds the server once per machine;
//! when it cannot, these tests fail loudly.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
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
        .args([
            "--port",
            &port.to_string(),
            "-t",
            "1",
            "-c",
            "4096",
            "-np",
            "2",
            "--metrics",
        ])
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

/// The server's Prometheus counters (`llamacpp:*`), by name.
fn counters(port: u16) -> std::collections::HashMap<String, f64> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    let (_, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
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

/// `rigrun bench` at one level, its warm-up off so that the server's counters cover exactly the
/// measured requests; returns the JSON line and the counters' changes.
fn bench_level(port: u16, concurrency: u32, extra: &[&str]) -> (Value, impl Fn(&str) -> f64) {
    let before = counters(port);
    let out = rigrun()
        .args([
            "bench",
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "--model",
            ALIAS,
        ])
        .args(["--concurrency", &concurrency.to_string(), "--warmup", "0"])
        .args(["--input-len", "128", "--output-len", "32", "--num-requests", "10"])
        .args(extra)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{extra:?} C={concurrency}:\n{stdout}\n{stderr}"
    );
    let after = counters(port);
    let delta = move |name: &str| after[name] - before[name];
    (serde_json::from_str(stdout.trim()).unwrap(), delta)
}

#[test]
fn rigrun_bench_measures_the_real_server_as_its_own_counters_do() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start_server(tmp.path());
    for api in ["completions", "chat"] {
        for stream in [true, false] {
            // C=2 is the server's `-np 2`: both slots busy.
            for concurrency in [1, 2] {
                let mut extra = vec!["--api", api];
                if !stream {
                    extra.push("--no-stream");
                }
                let (m, delta) = bench_level(server.port, concurrency, &extra);
                let case = format!("{api} stream={stream} C={concurrency}: {m}");
                assert_eq!(
                    (m["completed"].as_u64(), m["failed"].as_u64()),
                    (Some(10), Some(0)),
                    "{case}"
                );
                assert_eq!(m["valid"], true, "{case}");
                // Token counts come from the server's usage and agree with its counters.
                assert_eq!(m["total_output_tokens"], 10 * 32, "{case}");
                assert_eq!(delta("llamacpp:tokens_predicted_total"), 320.0, "{case}");
                let prompt =
                    delta("llamacpp:prompt_tokens_total") + delta("llamacpp:prompt_tokens_cached_total");
                assert_eq!(m["total_input_tokens"].as_f64(), Some(prompt), "{case}");
                if api == "completions" {
                    assert_eq!(m["total_input_tokens"], 10 * 128, "{case}");
                }
                if stream {
                    // The server times generation from its first token on but divides by every
                    // predicted token; TPOT divides the same span by the tokens after the first.
                    let seconds = delta("llamacpp:tokens_predicted_seconds_total");
                    let server_tpot = seconds * 1e3 / (320.0 - 10.0);
                    let tpot = m["mean_tpot_ms"].as_f64().unwrap();
                    let off = tpot / server_tpot - 1.0;
                    assert!(
                        off.abs() < 0.03,
                        "TPOT {tpot} ms against the server's {server_tpot} ms ({off:+.3}): {case}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_native_sweep_playbook_measures_the_real_server_through_sshd() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let server = start_server(dir);
    let key = ClientKey::new(dir);
    let sshd = Sshd::start(dir, "cpu", &key);
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let host_vars = format!("    vars: {{model: {ALIAS}, kv_capacity_tokens: 400}}\n");
    let inventory = format!(
        "vars: {{server_url: \"http://127.0.0.1:{}\"}}\nhosts:\n{}groups:\n  gpu: [cpu]\n",
        server.port,
        sshd.inventory_entry("cpu", &key, &known_hosts, &dir.join("work"), &host_vars)
    );
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
    let playbook = Path::new(env!("CARGO_MANIFEST_DIR")).join("playbooks/throughput-sweep-native.yaml");
    let out = run_rigrun(
        dir,
        &["run", playbook.to_str().unwrap(), "--runs-dir", "runs"]
            .into_iter()
            .chain(["-e", "input_len=64", "-e", "output_len=16"])
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{:?}", text(&out));
    let recs = records(&only_run_dir(&dir.join("runs")));
    for c in [1u64, 4] {
        let rec = recs
            .iter()
            .find(|r| r["step"] == "run-sweep" && r["point"]["concurrency"] == c)
            .unwrap_or_else(|| panic!("no record for C={c}"));
        let m = &rec["metrics"];
        assert_eq!(rec["status"], "ok", "{rec}");
        assert_eq!(
            (m["completed"].as_u64(), m["failed"].as_u64()),
            (Some(5 * c), Some(0)),
            "{m}"
        );
        assert_eq!(m["total_output_tokens"], 5 * c * 16, "{m}");
    }
    // 64 + 16 tokens per request against a KV capacity of 400: C=16 and beyond are skipped.
    let skipped = recs
        .iter()
        .filter(|r| r["step"] == "run-sweep" && r["status"] == "skipped")
        .count();
    assert_eq!(skipped, 7);
}

#[test]
fn telemetry_reads_the_real_servers_metrics_per_point_and_its_deltas_match_the_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start_server(tmp.path());
    local_inventory(tmp.path(), server.port);
    std::fs::write(
        tmp.path().join("sweep.yaml"),
        "name: llama-telemetry\nsteps:\n  - verify-server: {url: \"{{ url }}\"}\n  - run-sweep:\n      \
         matrix: {concurrency: [1, 2]}\n      command: \"{{ rigrun }} bench --url {{ url }} --concurrency \
         {{ concurrency }} --input-len 128 --output-len 32 --num-requests 10\"\n",
    )
    .unwrap();
    let before = counters(server.port);
    let out = run_rigrun(tmp.path(), &["run", "sweep.yaml", "--runs-dir", "runs", "-q"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let after = counters(server.port);
    let run_dir = only_run_dir(&tmp.path().join("runs"));
    let recs = records(&run_dir);
    let sweep: Vec<&Value> = recs.iter().filter(|r| r["step"] == "run-sweep").collect();
    assert_eq!(sweep.len(), 2, "{recs:#?}");
    let mut generated = 0.0;
    for r in &sweep {
        let m = &r["metrics"];
        let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {m:#}"));
        // What the server counted between the scrape before the point and the one at its
        // record is exactly what the point asked for: its C warm-up requests and 10 measured.
        let asked = f("warmup") + 10.0;
        assert_eq!(f("server_generation_tokens"), asked * 32.0, "{m:#}");
        assert_eq!(f("total_output_tokens"), 10.0 * 32.0, "{m:#}");
        assert!(f("server_prompt_tokens") <= f("total_input_tokens"), "{m:#}");
        assert!(f("server_scrapes") >= 2.0, "{m:#}");
        let c = r["point"]["concurrency"].as_f64().unwrap();
        assert!(f("server_running_peak") <= c, "{m:#}");
        assert!(
            m.get("server_preemptions").is_none(),
            "llama.cpp does not count them: {m:#}"
        );
        assert_eq!(m["valid"], true, "{m:#}");
        generated += f("server_generation_tokens");
    }
    let name = "llamacpp:tokens_predicted_total";
    assert_eq!(
        after[name] - before[name],
        generated,
        "the points' deltas add up to the server's"
    );
    let details = &manifest(&run_dir)["hosts"]["cpu"]["steps"][1]["details"]["telemetry"];
    assert_eq!(details["server"]["server"], "llama.cpp", "{details:#}");
    assert_eq!(
        details["gpu"], "absent: the host has no nvidia-smi (and no dcgm_exporter)",
        "{details:#}"
    );
    let samples = run_dir.join("hosts/cpu/02-run-sweep/002-concurrency=2.telemetry.jsonl");
    let body = std::fs::read_to_string(&samples).unwrap();
    assert!(
        body.lines().all(|l| l.contains("\"source\":\"server\"")),
        "{body}"
    );
}

/// `--workload text` against llama.cpp's own tokenizer: every passage is cut to exactly 128
/// tokens through its `POST /tokenize` (llama.cpp's form), and its usage and its counters agree.
#[test]
fn text_prompts_are_cut_exactly_with_llama_cpps_tokenizer() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start_server(tmp.path());
    let (m, delta) = bench_level(server.port, 2, &["--workload", "text", "--seed", "9"]);
    assert_eq!(m["tokenizer"], "server POST /tokenize (llama.cpp form)", "{m}");
    assert_eq!(m["valid"], true, "{m}");
    assert_eq!(
        (
            m["prompt_tokens_checked"].as_u64(),
            m["prompt_tokens_mismatched"].as_u64()
        ),
        (Some(10), Some(0)),
        "{m}"
    );
    assert_eq!(m["total_input_tokens"], 10 * 128, "{m}");
    let prompt = delta("llamacpp:prompt_tokens_total") + delta("llamacpp:prompt_tokens_cached_total");
    assert_eq!(prompt, 1280.0, "{m}");
}
