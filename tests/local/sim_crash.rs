//! `rigrun sim` crashing on purpose, as a real process: `--crash-at-concurrency 4` serves C=2
//! and dies at C=4 with PyTorch's CUDA out-of-memory error on stderr and exit status 1;
//! `--crash-on-kv-overflow` dies with the KV cache's error where it would have preempted, and
//! is refused (exit 2) on a profile that reserves its KV cache.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

/// A sim process whose stderr is kept, line by line, for the test to read.
struct CrashingSim {
    child: Child,
    base: String,
    stderr: mpsc::Receiver<String>,
}

impl CrashingSim {
    /// Starts `rigrun sim --port 0 <args>` and waits for its "serving" line.
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rigrun"))
            .args(["sim", "--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rigrun sim");
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let first = lines.next().expect("a first line").expect("read stderr");
        let base = first
            .split(" on ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("not the serving line: {first}"))
            .to_string();
        let (tx, stderr) = mpsc::channel();
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| drop(tx.send(l))));
        CrashingSim { child, base, stderr }
    }

    /// `n` completions sent at once, each `tokens` long; how many came back 200.
    async fn send_at_once(&self, n: usize, tokens: u32) -> usize {
        let client = crate::sim_support::client();
        let body = json!({"prompt": "hello", "max_tokens": tokens, "ignore_eos": true});
        let url = format!("{}/v1/completions", self.base);
        let requests = (0..n).map(|_| client.post(&url).json(&body).send());
        let replies = futures_util::future::join_all(requests).await;
        replies
            .into_iter()
            .filter(|r| r.as_ref().is_ok_and(|r| r.status() == 200))
            .count()
    }

    /// The process's exit status once it ended, within `deadline`.
    fn exit_within(&mut self, deadline: Duration) -> ExitStatus {
        let until = Instant::now() + deadline;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < until, "the sim still runs after {deadline:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every stderr line after the serving one (the process has ended, so the pipe is closed).
    fn stderr_after_exit(&self) -> Vec<String> {
        self.stderr.iter().collect()
    }
}

impl Drop for CrashingSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn crash_at_concurrency_serves_below_it_and_dies_of_cuda_oom_at_it() {
    let mut sim = CrashingSim::start(&["--profile", "tiny", "--crash-at-concurrency", "4"]);
    for _ in 0..3 {
        assert_eq!(sim.send_at_once(2, 50).await, 2, "C=2 is served");
    }
    assert!(sim.child.try_wait().unwrap().is_none(), "alive after C=2");
    // 200 tokens of 2 ms steps: the four run together long before the first ends.
    let served = sim.send_at_once(4, 200).await;
    assert_eq!(served, 0, "no request of C=4 is answered");
    let status = sim.exit_within(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{status}");
    let stderr = sim.stderr_after_exit();
    let oom = stderr
        .iter()
        .find(|l| l.starts_with("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"))
        .unwrap_or_else(|| panic!("no OOM line in {stderr:#?}"));
    assert!(oom.contains("GPU 0 has a total capacity of"), "{oom}");
    assert!(oom.contains("4 requests running"), "{oom}");
    assert!(stderr.iter().any(|l| l.starts_with("Traceback")), "{stderr:#?}");
}

/// On demand, as vLLM: two requests of 20 + 200 tokens do not fit 300 KV tokens together.
const ON_DEMAND: &str = "model: rigrun/kv\ndescription: small on-demand KV cache\n\
max_model_len: 256\nmax_running_requests: 8\nkv_capacity_tokens: 300\nkv_policy: on_demand\n\
prefill: {tokens_per_second: 200000, chunk_tokens: 2048}\n\
decode: {batch_ms: [[1, 1.0], [8, 1.5]], attention_ms: [[0, 0.0]]}\n\
natural_length: {min: 8, max: 64}\n";

#[tokio::test]
async fn crash_on_kv_overflow_dies_where_it_would_preempt() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("kv.yaml");
    std::fs::write(&profile, ON_DEMAND).unwrap();
    let profile = profile.to_str().unwrap();
    let mut sim = CrashingSim::start(&["--profile", profile, "--crash-on-kv-overflow"]);
    assert_eq!(sim.send_at_once(1, 200).await, 1, "one request fits");
    assert_eq!(sim.send_at_once(2, 200).await, 0);
    let status = sim.exit_within(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{status}");
    let stderr = sim.stderr_after_exit();
    assert!(
        stderr
            .iter()
            .any(|l| l.starts_with("RuntimeError: Decode out of memory.") && l.contains("KV cache full")),
        "{stderr:#?}"
    );
}

#[test]
fn crash_on_kv_overflow_is_refused_for_a_reserving_profile() {
    let out = crate::sim_support::rigrun(&[
        "sim",
        "--profile",
        "tiny",
        "--port",
        "0",
        "--crash-on-kv-overflow",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("kv_policy: on_demand"), "{stderr}");
}
