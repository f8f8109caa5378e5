//! One cell of a table: a measured value (checked against its reference when the playbook
//! states one), a derived ratio or change, or the reason there is no number to compare.

use serde::Serialize;
use serde_json::Value as Json;

use crate::config::reference::Expected;
use crate::events::{Record, RecordStatus};

/// What a cell is; every format decides how to show it from its kind, never from its text.
#[derive(Clone, Debug)]
pub enum Cell {
    /// A measured value, checked against its reference when the playbook states one.
    Value {
        value: f64,
        reference: Option<RefCheck>,
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
            Cell::Value { value, reference } => match reference {
                Some(r) if r.met => format!("{} ✓", format_number(*value)),
                Some(_) => format!("{} ✗", format_number(*value)),
                None => format_number(*value),
            },
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
    /// reference).
    pub fn note(&self) -> Option<(String, String)> {
        match self {
            Cell::Skipped { reason } => Some(("skipped".into(), reason.clone())),
            Cell::Failed { reason } => Some(("FAILED".into(), reason.clone())),
            Cell::NotRun { reason } => Some(("not run".into(), format!("not run: {reason}"))),
            Cell::Invalid { reason, .. } => Some(("invalid".into(), format!("invalid: {reason}"))),
            Cell::Value {
                value,
                reference: Some(r),
            } if !r.met => Some((self.text(), r.explain(*value))),
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

/// The cell for one host's records at one row: skipped, the last value of `metric` (invalid
/// when its record says so), invalid, failed, or missing, in that order.
pub fn cell(records: Option<&Vec<&Record>>, metric: &str) -> Cell {
    let Some(records) = records else {
        return Cell::Missing;
    };
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
        };
        assert_eq!(met.text(), "2100 ✓");
        assert!(met.note().is_none());
        let missed = Cell::Value {
            value: 1500.0,
            reference: Some(RefCheck::new(&expected, 1500.0)),
        };
        let (short, why) = missed.note().unwrap();
        assert_eq!(short, "1500 ✗");
        assert_eq!(why, "reference 2156 ±10%: 1500 is 30.4% below it");
    }
}
