//! A run's journal read back as what happened to each host's steps and sweep points: how many
//! times each ran and how its latest attempt ended.

use std::collections::HashMap;

use crate::events::{Event, RecordStatus, Status};
use crate::point::PointKey;

/// How the latest attempt at a point ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ended {
    /// It finished; `invalid` when one of its records was marked `valid: false`.
    Ok {
        invalid: bool,
    },
    Failed {
        reason: String,
    },
    /// Skipped, with why (`skip_if`, or a candidate a capacity search did not probe).
    Skipped {
        reason: String,
    },
    /// Cut short by something other than its command (the interrupt, a lost host); runs written
    /// before the status said `failed` for it.
    Lost {
        reason: String,
    },
}

/// A point's latest attempt: its number, and how it ended (None: started, never finished).
#[derive(Clone, Debug, PartialEq)]
pub struct PointPast {
    pub attempt: u32,
    pub ended: Option<Ended>,
    /// One of the attempt's records so far is marked invalid.
    invalid: bool,
    /// The metrics of the attempt's measured records, in order (what a capacity search judges
    /// a kept probe by).
    pub records: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// A step's latest attempt on a host: its number and how it ended (None: never finished).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepPast {
    pub attempts: u32,
    pub status: Option<Status>,
    pub error: Option<String>,
}

/// What the journal says happened on one host.
#[derive(Clone, Debug, Default)]
pub struct HostHistory {
    steps: HashMap<usize, StepPast>,
    points: HashMap<PointKey, PointPast>,
    /// The step the host was running, for events journaled without their step's index.
    current: usize,
}

impl HostHistory {
    pub fn step(&self, index: usize) -> Option<&StepPast> {
        self.steps.get(&index)
    }

    /// The latest attempt at a unit of work.
    pub fn point(&self, key: &PointKey) -> Option<&PointPast> {
        self.points.get(key)
    }

    /// Folds one of the host's events in.
    fn apply(&mut self, event: &Event) {
        match event {
            Event::StepStarted { index, attempt, .. } => {
                self.current = *index;
                let step = self.steps.entry(*index).or_default();
                *step = StepPast {
                    attempts: step.attempts.max(*attempt),
                    status: None,
                    error: None,
                };
            }
            Event::StepFinished {
                index, status, error, ..
            } => {
                let step = self.steps.entry(*index).or_default();
                (step.status, step.error) = (Some(*status), error.clone());
            }
            Event::PointStarted { at, .. } => {
                self.started(at.key(self.current), at.run.attempt);
            }
            Event::PointFinished {
                at, status, reason, ..
            } => {
                let key = at.key(self.current);
                self.finished(key, at.run.attempt, *status, reason.clone());
            }
            Event::Record(record) if record.status == RecordStatus::Ok => {
                if let Some(past) = self.points.get_mut(&record.key()) {
                    if past.attempt == record.at.attempt {
                        past.invalid |= record.is_invalid();
                        past.records.push(record.metrics.clone());
                    }
                }
            }
            _ => {}
        }
    }

    fn started(&mut self, key: PointKey, attempt: u32) {
        let past = self.points.entry(key).or_insert(PointPast {
            attempt,
            ended: None,
            invalid: false,
            records: Vec::new(),
        });
        if attempt >= past.attempt {
            let same = past.attempt == attempt;
            *past = PointPast {
                attempt,
                ended: None,
                invalid: past.invalid && same,
                records: if same {
                    std::mem::take(&mut past.records)
                } else {
                    Vec::new()
                },
            };
        }
    }

    fn finished(&mut self, key: PointKey, attempt: u32, status: RecordStatus, reason: Option<String>) {
        // A skipped point finishes without having started.
        let past = self.points.entry(key).or_insert(PointPast {
            attempt,
            ended: None,
            invalid: false,
            records: Vec::new(),
        });
        if attempt != past.attempt {
            return;
        }
        past.ended = Some(match status {
            RecordStatus::Ok => Ended::Ok {
                invalid: past.invalid,
            },
            RecordStatus::Failed => Ended::Failed {
                reason: reason.unwrap_or_default(),
            },
            RecordStatus::Skipped => Ended::Skipped {
                reason: reason.unwrap_or_default(),
            },
            RecordStatus::Lost => Ended::Lost {
                reason: reason.unwrap_or_default(),
            },
        });
    }
}

/// Every host's history (each server variant's on its own, keyed `host/variant`), from a
/// run's journal in order.
pub fn read<E: std::borrow::Borrow<Event>>(
    events: impl IntoIterator<Item = E>,
) -> HashMap<String, HostHistory> {
    let mut hosts: HashMap<String, HostHistory> = HashMap::new();
    for event in events {
        let event = event.borrow();
        if let Some(key) = key_of(event) {
            hosts.entry(key).or_default().apply(event);
        }
    }
    hosts
}

/// The host (or `host/variant`) an event is about, for the events that make up a history.
fn key_of(event: &Event) -> Option<String> {
    match event {
        Event::StepStarted { host, variant, .. }
        | Event::StepFinished { host, variant, .. }
        | Event::PointStarted { host, variant, .. }
        | Event::PointFinished { host, variant, .. } => Some(crate::point::column(host, variant.as_deref())),
        Event::Record(record) => Some(record.column()),
        _ => None,
    }
}
