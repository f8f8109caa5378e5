//! The model's clock: one OS thread runs the scheduler step by step in virtual time, anchored
//! to an `Instant` at start, and delivers each step's tokens when its absolute deadline comes.
//!
//! Deadlines are absolute (`anchor + virtual time`), so lateness never accumulates: a late
//! wake-up delays that step's delivery, not the steps after it. A dedicated thread sleeps with
//! the OS's precision (tens of µs) instead of the async runtime's 1 ms timer wheel, and one
//! wake-up per step serves the whole batch. When the server goes idle, the clock jumps to the
//! present at the next arrival.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::scheduler::{JobSpec, Progress, Scheduler, Stats};

/// Where a request's progress goes: the HTTP handler's channel, tagged with the choice index.
#[derive(Debug)]
pub struct Sink {
    tx: UnboundedSender<(u32, Progress)>,
    choice: u32,
    /// Report every token (streaming) or only the last one.
    every_token: bool,
}

impl Sink {
    /// A sink for choice `choice` of a request, sending on `tx`.
    pub fn new(tx: UnboundedSender<(u32, Progress)>, choice: u32, every_token: bool) -> Self {
        Self {
            tx,
            choice,
            every_token,
        }
    }

    /// Passes progress on; a closed channel is noticed by [`Sink::is_gone`].
    fn deliver(&self, progress: Progress) {
        if self.every_token || progress.done {
            let _ = self.tx.send((self.choice, progress));
        }
    }

    /// Whether the client stopped listening.
    fn is_gone(&self) -> bool {
        self.tx.is_closed()
    }
}

/// A request handed to the engine.
struct Submission {
    spec: JobSpec,
    sink: Sink,
}

/// The engine stopped (its thread ended).
#[derive(Debug, thiserror::Error)]
#[error("the simulated engine has stopped")]
pub struct EngineStopped;

/// Handle to the engine thread; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    tx: mpsc::Sender<Submission>,
    stats: Arc<Mutex<Stats>>,
}

impl Engine {
    /// Starts the clock thread around `scheduler`.
    pub fn start(scheduler: Scheduler<Sink>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(Mutex::new(Stats::default()));
        let thread_stats = Arc::clone(&stats);
        std::thread::Builder::new()
            .name("rigrun-sim-clock".into())
            .spawn(move || run_clock(scheduler, &rx, &thread_stats))?;
        Ok(Self { tx, stats })
    }

    /// Queues a request; its progress goes to `sink`. A request the KV cache can never hold
    /// is dropped, which closes its channel before it is done (callers validate lengths first).
    pub fn submit(&self, spec: JobSpec, sink: Sink) -> Result<(), EngineStopped> {
        self.tx.send(Submission { spec, sink }).map_err(|_| EngineStopped)
    }

    /// The scheduler's gauges and counters after the last step.
    pub fn stats(&self) -> Stats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The clock loop: ends when every handle is dropped and no request is left.
fn run_clock(mut scheduler: Scheduler<Sink>, rx: &mpsc::Receiver<Submission>, stats: &Mutex<Stats>) {
    let anchor = Instant::now();
    let mut now = Duration::ZERO;
    loop {
        if scheduler.is_idle() {
            let Ok(first) = rx.recv() else { return };
            accept(&mut scheduler, first);
            now = now.max(anchor.elapsed());
        }
        while let Ok(next) = rx.try_recv() {
            accept(&mut scheduler, next);
        }
        scheduler.cancel_where(Sink::is_gone);
        if let Some(step_ns) = scheduler.plan_step() {
            now += Duration::from_nanos(step_ns);
            let deadline = anchor + now;
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            scheduler.finish_step(|sink, progress| sink.deliver(progress));
        }
        *stats.lock().unwrap_or_else(PoisonError::into_inner) = scheduler.stats();
    }
}

/// Queues a submission; one that can never fit is dropped (see [`Engine::submit`]).
fn accept(scheduler: &mut Scheduler<Sink>, submission: Submission) {
    if let Err(too_large) = scheduler.submit(submission.spec, submission.sink) {
        tracing::warn!("rigrun sim: dropped a request: {too_large}");
    }
}
