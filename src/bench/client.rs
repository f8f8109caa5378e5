//! HTTP to the server: one shared connection pool sized for thousands of long streams, the model
//! lookup, and one request timed from send to the end of its stream.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::sse::{self, SseReader, Usage};
use crate::http_client::{excerpt, explain};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `/v1/models` may take.
const MODELS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for the end of a body after `[DONE]`, so the connection can be reused.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Which OpenAI endpoint the requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `POST /v1/completions` with a token-id prompt.
    Completions,
    /// `POST /v1/chat/completions` with one user message.
    Chat,
}

impl Api {
    /// The endpoint's path under the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
        }
    }
}

/// The server as the client sees it.
pub struct Client {
    http: crate::http_client::Client,
    /// Base URL without a trailing `/` or `/v1`.
    base: String,
    path: &'static str,
    api_key: Option<String>,
    stream: bool,
}

/// What `/v1/models` says.
#[derive(Debug, Clone)]
pub struct ServerModels {
    pub ids: Vec<String>,
    pub max_model_len: Option<u64>,
}

/// Why `/v1/models` gave no list.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelsError {
    /// No answer at all (refused, unresolvable, timed out).
    Unreachable(String),
    /// An answer that is not a model list.
    Answer(String),
}

/// Why a request failed: a short kind (the key in `errors`) and a sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: String,
    pub detail: String,
}

impl Failure {
    fn new(kind: impl Into<String>, detail: impl Into<String>) -> Self {
        Failure {
            kind: kind.into(),
            detail: detail.into(),
        }
    }
}

/// What one request measured.
#[derive(Debug)]
pub struct Outcome {
    /// When the request was handed to the connection pool.
    pub sent: Instant,
    /// When the response ended (`[DONE]`, the end of the body, or the failure).
    pub end: Instant,
    /// Arrival of each token-carrying event, in nanoseconds after `sent`.
    pub events: Vec<u64>,
    pub result: Result<Completed, Failure>,
    /// Times it was sent again because the server had closed the reused connection.
    pub reconnects: u32,
    /// The generated text, when asked for (a conversation sends it back next turn).
    pub text: String,
}

/// A request that completed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completed {
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
}

impl Client {
    /// A client for `url` (with or without a trailing `/v1`). `read_timeout` bounds each wait
    /// for bytes, not the whole request, so long generations are never cut off.
    pub fn new(url: &str, api: Api, stream: bool, read_timeout: Duration) -> anyhow::Result<Client> {
        let http = crate::http_client::Client::new(|builder| {
            builder
                .http1_only()
                .tcp_nodelay(true)
                .connect_timeout(CONNECT_TIMEOUT)
                .read_timeout(read_timeout)
                .pool_max_idle_per_host(usize::MAX)
        })?;
        Ok(Client {
            http,
            base: base_url(url),
            path: api.path(),
            api_key: std::env::var("OPENAI_API_KEY").ok().filter(|k| !k.is_empty()),
            stream,
        })
    }

    /// The base URL, for messages.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// `GET /v1/models`; the error is one sentence in the user's terms.
    pub async fn models(&self) -> Result<ServerModels, ModelsError> {
        let url = format!("{}/v1/models", self.base);
        let reply = self
            .http
            .send(|c| self.auth(c.get(&url)).timeout(MODELS_TIMEOUT))
            .await
            .result
            .map_err(|e| ModelsError::Unreachable(format!("cannot reach {url}: {}", explain(&e))))?;
        let status = reply.status();
        let body = reply.bytes().await.unwrap_or_default();
        if !status.is_success() {
            return Err(ModelsError::Answer(format!(
                "{url} answered HTTP {status}: {}",
                excerpt(&body)
            )));
        }
        let value: Value = serde_json::from_slice(&body).map_err(|_| {
            ModelsError::Answer(format!(
                "{url} did not answer a JSON model list: {}",
                excerpt(&body)
            ))
        })?;
        let data = value.get("data").and_then(Value::as_array);
        let ids = data
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("id")?.as_str().map(str::to_string))
            .collect();
        let max_model_len = data
            .into_iter()
            .flatten()
            .find_map(|m| m.get("max_model_len")?.as_u64());
        Ok(ServerModels { ids, max_model_len })
    }

    /// `POST path` with no body (a server's control route): its status and a short excerpt
    /// of its body, or why there was no answer.
    pub async fn post_empty(&self, path: &str) -> Result<(u16, String), String> {
        let url = format!("{}{path}", self.base);
        let reply = self
            .http
            .send(|c| self.auth(c.post(&url)).timeout(MODELS_TIMEOUT))
            .await
            .result
            .map_err(|e| format!("cannot reach {url}: {}", explain(&e)))?;
        let status = reply.status().as_u16();
        let body = reply.bytes().await.unwrap_or_default();
        Ok((status, excerpt(&body)))
    }

    /// `POST path` with a JSON body (the tokenize endpoint): its status and whole body, or why
    /// there was no answer.
    pub async fn post_json(&self, path: &str, body: &Value) -> Result<(u16, Bytes), String> {
        let url = format!("{}{path}", self.base);
        let reply = self
            .http
            .send(|c| self.auth(c.post(&url)).json(body).timeout(MODELS_TIMEOUT))
            .await
            .result
            .map_err(|e| format!("cannot reach {url}: {}", explain(&e)))?;
        let status = reply.status().as_u16();
        let body = reply
            .bytes()
            .await
            .map_err(|e| format!("{url}: the answer broke off: {}", explain(&e)))?;
        Ok((status, body))
    }

    /// Sends one request and reads its response to the end; never panics on what the server
    /// sends, and reports every failure by kind. `max_tokens` sizes the event list up front;
    /// with `keep_text` the reply's text is kept in the outcome.
    pub async fn send(&self, body: Bytes, max_tokens: u32, keep_text: bool) -> Outcome {
        let url = format!("{}{}", self.base, self.path);
        let request = |c: &reqwest::Client| {
            self.auth(c.post(&url))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
        };
        let sent = Instant::now();
        let capacity = if self.stream { max_tokens.min(1 << 16) } else { 1 };
        let mut reading = Reading::new(sent, capacity as usize, keep_text);
        let answer = self.http.send(request).await;
        let result = match answer.result {
            Err(e) => Err(send_failure(&e)),
            Ok(reply) if !reply.status().is_success() => Err(http_failure(reply).await),
            Ok(reply) if self.stream => reading.stream(reply).await,
            Ok(reply) => reading.whole(reply).await,
        };
        Outcome {
            sent,
            end: reading.end.unwrap_or_else(Instant::now),
            events: reading.events,
            result,
            reconnects: answer.reconnects,
            text: reading.text.unwrap_or_default(),
        }
    }
}

/// The state of one response being read.
struct Reading {
    sent: Instant,
    events: Vec<u64>,
    end: Option<Instant>,
    /// The reply's text so far, when kept.
    text: Option<String>,
}

impl Reading {
    fn new(sent: Instant, capacity: usize, keep_text: bool) -> Self {
        Reading {
            sent,
            events: Vec::with_capacity(capacity),
            end: None,
            text: keep_text.then(String::new),
        }
    }

    /// One event's data (or a whole body) read, its text kept when asked.
    fn parse(&mut self, data: &[u8]) -> Result<sse::Event, Failure> {
        match &mut self.text {
            Some(text) => sse::parse_keeping_text(data, text),
            None => sse::parse(data),
        }
        .map_err(|e| Failure::new("bad_response", e))
    }

    /// Reads an SSE stream, timing each token-carrying event by the arrival of its bytes.
    async fn stream(&mut self, mut reply: reqwest::Response) -> Result<Completed, Failure> {
        let mut reader = SseReader::default();
        let mut done = Completed::default();
        let mut state: Result<bool, Failure> = Ok(false);
        while matches!(state, Ok(false)) {
            let chunk = match reply.chunk().await {
                Ok(chunk) => chunk,
                Err(e) => {
                    self.end = Some(Instant::now());
                    return Err(body_failure(&e, self.events.len()));
                }
            };
            let at = self.sent.elapsed().as_nanos() as u64;
            let on_event = |data: &[u8]| {
                state = self.event(data, at, &mut done);
                matches!(state, Ok(false))
            };
            match &chunk {
                Some(bytes) => reader.push(bytes, on_event),
                // The body ended: a last event without its blank line still counts.
                None => {
                    reader.finish(on_event);
                    break;
                }
            }
        }
        self.end = Some(Instant::now());
        match state {
            Err(failure) => Err(failure),
            Ok(true) => {
                drain(&mut reply).await;
                Ok(done)
            }
            Ok(false) if done.finish_reason.is_some() => Ok(done),
            Ok(false) => Err(Failure::new(
                "stream_cut",
                format!(
                    "the stream ended after {} token events without finish_reason or [DONE]",
                    self.events.len()
                ),
            )),
        }
    }

    /// Handles one event's data, completed `at` ns after send; Ok(true) at `[DONE]`.
    fn event(&mut self, data: &[u8], at: u64, done: &mut Completed) -> Result<bool, Failure> {
        let event = self.parse(data)?;
        if let Some(error) = event.error {
            return Err(Failure::new(
                "server_error",
                format!("error in the stream: {error}"),
            ));
        }
        if event.token {
            self.events.push(at);
        }
        if event.usage.is_some() {
            done.usage = event.usage;
        }
        if event.finish_reason.is_some() {
            done.finish_reason = event.finish_reason;
        }
        Ok(event.done)
    }

    /// Reads a whole (non-streamed) JSON response.
    async fn whole(&mut self, reply: reqwest::Response) -> Result<Completed, Failure> {
        let body = reply.bytes().await;
        self.end = Some(Instant::now());
        let body = body.map_err(|e| body_failure(&e, 0))?;
        let event = self.parse(&body)?;
        if let Some(error) = event.error {
            return Err(Failure::new("server_error", error));
        }
        if event.token {
            self.events.push(self.sent.elapsed().as_nanos() as u64);
        }
        Ok(Completed {
            usage: event.usage,
            finish_reason: event.finish_reason,
        })
    }
}

/// Reads what follows `[DONE]` (normally just the body's end) so the connection is reused.
async fn drain(reply: &mut reqwest::Response) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while let Ok(Some(_)) = reply.chunk().await {}
    })
    .await;
}

/// A non-2xx answer: `http_<code>` with the start of its body.
async fn http_failure(reply: reqwest::Response) -> Failure {
    let status = reply.status();
    let body = tokio::time::timeout(MODELS_TIMEOUT, reply.bytes())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Failure::new(
        format!("http_{}", status.as_u16()),
        format!("HTTP {status}: {}", excerpt(&body)),
    )
}

/// A request that got no answer.
fn send_failure(err: &reqwest::Error) -> Failure {
    let kind = if err.is_timeout() {
        "timeout"
    } else if err.is_connect() {
        "connect"
    } else {
        "no_answer"
    };
    Failure::new(kind, explain(err))
}

/// A body that broke off after `events` token events.
fn body_failure(err: &reqwest::Error, events: usize) -> Failure {
    if err.is_timeout() {
        return Failure::new(
            "timeout",
            format!("no bytes within the read timeout after {events} token events"),
        );
    }
    Failure::new(
        "stream_cut",
        format!(
            "the connection broke after {events} token events: {}",
            explain(err)
        ),
    )
}

/// `http://h:p/v1/` → `http://h:p`.
pub fn base_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    url.strip_suffix("/v1").unwrap_or(url).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_drop_v1_and_slashes() {
        assert_eq!(base_url("http://h:1/v1/"), "http://h:1");
        assert_eq!(base_url("http://h:1"), "http://h:1");
        assert_eq!(base_url("http://h:1/proxy/v1"), "http://h:1/proxy");
    }
}
