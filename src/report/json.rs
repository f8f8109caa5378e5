//! JSON for programs: the tables with typed cells. The shapes below are the format notebooks
//! read (a cell's `status` says what it is), kept here so the model can change without them.

use serde::Serialize;

use super::model::{Grid, Report};
use super::scaling::Series;
use super::{Cell, RefCheck, Verdict};

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
    let context = Context {
        notices: &notices,
        attempts: &attempts,
    };
    let grids: Vec<GridJson> = report.grids().map(|g| GridJson::of(g, context)).collect();
    let mut out = serde_json::to_string_pretty(&grids).unwrap_or_else(|_| "[]".into());
    out.push('\n');
    out
}

#[derive(Serialize)]
struct GridJson<'a> {
    title: &'a str,
    metric: &'a str,
    columns: &'a [String],
    rows: Vec<Vec<CellJson<'a>>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    scaling: &'a Vec<Series>,
    /// The runs that did not finish well, said with every table (see `Report::notices`).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    notices: &'a [&'a str],
    /// The runs that took more than one attempt: how many, and how many points ran again.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    attempts: &'a [AttemptsJson<'a>],
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
}

impl GridJson<'_> {
    fn of<'a>(grid: &'a Grid, context: Context<'a>) -> GridJson<'a> {
        GridJson {
            title: &grid.title,
            metric: &grid.metric,
            columns: &grid.columns,
            rows: grid
                .rows
                .iter()
                .map(|row| row.iter().map(CellJson::of).collect())
                .collect(),
            scaling: &grid.scaling,
            notices: context.notices,
            attempts: context.attempts,
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
    },
    Derived {
        value: f64,
        unit: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        verdict: Option<Verdict>,
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
    #[serde(rename = "not run")]
    NotRun {
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
            Cell::Value { value, reference } => CellJson::Value {
                value: *value,
                reference: reference.as_ref(),
            },
            Cell::Ratio { value } => CellJson::Derived {
                value: *value,
                unit: "x",
                verdict: None,
            },
            Cell::Change { percent, verdict } => CellJson::Derived {
                value: *percent,
                unit: "%",
                verdict: *verdict,
            },
            Cell::Invalid { value, reason } => CellJson::Invalid {
                value: *value,
                reason,
            },
            Cell::Skipped { reason } => CellJson::Skipped { reason },
            Cell::Failed { reason } => CellJson::Failed { reason },
            Cell::NotRun { reason } => CellJson::NotRun { reason },
            Cell::Missing => CellJson::Missing,
            Cell::Label { .. } | Cell::Check { .. } => CellJson::Label { text: cell.text() },
        }
    }
}
