//! `rigrun bench` against a server that misbehaves on purpose: completions that end early
//! (ignore_eos not honoured), HTTP 500s, streams that die mid-way or carry an error. Each run
//! must finish, print its JSON line with `valid: false` and the reason, count failures by kind,
//! and exit 1. Bad flags and an unreachable server: one clear line, exit 2. Servers that close
//! connections without notice (after every response, or when idle) lose no request of bench,
//! verify-server, its smoke request or the server's facts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::bench_support::*;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt as _;
use serde_json::{json, Value};

/// Serves `/{mode}/v1/models` and `/{mode}/v1/completions` on a free port, in its own thread.
fn fault_server() -> TestServer {
    let app = Router::new()
        .route("/{mode}/v1/models", get(models))
        .route("/{mode}/v1/completions", post(completions))
        .with_state(Arc::new(AtomicU64::new(0)));
    TestServer::start(app)
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "fault/model", "max_model_len": 100000}]}))
}

fn chunk(text: &str, finish: Option<&str>) -> String {
    let event = json!({"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]});
    format!("data: {event}\n\n")
}

fn usage(prompt: u64, completion: u64) -> String {
    let event = json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}});
    format!("data: {event}\n\n")
}

/// A stream of `tokens` tokens ending with `finish`, the usage chunk and `[DONE]`.
fn good_stream(prompt: u64, tokens: u64, finish: &str) -> Vec<String> {
    let mut events: Vec<String> = (1..tokens).map(|_| chunk(" tok", None)).collect();
    events.push(chunk(" end", Some(finish)));
    events.push(usage(prompt, tokens));
    events.push("data: [DONE]\n\n".into());
    events
}

/// Sends `events` one every 3 ms, as a server generating tokens does; an `Err` cuts the
/// connection there.
fn sse(events: Vec<Result<String, std::io::Error>>) -> Response {
    let stream = futures_util::stream::iter(events).then(|event| async move {
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        event.map(Bytes::from)
    });
    ([("content-type", "text/event-stream")], Body::from_stream(stream)).into_response()
}

async fn completions(
    Path(mode): Path<String>,
    State(count): State<Arc<AtomicU64>>,
    Json(body): Json<Value>,
) -> Response {
    let n = count.fetch_add(1, Ordering::SeqCst);
    let max = body["max_tokens"].as_u64().unwrap_or(16);
    let prompt = body["prompt"].as_array().map_or(0, |p| p.len() as u64);
    let ok = |events: Vec<String>| sse(events.into_iter().map(Ok).collect());
    match mode.as_str() {
        "good" => ok(good_stream(prompt, max, "length")),
        // Ends at a "natural" EOS halfway, as a server that ignores ignore_eos does.
        "short" => ok(good_stream(prompt, max / 2, "stop")),
        "errors" if n % 2 == 1 => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": {"message": "out of memory", "code": 500}})),
        )
            .into_response(),
        "errors" => ok(good_stream(prompt, max, "length")),
        // Two tokens, then the connection is cut without ending the chunked body.
        "die" => sse(vec![
            Ok(chunk(" a", None)),
            Ok(chunk(" b", None)),
            Err(std::io::Error::other("the server died")),
        ]),
        // No usage chunk and no `[DONE]`; the last event, with the finish reason, lacks its
        // closing newlines.
        "bare" => {
            let mut events: Vec<String> = good_stream(prompt, max, "length");
            events.truncate(events.len() - 2);
            if let Some(last) = events.last_mut() {
                *last = last.trim_end().to_string();
            }
            ok(events)
        }
        "error-event" => ok(vec![
            chunk(" a", None),
            format!("data: {}\n\n", json!({"error": {"message": "engine crashed"}})),
        ]),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

const SMALL: [&str; 6] = ["--concurrency", "2", "--input-len", "8", "--output-len", "10"];

fn bench_mode(mode: &str) -> BenchRun {
    let server = fault_server();
    let url = format!("{}/{mode}", server.base);
    bench(&url, &SMALL)
}

#[test]
fn a_well_behaved_server_gives_a_valid_level() {
    let run = bench_mode("good");
    // Valid, unless this shared machine kept the client itself from holding C = 2.
    assert_measured(&run, "good");
    assert_eq!(run.records[0]["total_output_tokens"], 100);
}

#[test]
fn without_usage_tokens_are_counted_as_events() {
    let run = bench_mode("bare");
    assert_measured(&run, "bare");
    let r = &run.records[0];
    assert_eq!(r["total_output_tokens"], 100);
    assert_eq!(
        r["total_input_tokens"], 80,
        "prompt ids are counted when usage is missing"
    );
}

#[test]
fn completions_that_end_early_make_the_level_invalid() {
    let run = bench_mode("short");
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = &run.records[0];
    assert_eq!(r["valid"], false);
    assert_eq!(
        (r["completed"].as_u64(), r["failed"].as_u64()),
        (Some(10), Some(0))
    );
    let problems = r["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let problem = problems[0].as_str().unwrap();
    assert!(
        problem.starts_with(
            "10 of 10 completed requests returned fewer output tokens than asked (fewest 5, asked 10)"
        ) && problem.contains("did not honour ignore_eos"),
        "{problem}"
    );
    assert!(run.stderr.contains("did not honour ignore_eos"), "{}", run.stderr);
}

#[test]
fn http_errors_are_counted_by_kind_and_the_run_finishes() {
    let run = bench_mode("errors");
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = &run.records[0];
    assert_eq!(num(r, "completed") + num(r, "failed"), 10.0);
    assert!(num(r, "failed") >= 4.0, "{r}");
    assert_eq!(r["errors"]["http_500"], r["failed"]);
    assert_eq!(
        r["total_output_tokens"].as_f64(),
        Some(num(r, "completed") * 10.0)
    );
    let problems = r["problems"].to_string();
    assert!(problems.contains("requests failed (http_500: "), "{problems}");
    assert!(
        run.stderr.contains("out of memory"),
        "an example error is shown: {}",
        run.stderr
    );
}

#[test]
fn streams_that_die_midway_are_counted_and_the_run_finishes() {
    let run = bench_mode("die");
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = &run.records[0];
    assert_eq!(r["completed"], 0);
    assert_eq!(r["failed"], 10);
    assert_eq!(r["errors"], json!({"stream_cut": 10}));
    assert_eq!(r["warmup_failed"], 2);
    assert_eq!(r["problems"][0], "no request completed, so nothing was measured");
    assert!(run.stderr.contains("after 2 token events"), "{}", run.stderr);
}

#[test]
fn an_error_inside_the_stream_is_a_server_error() {
    let run = bench_mode("error-event");
    assert_eq!(run.code, 1);
    assert_eq!(run.records[0]["errors"], json!({"server_error": 10}));
    assert!(run.stderr.contains("engine crashed"), "{}", run.stderr);
}

#[test]
fn bad_flags_get_one_clear_error_and_exit_2() {
    for (args, says) in [
        (&["--concurrency", "0"][..], "--concurrency"),
        (&["--concurrency", "4,x"], "--concurrency"),
        (&["--input-len", "0"], "--input-len"),
        (&["--duration", "5x"], "--duration"),
        (&["--request-rate", "0"], "--request-rate"),
        (&["--num-requests", "5", "--duration", "1s"], "--duration"),
        (&["--api", "grpc"], "--api"),
        (
            &["--workload", "/nonexistent/prompts.jsonl"],
            "/nonexistent/prompts.jsonl",
        ),
        (&["--url", "ftp://host"], "--url"),
        (&["--url", "not a url"], "--url"),
    ] {
        let run = run(&[&["bench"][..], args].concat());
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}");
        let first = run.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error:") && first.contains(says),
            "{args:?}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
}

#[test]
fn an_unreachable_server_gets_one_line_and_exit_2() {
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let run = bench("http://127.0.0.1:1", &[]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty());
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.starts_with(
            "error: cannot reach http://127.0.0.1:1/v1/models: connection refused or unreachable"
        ) && run.stderr.contains("Connection refused"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_the_server_does_not_list_is_refused_before_any_request() {
    let sim = Sim::start("tiny", &["--model", "org/tiny-chat"]);
    let run =
        tokio::task::block_in_place(|| bench(&sim.base, &["--model", "org/tiny-caht", "--concurrency", "1"]));
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stdout.is_empty());
    let said = format!(
        "{}/v1/models lists org/tiny-chat, not org/tiny-caht; did you mean --model org/tiny-chat?",
        sim.base.trim_end_matches('/')
    );
    assert!(run.stderr.contains(&said), "{}", run.stderr);
    assert_eq!(
        sim.metric("vllm:request_success_total").await,
        0.0,
        "no request was sent"
    );
}

/// `n` measured requests per level at C = 1 and 2, streamed or not, with `extra` flags.
fn bench_all_answered(sim: &Sim, n: u64, extra: &[&str]) {
    let count = n.to_string();
    for stream in [&[][..], &["--no-stream"]] {
        let args = [
            &["--concurrency", "1,2", "--input-len", "8", "--output-len", "4"][..],
            &["--num-requests", &count],
            stream,
            extra,
        ]
        .concat();
        let run = bench(&sim.base, &args);
        assert_measured(&run, &format!("{args:?}"));
        for r in &run.records {
            assert_eq!(
                (r["completed"].as_u64(), r["failed"].as_u64()),
                (Some(n), Some(0)),
                "{args:?}: {r}"
            );
            assert_eq!(r["total_output_tokens"], 4 * n, "{args:?}: {r}");
            assert!(r["reconnects"].as_u64().is_some(), "{r}");
        }
    }
}

#[test]
fn bench_loses_nothing_when_the_server_closes_after_every_response() {
    let sim = Sim::start("tiny", &["--close-after-response"]);
    bench_all_answered(&sim, 40, &[]);
}

#[test]
fn bench_loses_nothing_when_the_server_closes_idle_connections() {
    let sim = Sim::start("tiny", &["--idle-timeout", "1s"]);
    // Two requests a second on average: many gaps are longer than the server keeps a connection.
    bench_all_answered(&sim, 10, &["--request-rate", "2", "--warmup", "0"]);
}

/// verify-server with its smoke request and the server's facts, `steps` times, against a sim
/// started with `sim_flags`; every step must get every answer.
fn verify_all_answered(sim_flags: &[&str], steps: usize) {
    let sim = Sim::start("tiny", sim_flags);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let inventory = format!(
        "hosts:\n  local:\n    connection: local\n    workdir: {}\n",
        dir.join("work").display()
    );
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
    let step = format!(
        "  - verify-server: {{url: \"{}\", model: rigrun/tiny, smoke: true}}\n",
        sim.base
    );
    std::fs::write(
        dir.join("verify.yaml"),
        format!("name: verify\nsteps:\n{}", step.repeat(steps)),
    )
    .unwrap();
    let out = crate::common::run_rigrun(dir, &["run", "verify.yaml", "--runs-dir", "runs"]);
    assert!(out.status.success(), "{:?}", crate::common::text(&out));
    let manifest = crate::common::manifest(&crate::common::only_run_dir(&dir.join("runs")));
    let done = manifest["hosts"]["local"]["steps"].as_array().unwrap();
    assert_eq!(done.len(), steps);
    for step in done {
        let details = &step["details"];
        assert_eq!(
            details["server_facts"]["endpoints"]["/version"], "ok",
            "{details}"
        );
        assert_eq!(
            details["server_facts"]["version"],
            format!("rigrun-sim {}", env!("CARGO_PKG_VERSION"))
        );
        assert!(
            details["smoke"]["completion_tokens"].as_u64() > Some(0),
            "{details}"
        );
    }
}

#[test]
fn verify_server_its_smoke_and_facts_lose_nothing_when_the_server_closes_after_every_response() {
    verify_all_answered(&["--close-after-response"], 20);
}

/// `--reset-cache` against a server with neither vLLM's nor SGLang's reset route: refused up
/// front (exit 2) with one line naming the server and what to do, never a silent skip.
#[test]
fn reset_cache_is_refused_by_a_server_that_cannot_reset() {
    let server = fault_server();
    let url = format!("{}/good", server.base);
    let run = bench(&url, &["--concurrency", "1", "--reset-cache"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.records.is_empty());
    assert_eq!(
        run.stderr.trim(),
        format!(
            "error: --reset-cache: {url} serves neither vLLM's POST /reset_prefix_cache nor \
             SGLang's POST /flush_cache, so its prefix cache cannot be emptied between levels; \
             for vLLM, start it with VLLM_SERVER_DEV_MODE=1 (which serves /reset_prefix_cache), \
             or leave out --reset-cache (the records then say \"cache\": \"warm\")"
        )
    );
}
