//! `rigrun bench --trace`: a Mooncake-format trace replayed against the real `rigrun sim` (its
//! prefix cache in 16-token blocks, the `tiny` profile). The sim's prefix-cache hits are what the
//! trace's shared hash ids predict, and the requests reach the server at the trace's times, seen
//! independently by a TCP proxy of the test's own between the client and the sim.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::bench_support::*;

/// Mooncake's tokens per hash id, and the `tiny` profile's prefix-cache block.
const TRACE_BLOCK: usize = 512;
const SIM_BLOCK: usize = 16;
/// How far a request's arrival at the proxy may stray from its scheduled time beyond the
/// lateness the client itself reports (the proxy's own scheduling on a busy test machine).
const TOLERANCE: Duration = Duration::from_millis(15);

/// 20 lines 60 ms apart: even lines share a two-block "system prompt" (hash ids 0, 1), odd ones a
/// one-block one (2); the rest of each prompt is its own. Lines that share are 120 ms apart,
/// so the earlier one's prefill (at most 8 ms in `tiny`) is cached when the later one arrives.
fn trace_lines() -> Vec<Value> {
    let mut next_id = 100;
    (0..20u64)
        .map(|i| {
            let input: usize = [1100, 700, 1500, 900, 1200][i as usize % 5];
            let blocks = input.div_ceil(TRACE_BLOCK);
            let root: Vec<u64> = if i % 2 == 0 { vec![0, 1] } else { vec![2] };
            let own = (0..blocks as u64).map(|k| next_id + k);
            let ids: Vec<u64> = root.into_iter().chain(own).take(blocks).collect();
            next_id += blocks as u64;
            json!({"timestamp": i * 60, "input_length": input, "output_length": 8 + i, "hash_ids": ids})
        })
        .collect()
}

fn write_trace(dir: &std::path::Path, lines: &[Value]) -> std::path::PathBuf {
    let path = dir.join("mooncake.jsonl");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// The sim's prefix-cache hits the trace predicts: each prompt as (hash id, offset) tokens, its
/// longest common prefix with any earlier prompt, in whole sim blocks, the last token computed.
fn predicted_hits(lines: &[Value]) -> u64 {
    let prompts: Vec<Vec<(i64, usize)>> = lines
        .iter()
        .enumerate()
        .map(|(n, l)| {
            let ids = l["hash_ids"].as_array().unwrap();
            let len = l["input_length"].as_u64().unwrap() as usize;
            (0..len)
                .map(|j| match ids.get(j / TRACE_BLOCK) {
                    Some(id) => (id.as_i64().unwrap(), j % TRACE_BLOCK),
                    None => (-1 - n as i64, j),
                })
                .collect()
        })
        .collect();
    let mut hits = 0;
    for (n, prompt) in prompts.iter().enumerate() {
        let shared = prompts[..n]
            .iter()
            .map(|earlier| earlier.iter().zip(prompt).take_while(|(a, b)| a == b).count())
            .max()
            .unwrap_or(0);
        let usable = (prompt.len() - 1) / SIM_BLOCK;
        hits += ((shared / SIM_BLOCK).min(usable) * SIM_BLOCK) as u64;
    }
    hits
}

/// A TCP proxy to `target` that notes when each HTTP request (`POST `) reaches it.
fn timing_proxy(target: &str) -> (String, Arc<Mutex<Vec<Instant>>>) {
    let target = target.trim_start_matches("http://").to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = seen.clone();
    let addr = serve_on_thread(move |listener| async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(&target).await.unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let noted = noted.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n @ 1..) = client_read.read(&mut buf).await {
                    if buf[..n].starts_with(b"POST ") {
                        noted.lock().unwrap().push(Instant::now());
                    }
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
        }
    });
    (format!("http://{addr}"), seen)
}

/// The most the client says it sent late (its record's `max_lateness_ms`).
fn admitted_lateness(record: &Value) -> Duration {
    Duration::from_secs_f64(num(record, "max_lateness_ms") / 1e3)
}

/// A replay is valid exactly when its p99 lateness is within its limit: on a busy machine the
/// client may fall behind, and then it must say so.
fn check_validity(record: &Value) {
    let kept_up = num(record, "p99_lateness_ms") <= num(record, "lateness_limit_ms");
    assert_eq!(record["valid"], kept_up, "{record}");
    assert!(
        num(record, "max_lateness_ms") >= num(record, "p99_lateness_ms"),
        "{record}"
    );
}

/// The requests' arrivals at the proxy after the first, checked against the trace's schedule at
/// `speed`: each within the lateness the client admitted (the first may be late too, so either
/// way) and the proxy's tolerance. Returns the span from first to last arrival.
fn check_arrivals(seen: &Mutex<Vec<Instant>>, lines: &[Value], speed: f64, record: &Value) -> Duration {
    let allowed = TOLERANCE + admitted_lateness(record);
    let mut arrivals = std::mem::take(&mut *seen.lock().unwrap());
    arrivals.sort();
    assert_eq!(arrivals.len(), lines.len(), "one request per line");
    for (line, at) in lines.iter().zip(&arrivals) {
        let scheduled = Duration::from_secs_f64(line["timestamp"].as_f64().unwrap() / 1e3 / speed);
        let observed = *at - arrivals[0];
        let off = observed.max(scheduled) - observed.min(scheduled);
        assert!(
            off <= allowed,
            "{line}: arrived {observed:?} after the first, scheduled {scheduled:?} at speed \
             {speed}; the client admitted {:?} late",
            allowed - TOLERANCE
        );
    }
    *arrivals.last().unwrap() - arrivals[0]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_hits_the_prefix_cache_as_its_hash_ids_say_at_the_traces_times() {
    let sim = Sim::start("tiny", &[]);
    let (proxy, seen) = timing_proxy(&sim.base);
    let dir = tempfile::tempdir().unwrap();
    let lines = trace_lines();
    let path = write_trace(dir.path(), &lines);
    let hits_before = sim.metric("vllm:prefix_cache_hits_total").await;
    let run = bench(&proxy, &["--trace", path.to_str().unwrap(), "--seed", "7"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let hits = sim.metric("vllm:prefix_cache_hits_total").await - hits_before;
    let r = &run.records[0];
    eprintln!("sim prefix-cache hits {hits}; record {r}");
    assert_eq!(hits as u64, predicted_hits(&lines), "{r}");
    assert!(hits > 5000.0, "the trace shares prefixes: {hits}");
    let sha = format!("{:x}", Sha256::digest(std::fs::read(&path).unwrap()));
    assert_eq!(r["trace_file"], path.to_str().unwrap());
    assert_eq!(r["trace_sha256"], sha);
    assert_eq!(
        (r["trace_lines"].as_u64(), r["trace_replayed"].as_u64()),
        (Some(20), Some(20))
    );
    assert_eq!(r["trace_speed"], 1.0);
    assert_eq!(r["max_concurrency"], Value::Null, "no cap: {r}");
    assert_eq!(r["completed"], 20);
    // max_tokens is each line's output_length: 8 + 9 + ... + 27.
    assert_eq!(r["total_output_tokens"], (8..28).sum::<u64>());
    assert_eq!(
        r["total_input_tokens"],
        lines
            .iter()
            .map(|l| l["input_length"].as_u64().unwrap())
            .sum::<u64>()
    );
    assert_eq!(
        (r["input_dist"].as_str(), r["output_dist"].as_str()),
        (Some("trace"), Some("trace"))
    );
    check_validity(r);
    let span = check_arrivals(&seen, &lines, 1.0, r);
    assert!(
        span >= Duration::from_millis(1140) - TOLERANCE - admitted_lateness(r),
        "{span:?}"
    );

    // Twice as fast: the same schedule at half the times, the replay half as long.
    let fast = bench(&proxy, &["--trace", path.to_str().unwrap(), "--trace-speed", "2"]);
    assert_eq!(fast.code, 0, "{}", fast.stderr);
    let f = &fast.records[0];
    check_validity(f);
    let fast_span = check_arrivals(&seen, &lines, 2.0, f);
    let allowed = 2 * TOLERANCE + admitted_lateness(r) + admitted_lateness(f);
    let half = span / 2;
    assert!(
        fast_span.max(half) - fast_span.min(half) <= allowed,
        "{fast_span:?} vs {span:?}"
    );
    assert_eq!(f["trace_speed"], 2.0);
    // Each duration is the span of sending plus the last request's service time, the same at both
    // speeds: the durations differ by what the spans differ by.
    let shorter_by = num(r, "duration") - num(f, "duration");
    let spans_differ = span.as_secs_f64() - fast_span.as_secs_f64();
    assert!(
        (shorter_by - spans_differ).abs() <= allowed.as_secs_f64() + 0.1,
        "durations {} s and {} s, spans {span:?} and {fast_span:?}",
        num(r, "duration"),
        num(f, "duration")
    );
}

#[test]
fn a_cap_holds_requests_back_and_the_start_of_a_trace_can_be_replayed() {
    let sim = Sim::start("tiny", &[]);
    let dir = tempfile::tempdir().unwrap();
    // Five requests at once, one slot.
    let lines: Vec<Value> = trace_lines()
        .into_iter()
        .map(|mut l| {
            l["timestamp"] = json!(0);
            l
        })
        .collect();
    let path = write_trace(dir.path(), &lines);
    let run = bench(
        &sim.base,
        &[
            "--trace",
            path.to_str().unwrap(),
            "--concurrency",
            "1",
            "--num-requests",
            "5",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = &run.records[0];
    assert_eq!(
        (r["trace_lines"].as_u64(), r["trace_replayed"].as_u64()),
        (Some(20), Some(5))
    );
    assert_eq!(
        (r["max_concurrency"].as_u64(), r["peak_concurrency"].as_u64()),
        (Some(1), Some(1))
    );
    // Waiting for the slot is queueing (in the latencies), not the client's lateness.
    assert!(num(r, "p99_queue_ms") > 20.0, "{r}");
    assert!(num(r, "p99_lateness_ms") < num(r, "p99_queue_ms") / 2.0, "{r}");
    check_validity(r);
    let run = bench(
        &sim.base,
        &["--trace", path.to_str().unwrap(), "--concurrency", "1,2"],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("give one --concurrency cap"),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_traces_are_refused_naming_the_file_and_line() {
    let sim = Sim::start("tiny", &[]);
    let dir = tempfile::tempdir().unwrap();
    let good = r#"{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}"#;
    let cases = [
        (format!("{good}\nnot json\n"), "mooncake.jsonl:2: not JSON"),
        (
            format!("{good}\n{}\n", good.replace("10", "5")),
            "mooncake.jsonl:2: timestamp 5 is earlier than line 1's 10",
        ),
        (
            format!("{good}\n{}\n", good.replace(", \"hash_ids\": [0, 1]", "")),
            "mooncake.jsonl:2: missing `hash_ids`",
        ),
        (
            format!("{good}\n\n{}\n", good.replace("600", "4095")),
            "mooncake.jsonl:3: input_length 4095 + output_length 5 = 4100 tokens, more than the server's max_model_len 4096",
        ),
    ];
    for (text, want) in cases {
        let path = dir.path().join("mooncake.jsonl");
        std::fs::write(&path, text).unwrap();
        let run = bench(&sim.base, &["--trace", path.to_str().unwrap()]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(want), "want {want}: {}", run.stderr);
    }
}
