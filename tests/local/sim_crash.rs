//! `rigrun sim` crashing on purpose, as a real process: `--crash-at-concurrency 4` serves C=2
//! and dies at C=4 with PyTorch's CUDA out-of-memory error on stderr and exit status 1;
//! `--crash-on-kv-overflow` dies with the KV cache's error where it would have preempted, and
//! is refused (exit 2) on a profile that reserves its KV cache.

use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;

use crate::sim_support::{path_str, Sim};

/// A sim started with `args`, and its stderr lines after the "serving" one.
fn start(profile: &str, args: &[&str]) -> (Sim, mpsc::Receiver<String>) {
    let (tx, stderr) = mpsc::channel();
    let keep = Box::new(move |lines: crate::sim_support::StderrLines| {
        lines.map_while(Result::ok).for_each(|l| drop(tx.send(l)));
    });
    (Sim::start_with_stderr(profile, args, keep), stderr)
}

/// `n` completions sent at once, each `tokens` long; how many came back 200.
async fn send_at_once(sim: &Sim, n: usize, tokens: u32) -> usize {
    let body = json!({"prompt": "hello", "max_tokens": tokens, "ignore_eos": true});
    let url = format!("{}/v1/completions", sim.base);
    let requests = (0..n).map(|_| sim.client.post(&url).json(&body).send());
    let replies = futures_util::future::join_all(requests).await;
    replies
        .into_iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status() == 200))
        .count()
}

#[tokio::test]
async fn crash_at_concurrency_serves_below_it_and_dies_of_cuda_oom_at_it() {
    let (mut sim, stderr) = start("tiny", &["--crash-at-concurrency", "4"]);
    for _ in 0..3 {
        assert_eq!(send_at_once(&sim, 2, 50).await, 2, "C=2 is served");
    }
    assert!(sim.is_running(), "alive after C=2");
    // 200 tokens of 2 ms steps: the four run together long before the first ends.
    assert_eq!(
        send_at_once(&sim, 4, 200).await,
        0,
        "no request of C=4 is answered"
    );
    let status = sim.exit_within(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{status}");
    // The process ended, so its stderr is closed: every line is in.
    let stderr: Vec<String> = stderr.iter().collect();
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
    let (mut sim, stderr) = start(path_str(&profile), &["--crash-on-kv-overflow"]);
    assert_eq!(send_at_once(&sim, 1, 200).await, 1, "one request fits");
    assert_eq!(send_at_once(&sim, 2, 200).await, 0);
    let status = sim.exit_within(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{status}");
    let stderr: Vec<String> = stderr.iter().collect();
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
