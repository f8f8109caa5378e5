//! `compare`: hosts side by side with ratio columns against a baseline host; across runs, the
//! change in percent per cell, with changes beyond a tolerance marked as regressions or
//! improvements. Skipped, failed, invalid and missing cells are never compared.

use anyhow::Result;

use super::baseline::Baseline;
use super::grid::RunTables;
use super::model::Grid;
use super::steps::{pick_metric, StepRecords};
use super::{Cell, Run, Verdict};

/// Changes across runs within this many percent are noise unless `--tolerance` says otherwise.
pub const DEFAULT_TOLERANCE: f64 = 5.0;

pub struct CompareOptions<'a> {
    pub metric: Option<&'a str>,
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
/// `_ms`), failures. Everything else (throughputs, completed requests) is better larger.
pub fn lower_is_better(metric: &str) -> bool {
    let m = metric.to_ascii_lowercase();
    m.ends_with("_ms")
        || m.ends_with("_s")
        || m.ends_with("_seconds")
        || ["ttft", "tpot", "itl", "e2el", "latency"]
            .iter()
            .any(|k| m.contains(k))
        || ["duration", "failed", "errors"].contains(&m.as_str())
}

fn ratio(value: Option<f64>, base: Option<f64>) -> Cell {
    match (value, base) {
        (Some(v), Some(b)) if b != 0.0 => Cell::Ratio { value: v / b },
        _ => Cell::Missing,
    }
}

/// The change from `base` to `value` in percent, judged when it exceeds the tolerance.
fn change(value: Option<f64>, base: Option<f64>, tolerance: f64, metric: &str) -> Cell {
    let (Some(v), Some(b)) = (value, base) else {
        return Cell::Missing;
    };
    if b == 0.0 {
        return Cell::Missing;
    }
    let percent = (v / b - 1.0) * 100.0;
    // A change of exactly the tolerance is within it (95 / 100 is -5.000000000000004%).
    let verdict = (percent.abs() > tolerance + 1e-9).then(|| {
        if (percent < 0.0) == lower_is_better(metric) {
            Verdict::Improvement
        } else {
            Verdict::Regression
        }
    });
    Cell::Change { percent, verdict }
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
                .map(|&(c, b)| ratio(row[1 + c].number(), row[1 + b].number()))
                .collect();
            row.extend(ratios);
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

    /// The table of one step (a main step of the first run), when the first run has it.
    pub fn grid_of(&self, index: usize, name: &str) -> Option<Grid> {
        let step = self.steps().find(|s| s.step_index == index && s.step == name)?;
        Some(self.grid(step))
    }

    /// One step's table: per row, per host, its cell in each run, then its changes.
    pub fn grid(&self, step: &StepRecords) -> Grid {
        let metric = pick_metric(step, self.opts.metric);
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
            slo: None,
        }
    }

    /// The row of `label` in one step as each run recorded it: per host, its cell in each
    /// run, then the changes against the first.
    fn row(&self, steps: &[Option<&StepRecords>], label: &str, metric: &str) -> Vec<Cell> {
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
            let base = cells[0].number();
            let changes: Vec<Cell> = cells[1..]
                .iter()
                .map(|c| change(c.number(), base, self.opts.tolerance, metric))
                .collect();
            row.extend(cells);
            row.extend(changes);
        }
        row
    }
}

/// `point`, then per host: its value in each run, then its change in each later run.
fn run_columns(runs: &[Run], hosts: &[String]) -> Vec<String> {
    let mut columns = vec!["point".to_string()];
    for host in hosts {
        for run in runs {
            columns.push(format!("{host} @{}", run_label(runs, run)));
        }
        for run in &runs[1..] {
            columns.push(format!("{host} Δ @{}", run_label(runs, run)));
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

/// What tells `run` apart from the other `runs` in a column or series name: the time part of
/// its id, or the whole id when another run started in the same second.
pub(super) fn run_label<'a>(runs: &[Run], run: &'a Run) -> &'a str {
    fn time(id: &str) -> &str {
        id.split('-').next().unwrap_or(id)
    }
    let id = run.manifest.run_id.as_str();
    let shared = runs
        .iter()
        .filter(|r| time(&r.manifest.run_id) == time(id))
        .count();
    if shared > 1 {
        id
    } else {
        time(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_changes_only_between_values() {
        assert_eq!(ratio(Some(2.0), Some(1.0)).text(), "×2.00");
        assert!(matches!(ratio(None, Some(1.0)), Cell::Missing));
        assert!(matches!(ratio(Some(1.0), Some(0.0)), Cell::Missing));
        assert_eq!(
            change(Some(95.0), Some(100.0), 5.0, "output_throughput").text(),
            "-5.0%"
        );
        assert!(matches!(change(None, Some(100.0), 5.0, "x"), Cell::Missing));
    }

    #[test]
    fn changes_beyond_the_tolerance_are_judged_by_the_metric_direction() {
        let t = "output_throughput";
        assert_eq!(
            change(Some(90.0), Some(100.0), 5.0, t).text(),
            "-10.0% regression"
        );
        assert_eq!(
            change(Some(110.0), Some(100.0), 5.0, t).text(),
            "+10.0% improvement"
        );
        assert_eq!(change(Some(110.0), Some(100.0), 12.0, t).text(), "+10.0%");
        let l = "p99_ttft_ms";
        assert_eq!(
            change(Some(110.0), Some(100.0), 5.0, l).text(),
            "+10.0% regression"
        );
        assert_eq!(
            change(Some(90.0), Some(100.0), 5.0, l).text(),
            "-10.0% improvement"
        );
        assert!(lower_is_better("duration") && lower_is_better("mean_e2el_ms"));
        assert!(!lower_is_better("request_throughput") && !lower_is_better("completed"));
    }

    fn run(id: &str) -> Run {
        let manifest = serde_json::json!({
            "run_id": id, "tool": {"name": "rigrun", "version": "0"},
            "playbook": {"path": "p.yaml", "name": "p", "source": "", "extra_vars": {}},
            "inventory": {"path": "h.yaml", "source": ""},
            "started_at": "2026-01-01T00:00:00Z", "finished_at": null, "status": "ok", "hosts": {},
        });
        Run {
            manifest: serde_json::from_value(manifest).unwrap(),
            records: Vec::new(),
            rerun: 0,
            dir: id.into(),
        }
    }

    #[test]
    fn runs_are_told_apart_by_time_or_by_id() {
        let runs = [run("20260101T000000Z-sweep"), run("20260102T000000Z-sweep")];
        assert_eq!(run_label(&runs, &runs[1]), "20260102T000000Z");
        let runs = [run("20260101T000000Z-sweep"), run("20260101T000000Z-sweep-2")];
        assert_eq!(run_label(&runs, &runs[0]), "20260101T000000Z-sweep");
        assert_eq!(run_label(&runs, &runs[1]), "20260101T000000Z-sweep-2");
    }

    #[test]
    fn tolerances_read_as_percentages() {
        assert_eq!(parse_tolerance("5%"), Ok(5.0));
        assert_eq!(parse_tolerance("2.5"), Ok(2.5));
        assert!(parse_tolerance("five").unwrap_err().contains("write it like 5%"));
        assert!(parse_tolerance("-1%").is_err());
    }
}
