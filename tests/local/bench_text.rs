//! `rigrun bench --workload text` against the real `rigrun sim` and against small servers of the
//! test's own: the prompts the server receives are passages of the shipped novel, each counting
//! exactly its drawn length by the sim's documented rule (4 bytes of UTF-8 a token, rounded up;
//! counted here, not by rigrun), each request its own passage; a server without a tokenize
//! endpoint is refused; a usage that disagrees with the cut is flagged.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rigrun::bench::lengths::{Dist, Lengths};
use serde_json::{json, Value};

use crate::bench_support::*;

/// The shipped corpus, read from the repository (not through rigrun).
fn corpus() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/bench/corpus/pride-and-prejudice.txt"
    );
    std::fs::read_to_string(path).unwrap()
}

/// Tokens of a text by the sim's documented rule (src/sim/README.md): 4 bytes a token, rounded
/// up; a completion prompt at least 1.
fn rule_count(text: &str) -> u64 {
    (text.len().div_ceil(4) as u64).max(1)
}

/// The bodies of the completion requests that passed through a proxy.
type Seen = Arc<Mutex<Vec<Value>>>;

/// A proxy to `target` that keeps the body of every `/v1/...completions` request.
fn recording_proxy(target: &str) -> (TestServer, Seen) {
    let seen: Seen = Arc::default();
    let state = (target.to_string(), seen.clone(), reqwest::Client::new());
    async fn forward(
        State((target, seen, client)): State<(String, Seen, reqwest::Client)>,
        uri: Uri,
        method: axum::http::Method,
        body: Bytes,
    ) -> Response {
        if uri.path().ends_with("completions") {
            seen.lock().unwrap().push(serde_json::from_slice(&body).unwrap());
        }
        let url = format!("{target}{}", uri.path());
        let reply = client
            .request(method, url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = StatusCode::from_u16(reply.status().as_u16()).unwrap();
        (status, Body::from_stream(reply.bytes_stream())).into_response()
    }
    let app = Router::new().fallback(forward).with_state(state);
    (TestServer::start(app), seen)
}

/// The lengths `rigrun bench` draws for requests `0..n` (warm-up first) with these settings.
fn drawn(input_len: u32, dist: Dist, seed: u64, n: u64) -> Vec<u64> {
    let lengths = Lengths {
        input_len,
        input_dist: dist,
        output_len: 8,
        output_dist: dist,
        seed,
    };
    (0..n).map(|i| u64::from(lengths.of(i).0)).collect()
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

/// The prompt texts the proxy saw, in the order they arrived.
fn prompts(seen: &Seen, chat: bool) -> Vec<String> {
    let bodies = std::mem::take(&mut *seen.lock().unwrap());
    bodies
        .iter()
        .map(|b| {
            let text = if chat {
                assert_eq!(b["messages"].as_array().unwrap().len(), 1, "{b}");
                &b["messages"][0]["content"]
            } else {
                &b["prompt"]
            };
            text.as_str()
                .unwrap_or_else(|| panic!("a text prompt: {b}"))
                .to_string()
        })
        .collect()
}

const ARGS: [&str; 14] = [
    "--workload",
    "text",
    "--concurrency",
    "2",
    "--warmup",
    "2",
    "--num-requests",
    "12",
    "--output-len",
    "8",
    "--range-ratio",
    "0.5",
    "--input-len",
    "150",
];

#[test]
fn the_sim_receives_passages_of_exactly_the_drawn_lengths() {
    let sim = Sim::start("tiny", &[]);
    let (proxy, seen) = recording_proxy(&sim.base);
    let corpus = corpus();
    let dist = Dist::Uniform { ratio: 0.5 };
    let lengths = drawn(150, dist, 11, 14);
    // Chat: the message's text counts the drawn length; the usage adds the sim's ChatML frame
    // (5 tokens a message, 3 for the reply's header: src/sim/tokens.rs).
    for (api, template) in [("completions", 0), ("chat", 8)] {
        let run = bench(
            &proxy.base,
            &[&ARGS[..], &["--seed", "11", "--api", api]].concat(),
        );
        assert_eq!(run.code, 0, "{api}: {}", run.stderr);
        let texts = prompts(&seen, api == "chat");
        assert_eq!(texts.len(), 14, "2 warm-up and 12 measured requests");
        let counts: Vec<u64> = texts.iter().map(|t| rule_count(t)).collect();
        assert_eq!(
            sorted(counts),
            sorted(lengths.clone()),
            "{api}: exact lengths, as drawn"
        );
        for text in &texts {
            assert!(
                corpus.contains(text.as_str()),
                "{api}: not a passage of the novel: {text:?}"
            );
            assert!(text.split(' ').count() > 10, "natural text, words: {text:?}");
        }
        // Every request its own passage: no two share their first 64 bytes (a sim cache block
        // is 16 tokens, 64 bytes), so no prefix cache serves them.
        let mut starts: Vec<&str> = texts.iter().map(|t| &t[..64.min(t.len())]).collect();
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), 14, "{api}: distinct passages");
        let r = &run.records[0];
        let measured: u64 = lengths[2..].iter().sum();
        assert_eq!(
            num(r, "total_input_tokens") as u64,
            measured + 12 * template,
            "{r}"
        );
        assert_eq!(r["workload"], "text");
        assert_eq!(r["tokenizer"], "server POST /tokenize (vLLM/SGLang form)");
        assert!(r["text_corpus"]
            .as_str()
            .unwrap()
            .starts_with("pride-and-prejudice"));
        assert_eq!(r["text_corpus_sha256"].as_str().unwrap().len(), 64);
        assert_eq!(
            (
                r["prompt_tokens_checked"].clone(),
                r["prompt_tokens_mismatched"].clone()
            ),
            (json!(12), json!(0))
        );
        assert_eq!(r["input_dist"], "uniform:ratio=0.5");
        assert_eq!(r["valid"], true, "{r}");
        match api {
            "chat" => assert_eq!(r["chat_template_tokens"], 8),
            _ => assert!(r.get("chat_template_tokens").is_none()),
        }
    }
    // The same seed sends the same passages; another seed others.
    let again = |seed: &str| {
        let run = bench(&proxy.base, &[&ARGS[..], &["--seed", seed]].concat());
        assert_eq!(run.code, 0, "{}", run.stderr);
        sorted_texts(prompts(&seen, false))
    };
    let first = again("11");
    assert_eq!(first, again("11"));
    let other = again("12");
    assert!(
        first.iter().all(|t| !other.contains(t)),
        "seed 12 sends other passages"
    );
}

fn sorted_texts(mut v: Vec<String>) -> Vec<String> {
    v.sort_unstable();
    v
}

/// How the test's own server answers `/tokenize`.
#[derive(Clone, Copy)]
enum Tokenize {
    /// No endpoint (404), as a server that has none.
    None,
    /// vLLM's form, by the 4-byte rule.
    Vllm,
    /// llama.cpp's form only, by the 4-byte rule (a body without `content` counts no tokens,
    /// as llama-server answers vLLM's form: 200 and an empty list).
    Llama,
}

/// A server of the test's own: one model, `/tokenize` as `tokenize` says, and completions whose
/// usage reports the prompt's count by the rule plus `skew`, after 30 ms (not streamed: the
/// tests pass --no-stream).
fn fake_server(tokenize: Tokenize, skew: u64) -> TestServer {
    async fn tokenize_route(State((form, _)): State<(Tokenize, u64)>, body: Bytes) -> Response {
        let v: Value = serde_json::from_slice(&body).unwrap();
        match (form, v.get("prompt"), v.get("content")) {
            (Tokenize::Vllm, Some(Value::String(text)), _) => {
                let n = rule_count(text);
                Json(json!({"count": n, "max_model_len": 4096, "tokens": vec![7; n as usize]}))
                    .into_response()
            }
            // As llama-server does: it reads `content` alone, so vLLM's form counts nothing.
            (Tokenize::Llama, _, content) => {
                let text = content.and_then(Value::as_str).unwrap_or("");
                Json(json!({"tokens": vec![7; text.len().div_ceil(4)]})).into_response()
            }
            (Tokenize::None, ..) => StatusCode::NOT_FOUND.into_response(),
            _ => (StatusCode::BAD_REQUEST, "unsupported body").into_response(),
        }
    }
    async fn completions(State((_, skew)): State<(Tokenize, u64)>, Json(v): Json<Value>) -> Json<Value> {
        // A model's time per request, so a closed loop of one keeps it busy (a reply in well
        // under a millisecond would leave the client's own gaps between requests measured).
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let n = rule_count(v["prompt"].as_str().unwrap());
        let out = v["max_tokens"].as_u64().unwrap();
        Json(json!({
            "choices": [{"index": 0, "text": " x".repeat(out as usize), "finish_reason": "length"}],
            "usage": {"prompt_tokens": n + skew, "completion_tokens": out, "total_tokens": n + skew + out}
        }))
    }
    let app = Router::new()
        .route(
            "/v1/models",
            get(|| async { Json(json!({"data": [{"id": "fake"}]})) }),
        )
        .route("/tokenize", post(tokenize_route))
        .route("/v1/completions", post(completions))
        .with_state((tokenize, skew));
    TestServer::start(app)
}

const SMALL: [&str; 13] = [
    "--workload",
    "text",
    "--no-stream",
    "--concurrency",
    "1",
    "--num-requests",
    "5",
    "--input-len",
    "40",
    "--output-len",
    "4",
    "--seed",
    "3",
];

#[test]
fn a_server_without_a_tokenize_endpoint_is_refused() {
    let server = fake_server(Tokenize::None, 0);
    let run = bench(&server.base, &SMALL);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.records.is_empty());
    for said in [
        "serves no tokenize endpoint",
        "HTTP 404",
        "use --workload random or catid",
        "a prompts file",
    ] {
        assert!(run.stderr.contains(said), "{said}: {}", run.stderr);
    }
}

#[test]
fn a_usage_other_than_the_cut_is_flagged() {
    let server = fake_server(Tokenize::Vllm, 1);
    let run = bench(&server.base, &SMALL);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = &run.records[0];
    assert_eq!(r["valid"], false);
    assert_eq!(r["prompt_tokens_mismatched"], 5);
    let problems = r["problems"].to_string();
    assert!(
        problems.contains(
            "5 of 5 completed requests reported other prompt tokens than their prompts were cut to"
        ) && problems.contains("expected 40, usage.prompt_tokens 41"),
        "{problems}"
    );
}

#[test]
fn llama_cpps_tokenize_form_cuts_completions_and_refuses_chat() {
    let server = fake_server(Tokenize::Llama, 0);
    let run = bench(&server.base, &SMALL);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = &run.records[0];
    assert_eq!(r["tokenizer"], "server POST /tokenize (llama.cpp form)");
    assert_eq!(
        (r["valid"].clone(), r["prompt_tokens_checked"].clone()),
        (json!(true), json!(5))
    );
    assert_eq!(num(r, "total_input_tokens"), 5.0 * 40.0);
    let chat = bench(&server.base, &[&SMALL[..], &["--api", "chat"]].concat());
    assert_eq!(chat.code, 2, "{}", chat.stderr);
    assert!(
        chat.stderr.contains("does not count a chat with its template"),
        "{}",
        chat.stderr
    );
    assert!(chat.stderr.contains("use --api completions"), "{}", chat.stderr);
}

#[test]
fn flags_text_cannot_serve_are_refused_before_any_request() {
    for (flags, said) in [
        (
            &["--duration", "5s"][..],
            "give --num-requests instead of --duration",
        ),
        (&["--turns", "2"][..], "leave out --turns"),
        (&["--unique-prefix"][..], "leave out --unique-prefix"),
    ] {
        // No server listens there: the flags are refused before it is asked anything.
        let run = bench(
            "http://127.0.0.1:9",
            &[&["--workload", "text"][..], flags].concat(),
        );
        assert_eq!(run.code, 2, "{flags:?}: {}", run.stderr);
        assert!(run.stderr.contains(said), "{flags:?}: {}", run.stderr);
    }
}
