//! One concurrency level: unmeasured warm-up requests, then the measured ones.
//!
//! Requests are dispatched into C slots. Without `--request-rate` the loop is closed: a request
//! is due the moment a slot frees up, as catid's method keeps exactly C streams running. With
//! `--request-rate` arrivals are a Poisson process and a request that arrives while all C slots
//! are busy waits for one — and that wait counts in its latency, because it is due at arrival.
//!
//! With `--turns N` a slot holds a whole conversation: N requests in turn, each due when the
//! previous reply ended plus the think time, each resending the history (see `Workload::turn`).
//!
//! With `--trace` request n is the trace's line n, due at its timestamp (see `trace`); C then caps
//! the requests in flight (a replay without `--concurrency` has a slot for every line).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use super::cache::{self, CacheReset, CacheState};
use super::client::{Client, Outcome};
use super::goodput::Goodput;
use super::metrics::{Asked, Collector};
use super::rng::Rng;
use super::sys;
use super::trace::Trace;
use super::workload::Workload;

/// What every request of a run shares.
pub struct Shared {
    pub client: Client,
    pub workload: Workload,
    pub stream: bool,
    /// `--slo`'s per-request limits, when goodput is asked for.
    pub goodput: Option<Goodput>,
    /// The next request's number in the run (unique prefixes never repeat across levels).
    next_index: AtomicU64,
}

impl Shared {
    pub fn new(client: Client, workload: Workload, stream: bool, goodput: Option<Goodput>) -> Arc<Self> {
        Arc::new(Shared {
            client,
            workload,
            stream,
            goodput,
            next_index: AtomicU64::new(0),
        })
    }
}

/// When a phase stops sending.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    After(u64),
    For(Duration),
}

/// How one level runs.
#[derive(Debug, Clone, Copy)]
pub struct LevelPlan {
    pub concurrency: u32,
    pub warmup: u64,
    pub stop: Stop,
    /// Poisson arrivals per second; None for a closed loop.
    pub rate: Option<f64>,
    pub seed: u64,
    /// Turns per conversation (1: single requests) and the pause before each next turn.
    pub turns: u32,
    pub think_time: Duration,
    /// `--reset-cache`: the route that empties the prefix cache after the warm-up.
    pub cache_reset: Option<CacheReset>,
    /// Replaying the workload's trace at this speed factor (None: not a replay).
    pub replay: Option<f64>,
}

/// A phase: conversations (of one request, unless multi-turn) into `slots` slots until `stop`.
#[derive(Debug, Clone, Copy)]
struct Phase {
    slots: usize,
    stop: Stop,
    rate: Option<f64>,
    seed: u64,
    turns: u32,
    think_time: Duration,
    replay: Option<f64>,
}

/// How a conversation runs: its turns, the pause between them, and when no turn may start.
#[derive(Debug, Clone, Copy)]
struct Talk {
    turns: u32,
    think_time: Duration,
    deadline: Option<Instant>,
}

/// What a level tells as it runs, for a progress display (the level knows no display: the data
/// flow from plan to level to summary to display goes one way).
pub trait Progress {
    /// One warm-up request ended.
    fn warmed(&mut self);
    /// The measured phase begins.
    fn measuring(&mut self);
    /// `done` measured requests ended so far, `failed` of them failed.
    fn measured(&mut self, done: u64, failed: u64);
    /// The level ended.
    fn finish(&mut self);
}

/// What a level measured.
pub struct LevelResult {
    pub collector: Collector,
    /// From the start of the measured phase to the end of its last request.
    pub duration: Duration,
    /// Client CPU time during the measured phase, and the wall time it was spent in.
    pub cpu: Duration,
    pub cpu_wall: Duration,
    pub max_rss_bytes: u64,
    pub warmup_failed: u64,
    pub warmup_first_error: Option<String>,
    /// The prefix cache's state when the measured requests began.
    pub cache: CacheState,
}

/// Runs warm-up and measured phase of one level.
pub async fn run(shared: &Arc<Shared>, plan: &LevelPlan, progress: &mut impl Progress) -> LevelResult {
    let (warmup_failed, warmup_first_error) = warm_up(shared, plan, progress).await;
    let cache = cache::before_measuring(plan.cache_reset, &shared.client).await;
    progress.measuring();
    let before = sys::usage();
    let t0 = Instant::now();
    let mut collector = Collector::new(t0, shared.stream, shared.goodput);
    let phase = Phase {
        slots: plan.concurrency as usize,
        stop: plan.stop,
        rate: plan.rate,
        seed: plan.seed,
        turns: plan.turns,
        think_time: plan.think_time,
        replay: plan.replay,
    };
    run_phase(shared, phase, t0, |asked, outcome| {
        collector.add(asked, &outcome);
        progress.measured(collector.counts.measured(), collector.counts.failed);
    })
    .await;
    let cpu_wall = t0.elapsed();
    let after = sys::usage();
    progress.finish();
    LevelResult {
        duration: collector.last_end.map_or(Duration::ZERO, |end| end - t0),
        collector,
        cpu: after.cpu.saturating_sub(before.cpu),
        cpu_wall,
        max_rss_bytes: after.max_rss_bytes,
        warmup_failed,
        warmup_first_error,
        cache,
    }
}

/// The unmeasured warm-up: `plan.warmup` single requests (first turns), at most C at once.
/// Returns the failures.
async fn warm_up(
    shared: &Arc<Shared>,
    plan: &LevelPlan,
    progress: &mut impl Progress,
) -> (u64, Option<String>) {
    if plan.warmup == 0 {
        return (0, None);
    }
    let phase = Phase {
        slots: (plan.concurrency as usize).min(plan.warmup as usize),
        stop: Stop::After(plan.warmup),
        rate: None,
        seed: plan.seed,
        turns: 1,
        think_time: Duration::ZERO,
        replay: None,
    };
    let (mut failed, mut first_error) = (0, None);
    run_phase(shared, phase, Instant::now(), |_, outcome| {
        if let Err(failure) = &outcome.result {
            failed += 1;
            first_error.get_or_insert_with(|| format!("{}: {}", failure.kind, failure.detail));
        }
        progress.warmed();
    })
    .await;
    (failed, first_error)
}

/// Dispatches a phase's requests and hands each outcome to `on_done` as it completes.
async fn run_phase(shared: &Arc<Shared>, phase: Phase, t0: Instant, mut on_done: impl FnMut(Asked, Outcome)) {
    let (done_tx, mut done_rx) = unbounded_channel();
    let dispatcher = tokio::spawn(dispatch(shared.clone(), phase, t0, done_tx));
    while let Some((asked, outcome)) = done_rx.recv().await {
        on_done(asked, outcome);
    }
    // The channel closes only after the dispatcher and every request it started let go.
    let _ = dispatcher.await;
}

/// The sending loop: waits for each request's arrival (open loop) and a free slot, then starts it.
async fn dispatch(shared: Arc<Shared>, phase: Phase, t0: Instant, done: UnboundedSender<(Asked, Outcome)>) {
    let (slot_tx, mut slots) = unbounded_channel::<Instant>();
    for _ in 0..phase.slots.max(1) {
        let _ = slot_tx.send(t0);
    }
    let mut arrivals = match (phase.replay, shared.workload.trace()) {
        (Some(speed), Some(trace)) => Some(Arrivals::trace(trace, speed, t0)),
        _ => phase.rate.map(|rate| Arrivals::poisson(rate, phase.seed, t0)),
    };
    let deadline = match phase.stop {
        Stop::For(limit) => Some(t0 + limit),
        Stop::After(_) => None,
    };
    let mut count = 0u64;
    loop {
        if matches!(phase.stop, Stop::After(n) if count >= n) {
            break;
        }
        let arrival = match &mut arrivals {
            Some(arrivals) => match arrivals.next(deadline).await {
                Some(at) => Some(at),
                None => break,
            },
            None => None,
        };
        let Some(freed) = slots.recv().await else {
            break;
        };
        if arrival.is_none() && deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        count += 1;
        let talk = Talk {
            turns: phase.turns,
            think_time: phase.think_time,
            deadline,
        };
        let due = arrival.unwrap_or(freed);
        start(
            &shared,
            (due, due.max(freed)),
            talk,
            slot_tx.clone(),
            done.clone(),
        );
    }
}

/// Starts one conversation (a single request unless multi-turn), its first turn due at `due.0`
/// and free to go at `due.1` (a slot free too); its slot is handed back when it ends. Numbered
/// in the order started, so that a replay's request n is the trace's line n.
fn start(
    shared: &Arc<Shared>,
    due: (Instant, Instant),
    talk: Talk,
    slot: UnboundedSender<Instant>,
    done: UnboundedSender<(Asked, Outcome)>,
) {
    let shared = shared.clone();
    let number = shared.next_index.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        converse(&shared, number, due, talk, slot, &done).await;
    });
}

/// Runs conversation `number`: its turns in order, each due when the previous reply ended plus
/// the think time, each prompt the history so far plus a new message. A failed turn ends it, and
/// so does the deadline (no turn starts after it). Hands the slot back when it ends.
async fn converse(
    shared: &Shared,
    number: u64,
    (mut due, mut ready): (Instant, Instant),
    talk: Talk,
    slot: UnboundedSender<Instant>,
    done: &UnboundedSender<(Asked, Outcome)>,
) {
    let mut history = Vec::new();
    let mut first_sent = None;
    for turn in 0..talk.turns {
        let (spec, message) = match talk.turns {
            1 => (shared.workload.request(number), String::new()),
            _ => shared.workload.turn(number, turn, &history),
        };
        let more = turn + 1 < talk.turns;
        if ready > Instant::now() {
            tokio::time::sleep_until(ready.into()).await;
        }
        let mut outcome = shared.client.send(spec.body, spec.max_tokens, more).await;
        let from = *first_sent.get_or_insert(outcome.sent);
        let next_due = outcome.end + talk.think_time;
        let last = !more || outcome.result.is_err() || talk.deadline.is_some_and(|d| next_due >= d);
        if last {
            let _ = slot.send(outcome.end);
        } else {
            history.push((message, std::mem::take(&mut outcome.text)));
        }
        let asked = Asked {
            due,
            ready,
            max_tokens: spec.max_tokens,
            input_tokens: spec.input_tokens,
            expected_prompt_tokens: spec.expected_prompt_tokens,
            turn,
            conversation_from: last.then_some(from),
        };
        let _ = done.send((asked, outcome));
        if last {
            return;
        }
        tokio::time::sleep_until(next_due.into()).await;
        (due, ready) = (next_due, next_due);
    }
}

/// How long before its time a replayed request is started: building a long prompt's body takes
/// a few ms in a debug build, which would otherwise count as lateness.
const REPLAY_LEAD: Duration = Duration::from_millis(20);

/// Arrival times of an open loop: a Poisson process, or a trace's timestamps.
enum Arrivals<'a> {
    Poisson {
        rng: Rng,
        mean_gap: f64,
        next: Instant,
    },
    Trace {
        trace: &'a Trace,
        speed: f64,
        t0: Instant,
        line: usize,
    },
}

impl<'a> Arrivals<'a> {
    fn poisson(rate: f64, seed: u64, t0: Instant) -> Self {
        Arrivals::Poisson {
            rng: Rng::new(seed ^ 0xA11),
            mean_gap: 1.0 / rate,
            next: t0,
        }
    }

    fn trace(trace: &'a Trace, speed: f64, t0: Instant) -> Self {
        Arrivals::Trace {
            trace,
            speed,
            t0,
            line: 0,
        }
    }

    /// Waits for the next arrival and returns its time; None once past `deadline` (or the trace).
    async fn next(&mut self, deadline: Option<Instant>) -> Option<Instant> {
        let at = match self {
            Arrivals::Poisson { rng, mean_gap, next } => {
                *next += Duration::from_secs_f64(rng.exponential(*mean_gap));
                *next
            }
            Arrivals::Trace {
                trace,
                speed,
                t0,
                line,
            } if *line < trace.lines.len() => {
                *line += 1;
                trace.due(*line - 1, *speed, *t0)
            }
            Arrivals::Trace { .. } => return None,
        };
        if deadline.is_some_and(|d| at >= d) {
            return None;
        }
        // A trace's request is started early, so that it is built when due (see `converse`).
        let lead = match self {
            Arrivals::Trace { .. } => REPLAY_LEAD,
            Arrivals::Poisson { .. } => Duration::ZERO,
        };
        tokio::time::sleep_until(at.checked_sub(lead).unwrap_or(at).into()).await;
        Some(at)
    }
}
