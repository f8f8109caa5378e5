//! Benchmark: can `rigrun sim` serve C=1024 streams on this machine with CPU to spare?
//! C=1024 clients stream catid-style requests back to back while the sim's CPU time is read
//! from /proc; it prints the figure (measured, not asserted). Run with
//!
//! ```text
//! cargo bench --bench sim_load
//! SIM_LOAD_PROFILE=stress cargo bench --bench sim_load
//! ```
//!
//! `SIM_LOAD_PROFILE` is a built-in profile name (default: the Blackwell one) or `stress` (1024
//! sequences per step of 5..20 ms, ~50k streamed tokens/s); `SIM_LOAD_SECS` the measured window.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/sim_support/mod.rs"]
mod sim_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sim_support::{catid_prompt, Sim};

const CLIENTS: usize = 1024;

/// A profile that streams far more tokens per second than any real one here.
const STRESS: &str = "\
model: rigrun/stress
description: stress test
max_model_len: 4096
max_running_requests: 1024
kv_capacity_tokens: 4194304
prefill: {tokens_per_second: 1000000, chunk_tokens: 65536}
decode:
  batch_ms: [[1, 5.0], [1024, 20.0]]
  attention_ms: [[0, 0]]
prefix_cache: {enabled: true}
natural_length: {min: 8, max: 64}
";

/// CPU seconds (user + system) used so far by process `pid`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // Fields after the command name (which ends with ')'): utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("stat format")
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf reads a configuration value.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// One client: streams requests back to back, counting received chunks.
async fn client(sim: Arc<Sim>, body: Arc<String>, chunks: Arc<AtomicU64>, stop: Instant) {
    while Instant::now() < stop {
        let Ok(mut resp) = sim
            .client
            .post(format!("{}/v1/completions", sim.base))
            .body(body.to_string())
            .send()
            .await
        else {
            continue;
        };
        while let Ok(Some(bytes)) = resp.chunk().await {
            let events = bytes.windows(2).filter(|w| w == b"\n\n").count();
            chunks.fetch_add(events as u64, Ordering::Relaxed);
            if Instant::now() >= stop {
                return;
            }
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let profile =
        std::env::var("SIM_LOAD_PROFILE").unwrap_or("blackwell-8x-rtxpro6000-qwen3.5-397b-nvfp4".into());
    let secs: u64 = std::env::var("SIM_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let (sim, _dir) = match profile.as_str() {
        "stress" => {
            let (sim, dir) = Sim::with_profile(STRESS);
            (sim, Some(dir))
        }
        name => (Sim::start(name, &[]), None),
    };
    let sim = Arc::new(sim);
    let body = Arc::new(format!(
        r#"{{"prompt": {}, "max_tokens": 1000, "ignore_eos": true, "stream": true}}"#,
        catid_prompt(1000)
    ));
    let chunks = Arc::new(AtomicU64::new(0));
    let warmup = Duration::from_secs(10);
    let stop = Instant::now() + warmup + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            tokio::spawn(client(
                Arc::clone(&sim),
                Arc::clone(&body),
                Arc::clone(&chunks),
                stop,
            ))
        })
        .collect();
    tokio::time::sleep(warmup).await;
    let (cpu0, chunks0, t0) = (
        cpu_seconds(sim.pid()),
        chunks.load(Ordering::Relaxed),
        Instant::now(),
    );
    let half = Duration::from_secs(secs) / 2;
    tokio::time::sleep(half).await;
    let running = sim.metric("vllm:num_requests_running").await;
    let waiting = sim.metric("vllm:num_requests_waiting").await;
    tokio::time::sleep(half).await;
    let (cpu1, chunks1, wall) = (
        cpu_seconds(sim.pid()),
        chunks.load(Ordering::Relaxed),
        t0.elapsed(),
    );
    for task in tasks {
        let _ = task.await;
    }
    let cpu_percent = 100.0 * (cpu1 - cpu0) / wall.as_secs_f64();
    let chunk_rate = (chunks1 - chunks0) as f64 / wall.as_secs_f64();
    println!(
        "profile {profile}: C={CLIENTS}, {running} running, {waiting} waiting, {chunk_rate:.0} chunks/s streamed, \
         sim CPU {cpu_percent:.1}% of one core"
    );
}
