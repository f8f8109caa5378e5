//! `rigrun bench` against the real `rigrun sim`: accuracy against the server's known schedule,
//! exact token counts, the concurrency reached, workloads and APIs, open-loop queueing.

use crate::bench_support::*;

/// A server whose every step takes exactly 100 ms whatever the batch, and whose prefill computes
/// 40 tokens per second: a 16-token prompt's first token comes 16/40 s + 100 ms = 500 ms after
/// the request arrives, then one token every 100 ms. (The sim itself takes a few ms to answer a
/// request, which this scale keeps well inside the 2%.)
const EXACT_PROFILE: &str = "\
model: test/exact
description: exact timings for accuracy tests
max_model_len: 4096
max_running_requests: 64
kv_capacity_tokens: 262144
prefill: {tokens_per_second: 40, chunk_tokens: 4096}
decode:
  batch_ms: [[1, 100.0]]
  attention_ms: [[0, 0.0]]
prefix_cache: {enabled: false}
natural_length: {min: 8, max: 256}
";
const TRUE_TTFT_MS: f64 = 16.0 / 40.0 * 1000.0 + 100.0;
const TRUE_ITL_MS: f64 = 100.0;

fn within(measured: f64, truth: f64, tolerance: f64) -> bool {
    (measured - truth).abs() <= truth * tolerance
}

#[test]
fn ttft_and_itl_are_within_2_percent_of_the_servers_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("exact.yaml");
    std::fs::write(&profile, EXACT_PROFILE).unwrap();
    let sim = Sim::start(profile.to_str().unwrap(), &[]);
    // C=1: every request meets an idle server, so its schedule is exactly the profile's.
    let run = bench(
        &sim.base,
        &["--concurrency", "1", "--input-len", "16", "--output-len", "5"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = &run.records[0];
    eprintln!(
        "measured TTFT median {} ms (truth {TRUE_TTFT_MS}), ITL median {} mean {} ms (truth {TRUE_ITL_MS})",
        r["median_ttft_ms"], r["median_itl_ms"], r["mean_itl_ms"]
    );
    for (key, truth) in [
        ("median_ttft_ms", TRUE_TTFT_MS),
        ("median_itl_ms", TRUE_ITL_MS),
        ("mean_itl_ms", TRUE_ITL_MS),
        ("median_tpot_ms", TRUE_ITL_MS),
    ] {
        assert!(
            within(num(r, key), truth, 0.02),
            "{key} = {} is not within 2% of {truth}: {r}",
            num(r, key)
        );
    }
    // Token counts are exact: the server's usage, never an estimate.
    assert_eq!(r["completed"], 5);
    assert_eq!(r["total_input_tokens"], 5 * 16);
    assert_eq!(r["total_output_tokens"], 5 * 5);
    assert_eq!(r["valid"], true);
    assert_eq!(r["problems"], serde_json::json!([]));
}

#[test]
fn counts_tokens_exactly_and_reaches_the_asked_concurrency() {
    let sim = Sim::start("tiny", &[]);
    let out = tempfile::tempdir().unwrap();
    let run = bench(
        &sim.base,
        &[
            "--concurrency",
            "4,16",
            "--input-len",
            "64",
            "--output-len",
            "16",
            "--out-dir",
            out.path().to_str().unwrap(),
        ],
    );
    assert_measured(&run, "C = 4, 16");
    assert_eq!(run.records.len(), 2);
    for (r, c) in run.records.iter().zip([4u64, 16]) {
        assert_eq!(r["backend"], "rigrun-bench");
        assert_eq!(r["model"], "rigrun/tiny");
        assert_eq!(r["max_concurrency"], c);
        assert_eq!(r["peak_concurrency"], c, "{r}");
        assert_eq!(r["completed"], 5 * c);
        assert_eq!(r["failed"], 0);
        assert_eq!(r["total_input_tokens"], 5 * c * 64);
        assert_eq!(r["total_output_tokens"], 5 * c * 16);
        assert!(r["workload_note"].as_str().unwrap().contains("decode-throughput"));
        let (steady, overall) = (
            num(r, "steady_state_output_throughput"),
            num(r, "output_throughput"),
        );
        assert!(steady > 0.5 * overall && steady < 2.0 * overall, "{r}");
        for key in [
            "p90_ttft_ms",
            "p99_itl_ms",
            "mean_tpot_ms",
            "median_e2el_ms",
            "client_cpu_percent",
        ] {
            assert!(num(r, key) >= 0.0, "{key}");
        }
        let file = out.path().join(format!("bench_c{c}_in64_out16.json"));
        let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        assert_eq!(&saved, r);
    }
    assert!(run.stderr.contains("steady tok/s"), "{}", run.stderr);
}

#[test]
fn chat_random_unique_prefix_and_whole_responses_count_exactly() {
    let sim = Sim::start("tiny", &[]);
    let common = ["--concurrency", "2", "--input-len", "32", "--output-len", "8"];
    for extra in [
        &["--api", "chat"][..],
        &["--workload", "random", "--seed", "7"],
        &["--unique-prefix"],
        &["--no-stream"],
    ] {
        let run = bench(&sim.base, &[&common[..], extra].concat());
        assert_measured(&run, &format!("{extra:?}"));
        let r = &run.records[0];
        assert_eq!(r["total_output_tokens"], 10 * 8, "{extra:?}: {r}");
        if extra[0] != "--api" {
            assert_eq!(r["total_input_tokens"], 10 * 32, "{extra:?}: {r}");
        }
        assert_eq!(r["stream"], extra[0] != "--no-stream");
    }
    let run = bench(&sim.base, &[&common[..], &["--no-stream"]].concat());
    assert!(run.records[0]["median_ttft_ms"].is_null());
}

#[test]
fn prompts_from_a_file_are_sent_in_turn() {
    let sim = Sim::start("tiny", &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompts.jsonl");
    std::fs::write(
        &file,
        "{\"prompt\": [1, 2, 3, 4], \"max_tokens\": 5}\n{\"prompt\": [5, 6], \"max_tokens\": 3}\n",
    )
    .unwrap();
    let run = bench(
        &sim.base,
        &["--concurrency", "1", "--workload", file.to_str().unwrap()],
    );
    assert_measured(&run, "prompts from a file");
    let r = &run.records[0];
    // Warm-up takes prompt 1; the measured five are 2, 1, 2, 1, 2.
    assert_eq!(r["total_input_tokens"], 2 * 4 + 3 * 2);
    assert_eq!(r["total_output_tokens"], 2 * 5 + 3 * 3);
}

#[test]
fn open_loop_latency_includes_time_queued_in_the_client() {
    let sim = Sim::start("tiny", &[]);
    // 200 arrivals per second into one slot that each request holds for ~40 ms: requests queue
    // in the client, and that wait is part of their latency.
    let run = bench(
        &sim.base,
        &[
            "--concurrency",
            "1",
            "--request-rate",
            "200",
            "--num-requests",
            "5",
            "--warmup",
            "0",
            "--input-len",
            "16",
            "--output-len",
            "16",
            "--seed",
            "1",
        ],
    );
    let r = &run.records[0];
    assert_eq!(r["completed"], 5, "{}", run.stderr);
    assert_eq!(r["request_rate"], 200.0);
    assert_eq!(r["peak_concurrency"], 1);
    assert!(num(r, "mean_queue_ms") > 10.0, "{r}");
    assert!(num(r, "mean_ttft_ms") > num(r, "mean_queue_ms"), "{r}");
    assert!(num(r, "mean_e2el_ms") > num(r, "mean_queue_ms") + 30.0, "{r}");
}

#[test]
fn a_duration_bounds_the_measured_phase() {
    let sim = Sim::start("tiny", &[]);
    let run = bench(
        &sim.base,
        &[
            "--concurrency",
            "2",
            "--duration",
            "1s",
            "--input-len",
            "16",
            "--output-len",
            "8",
        ],
    );
    let r = &run.records[0];
    assert!(r["num_prompts"].is_null());
    assert!(num(r, "completed") >= 10.0, "{r}");
    assert!(num(r, "duration") >= 1.0, "{r}");
}

#[test]
fn lengths_beyond_the_context_window_are_refused_up_front() {
    let sim = Sim::start("tiny", &[]);
    let run = bench(&sim.base, &["--input-len", "4000", "--output-len", "200"]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty());
    assert_eq!(
        run.stderr.trim(),
        "error: --input-len 4000 + --output-len 200 = 4200 tokens, more than the server's max_model_len 4096"
    );
}

#[test]
fn holds_hundreds_of_streams_at_once() {
    // Like bench/fast-server.yaml (the batch holds everything) but with 30 ms steps, so each
    // request streams for about 3 s: time enough, even on a loaded machine, for all 512 to be
    // in flight together.
    let fast =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/fast-server.yaml")).unwrap();
    let slow = fast.replace("    - [1, 1.0]", "    - [1, 30.0]");
    assert_ne!(fast, slow, "bench/fast-server.yaml changed shape");
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("slow-steps.yaml");
    std::fs::write(&profile, slow).unwrap();
    let sim = Sim::start(profile.to_str().unwrap(), &[]);
    let run = bench(
        &sim.base,
        &[
            "--concurrency",
            "512",
            "--num-requests",
            "512",
            "--input-len",
            "16",
            "--output-len",
            "100",
        ],
    );
    let r = &run.records[0];
    assert_eq!(r["completed"], 512, "{}", run.stderr);
    assert_eq!(r["failed"], 0);
    assert_eq!(r["peak_concurrency"], 512);
    assert_eq!(r["total_output_tokens"], 512 * 100);
}

#[test]
fn goodput_counts_the_requests_each_within_the_slo() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("exact.yaml");
    std::fs::write(&profile, EXACT_PROFILE).unwrap();
    let sim = Sim::start(profile.to_str().unwrap(), &[]);
    // Every request: TTFT 500 ms, TPOT 100 ms.
    let common = ["--concurrency", "1", "--input-len", "16", "--output-len", "2"];
    let met = bench(
        &sim.base,
        &[&common[..], &["--slo", "p99_ttft_ms=600,median_tpot_ms=150"]].concat(),
    );
    assert_eq!(met.code, 0, "{}", met.stderr);
    let r = &met.records[0];
    assert_eq!(r["good_requests"], 5, "{r}");
    assert!(
        (num(r, "goodput") - num(r, "request_throughput")).abs() < 1e-3,
        "{r}"
    );
    let missed = bench(
        &sim.base,
        &[
            &common[..],
            &["--num-requests", "1", "--warmup", "0", "--slo", "p99_ttft_ms=400"],
        ]
        .concat(),
    );
    assert_eq!(missed.records[0]["good_requests"], 0, "{}", missed.stderr);
    assert_eq!(missed.records[0]["goodput"], 0.0);
    let refused = bench(&sim.base, &["--slo", "output_throughput=100"]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("goodput judges each request's latency"),
        "{}",
        refused.stderr
    );
}

/// Ctrl-C (SIGINT, sent once the first level's line is out) ends `rigrun bench` with the table
/// of what it measured so far and the level it cut short named; exit 1. With `--slo`, the table
/// carries goodput.
#[test]
fn ctrl_c_prints_what_was_measured_so_far_with_goodput() {
    use std::io::{BufRead, BufReader};
    let sim = Sim::start("tiny", &[]);
    let mut child = crate::common::rigrun()
        .args([
            "bench",
            "--url",
            &sim.base,
            "--concurrency",
            "1,2",
            "--input-len",
            "8",
        ])
        .args([
            "--output-len",
            "16",
            "--warmup",
            "0",
            "--slo",
            "p99_ttft_ms=60000",
        ])
        // Seconds a level: the interrupt, sent the moment C=1's line is out, finds C=2 running.
        .args(["--num-requests", "300"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    let record: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(record["max_concurrency"], 1, "{first}");
    crate::common::sh("kill", &["-INT", &child.id().to_string()]);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let (_, summary) = stderr
        .split_once("interrupted during C=2: that level is not measured")
        .expect(&stderr);
    assert!(summary.contains("measured before it:"), "{stderr}");
    let rows: Vec<&str> = summary
        .lines()
        .filter(|l| l.trim_start().starts_with("1 "))
        .collect();
    assert_eq!(rows.len(), 1, "the C=1 row again: {stderr}");
    assert!(
        summary.contains("goodput/s") && summary.contains("good %"),
        "{stderr}"
    );
    assert!(
        rows[0].trim_end().ends_with("100.0"),
        "every request within 60 s: {}",
        rows[0]
    );
}
