//! The performance model of `rigrun sim`, observed through HTTP: queueing when the KV cache is
//! full, throughput against the model's own prediction, timing at low load, prefix caching,
//! and chunked prefill delaying running decodes.
//!
//! The model's timing itself is checked exactly in virtual time, beside the scheduler
//! (src/sim/scheduler.rs, src/sim/predict.rs). Here, on a shared machine where other processes
//! can only slow the client and the sim down, only what load cannot fake is asserted: lower
//! bounds on latencies (the sim is never faster than its model), upper bounds on throughput,
//! and ordering.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sim_support::{profile_yaml, rigrun, Event, Sim};
use serde_json::{json, Value};

/// Milliseconds between two instants.
fn ms(from: Instant, to: Instant) -> f64 {
    to.duration_since(from).as_secs_f64() * 1000.0
}

/// Token chunks of a completion stream (the events before `[DONE]`).
fn token_events(events: Vec<Event>) -> Vec<Event> {
    events.into_iter().filter(|e| e.data != "[DONE]").collect()
}

#[tokio::test]
async fn requests_beyond_the_kv_cache_wait_in_the_queue() {
    // 100 KV tokens; each request reserves 10 + 40: two run, the next two wait.
    let (sim, _dir) = Sim::with_profile(&profile_yaml(100, 100, 10.0, 1_000_000, 1000));
    let body = |i: u32| {
        json!({"prompt": vec![i; 10], "max_tokens": 40, "ignore_eos": true, "stream": true}).to_string()
    };
    let mut streams = Vec::new();
    for i in 0..4 {
        // Headers arrive once the request is handed to the scheduler.
        streams.push(sim.stream("/v1/completions", &body(i)).await);
    }
    // The scheduler admits at step boundaries: poll until it has seen all four (the first two
    // run for 400 ms, so the state holds while we look).
    let deadline = Instant::now() + Duration::from_secs(5);
    while sim.metric("vllm:num_requests_running").await + sim.metric("vllm:num_requests_waiting").await < 4.0
    {
        assert!(Instant::now() < deadline, "the scheduler never saw four requests");
    }
    assert_eq!(sim.metric("vllm:num_requests_running").await, 2.0);
    assert_eq!(sim.metric("vllm:num_requests_waiting").await, 2.0);
    assert_eq!(sim.metric("rigrun_sim:kv_cache_used_tokens").await, 100.0);

    let mut finished = Vec::new();
    for stream in streams {
        let sent = stream.sent;
        let tokens = token_events(stream.all().await);
        assert_eq!(tokens.len(), 40);
        finished.push((sent, tokens[0].at, tokens[39].at));
    }
    let first_done = finished[0].2.min(finished[1].2);
    for &(sent, first_token, _) in &finished[2..] {
        assert!(
            first_token >= first_done,
            "a queued request started before a slot was free"
        );
        // It waited for 40 steps of 10 ms.
        assert!(
            ms(sent, first_token) > 350.0,
            "queued TTFT {:.1} ms",
            ms(sent, first_token)
        );
    }
}

/// One closed-loop phase: `clients` clients send `total` requests back to back.
/// Returns completion tokens and wall time.
async fn closed_loop(sim: &Arc<Sim>, body: &str, clients: usize, total: usize) -> (u64, Duration) {
    let issued = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (sim, body, issued) = (Arc::clone(sim), body.to_string(), Arc::clone(&issued));
            tokio::spawn(async move {
                let mut tokens = 0;
                while issued.fetch_add(1, Ordering::Relaxed) < total {
                    let (status, response) = sim.post("/v1/completions", &body).await;
                    assert_eq!(status, 200, "{response}");
                    tokens += response["usage"]["completion_tokens"].as_u64().unwrap();
                }
                tokens
            })
        })
        .collect();
    let mut tokens = 0;
    for worker in workers {
        tokens += worker.await.expect("worker");
    }
    (tokens, start.elapsed())
}

/// Measured against modelled, with the slack of a clock that may wake a little late but never
/// early: `measured` must be at least `model` less 1%.
fn at_least(what: &str, measured: f64, model: f64) {
    assert!(
        measured >= model * 0.99,
        "{what}: measured {measured:.3}, below the model's {model:.3}: the sim ran ahead of its model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_grows_with_concurrency_and_never_beats_the_model() {
    let levels = [1usize, 4, 16];
    let out = rigrun(&[
        "sim",
        "--profile",
        "tiny",
        "--predict",
        "1,4,16",
        "--input-len",
        "16",
        "--output-len",
        "64",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let predictions: Vec<f64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["output_throughput"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(predictions.len(), levels.len());

    let sim = Arc::new(Sim::start("tiny", &[]));
    let body = json!({"prompt": vec![23066; 16], "max_tokens": 64, "ignore_eos": true}).to_string();
    let mut measured = Vec::new();
    for (&clients, &predicted) in levels.iter().zip(&predictions) {
        closed_loop(&sim, &body, clients, clients).await;
        let (tokens, wall) = closed_loop(&sim, &body, clients, 5 * clients).await;
        assert_eq!(tokens, 5 * clients as u64 * 64);
        let throughput = tokens as f64 / wall.as_secs_f64();
        // Time per token is at least the model's: throughput at most its prediction.
        at_least(
            &format!("seconds per token at C={clients}"),
            1.0 / throughput,
            1.0 / predicted,
        );
        measured.push(throughput);
    }
    assert!(
        measured.windows(2).all(|w| w[1] > w[0]) && predictions.windows(2).all(|w| w[1] > w[0]),
        "more clients, more throughput: measured {measured:?}, predicted {predictions:?}"
    );
}

#[tokio::test]
async fn low_load_timing_follows_the_model_and_the_prefix_cache_skips_prefill() {
    // 20 ms steps; prefill 5,000 tokens/s, so 1000 uncached tokens take 200 ms more.
    let (sim, _dir) = Sim::with_profile(&profile_yaml(100_000, 4096, 20.0, 5_000, 4096));
    let body = |token: u32| {
        json!({"prompt": vec![token; 1000], "max_tokens": 50, "ignore_eos": true, "stream": true}).to_string()
    };
    let stream = sim.stream("/v1/completions", &body(23066)).await;
    let sent = stream.sent;
    let tokens = token_events(stream.all().await);
    assert_eq!(tokens.len(), 50);
    let uncached_ttft = ms(sent, tokens[0].at);
    at_least("TTFT ms", uncached_ttft, 220.0);
    at_least("mean ITL ms", ms(tokens[0].at, tokens[49].at) / 49.0, 20.0);

    // A cached prompt again: 62 of its 16-token blocks are cached, 8 tokens are computed.
    let hits_before = sim.metric("vllm:prefix_cache_hits_total").await;
    let stream = sim.stream("/v1/completions", &body(23066)).await;
    let sent = stream.sent;
    let tokens = token_events(stream.all().await);
    let cached_ttft = ms(sent, tokens[0].at);
    at_least("cached TTFT ms", cached_ttft, 21.6);
    assert!(
        cached_ttft < uncached_ttft,
        "the cached prompt skips its prefill: {cached_ttft:.1} ms against {uncached_ttft:.1} ms"
    );
    assert_eq!(
        sim.metric("vllm:prefix_cache_hits_total").await - hits_before,
        992.0
    );
}

#[tokio::test]
async fn a_long_prefill_delays_running_decodes_chunk_by_chunk() {
    // Chunks of 1000 tokens at 10,000 tokens/s: each chunk adds 100 ms to a 10 ms step.
    let (sim, _dir) = Sim::with_profile(&profile_yaml(100_000, 4096, 10.0, 10_000, 1000));
    let mut running = sim
        .stream(
            "/v1/completions",
            r#"{"prompt": [1], "max_tokens": 30, "ignore_eos": true, "stream": true}"#,
        )
        .await;
    let mut tokens = Vec::new();
    for _ in 0..3 {
        tokens.push(running.next().await.expect("token"));
    }
    let long_prompt: Vec<u32> = (0..3000).collect();
    let long = json!({"prompt": long_prompt, "max_tokens": 1}).to_string();
    let sim = Arc::new(sim);
    let submitter = Arc::clone(&sim);
    let long_request = tokio::spawn(async move { submitter.post("/v1/completions", &long).await });
    tokens.extend(token_events(running.all().await));
    assert_eq!(long_request.await.expect("join").0, 200);
    let gaps: Vec<f64> = tokens.windows(2).map(|w| ms(w[0].at, w[1].at)).collect();
    // Three chunks, each in one step of 10 + 100 ms, among 10 ms decode steps. A token delivered
    // late shortens the gap after it, so the bounds are on the whole span, and the chunk steps
    // stand out from the decode steps by far.
    let span = ms(tokens[0].at, tokens[tokens.len() - 1].at);
    at_least("29 steps, 3 with a chunk, ms", span, 29.0 * 10.0 + 3.0 * 100.0);
    let long = gaps.iter().filter(|&&g| g > 60.0).count();
    assert!(long >= 3, "three steps carry a prefill chunk: gaps {gaps:?}");
}

#[tokio::test]
async fn a_client_that_goes_away_frees_its_kv_for_the_queue() {
    // 100 KV tokens; each request reserves 10 + 80: the second waits for the first.
    let (sim, _dir) = Sim::with_profile(&profile_yaml(100, 100, 10.0, 1_000_000, 1000));
    let body = |i: u32| {
        json!({"prompt": vec![i; 10], "max_tokens": 80, "ignore_eos": true, "stream": true}).to_string()
    };
    let mut first = sim.stream("/v1/completions", &body(1)).await;
    first.next().await.expect("first token");
    let second = sim.stream("/v1/completions", &body(2)).await;
    let sent = second.sent;
    drop(first);
    let mut second = second;
    let token = second.next().await.expect("second request's first token");
    // Had the first run to the end, the second would have waited at least 79 more steps of
    // 10 ms: 790 ms. Freed at once, it starts within a few steps (a bound no load reaches).
    assert!(
        ms(sent, token.at) < 790.0,
        "queued TTFT {:.1} ms: the second waited for the first to finish",
        ms(sent, token.at)
    );
}
