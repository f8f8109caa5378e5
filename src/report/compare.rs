//! `compare`: hosts side by side with ratio columns against a baseline host; across runs, the
//! change in percent per cell, with changes beyond a tolerance marked as regressions or
//! improvements. Skipped, failed, invalid and missing cells are never compared.

use anyhow::Result;

use super::baseline::Baseline;
use super::capacity::SloCapacity;
use super::grid::RunTables;
use super::metric_names::pick_metrics;
use super::model::{Grid, Row};
use super::stats::{self, Welch};
use super::steps::{is_main_step, StepRecords};
use super::{workload, Cell, Run, Verdict};
use crate::events::{Record, RecordStatus};

/// Changes across runs within this many percent are noise unless `--tolerance` says otherwise.
pub const DEFAULT_TOLERANCE: f64 = 5.0;

pub struct CompareOptions<'a> {
    /// The metrics of the tables (a table each); none: each step's own (see `pick_metrics`).
    pub metrics: &'a [String],
    pub baseline: Option<&'a str>,
    /// Changes across runs beyond this many percent are regressions or improvements.
    pub tolerance: f64,
}

/// `--tolerance`: a percentage such as `5%` (or `5`).
pub fn parse_tolerance(text: &str) -> Result<f64, String> {
    text.trim()
        .trim_end_matches('%')
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| {
            format!("`{text}` is not a percentage; write it like 5% (changes beyond it are marked)")
        })
}

/// Whether a smaller value of `metric` is better: latencies and durations (vLLM's names end in
/// `_ms`), failures, energy per unit of work (`joules_per_output_token`). Everything else
/// (throughputs, completed requests, tokens per joule) is better larger.
pub fn lower_is_better(metric: &str) -> bool {
    let m = metric.to_ascii_lowercase();
    m.ends_with("_ms")
        || m.ends_with("_s")
        || m.ends_with("_seconds")
        || ["ttft", "tpot", "itl", "e2el", "latency", "joules_per"]
            .iter()
            .any(|k| m.contains(k))
        || ["duration", "failed", "errors"].contains(&m.as_str())
}

/// A host's cell over the baseline's, with the ratio's 95% interval when both are repeated.
fn ratio(cell: &Cell, base: &Cell) -> Cell {
    match (cell.number(), base.number()) {
        (Some(v), Some(b)) if b != 0.0 => Cell::Ratio {
            value: v / b,
            interval: cell
                .summary()
                .zip(base.summary())
                .and_then(|(a, b)| stats::ratio_interval(&a, &b)),
        },
        _ => Cell::Missing,
    }
}

/// The change from `base` to `cell` in percent, judged when it exceeds the tolerance: by the
/// metric's direction, unless both are repeated and Welch's test finds the difference not
/// significant (within noise).
fn change(cell: &Cell, base: &Cell, tolerance: f64, metric: &str) -> Cell {
    let (Some(v), Some(b)) = (cell.number(), base.number()) else {
        return Cell::Missing;
    };
    if b == 0.0 {
        return Cell::Missing;
    }
    let percent = (v / b - 1.0) * 100.0;
    let test = cell
        .summary()
        .zip(base.summary())
        .and_then(|(a, b)| Welch::test(&a, &b));
    // A change of exactly the tolerance is within it (95 / 100 is -5.000000000000004%).
    let verdict = (percent.abs() > tolerance + 1e-9).then(|| match test {
        Some(w) if !w.is_significant() => Verdict::WithinNoise,
        _ if (percent < 0.0) == lower_is_better(metric) => Verdict::Improvement,
        _ => Verdict::Regression,
    });
    Cell::Change {
        percent,
        verdict,
        test,
        workload: None,
    }
}

/// A change between records of different workloads: said how, and not judged.
fn unlike(change: Cell, why: Option<String>) -> Cell {
    match (change, why) {
        (Cell::Change { percent, test, .. }, Some(why)) => Cell::Change {
            percent,
            verdict: None,
            test,
            workload: Some(why),
        },
        (change, _) => change,
    }
}

/// The first measurement of `host` at the row `label` of a step, when it has one.
fn measured<'r>(step: Option<&StepRecords<'r>>, label: &str, host: &str) -> Option<&'r Record> {
    let records = step?.rows.get(label)?.get(host)?;
    records.iter().copied().find(|r| r.status == RecordStatus::Ok)
}

/// The ratio columns of a run's tables: each column against its baseline (see `baseline.rs`).
pub struct Ratios {
    columns: Vec<String>,
    baseline: Baseline,
}

impl Ratios {
    /// Ratios against the host, column or variant asked for (an error when the run has none
    /// such), else the run's first host (with variants: each host's first variant).
    pub fn new(run: &Run, asked: Option<&str>) -> Result<Ratios> {
        let columns = run.hosts();
        let baseline = super::baseline::resolve(&columns, asked)?;
        Ok(Ratios { columns, baseline })
    }

    /// Appends, for every column compared, a column of its ratio to its baseline's value (the
    /// grid's columns are the label, then one per column in the run's order); the SLO
    /// capacities' ratios are against the same baselines.
    pub fn add_to(&self, mut grid: Grid) -> Grid {
        let (columns, pairs) = (&self.columns, &self.baseline.pairs);
        if let Some(slo) = &mut grid.slo {
            let named: Vec<(String, String)> = pairs
                .iter()
                .map(|&(c, b)| (columns[c].clone(), columns[b].clone()))
                .collect();
            slo.rebase_pairs(&self.baseline.name, &named);
        }
        grid.columns.extend(
            pairs
                .iter()
                .map(|&(c, b)| format!("{} / {}", columns[c], columns[b])),
        );
        for row in &mut grid.rows {
            let ratios: Vec<Cell> = pairs
                .iter()
                .map(|&(c, b)| ratio(&row.cells[1 + c], &row.cells[1 + b]))
                .collect();
            row.cells.extend(ratios);
        }
        grid
    }
}

/// Steps compared across runs: each host's value in every run and its change against the first.
pub struct Across<'a> {
    runs: &'a [Run],
    tables: Vec<RunTables<'a>>,
    /// Every run's hosts, in the order first seen.
    hosts: Vec<String>,
    opts: &'a CompareOptions<'a>,
}

impl<'a> Across<'a> {
    /// The runs to compare; an error when `--baseline` names a host none of them has.
    pub fn new(runs: &'a [Run], opts: &'a CompareOptions<'a>) -> Result<Across<'a>> {
        let mut hosts: Vec<String> = Vec::new();
        for h in runs.iter().flat_map(Run::hosts) {
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
        if let Some(b) = opts.baseline {
            super::baseline::resolve(&hosts, Some(b))?;
        }
        let tables = runs.iter().map(RunTables::new).collect();
        Ok(Across {
            runs,
            tables,
            hosts,
            opts,
        })
    }

    /// The steps compared: the first run's main steps.
    pub fn steps(&self) -> impl Iterator<Item = &StepRecords<'a>> {
        self.tables[0].main_steps()
    }

    /// The tables of one step (a main step of the first run), when the first run has it.
    pub fn grids_of(&self, index: usize, name: &str) -> Vec<Grid> {
        self.steps()
            .find(|s| s.step_index == index && s.step == name)
            .map(|step| self.grids(step))
            .unwrap_or_default()
    }

    /// One step's tables, a table per metric (the first with the SLO capacity).
    pub fn grids(&self, step: &StepRecords) -> Vec<Grid> {
        let main = is_main_step(&self.tables[0].steps, step);
        let metrics = pick_metrics(step, self.opts.metrics, main);
        metrics
            .into_iter()
            .enumerate()
            .map(|(i, metric)| self.grid(step, metric, i == 0))
            .collect()
    }

    /// One step's table in `metric`: per row, per host, its cell in each run, then its changes.
    fn grid(&self, step: &StepRecords, metric: String, first: bool) -> Grid {
        let matching: Vec<Option<&StepRecords>> = self
            .tables
            .iter()
            .map(|t| {
                t.steps
                    .iter()
                    .find(|s| s.step == step.step && s.step_index == step.step_index)
            })
            .collect();
        let rows = row_labels(&matching)
            .into_iter()
            .map(|label| self.row(&matching, &label, &metric))
            .collect();
        let labelled: Vec<(&str, Option<&StepRecords>)> = self
            .runs
            .iter()
            .map(|r| r.label(self.runs))
            .zip(matching.iter().copied())
            .collect();
        let limits = &self.runs[0].manifest.slo;
        // Rates offered at one concurrency cap: the rate stories say which rate holds, in each
        // run; a capacity by concurrency cannot tell those levels apart.
        let rate_sweep = matching.iter().flatten().any(|s| super::grid::only_rates_vary(s));
        let slo = (first && !rate_sweep)
            .then(|| SloCapacity::across(&labelled, &metric, &self.hosts, limits))
            .flatten();
        let rates = match first && rate_sweep {
            true => super::rate_story::across(&labelled, &self.hosts, limits),
            false => Vec::new(),
        };
        Grid {
            title: format!(
                "step {}: {} across {} runs (first: {}; changes beyond ±{}% marked)",
                step.step_index + 1,
                step.step,
                self.runs.len(),
                self.runs[0].manifest.run_id,
                self.opts.tolerance
            ),
            columns: run_columns(self.runs, &self.hosts),
            metric,
            rows,
            scaling: Vec::new(),
            rates,
            slo,
        }
    }

    /// The row of `label` in one step as each run recorded it: per host, its cell in each
    /// run, then the changes against the first; its point as the first run that has it.
    fn row(&self, steps: &[Option<&StepRecords>], label: &str, metric: &str) -> Row {
        let point = (steps.iter().zip(&self.tables))
            .find_map(|(step, tables)| tables.point_of((*step)?, label))
            .unwrap_or_default();
        let mut row = vec![Cell::Label {
            text: label.to_string(),
        }];
        for host in &self.hosts {
            let cells: Vec<Cell> = steps
                .iter()
                .zip(&self.tables)
                .map(
                    |(step, tables)| match step.and_then(|s| Some((s, s.rows.get(label)?))) {
                        Some((s, by_host)) => tables.cell(s, (label, by_host), host, metric),
                        None => Cell::Missing,
                    },
                )
                .collect();
            let measured: Vec<Option<(&Record, &str)>> = steps
                .iter()
                .zip(self.runs)
                .map(|(step, run)| Some((measured(*step, label, host)?, run.manifest.run_id.as_str())))
                .collect();
            let changes: Vec<Cell> = cells[1..]
                .iter()
                .zip(&measured[1..])
                .map(|(c, other)| {
                    let why = measured[0].zip(*other).and_then(|(a, b)| workload::differs(a, b));
                    unlike(change(c, &cells[0], self.opts.tolerance, metric), why)
                })
                .collect();
            row.extend(cells);
            row.extend(changes);
        }
        Row { point, cells: row }
    }
}

/// Whether `other` measured any point of a host that `first` measured in one of its main
/// sweeps (the same step, row and column): runs that share none have nothing to compare.
pub fn shares_a_point(first: &Run, other: &Run) -> bool {
    let (first, other) = (RunTables::new(first), RunTables::new(other));
    let shared = first.main_steps().any(|step| {
        let Some(theirs) = other
            .steps
            .iter()
            .find(|s| s.step_index == step.step_index && s.step == step.step)
        else {
            return false;
        };
        step.rows.iter().any(|(label, by_host)| {
            by_host
                .iter()
                .filter(|(_, records)| !records.is_empty())
                .any(|(host, _)| {
                    theirs
                        .rows
                        .get(label)
                        .and_then(|h| h.get(host))
                        .is_some_and(|r| !r.is_empty())
                })
        })
    });
    shared
}

/// `point`, then per host: its value in each run, then its change in each later run.
fn run_columns(runs: &[Run], hosts: &[String]) -> Vec<String> {
    let mut columns = vec!["point".to_string()];
    for host in hosts {
        for run in runs {
            columns.push(format!("{host} @{}", run.label(runs)));
        }
        for run in &runs[1..] {
            columns.push(format!("{host} Δ @{}", run.label(runs)));
        }
    }
    columns
}

/// Every row label of a step across runs, in the order first seen.
fn row_labels(steps: &[Option<&StepRecords>]) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for step in steps.iter().flatten() {
        for label in step.rows.keys() {
            if !labels.contains(label) {
                labels.push(label.clone());
            }
        }
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_changes_only_between_values() {
        let (two, one, zero) = (Cell::value(2.0), Cell::value(1.0), Cell::value(0.0));
        assert_eq!(ratio(&two, &one).text(), "×2.00");
        assert!(matches!(ratio(&Cell::Missing, &one), Cell::Missing));
        assert!(matches!(ratio(&one, &zero), Cell::Missing));
        assert_eq!(
            change(&Cell::value(95.0), &Cell::value(100.0), 5.0, "output_throughput").text(),
            "-5.0%"
        );
        assert!(matches!(
            change(&Cell::Missing, &Cell::value(100.0), 5.0, "x"),
            Cell::Missing
        ));
    }

    #[test]
    fn changes_beyond_the_tolerance_are_judged_by_the_metric_direction() {
        let change = |v: f64, b: f64, tol: f64, metric: &str| {
            super::change(&Cell::value(v), &Cell::value(b), tol, metric)
        };
        let t = "output_throughput";
        assert_eq!(change(90.0, 100.0, 5.0, t).text(), "-10.0% regression");
        assert_eq!(change(110.0, 100.0, 5.0, t).text(), "+10.0% improvement");
        assert_eq!(change(110.0, 100.0, 12.0, t).text(), "+10.0%");
        let l = "p99_ttft_ms";
        assert_eq!(change(110.0, 100.0, 5.0, l).text(), "+10.0% regression");
        assert_eq!(change(90.0, 100.0, 5.0, l).text(), "-10.0% improvement");
        assert!(lower_is_better("duration") && lower_is_better("mean_e2el_ms"));
        assert!(!lower_is_better("request_throughput") && !lower_is_better("completed"));
        assert!(lower_is_better("joules_per_output_token") && !lower_is_better("output_tokens_per_joule"));
    }

    /// A repeated point's cell: the summary of `values`.
    fn repeated(values: &[f64]) -> Cell {
        let summary = stats::Estimate::of(values).unwrap();
        Cell::Value {
            value: summary.mean,
            reference: None,
            spread: Some(super::super::cell::Spread::of(&summary, 0)),
        }
    }

    #[test]
    fn repeated_points_are_compared_against_their_noise() {
        let t = "output_throughput";
        let base = repeated(&[2411.0, 2398.0, 2425.0]);
        let slower = repeated(&[2150.0, 2190.0, 2170.0]);
        let change = change(&slower, &base, 5.0, t);
        assert!(change.text().ends_with("% regression"), "{}", change.text());
        let Cell::Change { test: Some(w), .. } = change else {
            panic!()
        };
        assert!(w.p_value < 0.001, "{w:?}");
        // 7% lower on average, but the repetitions spread so widely that it may be noise.
        let wide = repeated(&[2600.0, 1900.0, 2250.0]);
        let noise = super::change(&wide, &base, 5.0, t);
        assert!(noise.text().ends_with("% within noise"), "{}", noise.text());
        assert!(
            noise.note().unwrap().1.contains("not significant"),
            "{:?}",
            noise.note()
        );
        // Within the tolerance: no verdict, as with one measurement.
        let close = repeated(&[2400.0, 2390.0, 2410.0]);
        assert_eq!(super::change(&close, &base, 5.0, t).note(), None);
        // A ratio between repeated hosts carries its interval, one measured once does not.
        assert!(
            ratio(&slower, &base).text().starts_with("×0.90 [0.8"),
            "{}",
            ratio(&slower, &base).text()
        );
        assert_eq!(ratio(&Cell::value(2170.0), &base).text(), "×0.90");
        let single = super::change(&Cell::value(2170.0), &Cell::value(2411.0), 5.0, t);
        assert!(
            single.note().unwrap().1.contains("tolerance alone"),
            "{:?}",
            single.note()
        );
    }

    #[test]
    fn tolerances_read_as_percentages() {
        assert_eq!(parse_tolerance("5%"), Ok(5.0));
        assert_eq!(parse_tolerance("2.5"), Ok(2.5));
        assert!(parse_tolerance("five").unwrap_err().contains("write it like 5%"));
        assert!(parse_tolerance("-1%").is_err());
    }
}
