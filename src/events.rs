//! What happens during a run, in order. The executor emits events; the store journals them
//! (`events.jsonl`, `records.jsonl`, `run.json`) and the progress display shows them.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::point::{PointKey, StepPoint};

/// Which output stream of a command a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One measured result (or the reason there is none) for one host, step and sweep point.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub run: String,
    pub host: String,
    pub step: String,
    pub step_index: usize,
    pub point: IndexMap<String, Json>,
    pub metrics: serde_json::Map<String, Json>,
    pub status: RecordStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Which run of the point made the record: its repetition and attempt.
    #[serde(flatten)]
    pub at: PointRun,
    /// The server variant measured (its values, like `point`); absent without variants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<IndexMap<String, Json>>,
    /// The command that printed it, as run on the host (a sweep's measurements): across runs,
    /// what tells whether two records measured the same workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl Record {
    /// The unit of work that made the record (its column aside: see [`Record::column`]).
    pub fn key(&self) -> PointKey {
        StepPoint::of(self.step_index, &self.point).repetition(self.at.repetition)
    }

    /// The record's column in the tables: its host, or `host/variant`.
    pub fn column(&self) -> String {
        let label = self.variant.as_ref().map(crate::point::variant_label);
        crate::point::column(&self.host, label.as_deref())
    }

    /// Whether a capacity search did not need the record's point (see [`NOT_PROBED`]).
    pub fn is_not_probed(&self) -> bool {
        self.status == RecordStatus::Skipped
            && self.reason.as_deref().is_some_and(|r| r.starts_with(NOT_PROBED))
    }

    /// Whether the benchmark (or rigrun, for numbers JSON cannot hold) marked the record
    /// `valid: false`: it is kept and shown, never compared.
    pub fn is_invalid(&self) -> bool {
        self.metrics.get("valid") == Some(&Json::Bool(false))
    }

    /// Why the record cannot have `metric`, when it says so (under [`UNKNOWN_METRICS`]).
    pub fn unknown_reason(&self, metric: &str) -> Option<&str> {
        self.metrics.get(UNKNOWN_METRICS)?.get(metric)?.as_str()
    }
}

/// Marks a record's metrics `valid: false` and extends its `problems` by `more` (a `problems`
/// that is not a list becomes the list's first entry): what [`Record::is_invalid`] reads.
pub fn mark_invalid(metrics: &mut serde_json::Map<String, Json>, more: Vec<String>) {
    metrics.insert("valid".into(), Json::Bool(false));
    let problems = metrics
        .entry("problems")
        .or_insert_with(|| Json::Array(Vec::new()));
    if !problems.is_array() {
        *problems = Json::Array(vec![problems.take()]);
    }
    if let Json::Array(list) = problems {
        list.extend(more.into_iter().map(Json::String));
    }
}

/// Where a record lists the metrics it cannot have and why (`{metric: reason}`): rigrun adds
/// them (energy per token without the benchmark's window), and the tables show such a cell as
/// unknown with the reason rather than as missing.
pub const UNKNOWN_METRICS: &str = "unknown_metrics";

/// Which run of a sweep point made a record or event: its repetition and its attempt at that
/// repetition, both from 1. Flattened into records and point events, as they were written
/// before it was a type of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PointRun {
    /// 1 for the first; a retry, a re-run after a lost connection or a resumed run counts up
    /// (runs written before the field: 1).
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// Which repetition of the point (see `repeat:` on run-sweep): from 1; written only when
    /// above 1, so that runs without repeats read as before.
    #[serde(default = "first_attempt", skip_serializing_if = "is_first")]
    pub repetition: u32,
}

impl PointRun {
    /// Attempt `attempt` of a point measured once (and of anything not a sweep point).
    pub fn once(attempt: u32) -> PointRun {
        PointRun {
            repetition: 1,
            attempt,
        }
    }
}

/// Which attempt at which point a `point_started` or `point_finished` event is about: the
/// point's label, its step's index and the run (repetition and attempt). Flattened into the
/// events, as they were written before it was a type of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointAttempt {
    /// The point's label (`concurrency=16`).
    pub point: String,
    /// The step's index (from 0); absent in runs written before it was journaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_index: Option<usize>,
    #[serde(flatten)]
    pub run: PointRun,
}

impl PointAttempt {
    /// The unit of work this is an attempt at; `current`, the step its host was running, stands
    /// in for a step index the journal lacks.
    pub fn key(&self, current: usize) -> PointKey {
        let step_index = self.step_index.unwrap_or(current);
        PointKey::new(step_index, &self.point, self.run.repetition)
    }
}

/// Whether an attempt or repetition number is the first (1), which is not written.
pub fn is_first(n: &u32) -> bool {
    *n == 1
}

/// The attempt (or repetition) of anything journaled before they were counted.
pub fn first_attempt() -> u32 {
    1
}

/// How the reason of a skipped record begins when a capacity search did not need its point:
/// the tables leave such points out.
pub const NOT_PROBED: &str = "not probed";

/// How a point's attempt ended, as its records and `point_finished` say.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RecordStatus {
    Ok,
    /// The command ran and failed (an exit code, a timeout), or could not run on the host.
    Failed,
    Skipped,
    /// Cut short by something other than the command: the host or its connection went away, or
    /// the run was interrupted. Runs written before this status recorded such points `failed`.
    Lost,
}

/// How a step, a host or the run ended.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Running,
    Ok,
    Failed,
    Interrupted,
    Skipped,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run_id: String,
        hosts: Vec<String>,
    },
    HostConnecting {
        host: String,
    },
    HostConnected {
        host: String,
        facts: crate::facts::HostFacts,
    },
    /// A Slurm host's allocation waits in the queue: said at each look at it (every couple of
    /// seconds), with Slurm's reason (`Priority`, `Resources`).
    HostQueued {
        host: String,
        job_id: String,
        reason: String,
        waited_secs: f64,
    },
    /// The host's GPUs, learnt after it connected from another source than nvidia-smi (a DCGM
    /// exporter): facts like those found at connect.
    GpusFound {
        host: String,
        gpus: Vec<crate::facts::Gpu>,
        source: String,
    },
    /// `rigrun run --resume` goes on with the run: the `session`-th time a rigrun process
    /// works on it (the first run is session 1).
    RunResumed {
        session: u32,
        /// The resuming rigrun process and the machine it runs on.
        pid: u32,
        machine: String,
    },
    StepStarted {
        host: String,
        index: usize,
        name: String,
        kind: String,
        /// How many times the step has started on this host, this time included.
        #[serde(default = "first_attempt")]
        attempt: u32,
        /// The server variant (its label) the step ran against; absent without variants.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        variant: Option<String>,
    },
    PointStarted {
        host: String,
        step: String,
        #[serde(flatten)]
        at: PointAttempt,
        /// The server variant (its label) the step ran against; absent without variants.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        variant: Option<String>,
    },
    PointFinished {
        host: String,
        step: String,
        #[serde(flatten)]
        at: PointAttempt,
        status: RecordStatus,
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        seconds: f64,
        /// The server variant (its label) the step ran against; absent without variants.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        variant: Option<String>,
    },
    Record(Record),
    /// Something the user must know that did not stop the step (shown, journaled, kept among
    /// the host's warnings in run.json and shown again when the run ends).
    Warning {
        host: String,
        message: String,
    },
    /// A warning about something that passed while the step went on (a connection lost and got
    /// back): shown and journaled once, not kept among the host's warnings.
    Notice {
        host: String,
        message: String,
    },
    /// The host rebooted (its boot id changed), found on reconnecting during the run or on
    /// connecting again in a resumed run: what rigrun ran there is gone (its files stay), the
    /// points that were running are lost and run again, a server rigrun started is gone. Said
    /// once per reboot, in `message`; shown and journaled like a notice.
    HostRebooted {
        host: String,
        message: String,
        /// The boot id before and after.
        boot_id_before: String,
        boot_id: String,
    },
    /// A line of a command's output; shown live, kept in the per-point log files, not journaled.
    Output {
        host: String,
        label: String,
        stream: Stream,
        line: String,
    },
    StepFinished {
        host: String,
        index: usize,
        name: String,
        #[serde(default = "first_attempt")]
        attempt: u32,
        status: Status,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        details: Json,
        seconds: f64,
        /// The server variant (its label) the step ran against; absent without variants.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        variant: Option<String>,
    },
    /// A server variant is being started on the host (the previous one is gone).
    VariantStarted {
        host: String,
        variant: String,
        index: usize,
        command: String,
    },
    /// A variant's server was ready (its startup times in `startup`), or failed to start
    /// (`error`, with the tail of its log in `startup`).
    VariantReady {
        host: String,
        variant: String,
        status: Status,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        startup: Json,
    },
    /// A variant's server was stopped and its processes are gone (or `error` says what is left).
    VariantStopped {
        host: String,
        variant: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        details: Json,
    },
    /// The server a sweep measures died during a point (its process exited, or it stopped
    /// answering), and what came of it: started again, answering again, or gone for good.
    ServerCrashed {
        host: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        variant: Option<String>,
        step: String,
        /// The point it died during (its label).
        point: String,
        /// Why it is taken for dead: the exit and its last lines, or what refused.
        cause: String,
        /// What came of it, in words.
        outcome: String,
        /// Whether the sweep went on (started again, or answering again).
        recovered: bool,
        /// Launch → ready of the server started again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ready_seconds: Option<f64>,
    },
    HostFinished {
        host: String,
        status: Status,
        #[serde(skip_serializing_if = "Option::is_none")]
        failed_step: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Interrupted,
    RunFinished {
        status: Status,
    },
}

/// The sending half the executor and steps use; sending never blocks.
pub type EventSender = tokio::sync::mpsc::UnboundedSender<Event>;

/// Output lines on their way to the display, so that a slow terminal cannot make them pile up
/// in memory: past [`output_backlog::LIMIT`] waiting, lines are left out (and counted) until
/// the display catches up; the display says at its end how many it left out in all
/// ([`output_backlog::left_out`]). Records, logs and the journal never go through this.
pub mod output_backlog {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Lines that may wait for the display.
    pub const LIMIT: usize = 10_000;

    static WAITING: AtomicUsize = AtomicUsize::new(0);
    /// Left out since the last line admitted (said before that line).
    static LEFT_OUT: AtomicUsize = AtomicUsize::new(0);
    /// Left out in all: the last of them have no line after them to be said before.
    static LEFT_OUT_IN_ALL: AtomicUsize = AtomicUsize::new(0);

    /// A line may go to the display: Some(how many were left out before it), or None to leave
    /// this one out too.
    pub fn admit() -> Option<usize> {
        if WAITING.load(Ordering::Relaxed) >= LIMIT {
            LEFT_OUT.fetch_add(1, Ordering::Relaxed);
            LEFT_OUT_IN_ALL.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        WAITING.fetch_add(1, Ordering::Relaxed);
        Some(LEFT_OUT.swap(0, Ordering::Relaxed))
    }

    /// The display took a line.
    pub fn shown() {
        let _ = WAITING.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// How many lines were left out in all (this process).
    pub fn left_out() -> usize {
        LEFT_OUT_IN_ALL.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the journal writes them, old (no attempt, repetition or step index) and new.
    const RECORD: &str = r#"{"run":"r","host":"a","step":"run-sweep","step_index":1,"point":{"c":4},"metrics":{"x":1.0},"status":"ok","attempt":2,"repetition":3,"variant":{"tp":2},"command":"b 4"}"#;
    const RECORD_FIRST: &str = r#"{"run":"r","host":"a","step":"run-sweep","step_index":1,"point":{"c":4},"metrics":{},"status":"failed","reason":"why","attempt":1}"#;
    const RECORD_OLD: &str = r#"{"run":"r","host":"a","step":"run-sweep","step_index":1,"point":{"c":4},"metrics":{},"status":"ok"}"#;
    const STARTED: &str = r#"{"event":"point_started","host":"a","step":"run-sweep","point":"c=4","step_index":1,"attempt":2,"repetition":3,"variant":"tp=2"}"#;
    const STARTED_FIRST: &str =
        r#"{"event":"point_started","host":"a","step":"run-sweep","point":"c=4","step_index":1,"attempt":1}"#;
    const STARTED_OLD: &str = r#"{"event":"point_started","host":"a","step":"run-sweep","point":"c=4"}"#;
    const FINISHED: &str = r#"{"event":"point_finished","host":"a","step":"run-sweep","point":"c=4","step_index":1,"attempt":2,"repetition":3,"status":"lost","exit_code":1,"reason":"why","seconds":1.5,"variant":"tp=2"}"#;
    const FINISHED_OLD: &str = r#"{"event":"point_finished","host":"a","step":"run-sweep","point":"c=4","status":"ok","seconds":0.5}"#;

    fn again<T: Serialize + serde::de::DeserializeOwned>(line: &str) -> String {
        serde_json::to_string(&serde_json::from_str::<T>(line).unwrap()).unwrap()
    }

    #[test]
    fn records_and_point_events_read_and_write_as_journaled() {
        for line in [RECORD, RECORD_FIRST] {
            assert_eq!(again::<Record>(line), line);
        }
        for line in [STARTED, STARTED_FIRST, FINISHED] {
            assert_eq!(again::<Event>(line), line);
        }
        let old: Record = serde_json::from_str(RECORD_OLD).unwrap();
        assert_eq!(old.at, PointRun::once(1));
        let attempt_written = RECORD_OLD.replace("\"ok\"}", "\"ok\",\"attempt\":1}");
        assert_eq!(again::<Record>(RECORD_OLD), attempt_written);
        assert_eq!(
            again::<Event>(STARTED_OLD),
            STARTED_FIRST.replace(",\"step_index\":1", "")
        );
        let finished = again::<Event>(FINISHED_OLD);
        assert_eq!(
            finished,
            FINISHED_OLD.replace("\"status\"", "\"attempt\":1,\"status\"")
        );
    }
}
