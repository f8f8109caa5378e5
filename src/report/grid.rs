//! One run's tables: per step, rows = points, columns = the run's hosts, each cell checked
//! against its reference, with the scaling story and the SLO capacity of the main sweeps.

use super::capacity::SloCapacity;
use super::cell::{cell, Cell};
use super::metric_names::{pick_metrics, step_holds};
use super::model::{Grid, Row};
use super::planned::Planned;
use super::references::Lookup;
use super::search::SearchSummary;
use super::steps::{group, is_main_step, RowRecords, StepRecords};
use super::{rate_story, scaling, Run};
use crate::point::Values;

/// Whether the step's points offer several request rates at a single concurrency: the
/// concurrency-based capacity cannot tell its levels apart.
pub fn only_rates_vary(step: &StepRecords) -> bool {
    let distinct = |axis: &str| {
        let values = step.rows.values().flat_map(|row| row.values().flatten());
        let texts: std::collections::BTreeSet<String> = values
            .filter_map(|r| r.point.get(axis).map(crate::point::value_text))
            .collect();
        texts.len()
    };
    distinct("request_rate") > 1 && distinct("concurrency") <= 1
}

/// A run read for its tables: its records grouped by step (with a row for every planned
/// point, run or not), its planned sweeps and its references.
pub struct RunTables<'a> {
    pub run: &'a Run,
    pub steps: Vec<StepRecords<'a>>,
    planned: Planned,
    refs: Lookup<'a>,
}

impl<'a> RunTables<'a> {
    pub fn new(run: &'a Run) -> RunTables<'a> {
        let planned = Planned::of(&run.manifest);
        let mut steps = group(&run.records);
        planned.add_rows(&mut steps);
        RunTables {
            run,
            steps,
            planned,
            refs: Lookup::new(run),
        }
    }

    /// The run's main steps (see `is_main_step`): what compare and the report cover.
    pub fn main_steps(&self) -> impl Iterator<Item = &StepRecords<'a>> {
        self.steps.iter().filter(|s| is_main_step(&self.steps, s))
    }

    /// The step's tables, one per metric: those `asked`, else the step's own (see
    /// `pick_metrics`); the first carries the scaling story and the SLO capacity.
    pub fn grids(&self, step: &StepRecords, asked: &[String]) -> Vec<Grid> {
        let main = is_main_step(&self.steps, step);
        let metrics = pick_metrics(step, asked, main);
        metrics
            .into_iter()
            .enumerate()
            .map(|(i, metric)| self.grid(step, metric, main && i == 0))
            .collect()
    }

    /// The step's table in `metric`, with the scaling story and SLO capacity when `story`.
    fn grid(&self, step: &StepRecords, metric: String, story: bool) -> Grid {
        let hosts = self.run.hosts();
        let mut columns = vec!["point".to_string()];
        columns.extend(hosts.iter().cloned());
        let rows = step
            .rows
            .iter()
            .map(|(label, by_host)| {
                let mut cells = vec![Cell::Label { text: label.clone() }];
                cells.extend(
                    hosts
                        .iter()
                        .map(|h| self.cell(step, (label, by_host), h, &metric)),
                );
                Row {
                    point: self.point_of(step, label).unwrap_or_default(),
                    cells,
                }
            })
            .collect();
        Grid {
            title: format!(
                "{} · step {}: {}",
                self.run.manifest.run_id,
                step.step_index + 1,
                step.step
            ),
            scaling: match story {
                true => scaling::stories(step, &metric, &hosts),
                false => Vec::new(),
            },
            rates: match story {
                true => rate_story::stories(step, &hosts, &self.run.manifest.slo),
                false => Vec::new(),
            },
            slo: story.then(|| self.capacity(step, &metric, &hosts)).flatten(),
            metric,
            columns,
            rows,
        }
    }

    /// Each host's capacity under the run's limits in `step`, with what its capacity search
    /// found when it made one (a search over another axis than concurrency tells it alone).
    fn capacity(&self, step: &StepRecords, metric: &str, hosts: &[String]) -> Option<SloCapacity> {
        let limits = &self.run.manifest.slo;
        let axis = self.planned.search_axis(step.step_index, &step.step);
        let search = axis.and_then(|axis| SearchSummary::of(self.run, step.step_index, axis, hosts));
        match (axis, search) {
            (Some(axis), Some(search)) if axis != "concurrency" && !limits.is_empty() => {
                Some(SloCapacity::searched(limits, metric, search))
            }
            (Some(axis), None) if axis != "concurrency" => None,
            // Rates offered at one concurrency cap: its rate story says which rate holds.
            (None, None) if only_rates_vary(step) => None,
            (_, search) => {
                let mut capacity = SloCapacity::of(step, metric, hosts, limits)?;
                capacity.search = search;
                Some(capacity)
            }
        }
    }

    /// The point the row `label` of `step` is about: the matrix values its records carry, else
    /// the plan's (a planned point no column has a record of); None for a row of neither.
    pub fn point_of(&self, step: &StepRecords, label: &str) -> Option<Values> {
        let recorded = step.rows.get(label).and_then(|row| row.values().flatten().next());
        match recorded {
            Some(record) => Some(record.point.clone()),
            None => (self.planned).values(step.step_index, &step.step, label).cloned(),
        }
    }

    /// The cell of `host` in one row of a step, checked against its reference when it has one;
    /// for a planned point the host has no record of, why (see [`Planned::absent`]); unknown,
    /// saying so, where no record of the step has the metric at all.
    pub fn cell(
        &self,
        step: &StepRecords,
        (label, row): (&str, &RowRecords),
        host: &str,
        metric: &str,
    ) -> Cell {
        let records = row.get(host);
        let value = cell(records, metric);
        match records.and_then(|r| r.first()) {
            Some(_) if matches!(value, Cell::Missing) && !step_holds(step, metric) => Cell::Unknown {
                reason: format!("no record of step {} has {metric}", step.step_index + 1),
            },
            Some(first) => self.refs.mark(value, first.key().point, host, metric),
            None if self.planned.has(step.step_index, &step.step, label) => {
                self.planned.absent(self.run, host, step.step_index, label)
            }
            None => value,
        }
    }
}
