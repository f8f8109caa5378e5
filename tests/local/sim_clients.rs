//! `rigrun sim` as independent clients see it: a reply's text re-counted by the documented token
//! rule, `/metrics`' latency histograms parsed here and set against what this client measured,
//! the tokenize endpoints against usage, the prefix-cache resets, and speculative acceptance
//! that follows the prompt's repetitiveness.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::sim_support::{profile_yaml, Sim};
use serde_json::{json, Value};

/// Tokens a text counts by the sim's documented rule: one per 4 bytes of UTF-8, rounded up.
fn rule_count(text: &str) -> u64 {
    text.len().div_ceil(4) as u64
}

/// A reply's text and usage, whole or streamed (the stream's pieces joined, the usage chunk's).
async fn text_and_usage(sim: &Sim, path: &str, mut body: Value) -> (String, Value) {
    if body["stream"] != json!(true) {
        let (status, reply) = sim.post(path, &body.to_string()).await;
        assert_eq!(status, 200, "{reply}");
        let choice = &reply["choices"][0];
        let text = choice["text"].as_str().or(choice["message"]["content"].as_str());
        return (text.expect("a text").to_string(), reply["usage"].clone());
    }
    body["stream_options"] = json!({"include_usage": true});
    let events = sim.stream(path, &body.to_string()).await.all().await;
    let (mut text, mut usage) = (String::new(), Value::Null);
    for event in events.iter().filter(|e| e.data != "[DONE]") {
        let chunk = event.json();
        if let Some(choice) = chunk["choices"].get(0) {
            let piece = choice["text"].as_str().or(choice["delta"]["content"].as_str());
            text.push_str(piece.unwrap_or(""));
        }
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
    }
    (text, usage)
}

/// Re-counted by the rule, a reply's text is its `completion_tokens`: chat and completions,
/// streamed and whole; with a natural EOS, one less (the EOS token has no text).
#[tokio::test]
async fn replies_count_under_the_documented_rule_as_usage_counts_them() {
    let sim = Sim::start("tiny", &[]);
    for (path, base) in [
        ("/v1/completions", json!({"prompt": "Count me, please."})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hi there"}]}),
        ),
    ] {
        for stream in [false, true] {
            for max_tokens in [1, 37, 300] {
                let mut body = base.clone();
                body["max_tokens"] = json!(max_tokens);
                body["ignore_eos"] = json!(true);
                body["stream"] = json!(stream);
                let (text, usage) = text_and_usage(&sim, path, body).await;
                assert_eq!(usage["completion_tokens"], max_tokens, "{path} {stream}");
                assert_eq!(rule_count(&text), max_tokens, "{path} stream {stream}: {text:?}");
            }
            let mut natural = base.clone();
            natural["max_tokens"] = json!(1000);
            natural["stream"] = json!(stream);
            let (text, usage) = text_and_usage(&sim, path, natural).await;
            let tokens = usage["completion_tokens"].as_u64().unwrap();
            assert!(
                tokens < 1000,
                "the tiny profile ends replies on their own: {usage}"
            );
            assert_eq!(rule_count(&text), tokens - 1, "{path} stream {stream}");
        }
    }
}

/// One series of an exposition: labels and value.
type Series = Vec<(BTreeMap<String, String>, f64)>;

/// Parses Prometheus text written by anyone: `name{k="v",...} value` lines, comments skipped.
fn parse_exposition(text: &str) -> BTreeMap<String, Series> {
    let mut out: BTreeMap<String, Series> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').expect("name and value");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').expect("closing brace")),
            None => (series, ""),
        };
        let labels = labels
            .split("\",")
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once("=\"").expect("key=\"value\"");
                (key.to_string(), value.trim_end_matches('"').to_string())
            })
            .collect();
        let value = if value == "+Inf" {
            f64::INFINITY
        } else {
            value.parse().expect("a number")
        };
        out.entry(name.to_string()).or_default().push((labels, value));
    }
    out
}

/// A histogram read back: its cumulative `(le, count)` buckets, `_sum` and `_count`.
struct Histogram {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

fn histogram(all: &BTreeMap<String, Series>, name: &str, model: &str) -> Histogram {
    let one = |suffix: &str| -> &Series {
        all.get(&format!("{name}{suffix}"))
            .unwrap_or_else(|| panic!("{name}{suffix} missing"))
    };
    for (labels, _) in one("_sum").iter().chain(one("_count")).chain(one("_bucket")) {
        assert_eq!(labels["model_name"], model, "{name}");
    }
    let le = |labels: &BTreeMap<String, String>| match labels["le"].as_str() {
        "+Inf" => f64::INFINITY,
        le => le.parse().expect("le is a number"),
    };
    Histogram {
        buckets: one("_bucket")
            .iter()
            .map(|(labels, v)| (le(labels), *v))
            .collect(),
        sum: one("_sum")[0].1,
        count: one("_count")[0].1,
    }
}

/// What this client measured of a streamed request, in seconds.
#[derive(Default)]
struct Measured {
    ttft: f64,
    e2e: f64,
    /// From the first token's chunk to the last one's.
    decode: f64,
    prompt_tokens: f64,
    completion_tokens: f64,
}

/// Sends a streamed completion of `max_tokens` and times it as a benchmark client does.
async fn timed(sim: &Sim, prompt: &str, max_tokens: u32) -> Measured {
    let body = json!({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true,
        "stream": true, "stream_options": {"include_usage": true}});
    let sent = Instant::now();
    let events = sim.stream("/v1/completions", &body.to_string()).await.all().await;
    let token_times: Vec<Instant> = events
        .iter()
        .filter(|e| e.data != "[DONE]" && e.json()["choices"].get(0).is_some())
        .map(|e| e.at)
        .collect();
    let usage = events
        .iter()
        .rev()
        .find(|e| e.data != "[DONE]")
        .map(|e| e.json()["usage"].clone())
        .expect("a usage chunk");
    let (first, last) = (token_times[0], *token_times.last().unwrap());
    Measured {
        ttft: (first - sent).as_secs_f64(),
        e2e: (last - sent).as_secs_f64(),
        decode: (last - first).as_secs_f64(),
        prompt_tokens: usage["prompt_tokens"].as_f64().unwrap(),
        completion_tokens: usage["completion_tokens"].as_f64().unwrap(),
    }
}

/// Checks that `h`'s buckets are cumulative and end at `+Inf` with its count.
fn assert_cumulative(name: &str, h: &Histogram) {
    assert!(
        h.buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{name}"
    );
    assert_eq!(h.buckets.last(), Some(&(f64::INFINITY, h.count)), "{name}");
}

/// One engine's histogram names, and the first bound of its TTFT buckets.
struct EngineNames {
    names: &'static str,
    ttft: &'static str,
    itl: &'static str,
    e2e: &'static str,
    prompt: &'static str,
    generation: &'static str,
    first_ttft_bound: f64,
}

const ENGINES: [EngineNames; 2] = [
    EngineNames {
        names: "vllm",
        ttft: "vllm:time_to_first_token_seconds",
        itl: "vllm:inter_token_latency_seconds",
        e2e: "vllm:e2e_request_latency_seconds",
        prompt: "vllm:request_prompt_tokens",
        generation: "vllm:request_generation_tokens",
        first_ttft_bound: 0.001,
    },
    EngineNames {
        names: "sglang",
        ttft: "sglang:time_to_first_token_seconds",
        itl: "sglang:inter_token_latency_seconds",
        e2e: "sglang:e2e_request_latency_seconds",
        prompt: "sglang:prompt_tokens_histogram",
        generation: "sglang:generation_tokens_histogram",
        first_ttft_bound: 0.1,
    },
];

/// `server` (a sum of times) against what the client measured: never more (the server's
/// times start after the client sent and end before the client reads), and less by at most
/// 20 ms per request and 5% (loopback and parsing, and on a loaded machine the client's
/// scheduling); `Err` says by how much.
fn under_by_little(name: &str, server: f64, client: f64, requests: f64) -> Result<(), String> {
    assert!(
        server <= client + 1e-6,
        "{name}: server {server} > client {client}"
    );
    if client - server < 0.02 * requests + 0.05 * client {
        Ok(())
    } else {
        Err(format!("{name}: server {server}, client {client}"))
    }
}

/// Serves three streamed requests on a fresh sim under `engine`'s names and checks its
/// histograms: counts and token sums exactly (panics), the times within tolerance (`Err`,
/// as a loaded machine may delay this client).
async fn check_histograms(engine: &EngineNames, profile: &std::path::Path) -> Result<(), String> {
    let sim = Sim::start(profile.to_str().unwrap(), &["--metrics-names", engine.names]);
    let mut measured = Vec::new();
    for (i, max_tokens) in [3, 5, 8].into_iter().enumerate() {
        measured.push(timed(&sim, &format!("request {i} of the histogram test"), max_tokens).await);
    }
    let (_, text) = sim.get("/metrics").await;
    let all = parse_exposition(&text);
    let read = |name| histogram(&all, name, "test/model");
    let sum = |f: fn(&Measured) -> f64| measured.iter().map(f).sum::<f64>();
    let n = measured.len() as f64;
    let (ttft, e2e, itl) = (read(engine.ttft), read(engine.e2e), read(engine.itl));
    assert_eq!(
        ttft.buckets[0].0, engine.first_ttft_bound,
        "{}: the engine's bounds",
        engine.names
    );
    for (name, h) in [(engine.ttft, &ttft), (engine.e2e, &e2e), (engine.itl, &itl)] {
        assert_cumulative(name, h);
    }
    assert_eq!((ttft.count, e2e.count), (n, n), "one per request");
    assert_eq!(
        itl.count,
        sum(|m| m.completion_tokens - 1.0),
        "{}: one per gap",
        engine.itl
    );
    for (name, client) in [
        (engine.prompt, sum(|m| m.prompt_tokens)),
        (engine.generation, sum(|m| m.completion_tokens)),
    ] {
        let h = read(name);
        assert_cumulative(name, &h);
        assert_eq!((h.count, h.sum), (n, client), "{name}");
    }
    under_by_little(engine.ttft, ttft.sum, sum(|m| m.ttft), n)?;
    under_by_little(engine.e2e, e2e.sum, sum(|m| m.e2e), n)?;
    // Gaps between tokens: both ends shift alike, so either side may be a little longer.
    let decode = sum(|m| m.decode);
    if (itl.sum - decode).abs() >= 0.02 * n + 0.05 * decode {
        return Err(format!("{}: server {}, client {decode}", engine.itl, itl.sum));
    }
    if engine.names == "vllm" {
        let tpot = read("vllm:request_time_per_output_token_seconds");
        assert_cumulative("tpot", &tpot);
        let client: f64 = measured
            .iter()
            .map(|m| m.decode / (m.completion_tokens - 1.0))
            .sum();
        if (tpot.sum - client).abs() >= 0.005 * n + 0.05 * client {
            return Err(format!("request TPOT: server {}, client {client}", tpot.sum));
        }
    }
    Ok(())
}

/// `/metrics` serves each engine's latency histograms: counts are the requests served (the
/// gaps between tokens for ITL), sums agree with what this client measured — the server's
/// times start when it received a request and end at the step that made the token, so they
/// lie a little under the client's — and buckets are cumulative, with the engines' bounds.
/// The times are compared up to 3 times, as other processes can only delay the client.
#[tokio::test]
async fn metrics_histograms_agree_with_what_the_client_measured() {
    // 100 ms steps, so that loopback HTTP (~1 ms, more on a loaded machine) is small beside the
    // times compared: a token early or late by a step shows.
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.yaml");
    std::fs::write(&profile, profile_yaml(65_536, 4096, 100.0, 100_000, 2048)).unwrap();
    for engine in &ENGINES {
        let mut misses = Vec::new();
        while let Err(miss) = check_histograms(engine, &profile).await {
            misses.push(miss);
            assert!(misses.len() < 3, "{}: {misses:?}", engine.names);
        }
    }
}

/// The tokenize endpoints count what usage counts for the same text: vLLM's (prompt or
/// messages), SGLang's, and llama.cpp's `{"content"}` form.
#[tokio::test]
async fn tokenize_counts_what_usage_counts() {
    for names in ["vllm", "sglang"] {
        let sim = Sim::start("tiny", &["--metrics-names", names]);
        let text = "Tokenize this sentence, then compare it with the usage of a completion.";
        let (status, reply) = sim
            .post(
                "/tokenize",
                &json!({"model": "rigrun/tiny", "prompt": text}).to_string(),
            )
            .await;
        assert_eq!(status, 200, "{reply}");
        let (_, completion) = sim
            .post(
                "/v1/completions",
                &json!({"prompt": text, "max_tokens": 1}).to_string(),
            )
            .await;
        assert_eq!(reply["count"], completion["usage"]["prompt_tokens"], "{names}");
        assert_eq!(reply["tokens"].as_array().unwrap().len() as u64, rule_count(text));
        assert_eq!(reply["max_model_len"], 4096);
        assert_eq!(reply.get("token_strs").is_some(), names == "vllm", "{reply}");
        let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]);
        let (_, chat_tokens) = sim
            .post("/tokenize", &json!({"messages": messages}).to_string())
            .await;
        let (_, chat) = sim
            .post(
                "/v1/chat/completions",
                &json!({"messages": messages, "max_tokens": 1}).to_string(),
            )
            .await;
        assert_eq!(chat_tokens["count"], chat["usage"]["prompt_tokens"], "{names}");
        let (status, llama) = sim.post("/tokenize", &json!({"content": text}).to_string()).await;
        assert_eq!(status, 200);
        assert_eq!(llama.as_object().unwrap().keys().collect::<Vec<_>>(), ["tokens"]);
        assert_eq!(
            llama["tokens"], reply["tokens"],
            "the same ids in llama.cpp's form"
        );
    }
}

/// A repeated prompt hits the prefix cache; after vLLM's `/reset_prefix_cache` (or SGLang's
/// `/flush_cache`, by `--metrics-names`) it misses, in usage and in `/metrics`.
#[tokio::test]
async fn resetting_the_prefix_cache_makes_a_repeat_miss() {
    for (names, route, other) in [
        ("vllm", "/reset_prefix_cache", "/flush_cache"),
        ("sglang", "/flush_cache", "/reset_prefix_cache"),
    ] {
        let sim = Sim::start("tiny", &["--metrics-names", names]);
        let body = json!({"prompt": "x".repeat(400), "max_tokens": 1}).to_string();
        let cached = |reply: &Value| reply["usage"]["prompt_tokens_details"]["cached_tokens"].clone();
        let (_, first) = sim.post("/v1/completions", &body).await;
        assert_eq!(cached(&first), 0);
        let (_, repeat) = sim.post("/v1/completions", &body).await;
        assert_eq!(
            cached(&repeat),
            96,
            "{names}: 99 of 100 tokens usable, whole 16-token blocks"
        );
        let (status, reply) = sim.post(route, "").await;
        assert_eq!(status, 200, "{names} {route}: {reply}");
        let (_, after) = sim.post("/v1/completions", &body).await;
        assert_eq!(cached(&after), 0, "{names}: a miss after {route}");
        let (_, again) = sim.post("/v1/completions", &body).await;
        assert_eq!(cached(&again), 96, "{names}: and the cache fills again");
        assert_eq!(sim.post(other, "").await.0, 404, "{names} has no {other}");
        if names == "vllm" {
            assert_eq!(sim.metric("vllm:prefix_cache_hits_total").await, 192.0);
        }
    }
}

/// With `--repetitive-acceptance`, a repetitive prompt (catid's one token) gets its drafts
/// accepted at that rate and prose at `--acceptance`'s, as vLLM's counters show.
#[tokio::test]
async fn speculative_acceptance_rises_with_the_prompts_repetitiveness() {
    let sim = Sim::start(
        "tiny",
        &[
            "--speculative-tokens",
            "2",
            "--acceptance",
            "0.5",
            "--repetitive-acceptance",
            "0.9",
        ],
    );
    let prose = "Speculative decoding drafts a few tokens with a small head, then the model \
                 verifies them in one pass; how many survive depends on the text, since code, \
                 lists and quotations repeat what came before while fresh prose rarely does.";
    let catid = serde_json::to_string(&vec![23066; 200]).unwrap();
    let mut rates = Vec::new();
    for prompt in [json!(prose), serde_json::from_str::<Value>(&catid).unwrap()] {
        let drafted = sim.metric("vllm:spec_decode_num_draft_tokens_total").await;
        let accepted = sim.metric("vllm:spec_decode_num_accepted_tokens_total").await;
        let body = json!({"prompt": prompt, "max_tokens": 400, "ignore_eos": true});
        let (status, reply) = sim.post("/v1/completions", &body.to_string()).await;
        assert_eq!(status, 200, "{reply}");
        let drafted = sim.metric("vllm:spec_decode_num_draft_tokens_total").await - drafted;
        let accepted = sim.metric("vllm:spec_decode_num_accepted_tokens_total").await - accepted;
        rates.push(accepted / drafted);
    }
    // Per draft token, p + p² of 2: 0.375 at p = 0.5; at p = 0.9 × 0.99 + 0.5 × 0.01, 0.85.
    assert!((rates[0] - 0.375).abs() < 0.02, "prose: {rates:?}");
    assert!((rates[1] - 0.85).abs() < 0.02, "catid: {rates:?}");
}
