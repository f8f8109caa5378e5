//! The sweep points a run planned (those `--only` kept), as its manifest keeps them, so that
//! every planned point has a row, in the plan's order, and a point without a record says why:
//! skipped by the plan (`skip_if`, known before anything ran), its end as the journal tells it
//! (its record line unreadable), or `not run` with the reason. Runs made before the manifest
//! kept them have their playbook read again ([`reparsed`]).

use std::collections::HashMap;

use indexmap::IndexMap;

use super::cell::Cell;
use super::steps::StepRecords;
use super::Run;
use crate::config::only::Only;
use crate::config::Playbook;
use crate::events::{RecordStatus, Status};
use crate::point::PlannedSweep;
use crate::point::{self, StepPoint};
use crate::resume::Ended;
use crate::store::Manifest;

/// A run's sweeps as planned: (step index, step name) → the points by label, in order; and the
/// points the plan skips.
pub struct Planned {
    sweeps: IndexMap<(usize, String), IndexMap<String, point::Values>>,
    /// (column, point) → why `skip_if` skips it, for the points whose skip the plan knows
    /// (not those that wait for what the run learns).
    skips: HashMap<(String, StepPoint), String>,
    /// The sweeps that search for capacity: their points are candidates, and only those a
    /// search probed get rows.
    searched: HashMap<(usize, String), String>,
}

impl Planned {
    /// The run's sweeps as its manifest keeps them (read again for older runs).
    pub fn of(manifest: &Manifest) -> Planned {
        let planned = match &manifest.planned {
            Some(sweeps) => sweeps.clone(),
            None => reparsed(manifest),
        };
        let mut skips = HashMap::new();
        for sweep in &planned {
            for (column, skipped) in &sweep.skipped {
                for (label, reason) in skipped {
                    let point = StepPoint {
                        step_index: sweep.step_index,
                        label: label.clone(),
                    };
                    skips.insert((column.clone(), point), reason.clone());
                }
            }
        }
        let searched = planned
            .iter()
            .filter_map(|sweep| Some(((sweep.step_index, sweep.step.clone()), sweep.search.clone()?)))
            .collect();
        let sweeps = planned
            .into_iter()
            .map(|sweep| {
                let points = sweep.points.into_iter().map(|p| (point::label(&p), p));
                ((sweep.step_index, sweep.step), points.collect())
            })
            .collect();
        Planned {
            sweeps,
            skips,
            searched,
        }
    }

    /// The axis step `index` searches for capacity, when it makes a search.
    pub fn search_axis(&self, index: usize, name: &str) -> Option<&str> {
        self.searched.get(&(index, name.to_string())).map(String::as_str)
    }

    /// Whether `label` is a planned point of step `index`.
    pub fn has(&self, index: usize, name: &str, label: &str) -> bool {
        self.values(index, name, label).is_some()
    }

    /// The matrix values of the planned point `label` of step `index`, typed as planned.
    pub fn values(&self, index: usize, name: &str, label: &str) -> Option<&point::Values> {
        self.sweeps.get(&(index, name.to_string()))?.get(label)
    }

    /// The points step `index` planned, in order (none for a step that is not a sweep).
    pub fn points(&self, index: usize, name: &str) -> impl Iterator<Item = &point::Values> {
        self.sweeps
            .get(&(index, name.to_string()))
            .into_iter()
            .flat_map(|points| points.values())
    }

    /// Adds to `steps` the planned points (and whole sweeps) no record names, and puts each
    /// sweep's rows in the plan's order (a point run again later, `--redo-failed`, keeps its
    /// place; the rows of a point's several records stay under it); sweeps in step order.
    pub fn add_rows<'a>(&self, steps: &mut Vec<StepRecords<'a>>) {
        for ((index, name), points) in &self.sweeps {
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
            if !self.searched.contains_key(&(*index, name.clone())) {
                for label in points.keys() {
                    steps[at].rows.entry(label.clone()).or_default();
                }
            }
            let place = |row: &String| plan_place(points, row);
            steps[at].rows.sort_by(|a, _, b, _| place(a).cmp(&place(b)));
        }
    }

    /// The cell of a planned point of step `index` that `column` has no record of: skipped
    /// when the plan skips it; how it ended when the journal says it finished (`ran, no record`
    /// when it ended well, or its record line was lost: a damaged records.jsonl); else `not
    /// run` with the reason.
    pub fn absent(&self, run: &Run, column: &str, index: usize, label: &str) -> Cell {
        let point = StepPoint {
            step_index: index,
            label: label.to_string(),
        };
        let key = (column.to_string(), point);
        if let Some(reason) = self.skips.get(&key) {
            return Cell::Skipped {
                reason: reason.clone(),
            };
        }
        let ended = run
            .history
            .get(column)
            .and_then(|h| h.point(&key.1.repetition(1)))
            .and_then(|p| p.ended.clone());
        match ended {
            Some(Ended::Ok { .. }) if run.unreadable_records > 0 => Cell::RecordLost {
                reason: format!(
                    "events.jsonl says it finished ok, but its record could not be read: \
                     records.jsonl has {} unreadable line(s) (see the warnings)",
                    run.unreadable_records
                ),
            },
            Some(Ended::Ok { .. }) => Cell::NoRecord {
                reason: NO_RECORD.to_string(),
            },
            Some(Ended::Failed { reason }) => Cell::Failed { reason },
            Some(Ended::Lost { reason }) => Cell::Lost { reason },
            Some(Ended::Skipped { .. }) => Cell::Skipped {
                reason: "skipped (its record could not be read)".into(),
            },
            None => Cell::NotRun {
                reason: not_run_reason(&run.manifest, column, index),
            },
        }
    }
}

/// The columns (hosts, or host/variant) that measured nothing although points of their sweeps
/// ran and ended well: no ok record at all (a later `fetch-results`' files count), each with the
/// sweeps whose points printed no record and how many. Such a run has no measurement to show
/// there, which its exit code says.
pub fn measured_nothing(run: &Run) -> Vec<(String, Vec<(String, usize)>)> {
    let planned = Planned::of(&run.manifest);
    let measured =
        |column: &str| (run.records.iter()).any(|r| r.status == RecordStatus::Ok && r.column() == column);
    let mut columns = Vec::new();
    for column in run.hosts().into_iter().filter(|c| !measured(c)) {
        let sweeps: Vec<(String, usize)> = (planned.sweeps.iter())
            .filter_map(|((index, name), points)| {
                let no_record = |label: &&String| {
                    let cell = planned.absent(run, &column, *index, label);
                    matches!(cell, Cell::NoRecord { .. })
                };
                let count = points.keys().filter(no_record).count();
                (count > 0).then(|| (name.clone(), count))
            })
            .collect();
        if !sweeps.is_empty() {
            columns.push((column, sweeps));
        }
    }
    columns
}

/// Why a point that ran and ended well has no record.
const NO_RECORD: &str = "its command exited 0 and printed no record on stdout (a record is a \
    JSON object on a line of its own; the point's output is in its log under hosts/)";

/// The sweeps of a run made before its manifest kept them: its playbook's read again from the
/// copy the manifest keeps, with the points `--only` kept, and the skips of its configuration
/// planned again (none when it no longer loads); no sweeps when the playbook cannot be read
/// (hand-made runs show what they recorded). The one place the report reads a playbook.
fn reparsed(manifest: &Manifest) -> Vec<PlannedSweep> {
    let playbook: Option<Playbook> = serde_saphyr::from_str(&manifest.playbook.source).ok();
    let steps = playbook.map(|p| p.steps).unwrap_or_default();
    let only = Only::parse(&manifest.playbook.only).unwrap_or_default();
    let as_run = crate::resume::kept_config(manifest)
        .map(|config| crate::plan::planned_sweeps(&config, &manifest.run_id))
        .unwrap_or_default();
    let skipped = |index: usize| {
        let sweep = as_run.iter().find(|s| s.step_index == index);
        sweep.map(|s| s.skipped.clone()).unwrap_or_default()
    };
    (steps.iter().enumerate())
        .filter_map(|(step_index, step)| {
            Some(PlannedSweep {
                step_index,
                step: step.display_name(),
                points: step.as_kind().points(&only)?,
                skipped: skipped(step_index),
                search: step.as_kind().search_axis().map(str::to_string),
            })
        })
        .collect()
}

/// Where `row` goes in a sweep planned as `labels`: its point's place (a point's later records,
/// `<point> max_concurrency=4`, with it); rows of no planned point last, in their order.
fn plan_place(points: &IndexMap<String, point::Values>, row: &str) -> usize {
    points.get_index_of(row).unwrap_or_else(|| {
        points
            .keys()
            .enumerate()
            .filter(|(_, l)| {
                row.strip_prefix(l.as_str())
                    .is_some_and(|rest| rest.starts_with(' '))
            })
            .max_by_key(|(_, l)| l.len())
            .map_or(usize::MAX, |(i, _)| i)
    })
}

/// Why `column` did not run a point of step `step_index`: the sweep stopped short and said why
/// (its server gone), its host failed (at that step or before), the run was interrupted or
/// abandoned, or is still going.
fn not_run_reason(manifest: &Manifest, column: &str, step_index: usize) -> String {
    // A column is a host, or `host/variant`.
    let (host, variant) = column
        .split_once('/')
        .map_or((column, None), |(h, v)| (h, Some(v)));
    let entry = manifest.hosts.get(host);
    // The sweep said why it stopped short (the server it measures died and did not come back).
    let said = entry.and_then(|h| {
        let mut latest = h.steps.iter().rev();
        let step = latest.find(|s| s.index == step_index && s.variant.as_deref() == variant)?;
        step.details.get("not_run")?.as_str()
    });
    if let Some(said) = said {
        return said.to_string();
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, LoadOptions};

    const INVENTORY: &str = "hosts:\n  a: {connection: local, vars: {cap: 4}}\n  \
        b: {connection: local, vars: {cap: 16}}\n";
    const PLAYBOOK: &str = "name: t\nsteps:\n  - shell: {command: \"true\"}\n  \
        - run-sweep: {matrix: {n: [1, 2, 8], m: [x]}, skip_if: \"n > cap\", command: \"echo {{ n }}\"}\n";

    #[test]
    fn the_manifest_keeps_what_reading_the_playbook_again_finds() {
        let opts = LoadOptions {
            playbook: "p.yaml".into(),
            inventory: "h.yaml".into(),
            only: vec!["n=1".into(), "n=8".into()],
            ..Default::default()
        };
        let config = Config::from_text(&opts, PLAYBOOK.into(), INVENTORY.into()).unwrap();
        let mut manifest = crate::store::manifest_for(
            &config,
            "r",
            crate::plan::planned_sweeps(&config, "r"),
            chrono::Utc::now(),
        );
        let kept = manifest.planned.clone().unwrap();
        assert_eq!(kept, reparsed(&manifest));
        assert_eq!((kept.len(), kept[0].step_index, kept[0].points.len()), (1, 1, 2));
        assert!(kept[0].skip("a", "n=8 m=x").is_some());
        assert_eq!(kept[0].skip("b", "n=8 m=x"), None);
        let json = serde_json::to_value(&manifest).unwrap();
        assert_eq!(
            json["planned"][0]["points"],
            serde_json::json!([{"n": 1, "m": "x"}, {"n": 8, "m": "x"}])
        );
        manifest.planned = None;
        let before = serde_json::to_value(&manifest).unwrap();
        assert!(before.get("planned").is_none(), "runs made before read as before");
    }

    #[test]
    fn rows_go_in_the_plans_order_with_a_points_later_records_under_it() {
        let points: IndexMap<String, point::Values> = ["n=1", "n=2", "n=10"]
            .iter()
            .map(|s| (s.to_string(), point::Values::default()))
            .collect();
        let mut rows = vec!["n=10", "n=2 max_concurrency=4", "n=1", "n=2", "other"];
        rows.sort_by_key(|r| plan_place(&points, r));
        assert_eq!(rows, ["n=1", "n=2 max_concurrency=4", "n=2", "n=10", "other"]);
    }
}
