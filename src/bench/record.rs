//! A level's result record: one JSON object with the metric names of `vllm bench serve
//! --save-result` (so run-sweep and the reports treat it like vLLM's and SGLang's own results),
//! plus what only this client measures, and `valid` with its `problems`.

use serde_json::{json, Map, Value};

use super::latency::LatencyStats;
use super::level::{LevelPlan, LevelResult, Stop};
use super::metrics::Counts;
use super::sys;
use super::text::TextInfo;
use super::trace::{self, Lateness, Replay};
use super::turns::{self, TurnSummary};
use super::validity::{self, Evidence};

/// The name in `backend`, so results say which client measured them.
pub const BACKEND: &str = "rigrun-bench";

/// What every level of a run shares.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub model: String,
    pub api: &'static str,
    pub stream: bool,
    pub workload: String,
    pub workload_note: Option<&'static str>,
    pub unique_prefix: bool,
    /// catid's token id (None for other workloads).
    pub token_id: Option<u32>,
    pub seed: u64,
    pub input_len: u32,
    pub output_len: u32,
    /// How the lengths were drawn per request (`uniform:ratio=0.5`, `normal:sd=200`); None when
    /// every request asks the nominal length.
    pub input_dist: Option<String>,
    pub output_dist: Option<String>,
    /// Turns per conversation (1: single requests) and the pause before each next turn.
    pub turns: u32,
    pub think_time: std::time::Duration,
    /// Whether every request asks for `output_len` tokens (a prompts file may say otherwise).
    pub uniform_output: bool,
    /// The trace replayed (`--trace`), if any.
    pub replay: Option<Replay>,
    /// The text workload's corpus and tokenizer (`--workload text`), if it is the workload.
    pub text: Option<TextInfo>,
}

/// The numbers of one level, for the record and the stderr table.
#[derive(Debug, Clone)]
pub struct Summary {
    pub concurrency: u64,
    pub rate: Option<f64>,
    pub num_prompts: Option<u64>,
    pub warmup: u64,
    pub warmup_failed: u64,
    pub counts: Counts,
    pub duration: f64,
    pub peak: u64,
    /// Requests in flight on average over the steady-state window.
    pub mean_in_flight: Option<f64>,
    /// Output tokens per second while all C streams ran, and for how long that was.
    pub steady: Option<(f64, f64)>,
    /// Where that window lies, as Unix seconds (start, end) on the host's clock.
    pub steady_at: Option<(f64, f64)>,
    /// Where the whole measured phase (`duration`) lies, as Unix seconds on the host's clock.
    pub measured_at: (f64, f64),
    pub ttft: Option<LatencyStats>,
    pub tpot: Option<LatencyStats>,
    pub itl: Option<LatencyStats>,
    pub e2el: Option<LatencyStats>,
    pub queue: Option<LatencyStats>,
    pub cpu_percent: f64,
    pub cores: usize,
    pub max_rss_mb: f64,
    pub problems: Vec<String>,
    /// Completed requests that met every `--slo` limit, when goodput was asked for.
    pub good: Option<u64>,
    /// Per turn of multi-turn conversations (empty for single requests).
    pub per_turn: Vec<TurnSummary>,
    /// The prefix cache's state when measuring began: `reset` or `warm` (`cache` in the record).
    pub cache: &'static str,
    /// How late a trace replay sent its requests.
    pub lateness: Option<Lateness>,
}

impl Summary {
    /// Summarises a level and runs the validity checks.
    pub fn new(plan: &LevelPlan, result: &LevelResult, info: &RunInfo) -> Summary {
        let c = &result.collector;
        let concurrency = u64::from(plan.concurrency);
        let (peak, full_window) = c.concurrency(concurrency);
        let open_loop = plan.rate.is_some() || plan.replay.is_some();
        let window = if open_loop { c.send_window() } else { full_window };
        let steady = window.and_then(|w| {
            let seconds = (w.1 - w.0) as f64 / 1e9;
            c.throughput_in(w).map(|tps| (tps, seconds))
        });
        let mean_in_flight = window.and_then(|w| c.mean_in_flight(w));
        let steady_at = steady.and(window).map(|w| (c.unix_at(w.0), c.unix_at(w.1)));
        let measured_at = (c.unix_at(0), c.unix_at(result.duration.as_nanos() as u64));
        let cores_used = result.cpu.as_secs_f64() / result.cpu_wall.as_secs_f64().max(1e-9);
        let cores = sys::cores();
        let evidence = Evidence {
            concurrency,
            closed_loop: !open_loop,
            peak,
            mean_in_flight,
            mean_queue_ms: c.queue.stats().map(|s| s.mean),
            counts: c.counts.clone(),
            output_len: info.uniform_output.then_some(info.output_len),
            cores_used,
            cores,
            replay: info.replay.as_ref().and_then(|r| Lateness::of(&c.lateness, r)),
        };
        let mut problems = validity::problems(&evidence);
        problems.extend(result.cache.problem());
        Summary {
            concurrency,
            rate: plan.rate,
            num_prompts: match plan.stop {
                Stop::After(n) => Some(n * u64::from(plan.turns)),
                Stop::For(_) => None,
            },
            warmup: plan.warmup,
            warmup_failed: result.warmup_failed,
            problems,
            counts: evidence.counts,
            duration: result.duration.as_secs_f64(),
            peak,
            mean_in_flight,
            steady,
            steady_at,
            measured_at,
            ttft: c.ttft.stats(),
            tpot: c.tpot.stats(),
            itl: c.itl.stats(),
            e2el: c.e2el.stats(),
            queue: c.queue.stats(),
            cpu_percent: cores_used * 100.0,
            cores,
            max_rss_mb: result.max_rss_bytes as f64 / (1024.0 * 1024.0),
            good: c.good(),
            per_turn: match plan.turns {
                1 => Vec::new(),
                _ => c.by_turn.summaries(),
            },
            cache: result.cache.name(),
            lateness: evidence.replay,
        }
    }

    pub fn valid(&self) -> bool {
        self.problems.is_empty()
    }

    /// Goodput, when `--slo` asked for it: requests per second within every limit, and their
    /// share of the completed requests in %.
    pub fn goodput(&self) -> Option<(f64, f64)> {
        let good = self.good?;
        let share = match self.counts.completed {
            0 => 0.0,
            n => good as f64 * 100.0 / n as f64,
        };
        Some((self.per_second(good), share))
    }

    /// Per second of the measured duration (0 for an empty level).
    fn per_second(&self, count: u64) -> f64 {
        if self.duration > 0.0 {
            count as f64 / self.duration
        } else {
            0.0
        }
    }

    pub fn output_throughput(&self) -> f64 {
        self.per_second(self.counts.output_tokens)
    }

    pub fn request_throughput(&self) -> f64 {
        self.per_second(self.counts.completed)
    }

    /// The JSON record, keys in a fixed order.
    pub fn record(&self, info: &RunInfo) -> Map<String, Value> {
        let mut m = Map::new();
        self.context(info, &mut m);
        self.counts(&mut m);
        for (name, stats) in [
            ("ttft", self.ttft),
            ("tpot", self.tpot),
            ("itl", self.itl),
            ("e2el", self.e2el),
            ("queue", self.queue),
        ] {
            latency(&mut m, name, stats);
        }
        if let Some(replay) = &info.replay {
            trace::record(replay, self.counts.measured(), self.lateness.as_ref(), &mut m);
        }
        if info.turns > 1 {
            m.insert("turns".into(), info.turns.into());
            m.insert("think_time".into(), round(info.think_time.as_secs_f64(), 4));
            m.insert("per_turn".into(), turns::record(&self.per_turn, round));
        }
        m.insert("client_cpu_percent".into(), round(self.cpu_percent, 1));
        m.insert("client_cores".into(), self.cores.into());
        m.insert("client_max_rss_mb".into(), round(self.max_rss_mb, 1));
        m.insert("valid".into(), self.valid().into());
        m.insert("problems".into(), json!(self.problems));
        m.insert(
            "date".into(),
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string().into(),
        );
        m
    }

    /// What was asked: client, model, workload, lengths, load shape.
    fn context(&self, info: &RunInfo, m: &mut Map<String, Value>) {
        m.insert("backend".into(), BACKEND.into());
        m.insert("rigrun_version".into(), env!("CARGO_PKG_VERSION").into());
        m.insert("model".into(), info.model.clone().into());
        m.insert("api".into(), info.api.into());
        m.insert("stream".into(), info.stream.into());
        m.insert("workload".into(), info.workload.clone().into());
        if let Some(note) = info.workload_note {
            m.insert("workload_note".into(), note.into());
        }
        m.insert("unique_prefix".into(), info.unique_prefix.into());
        if let Some(id) = info.token_id {
            m.insert("token_id".into(), id.into());
        }
        if let Some(text) = &info.text {
            self.text_context(text, m);
        }
        m.insert("seed".into(), info.seed.into());
        m.insert("input_len".into(), info.input_len.into());
        m.insert("output_len".into(), info.output_len.into());
        for (key, dist) in [
            ("input_dist", &info.input_dist),
            ("output_dist", &info.output_dist),
        ] {
            if let Some(dist) = dist {
                m.insert(key.into(), dist.clone().into());
            }
        }
        m.insert("max_concurrency".into(), self.concurrency.into());
        m.insert("request_rate".into(), json!(self.rate));
        m.insert("num_prompts".into(), json!(self.num_prompts));
        m.insert("warmup".into(), self.warmup.into());
        m.insert("cache".into(), self.cache.into());
    }

    /// The text workload's sources, and how its prompt lengths checked out.
    fn text_context(&self, text: &TextInfo, m: &mut Map<String, Value>) {
        m.insert("tokenizer".into(), text.tokenizer.into());
        m.insert("text_corpus".into(), text.corpus.into());
        m.insert("text_corpus_sha256".into(), text.corpus_sha256.clone().into());
        if let Some((least, most)) = text.chat_template_tokens {
            let value = if least == most {
                json!(least)
            } else {
                json!(format!("{least}-{most}"))
            };
            m.insert("chat_template_tokens".into(), value);
        }
        let checks = &self.counts.prompt_checks;
        m.insert("prompt_tokens_checked".into(), checks.checked.into());
        m.insert("prompt_tokens_mismatched".into(), checks.mismatched.into());
    }

    /// Counts and throughputs.
    fn counts(&self, m: &mut Map<String, Value>) {
        let n = &self.counts;
        m.insert("completed".into(), n.completed.into());
        m.insert("failed".into(), n.failed.into());
        m.insert("errors".into(), json!(n.errors));
        m.insert("reconnects".into(), n.reconnects.into());
        m.insert("warmup_failed".into(), self.warmup_failed.into());
        m.insert("duration".into(), round(self.duration, 4));
        m.insert("measure_start_unix".into(), round(self.measured_at.0, 3));
        m.insert("measure_end_unix".into(), round(self.measured_at.1, 3));
        m.insert("total_input_tokens".into(), n.input_tokens.into());
        m.insert("total_output_tokens".into(), n.output_tokens.into());
        m.insert("request_throughput".into(), round(self.request_throughput(), 4));
        m.insert("output_throughput".into(), round(self.output_throughput(), 4));
        m.insert(
            "total_token_throughput".into(),
            round(self.per_second(n.input_tokens + n.output_tokens), 4),
        );
        m.insert("peak_concurrency".into(), self.peak.into());
        m.insert(
            "mean_concurrency".into(),
            self.mean_in_flight.map_or(Value::Null, |n| round(n, 2)),
        );
        m.insert(
            "steady_state_output_throughput".into(),
            self.steady.map_or(Value::Null, |(tps, _)| round(tps, 4)),
        );
        m.insert(
            "steady_state_duration".into(),
            self.steady.map_or(Value::Null, |(_, s)| round(s, 4)),
        );
        if let Some((start, end)) = self.steady_at {
            m.insert("steady_state_start_unix".into(), round(start, 3));
            m.insert("steady_state_end_unix".into(), round(end, 3));
        }
        if let Some(good) = self.good {
            m.insert("good_requests".into(), good.into());
            m.insert("goodput".into(), round(self.per_second(good), 4));
        }
    }
}

/// `mean_X_ms`, `median_X_ms`, `p90_X_ms`, `p99_X_ms` (null when not measured).
fn latency(m: &mut Map<String, Value>, name: &str, stats: Option<LatencyStats>) {
    let value = |f: fn(&LatencyStats) -> f64| stats.as_ref().map_or(Value::Null, |s| round(f(s), 4));
    m.insert(format!("mean_{name}_ms"), value(|s| s.mean));
    m.insert(format!("median_{name}_ms"), value(|s| s.median));
    m.insert(format!("p90_{name}_ms"), value(|s| s.p90));
    m.insert(format!("p99_{name}_ms"), value(|s| s.p99));
}

/// A number rounded to `digits` decimals, or null when not finite.
fn round(x: f64, digits: i32) -> Value {
    let scale = 10f64.powi(digits);
    serde_json::Number::from_f64((x * scale).round() / scale).map_or(Value::Null, Value::Number)
}
