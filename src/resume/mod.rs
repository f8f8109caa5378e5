//! What is left to do in a run, for `rigrun run --resume RUN_DIR`: the configuration as it ran
//! (`reload.rs`), what the journal says happened (`history.rs`) and, from both, each host's
//! work (`work.rs`): which steps run again and which sweep points run as which attempt. A new
//! run asks the same questions of an empty history, so there is one way steps and points run.

pub mod history;
mod reload;
mod work;

use std::path::Path;

use anyhow::Result;
use indexmap::IndexMap;

pub use history::{Ended, HostHistory};
pub use reload::kept as kept_config;
pub use work::{HostWork, Kept, PointWork};

use crate::config::Config;
use crate::events::Status;
use crate::exit::Invalid;
use crate::point::StepPoint;
use crate::store::{events, RunDir};

/// Which finished points a resume runs again besides those that never finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Redo {
    /// `--redo-failed`: points whose command ran and failed.
    pub failed: bool,
    /// `--redo-invalid`: points whose record was marked invalid (`valid: false`).
    pub invalid: bool,
}

/// A run ready to go on: its directory opened for appending, its configuration as it ran,
/// each host's work, and which session this is (2 for the first resume).
pub struct Resumed {
    pub dir: RunDir,
    pub config: Config,
    pub work: IndexMap<String, HostWork>,
    pub session: u32,
}

impl Resumed {
    /// Whether nothing at all is left to run.
    pub fn is_done(&self) -> bool {
        self.work.values().all(HostWork::is_done)
    }

    /// What the resume will do, said once before it starts: a headline (`resuming <run>: 3
    /// points left on blackwell, nothing left on a6000`), then a line per point cut short, saying
    /// how it runs now.
    pub fn describe(&self) -> Vec<String> {
        let id = &self.dir.manifest.run_id;
        if self.is_done() {
            return vec![format!(
                "resuming {id}: nothing left to run; its failed points stand (--redo-failed runs \
                 them again, --redo-invalid the invalid ones)"
            )];
        }
        let sweeps = crate::plan::planned_sweeps(&self.config, id);
        let left: Vec<String> = self
            .work
            .iter()
            .map(|(key, work)| {
                let skipped = |point: &StepPoint| {
                    let sweep = sweeps.iter().find(|s| s.step_index == point.step_index);
                    sweep.is_some_and(|s| s.skip(key, &point.label).is_some())
                };
                (key, work.is_done(), work.points_to_run(&self.config, &skipped))
            })
            .map(|(key, done, points)| match (done, points) {
                (true, _) => format!("nothing left on {key}"),
                (false, 0) => format!("unfinished steps left on {key}"),
                (false, 1) => format!("1 point left on {key}"),
                (false, n) => format!("{n} points left on {key}"),
            })
            .collect();
        let mut lines = vec![format!("resuming {id}: {}", left.join(", "))];
        for (key, work) in &self.work {
            lines.extend(
                work.cut_short(&self.config)
                    .into_iter()
                    .map(|l| format!("  {key} {l}")),
            );
        }
        lines
    }
}

/// Opens `path` to go on with its run; an [`Invalid`] error when it is not a run directory, was
/// written by a newer rigrun, is still running, or its files changed what runs.
pub fn open(path: &Path, redo: Redo) -> Result<Resumed> {
    let invalid = |e: anyhow::Error| anyhow::Error::from(Invalid(format!("{e:#}")));
    let manifest = crate::store::read_manifest(path).map_err(invalid)?;
    if manifest.status == Status::Running {
        let writer = manifest
            .process
            .as_ref()
            .map(|p| format!("rigrun process {} on {}", p.pid, p.host))
            .unwrap_or_else(|| "another rigrun".into());
        return Err(Invalid(format!(
            "run {} is still running ({writer}): stop it first (Ctrl-C), or wait for it to end",
            manifest.run_id
        ))
        .into());
    }
    let config = reload::config_as_run(&manifest)?;
    let mut pasts = history::read(events(path).map_err(invalid)?);
    let work = config
        .hosts
        .iter()
        .flat_map(|h| keys(&config, h))
        .map(|key| {
            let past = pasts.remove(&key).unwrap_or_default();
            (key, HostWork::resumed(&config, past, redo))
        })
        .collect();
    let session = manifest.attempts() as u32 + 1;
    let dir = RunDir::reopen(path).map_err(invalid)?;
    Ok(Resumed {
        dir,
        config,
        work,
        session,
    })
}

/// What a host's work is kept under: the host, or `host/variant` for each server variant
/// (each variant's steps and points are a history of their own), in the order they run.
pub fn keys(config: &Config, host: &str) -> Vec<String> {
    let variants = config.variants();
    if variants.iter().all(|v| v.name().is_none()) {
        return vec![host.to_string()];
    }
    let column = |v: &crate::config::server_block::Variant| crate::point::column(host, v.name());
    variants.iter().map(column).collect()
}

#[cfg(test)]
mod tests;
