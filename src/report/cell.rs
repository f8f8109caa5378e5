//! One cell of a table: a measured value (checked against its reference when the playbook
//! states one), a derived ratio or change, or the reason there is no number to compare.

use serde::Serialize;
use serde_json::Value as Json;

use super::stats::{Summary, NOISY_CV};
use crate::config::reference::Expected;
use crate::events::{Record, RecordStatus};

/// What a cell is; every format decides how to show it from its kind, never from its text.
#[derive(Clone, Debug)]
pub enum Cell {
    /// A measured value, checked against its reference when the playbook states one; for a
    /// repeated point, the mean of its valid repetitions with their spread.
    Value {
        value: f64,
        reference: Option<RefCheck>,
        spread: Option<Spread>,
    },
    /// A host's value over the baseline host's: `×1.23`.
    Ratio {
        value: f64,
    },
    /// A change in percent (across runs, or from a reference); a change beyond the tolerance
    /// carries its verdict.
    Change {
        percent: f64,
        verdict: Option<Verdict>,
    },
    /// The benchmark said the record is not valid (`valid: false`); its value, if any, is
    /// shown for the record but never compared.
    Invalid {
        value: Option<f64>,
        reason: String,
    },
    Skipped {
        reason: String,
    },
    Failed {
        reason: String,
    },
    /// A planned point that never ran on the host (it failed earlier, the run was
    /// interrupted), with the reason.
    NotRun {
        reason: String,
    },
    /// The point ran but reported no such metric, or the row is not one of the host's points.
    Missing,
    /// A row label or other text.
    Label {
        text: String,
    },
    /// Whether a reference was met: `met` or `MISSED`.
    Check {
        met: bool,
    },
}

/// A change across runs beyond the tolerance, judged by the metric's direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Regression,
    Improvement,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
        }
    }
}

/// How the valid repetitions of a repeated point spread around their mean (the cell's value),
/// and how many were left out for being invalid or failed.
#[derive(Clone, Debug, Serialize)]
pub struct Spread {
    pub mean: f64,
    /// Half the width of the 95% confidence interval of the mean (None with one repetition).
    pub ci95: Option<f64>,
    /// The valid repetitions the mean is of.
    pub n: usize,
    /// Coefficient of variation (None with one repetition or a mean of 0).
    pub cv: Option<f64>,
    /// Repetitions excluded: invalid (`valid: false`) or failed.
    pub excluded: usize,
    /// The coefficient of variation exceeds [`NOISY_CV`].
    pub noisy: bool,
}

impl Spread {
    fn new(summary: &Summary, excluded: usize) -> Spread {
        Spread {
            mean: summary.mean,
            ci95: summary.ci95,
            n: summary.n,
            cv: summary.cv,
            excluded,
            noisy: summary.is_noisy(),
        }
    }

    /// `2411 ± 18`, or the mean alone when one repetition is left.
    fn text(&self) -> String {
        match self.ci95 {
            Some(hw) => format!("{} ± {}", format_number(self.mean), format_number(hw)),
            None => format_number(self.mean),
        }
    }

    /// What a reader must know, for the note under the table: noisy, repetitions excluded.
    pub fn explain(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let (true, Some(cv)) = (self.noisy, self.cv) {
            parts.push(format!(
                "noisy: the {} repetitions vary by {:.1}% (coefficient of variation), above {:.0}%",
                self.n,
                cv * 100.0,
                NOISY_CV * 100.0
            ));
        }
        if self.excluded > 0 {
            parts.push(format!(
                "{} of {} repetitions invalid or failed, excluded",
                self.excluded,
                self.excluded + self.n
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// A measured value against its reference.
#[derive(Clone, Debug, Serialize)]
pub struct RefCheck {
    /// As written in the playbook: `2156 ±10%`.
    pub expected: String,
    pub met: bool,
    /// How far the value is from the reference, in percent of the reference.
    pub deviation_percent: f64,
}

impl RefCheck {
    pub fn new(expected: &Expected, measured: f64) -> RefCheck {
        RefCheck {
            expected: expected.to_string(),
            met: expected.is_met_by(measured),
            deviation_percent: if expected.value == 0.0 {
                0.0
            } else {
                (measured / expected.value - 1.0) * 100.0
            },
        }
    }

    /// What a miss means, for the note under a table.
    pub fn explain(&self, measured: f64) -> String {
        let side = if self.deviation_percent < 0.0 {
            "below"
        } else {
            "above"
        };
        format!(
            "reference {}: {} is {:.1}% {side} it",
            self.expected,
            format_number(measured),
            self.deviation_percent.abs()
        )
    }
}

impl Cell {
    /// A plain measured value.
    pub fn value(value: f64) -> Cell {
        Cell::Value {
            value,
            reference: None,
            spread: None,
        }
    }

    /// A number that may be compared: valid measured values only.
    pub fn number(&self) -> Option<f64> {
        match self {
            Cell::Value { value, .. } => Some(*value),
            _ => None,
        }
    }

    /// The cell as people read it: `1647.2`, `×1.23`, `+4.1%`, `skipped: …`.
    pub fn text(&self) -> String {
        match self {
            Cell::Value {
                value,
                reference,
                spread,
            } => {
                let shown = spread
                    .as_ref()
                    .map_or_else(|| format_number(*value), Spread::text);
                match reference {
                    Some(r) if r.met => format!("{shown} ✓"),
                    Some(_) => format!("{shown} ✗"),
                    None => shown,
                }
            }
            Cell::Ratio { value } => format!("×{value:.2}"),
            Cell::Change { percent, verdict } => match verdict {
                Some(v) => format!("{percent:+.1}% {}", v.as_str()),
                None => format!("{percent:+.1}%"),
            },
            Cell::Invalid { reason, .. } => format!("invalid: {reason}"),
            Cell::Skipped { reason } => format!("skipped: {reason}"),
            Cell::Failed { reason } => format!("FAILED: {reason}"),
            Cell::NotRun { reason } => format!("not run: {reason}"),
            Cell::Missing => "—".to_string(),
            Cell::Label { text } => text.clone(),
            Cell::Check { met: true } => "met".to_string(),
            Cell::Check { met: false } => "MISSED".to_string(),
        }
    }

    /// The reason a human format lists once under the table, and the short text that points
    /// to it (`skipped`, `FAILED`, `not run`, `invalid`, or the value with ✗ for a missed
    /// reference, `noisy` for a repeated point that varies too much, and the repetitions
    /// excluded).
    pub fn note(&self) -> Option<(String, String)> {
        match self {
            Cell::Skipped { reason } => Some(("skipped".into(), reason.clone())),
            Cell::Failed { reason } => Some(("FAILED".into(), reason.clone())),
            Cell::NotRun { reason } => Some(("not run".into(), format!("not run: {reason}"))),
            Cell::Invalid { reason, .. } => Some(("invalid".into(), format!("invalid: {reason}"))),
            Cell::Value {
                value,
                reference,
                spread,
            } => {
                let missed = reference.as_ref().filter(|r| !r.met).map(|r| r.explain(*value));
                let spread_note = spread.as_ref().and_then(Spread::explain);
                let reason = match (missed, spread_note) {
                    (None, None) => return None,
                    (Some(a), Some(b)) => format!("{a}; {b}"),
                    (a, b) => a.or(b).unwrap_or_default(),
                };
                let short = match spread.as_ref().is_some_and(|s| s.noisy) {
                    true => format!("{} noisy", self.text()),
                    false => self.text(),
                };
                Some((short, reason))
            }
            _ => None,
        }
    }
}

/// Numbers as people write them: no decimals on whole numbers, fewer on large ones.
pub fn format_number(v: f64) -> String {
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

/// Why the benchmark marked a record invalid (`valid: false`, reasons in `problems`).
pub fn invalid_reason(record: &Record) -> Option<String> {
    if !record.is_invalid() {
        return None;
    }
    let problems: Vec<String> = record
        .metrics
        .get("problems")
        .and_then(Json::as_array)
        .map(|list| {
            list.iter()
                .map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Some(if problems.is_empty() {
        "the benchmark marked this record invalid".to_string()
    } else {
        problems.join("; ")
    })
}

/// The cell for one host's records at one row. Records of one repetition (any point not
/// repeated): skipped, the last value of `metric` (invalid when its record says so), invalid,
/// failed, or missing, in that order. Records of several repetitions: see [`repeated`].
pub fn cell(records: Option<&Vec<&Record>>, metric: &str) -> Cell {
    let Some(records) = records else {
        return Cell::Missing;
    };
    let mut repetitions: Vec<u32> = records.iter().map(|r| r.repetition).collect();
    repetitions.sort_unstable();
    repetitions.dedup();
    match repetitions.len() {
        0 | 1 => single(records, metric),
        _ => repeated(records, &repetitions, metric),
    }
}

/// A repeated point: each repetition's cell made as one of a point measured once; the valid
/// values summarised (mean, 95% interval, noisy or not), the invalid and failed ones excluded
/// and counted, never averaged in. Without any valid value, the first repetition's cell that is
/// not missing says why.
fn repeated(records: &[&Record], repetitions: &[u32], metric: &str) -> Cell {
    let cells: Vec<Cell> = repetitions
        .iter()
        .map(|&rep| {
            let of_rep: Vec<&Record> = records.iter().copied().filter(|r| r.repetition == rep).collect();
            single(&of_rep, metric)
        })
        .collect();
    let values: Vec<f64> = cells.iter().filter_map(Cell::number).collect();
    let excluded = cells
        .iter()
        .filter(|c| matches!(c, Cell::Invalid { .. } | Cell::Failed { .. }))
        .count();
    match Summary::of(&values) {
        Some(summary) => Cell::Value {
            value: summary.mean,
            reference: None,
            spread: Some(Spread::new(&summary, excluded)),
        },
        None => cells
            .into_iter()
            .find(|c| !matches!(c, Cell::Missing))
            .unwrap_or(Cell::Missing),
    }
}

/// The cell of the records of one repetition (see [`cell`]).
fn single(records: &[&Record], metric: &str) -> Cell {
    if let Some(r) = records.iter().find(|r| r.status == RecordStatus::Skipped) {
        return Cell::Skipped {
            reason: r.reason.clone().unwrap_or_default(),
        };
    }
    let measured = records
        .iter()
        .rev()
        .find_map(|r| r.metrics.get(metric).and_then(Json::as_f64).map(|v| (r, v)));
    if let Some((record, value)) = measured {
        return match invalid_reason(record) {
            Some(reason) => Cell::Invalid {
                value: Some(value),
                reason,
            },
            None => Cell::value(value),
        };
    }
    if let Some(reason) = records.iter().find_map(|r| invalid_reason(r)) {
        return Cell::Invalid { value: None, reason };
    }
    match records.iter().find(|r| r.status == RecordStatus::Failed) {
        Some(r) => Cell::Failed {
            reason: r.reason.clone().unwrap_or_default(),
        },
        None => Cell::Missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_naturally() {
        assert_eq!(Cell::value(2156.0).text(), "2156");
        assert_eq!(Cell::value(1647.25).text(), "1647.2");
        assert_eq!(Cell::value(12.3456).text(), "12.35");
        assert_eq!(Cell::value(0.01234).text(), "0.012");
        assert_eq!(Cell::Ratio { value: 1.234 }.text(), "×1.23");
        let change = Cell::Change {
            percent: -6.06,
            verdict: Some(Verdict::Regression),
        };
        assert_eq!(change.text(), "-6.1% regression");
    }

    #[test]
    fn references_mark_values_and_explain_misses() {
        let expected: Expected = "2156 ±10%".parse().unwrap();
        let met = Cell::Value {
            value: 2100.0,
            reference: Some(RefCheck::new(&expected, 2100.0)),
            spread: None,
        };
        assert_eq!(met.text(), "2100 ✓");
        assert!(met.note().is_none());
        let missed = Cell::Value {
            value: 1500.0,
            reference: Some(RefCheck::new(&expected, 1500.0)),
            spread: None,
        };
        let (short, why) = missed.note().unwrap();
        assert_eq!(short, "1500 ✗");
        assert_eq!(why, "reference 2156 ±10%: 1500 is 30.4% below it");
    }
}
