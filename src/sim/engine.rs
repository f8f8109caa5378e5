//! The model's clock: one OS thread runs the scheduler step by step in virtual time, anchored
//! to an `Instant` at start, and delivers each step's tokens when its absolute deadline comes.
//!
//! Deadlines are absolute (`anchor + virtual time`), so lateness never accumulates: a late
//! wake-up delays that step's delivery, not the steps after it. A dedicated thread paces the
//! steps with µs precision (an OS sleep that ends a little early, then a short yield loop)
//! instead of the async runtime's 1 ms timer wheel, and one wake-up per step serves the whole
//! batch. When the server is idle, the clock jumps to the arrival time of the next request
//! (taken when its HTTP handler started), so parsing and thread hand-off do not add to its
//! time to first token.
//!
//! A scheduler that crashed on purpose (`--crash-*`) ends the process from this thread.
//!
//! The thread also keeps the request histograms of `/metrics` ([`Latencies`]): each token's
//! time is its step's deadline, and the clock records them as it delivers.

use std::cell::Cell;
use std::io::Write as _;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::crash::{Crash, CRASH_EXIT_CODE};
use super::latency::{Latencies, RequestClock};
use super::scheduler::{EngineStats, JobSpec, Progress, Scheduler};

/// Where a request's progress goes: the HTTP handler's channel, tagged with the choice index.
#[derive(Debug)]
pub struct Sink {
    tx: UnboundedSender<(u32, Progress)>,
    choice: u32,
    /// Report every token (streaming) or only the last one.
    every_token: bool,
    /// The request's timing so far, for the histograms.
    clock: Cell<RequestClock>,
}

impl Sink {
    /// A sink for choice `choice` of a request, sending on `tx`; `clock` says when the request
    /// was received and how long its prompt is.
    pub fn new(
        tx: UnboundedSender<(u32, Progress)>,
        choice: u32,
        every_token: bool,
        clock: RequestClock,
    ) -> Self {
        Self {
            tx,
            choice,
            every_token,
            clock: Cell::new(clock),
        }
    }

    /// Records the progress made at `at` in `latencies` and passes it on; a closed channel is
    /// noticed by [`Sink::is_gone`].
    fn deliver(&self, progress: Progress, at: Instant, latencies: &mut Latencies) {
        let mut clock = self.clock.get();
        latencies.record(&mut clock, progress.generated, progress.done, at);
        self.clock.set(clock);
        if self.every_token || progress.done {
            let _ = self.tx.send((self.choice, progress));
        }
    }

    /// Whether the client stopped listening.
    fn is_gone(&self) -> bool {
        self.tx.is_closed()
    }
}

/// What the HTTP side asks of the engine thread.
enum Message {
    Submit(Submission),
    /// Empty the prefix cache, then answer whether there is one.
    ResetPrefixCache(tokio::sync::oneshot::Sender<bool>),
}

/// A request handed to the engine.
struct Submission {
    spec: JobSpec,
    sink: Sink,
    /// When the request reached the server.
    arrived: Instant,
}

/// The engine stopped (its thread ended).
#[derive(Debug, thiserror::Error)]
#[error("the simulated engine has stopped")]
pub struct EngineStopped;

/// Handle to the engine thread; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    tx: mpsc::Sender<Message>,
    stats: Arc<Mutex<EngineStats>>,
    latencies: Arc<Mutex<Latencies>>,
}

impl Engine {
    /// Starts the clock thread around `scheduler`, recording into `latencies`.
    pub fn start(scheduler: Scheduler<Sink>, latencies: Latencies) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(Mutex::new(EngineStats::default()));
        let latencies = Arc::new(Mutex::new(latencies));
        let shared = Shared {
            stats: Arc::clone(&stats),
            latencies: Arc::clone(&latencies),
        };
        std::thread::Builder::new()
            .name("rigrun-sim-clock".into())
            .spawn(move || run_clock(scheduler, &rx, &shared))?;
        Ok(Self { tx, stats, latencies })
    }

    /// Queues a request that reached the server at `arrived`; its progress goes to `sink`. A
    /// request the KV cache can never hold is dropped, which closes its channel before it is
    /// done (callers validate lengths first).
    pub fn submit(&self, spec: JobSpec, sink: Sink, arrived: Instant) -> Result<(), EngineStopped> {
        self.tx
            .send(Message::Submit(Submission { spec, sink, arrived }))
            .map_err(|_| EngineStopped)
    }

    /// Empties the prefix cache between steps; says whether the profile has one.
    pub async fn reset_prefix_cache(&self) -> Result<bool, EngineStopped> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Message::ResetPrefixCache(tx))
            .map_err(|_| EngineStopped)?;
        rx.await.map_err(|_| EngineStopped)
    }

    /// Runs `read` on the request histograms as they are now.
    pub fn with_latencies<R>(&self, read: impl FnOnce(&Latencies) -> R) -> R {
        read(&self.latencies.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The scheduler's gauges and counters after the last step.
    pub fn stats(&self) -> EngineStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the clock thread writes for the HTTP side.
struct Shared {
    stats: Arc<Mutex<EngineStats>>,
    latencies: Arc<Mutex<Latencies>>,
}

/// The clock loop: ends when every handle is dropped and no request is left.
fn run_clock(mut scheduler: Scheduler<Sink>, rx: &mpsc::Receiver<Message>, shared: &Shared) {
    let anchor = Instant::now();
    let mut now = Duration::ZERO;
    let mut pacer = Pacer::default();
    loop {
        if scheduler.is_idle() {
            let Ok(first) = rx.recv() else { return };
            if let Message::Submit(submission) = &first {
                now = now.max(submission.arrived.saturating_duration_since(anchor));
            }
            handle(&mut scheduler, first);
        }
        while let Ok(next) = rx.try_recv() {
            handle(&mut scheduler, next);
        }
        scheduler.cancel_where(Sink::is_gone);
        let step = scheduler.plan_step();
        if let Some(crash) = scheduler.crashed() {
            die(crash);
        }
        if let Some(step_ns) = step {
            now += Duration::from_nanos(step_ns);
            let deadline = anchor + now;
            pacer.wait_until(deadline);
            let mut latencies = shared.latencies.lock().unwrap_or_else(PoisonError::into_inner);
            scheduler.finish_step(|sink, progress| sink.deliver(progress, deadline, &mut latencies));
        }
        *shared.stats.lock().unwrap_or_else(PoisonError::into_inner) = scheduler.stats();
    }
}

/// Acts on one message from the HTTP side.
fn handle(scheduler: &mut Scheduler<Sink>, message: Message) {
    match message {
        Message::Submit(submission) => accept(scheduler, submission),
        Message::ResetPrefixCache(reply) => {
            let _ = reply.send(scheduler.reset_prefix_cache());
        }
    }
}

/// Ends the process as a crashed engine does: its last words on stderr, then at once the exit
/// status of a Python server dying of an uncaught exception (no response is finished, no
/// connection closed gracefully).
fn die(crash: Crash) -> ! {
    let mut stderr = std::io::stderr().lock();
    for line in crash.log_lines() {
        let _ = writeln!(stderr, "{line}");
    }
    let _ = stderr.flush();
    std::process::exit(CRASH_EXIT_CODE)
}

/// Queues a submission; one that can never fit is dropped (see [`Engine::submit`]).
fn accept(scheduler: &mut Scheduler<Sink>, submission: Submission) {
    if let Err(too_large) = scheduler.submit(submission.spec, submission.sink) {
        tracing::warn!("rigrun sim: dropped a request: {too_large}");
    }
}

/// Waits for deadlines with µs precision at little CPU cost: the OS sleep is set to end
/// early by twice the recent average oversleep, and yielding covers the rest.
#[derive(Debug)]
struct Pacer {
    /// Exponential average of how late OS sleeps end.
    oversleep: Duration,
}

impl Default for Pacer {
    fn default() -> Self {
        Self {
            oversleep: Duration::from_micros(50),
        }
    }
}

impl Pacer {
    /// The most the sleep is shortened by (bounds the yield loop's CPU cost).
    const MAX_EARLY: Duration = Duration::from_millis(1);

    /// Returns at `deadline` (or at once if it has passed).
    fn wait_until(&mut self, deadline: Instant) {
        let start = Instant::now();
        let early = (self.oversleep * 2).min(Self::MAX_EARLY);
        if let Some(target) = deadline.checked_sub(early).filter(|&t| t > start) {
            std::thread::sleep(target - start);
            let late = Instant::now().saturating_duration_since(target);
            self.oversleep = (self.oversleep * 7 + late) / 8;
        }
        while Instant::now() < deadline {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_never_returns_early_and_learns_the_oversleep() {
        let mut pacer = Pacer::default();
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(500);
            pacer.wait_until(deadline);
            assert!(Instant::now() >= deadline);
        }
        let past = Instant::now();
        pacer.wait_until(past);
    }
}
