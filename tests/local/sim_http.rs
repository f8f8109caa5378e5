//! HTTP conformance of `rigrun sim` (tiny profile): routes, response shapes, SSE framing,
//! usage counts, error shapes, determinism, and the request fields vLLM honours (`min_tokens`,
//! `stream_options`, prefix-cache hits in `usage`).

use crate::sim_support::{Events, Sim};
use serde_json::{json, Value};

/// Asserts an OpenAI-style error body with `code`.
fn assert_error(status: u16, body: &Value, code: u16) {
    assert_eq!(status, code, "{body}");
    let error = &body["error"];
    assert_eq!(error["code"], code, "{body}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(error["type"].as_str().is_some_and(|t| !t.is_empty()), "{body}");
}

/// The `data:` payloads of a finished stream, checking it ends with exactly one `[DONE]`.
async fn stream_chunks(events: Events) -> Vec<Value> {
    let events = events.all().await;
    let (last, rest) = events.split_last().expect("at least one event");
    assert_eq!(last.data, "[DONE]");
    rest.iter().map(crate::sim_support::Event::json).collect()
}

#[tokio::test]
async fn models_and_health() {
    let sim = Sim::start("tiny", &[]);
    let (status, body) = sim.get("/v1/models").await;
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["object"], "list");
    let model = &body["data"][0];
    assert_eq!(
        (model["id"].as_str(), model["object"].as_str()),
        (Some("rigrun/tiny"), Some("model"))
    );
    assert_eq!(model["max_model_len"], 4096);
    assert!(model["owned_by"].is_string());
    assert_eq!(sim.get("/health").await.0, 200);
    let (status, body) = sim.get("/version").await;
    assert_eq!(status, 200);
    let version: Value = serde_json::from_str(&body).unwrap();
    assert!(
        version["version"].as_str().unwrap().starts_with("rigrun-sim "),
        "{version}"
    );
}

#[tokio::test]
async fn completion_counts_usage_and_batches_prompts() {
    let sim = Sim::start("tiny", &[]);
    let (status, body) = sim
        .post(
            "/v1/completions",
            r#"{"model":"rigrun/tiny","prompt":"abcdefghi","max_tokens":7,"ignore_eos":true}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "text_completion");
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert!(!body["choices"][0]["text"].as_str().unwrap().is_empty());

    let (status, body) = sim
        .post(
            "/v1/completions",
            r#"{"prompt":[[1,2,3],"abcd",[9]],"max_tokens":4,"ignore_eos":true}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let indexes: Vec<u64> = body["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, vec![0, 1, 2]);
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17,
            "prompt_tokens_details": {"cached_tokens": 0}})
    );
}

#[tokio::test]
async fn completion_stream_is_framed_and_matches_the_whole_response() {
    let sim = Sim::start("tiny", &[]);
    let request = json!({"prompt": [5, 6, 7], "max_tokens": 12, "ignore_eos": true});
    let (_, whole) = sim.post("/v1/completions", &request.to_string()).await;
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = stream_chunks(sim.stream("/v1/completions", &streamed.to_string()).await).await;
    let (usage, tokens) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], whole["usage"]);
    assert_eq!(tokens.len(), 12);
    let text: String = tokens
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, whole["choices"][0]["text"].as_str().unwrap());
    assert!(tokens[..11]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));
    assert_eq!(tokens[11]["choices"][0]["finish_reason"], "length");
    assert!(tokens
        .iter()
        .all(|c| c["id"] == tokens[0]["id"] && c["object"] == "text_completion"));

    // Without include_usage there is no usage chunk.
    streamed["stream_options"] = json!({"include_usage": false});
    let chunks = stream_chunks(sim.stream("/v1/completions", &streamed.to_string()).await).await;
    assert_eq!(chunks.len(), 12);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
}

#[tokio::test]
async fn chat_whole_and_streamed() {
    let sim = Sim::start("tiny", &[]);
    let request = json!({
        "model": "rigrun/tiny",
        "messages": [{"role": "system", "content": "abcd"}, {"role": "user", "content": "abcdefgh"}],
        "max_tokens": 5, "ignore_eos": true,
    });
    let (status, whole) = sim.post("/v1/chat/completions", &request.to_string()).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["message"]["role"], "assistant");
    // 5 + 1 and 5 + 2 tokens for the messages, 3 for the reply header.
    assert_eq!(
        whole["usage"],
        json!({"prompt_tokens": 16, "completion_tokens": 5, "total_tokens": 21,
            "prompt_tokens_details": {"cached_tokens": 0}})
    );

    let mut streamed = request;
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = stream_chunks(sim.stream("/v1/chat/completions", &streamed.to_string()).await).await;
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks[1..6]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        content,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[6]["usage"], whole["usage"]);
}

#[tokio::test]
async fn errors_are_shaped_like_real_servers() {
    let sim = Sim::start("tiny", &[]);
    let bad_requests = [
        ("/v1/completions", r#"{"prompt": "abc""#),
        ("/v1/completions", "not json"),
        ("/v1/completions", r#"{"prompt": 42}"#),
        ("/v1/completions", r#"{"prompt": "x", "max_tokens": "ten"}"#),
        ("/v1/completions", r#"{"prompt": "x", "stream": "yes"}"#),
        ("/v1/completions", r#"{"prompt": [1, -2]}"#),
        ("/v1/completions", r#"{"prompt": "x", "max_tokens": 4096}"#),
        ("/v1/completions", r#"{"prompt": "x", "max_tokens": 0}"#),
        ("/v1/chat/completions", r#"{"messages": "hi"}"#),
        ("/v1/chat/completions", r#"{"messages": []}"#),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}"#,
        ),
    ];
    for (path, body) in bad_requests {
        let (status, response) = sim.post(path, body).await;
        assert_error(status, &response, 400);
    }
    let (status, body) = sim
        .post("/v1/completions", r#"{"prompt": "x", "max_tokens": 4096}"#)
        .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum context length is 4096"),
        "{status} {body}"
    );
    let (status, body) = sim
        .post("/v1/completions", r#"{"model": "gpt-4", "prompt": "x"}"#)
        .await;
    assert_error(status, &body, 404);
    let (status, body) = sim
        .post("/v1/chat/completions", r#"{"model": "gpt-4", "messages": []}"#)
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = sim.post("/v2/completions", "{}").await;
    assert_error(status, &body, 404);
    let (status, text) = sim.get("/nowhere").await;
    assert_error(status, &serde_json::from_str(&text).unwrap(), 404);
    let (status, text) = sim.get("/v1/completions").await;
    assert_error(status, &serde_json::from_str(&text).unwrap(), 405);
}

#[tokio::test]
async fn output_is_deterministic() {
    let sim = Sim::start("tiny", &[]);
    let other = Sim::start("tiny", &[]);
    let request = r#"{"prompt": "tell me about GPUs", "max_tokens": 20, "ignore_eos": true}"#;
    let (_, a) = sim.post("/v1/completions", request).await;
    let (_, b) = sim.post("/v1/completions", request).await;
    let (_, c) = other.post("/v1/completions", request).await;
    let text = |v: &Value| v["choices"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(text(&a), text(&b));
    assert_eq!(text(&a), text(&c));
    let (_, seeded) = sim
        .post(
            "/v1/completions",
            r#"{"prompt": "tell me about GPUs", "max_tokens": 20, "ignore_eos": true, "seed": 1}"#,
        )
        .await;
    assert_ne!(text(&a), text(&seeded));
}

#[tokio::test]
async fn eos_and_stop_strings_end_early() {
    let sim = Sim::start("tiny", &[]);
    // tiny ends replies on its own after 8..=256 tokens unless ignore_eos.
    let (_, body) = sim
        .post("/v1/completions", r#"{"prompt": "abc", "max_tokens": 1000}"#)
        .await;
    let used = body["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((8..=256).contains(&used), "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");

    let (_, full) = sim
        .post(
            "/v1/completions",
            r#"{"prompt": "abc", "max_tokens": 200, "ignore_eos": true}"#,
        )
        .await;
    let full_text = full["choices"][0]["text"].as_str().unwrap();
    let stop = " the";
    let cut = full_text
        .find(stop)
        .expect("' the' is common in the sim's vocabulary");
    let request = json!({"prompt": "abc", "max_tokens": 200, "ignore_eos": true, "stop": [stop]});
    let (_, stopped) = sim.post("/v1/completions", &request.to_string()).await;
    assert_eq!(stopped["choices"][0]["text"].as_str().unwrap(), &full_text[..cut]);
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    assert!(stopped["usage"]["completion_tokens"].as_u64().unwrap() < 200);
}

/// Longest reply tiny gives without `ignore_eos` (its `natural_length.max`).
const TINY_NATURAL_MAX: u64 = 256;
/// tiny's prefix-cache block size.
const TINY_BLOCK: u64 = 16;

#[tokio::test]
async fn min_tokens_fixes_the_output_length_without_ignore_eos() {
    let sim = Sim::start("tiny", &[]);
    let n = TINY_NATURAL_MAX + 44;
    // Without min_tokens the reply ends on its own, well before n.
    let (_, free) = sim
        .post(
            "/v1/completions",
            &json!({"prompt": "abc", "max_tokens": n}).to_string(),
        )
        .await;
    assert_eq!(free["choices"][0]["finish_reason"], "stop", "{free}");
    assert!(free["usage"]["completion_tokens"].as_u64().unwrap() < n);

    let fixed = json!({"prompt": "abc", "max_tokens": n, "min_tokens": n});
    let (status, body) = sim.post("/v1/completions", &fixed.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], n);
    assert_eq!(body["choices"][0]["finish_reason"], "length");

    // Chat and streams honour it too.
    let chat = json!({"messages": [{"role": "user", "content": "abc"}],
        "max_tokens": n, "min_tokens": n, "stream": true});
    let chunks = stream_chunks(sim.stream("/v1/chat/completions", &chat.to_string()).await).await;
    // A role chunk, then one chunk per token.
    assert_eq!(chunks.len() as u64, 1 + n);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn min_tokens_and_stream_options_are_checked_with_vllms_messages() {
    let sim = Sim::start("tiny", &[]);
    let rejected = [
        (
            "/v1/completions",
            json!({"prompt": "abc", "max_tokens": 10, "min_tokens": 11}),
            "min_tokens must be less than or equal to max_tokens=10, got 11.",
        ),
        (
            "/v1/completions",
            json!({"prompt": "abc", "min_tokens": -1}),
            "min_tokens must be greater than or equal to 0, got -1.",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "abc"}], "max_tokens": 3, "min_tokens": 4}),
            "min_tokens must be less than or equal to max_tokens=3, got 4.",
        ),
        (
            "/v1/completions",
            json!({"prompt": "abc", "stream_options": {"include_usage": true}}),
            "Stream options can only be defined when `stream=True`.",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "abc"}], "stream": false,
                "stream_options": {"include_usage": true}}),
            "Stream options can only be defined when `stream=True`.",
        ),
    ];
    for (path, request, message) in rejected {
        let (status, body) = sim.post(path, &request.to_string()).await;
        assert_error(status, &body, 400);
        assert_eq!(body["error"]["message"], message, "{request}");
    }
}

#[tokio::test]
async fn a_repeated_prompt_reports_its_cached_tokens() {
    let sim = Sim::start("tiny", &[]);
    let prompt_len = 1000;
    let prompt: Value = serde_json::from_str(&crate::sim_support::catid_prompt(prompt_len)).unwrap();
    // vLLM's rule: whole blocks, and the last prompt token is always computed.
    let predicted = (prompt_len as u64 - 1) / TINY_BLOCK * TINY_BLOCK;
    let cached = |body: &Value| body["usage"]["prompt_tokens_details"]["cached_tokens"].clone();
    let request = json!({"prompt": prompt, "max_tokens": 2, "ignore_eos": true});
    let (_, first) = sim.post("/v1/completions", &request.to_string()).await;
    assert_eq!(cached(&first), 0, "{first}");
    let (_, again) = sim.post("/v1/completions", &request.to_string()).await;
    assert_eq!(cached(&again), predicted, "{again}");
    assert_eq!(again["usage"]["prompt_tokens"], prompt_len);

    // A batch sums its choices; a streamed usage chunk reports the same.
    let batch = json!({"prompt": [prompt, prompt], "max_tokens": 2, "ignore_eos": true});
    let (_, both) = sim.post("/v1/completions", &batch.to_string()).await;
    assert_eq!(cached(&both), 2 * predicted, "{both}");
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = stream_chunks(sim.stream("/v1/completions", &streamed.to_string()).await).await;
    assert_eq!(cached(chunks.last().unwrap()), predicted);
}

/// The `usage.completion_tokens` of each chunk, checking each usage's other counts.
fn completion_counts(chunks: &[Value], prompt_tokens: u64) -> Vec<u64> {
    chunks
        .iter()
        .map(|c| {
            let usage = &c["usage"];
            assert_eq!(usage["prompt_tokens"], prompt_tokens, "{c}");
            let completion = usage["completion_tokens"].as_u64().expect("usage on every chunk");
            assert_eq!(usage["total_tokens"], prompt_tokens + completion, "{c}");
            completion
        })
        .collect()
}

#[tokio::test]
async fn continuous_usage_stats_put_usage_on_every_chunk() {
    let sim = Sim::start("tiny", &[]);
    let options = json!({"include_usage": true, "continuous_usage_stats": true});
    let request = json!({"prompt": [5, 6, 7], "max_tokens": 12, "ignore_eos": true,
        "stream": true, "stream_options": options});
    let chunks = stream_chunks(sim.stream("/v1/completions", &request.to_string()).await).await;
    let (last, tokens) = chunks.split_last().unwrap();
    assert_eq!(completion_counts(tokens, 3), (1..=12).collect::<Vec<u64>>());
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 12);

    // Chat: the role chunk counts no completion tokens yet.
    let chat = json!({"messages": [{"role": "user", "content": "abcd"}], "max_tokens": 4,
        "ignore_eos": true, "stream": true, "stream_options": options});
    let chunks = stream_chunks(sim.stream("/v1/chat/completions", &chat.to_string()).await).await;
    assert_eq!(completion_counts(&chunks, 9), vec![0, 1, 2, 3, 4, 4]);

    // As in vLLM, continuous usage needs include_usage.
    let mut without = request;
    without["stream_options"] = json!({"include_usage": false, "continuous_usage_stats": true});
    let chunks = stream_chunks(sim.stream("/v1/completions", &without.to_string()).await).await;
    assert_eq!(chunks.len(), 12);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
}
