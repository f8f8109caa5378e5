//! Talking to an OpenAI-compatible server on the host: `/v1/models`, polling until it answers,
//! and one short completion as a smoke test.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::{json, Value as Json};

use crate::facts::ServerFacts;
use crate::http_client::excerpt;
use crate::transport::HttpEndpoint;

/// What `/v1/models` said.
#[derive(Debug)]
pub struct ServerInfo {
    pub models: Vec<String>,
    pub max_model_len: Option<u64>,
    pub reply: Json,
}

impl ServerInfo {
    /// The `server` variable later steps can use: `server.models`, `server.max_model_len`.
    pub fn as_var(&self, url: &str) -> Json {
        json!({ "url": url, "models": self.models, "max_model_len": self.max_model_len })
    }
}

fn models_url(base: &str) -> String {
    format!("{}/v1/models", base.trim_end_matches('/').trim_end_matches("/v1"))
}

fn request(builder: reqwest::RequestBuilder, api_key: Option<&str>) -> reqwest::RequestBuilder {
    match api_key {
        Some(key) => builder.bearer_auth(key),
        None => builder,
    }
}

/// One `GET /v1/models`, with a message that says what went wrong in the user's terms.
pub async fn get_models(endpoint: &HttpEndpoint, api_key: Option<&str>) -> Result<ServerInfo> {
    let (url, reply) = models_reply(endpoint, api_key).await;
    let (status, body) = reply.map_err(|why| anyhow::anyhow!("GET {url}: {why}"))?;
    if !status.is_success() {
        bail!("GET {url}: HTTP {status}: {}", excerpt(body.as_bytes()));
    }
    parse_models(&body).map_err(|e| anyhow::anyhow!("GET {url}: {e}"))
}

/// What already answers HTTP at the endpoint, said as the reason a server rigrun launches there
/// cannot be the one measured; None when nothing answers. Any reply counts (a server that wants
/// a key answers 401): whatever holds the port would be measured in the launched one's place.
pub async fn already_answering(endpoint: &HttpEndpoint, api_key: Option<&str>) -> Option<String> {
    let (url, reply) = models_reply(endpoint, api_key).await;
    let (status, body) = reply.ok()?;
    let what = match parse_models(&body) {
        Ok(info) if status.is_success() => format!("serving {}", info.models.join(", ")),
        _ => format!("GET {url}: HTTP {status}"),
    };
    Some(format!(
        "something already answers at {} ({what}) before the server was launched: stop it first \
         (the host's own server, or one left from an earlier run?), or give this one another port",
        endpoint.base_url
    ))
}

/// Why the server refuses `GET /v1/models`, when it does: no connection, or one closed
/// unanswered. Any reply means it is up, and so does a reply that is only slow (a busy server
/// answers late; the point's own timeout judges a hung one).
pub async fn refuses(endpoint: &HttpEndpoint, api_key: Option<&str>) -> Option<String> {
    let url = models_url(&endpoint.base_url);
    let sent = endpoint
        .client
        .send(|c| request(c.get(&url), api_key).timeout(Duration::from_secs(5)))
        .await
        .result;
    match sent {
        Ok(_) => None,
        Err(e) if e.is_timeout() => None,
        Err(e) => Some(format!("GET {url}: {}", endpoint.explain(&e))),
    }
}

/// The URL of `/v1/models`, and its reply (status and body) or why none came.
async fn models_reply(
    endpoint: &HttpEndpoint,
    api_key: Option<&str>,
) -> (String, Result<(reqwest::StatusCode, String), String>) {
    let url = models_url(&endpoint.base_url);
    let sent = endpoint
        .client
        .send(|c| request(c.get(&url), api_key).timeout(Duration::from_secs(10)))
        .await
        .result;
    let reply = match sent {
        Ok(reply) => Ok((reply.status(), reply.text().await.unwrap_or_default())),
        Err(e) => Err(endpoint.explain(&e)),
    };
    (url, reply)
}

pub fn parse_models(body: &str) -> Result<ServerInfo> {
    let reply: Json = serde_json::from_str(body)
        .map_err(|_| anyhow::anyhow!("the reply is not JSON: {}", excerpt(body.as_bytes())))?;
    let Some(data) = reply.get("data").and_then(Json::as_array) else {
        bail!(
            "the reply has no `data` list of models: {}",
            excerpt(body.as_bytes())
        );
    };
    let models = data
        .iter()
        .filter_map(|m| m.get("id")?.as_str().map(str::to_string))
        .collect();
    let max_model_len = data.iter().find_map(|m| m.get("max_model_len")?.as_u64());
    Ok(ServerInfo {
        models,
        max_model_len,
        reply,
    })
}

/// Endpoints where servers describe themselves: vLLM's `/version`, SGLang's `/get_server_info`
/// (its launch arguments and version), llama.cpp's `/props`.
const SELF_DESCRIPTIONS: [&str; 3] = ["/version", "/get_server_info", "/props"];

/// What the server tells about itself beyond `/v1/models`: engine, version and launch
/// arguments, where it tells them. An endpoint that does not answer is recorded as absent.
pub async fn server_facts(endpoint: &HttpEndpoint, api_key: Option<&str>, models: &Json) -> ServerFacts {
    let [a, b, c] = SELF_DESCRIPTIONS;
    let (a, b, c) = tokio::join!(
        get_json(endpoint, a, api_key),
        get_json(endpoint, b, api_key),
        get_json(endpoint, c, api_key)
    );
    let replies: Vec<(&str, Result<Json>)> = SELF_DESCRIPTIONS.into_iter().zip([a, b, c]).collect();
    summarize_server(models, &replies)
}

/// One `GET` of a JSON document, briefly: these endpoints answer at once or not at all.
async fn get_json(endpoint: &HttpEndpoint, path: &str, api_key: Option<&str>) -> Result<Json> {
    let url = format!(
        "{}{path}",
        endpoint.base_url.trim_end_matches('/').trim_end_matches("/v1")
    );
    let reply = endpoint
        .client
        .send(|c| request(c.get(&url), api_key).timeout(Duration::from_secs(5)))
        .await
        .result
        .map_err(|e| anyhow::anyhow!("{}", endpoint.explain(&e)))?;
    let status = reply.status();
    if !status.is_success() {
        bail!("HTTP {status}");
    }
    let body = reply.text().await.unwrap_or_default();
    serde_json::from_str(&body).map_err(|_| anyhow::anyhow!("not JSON: {}", excerpt(body.as_bytes())))
}

/// Folds the self-descriptions into the engine, its version, its launch arguments and, per
/// endpoint, `ok` or `absent (why)`. The engine comes from `/v1/models` (`owned_by`) unless an
/// endpoint that only one engine has answers.
pub fn summarize_server(models: &Json, replies: &[(&str, Result<Json>)]) -> ServerFacts {
    let mut facts = ServerFacts {
        engine: models
            .pointer("/data/0/owned_by")
            .and_then(Json::as_str)
            .map(str::to_string),
        ..ServerFacts::default()
    };
    for (path, reply) in replies {
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => {
                facts
                    .endpoints
                    .insert(path.to_string(), format!("absent ({e:#})"));
                continue;
            }
        };
        facts.endpoints.insert(path.to_string(), "ok".into());
        let (engine, version, args) = describe(path, reply);
        if let Some(engine) = engine {
            facts.engine = Some(engine.into());
        }
        if facts.version.is_none() {
            facts.version = version.and_then(|v| v.as_str().map(str::to_string));
        }
        if let Some(Json::Object(args)) = args {
            facts.launch_args = Some(args);
        }
    }
    facts
}

/// What one self-description says: (engine, version, launch arguments).
fn describe(path: &str, reply: &Json) -> (Option<&'static str>, Option<Json>, Option<Json>) {
    let version = |key: &str| reply.get(key).filter(|v| !v.is_null()).cloned();
    match path {
        "/version" => (None, version("version"), None),
        "/get_server_info" => {
            let mut args = reply.as_object().cloned().unwrap_or_default();
            // Run-time state, not how the server was launched.
            for key in ["version", "internal_states", "status"] {
                args.remove(key);
            }
            (Some("sglang"), version("version"), Some(Json::Object(args)))
        }
        "/props" => {
            let args = json!({
                "model_path": reply.get("model_path"),
                "total_slots": reply.get("total_slots"),
                "n_ctx": reply.pointer("/default_generation_settings/n_ctx"),
            });
            (Some("llama.cpp"), version("build_info"), Some(args))
        }
        _ => (None, None, None),
    }
}

/// Polls `/v1/models` until it answers or `wait` runs out; `gone` may end the wait early with a
/// reason (e.g. the server process exited). The last error is in the message.
pub async fn wait_until_up(
    endpoint: &HttpEndpoint,
    wait: Duration,
    api_key: Option<&str>,
    gone: &(dyn Fn() -> Option<String> + Send + Sync),
) -> Result<(ServerInfo, Duration)> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        let error = match get_models(endpoint, api_key).await {
            Ok(info) => return Ok((info, started.elapsed())),
            Err(e) => e,
        };
        if let Some(reason) = gone() {
            bail!("{reason}; last answer: {error:#}");
        }
        if started.elapsed() + pause > wait {
            bail!(
                "the server did not answer within {}; last error: {error:#}",
                super::human(wait)
            );
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// One short completion of at most `max_tokens`; the server must return tokens.
pub async fn smoke(
    endpoint: &HttpEndpoint,
    model: &str,
    max_tokens: u32,
    api_key: Option<&str>,
) -> Result<Json> {
    let url = format!(
        "{}/v1/completions",
        endpoint.base_url.trim_end_matches('/').trim_end_matches("/v1")
    );
    let body = json!({ "model": model, "prompt": "Hello", "max_tokens": max_tokens, "temperature": 0 });
    let reply = endpoint
        .client
        .send(|c| {
            request(c.post(&url), api_key)
                .json(&body)
                .timeout(Duration::from_secs(120))
        })
        .await
        .result
        .map_err(|e| anyhow::anyhow!("POST {url}: {}", endpoint.explain(&e)))?;
    let status = reply.status();
    let text = reply.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!(
            "smoke test POST {url}: HTTP {status}: {}",
            excerpt(text.as_bytes())
        );
    }
    let reply: Json = serde_json::from_str(&text)
        .map_err(|_| anyhow::anyhow!("smoke test: the reply is not JSON: {}", excerpt(text.as_bytes())))?;
    let tokens = reply
        .pointer("/usage/completion_tokens")
        .and_then(Json::as_u64)
        .unwrap_or(0);
    let text_out = reply
        .pointer("/choices/0/text")
        .and_then(Json::as_str)
        .unwrap_or("");
    if tokens == 0 && text_out.is_empty() {
        bail!(
            "smoke test: the server returned no tokens: {}",
            excerpt(reply.to_string().as_bytes())
        );
    }
    Ok(json!({ "completion_tokens": tokens, "text": text_out }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vllm_and_sglang_model_lists() {
        let info = parse_models(
            r#"{"object":"list","data":[{"id":"Qwen/Qwen3.6-27B","object":"model","max_model_len":262144}]}"#,
        )
        .unwrap();
        assert_eq!(info.models, ["Qwen/Qwen3.6-27B"]);
        assert_eq!(info.max_model_len, Some(262144));
        let info = parse_models(r#"{"data":[{"id":"a"},{"id":"b"}]}"#).unwrap();
        assert_eq!(info.models, ["a", "b"]);
        assert_eq!(info.max_model_len, None);
    }

    #[test]
    fn refuses_other_shapes_with_the_body() {
        let err = parse_models("<html>502 Bad Gateway</html>")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not JSON") && err.contains("502"), "{err}");
        let err = parse_models(r#"{"models": []}"#).unwrap_err().to_string();
        assert!(err.contains("no `data` list"), "{err}");
    }

    #[test]
    fn server_facts_come_from_whichever_endpoint_answers() {
        let models = json!({"data": [{"id": "m", "owned_by": "vllm"}]});
        let vllm = summarize_server(
            &models,
            &[
                ("/version", Ok(json!({"version": "0.9.1"}))),
                ("/get_server_info", Err(anyhow::anyhow!("HTTP 404 Not Found"))),
            ],
        );
        assert_eq!(vllm.engine.as_deref(), Some("vllm"));
        assert_eq!(vllm.version.as_deref(), Some("0.9.1"));
        assert!(vllm.launch_args.is_none());
        assert_eq!(vllm.endpoints["/get_server_info"], "absent (HTTP 404 Not Found)");
        let info = json!({"model_path": "Qwen/Qwen3.6-27B", "tp_size": 8, "version": "0.4.6", "internal_states": [{}]});
        let sglang = summarize_server(&json!({}), &[("/get_server_info", Ok(info))]);
        assert_eq!(sglang.engine.as_deref(), Some("sglang"));
        assert_eq!(sglang.version.as_deref(), Some("0.4.6"));
        assert_eq!(
            Json::Object(sglang.launch_args.unwrap()),
            json!({"model_path": "Qwen/Qwen3.6-27B", "tp_size": 8})
        );
        let none = summarize_server(
            &json!({"data": []}),
            &[("/version", Err(anyhow::anyhow!("HTTP 404")))],
        );
        assert_eq!(
            serde_json::to_value(none).unwrap(),
            json!({"endpoints": {"/version": "absent (HTTP 404)"}})
        );
    }

    #[test]
    fn urls_accept_a_trailing_v1() {
        assert_eq!(
            models_url("http://127.0.0.1:30000"),
            "http://127.0.0.1:30000/v1/models"
        );
        assert_eq!(
            models_url("http://127.0.0.1:30000/v1/"),
            "http://127.0.0.1:30000/v1/models"
        );
    }
}
