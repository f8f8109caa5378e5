//! Reports: a run's records as tables (rows = sweep points, columns = hosts), hosts and runs
//! compared, in several formats (one module per format).

mod compare;
mod csv;
mod json;
mod markdown;
mod table;

use std::path::Path;

use anyhow::Result;
use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value as Json;

pub use compare::{closing_grids, compare, CompareOptions};

use crate::events::{Record, RecordStatus};
use crate::plan::point_label;
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

/// One cell of a table.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Cell {
    /// A measured value.
    Value {
        value: f64,
    },
    /// A derived number such as a ratio or a change in percent, with its unit.
    Derived {
        value: f64,
        unit: &'static str,
    },
    Skipped {
        reason: String,
    },
    Failed {
        reason: String,
    },
    /// The point ran but reported no such metric, or the host never got there.
    Missing,
    /// A row label.
    Label {
        text: String,
    },
}

impl Cell {
    pub fn value(&self) -> Option<f64> {
        match self {
            Cell::Value { value } => Some(*value),
            _ => None,
        }
    }

    /// The cell as people read it: `1647.2`, `×1.23`, `+4.1%`, `skipped: …`.
    pub fn text(&self) -> String {
        match self {
            Cell::Value { value } => format_number(*value),
            Cell::Derived { value, unit: "x" } => format!("×{value:.2}"),
            Cell::Derived { value, unit } => format!("{value:+.1}{unit}"),
            Cell::Skipped { reason } => format!("skipped: {reason}"),
            Cell::Failed { reason } => format!("FAILED: {reason}"),
            Cell::Missing => "—".to_string(),
            Cell::Label { text } => text.clone(),
        }
    }
}

fn format_number(v: f64) -> String {
    let a = v.abs();
    if v.fract() == 0.0 && a < 1e15 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A table: a title, column names and rows of cells (the first cell of a row is its label).
#[derive(Clone, Debug, Serialize)]
pub struct Grid {
    pub title: String,
    pub metric: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

/// The grid's cells as text for human formats: a skipped or failed cell shows a note number and
/// its reason is listed once under the table, so long reasons do not stretch the columns.
pub fn with_notes(grid: &Grid) -> (Vec<Vec<String>>, Vec<String>) {
    let mut notes: Vec<String> = Vec::new();
    let mut note = |reason: String| {
        let n = match notes.iter().position(|r| *r == reason) {
            Some(i) => i + 1,
            None => {
                notes.push(reason);
                notes.len()
            }
        };
        format!("[{n}]")
    };
    let rows = grid
        .rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| match cell {
                    Cell::Skipped { reason } => format!("skipped {}", note(reason.clone())),
                    Cell::Failed { reason } => format!("FAILED {}", note(reason.clone())),
                    other => other.text(),
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
        let base = point_label(&record.point);
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

/// The cell for one host's records at one row.
pub fn cell(records: Option<&Vec<&Record>>, metric: &str) -> Cell {
    let Some(records) = records else {
        return Cell::Missing;
    };
    if let Some(r) = records.iter().find(|r| r.status == RecordStatus::Skipped) {
        return Cell::Skipped {
            reason: r.reason.clone().unwrap_or_default(),
        };
    }
    if let Some(v) = records
        .iter()
        .rev()
        .find_map(|r| r.metrics.get(metric).and_then(Json::as_f64))
    {
        return Cell::Value { value: v };
    }
    match records.iter().find(|r| r.status == RecordStatus::Failed) {
        Some(r) => Cell::Failed {
            reason: r.reason.clone().unwrap_or_default(),
        },
        None => Cell::Missing,
    }
}

/// Whether any record of the group is a run-sweep measurement (not a fetched file).
pub fn is_fetched(step: &StepRecords) -> bool {
    step.rows
        .values()
        .flat_map(|h| h.values().flatten())
        .all(|r| r.point.contains_key("file"))
}

/// `show`: per step, rows = points, columns = hosts.
pub fn show_grids(run: &Run, metric: Option<&str>) -> Vec<Grid> {
    let hosts = run.hosts();
    group(&run.records)
        .iter()
        .map(|step| {
            let metric = pick_metric(step, metric);
            let mut columns = vec!["point".to_string()];
            columns.extend(hosts.iter().cloned());
            let rows = step
                .rows
                .iter()
                .map(|(label, by_host)| {
                    let mut row = vec![Cell::Label { text: label.clone() }];
                    row.extend(hosts.iter().map(|h| cell(by_host.get(h), &metric)));
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
                metric,
                columns,
                rows,
            }
        })
        .collect()
}

/// Writes grids in the chosen format.
pub fn render(grids: &[Grid], format: Format, header: &str) -> String {
    match format {
        Format::Table => table::render(grids, header),
        Format::Markdown => markdown::render(grids, header),
        Format::Csv => csv::render(grids),
        Format::Json => json::render(grids),
    }
}

/// A line per host saying what it is (labels, GPUs), printed above human-readable tables.
pub fn host_header(runs: &[&Manifest]) -> String {
    let mut lines = Vec::new();
    for manifest in runs {
        for (host, entry) in &manifest.hosts {
            let mut parts: Vec<String> = entry.labels.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            if let Some(gpus) = entry.facts.get("gpus").and_then(Json::as_array) {
                if let Some(first) = gpus.first().and_then(Json::as_str) {
                    parts.push(format!(
                        "{}× {}",
                        gpus.len(),
                        first.split(',').next().unwrap_or(first)
                    ));
                }
            }
            if parts.is_empty() {
                continue;
            }
            let line = format!("{host}: {}", parts.join(", "));
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            cell(step.rows["concurrency=1"].get("a"), "output_throughput").value(),
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
    fn numbers_read_naturally() {
        assert_eq!(Cell::Value { value: 2156.0 }.text(), "2156");
        assert_eq!(Cell::Value { value: 1647.25 }.text(), "1647.2");
        assert_eq!(Cell::Value { value: 12.3456 }.text(), "12.35");
        assert_eq!(Cell::Value { value: 0.01234 }.text(), "0.012");
        assert_eq!(
            Cell::Derived {
                value: 1.234,
                unit: "x"
            }
            .text(),
            "×1.23"
        );
        assert_eq!(
            Cell::Derived {
                value: -4.06,
                unit: "%"
            }
            .text(),
            "-4.1%"
        );
    }
}
