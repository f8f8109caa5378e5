//! What a report contains, whatever its format: the runs, what differs between the columns it
//! compares, the hosts' facts, then sections (a step's charts and tables, or the references). `build.rs` makes it once from the run
//! directories; each format's module only renders it.

use chrono::{DateTime, Utc};

use super::capacity::SloCapacity;
use super::cell::Cell;
use super::facts_diff::FactsDiff;
use super::header::Header;
use super::rate_story::RateStory;
use super::scaling::ScalingStory;
use super::svg::Chart;
use super::Run;
use crate::events::Status;
use crate::point::Values;

/// A report: the runs it covers, what differs between the hosts or runs compared, their hosts'
/// facts and its sections, in order.
pub struct Report {
    pub runs: Vec<RunSummary>,
    /// Per comparison (the hosts of a run, or a host across runs): the facts that differ,
    /// which every format shows before the tables.
    pub facts_diff: Vec<FactsDiff>,
    pub header: Header,
    pub sections: Vec<Section>,
}

impl Report {
    /// A sentence per run that did not finish well (interrupted, failed, still running, or left
    /// running by a process that no longer exists), and one per run that took more than one
    /// attempt. Every format says them first.
    pub fn notices(&self) -> impl Iterator<Item = (&RunSummary, &str)> {
        self.runs.iter().flat_map(|r| {
            [&r.notice, &r.attempts, &r.server_crashes]
                .into_iter()
                .filter_map(move |n| n.as_deref().map(|n| (r, n)))
        })
    }

    /// The tables with an SLO capacity, each with it: the headline every format shows first.
    pub fn capacities(&self) -> impl Iterator<Item = (&Grid, &SloCapacity)> {
        self.grids().filter_map(|g| g.slo.as_ref().map(|s| (g, s)))
    }

    /// Every table of every section, in order: what the text formats print one after another.
    pub fn grids(&self) -> impl Iterator<Item = &Grid> {
        self.sections.iter().flat_map(|s| &s.grids)
    }
}

/// One run as the report introduces it.
pub struct RunSummary {
    pub run_id: String,
    pub playbook_name: String,
    pub playbook_path: String,
    /// The user's note on the run (`run --label`).
    pub label: Option<String>,
    pub started_at: DateTime<Utc>,
    pub status: Status,
    /// Why the run is not one that finished well, when it is not.
    pub notice: Option<String>,
    /// How many attempts the run took, when more than one (resumed, or points run again).
    pub attempts: Option<String>,
    /// The servers that died during a point, and what came of each, when any did.
    pub server_crashes: Option<String>,
    /// The number of times a rigrun process worked on the run (1 + resumes).
    pub sessions: usize,
    /// Points whose latest attempt is not their first.
    pub rerun: usize,
}

impl RunSummary {
    pub fn of(run: &Run) -> RunSummary {
        let m = &run.manifest;
        RunSummary {
            run_id: m.run_id.clone(),
            playbook_name: m.playbook.name.clone(),
            playbook_path: m.playbook.path.clone(),
            label: m.label.clone(),
            started_at: m.started_at,
            status: m.status,
            notice: notice(run),
            attempts: attempts(run),
            server_crashes: server_crashes(run),
            sessions: m.attempts(),
            rerun: run.rerun,
        }
    }
}

/// `run X took 2 attempts (resumed once); 3 points ran more than once: …`, when it did.
fn attempts(run: &Run) -> Option<String> {
    let (id, sessions, rerun) = (&run.manifest.run_id, run.manifest.attempts(), run.rerun);
    let points = match rerun {
        0 => String::new(),
        1 => "; 1 point ran more than once".to_string(),
        n => format!("; {n} points ran more than once"),
    };
    let latest = "the tables show each point's latest attempt";
    match (sessions, rerun) {
        (1, 0) => None,
        (1, _) => Some(format!(
            "run {id}: {} (retried); {latest}",
            points.trim_start_matches("; ")
        )),
        (n, _) => {
            let resumed = match n - 1 {
                1 => "resumed once".to_string(),
                k => format!("resumed {k} times"),
            };
            Some(format!(
                "run {id} took {n} attempts ({resumed}){points}; {latest}"
            ))
        }
    }
}

/// `run X: on h1 the server died during run-sweep concurrency=8 (…); started again …`, per
/// crash, when a server died during a point.
fn server_crashes(run: &Run) -> Option<String> {
    let said: Vec<String> = (run.manifest.hosts.iter())
        .flat_map(|(host, entry)| entry.server_crashes.iter().map(move |c| (host, c)))
        .map(|(host, c)| {
            let column = crate::point::column(host, c.variant.as_deref());
            format!(
                "on {column} the server died during {} ({}); {}",
                c.at, c.cause, c.outcome
            )
        })
        .collect();
    (!said.is_empty()).then(|| format!("run {}: {}", run.manifest.run_id, said.join("; ")))
}

/// What a reader must know before trusting a run's tables, if anything; a run that can go on
/// names the command that resumes it.
fn notice(run: &Run) -> Option<String> {
    let m = &run.manifest;
    let resume = format!("rigrun run --resume {}", run.dir.display());
    let writer = m
        .process
        .as_ref()
        .map(|p| format!("rigrun process {} on {}", p.pid, p.host))
        .unwrap_or_else(|| "its rigrun process".into());
    let failed: Vec<String> = m
        .hosts
        .iter()
        .filter(|(_, h)| h.status == Some(Status::Failed))
        .map(|(name, h)| match (&h.failed_step, &h.error) {
            (Some(step), Some(error)) => format!("{name} failed at {step}: {error}"),
            _ => format!("{name} failed"),
        })
        .collect();
    let id = &m.run_id;
    Some(match m.status {
        Status::Ok | Status::Skipped => return None,
        Status::Running => {
            format!("run {id} is still running ({writer}): the tables show what it measured so far")
        }
        Status::Interrupted if m.abandoned => format!(
            "run {id} was left running by {writer}, which no longer exists: it is shown as \
             interrupted, with everything it measured; go on with: {resume}"
        ),
        Status::Interrupted => format!(
            "run {id} was interrupted: it shows what it measured before; what came after did not \
             run; go on with: {resume}"
        ),
        Status::Failed if failed.is_empty() => format!("run {id} failed"),
        Status::Failed => format!("run {id} failed: {}", failed.join("; ")),
    })
}

/// What a section is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topic {
    /// One step of the playbook: its index (from 0) and name.
    Step { index: usize, name: String },
    /// The playbook's references, checked.
    References,
}

/// A part of the report: its charts (the HTML report draws them; the sentences say why a chart
/// was left out) and its tables.
pub struct Section {
    pub topic: Topic,
    pub charts: Vec<Chart>,
    pub charts_left_out: Vec<String>,
    pub grids: Vec<Grid>,
}

impl Section {
    /// A section of tables only.
    pub fn tables(topic: Topic, grids: Vec<Grid>) -> Section {
        Section {
            topic,
            charts: Vec::new(),
            charts_left_out: Vec::new(),
            grids,
        }
    }
}

/// A table: a title, column names and rows of cells (the first cell of a row is its label),
/// with the scaling story of a concurrency sweep under it.
#[derive(Clone, Debug)]
pub struct Grid {
    pub title: String,
    pub metric: String,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    /// The scaling story of a concurrency sweep, per host.
    pub scaling: Vec<ScalingStory>,
    /// The story of a sweep over offered request rates, per host.
    pub rates: Vec<RateStory>,
    /// The capacity of each host under the run's latency limits, when it states any.
    pub slo: Option<SloCapacity>,
}

/// A row of a table: the sweep point it is about, and a cell per column (the first its label).
#[derive(Clone, Debug)]
pub struct Row {
    /// The point's matrix values, typed as its records hold them (numbers stay numbers), for
    /// the formats that programs read; empty for a step without a matrix.
    pub point: Values,
    pub cells: Vec<Cell>,
}

impl Grid {
    /// What the table's sweep tells, as lines under it: per story (scaling, rates) a heading
    /// and a line per host; none when it tells nothing.
    pub fn stories(&self) -> Vec<Vec<String>> {
        let told = [
            super::scaling::describe(&self.scaling),
            super::rate_story::describe(&self.rates),
        ];
        told.into_iter().filter(|lines| !lines.is_empty()).collect()
    }

    /// The cells as text for human formats, and the notes under the table: a skipped, failed
    /// or invalid cell, or a missed reference, shows a note number and its reason is listed
    /// once under the table, so long reasons do not stretch the columns.
    pub fn with_notes(&self) -> (Vec<Vec<String>>, Vec<String>) {
        let mut notes: Vec<String> = Vec::new();
        let rows = self
            .rows
            .iter()
            .map(|row| {
                row.cells
                    .iter()
                    .map(|cell| noted_text(cell, &mut notes))
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
}

/// A cell's text, pointing to its reason in `notes` (added there when new) when it has one.
fn noted_text(cell: &Cell, notes: &mut Vec<String>) -> String {
    let Some((short, reason)) = cell.note() else {
        return cell.text();
    };
    let n = match notes.iter().position(|r| *r == reason) {
        Some(i) => i + 1,
        None => {
            notes.push(reason);
            notes.len()
        }
    };
    format!("{short} [{n}]")
}
