//! What one host still has to do: which steps run and, for a sweep, which points (each
//! repetition of a repeated sweep on its own) run as which attempt. A new run has an empty history, so everything runs as its first attempt.

use crate::config::only::Only;
use crate::config::steps::OnResume;
use crate::config::{Config, Step};
use crate::events::Status;
use crate::point::{PointKey, StepPoint};

use super::history::{Ended, HostHistory};
use super::Redo;

/// What a sweep does with one of its points.
#[derive(Clone, Debug, PartialEq)]
pub enum PointWork {
    /// Run it as this attempt.
    Run { attempt: u32 },
    /// Its latest attempt stands; it is not run again.
    Keep { attempt: u32, kept: Kept },
}

/// How a point that is not run again ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Kept {
    Ok,
    Failed { reason: String },
    Skipped,
}

/// One host's work in this run.
#[derive(Clone, Debug)]
pub struct HostWork {
    past: HostHistory,
    redo: Redo,
    /// Per step index: whether the step runs.
    runs: Vec<bool>,
    /// `run --repeat N`, for sweeps without their own `repeat:`.
    repeat: Option<u32>,
    /// `--only`: the sweep points the run runs.
    only: Only,
    /// The server the points measure was started anew (a server variant run again): a point
    /// cut short runs as its next attempt rather than re-attaching to what measured the old one.
    server_restarted: bool,
}

impl HostWork {
    /// A host of a new run: every step runs, every point as its first attempt.
    pub fn fresh(config: &Config) -> HostWork {
        HostWork {
            past: HostHistory::default(),
            redo: Redo::default(),
            runs: vec![true; config.playbook.steps.len()],
            repeat: config.repeat,
            only: config.only.clone(),
            server_restarted: false,
        }
    }

    /// A host of a resumed run. The rule: a step runs when it has work of its own — a sweep
    /// with points to run (see [`HostWork::point`]), any other step that did not finish ok —
    /// or when its kind says it must follow work elsewhere: steps that set things up
    /// (verify-server, start-server, copy-script, shell) run again whenever a later step has
    /// work, since that work needs the server checked or started, the script in place and the
    /// `server` variables; fetch-results runs again whenever an earlier step has work, to
    /// collect what it produces. Sweep points measured ok and steps with nothing to follow are
    /// not repeated.
    pub fn resumed(config: &Config, past: HostHistory, redo: Redo) -> HostWork {
        let mut work = HostWork {
            past,
            redo,
            runs: Vec::new(),
            repeat: config.repeat,
            only: config.only.clone(),
            server_restarted: false,
        };
        let steps = &config.playbook.steps;
        let own: Vec<bool> = steps
            .iter()
            .enumerate()
            .map(|(i, step)| work.has_own_work(i, step))
            .collect();
        work.runs = steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                own[i]
                    || match step.as_kind().on_resume() {
                        OnResume::Setup => own[i + 1..].contains(&true),
                        OnResume::Collect => own[..i].contains(&true),
                        OnResume::Measure => false,
                    }
            })
            .collect();
        work
    }

    /// This work against a server started anew (see `server_restarted`).
    pub fn with_server_restarted(&self) -> HostWork {
        HostWork {
            server_restarted: true,
            ..self.clone()
        }
    }

    /// Whether step `index` runs.
    pub fn runs_step(&self, index: usize) -> bool {
        self.runs.get(index).copied().unwrap_or(true)
    }

    /// Whether nothing is left to run on the host.
    pub fn is_done(&self) -> bool {
        !self.runs.contains(&true)
    }

    /// The attempt of step `index` when it starts now.
    pub fn step_attempt(&self, index: usize) -> u32 {
        self.past.step(index).map_or(0, |s| s.attempts) + 1
    }

    /// What to do with a unit of work (a repetition of a point: a resume runs only the
    /// repetitions not done). A point never started runs as attempt 1.
    /// A point whose latest attempt started but never finished (rigrun died, the host may
    /// not have) runs again *as the same attempt*: a command still running detached on the
    /// host is keyed by (run, step, point, attempt), so it is re-attached rather than
    /// started twice. A point whose latest attempt finished stands, unless it failed and
    /// `--redo-failed` was given, or was marked invalid and `--redo-invalid` was given: then
    /// it runs as the next attempt. So does one cut short when its server was started anew, and
    /// one recorded lost (the interrupt, a lost host: its command is known to be stopped).
    pub fn point(&self, key: &PointKey) -> PointWork {
        let Some(past) = self.past.point(key) else {
            return PointWork::Run { attempt: 1 };
        };
        let (attempt, next) = (
            past.attempt,
            PointWork::Run {
                attempt: past.attempt + 1,
            },
        );
        let keep = |kept| PointWork::Keep { attempt, kept };
        match &past.ended {
            None if self.server_restarted => next,
            None => PointWork::Run { attempt },
            Some(Ended::Ok { invalid: true }) if self.redo.invalid => next,
            Some(Ended::Ok { .. }) => keep(Kept::Ok),
            Some(Ended::Failed { .. }) if self.redo.failed => next,
            Some(Ended::Failed { reason }) => keep(Kept::Failed {
                reason: reason.clone(),
            }),
            Some(Ended::Skipped { .. }) => keep(Kept::Skipped),
            Some(Ended::Lost { .. }) => next,
        }
    }

    /// How a capacity search's candidate runs now: as [`point`](Self::point) says, except for a
    /// candidate an earlier attempt of the search did not probe, which was never measured: a
    /// probe (`not_probed_now` None) measures it, and a search that now ends with other words
    /// records it skipped again with those. Both happen when a probe re-run by `--redo-failed`
    /// leads the search where it did not go before.
    pub fn candidate(&self, key: &PointKey, not_probed_now: Option<&str>) -> PointWork {
        let work = self.point(key);
        let before = match self.past.point(key).and_then(|p| p.ended.as_ref()) {
            Some(Ended::Skipped { reason }) if reason.starts_with(crate::events::NOT_PROBED) => reason,
            _ => return work,
        };
        match (work, not_probed_now) {
            (PointWork::Keep { attempt, .. }, None) => PointWork::Run { attempt: attempt + 1 },
            (PointWork::Keep { attempt, .. }, Some(now)) if now != before => {
                PointWork::Run { attempt: attempt + 1 }
            }
            (work, _) => work,
        }
    }

    /// The measured records of a unit's latest attempt, as the journal kept them (none for a
    /// unit never run).
    pub fn records(&self, key: &PointKey) -> &[serde_json::Map<String, serde_json::Value>] {
        self.past.point(key).map_or(&[], |p| p.records.as_slice())
    }

    /// How many sweep points (repetitions of them, in a repeated sweep) of the steps that run
    /// will run, for the resume's first line; the points `skipped` says the plan skips are not
    /// counted.
    pub fn points_to_run(&self, config: &Config, skipped: &dyn Fn(&StepPoint) -> bool) -> usize {
        let steps = config.playbook.steps.iter().enumerate();
        steps
            .filter(|(i, _)| self.runs_step(*i))
            .flat_map(|(i, step)| self.units(i, step))
            .filter(|key| matches!(self.point(key), PointWork::Run { .. }))
            .filter(|key| !skipped(&key.point))
            .count()
    }

    /// The points of the steps that run whose latest attempt was cut short, each with how it
    /// runs now: `run-sweep n=2: cut short by the interrupt; runs again as attempt 2`.
    pub fn cut_short(&self, config: &Config) -> Vec<String> {
        let mut lines = Vec::new();
        for (i, step) in config.playbook.steps.iter().enumerate() {
            if !self.runs_step(i) {
                continue;
            }
            for key in self.units(i, step) {
                let shown = match key.repetition {
                    1 => key.point.label.clone(),
                    r => format!("{} (repetition {r})", key.point.label),
                };
                let how = match (self.past.point(&key), self.point(&key)) {
                    (Some(past), PointWork::Run { attempt }) => match &past.ended {
                        None if attempt == past.attempt => format!(
                            "was cut short (rigrun stopped without a word); runs again as attempt \
                             {attempt}, its command re-attached if it still runs on the host"
                        ),
                        None => format!("was cut short; runs again as attempt {attempt}"),
                        Some(Ended::Lost { reason }) => {
                            let reason = reason.split("; runs again as").next().unwrap_or_default();
                            format!("{reason}; runs again as attempt {attempt}")
                        }
                        Some(_) => continue,
                    },
                    _ => continue,
                };
                lines.push(format!("{} {shown}: {how}", step.display_name()));
            }
        }
        lines
    }

    /// How the host stands when nothing is left to run on it: ok, or failed at its first step
    /// that did not end ok (a sweep: one of its points failed), with that step's error.
    pub fn verdict(&self, config: &Config) -> (Status, Option<(String, String)>) {
        for (i, step) in config.playbook.steps.iter().enumerate() {
            if let Some(error) = self.failure(i, step) {
                let label = format!("{}. {}", i + 1, step.display_name());
                return (Status::Failed, Some((label, error)));
            }
        }
        (Status::Ok, None)
    }

    /// Why step `index` did not end ok, if it did not.
    fn failure(&self, index: usize, step: &Step) -> Option<String> {
        if step.as_kind().on_resume() == OnResume::Measure {
            let failed: Vec<String> = self
                .units(index, step)
                .into_iter()
                .filter_map(|key| match self.point(&key) {
                    PointWork::Keep {
                        kept: Kept::Failed { reason },
                        ..
                    } => Some(format!("{}: {reason}", key.point.label)),
                    _ => None,
                })
                .collect();
            return (!failed.is_empty()).then(|| failed.join("; "));
        }
        let past = self.past.step(index);
        match past.and_then(|s| s.status) {
            Some(Status::Ok | Status::Skipped) => None,
            _ => Some(
                past.and_then(|s| s.error.clone())
                    .unwrap_or_else(|| "did not finish".into()),
            ),
        }
    }

    /// Step `index`'s units of work in this run (see [`Step::units`]).
    fn units(&self, index: usize, step: &Step) -> Vec<PointKey> {
        step.units(index, self.repeat, &self.only)
    }

    fn has_own_work(&self, index: usize, step: &Step) -> bool {
        match step.as_kind().on_resume() {
            OnResume::Measure => self
                .units(index, step)
                .iter()
                .any(|key| matches!(self.point(key), PointWork::Run { .. })),
            OnResume::Setup | OnResume::Collect => !matches!(
                self.past.step(index).and_then(|s| s.status),
                Some(Status::Ok | Status::Skipped)
            ),
        }
    }
}
