//! The playbook's references (expected values) checked against what a run measured. The
//! references come from the run's manifest, so any run directory can be checked again later.

use std::collections::HashMap;

use super::cell::{cell, Cell, RefCheck};
use super::model::{Grid, Row};
use super::Run;
use crate::config::reference::{Expected, Reference};
use crate::point::{self, StepPoint};

/// References by (point, host, metric), for marking table cells.
pub struct Lookup<'a> {
    by_key: HashMap<(StepPoint, &'a str, &'a str), &'a Expected>,
}

impl<'a> Lookup<'a> {
    pub fn new(run: &'a Run) -> Lookup<'a> {
        let by_key = run
            .manifest
            .references
            .iter()
            .map(|r| ((point_of(r), r.host.as_str(), r.metric.as_str()), &r.expected))
            .collect();
        Lookup { by_key }
    }

    /// The cell of `host` at `point` with its reference check, when the playbook states a
    /// reference for it.
    pub fn mark(&self, cell: Cell, point: StepPoint, host: &str, metric: &str) -> Cell {
        let Cell::Value { value, spread, .. } = cell else {
            return cell;
        };
        let expected = self.by_key.get(&(point, host, metric));
        Cell::Value {
            value,
            reference: expected.map(|e| RefCheck::new(e, value)),
            spread,
        }
    }
}

/// The point a reference names.
fn point_of(reference: &Reference) -> StepPoint {
    StepPoint::of(reference.step_index, &reference.point)
}

/// One reference and what the run measured for it. A reference without a valid measurement
/// (skipped, failed, invalid, missing) is missed.
pub struct Checked<'a> {
    pub reference: &'a Reference,
    pub measured: Cell,
    pub met: bool,
}

/// Every reference of the run, checked.
pub fn check(run: &Run) -> Vec<Checked<'_>> {
    run.manifest
        .references
        .iter()
        .map(|reference| {
            let point = point_of(reference);
            let records: Vec<_> = run
                .records
                .iter()
                .filter(|r| r.column() == reference.host && r.key().point == point)
                .collect();
            let measured = match records.is_empty() {
                true => Cell::Missing,
                false => cell(Some(&records), &reference.metric),
            };
            let met = measured.number().is_some_and(|v| reference.expected.is_met_by(v));
            Checked {
                reference,
                measured,
                met,
            }
        })
        .collect()
}

/// One line per missed reference, for `rigrun run --check-references`.
pub fn misses(run: &Run) -> Vec<String> {
    check(run)
        .iter()
        .filter(|c| !c.met)
        .map(|c| {
            let r = c.reference;
            let measured = match &c.measured {
                Cell::Value { value, .. } => RefCheck::new(&r.expected, *value).explain(*value),
                Cell::Missing => format!("reference {}: nothing measured", r.expected),
                other => format!("reference {}: no valid value ({})", r.expected, other.text()),
            };
            format!(
                "{} at {} (step {}): {} {measured}",
                r.host,
                point::label(&r.point),
                r.step_index + 1,
                r.metric
            )
        })
        .collect()
}

/// The references of a run as a table: each with what was measured and whether it was met.
pub fn grid(run: &Run) -> Option<Grid> {
    let checked = check(run);
    if checked.is_empty() {
        return None;
    }
    let label = |text: String| Cell::Label { text };
    let rows = checked
        .into_iter()
        .map(|c| {
            let r = c.reference;
            let deviation = match c.measured.number() {
                Some(v) if r.expected.value != 0.0 => Cell::Change {
                    percent: (v / r.expected.value - 1.0) * 100.0,
                    verdict: None,
                    test: None,
                    workload: None,
                },
                _ => Cell::Missing,
            };
            let cells = vec![
                label(point::label(&r.point)),
                label(r.host.clone()),
                label(format!("{} (step {})", r.metric, r.step_index + 1)),
                label(r.expected.to_string()),
                c.measured,
                deviation,
                Cell::Check { met: c.met },
            ];
            Row {
                point: r.point.clone(),
                cells,
            }
        })
        .collect();
    Some(Grid {
        title: format!("{} · references", run.manifest.run_id),
        metric: "expected values".into(),
        columns: [
            "point",
            "host",
            "metric",
            "reference",
            "measured",
            "deviation",
            "verdict",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        scaling: Vec::new(),
        rates: Vec::new(),
        slo: None,
    })
}
