//! `rigrun bench`: a native load generator for OpenAI-compatible servers that every host runs
//! identically (run-sweep copies this binary to each host as `{{ rigrun }}`).
//!
//! Per concurrency level C it sends C unmeasured warm-up requests, then 5×C measured ones
//! (catid's method), streams every response and times each token as it arrives. It prints one
//! JSON line per level on stdout with `vllm bench serve`'s metric names, a table on stderr, and
//! says in each line whether the level can be trusted (`valid`, `problems`). See docs/bench.md.
//!
//! The data flows one way: `workload` (what each request asks) → `level` (dispatching warm-up
//! and measured requests through `client` + `sse`: HTTP and the stream) → `metrics` (counts,
//! histograms, windows) → `record` (the level's summary and its JSON line, judged by `validity`)
//! → `display` (the stderr table and progress). `sys` (open files, CPU, memory) and `rng` serve
//! them.

mod cache;
mod client;
mod display;
mod goodput;
mod latency;
pub mod lengths;
mod level;
mod metrics;
mod record;
pub(crate) mod rng;
mod sse;
mod sys;
mod text;
mod trace;
mod turns;
mod validity;
mod workload;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{Map, Value};

pub use self::client::Api;

use self::cache::CacheReset;
use self::client::{Client, ModelsError};
use self::display::LevelProgress;
use self::goodput::Goodput;
use self::lengths::{Dist, Lengths};
use self::level::{LevelPlan, Shared, Stop};
use self::record::{RunInfo, Summary};
use self::trace::Trace;
use self::workload::{Source, Workload, WorkloadSpec, DEFAULT_TOKEN_ID};
use crate::config::duration::Dur;
use crate::exit::{Exit, Invalid};

/// Arguments of `rigrun bench`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Defaults follow catid's method: per level, C warm-up requests (not measured), then 5 × C measured \
requests with C in flight, each prompt --input-len copies of --token-id, max_tokens --output-len \
with ignore_eos, streamed. Latencies count from when each request was due, so time queued in the \
client is included.

Each JSON line carries `valid` and `problems`: outputs shorter than asked (ignore_eos not \
honoured), concurrency not reached, failed requests, fewer than 5 × C requests, a saturated client CPU, \
a --trace replay sent later than its timestamps (p99 lateness above 10 ms, or half the trace's mean gap), \
text prompts whose usage.prompt_tokens differs from the count they were cut to (or is missing).

--workload text: with --api completions the text is the prompt and counts --input-len tokens as the \
server counts a text prompt (a BOS included), so usage.prompt_tokens is --input-len; with --api chat \
the message's text counts --input-len tokens and usage.prompt_tokens adds the chat template's \
(`chat_template_tokens` in the records; needs vLLM's /tokenize, which takes messages). Every prompt \
is cut before the first level (give --num-requests, not --duration).

With --slo p99_ttft_ms=2000,median_tpot_ms=50, each line also carries `good_requests` and `goodput` \
(requests per second whose own TTFT, TPOT and E2EL met every limit, judged per request).

Exit codes: 0 every level valid; 1 a level invalid or with failed requests (its line is still \
printed); 2 bad arguments or an unreachable server.")]
pub struct BenchArgs {
    /// The server's base URL (with or without a trailing /v1).
    #[arg(long, default_value = "http://127.0.0.1:30000")]
    pub url: String,
    /// The model to ask for (default: the first one GET /v1/models lists); a model the server
    /// does not list is refused (exit 2) with the closest one it does.
    #[arg(long)]
    pub model: Option<String>,
    /// Concurrency levels: requests in flight, one level or a comma list (1,4,16,32); default 1
    /// (with --trace: no cap, the trace sets the load; one value caps it).
    #[arg(long, value_name = "C,...", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub concurrency: Vec<u32>,
    /// Prompt tokens per request (catid, random and text workloads).
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub input_len: u32,
    /// Output tokens asked per request (max_tokens, with ignore_eos).
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub output_len: u32,
    /// How prompt lengths vary per request around --input-len: fixed, uniform:ratio=R (as
    /// `vllm bench serve --random-range-ratio`: uniform in [len·(1−R), len·(1+R)]) or
    /// normal:sd=TOKENS (rounded, clipped to ≥ 1); drawn from --seed.
    #[arg(long, value_name = "DIST", default_value = "fixed", value_parser = Dist::parse)]
    pub input_dist: Dist,
    /// The same for output lengths (max_tokens) around --output-len.
    #[arg(long, value_name = "DIST", default_value = "fixed", value_parser = Dist::parse)]
    pub output_dist: Dist,
    /// vLLM's --random-range-ratio R: both lengths uniform in [len·(1−R), len·(1+R)], 0 ≤ R < 1
    /// (short for --input-dist uniform:ratio=R --output-dist uniform:ratio=R).
    #[arg(long, value_name = "R", conflicts_with_all = ["input_dist", "output_dist"],
          value_parser = range_ratio)]
    pub range_ratio: Option<Dist>,
    /// Turns per conversation: each turn's prompt is the conversation so far (every earlier
    /// message and the server's reply) plus a new user message of --input-len, so a prefix cache
    /// serves the history as in production; C then counts conversations in flight, and each
    /// level measures 5 × C conversations (or --num-requests / N). Records carry TTFT per turn.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub turns: u32,
    /// The pause between a reply and the conversation's next turn (e.g. 0.5s, 2s).
    #[arg(long, value_name = "TIME", default_value = "0s", value_parser = think_time, requires = "turns")]
    pub think_time: Duration,
    /// Measured requests per level (default: 5 × C).
    #[arg(long, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub num_requests: Option<u64>,
    /// Measure each level for this long instead of a number of requests (e.g. 60s, 5m);
    /// requests still running at the end are waited for and counted.
    #[arg(long, value_name = "TIME", value_parser = positive_duration)]
    pub duration: Option<Duration>,
    /// Unmeasured warm-up requests per level before measuring (default: C).
    #[arg(long, value_name = "N")]
    pub warmup: Option<u64>,
    /// Poisson arrivals at this many requests per second, at most C in flight (default: a closed
    /// loop that keeps C in flight).
    #[arg(long, value_name = "R", value_parser = positive_rate)]
    pub request_rate: Option<f64>,
    /// Prompts: catid (one repeated token id), random (random token ids), text (passages of a
    /// public-domain novel shipped with rigrun, each request its own, cut to exactly its length
    /// of the served model's tokenizer through the server's POST /tokenize, and checked against
    /// usage.prompt_tokens), or a JSONL file with one {"prompt": ...} or {"messages": [...]} per
    /// line (optional "max_tokens").
    #[arg(long, value_name = "catid|random|text|FILE", default_value = "catid")]
    pub workload: String,
    /// The token id catid's prompt repeats.
    #[arg(long, value_name = "ID", default_value_t = DEFAULT_TOKEN_ID)]
    pub token_id: u32,
    /// Give each request a distinct leading token, so prefix caches cannot serve its prompt.
    #[arg(long)]
    pub unique_prefix: bool,
    /// The endpoint: completions (/v1/completions, token-id prompts) or chat
    /// (/v1/chat/completions, text).
    #[arg(long, value_enum, default_value = "completions")]
    pub api: Api,
    /// Ask for whole responses instead of streams (no TTFT, TPOT or ITL then).
    #[arg(long)]
    pub no_stream: bool,
    /// Also write each level's JSON to DIR/bench_c{C}_in{I}_out{O}.json.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Give up on a response when no bytes arrive for this long (not a limit on the whole
    /// request, so long generations are never cut off).
    #[arg(long, value_name = "TIME", default_value = "20m", value_parser = positive_duration)]
    pub read_timeout: Duration,
    /// Seed of random prompts and arrival times (default: a new one per run, printed in the
    /// results, so a rerun cannot hit the previous run's prefix cache).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also measure goodput: the requests per second whose own TTFT, TPOT and end-to-end latency
    /// meet these limits (as vLLM's --goodput), in the record as `goodput` and `good_requests`.
    /// The limits are written as the report's --slo (p99_ttft_ms=2000,median_tpot_ms=50); per
    /// request, a limit on any statistic of a latency bounds that latency, the strictest winning.
    /// Without it, in a sweep of a playbook with `slo:`, the playbook's (RIGRUN_SLO).
    #[arg(long, value_name = "METRIC=LIMIT,...", value_parser = crate::config::slo::Slo::parse)]
    pub slo: Option<crate::config::slo::Slo>,
    /// Empty the server's prefix cache after each level's warm-up, before its measured requests
    /// (vLLM's POST /reset_prefix_cache, else SGLang's POST /flush_cache; a server with neither
    /// is refused, exit 2). Records say "cache": "reset", or "warm" without this flag.
    #[arg(long)]
    pub reset_cache: bool,
    /// Replay a Mooncake-format JSONL trace (timestamp ms, input_length, output_length, hash_ids
    /// of 512-token prefix blocks): each line sent at its timestamp, requests that share hash ids
    /// sharing those prompt blocks exactly, max_tokens its output_length. One level, no warm-up;
    /// --num-requests / --duration replay its start. Records say how late the client sent.
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "workload", "input_len", "output_len", "input_dist", "output_dist", "range_ratio",
        "turns", "warmup", "request_rate", "unique_prefix"])]
    pub trace: Option<PathBuf>,
    /// Replay the trace this many times faster (its timestamps divided by it; 0.5: slower).
    #[arg(long, value_name = "X", default_value_t = 1.0, requires = "trace", value_parser = positive_speed)]
    pub trace_speed: f64,
}

fn positive_speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{text}` is not a positive speed factor")),
    }
}

fn positive_duration(text: &str) -> Result<Duration, String> {
    let Dur(d) = Dur::parse(text)?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}

/// A think time: seconds with a fraction (0.5, 0.5s) or a duration (500ms, 2m); zero allowed.
fn think_time(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let seconds = text.strip_suffix('s').unwrap_or(text).parse::<f64>();
    match seconds {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok(Duration::from_secs_f64(secs)),
        Ok(_) => Err(format!("`{text}` is not a duration of zero or more")),
        Err(_) => Dur::parse(text).map(|Dur(d)| d),
    }
}

fn range_ratio(text: &str) -> Result<Dist, String> {
    let ratio = text
        .parse::<f64>()
        .map_err(|_| format!("`{text}` is not a number"))?;
    Dist::uniform(ratio)
}

fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "`{text}` is not a positive number of requests per second"
        )),
    }
}

/// Runs `rigrun bench`; the exit code says whether every level is valid.
pub async fn run(args: BenchArgs) -> anyhow::Result<Exit> {
    check_args(&args)?;
    let goodput = match &args.slo {
        Some(slo) => Some(Goodput::from_slo(slo).map_err(Invalid)?),
        None => goodput::from_env(),
    };
    let source = match &args.trace {
        Some(path) => Source::Trace(Arc::new(Trace::read(path).map_err(Invalid)?)),
        None => Source::parse(&args.workload).map_err(Invalid)?,
    };
    if let Some(dir) = &args.out_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Invalid(format!("cannot create --out-dir {}: {e}", dir.display())))?;
    }
    warn_about_open_files(&args);
    let stream = !args.no_stream;
    let client = Client::new(&args.url, args.api, stream, args.read_timeout)?;
    let trace = match &source {
        Source::Trace(trace) => Some(trace.clone()),
        _ => None,
    };
    let model = pick_model(&client, &args, trace.as_deref()).await?;
    let cache_reset = if args.reset_cache {
        Some(CacheReset::find(&client).await.map_err(Invalid)?)
    } else {
        None
    };
    let seed = args.seed.unwrap_or_else(random_u64);
    let source = match source {
        Source::Text(_) => {
            let count = text_prompts_needed(&args);
            let lengths = asked_lengths(&args, seed);
            Source::Text(
                text::build(&client, &model, args.api, &lengths, count)
                    .await
                    .map_err(Invalid)?,
            )
        }
        other => other,
    };
    let workload = Workload::new(WorkloadSpec {
        source,
        api: args.api,
        model: model.clone(),
        lengths: asked_lengths(&args, seed),
        token_id: args.token_id,
        unique_prefix: args.unique_prefix,
        stream,
        turns: args.turns,
        seed,
        nonce: random_u64(),
    })
    .map_err(Invalid)?;
    let info = run_info(&args, &workload, model, seed);
    let shared = Shared::new(client, workload, stream, goodput);
    run_levels(&shared, &args, &info, cache_reset).await
}

/// Runs every level in turn, printing each one's line and row as it ends. Ctrl-C ends the run
/// with the table of the levels measured so far (the level cut short is not a level: exit 1).
async fn run_levels(
    shared: &Arc<Shared>,
    args: &BenchArgs,
    info: &RunInfo,
    cache_reset: Option<CacheReset>,
) -> anyhow::Result<Exit> {
    eprintln!("{}", intro(&shared.client, info));
    let header = display::header(shared.goodput.is_some());
    eprintln!("{header}");
    let mut measured: Vec<Summary> = Vec::new();
    // One listener for the whole run, so that no Ctrl-C falls between two levels.
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    for (n, concurrency) in levels(args, info).into_iter().enumerate() {
        let seed = info.seed ^ n as u64;
        let level = run_level(shared, args, info, (concurrency, seed), cache_reset);
        let summary = tokio::select! {
            summary = level => summary,
            _ = &mut interrupt => {
                eprintln!("{}", display::interrupted(concurrency, &header, &measured));
                return Ok(Exit::Failed);
            }
        };
        emit(&summary.record(info), args.out_dir.as_deref(), info, concurrency)?;
        for line in display::row(&summary) {
            eprintln!("{line}");
        }
        measured.push(summary);
    }
    Ok(Exit::ok_if(measured.iter().all(Summary::valid)))
}

/// The levels' C: `--concurrency`, else 1; a replay's one cap, else a slot for every line.
fn levels(args: &BenchArgs, info: &RunInfo) -> Vec<u32> {
    match (&info.replay, args.concurrency.is_empty()) {
        (Some(_), true) => vec![u32::try_from(replayed_lines(args, info))
            .unwrap_or(u32::MAX)
            .max(1)],
        (None, true) => vec![1],
        (_, false) => args.concurrency.clone(),
    }
}

/// The requests of a text run, every one with its own prompt cut before the first level: per
/// level its warm-up and its measured requests, numbered across levels as `level` numbers them.
fn text_prompts_needed(args: &BenchArgs) -> u64 {
    let levels = if args.concurrency.is_empty() {
        &[1][..]
    } else {
        &args.concurrency
    };
    levels
        .iter()
        .map(|&c| {
            let c = u64::from(c);
            args.warmup.unwrap_or(c) + args.num_requests.unwrap_or(5 * c)
        })
        .sum()
}

/// Checks what clap cannot: the URL's shape, one cap for a replay, a text run's count.
fn check_args(args: &BenchArgs) -> Result<(), Invalid> {
    if args.workload == text::NAME && args.trace.is_none() {
        workload::check_text(args.turns, args.unique_prefix).map_err(Invalid)?;
        if args.duration.is_some() {
            return Err(Invalid(
                "--workload text cuts every prompt before the first level, so it needs the \
                 number of requests: give --num-requests instead of --duration"
                    .into(),
            ));
        }
    }
    if args.trace.is_some() && args.concurrency.len() > 1 {
        return Err(Invalid(
            "--trace replays the trace once, as one level: give one --concurrency cap, or none \
             (the trace's timestamps then set the load)"
                .into(),
        ));
    }
    let url = client::base_url(&args.url);
    match reqwest::Url::parse(&url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(_) => Err(Invalid(format!(
            "--url {}: must be an http:// or https:// URL with a host",
            args.url
        ))),
        Err(e) => Err(Invalid(format!("--url {}: not a URL ({e})", args.url))),
    }
}

/// Warns when the open-file limit cannot hold the largest level's sockets.
fn warn_about_open_files(args: &BenchArgs) {
    let limit = sys::raise_open_file_limit();
    let largest = match (&args.trace, args.concurrency.iter().max()) {
        (_, Some(&largest)) => largest,
        (Some(_), None) => return,
        (None, None) => 1,
    };
    let needed = u64::from(largest) + 64;
    if limit < needed {
        eprintln!(
            "rigrun bench: warning: the open-file limit is {limit}, fewer than the {needed} that \
             C={largest} needs; raise the hard limit (ulimit -Hn) or expect connection errors"
        );
    }
}

/// The model to ask for: `--model`, else the first one the server lists. An unreachable
/// server is invalid input (exit 2): nothing could be measured.
async fn pick_model(client: &Client, args: &BenchArgs, trace: Option<&Trace>) -> Result<String, Invalid> {
    let models = match (client.models().await, &args.model) {
        (Ok(models), _) => models,
        (Err(ModelsError::Unreachable(why)), _) => return Err(Invalid(why)),
        (Err(ModelsError::Answer(why)), None) => {
            return Err(Invalid(format!("{why}; give the model with --model")))
        }
        (Err(ModelsError::Answer(why)), Some(model)) => {
            eprintln!("rigrun bench: warning: {why}; using --model {model} anyway");
            return Ok(model.clone());
        }
    };
    match (trace, models.max_model_len) {
        (Some(trace), Some(max)) => trace.check_fits(max).map_err(Invalid)?,
        (Some(_), None) => {}
        (None, max) => check_fits(args, max)?,
    }
    let listed = &models.ids;
    match (&args.model, listed.first()) {
        (Some(model), _) if !listed.is_empty() && !listed.contains(model) => {
            Err(Invalid(unknown_model(client.base(), model, listed)))
        }
        (Some(model), _) => Ok(model.clone()),
        (None, Some(first)) => Ok(first.clone()),
        (None, None) => Err(Invalid(format!(
            "{}/v1/models lists no model; is one loaded? (or give --model)",
            client.base()
        ))),
    }
}

/// Refuses lengths the server's context window cannot hold (every request would fail).
/// `--model` names a model the server does not list: said with the closest it lists, rather
/// than measured as a run of failed requests.
fn unknown_model(base: &str, model: &str, listed: &[String]) -> String {
    let names: Vec<&str> = listed.iter().map(String::as_str).collect();
    let hint = match crate::config::closest(model, &names) {
        Some(best) => format!("did you mean --model {best}?"),
        None => format!(
            "give one of them with --model, or leave it out to use {}",
            names[0]
        ),
    };
    format!("{base}/v1/models lists {}, not {model}; {hint}", names.join(", "))
}

fn check_fits(args: &BenchArgs, max_model_len: Option<u64>) -> Result<(), Invalid> {
    let token_prompts =
        args.api == Api::Completions && matches!(args.workload.as_str(), "catid" | "random" | text::NAME);
    let nominal = u64::from(args.input_len) + u64::from(args.output_len);
    // Bounded distributions must fit at their longest; a normal one at its mean.
    let (total, longest) = match asked_lengths(args, 0).longest() {
        Some((input, output)) if u64::from(input) + u64::from(output) > nominal => (
            u64::from(input) + u64::from(output),
            format!(" drawn at their longest ({input} + {output})"),
        ),
        _ => (nominal, String::new()),
    };
    // A conversation's last turn holds every earlier message and reply (one word a token).
    let (total, turns) = match args.turns {
        1 => (total, String::new()),
        n => (total * u64::from(n), format!("--turns {n} × (")),
    };
    let close = if turns.is_empty() {
        ""
    } else {
        ") by the last turn"
    };
    match max_model_len {
        Some(max) if (token_prompts || args.turns > 1) && total > max => Err(Invalid(format!(
            "{turns}--input-len {} + --output-len {}{longest}{close} = {total} tokens, more than \
             the server's max_model_len {max}",
            args.input_len, args.output_len
        ))),
        _ => Ok(()),
    }
}

/// The requests' lengths the flags ask for.
fn asked_lengths(args: &BenchArgs, seed: u64) -> Lengths {
    Lengths {
        input_len: args.input_len,
        input_dist: args.range_ratio.unwrap_or(args.input_dist),
        output_len: args.output_len,
        output_dist: args.range_ratio.unwrap_or(args.output_dist),
        seed,
    }
}

fn random_u64() -> u64 {
    getrandom::u64().unwrap_or(0x5EED)
}

fn run_info(args: &BenchArgs, workload: &Workload, model: String, seed: u64) -> RunInfo {
    let spec = workload.spec();
    let info = RunInfo {
        model,
        api: match args.api {
            Api::Completions => "completions",
            Api::Chat => "chat",
        },
        stream: spec.stream,
        workload: workload.name(),
        workload_note: workload.note(),
        unique_prefix: spec.unique_prefix,
        token_id: matches!(spec.source, Source::Catid).then_some(spec.token_id),
        seed,
        input_len: args.input_len,
        output_len: args.output_len,
        input_dist: spec.lengths.input_dist.label(),
        output_dist: spec.lengths.output_dist.label(),
        turns: args.turns,
        think_time: args.think_time,
        uniform_output: !matches!(spec.source, Source::File { .. } | Source::Trace(_))
            && spec.lengths.output_dist == Dist::Fixed,
        replay: None,
        text: match &spec.source {
            Source::Text(prompts) => Some(prompts.info.clone()),
            _ => None,
        },
    };
    match workload.trace() {
        Some(trace) => with_replay(args, trace, info),
        None => info,
    }
}

/// A replay's run: the trace, its speed and cap, and its lines' mean lengths as the nominal ones
/// (`input_dist`/`output_dist` say `trace`).
fn with_replay(args: &BenchArgs, trace: &Trace, info: RunInfo) -> RunInfo {
    let cap = args.concurrency.first().copied();
    let (replay, (input_len, output_len)) = trace.replay(args.num_requests, args.trace_speed, cap);
    RunInfo {
        input_len,
        output_len,
        input_dist: Some("trace".into()),
        output_dist: Some("trace".into()),
        replay: Some(replay),
        ..info
    }
}

/// The lines a replay sends at most (0 when the run replays no trace).
fn replayed_lines(args: &BenchArgs, info: &RunInfo) -> u64 {
    info.replay
        .as_ref()
        .map_or(0, |r| r.replayed_lines(args.num_requests))
}

/// The run's opening lines on stderr.
fn intro(client: &Client, info: &RunInfo) -> String {
    let mut note = info.workload_note.map_or(String::new(), |n| format!("\n  ({n})"));
    if let Some(text) = &info.text {
        note.push_str(&format!(
            "\n  (text from {}, token counts from the {}, each checked against usage.prompt_tokens)",
            text.corpus, text.tokenizer
        ));
    }
    let dist = |d: &Option<String>| d.as_ref().map_or(String::new(), |d| format!(" ({d})"));
    let turns = match (&info.replay, info.turns) {
        (Some(r), _) => format!(
            ", replaying {} ({} lines) at {}× speed, {}",
            r.path,
            r.lines,
            r.speed,
            r.cap
                .map_or("no concurrency cap".into(), |c| format!("at most {c} in flight"))
        ),
        (None, 1) => String::new(),
        (None, n) => format!(
            ", conversations of {n} turns ({} s think time; C counts conversations)",
            info.think_time.as_secs_f64()
        ),
    };
    format!(
        "rigrun bench: {}, model {}, {} API, {}, workload {}, {}{} input / {}{} output tokens{turns}{note}",
        client.base(),
        info.model,
        info.api,
        if info.stream { "streaming" } else { "not streaming" },
        info.workload,
        info.input_len,
        dist(&info.input_dist),
        info.output_len,
        dist(&info.output_dist)
    )
}

/// Runs one level and summarises it.
async fn run_level(
    shared: &Arc<Shared>,
    args: &BenchArgs,
    info: &RunInfo,
    (concurrency, seed): (u32, u64),
    cache_reset: Option<CacheReset>,
) -> Summary {
    let c = u64::from(concurrency);
    let turns = u64::from(args.turns);
    // Conversations (single requests unless multi-turn): 5 × C, or enough for --num-requests.
    let stop = match (args.duration, &info.replay) {
        (Some(limit), _) => Stop::For(limit),
        (None, Some(_)) => Stop::After(replayed_lines(args, info)),
        (None, None) => Stop::After(args.num_requests.map_or(5 * c, |n| n.div_ceil(turns))),
    };
    let plan = LevelPlan {
        concurrency,
        // A replay sends the trace alone: warm-up requests would fill the prefix cache.
        warmup: if info.replay.is_some() {
            0
        } else {
            args.warmup.unwrap_or(c)
        },
        stop,
        rate: args.request_rate,
        seed,
        turns: args.turns,
        think_time: args.think_time,
        cache_reset,
        replay: info.replay.as_ref().map(|r| r.speed),
    };
    let measured = match stop {
        Stop::After(n) => Some(n * turns),
        Stop::For(_) => None,
    };
    let mut progress = LevelProgress::new(concurrency, plan.warmup, measured);
    let result = level::run(shared, &plan, &mut progress).await;
    if let Some(first) = &result.warmup_first_error {
        eprintln!(
            "C={concurrency}: {} of {} warm-up requests failed (first: {first})",
            result.warmup_failed, plan.warmup
        );
    }
    Summary::new(&plan, &result, info)
}

/// Prints the level's JSON line on stdout and, with `--out-dir`, writes it to a file.
fn emit(
    record: &Map<String, Value>,
    out_dir: Option<&Path>,
    info: &RunInfo,
    concurrency: u32,
) -> anyhow::Result<()> {
    let line = serde_json::to_string(record)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .context("cannot write the results to stdout")?;
    if let Some(dir) = out_dir {
        let name = format!(
            "bench_c{concurrency}_in{}_out{}.json",
            info.input_len, info.output_len
        );
        let path = dir.join(name);
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, format!("{line}\n"))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
