//! Reports: a run's records as tables (rows = sweep points, columns = hosts), hosts and runs
//! compared, the scaling story of each sweep, the hosts' facts and what differs between them.
//! `build` makes one [`Report`] from the run directories; one module per format renders it:
//! table, markdown, csv, json, html.

mod attempts;
mod baseline;
mod build;
mod capacity;
mod cell;
mod charts;
mod compare;
mod csv;
mod facts_diff;
mod grid;
mod header;
mod html;
mod json;
mod markdown;
mod metric_names;
mod model;
mod placement;
mod planned;
mod rate_story;
pub mod references;
mod runs_table;
pub mod scaling;
mod search;
pub(crate) mod stats;
mod steps;
mod svg;
mod table;
mod workload;

use std::path::Path;

use anyhow::Result;

pub use build::{build, Contents};
pub use cell::{cell, format_number, Cell, RefCheck, Verdict};
pub use compare::{parse_tolerance, shares_a_point, CompareOptions, DEFAULT_TOLERANCE};
pub use html::render as html;
pub use metric_names::check as check_metrics;
pub use model::{Grid, Report, Section, Topic};
pub use planned::measured_nothing;
pub use runs_table::runs_table;

use crate::events::Record;
use crate::store::{events, read_records, Manifest};

/// The metric shown when the user names none and the records have it.
pub const DEFAULT_METRIC: &str = "output_throughput";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Tables as wide as the terminal (COLUMNS when set); a wider one is split into tables of
    /// columns. Piped without COLUMNS: as wide as they are.
    Table,
    Markdown,
    Csv,
    /// For programs: {"format_version": 1, "tables": [...]}, each row with its point as an
    /// object of typed matrix values ({"concurrency": 16}) and its cells.
    Json,
}

/// A run directory, read: each point's records of its latest attempt.
pub struct Run {
    pub manifest: Manifest,
    pub records: Vec<Record>,
    /// Points whose latest attempt is not their first (retried, re-run or resumed).
    pub rerun: usize,
    /// Where it was read from, for the command that resumes it.
    pub dir: std::path::PathBuf,
    /// What its journal (events.jsonl) says happened to each column's points: how a point
    /// whose record line is unreadable ended.
    pub history: std::collections::HashMap<String, crate::resume::HostHistory>,
    /// Lines of records.jsonl that could not be read (each warned about).
    pub unreadable_records: usize,
}

impl Run {
    /// Reads a run directory; energy per token that an earlier rigrun took over mismatched
    /// windows is withdrawn, with the reason. Every table, chart and ratio compares records by
    /// their column ([`Record::column`]: `host/variant` for a server variant).
    pub fn open(dir: &Path) -> Result<Run> {
        let (manifest, mut records, unreadable_records) = read_records(dir)?;
        for record in records.iter_mut() {
            crate::telemetry::summary::withdraw_mismatched(&mut record.metrics);
        }
        let (records, rerun) = attempts::latest(records, !manifest.resumed.is_empty());
        // Folded as it is read: a journal of many records is never in memory whole.
        let history = match events(dir) {
            Ok(events) => crate::resume::history::read(events),
            Err(_) => Default::default(),
        };
        Ok(Run {
            manifest,
            records,
            rerun,
            dir: dir.to_path_buf(),
            history,
            unreadable_records,
        })
    }

    /// The columns of the run's tables: its hosts in order, each host's server variants (the
    /// named ones, `host/spec=off`) in the order they ran, or in their records' order.
    pub fn hosts(&self) -> Vec<String> {
        let mut columns: Vec<String> = Vec::new();
        for (host, entry) in &self.manifest.hosts {
            let named = entry.variants.keys().filter(|v| v.contains('='));
            let mut of_host: Vec<String> = named.map(|v| crate::point::column(host, Some(v))).collect();
            let of_variants = self
                .records
                .iter()
                .filter(|r| r.host == *host && r.variant.is_some());
            for column in of_variants.map(Record::column) {
                if !of_host.contains(&column) {
                    of_host.push(column);
                }
            }
            if of_host.is_empty() {
                of_host.push(host.clone());
            }
            columns.extend(of_host);
        }
        columns
    }

    /// What tells this run apart from the other `runs` in a column or series name: the time
    /// part of its id, or the whole id when another run started in the same second.
    pub(crate) fn label<'a>(&'a self, runs: &[Run]) -> &'a str {
        fn time(id: &str) -> &str {
            id.split('-').next().unwrap_or(id)
        }
        let id = self.manifest.run_id.as_str();
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
}

/// Only what differs between the hosts or runs the report compares, in a text format
/// (`compare --facts`); a sentence when it compares a single host in a single run.
pub fn render_facts(report: &Report, format: Format) -> String {
    let diffs = &report.facts_diff;
    let human = matches!(format, Format::Table | Format::Markdown);
    if human && diffs.is_empty() {
        return format!("{NOTHING_COMPARED}\n");
    }
    match format {
        Format::Table => table::facts_diff(diffs),
        Format::Markdown => markdown::facts_diff(diffs),
        Format::Csv => csv::render_facts(diffs),
        Format::Json => json::render_facts(diffs),
    }
}

/// What `compare --facts` says when there are not two columns to compare.
const NOTHING_COMPARED: &str = "what differs: nothing to compare (a single host in a single run)";

/// The report in a text format (human formats under the hosts' facts).
pub fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Table => table::render(report),
        Format::Markdown => markdown::render(report),
        Format::Csv => csv::render(report),
        Format::Json => json::render(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> Run {
        let manifest = serde_json::json!({
            "run_id": id, "tool": {"name": "rigrun", "version": "0"},
            "playbook": {"path": "p.yaml", "name": "p", "source": "", "extra_vars": {}},
            "inventory": {"path": "h.yaml", "source": ""},
            "started_at": "2026-01-01T00:00:00Z", "finished_at": null, "status": "ok", "hosts": {},
        });
        Run {
            history: Default::default(),
            unreadable_records: 0,
            manifest: serde_json::from_value(manifest).unwrap(),
            records: Vec::new(),
            rerun: 0,
            dir: id.into(),
        }
    }

    #[test]
    fn runs_are_told_apart_by_time_or_by_id() {
        let runs = [run("20260101T000000Z-sweep"), run("20260102T000000Z-sweep")];
        assert_eq!(runs[1].label(&runs), "20260102T000000Z");
        let runs = [run("20260101T000000Z-sweep"), run("20260101T000000Z-sweep-2")];
        assert_eq!(runs[0].label(&runs), "20260101T000000Z-sweep");
        assert_eq!(runs[1].label(&runs), "20260101T000000Z-sweep-2");
    }
}
