//! The step kinds, one module each: the kind's YAML struct, its typed plan (templates rendered
//! for one host) and how `rigrun plan` describes that plan. `steps/<kind>.rs` runs the plan.
//!
//! The kinds sit in config, below `plan.rs`, because a kind's plan needs only config and its
//! templates (`render.rs`); `plan.rs` keeps the hosts × steps orchestration around them.
//! `step_kinds!` lists the kinds once and generates `Step`, `Action` and `STEP_KINDS` from it.

pub mod copy_script;
pub mod fetch_results;
pub mod run_sweep;
pub mod search;
pub mod shell;
pub mod start_server;
pub mod verify_server;

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::duration::Dur;
use super::only::Only;
use super::reference::References;
use super::render::{RenderError, Renderer};
use super::template::{Quoting, Text};
use crate::point::{Matrix, PointKey, StepPoint, Values};
pub use run_sweep::SweepPoint;

/// How long `verify-server` and `start-server` wait for a server when the playbook does not say.
pub const DEFAULT_SERVER_WAIT: Duration = Duration::from_secs(30);

/// How many times a server rigrun started is started again after it crashed, when the
/// playbook does not say (`restarts:` of `start-server` and `server:`).
pub const DEFAULT_RESTARTS: u32 = 2;

/// The most restarts a server may be given: a server that crashes more often is broken.
pub const MAX_RESTARTS: u32 = 10;

/// How long a server rigrun did not start may take to answer again after it stopped answering
/// during a sweep, when `verify-server` does not say (`down_for:`).
pub const DEFAULT_DOWN_FOR: Duration = Duration::from_secs(300);

/// `restarts:` as written, checked against [`MAX_RESTARTS`].
pub fn restarts(r: &Renderer, written: &Option<Spanned<u32>>) -> Result<u32, RenderError> {
    match written {
        Some(n) if n.value > MAX_RESTARTS => Err(r.error(
            n,
            format!(
                "restarts: {} is too many: at most {MAX_RESTARTS} (a server that crashes more often \
                 needs fixing, not restarting)",
                n.value
            ),
        )),
        Some(n) => Ok(n.value),
        None => Ok(DEFAULT_RESTARTS),
    }
}

/// The most retries a step may ask for: with the backoff (1 s doubling to at most
/// [`MAX_BACKOFF`]) that is minutes of waiting, beyond which a failing command is broken, not
/// unlucky.
pub const MAX_RETRIES: u32 = 10;

/// The longest wait between two attempts of a failing command.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The wait before retry `n` (from 1): 1 s, 2 s, 4 s, … at most [`MAX_BACKOFF`].
pub fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(16)).min(MAX_BACKOFF)
}

/// `retries:` as written, checked against [`MAX_RETRIES`].
pub fn retries(r: &Renderer, written: &Option<Spanned<u32>>) -> Result<u32, RenderError> {
    match written {
        Some(n) if n.value > MAX_RETRIES => Err(r.error(
            n,
            format!(
                "retries: {} is too many: at most {MAX_RETRIES} (each waits longer, up to {}s)",
                n.value,
                MAX_BACKOFF.as_secs()
            ),
        )),
        Some(n) => Ok(n.value),
        None => Ok(0),
    }
}

/// What `rigrun run --resume` does with a step that already ran (see `crate::resume`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnResume {
    /// It sets up what later steps need (a server checked or started, a script copied, a
    /// command): it runs again whenever a later step still has work.
    Setup,
    /// It measures, point by point: only its points without a result run again.
    Measure,
    /// It collects what earlier steps produced: it runs again whenever an earlier step has work.
    Collect,
}

/// What a kind's YAML struct tells the layers above. Every struct also has the fields
/// `name: Option<String>` and `timeout: Option<Dur>`, which `step_kinds!` reads directly.
pub trait StepKind {
    /// Every template of the step with its quoting, for checking variables before anything runs.
    fn templates(&self) -> Vec<(&Text, Quoting)>;

    /// Variables this step makes available to the steps after it.
    fn provides(&self) -> &'static [&'static str] {
        &[]
    }

    /// Variables the step defines for its own templates (a sweep's matrix axes).
    fn own_variables(&self) -> Vec<&str> {
        Vec::new()
    }

    /// Expressions (not templates) the step evaluates, by field name, such as `skip_if`.
    fn expressions(&self) -> Vec<(&'static str, &Text)> {
        Vec::new()
    }

    /// Expected values for the step's points, with the matrix that names those points.
    fn references(&self) -> Option<(&References, &Matrix)> {
        None
    }

    /// What a resumed run does with the step once it has run.
    fn on_resume(&self) -> OnResume {
        OnResume::Setup
    }

    /// The points the step runs, those `--only` keeps, in the matrix's order (known before
    /// anything is rendered); None for a kind that has no points.
    fn points(&self, _only: &Only) -> Option<Vec<Values>> {
        None
    }

    /// How many times the step measures each of its points, given the run's `--repeat`.
    fn repetitions(&self, _run_repeat: Option<u32>) -> u32 {
        1
    }

    /// The axis a capacity search probes, when the step makes one: its points are candidates,
    /// and only those probed are measured.
    fn search_axis(&self) -> Option<&str> {
        None
    }
}

/// How a kind renders for one host (apart from `StepKind`, which stays a trait object).
pub trait Plans: StepKind {
    /// The step planned for one host; `steps/<kind>.rs` receives it whole.
    type Plan: Describe;

    fn plan(&self, r: &Renderer) -> Result<Self::Plan, RenderError>;
}

/// How a kind's plan reads in `rigrun plan`.
pub trait Describe {
    /// Writes the step's lines; `head` is `  N. name`.
    fn describe(&self, out: &mut String, head: &str);

    /// The sweep points the step runs (none for most kinds), for the plan's counts.
    fn points(&self) -> &[SweepPoint] {
        &[]
    }
}

/// Lists the kinds once: `"yaml-name" => Variant(module)`, where `module::Variant` is the YAML
/// struct and implements `Plans`.
macro_rules! step_kinds {
    ($($kind:literal => $variant:ident($module:ident),)*) => {
        /// Every step kind, as written in YAML.
        pub const STEP_KINDS: &[&str] = &[$($kind),*];

        /// A step as written. Externally tagged (`- run-sweep: {...}`) so that an error points at
        /// the exact field.
        #[derive(Debug, Deserialize)]
        pub enum Step {
            $(#[serde(rename = $kind)] $variant($module::$variant),)*
        }

        /// A step planned for one host.
        #[derive(Debug, Clone, Serialize)]
        #[serde(tag = "kind", rename_all = "kebab-case")]
        pub enum Action {
            $(#[serde(rename = $kind)] $variant(<$module::$variant as Plans>::Plan),)*
            /// Depends on values only known while running (e.g. what `verify-server` reports).
            Deferred { reason: String },
        }

        impl Step {
            pub fn kind(&self) -> &'static str {
                match self { $(Step::$variant(_) => $kind,)* }
            }

            /// The name shown in progress and tables: `name:` when given, else the kind.
            pub fn display_name(&self) -> String {
                let name = match self { $(Step::$variant(s) => &s.name,)* };
                name.clone().unwrap_or_else(|| self.kind().to_string())
            }

            pub fn timeout(&self) -> Option<Dur> {
                match self { $(Step::$variant(s) => s.timeout,)* }
            }

            /// What every kind answers: templates, provided variables, references.
            pub fn as_kind(&self) -> &dyn StepKind {
                match self { $(Step::$variant(s) => s,)* }
            }

            /// Renders the step for one host.
            pub fn plan(&self, r: &Renderer) -> Result<Action, RenderError> {
                Ok(match self { $(Step::$variant(s) => Action::$variant(s.plan(r)?),)* })
            }
        }

        impl Action {
            /// The step's lines for `rigrun plan`; `head` is `  N. name`.
            pub fn describe(&self, out: &mut String, head: &str) {
                match self {
                    $(Action::$variant(p) => p.describe(out, head),)*
                    Action::Deferred { reason } => {
                        let _ = writeln!(out, "{head}: decided at run time ({reason})");
                    }
                }
            }

            /// The sweep points the step runs (none for most kinds).
            pub fn points(&self) -> &[SweepPoint] {
                match self {
                    $(Action::$variant(p) => p.points(),)*
                    Action::Deferred { .. } => &[],
                }
            }
        }
    };
}

step_kinds! {
    "verify-server" => VerifyServer(verify_server),
    "copy-script" => CopyScript(copy_script),
    "run-sweep" => RunSweep(run_sweep),
    "fetch-results" => FetchResults(fetch_results),
    "shell" => Shell(shell),
    "start-server" => StartServer(start_server),
}

impl Step {
    /// The step's units of work, when it is step `index` of the playbook: each of its points
    /// with each of its repetitions, point by point (none for a kind without points). What a
    /// resume runs and counts, and what the report plans a row for.
    pub fn units(&self, index: usize, run_repeat: Option<u32>, only: &Only) -> Vec<PointKey> {
        let kind = self.as_kind();
        let repetitions = kind.repetitions(run_repeat);
        let points = kind.points(only).unwrap_or_default();
        let point = |values: &Values| StepPoint::of(index, values);
        let units = |p: StepPoint| (1..=repetitions).map(move |r| p.clone().repetition(r));
        points.iter().map(point).flat_map(units).collect()
    }
}

fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_name_reads_as_its_step() {
        for kind in STEP_KINDS {
            let yaml = format!("- {kind}: {{}}\n");
            let err = serde_saphyr::from_str::<Vec<Step>>(&yaml)
                .unwrap_err()
                .to_string();
            assert!(!err.contains("unknown variant"), "{kind}: {err}");
        }
    }
}
