//! `rigrun sim`: a simulated GPU LLM inference server speaking the OpenAI API the way SGLang
//! and vLLM do, paced by a per-profile performance model (continuous batching, KV cache,
//! chunked prefill, prefix caching). See `src/sim/README.md` for the model and its figures.

mod api;
mod connections;
mod crash;
mod engine;
mod http_server;
mod jitter;
mod latency;
mod metrics_endpoint;
mod perf;
mod power;
mod predict;
mod prefix_cache;
mod profile;
mod scheduler;
mod tokenize;
mod tokens;

use std::sync::Arc;

use std::time::Duration;

use anyhow::{bail, Context as _};

use self::connections::Closing;
use self::crash::CrashRule;
use self::engine::Engine;
use self::jitter::Jitter;
use self::profile::Profile;
use crate::exit::{Exit, Invalid};

/// Arguments of `rigrun sim`.
#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Built-in profile name (see --list-profiles) or path of a profile YAML file.
    #[arg(long, required_unless_present = "list_profiles")]
    pub profile: Option<String>,
    /// Port to listen on; 0 picks a free one (the "serving" line shows it).
    #[arg(long, default_value_t = 30000)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Model id to serve instead of the profile's.
    #[arg(long)]
    pub model: Option<String>,
    /// List the built-in profiles and exit.
    #[arg(long)]
    pub list_profiles: bool,
    /// Instead of serving, print the profile's predicted catid's-method results (one JSON line
    /// per level) at these concurrencies, e.g. 1,4,16,32.
    #[arg(long, value_delimiter = ',')]
    pub predict: Vec<usize>,
    /// Prompt tokens per request for --predict.
    #[arg(long, default_value_t = 1000, requires = "predict")]
    pub input_len: u32,
    /// Output tokens per request for --predict.
    #[arg(long, default_value_t = 1000, requires = "predict")]
    pub output_len: u32,
    /// Close every connection once its response is written, without a `Connection: close`
    /// header first, as llama.cpp's server does after a streamed response (for testing clients
    /// that reuse connections).
    #[arg(long)]
    pub close_after_response: bool,
    /// Close connections that have been idle this long (e.g. 1s), without notice, as uvicorn
    /// (under vLLM and SGLang) does after its keep-alive timeout.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// Whose Prometheus names `/metrics` uses for the sim's state (running, waiting, KV cache,
    /// preemptions, prefix-cache hits).
    #[arg(long, value_enum, default_value_t = metrics_endpoint::Names::Vllm)]
    pub metrics_names: metrics_endpoint::Names,
    /// Model speculative decoding (MTP, NEXTN, EAGLE): every decoding sequence drafts N tokens
    /// per step and verifies them in the step (see src/sim/README.md).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub speculative_tokens: Option<u32>,
    /// With --speculative-tokens: the chance that a draft token is accepted, given the ones
    /// before it were (0 < P ≤ 1).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.7,
        requires = "speculative_tokens"
    )]
    pub acceptance: f64,
    /// With --speculative-tokens: make acceptance follow the prompt's content, from --acceptance
    /// for text that never repeats itself up to Q for a wholly repetitive prompt (such as
    /// catid's one repeated token), by the share of the prompt's 3-token runs seen before in it.
    #[arg(long, value_name = "Q", requires = "speculative_tokens")]
    pub repetitive_acceptance: Option<f64>,
    /// Delay each request by a random time before it reaches the engine, uniform between 0 and
    /// twice this mean (e.g. 20ms): run-to-run noise of a known size, for checking repeated
    /// measurements and the statistics on them.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub jitter: Option<Duration>,
    /// Seed of --jitter's delays: the n-th request of a seed waits as long in every run.
    #[arg(long, default_value_t = 0, requires = "jitter")]
    pub seed: u64,
    /// Crash on purpose once N requests run in the engine at once: print a CUDA out-of-memory
    /// error as vLLM's engine dies of it (PyTorch's `torch.OutOfMemoryError`) on stderr and exit
    /// at once with status 1, as a Python server dying of an uncaught exception (for tests and
    /// demos of a server that dies).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub crash_at_concurrency: Option<u64>,
    /// Crash on purpose (the KV cache's error on stderr, exit status 1) instead of preempting
    /// when the KV cache cannot hold a step's tokens; needs a profile with `kv_policy:
    /// on_demand` (a reserving profile never overflows).
    #[arg(long)]
    pub crash_on_kv_overflow: bool,
    /// Crash on purpose (the out-of-memory error, exit status 1) when the N-th request reaches
    /// the engine.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub crash_after_requests: Option<u64>,
}

/// Runs `rigrun sim`: serves until killed (or lists profiles, or predicts).
/// A bad profile or bad `--predict` lengths are invalid input (exit 2).
pub async fn run(args: SimArgs) -> anyhow::Result<Exit> {
    if args.list_profiles {
        return list_profiles().map(|()| Exit::Ok);
    }
    let Some(name) = args.profile.as_deref() else {
        bail!(Invalid("--profile is required".into()))
    };
    let mut profile = Profile::resolve(name).map_err(|e| Invalid(format!("{e:#}")))?;
    if let Some(model) = &args.model {
        profile.model.clone_from(model);
    }
    if let Some(tokens) = args.speculative_tokens {
        if !(args.acceptance > 0.0 && args.acceptance <= 1.0) {
            bail!(Invalid(format!(
                "--acceptance {}: a draft token's chance of acceptance is above 0 and at most 1",
                args.acceptance
            )));
        }
        if let Some(q) = args.repetitive_acceptance.filter(|q| !(*q > 0.0 && *q <= 1.0)) {
            bail!(Invalid(format!(
                "--repetitive-acceptance {q}: a draft token's chance of acceptance is above 0 and \
                 at most 1"
            )));
        }
        profile.perf.speculative = Some(perf::Speculative {
            tokens,
            acceptance: args.acceptance,
            repetitive_acceptance: args.repetitive_acceptance,
        });
    }
    let crash = crash_rule(&args, &profile)?;
    if !args.predict.is_empty() {
        return print_predictions(&profile, &args.predict, args.input_len, args.output_len)
            .map(|()| Exit::Ok);
    }
    let closing = Closing {
        after_response: args.close_after_response,
        when_idle: args.idle_timeout,
    };
    let serving = Serving {
        closing,
        names: args.metrics_names,
        jitter: args.jitter.map(|mean| Jitter::new(mean, args.seed)),
        crash,
    };
    serve(&profile, (&args.host, args.port), serving)
        .await
        .map(|()| Exit::Ok)
}

/// When the sim crashes on purpose; `--crash-on-kv-overflow` on a profile that reserves its KV
/// (and so never overflows) is invalid input.
fn crash_rule(args: &SimArgs, profile: &Profile) -> anyhow::Result<CrashRule> {
    if args.crash_on_kv_overflow && profile.limits.kv_policy != scheduler::KvPolicy::OnDemand {
        bail!(Invalid(format!(
            "--crash-on-kv-overflow: profile {} reserves each request's KV cache when it starts \
             (kv_policy: reserve), so it never overflows; use a profile with kv_policy: on_demand",
            profile.name
        )));
    }
    Ok(CrashRule {
        at_running: args
            .crash_at_concurrency
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        on_kv_overflow: args.crash_on_kv_overflow,
        after_requests: args.crash_after_requests,
    })
}

/// Prints name, model and description of each built-in profile.
fn list_profiles() -> anyhow::Result<()> {
    let profiles = Profile::builtins()?;
    let name_width = profiles.iter().map(|p| p.name.len()).max().unwrap_or(0);
    let model_width = profiles.iter().map(|p| p.model.len()).max().unwrap_or(0);
    println!("{:name_width$}  {:model_width$}  DESCRIPTION", "NAME", "MODEL");
    for p in &profiles {
        println!(
            "{:name_width$}  {:model_width$}  {}",
            p.name, p.model, p.description
        );
    }
    Ok(())
}

/// Prints one JSON line per concurrency level with the profile's prediction.
fn print_predictions(
    profile: &Profile,
    levels: &[usize],
    input_len: u32,
    output_len: u32,
) -> anyhow::Result<()> {
    let total = u64::from(input_len) + u64::from(output_len);
    if input_len == 0 || output_len == 0 || total > u64::from(profile.max_model_len) {
        bail!(Invalid(format!(
            "--input-len and --output-len must be at least 1 and fit in max_model_len {} together",
            profile.max_model_len
        )));
    }
    for &concurrency in levels {
        let prediction = predict::predict(profile, concurrency, input_len, output_len);
        println!("{}", serde_json::to_string(&prediction)?);
    }
    Ok(())
}

/// How the sim serves, beyond its profile.
struct Serving {
    /// When connections close early.
    closing: Closing,
    /// Whose names `/metrics` uses.
    names: metrics_endpoint::Names,
    /// `--jitter`: each request's delay before the engine.
    jitter: Option<Jitter>,
    /// `--crash-*`: when the engine dies on purpose.
    crash: CrashRule,
}

/// Binds, announces the address on stderr, and serves.
async fn serve(profile: &Profile, (host, port): (&str, u16), serving: Serving) -> anyhow::Result<()> {
    // Each stream holds a socket, and hosts often default to 1024 open files, fewer than C=1024
    // clients need: the soft limit goes up to the hard one (best effort, serving goes on without).
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .with_context(|| format!("cannot listen on {host}:{port}"))?;
    let address = listener.local_addr()?;
    let mut scheduler = profile.scheduler();
    scheduler.crash_when(serving.crash);
    let latencies = latency::Latencies::new(serving.names, profile.max_model_len);
    let engine = Engine::start(scheduler, latencies).context("cannot start the simulated engine")?;
    let state = http_server::AppState::new(profile, engine, serving.names, serving.jitter);
    let app = http_server::router(Arc::new(state));
    eprintln!(
        "rigrun sim: serving {} on http://{address} (profile {})",
        profile.model, profile.name
    );
    tokio::select! {
        () = connections::serve(listener, app, serving.closing) => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
