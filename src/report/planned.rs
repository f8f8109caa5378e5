//! The sweep points a run planned (those `--only` kept), read back from the playbook and the
//! filter its manifest keeps, so that a point that never ran (its host failed earlier, the run was interrupted) is shown as
//! `not run` with the reason rather than left out.

use indexmap::{IndexMap, IndexSet};

use super::steps::StepRecords;
use crate::config::only::Only;
use crate::config::{Playbook, Step};
use crate::events::Status;
use crate::point;
use crate::store::Manifest;

/// A run's sweeps as planned: (step index, step name) → the points' labels, in order.
pub struct Planned {
    sweeps: IndexMap<(usize, String), IndexSet<String>>,
}

impl Planned {
    /// The sweeps of the manifest's playbook (none when it cannot be read: old or hand-made
    /// runs show what they recorded, as before).
    pub fn of(manifest: &Manifest) -> Planned {
        let playbook: Option<Playbook> = serde_saphyr::from_str(&manifest.playbook.source).ok();
        let steps = playbook.map(|p| p.steps).unwrap_or_default();
        // The points `--only` left out were not planned.
        let only = Only::parse(&manifest.playbook.only).unwrap_or_default();
        let sweeps = steps
            .iter()
            .enumerate()
            .filter_map(|(i, step)| match step {
                Step::RunSweep(sweep) => {
                    let labels = sweep.chosen_points(&only).iter().map(point::label).collect();
                    Some(((i, step.display_name()), labels))
                }
                _ => None,
            })
            .collect();
        Planned { sweeps }
    }

    /// Whether `label` is a planned point of step `index`.
    pub fn has(&self, index: usize, name: &str, label: &str) -> bool {
        self.sweeps
            .get(&(index, name.to_string()))
            .is_some_and(|labels| labels.contains(label))
    }

    /// Adds to `steps` the planned points (and whole sweeps) no record names, as rows without
    /// records, after those that have some; sweeps in step order.
    pub fn add_rows<'a>(&self, steps: &mut Vec<StepRecords<'a>>) {
        for ((index, name), labels) in &self.sweeps {
            let at = steps
                .iter()
                .position(|s| s.step_index == *index && s.step == *name);
            let at = at.unwrap_or_else(|| {
                let before = steps
                    .iter()
                    .position(|s| s.step_index > *index)
                    .unwrap_or(steps.len());
                steps.insert(
                    before,
                    StepRecords {
                        step: name.clone(),
                        step_index: *index,
                        rows: IndexMap::new(),
                    },
                );
                before
            });
            for label in labels {
                steps[at].rows.entry(label.clone()).or_default();
            }
        }
    }
}

/// Why `host` did not run a point of step `index`: its host failed (at that step or before),
/// the run was interrupted or abandoned, or is still going.
pub fn not_run_reason(manifest: &Manifest, column: &str) -> String {
    // A column is a host, or `host/variant`.
    let host = column.split_once('/').map_or(column, |(host, _)| host);
    let entry = manifest.hosts.get(host);
    let status = entry.and_then(|h| h.status);
    match (status, entry.and_then(|h| h.failed_step.as_deref())) {
        (Some(Status::Failed), Some(step)) => format!("{host} failed at {step}"),
        (Some(Status::Failed), None) => format!("{host} failed"),
        _ if manifest.abandoned => "the run was interrupted (its rigrun process is gone)".into(),
        _ if manifest.status == Status::Running => "not run yet: the run is still going".into(),
        _ if manifest.status == Status::Interrupted => "the run was interrupted".into(),
        _ => "it did not run".into(),
    }
}
