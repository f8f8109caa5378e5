//! Reports: a run's records as tables (rows = sweep points, columns = hosts), hosts and runs
//! compared, the scaling story of each sweep, the hosts' facts, in several formats (one module
//! per format: table, markdown, csv, json, html).

mod cell;
mod charts;
mod compare;
mod csv;
mod header;
mod html;
mod json;
mod markdown;
pub mod references;
pub mod scaling;
mod svg;
mod table;

use std::path::Path;

use anyhow::Result;
use indexmap::IndexMap;
use serde::Serialize;

pub use cell::{cell, format_number, Cell, RefCheck, Verdict};
pub use compare::{closing_grids, compare, parse_tolerance, CompareOptions, DEFAULT_TOLERANCE};
pub use header::Header;
pub use html::render as html;

use crate::events::{Record, RecordStatus};
use crate::point;
use crate::store::{read_records, Manifest};

/// The metric shown when the user names none and the records have it.
pub const DEFAULT_METRIC: &str = "output_throughput";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Markdown,
    Csv,
    Json,
}

/// A table: a title, column names and rows of cells (the first cell of a row is its label).
#[derive(Clone, Debug, Serialize)]
pub struct Grid {
    pub title: String,
    pub metric: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// The scaling story of a concurrency sweep, per host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scaling: Vec<scaling::Series>,
    /// The step the table shows (index, name), when it shows one.
    #[serde(skip)]
    pub step: Option<(usize, String)>,
}

/// The grid's cells as text for human formats: a skipped, failed or invalid cell, or a missed
/// reference, shows a note number and its reason is listed once under the table, so long
/// reasons do not stretch the columns.
pub fn with_notes(grid: &Grid) -> (Vec<Vec<String>>, Vec<String>) {
    let mut notes: Vec<String> = Vec::new();
    let rows = grid
        .rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| match cell.note() {
                    Some((short, reason)) => {
                        let n = match notes.iter().position(|r| *r == reason) {
                            Some(i) => i + 1,
                            None => {
                                notes.push(reason);
                                notes.len()
                            }
                        };
                        format!("{short} [{n}]")
                    }
                    None => cell.text(),
                })
                .collect()
        })
        .collect();
    let notes = notes
        .iter()
        .enumerate()
        .map(|(i, r)| format!("[{}] {r}", i + 1))
        .collect();
    (rows, notes)
}

/// A run directory, read.
pub struct Run {
    pub manifest: Manifest,
    pub records: Vec<Record>,
}

impl Run {
    pub fn open(dir: &Path) -> Result<Run> {
        let (manifest, records) = read_records(dir)?;
        Ok(Run { manifest, records })
    }

    pub fn hosts(&self) -> Vec<String> {
        self.manifest.hosts.keys().cloned().collect()
    }
}

/// The records of one step, grouped into rows keyed by point (and record, when a point
/// produced several), in the order they first appeared.
pub struct StepRecords<'a> {
    pub step: String,
    pub step_index: usize,
    pub rows: IndexMap<String, RowRecords<'a>>,
}

/// Records of one row, by host.
pub type RowRecords<'a> = IndexMap<String, Vec<&'a Record>>;

/// Groups a run's records by step, then by row label, then by host.
pub fn group(records: &[Record]) -> Vec<StepRecords<'_>> {
    let mut steps: IndexMap<(usize, String), IndexMap<String, RowRecords>> = IndexMap::new();
    let mut seen_per_point: IndexMap<(usize, String, String), usize> = IndexMap::new();
    for record in records {
        let base = point::label(&record.point);
        let key = (record.step_index, record.host.clone(), base.clone());
        let n = seen_per_point.entry(key).or_insert(0);
        *n += 1;
        let label = match (record.status, *n) {
            (RecordStatus::Ok, k) if k > 1 => sub_label(&base, record, k),
            _ => base,
        };
        steps
            .entry((record.step_index, record.step.clone()))
            .or_default()
            .entry(label)
            .or_default()
            .entry(record.host.clone())
            .or_default()
            .push(record);
    }
    steps
        .into_iter()
        .map(|((step_index, step), rows)| StepRecords {
            step,
            step_index,
            rows,
        })
        .collect()
}

/// A label for the k-th record of one point: its `max_concurrency` when it has one.
fn sub_label(base: &str, record: &Record, k: usize) -> String {
    match record.metrics.get("max_concurrency") {
        Some(c) => format!("{base} max_concurrency={c}"),
        None => format!("{base} #{k}"),
    }
}

/// Numbers in records that describe the point rather than measure it.
const CONTEXT_KEYS: &[&str] = &[
    "exit_code",
    "max_concurrency",
    "input_len",
    "output_len",
    "num_prompts",
    "request_rate",
];

/// The metric to show for a step: the one asked for, else `output_throughput`, else the first
/// numeric metric of the first successful record.
pub fn pick_metric(step: &StepRecords, asked: Option<&str>) -> String {
    if let Some(m) = asked {
        return m.to_string();
    }
    let ok = || {
        step.rows
            .values()
            .flat_map(|h| h.values().flatten())
            .filter(|r| r.status == RecordStatus::Ok)
    };
    if ok().any(|r| r.metrics.contains_key(DEFAULT_METRIC)) {
        return DEFAULT_METRIC.to_string();
    }
    ok().flat_map(|r| r.metrics.iter())
        .find(|(k, v)| v.is_number() && !CONTEXT_KEYS.contains(&k.as_str()))
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| DEFAULT_METRIC.to_string())
}

/// The cell of `host` in one row of a step, checked against its reference when it has one.
pub fn host_cell(
    refs: &references::Lookup,
    step: &StepRecords,
    row: &RowRecords,
    host: &str,
    metric: &str,
) -> Cell {
    let records = row.get(host);
    let value = cell(records, metric);
    match records.and_then(|r| r.first()) {
        Some(first) => refs.mark(value, step.step_index, host, &first.point, metric),
        None => value,
    }
}

/// Whether a step is one of the run's main tables (compared, charted, told the scaling story
/// of): the sweeps, or every step when no sweep measured anything. Fetched result files repeat
/// a measuring sweep's numbers.
pub fn is_main_step(groups: &[StepRecords], step: &StepRecords) -> bool {
    let measuring_sweep = |g: &StepRecords| {
        !is_fetched(g)
            && g.rows
                .values()
                .flat_map(|h| h.values().flatten())
                .any(|r| r.status == RecordStatus::Ok)
    };
    !is_fetched(step) || !groups.iter().any(measuring_sweep)
}

/// Whether any record of the group is a run-sweep measurement (not a fetched file).
pub fn is_fetched(step: &StepRecords) -> bool {
    step.rows
        .values()
        .flat_map(|h| h.values().flatten())
        .all(|r| r.point.contains_key("file"))
}

/// `show`: per step (every step), rows = points, columns = hosts, with the scaling story under
/// each sweep;
/// then the references, when the playbook states any.
pub fn show_grids(run: &Run, metric: Option<&str>) -> Vec<Grid> {
    let refs = references::Lookup::new(run);
    let groups = group(&run.records);
    let mut grids: Vec<Grid> = groups
        .iter()
        .map(|step| step_grid(run, &groups, step, metric, &refs))
        .collect();
    grids.extend(references::grid(run));
    grids
}

/// One step's table: rows = points, columns = the run's hosts, with the scaling story under
/// the main sweeps. `compare` adds its ratio columns to it.
pub(crate) fn step_grid(
    run: &Run,
    groups: &[StepRecords],
    step: &StepRecords,
    metric: Option<&str>,
    refs: &references::Lookup,
) -> Grid {
    let hosts = run.hosts();
    let metric = pick_metric(step, metric);
    let mut columns = vec!["point".to_string()];
    columns.extend(hosts.iter().cloned());
    let rows = step
        .rows
        .iter()
        .map(|(label, by_host)| {
            let mut row = vec![Cell::Label { text: label.clone() }];
            row.extend(hosts.iter().map(|h| host_cell(refs, step, by_host, h, &metric)));
            row
        })
        .collect();
    Grid {
        title: format!(
            "{} · step {}: {}",
            run.manifest.run_id,
            step.step_index + 1,
            step.step
        ),
        scaling: match is_main_step(groups, step) {
            true => scaling::stories(step, &metric, &hosts),
            false => Vec::new(),
        },
        step: Some((step.step_index, step.step.clone())),
        metric,
        columns,
        rows,
    }
}

/// Writes grids in the chosen format, human formats under the hosts' facts.
pub fn render(grids: &[Grid], format: Format, header: &Header) -> String {
    match format {
        Format::Table => table::render(grids, header),
        Format::Markdown => markdown::render(grids, header),
        Format::Csv => csv::render(grids),
        Format::Json => json::render(grids),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value as Json};

    fn record(host: &str, c: u64, status: RecordStatus, metrics: Json) -> Record {
        let mut point = IndexMap::new();
        point.insert("concurrency".to_string(), json!(c));
        Record {
            run: "r".into(),
            host: host.into(),
            step: "run-sweep".into(),
            step_index: 2,
            point,
            metrics: metrics.as_object().cloned().unwrap_or_default(),
            status,
            reason: (status != RecordStatus::Ok).then(|| "why".to_string()),
        }
    }

    #[test]
    fn rows_are_points_and_cells_follow_status() {
        let recs = vec![
            record("a", 1, RecordStatus::Ok, json!({"output_throughput": 172.0})),
            record("b", 1, RecordStatus::Ok, json!({"output_throughput": 86.0})),
            record("a", 1024, RecordStatus::Skipped, json!({})),
            record("b", 1024, RecordStatus::Failed, json!({"exit_code": 1})),
        ];
        let groups = group(&recs);
        assert_eq!(groups.len(), 1);
        let step = &groups[0];
        assert_eq!(pick_metric(step, None), "output_throughput");
        let labels: Vec<_> = step.rows.keys().cloned().collect();
        assert_eq!(labels, ["concurrency=1", "concurrency=1024"]);
        let row = &step.rows["concurrency=1024"];
        assert!(matches!(
            cell(row.get("a"), "output_throughput"),
            Cell::Skipped { .. }
        ));
        assert!(matches!(
            cell(row.get("b"), "output_throughput"),
            Cell::Failed { .. }
        ));
        assert!(matches!(cell(row.get("c"), "output_throughput"), Cell::Missing));
        assert_eq!(
            cell(step.rows["concurrency=1"].get("a"), "output_throughput").number(),
            Some(172.0)
        );
    }

    #[test]
    fn several_records_of_one_point_get_their_own_rows() {
        let recs = vec![
            record("a", 1, RecordStatus::Ok, json!({"max_concurrency": 1, "x": 1.0})),
            record("a", 1, RecordStatus::Ok, json!({"max_concurrency": 4, "x": 2.0})),
        ];
        let groups = group(&recs);
        let labels: Vec<_> = groups[0].rows.keys().cloned().collect();
        assert_eq!(labels, ["concurrency=1", "concurrency=1 max_concurrency=4"]);
        assert_eq!(pick_metric(&groups[0], None), "x");
    }

    #[test]
    fn records_the_benchmark_marked_invalid_are_never_numbers() {
        let problems = json!({"output_throughput": 900.0, "valid": false, "problems": ["3 of 12 requests failed", "short outputs"]});
        let recs = vec![
            record("a", 4, RecordStatus::Ok, problems),
            record(
                "b",
                4,
                RecordStatus::Ok,
                json!({"output_throughput": 800.0, "valid": true}),
            ),
            record("c", 4, RecordStatus::Ok, json!({"valid": false})),
        ];
        let groups = group(&recs);
        let row = &groups[0].rows["concurrency=4"];
        let a = cell(row.get("a"), "output_throughput");
        assert!(
            matches!(
                a,
                Cell::Invalid {
                    value: Some(900.0),
                    ..
                }
            ),
            "{a:?}"
        );
        assert_eq!(a.number(), None);
        let (short, why) = a.note().unwrap();
        assert_eq!(
            (short.as_str(), why.as_str()),
            ("invalid", "invalid: 3 of 12 requests failed; short outputs")
        );
        assert_eq!(cell(row.get("b"), "output_throughput").number(), Some(800.0));
        let c = cell(row.get("c"), "output_throughput");
        assert_eq!(c.text(), "invalid: the benchmark marked this record invalid");
    }

    #[test]
    fn fetched_files_are_main_steps_only_when_no_sweep_measured() {
        let mut fetched = record("a", 1, RecordStatus::Ok, json!({"output_throughput": 1.0}));
        fetched.point = IndexMap::from([("file".to_string(), json!("c1.json"))]);
        fetched.step_index = 3;
        let measured = record("a", 1, RecordStatus::Ok, json!({"output_throughput": 1.0}));
        let skipped = record("a", 1, RecordStatus::Skipped, json!({}));
        let both = vec![measured, fetched.clone()];
        let groups = group(&both);
        assert!(is_main_step(&groups, &groups[0]) && !is_main_step(&groups, &groups[1]));
        let nothing_measured = vec![skipped, fetched];
        let groups = group(&nothing_measured);
        assert!(groups.iter().all(|g| is_main_step(&groups, g)));
    }
}
