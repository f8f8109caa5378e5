//! JSON for programs: the tables with typed cells, each row with its point as an object of
//! typed matrix values. The shapes below are the format notebooks read (a cell's `status` says
//! what it is), kept here so the model can change without them, and versioned by
//! [`FORMAT_VERSION`].

use serde::Serialize;

use super::capacity::SloCapacity;
use super::cell::Spread;
use super::facts_diff::FactsDiff;
use super::model::{Grid, Report, Row};
use super::rate_story::RateStory;
use super::scaling::ScalingStory;
use super::stats::Welch;
use super::{Cell, RefCheck, Verdict};
use crate::point::Values;

/// The version of the JSON shape, the document's `format_version`. Raised when a reader of the
/// previous version could misread the output: a field removed, renamed or of another type, a
/// shape moved, a meaning changed. Additions keep it: a new field (readers skip what they do
/// not know) or a new cell `status` (a reader takes an unknown one for a cell without a
/// value). Output without the field is the unversioned shape before it: a bare list of
/// tables whose rows were lists of cells.
pub const FORMAT_VERSION: u32 = 1;

/// The whole document: `{"format_version": 1, "tables": [...]}`.
#[derive(Serialize)]
struct Document<'a> {
    format_version: u32,
    tables: Vec<GridJson<'a>>,
}

pub fn render(report: &Report) -> String {
    let notices: Vec<&str> = report.notices().map(|(_, n)| n).collect();
    let attempts: Vec<AttemptsJson> = report
        .runs
        .iter()
        .filter(|r| r.attempts.is_some())
        .map(|r| AttemptsJson {
            run: &r.run_id,
            attempts: r.sessions,
            points_rerun: r.rerun,
        })
        .collect();
    let facts_diff: Vec<FactsDiffJson> = report.facts_diff.iter().map(FactsDiffJson::of).collect();
    let context = Context {
        notices: &notices,
        attempts: &attempts,
        facts_diff: &facts_diff,
    };
    let document = Document {
        format_version: FORMAT_VERSION,
        tables: report.grids().map(|g| GridJson::of(g, context)).collect(),
    };
    let mut out = serde_json::to_string_pretty(&document).unwrap_or_else(|_| "{}".into());
    out.push('\n');
    out
}

/// `compare --facts`: `{"format_version": 1, "facts_diff": [...]}`, the field every table
/// carries, alone.
pub fn render_facts(diffs: &[FactsDiff]) -> String {
    #[derive(Serialize)]
    struct Only<'a> {
        format_version: u32,
        facts_diff: Vec<FactsDiffJson<'a>>,
    }
    let only = Only {
        format_version: FORMAT_VERSION,
        facts_diff: diffs.iter().map(FactsDiffJson::of).collect(),
    };
    let mut out = serde_json::to_string_pretty(&only).unwrap_or_else(|_| "{}".into());
    out.push('\n');
    out
}

/// What differs in one comparison: its columns, each differing fact with a value per column
/// (`null`: not recorded there), and the names of the facts that are the same.
#[derive(Serialize)]
struct FactsDiffJson<'a> {
    subject: &'a str,
    columns: &'a [String],
    differ: Vec<FactJson<'a>>,
    same: &'a [String],
}

#[derive(Serialize)]
struct FactJson<'a> {
    fact: &'a str,
    values: &'a [Option<String>],
}

impl FactsDiffJson<'_> {
    fn of(diff: &FactsDiff) -> FactsDiffJson<'_> {
        FactsDiffJson {
            subject: &diff.subject,
            columns: &diff.columns,
            differ: diff
                .differ
                .iter()
                .map(|f| FactJson {
                    fact: &f.name,
                    values: &f.values,
                })
                .collect(),
            same: &diff.same,
        }
    }
}

#[derive(Serialize)]
struct GridJson<'a> {
    title: &'a str,
    metric: &'a str,
    columns: &'a [String],
    rows: Vec<RowJson<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    scaling: &'a Vec<ScalingStory>,
    /// Per series of a sweep over offered request rates: served against offered, where it falls
    /// behind and where its p99 TTFT departs, the highest rate within the limits.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rates: &'a Vec<RateStory>,
    /// The latency limits and, per series, the highest concurrency within them, the table's
    /// metric there, its ratio to the baseline and the first level above that breaks a limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    slo: Option<&'a SloCapacity>,
    /// The runs that did not finish well, said with every table (see `Report::notices`).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    notices: &'a [&'a str],
    /// The runs that took more than one attempt: how many, and how many points ran again.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    attempts: &'a [AttemptsJson<'a>],
    /// What differs between the hosts or runs compared, with every table like the notices.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    facts_diff: &'a [FactsDiffJson<'a>],
}

/// How many attempts a run took (1 + its resumes) and how many points ran more than once.
#[derive(Serialize)]
struct AttemptsJson<'a> {
    run: &'a str,
    attempts: usize,
    points_rerun: usize,
}

/// What every table carries about the runs.
#[derive(Clone, Copy)]
struct Context<'a> {
    notices: &'a [&'a str],
    attempts: &'a [AttemptsJson<'a>],
    facts_diff: &'a [FactsDiffJson<'a>],
}

impl GridJson<'_> {
    fn of<'a>(grid: &'a Grid, context: Context<'a>) -> GridJson<'a> {
        GridJson {
            title: &grid.title,
            metric: &grid.metric,
            columns: &grid.columns,
            rows: grid.rows.iter().map(RowJson::of).collect(),
            scaling: &grid.scaling,
            rates: &grid.rates,
            slo: grid.slo.as_ref(),
            notices: context.notices,
            attempts: context.attempts,
            facts_diff: context.facts_diff,
        }
    }
}

/// A row: its point (`{"concurrency": 16, "model": "qwen"}`, the matrix values typed as the
/// records hold them; `{}` for a step without a matrix) and a cell per column, the first its
/// label (`concurrency=16 model=qwen`, which tells a point's several records apart).
#[derive(Serialize)]
struct RowJson<'a> {
    point: &'a Values,
    cells: Vec<CellJson<'a>>,
}

impl RowJson<'_> {
    fn of(row: &Row) -> RowJson<'_> {
        RowJson {
            point: &row.point,
            cells: row.cells.iter().map(CellJson::of).collect(),
        }
    }
}

/// A cell as JSON: ratios and changes are `derived` numbers with their unit (`x`, `%`); a
/// reference's verdict is a label.
#[derive(Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
enum CellJson<'a> {
    Value {
        value: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        reference: Option<&'a RefCheck>,
        /// A repeated point's mean, ci95, n, cv, excluded and noisy.
        #[serde(flatten, skip_serializing_if = "Option::is_none")]
        spread: Option<&'a Spread>,
    },
    Derived {
        value: f64,
        unit: &'static str,
        /// A ratio's 95% interval, when both sides are repeated.
        #[serde(skip_serializing_if = "Option::is_none")]
        interval: Option<[f64; 2]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        verdict: Option<Verdict>,
        /// A change's Welch's t-test (t, df, p_value), when both sides are repeated.
        #[serde(skip_serializing_if = "Option::is_none")]
        welch: Option<&'a Welch>,
        /// How the workloads of a change across runs differ, when they do (never judged then).
        #[serde(skip_serializing_if = "Option::is_none")]
        other_workload: Option<&'a str>,
    },
    Invalid {
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<f64>,
        reason: &'a str,
    },
    Skipped {
        reason: &'a str,
    },
    Failed {
        reason: &'a str,
    },
    Lost {
        reason: &'a str,
    },
    #[serde(rename = "record lost")]
    RecordLost {
        reason: &'a str,
    },
    #[serde(rename = "not run")]
    NotRun {
        reason: &'a str,
    },
    #[serde(rename = "ran, no record")]
    NoRecord {
        reason: &'a str,
    },
    Unknown {
        reason: &'a str,
    },
    Missing,
    Label {
        text: String,
    },
}

impl CellJson<'_> {
    fn of(cell: &Cell) -> CellJson<'_> {
        match cell {
            Cell::Value {
                value,
                reference,
                spread,
            } => CellJson::Value {
                value: *value,
                reference: reference.as_ref(),
                spread: spread.as_ref(),
            },
            Cell::Ratio { value, interval } => CellJson::Derived {
                value: *value,
                unit: "x",
                interval: interval.map(|(low, high)| [low, high]),
                verdict: None,
                welch: None,
                other_workload: None,
            },
            Cell::Change {
                percent,
                verdict,
                test,
                workload,
            } => CellJson::Derived {
                value: *percent,
                unit: "%",
                interval: None,
                verdict: *verdict,
                welch: test.as_ref(),
                other_workload: workload.as_deref(),
            },
            Cell::Invalid { value, reason } => CellJson::Invalid {
                value: *value,
                reason,
            },
            Cell::Skipped { reason } => CellJson::Skipped { reason },
            Cell::Failed { reason } => CellJson::Failed { reason },
            Cell::Lost { reason } => CellJson::Lost { reason },
            Cell::RecordLost { reason } => CellJson::RecordLost { reason },
            Cell::NotRun { reason } => CellJson::NotRun { reason },
            Cell::NoRecord { reason } => CellJson::NoRecord { reason },
            Cell::Unknown { reason } => CellJson::Unknown { reason },
            Cell::Missing => CellJson::Missing,
            Cell::Label { .. } | Cell::Check { .. } => CellJson::Label { text: cell.text() },
        }
    }
}
