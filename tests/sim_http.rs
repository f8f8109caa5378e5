//! HTTP conformance of `rigrun sim` (tiny profile): routes, response shapes, SSE framing,
//! usage counts, error shapes, determinism.

mod sim_support;

use serde_json::{json, Value};
use sim_support::{Events, Sim};

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
    rest.iter().map(sim_support::Event::json).collect()
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
        json!({"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10})
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
        json!({"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17})
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
        json!({"prompt_tokens": 16, "completion_tokens": 5, "total_tokens": 21})
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
