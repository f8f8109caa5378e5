//! HTTP serving: routes, handlers, and the SSE stream that paces tokens as the engine
//! delivers them.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::api::{self, ApiError, ChunkWriter, Generation, ResponseMeta, ServedModel, Usage};
use super::engine::{Engine, Sink};
use super::jitter::Jitter;
use super::latency::RequestClock;
use super::metrics_endpoint::Names;
use super::perf::repetitiveness;
use super::power::GpuModel;
use super::prefix_cache::block_hashes;
use super::profile::Profile;
use super::scheduler::{JobSpec, Progress};
use super::tokens::{mix, Completion};

/// Largest request body: a 262k-token prompt as a JSON id list is under 2 MB.
const BODY_LIMIT: usize = 64 << 20;

/// What every handler shares.
pub struct AppState {
    served: ServedModel,
    natural_length: (u32, u32),
    prefix_block_tokens: Option<u32>,
    engine: Engine,
    /// Whose names `/metrics` uses, and the cache size its KV usage is a share of.
    names: Names,
    kv_capacity: u64,
    /// Whether it models speculative decoding (its metrics are then served too).
    speculative: bool,
    /// Whether speculation's acceptance follows the prompt's repetitiveness.
    acceptance_by_content: bool,
    /// The simulated GPUs behind `/dcgm-exporter/metrics`.
    gpu: Option<GpuModel>,
    /// Source of response ids.
    next_id: AtomicU64,
    /// `--jitter`: each request's delay before it reaches the engine.
    jitter: Option<Jitter>,
}

impl AppState {
    /// State for serving `profile` with `engine`, `/metrics` under `names`' names, each request
    /// delayed by `jitter` if given.
    pub fn new(profile: &Profile, engine: Engine, names: Names, jitter: Option<Jitter>) -> Self {
        let created = unix_time();
        Self {
            served: ServedModel {
                id: profile.model.clone(),
                owned_by: profile.owned_by.clone(),
                max_model_len: profile.max_model_len,
                created,
            },
            natural_length: profile.natural_length,
            prefix_block_tokens: profile.prefix_block_tokens,
            engine,
            names,
            kv_capacity: profile.limits.kv_capacity,
            speculative: profile.perf.speculative.is_some(),
            acceptance_by_content: profile
                .perf
                .speculative
                .is_some_and(|s| s.repetitive_acceptance.is_some()),
            gpu: profile.gpu.clone(),
            next_id: AtomicU64::new(mix(created)),
            jitter,
        }
    }

    /// Identity of a new response.
    fn meta(&self, request: &Generation) -> ResponseMeta {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        ResponseMeta {
            endpoint: request.endpoint,
            id: format!("{}-{:016x}", request.endpoint.id_prefix(), mix(n)),
            created: unix_time(),
            model: self.served.id.clone(),
        }
    }
}

/// Seconds since the Unix epoch.
fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The server's routes; the prefix-cache reset is vLLM's or SGLang's, by `--metrics-names`.
pub fn router(state: Arc<AppState>) -> Router {
    let reset = match state.names {
        Names::Vllm => Router::new().route("/reset_prefix_cache", post(reset_prefix_cache)),
        Names::Sglang => Router::new().route("/flush_cache", get(flush_cache).post(flush_cache)),
    };
    Router::new()
        .merge(reset)
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/tokenize", post(tokenize))
        .route("/v1/tokenize", post(tokenize))
        .route("/metrics", get(metrics))
        .route("/dcgm-exporter/metrics", get(dcgm))
        .route("/version", get(version))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// vLLM's `/version`, so that reports say the numbers came from the simulator.
async fn version() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "version": format!("rigrun-sim {}", env!("CARGO_PKG_VERSION")) }))
}

async fn models(State(app): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(app.served.list())
}

async fn completions(State(app): State<Arc<AppState>>, body: Bytes) -> Response {
    let arrived = Instant::now();
    respond(api::parse_completion(&body, &app.served), arrived, &app).await
}

async fn chat_completions(State(app): State<Arc<AppState>>, body: Bytes) -> Response {
    let arrived = Instant::now();
    respond(api::parse_chat(&body, &app.served), arrived, &app).await
}

/// `POST /tokenize`: vLLM's, SGLang's or llama.cpp's, by the body (see `tokenize.rs`).
async fn tokenize(State(app): State<Arc<AppState>>, body: Bytes) -> Response {
    match super::tokenize::reply(&body, &app.served, app.names) {
        Ok(reply) => Json(reply).into_response(),
        Err(err) => err.into_response(),
    }
}

/// vLLM's `POST /reset_prefix_cache`: empties the prefix cache, answers 200 with no body.
async fn reset_prefix_cache(State(app): State<Arc<AppState>>) -> Response {
    match app.engine.reset_prefix_cache().await {
        Ok(_) => StatusCode::OK.into_response(),
        Err(stopped) => internal(&stopped.to_string()).into_response(),
    }
}

/// SGLang's `/flush_cache` (GET or POST): empties the prefix cache, answers SGLang's text.
async fn flush_cache(State(app): State<Arc<AppState>>) -> Response {
    match app.engine.reset_prefix_cache().await {
        Ok(_) => (
            StatusCode::OK,
            "Cache flushed.\nPlease check backend logs for more details. (When there are running \
             or waiting requests, the operation will not be performed.)\n",
        )
            .into_response(),
        Err(stopped) => internal(&stopped.to_string()).into_response(),
    }
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(format!("Not Found: {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!("Method {method} not allowed on {}", uri.path()),
    }
}

/// Prometheus text with vLLM's or SGLang's metric names (`--metrics-names`), so tools that
/// read either server's `/metrics` work.
async fn metrics(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    let state = super::metrics_endpoint::State {
        stats: app.engine.stats(),
        kv_capacity: app.kv_capacity,
        speculative: app.speculative,
    };
    let mut text = super::metrics_endpoint::exposition(app.names, &state, &app.served.id);
    let labels = format!("model_name={}", serde_json::Value::from(app.served.id.as_str()));
    app.engine
        .with_latencies(|latencies| latencies.write(&labels, &mut text));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// The profile's simulated GPUs in the DCGM exporter's format (404 for a profile without).
async fn dcgm(State(app): State<Arc<AppState>>) -> Response {
    match &app.gpu {
        Some(gpu) => {
            let text = gpu.exposition(app.engine.stats().running);
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
        }
        None => ApiError::not_found("this profile has no gpu: section, so no simulated GPU telemetry")
            .into_response(),
    }
}

/// Runs a parsed request that arrived at `arrived`, or returns its error.
async fn respond(parsed: Result<Generation, ApiError>, arrived: Instant, app: &AppState) -> Response {
    match parsed {
        Ok(request) => generate(request, arrived, app)
            .await
            .unwrap_or_else(IntoResponse::into_response),
        Err(err) => err.into_response(),
    }
}

/// Submits every choice of `request` to the engine and answers, streamed or whole.
async fn generate(request: Generation, received: Instant, app: &AppState) -> Result<Response, ApiError> {
    let outputs: Vec<Completion> = (0..request.prompts.len())
        .map(|i| request.plan(i, app.natural_length))
        .collect();
    // The delay is before the engine: the request reaches it (and is paced from) afterwards.
    let arrived = match &app.jitter {
        Some(jitter) => {
            tokio::time::sleep(jitter.next_delay()).await;
            Instant::now()
        }
        None => received,
    };
    let (tx, rx) = unbounded_channel();
    for (choice, (prompt, output)) in request.prompts.iter().zip(&outputs).enumerate() {
        let spec = JobSpec {
            prompt_tokens: prompt.ids.len() as u32,
            block_hashes: app
                .prefix_block_tokens
                .map(|b| block_hashes(&prompt.ids, b))
                .unwrap_or_default(),
            output_tokens: output.tokens(),
            max_tokens: prompt.max_tokens,
            repetitiveness: if app.acceptance_by_content {
                repetitiveness(&prompt.ids)
            } else {
                0.0
            },
        };
        // Choices are indexed by u32 on the wire between engine and handler.
        let clock = RequestClock::new(received, spec.prompt_tokens);
        let sink = Sink::new(tx.clone(), choice as u32, request.stream, clock);
        app.engine
            .submit(spec, sink, arrived)
            .map_err(|e| internal(&e.to_string()))?;
    }
    let meta = app.meta(&request);
    let reports_cache = app.prefix_block_tokens.is_some();
    if request.stream {
        let stream = TokenStream::new(&meta, &request, outputs, reports_cache, rx);
        return Ok(stream.into_response());
    }
    let cached = wait_until_done(rx, outputs.len()).await?;
    let usage = Usage::of(&request, &outputs);
    let usage = if reports_cache {
        usage.with_cached(cached)
    } else {
        usage
    };
    Ok(Json(api::full_response(&meta, &outputs, usage)).into_response())
}

/// A 500 for a failure inside the sim.
fn internal(message: &str) -> ApiError {
    ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: message.into(),
    }
}

/// Waits for the last token of each of `choices` choices; returns their prompt tokens served
/// by the prefix cache, summed.
async fn wait_until_done(
    mut rx: UnboundedReceiver<(u32, Progress)>,
    choices: usize,
) -> Result<u64, ApiError> {
    let (mut remaining, mut cached) = (choices, 0);
    while remaining > 0 {
        match rx.recv().await {
            Some((_, progress)) if progress.done => {
                remaining -= 1;
                cached += u64::from(progress.cached);
            }
            Some(_) => {}
            None => return Err(internal("the simulated engine dropped the request")),
        }
    }
    Ok(cached)
}

/// A streamed response: turns the engine's progress into SSE chunks.
struct TokenStream {
    rx: UnboundedReceiver<(u32, Progress)>,
    writer: ChunkWriter,
    outputs: Vec<Completion>,
    /// Tokens already sent, per choice.
    sent: Vec<u32>,
    remaining: usize,
    /// The usage chunk to send at the end, if asked for.
    usage: Option<Usage>,
    /// Prompt tokens per choice, when every chunk carries usage (continuous usage stats).
    continuous: Option<Vec<u64>>,
    /// Prompt tokens the prefix cache served, summed over the finished choices; reported
    /// when the server has a prefix cache.
    cached: Option<u64>,
    /// Whether `[DONE]` was written.
    ended: bool,
}

impl TokenStream {
    fn new(
        meta: &ResponseMeta,
        request: &Generation,
        outputs: Vec<Completion>,
        reports_cache: bool,
        rx: UnboundedReceiver<(u32, Progress)>,
    ) -> Self {
        let prompt_tokens = request.prompts.iter().map(|p| p.ids.len() as u64);
        Self {
            rx,
            writer: ChunkWriter::new(meta),
            sent: vec![0; outputs.len()],
            remaining: outputs.len(),
            usage: request.include_usage.then(|| Usage::of(request, &outputs)),
            continuous: request.continuous_usage.then(|| prompt_tokens.collect()),
            cached: reports_cache.then_some(0),
            outputs,
            ended: false,
        }
    }

    /// The usage a chunk of choice `index` carries after `generated` tokens, if any.
    fn usage_so_far(&self, index: usize, generated: u32) -> Option<Usage> {
        let prompt = *self.continuous.as_ref()?.get(index)?;
        Some(Usage::new(prompt, u64::from(generated)))
    }

    /// Writes the chunks for one progress report.
    fn advance(&mut self, out: &mut Vec<u8>, choice: u32, progress: Progress) {
        let index = choice as usize;
        let (Some(output), Some(&sent)) = (self.outputs.get(index), self.sent.get(index)) else {
            return;
        };
        if sent == 0 && self.writer.sends_role() {
            self.writer.role(out, index, self.usage_so_far(index, 0));
        }
        let finish = progress.done.then_some(output.finish);
        let piece = output.piece(sent, progress.generated);
        let usage = self.usage_so_far(index, progress.generated);
        self.writer.token(out, index, piece, finish, usage);
        self.sent[index] = progress.generated;
        if progress.done {
            self.remaining -= 1;
            self.cached = self.cached.map(|c| c + u64::from(progress.cached));
        }
    }

    /// Writes the stream's end: the usage chunk if asked for, then `[DONE]`.
    fn close(&self, out: &mut Vec<u8>) {
        if self.remaining > 0 {
            let err = internal("the simulated engine dropped the request").body();
            out.extend_from_slice(format!("data: {err}\n\n").as_bytes());
        } else if let Some(usage) = self.usage {
            let usage = self.cached.map_or(usage, |c| usage.with_cached(c));
            self.writer.usage(out, usage);
        }
        ChunkWriter::done(out);
    }

    /// The next write: every report already delivered, and the end once all choices are done
    /// (or the engine let go of them). `None` after the end.
    async fn next_bytes(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        let mut out = Vec::with_capacity(256);
        let mut next = self.rx.recv().await;
        let engine_gone = next.is_none();
        while let Some((choice, progress)) = next {
            self.advance(&mut out, choice, progress);
            next = self.rx.try_recv().ok();
        }
        if self.remaining == 0 || engine_gone {
            self.close(&mut out);
            self.ended = true;
        }
        Some(Bytes::from(out))
    }
}

impl IntoResponse for TokenStream {
    fn into_response(self) -> Response {
        let chunks = futures_util::stream::unfold(self, |mut stream| async move {
            let bytes = stream.next_bytes().await?;
            Some((Ok::<_, Infallible>(bytes), stream))
        });
        let headers = [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ];
        (headers, Body::from_stream(chunks)).into_response()
    }
}
