//! The OpenAI wire format as vLLM and SGLang speak it: request parsing and validation,
//! responses, pre-serialised stream chunks, and errors.

use std::io::Write as _;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tokens::{self, Completion, FinishReason};

/// Default `max_tokens` of `/v1/completions` (vLLM's and OpenAI's).
const DEFAULT_COMPLETION_MAX_TOKENS: u32 = 16;

/// An error response: `{"error": {"message", "type", "param", "code"}}` with a matching status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    /// 400: the request is malformed or asks for too much.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 404: no such model or route.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// The error's `type`, named as vLLM names it.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST => "BadRequestError",
            StatusCode::NOT_FOUND => "NotFoundError",
            StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowedError",
            _ => "InternalServerError",
        }
    }
}

impl ApiError {
    /// The JSON body: `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> Value {
        serde_json::json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": null,
            "code": self.status.as_u16(),
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// The model a server serves, as `/v1/models` lists it.
#[derive(Debug, Clone)]
pub struct ServedModel {
    pub id: String,
    pub owned_by: String,
    pub max_model_len: u32,
    /// Unix time the server started.
    pub created: u64,
}

impl ServedModel {
    /// The `/v1/models` body.
    pub fn list(&self) -> Value {
        serde_json::json!({"object": "list", "data": [{
            "id": self.id,
            "object": "model",
            "created": self.created,
            "owned_by": self.owned_by,
            "root": self.id,
            "parent": null,
            "max_model_len": self.max_model_len,
        }]})
    }

    /// 404 unless `requested` (when given) is this model.
    pub fn check(&self, requested: Option<&str>) -> Result<(), ApiError> {
        match requested {
            Some(name) if name != self.id => {
                Err(ApiError::not_found(format!("The model `{name}` does not exist.")))
            }
            _ => Ok(()),
        }
    }
}

/// Which endpoint a request came to; decides the response shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

impl Endpoint {
    /// Prefix of response ids.
    pub fn id_prefix(self) -> &'static str {
        match self {
            Self::Completions => "cmpl",
            Self::Chat => "chatcmpl",
        }
    }

    fn object(self) -> &'static str {
        match self {
            Self::Completions => "text_completion",
            Self::Chat => "chat.completion",
        }
    }

    fn chunk_object(self) -> &'static str {
        match self {
            Self::Completions => "text_completion",
            Self::Chat => "chat.completion.chunk",
        }
    }
}

/// One prompt of a request, tokenised and with its output budget.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptJob {
    pub ids: Vec<u32>,
    pub max_tokens: u32,
}

/// A validated generation request.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub endpoint: Endpoint,
    /// One per choice (a batch of completion prompts gives several).
    pub prompts: Vec<PromptJob>,
    pub ignore_eos: bool,
    /// Tokens generated before EOS or a stop string may end a choice (vLLM's `min_tokens`).
    pub min_tokens: u32,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// Usage on every chunk (`stream_options.continuous_usage_stats`, with `include_usage`).
    pub continuous_usage: bool,
    pub seed: Option<u64>,
}

impl Generation {
    /// Plans the output of choice `index` (`natural` is the profile's EOS length range).
    pub fn plan(&self, index: usize, natural: (u32, u32)) -> Completion {
        let prompt = &self.prompts[index];
        let seed = tokens::request_seed(&prompt.ids, self.seed);
        let eos_at = (!self.ignore_eos).then(|| tokens::natural_length(seed, natural.0, natural.1));
        Completion::plan(seed, prompt.max_tokens, self.min_tokens, eos_at, &self.stop)
    }
}

/// Fields both endpoints take.
#[derive(Debug, Deserialize)]
struct Options {
    model: Option<String>,
    max_tokens: Option<u32>,
    /// Signed, so that a negative value gets vLLM's message rather than a type error.
    #[serde(default)]
    min_tokens: i64,
    ignore_eos: Option<bool>,
    temperature: Option<f64>,
    #[serde(default, deserialize_with = "one_or_many")]
    stop: Vec<String>,
    stream: Option<bool>,
    /// Kept raw: vLLM rejects any non-empty `stream_options` without `stream`.
    stream_options: Option<Value>,
    seed: Option<u64>,
}

/// `stream_options`, with vLLM's defaults: usage is included unless `include_usage` is false
/// or null.
#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default = "absent_is_true")]
    include_usage: Option<bool>,
    continuous_usage_stats: Option<bool>,
}

/// vLLM's default `include_usage` once `stream_options` is given.
fn absent_is_true() -> Option<bool> {
    Some(true)
}

impl StreamOptions {
    /// Parses `stream_options` (400 when non-empty without `stream`, as vLLM): returns whether
    /// to send usage at the end and on every chunk.
    fn usage(raw: Option<Value>, stream: bool) -> Result<(bool, bool), ApiError> {
        let raw = raw.filter(|v| !v.is_null());
        let empty = |v: &Value| v.as_object().is_some_and(serde_json::Map::is_empty);
        if !stream && raw.as_ref().is_some_and(|v| !empty(v)) {
            return Err(ApiError::bad_request(
                "Stream options can only be defined when `stream=True`.",
            ));
        }
        let Some(raw) = raw else {
            return Ok((false, false));
        };
        let options: Self = serde_json::from_value(raw)
            .map_err(|e| ApiError::bad_request(format!("invalid stream_options: {e}")))?;
        let include = options.include_usage.unwrap_or(false);
        Ok((
            include,
            include && options.continuous_usage_stats.unwrap_or(false),
        ))
    }
}

#[derive(Debug, Deserialize)]
struct CompletionBody {
    #[serde(deserialize_with = "prompts")]
    prompt: Vec<Vec<u32>>,
    #[serde(flatten)]
    options: Options,
}

#[derive(Debug, Deserialize)]
struct ChatBody {
    messages: Vec<Message>,
    /// The newer name of `max_tokens`.
    max_completion_tokens: Option<u32>,
    #[serde(flatten)]
    options: Options,
}

/// A chat message: its role and content.
#[derive(Debug, Deserialize)]
pub struct Message {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

/// Message content: a string, or parts of which the `text` ones count.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
}

impl Message {
    /// The text that counts as the message's content.
    fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => parts.iter().filter_map(|p| p.text.as_deref()).collect(),
        }
    }
}

/// Parses a `/v1/completions` body.
pub fn parse_completion(body: &[u8], served: &ServedModel) -> Result<Generation, ApiError> {
    let req: CompletionBody = from_json(body)?;
    let max_tokens = req.options.max_tokens.unwrap_or(DEFAULT_COMPLETION_MAX_TOKENS);
    let prompts = req
        .prompt
        .into_iter()
        .map(|ids| PromptJob { ids, max_tokens })
        .collect();
    build(Endpoint::Completions, prompts, req.options, served)
}

/// Parses a `/v1/chat/completions` body; without a limit, a reply may fill the context.
pub fn parse_chat(body: &[u8], served: &ServedModel) -> Result<Generation, ApiError> {
    let req: ChatBody = from_json(body)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty"));
    }
    let ids = chat_prompt_ids(&req.messages);
    let room = served.max_model_len.saturating_sub(ids.len() as u32).max(1);
    let max_tokens = req
        .max_completion_tokens
        .or(req.options.max_tokens)
        .unwrap_or(room);
    build(
        Endpoint::Chat,
        vec![PromptJob { ids, max_tokens }],
        req.options,
        served,
    )
}

/// The prompt's token ids of a chat, by the rule (ChatML frames and the reply header).
pub fn chat_prompt_ids(messages: &[Message]) -> Vec<u32> {
    let texts: Vec<String> = messages.iter().map(Message::text).collect();
    tokens::chat_ids(
        messages
            .iter()
            .map(|m| m.role.as_str())
            .zip(texts.iter().map(String::as_str)),
    )
}

/// Deserialises JSON, turning any failure into a 400 that quotes serde's reason.
pub fn from_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// Checks the shared options and the lengths, and assembles the request.
fn build(
    endpoint: Endpoint,
    prompts: Vec<PromptJob>,
    options: Options,
    served: &ServedModel,
) -> Result<Generation, ApiError> {
    served.check(options.model.as_deref())?;
    if let Some(t) = options.temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return Err(ApiError::bad_request(format!(
            "temperature must be a non-negative number, got {t}"
        )));
    }
    let stream = options.stream.unwrap_or(false);
    let (include_usage, continuous_usage) = StreamOptions::usage(options.stream_options, stream)?;
    for prompt in &prompts {
        check_length(prompt, served.max_model_len)?;
    }
    let min_tokens = check_min_tokens(options.min_tokens, &prompts)?;
    Ok(Generation {
        endpoint,
        prompts,
        ignore_eos: options.ignore_eos.unwrap_or(false),
        min_tokens,
        stop: options.stop,
        stream,
        include_usage,
        continuous_usage,
        seed: options.seed,
    })
}

/// 400 unless `0 <= min_tokens <= max_tokens` of every prompt, with vLLM's messages.
fn check_min_tokens(min_tokens: i64, prompts: &[PromptJob]) -> Result<u32, ApiError> {
    if min_tokens < 0 {
        return Err(ApiError::bad_request(format!(
            "min_tokens must be greater than or equal to 0, got {min_tokens}."
        )));
    }
    if let Some(max) = prompts
        .iter()
        .map(|p| p.max_tokens)
        .find(|&m| min_tokens > i64::from(m))
    {
        return Err(ApiError::bad_request(format!(
            "min_tokens must be less than or equal to max_tokens={max}, got {min_tokens}."
        )));
    }
    // Now at most a max_tokens, which is a u32 (0 when there are no prompts).
    Ok(u32::try_from(min_tokens).unwrap_or(0))
}

/// 400 unless the prompt plus its output fit in the context window.
fn check_length(prompt: &PromptJob, max_model_len: u32) -> Result<(), ApiError> {
    if prompt.max_tokens == 0 {
        return Err(ApiError::bad_request("max_tokens must be at least 1"));
    }
    let input = prompt.ids.len() as u64;
    let total = input + u64::from(prompt.max_tokens);
    if total > u64::from(max_model_len) {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_model_len} tokens. However, you \
             requested {total} tokens ({input} in the messages, {} in the completion). Please \
             reduce the length of the messages or completion.",
            prompt.max_tokens
        )));
    }
    Ok(())
}

/// `stop`: null, a string, or a list of strings.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(vec![]),
        Value::String(s) => Ok(vec![s]),
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                _ => Err(de::Error::custom("stop must be a string or a list of strings")),
            })
            .collect(),
        _ => Err(de::Error::custom("stop must be a string or a list of strings")),
    }
}

/// `prompt`: a string, a list of token ids, or a batch (a list of strings or id lists).
fn prompts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u32>>, D::Error> {
    const SHAPE: &str =
        "prompt must be a string, a list of token ids, or a list of strings or token-id lists";
    let one = |v: Value| match v {
        Value::String(s) => Ok(tokens::prompt_ids(&s)),
        Value::Array(items) if items.is_empty() => Err("prompt must not be empty".to_string()),
        Value::Array(items) => items.iter().map(token_id).collect(),
        _ => Err(SHAPE.to_string()),
    };
    let batch = match Value::deserialize(d)? {
        Value::Array(items) if items.iter().any(|v| v.is_string() || v.is_array()) => {
            items.into_iter().map(one).collect::<Result<Vec<_>, _>>()
        }
        Value::Array(items) if items.iter().all(Value::is_number) => {
            one(Value::Array(items)).map(|ids| vec![ids])
        }
        other => one(other).map(|ids| vec![ids]),
    };
    batch.map_err(de::Error::custom)
}

/// A token id: an integer that fits in u32.
fn token_id(v: &Value) -> Result<u32, String> {
    v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
        format!(
            "prompt token ids must be integers from 0 to {}, got {v}",
            u32::MAX
        )
    })
}

/// Token counts of a response.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Only when the server has a prefix cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`, as vLLM and SGLang report prefix-cache hits.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct PromptTokensDetails {
    /// Prompt tokens served by the prefix cache (summed over the choices).
    pub cached_tokens: u64,
}

impl Usage {
    /// Counts without cache details.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: None,
        }
    }

    /// Usage of a request's prompts and outputs.
    pub fn of(request: &Generation, outputs: &[Completion]) -> Self {
        let prompt_tokens = request.prompts.iter().map(|p| p.ids.len() as u64).sum();
        let completion_tokens = outputs.iter().map(|c| u64::from(c.tokens())).sum();
        Self::new(prompt_tokens, completion_tokens)
    }

    /// The same counts, reporting `cached_tokens` from the prefix cache.
    pub fn with_cached(self, cached_tokens: u64) -> Self {
        Self {
            prompt_tokens_details: Some(PromptTokensDetails { cached_tokens }),
            ..self
        }
    }
}

/// Identity of one response: id, creation time and model.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// The body of a non-streamed response.
pub fn full_response(meta: &ResponseMeta, outputs: &[Completion], usage: Usage) -> Value {
    let choices: Vec<Value> = outputs
        .iter()
        .enumerate()
        .map(|(index, out)| {
            let finish = out.finish.as_str();
            match meta.endpoint {
                Endpoint::Completions => serde_json::json!({
                    "index": index, "text": out.text(), "logprobs": null, "finish_reason": finish,
                }),
                Endpoint::Chat => serde_json::json!({
                    "index": index,
                    "message": {"role": "assistant", "content": out.text()},
                    "logprobs": null,
                    "finish_reason": finish,
                }),
            }
        })
        .collect();
    serde_json::json!({
        "id": meta.id,
        "object": meta.endpoint.object(),
        "created": meta.created,
        "model": meta.model,
        "choices": choices,
        "usage": usage,
    })
}

/// Writes SSE stream chunks from a pre-serialised head, so a token costs a few small copies.
#[derive(Debug, Clone)]
pub struct ChunkWriter {
    endpoint: Endpoint,
    /// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`
    head: Vec<u8>,
}

impl ChunkWriter {
    /// A writer for the chunks of the response `meta`.
    pub fn new(meta: &ResponseMeta) -> Self {
        let head = format!(
            "data: {{\"id\":{},\"object\":\"{}\",\"created\":{},\"model\":{},\"choices\":[",
            Value::from(meta.id.as_str()),
            meta.endpoint.chunk_object(),
            meta.created,
            Value::from(meta.model.as_str()),
        );
        Self {
            endpoint: meta.endpoint,
            head: head.into_bytes(),
        }
    }

    /// A chunk carrying `text` for choice `index`, with the finish reason on the last one and
    /// `usage` if given (continuous usage stats). Writes into a Vec, which cannot fail.
    pub fn token(
        &self,
        out: &mut Vec<u8>,
        index: usize,
        text: &str,
        finish: Option<FinishReason>,
        usage: Option<Usage>,
    ) {
        out.extend_from_slice(&self.head);
        let _ = write!(out, "{{\"index\":{index},");
        out.extend_from_slice(match self.endpoint {
            Endpoint::Completions => b"\"text\":".as_slice(),
            Endpoint::Chat => b"\"delta\":{\"content\":",
        });
        let _ = serde_json::to_writer(&mut *out, text);
        if self.endpoint == Endpoint::Chat {
            out.push(b'}');
        }
        let _ = match finish {
            Some(reason) => write!(
                out,
                ",\"logprobs\":null,\"finish_reason\":\"{}\"}}]",
                reason.as_str()
            ),
            None => write!(out, ",\"logprobs\":null,\"finish_reason\":null}}]"),
        };
        Self::end(out, usage);
    }

    /// The chat stream's opening chunk for choice `index`: the assistant role, no content yet
    /// (with `usage`, zero completion tokens, under continuous usage stats).
    pub fn role(&self, out: &mut Vec<u8>, index: usize, usage: Option<Usage>) {
        out.extend_from_slice(&self.head);
        let _ = write!(
            out,
            "{{\"index\":{index},\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\
             \"logprobs\":null,\"finish_reason\":null}}]"
        );
        Self::end(out, usage);
    }

    /// Closes a chunk after its `choices`, adding `usage` if given.
    fn end(out: &mut Vec<u8>, usage: Option<Usage>) {
        if let Some(usage) = usage {
            out.extend_from_slice(b",\"usage\":");
            let _ = serde_json::to_writer(&mut *out, &usage);
        }
        out.extend_from_slice(b"}\n\n");
    }

    /// The final usage chunk (empty `choices`), as vLLM sends with `include_usage`.
    pub fn usage(&self, out: &mut Vec<u8>, usage: Usage) {
        out.extend_from_slice(&self.head);
        out.push(b']');
        Self::end(out, Some(usage));
    }

    /// The stream's terminator.
    pub fn done(out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: [DONE]\n\n");
    }

    /// Whether the stream opens each choice with a role chunk.
    pub fn sends_role(&self) -> bool {
        self.endpoint == Endpoint::Chat
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A served model `m` of 100 tokens of context, for the tests of the wire format.
    pub(in crate::sim) fn served() -> ServedModel {
        ServedModel {
            id: "m".into(),
            owned_by: "rigrun".into(),
            max_model_len: 100,
            created: 1,
        }
    }

    fn completion(body: &str) -> Result<Generation, ApiError> {
        parse_completion(body.as_bytes(), &served())
    }

    #[test]
    fn prompt_forms() {
        let ids = |body: &str| -> Vec<Vec<u32>> {
            completion(body)
                .unwrap()
                .prompts
                .into_iter()
                .map(|p| p.ids)
                .collect()
        };
        assert_eq!(
            ids(r#"{"prompt":"abcdefgh"}"#),
            vec![tokens::prompt_ids("abcdefgh")]
        );
        assert_eq!(ids(r#"{"prompt":[1,2,3]}"#), vec![vec![1, 2, 3]]);
        assert_eq!(ids(r#"{"prompt":[[1],[2,3]]}"#), vec![vec![1], vec![2, 3]]);
        assert_eq!(
            ids(r#"{"prompt":["abcd",[7]]}"#),
            vec![tokens::prompt_ids("abcd"), vec![7]]
        );
    }

    #[test]
    fn bad_prompts_are_400() {
        for body in [
            r#"{"prompt":5}"#,
            r#"{"prompt":[]}"#,
            r#"{"prompt":[-1]}"#,
            r#"{"prompt":[1.5]}"#,
            r#"{"prompt":[[]]}"#,
            r#"{"prompt":[{"a":1}]}"#,
            r#"{"max_tokens":3}"#,
            r#"{"prompt":"x","max_tokens":"3"}"#,
            r#"{"prompt":"x","max_tokens":0}"#,
            r#"{"prompt":"x","stop":7}"#,
            r#"{"prompt":"x","temperature":-1}"#,
            r#"{"prompt":"x""#,
        ] {
            let err = completion(body).unwrap_err();
            assert_eq!(err.status, StatusCode::BAD_REQUEST, "{body}");
        }
    }

    #[test]
    fn too_long_is_400_and_exactly_full_is_fine() {
        assert!(completion(r#"{"prompt":[1,2,3,4],"max_tokens":96}"#).is_ok());
        let err = completion(r#"{"prompt":[1,2,3,4],"max_tokens":97}"#).unwrap_err();
        assert!(
            err.message.contains("maximum context length is 100 tokens"),
            "{}",
            err.message
        );
    }

    #[test]
    fn unknown_model_is_404() {
        let err = completion(r#"{"model":"other","prompt":"x"}"#).unwrap_err();
        assert_eq!(err.status, StatusCode::NOT_FOUND);
        assert!(completion(r#"{"model":"m","prompt":"x"}"#).is_ok());
    }

    #[test]
    fn options_are_read() {
        let g = completion(
            r#"{"prompt":"x","max_tokens":5,"ignore_eos":true,"stop":["a","b"],"stream":true,
                "stream_options":{"include_usage":true},"seed":3,"temperature":0.7,"n":1}"#,
        )
        .unwrap();
        assert_eq!(g.prompts[0].max_tokens, 5);
        assert!(g.ignore_eos && g.stream && g.include_usage);
        assert_eq!((g.stop.len(), g.seed), (2, Some(3)));
        assert_eq!(completion(r#"{"prompt":"x"}"#).unwrap().prompts[0].max_tokens, 16);
    }

    /// The 400 message of `body` on `/v1/completions`.
    fn rejection(body: &str) -> String {
        let err = completion(body).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST, "{body}");
        err.message
    }

    #[test]
    fn min_tokens_is_read_and_checked_with_vllms_messages() {
        let g = completion(r#"{"prompt":"x","max_tokens":5,"min_tokens":5}"#).unwrap();
        assert_eq!(g.min_tokens, 5);
        assert_eq!(completion(r#"{"prompt":"x"}"#).unwrap().min_tokens, 0);
        assert_eq!(
            rejection(r#"{"prompt":"x","max_tokens":5,"min_tokens":6}"#),
            "min_tokens must be less than or equal to max_tokens=5, got 6."
        );
        // The default max_tokens (16) counts.
        assert_eq!(
            rejection(r#"{"prompt":"x","min_tokens":17}"#),
            "min_tokens must be less than or equal to max_tokens=16, got 17."
        );
        assert_eq!(
            rejection(r#"{"prompt":"x","min_tokens":-1}"#),
            "min_tokens must be greater than or equal to 0, got -1."
        );
        for body in [
            r#"{"prompt":"x","min_tokens":"3"}"#,
            r#"{"prompt":"x","min_tokens":1.5}"#,
            r#"{"prompt":"x","min_tokens":null}"#,
        ] {
            rejection(body);
        }
        // Chat: against the default max_tokens, the rest of the context.
        let chat = |body: &str| parse_chat(body.as_bytes(), &served());
        let room = r#"{"messages":[{"role":"user","content":"abcd"}],"min_tokens":91}"#;
        assert_eq!(chat(room).unwrap().min_tokens, 91);
        let over = r#"{"messages":[{"role":"user","content":"abcd"}],"min_tokens":92}"#;
        assert_eq!(
            chat(over).unwrap_err().message,
            "min_tokens must be less than or equal to max_tokens=91, got 92."
        );
    }

    #[test]
    fn planning_honours_min_tokens() {
        let g = completion(r#"{"prompt":"x","max_tokens":40,"min_tokens":40}"#).unwrap();
        let out = g.plan(0, (2, 3));
        assert_eq!((out.tokens(), out.finish), (40, FinishReason::Length));
        let g = completion(r#"{"prompt":"x","max_tokens":40,"min_tokens":10}"#).unwrap();
        let out = g.plan(0, (2, 3));
        assert_eq!((out.tokens(), out.finish), (11, FinishReason::Stop));
    }

    #[test]
    fn stream_options_need_stream_and_default_to_usage() {
        let message = "Stream options can only be defined when `stream=True`.";
        for body in [
            r#"{"prompt":"x","stream_options":{"include_usage":true}}"#,
            r#"{"prompt":"x","stream":false,"stream_options":{"include_usage":false}}"#,
            r#"{"prompt":"x","stream_options":{"continuous_usage_stats":true}}"#,
        ] {
            assert_eq!(rejection(body), message, "{body}");
        }
        // Empty or null options are accepted without a stream, as vLLM does.
        assert!(completion(r#"{"prompt":"x","stream_options":{}}"#).is_ok());
        assert!(completion(r#"{"prompt":"x","stream_options":null}"#).is_ok());
        rejection(r#"{"prompt":"x","stream":true,"stream_options":{"include_usage":"yes"}}"#);
        let usage = |options: &str| {
            let body = format!(r#"{{"prompt":"x","stream":true,"stream_options":{options}}}"#);
            let g = completion(&body).unwrap();
            (g.include_usage, g.continuous_usage)
        };
        assert_eq!(usage("{}"), (true, false));
        assert_eq!(usage("null"), (false, false));
        assert_eq!(usage(r#"{"include_usage":null}"#), (false, false));
        assert_eq!(usage(r#"{"continuous_usage_stats":true}"#), (true, true));
        assert_eq!(
            usage(r#"{"include_usage":true,"continuous_usage_stats":true}"#),
            (true, true)
        );
        // vLLM sends continuous usage only with include_usage.
        assert_eq!(
            usage(r#"{"include_usage":false,"continuous_usage_stats":true}"#),
            (false, false)
        );
        let plain = completion(r#"{"prompt":"x","stream":true}"#).unwrap();
        assert_eq!((plain.include_usage, plain.continuous_usage), (false, false));
    }

    #[test]
    fn chat_counts_messages_and_defaults_to_the_rest_of_the_context() {
        let g = parse_chat(
            br#"{"messages":[{"role":"user","content":"abcdefgh"},
                {"role":"user","content":[{"type":"text","text":"abcd"}]}]}"#,
            &served(),
        )
        .unwrap();
        assert_eq!(g.prompts[0].ids.len(), 7 + 6 + 3);
        assert_eq!(g.prompts[0].max_tokens, 100 - 16);
        let err = parse_chat(br#"{"messages":[]}"#, &served()).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        let err = parse_chat(br#"{"messages":[{"role":"user","content":5}]}"#, &served()).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn chunks_are_valid_json_events() {
        let meta = ResponseMeta {
            endpoint: Endpoint::Chat,
            id: "chatcmpl-1".into(),
            created: 9,
            model: "m\"x".into(),
        };
        let writer = ChunkWriter::new(&meta);
        let completions = ChunkWriter::new(&ResponseMeta {
            endpoint: Endpoint::Completions,
            ..meta.clone()
        });
        let mut out = vec![];
        writer.role(&mut out, 0, None);
        writer.token(&mut out, 0, " hi\"", Some(FinishReason::Length), None);
        writer.usage(&mut out, Usage::new(1, 2).with_cached(1));
        writer.role(&mut out, 0, Some(Usage::new(1, 0)));
        completions.token(&mut out, 0, "x", None, Some(Usage::new(1, 1)));
        ChunkWriter::done(&mut out);
        let text = String::from_utf8(out).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 6);
        let json: Vec<Value> = events[..5]
            .iter()
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(json[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(json[1]["choices"][0]["delta"]["content"], " hi\"");
        assert_eq!(json[1]["choices"][0]["finish_reason"], "length");
        assert_eq!(json[1]["model"], "m\"x");
        assert!(json[0].get("usage").is_none() && json[1].get("usage").is_none());
        assert_eq!(json[2]["choices"], serde_json::json!([]));
        assert_eq!(
            json[2]["usage"],
            serde_json::json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 1}})
        );
        assert_eq!(json[3]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(json[3]["usage"]["completion_tokens"], 0);
        assert_eq!(json[4]["choices"][0]["text"], "x");
        assert_eq!(
            json[4]["usage"],
            serde_json::json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
        );
        assert_eq!(events[5], "data: [DONE]");
    }
}
