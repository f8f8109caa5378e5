//! One cell of a table: a measured value (checked against its reference when the playbook
//! states one), a derived ratio or change, or the reason there is no number to compare.

use serde::Serialize;
use serde_json::Value as Json;

use super::stats::{Estimate, Welch, ALPHA, NOISY_CV};
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
    /// A host's value over the baseline host's: `×1.23`, with its 95% interval when both are
    /// repeated: `×0.41 [0.39–0.43]`.
    Ratio {
        value: f64,
        interval: Option<(f64, f64)>,
    },
    /// A change in percent (across runs, or from a reference); a change beyond the tolerance
    /// carries its verdict, and, when both sides are repeated, the test it was judged by. A
    /// change between different workloads says how they differ, and is never judged.
    Change {
        percent: f64,
        verdict: Option<Verdict>,
        test: Option<Welch>,
        workload: Option<String>,
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
    /// The point's latest attempt was cut short by something other than its command: the
    /// interrupt, or its host or connection gone.
    Lost {
        reason: String,
    },
    /// A planned point whose events say it finished ok but whose record could not be read
    /// (records.jsonl damaged), with the reason.
    RecordLost {
        reason: String,
    },
    /// A planned point that never ran on the host (it failed earlier, the run was
    /// interrupted), with the reason.
    NotRun {
        reason: String,
    },
    /// A planned point that ran and ended well (its command exited 0) but printed no record:
    /// nothing was measured there, and not because it did not run.
    NoRecord {
        reason: String,
    },
    /// The point ran, and its record says why it cannot have the metric (energy per token
    /// without the benchmark's window).
    Unknown {
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

/// A change across runs beyond the tolerance, judged by the metric's direction, or, when the
/// points were repeated and the difference is not significant, within noise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Regression,
    Improvement,
    #[serde(rename = "within noise")]
    WithinNoise,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::WithinNoise => "within noise",
        }
    }
}

/// How the valid repetitions of a repeated point spread around their mean (the cell's value),
/// and how many were left out for being invalid or failed.
#[derive(Clone, Debug, Serialize)]
pub struct Spread {
    pub mean: f64,
    /// The sample standard deviation of the valid repetitions.
    pub sd: f64,
    /// Half the width of the 95% confidence interval of the mean (None with one repetition).
    pub ci95: Option<f64>,
    /// The valid repetitions the mean is of.
    pub n: usize,
    /// Coefficient of variation (None with one repetition or a mean of 0).
    pub cv: Option<f64>,
    /// Repetitions excluded: invalid (`valid: false`), failed or lost.
    pub excluded: usize,
    /// The coefficient of variation exceeds [`NOISY_CV`].
    pub noisy: bool,
}

impl Spread {
    /// The spread of `summary`'s values, with `excluded` repetitions left out.
    pub fn of(summary: &Estimate, excluded: usize) -> Spread {
        Spread {
            mean: summary.mean,
            sd: summary.sd,
            ci95: summary.ci95,
            n: summary.n,
            cv: summary.cv,
            excluded,
            noisy: summary.is_noisy(),
        }
    }

    /// The valid repetitions' summary, for comparing them with another cell's.
    pub fn summary(&self) -> Estimate {
        Estimate {
            n: self.n,
            mean: self.mean,
            sd: self.sd,
            ci95: self.ci95,
            cv: self.cv,
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
                "{} of {} repetitions invalid, failed or lost, excluded",
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

    /// What a repeated value's repetitions say together, for comparing it with another cell.
    pub fn summary(&self) -> Option<Estimate> {
        match self {
            Cell::Value { spread: Some(s), .. } => Some(s.summary()),
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
            Cell::Ratio {
                value,
                interval: None,
            } => format!("×{value:.2}"),
            Cell::Ratio {
                value,
                interval: Some((low, high)),
            } => format!("×{value:.2} [{low:.2}–{high:.2}]"),
            Cell::Change {
                percent,
                workload: Some(_),
                ..
            } => format!("{percent:+.1}% other workload"),
            Cell::Change { percent, verdict, .. } => match verdict {
                Some(v) => format!("{percent:+.1}% {}", v.as_str()),
                None => format!("{percent:+.1}%"),
            },
            Cell::Invalid { reason, .. } => format!("invalid: {reason}"),
            Cell::Skipped { reason } => format!("skipped: {reason}"),
            Cell::Failed { reason } => format!("FAILED: {reason}"),
            Cell::Lost { reason } => format!("lost: {reason}"),
            Cell::NotRun { reason } => format!("not run: {reason}"),
            Cell::NoRecord { reason } => format!("ran, no record: {reason}"),
            Cell::Unknown { reason } => format!("unknown: {reason}"),
            Cell::RecordLost { reason } => format!("ok, record lost: {reason}"),
            Cell::Missing => "—".to_string(),
            Cell::Label { text } => text.clone(),
            Cell::Check { met: true } => "met".to_string(),
            Cell::Check { met: false } => "MISSED".to_string(),
        }
    }

    /// The reason a human format lists once under the table, and the short text that points
    /// to it (`skipped`, `FAILED`, `not run`, `ran, no record`, `invalid`, or the value with ✗ for a missed
    /// reference, `noisy` for a repeated point that varies too much, and the repetitions
    /// excluded; a judged change says what it was judged by).
    pub fn note(&self) -> Option<(String, String)> {
        match self {
            Cell::Change {
                workload: Some(why), ..
            } => Some((
                self.text(),
                format!(
                    "another workload than the first run's ({why}): not a like-for-like change, not judged"
                ),
            )),
            Cell::Change {
                verdict: Some(_),
                test,
                ..
            } => Some((self.text(), judged_by(test.as_ref()))),
            Cell::Skipped { reason } => Some(("skipped".into(), reason.clone())),
            Cell::Failed { reason } => Some(("FAILED".into(), reason.clone())),
            Cell::Lost { reason } => Some(("lost".into(), format!("lost: {reason}"))),
            Cell::NotRun { reason } => Some(("not run".into(), format!("not run: {reason}"))),
            Cell::NoRecord { reason } => Some(("ran, no record".into(), format!("ran, no record: {reason}"))),
            Cell::RecordLost { reason } => Some(("ok, record lost".into(), reason.clone())),
            Cell::Invalid { reason, .. } => Some(("invalid".into(), format!("invalid: {reason}"))),
            Cell::Unknown { reason } => Some(("unknown".into(), format!("unknown: {reason}"))),
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

/// What a change's verdict rests on: Welch's test of the repetitions, or, with one measurement
/// a side, the tolerance alone.
fn judged_by(test: Option<&Welch>) -> String {
    match test {
        Some(w) if w.is_significant() => format!(
            "significant (Welch's t-test of the repetitions: {}, below {ALPHA})",
            p_text(w.p_value)
        ),
        Some(w) => format!(
            "beyond the tolerance but not significant (Welch's t-test of the repetitions: {}, \
             not below {ALPHA}): it may be noise",
            p_text(w.p_value)
        ),
        None => "one measurement a side: judged against the tolerance alone, not against noise \
                 (`repeat: N` measures each point N times and tests each change)"
            .to_string(),
    }
}

/// `p = 0.021`, or `p < 0.001` for what three decimals would show as 0.
fn p_text(p: f64) -> String {
    match p < 0.001 {
        true => "p < 0.001".to_string(),
        false => format!("p = {p:.3}"),
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
    let mut repetitions: Vec<u32> = records.iter().map(|r| r.at.repetition).collect();
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
            let of_rep: Vec<&Record> = records
                .iter()
                .copied()
                .filter(|r| r.at.repetition == rep)
                .collect();
            single(&of_rep, metric)
        })
        .collect();
    let values: Vec<f64> = cells.iter().filter_map(Cell::number).collect();
    let excluded = cells
        .iter()
        .filter(|c| matches!(c, Cell::Invalid { .. } | Cell::Failed { .. } | Cell::Lost { .. }))
        .count();
    match Estimate::of(&values) {
        Some(summary) => Cell::Value {
            value: summary.mean,
            reference: None,
            spread: Some(Spread::of(&summary, excluded)),
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
    if let Some(reason) = records.iter().find_map(|r| r.unknown_reason(metric)) {
        return Cell::Unknown {
            reason: reason.to_string(),
        };
    }
    let reason = |r: &&&Record| r.reason.clone().unwrap_or_default();
    match records
        .iter()
        .find(|r| matches!(r.status, RecordStatus::Failed | RecordStatus::Lost))
    {
        Some(r) if r.status == RecordStatus::Lost => Cell::Lost { reason: reason(&r) },
        Some(r) => Cell::Failed { reason: reason(&r) },
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
        let ratio = |interval| Cell::Ratio {
            value: 1.234,
            interval,
        };
        assert_eq!(ratio(None).text(), "×1.23");
        assert_eq!(ratio(Some((1.2, 1.251))).text(), "×1.23 [1.20–1.25]");
        let change = Cell::Change {
            percent: -6.06,
            verdict: Some(Verdict::Regression),
            test: None,
            workload: None,
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

    fn record(repetition: u32, metrics: serde_json::Value, status: RecordStatus) -> Record {
        Record {
            at: crate::events::PointRun {
                attempt: 1,
                repetition,
            },
            ..crate::testutil::record("h", &[], metrics, status)
        }
    }

    /// Of five repetitions, one invalid and one failed: the mean, interval and noise are of the
    /// other three alone (100, 102, 104: mean 102, s = 2, 4.303 × 2 / √3 = 4.97), and the note
    /// counts the two left out.
    #[test]
    fn invalid_and_failed_repetitions_are_excluded_and_counted() {
        let ok = |rep, x: f64| record(rep, serde_json::json!({"x": x}), RecordStatus::Ok);
        let records = [
            ok(1, 100.0),
            record(
                2,
                serde_json::json!({"x": 5000.0, "valid": false, "problems": ["too few"]}),
                RecordStatus::Ok,
            ),
            ok(3, 102.0),
            record(4, serde_json::json!({}), RecordStatus::Failed),
            ok(5, 104.0),
        ];
        let refs: Vec<&Record> = records.iter().collect();
        let c = cell(Some(&refs), "x");
        let Cell::Value {
            value,
            spread: Some(s),
            ..
        } = &c
        else {
            panic!("{c:?}")
        };
        assert_eq!((*value, s.n, s.excluded), (102.0, 3, 2));
        assert!((s.ci95.unwrap() - 4.968).abs() < 1e-3, "{s:?}");
        assert_eq!(c.text(), "102 ± 4.97");
        let (_, why) = c.note().unwrap();
        assert_eq!(why, "2 of 5 repetitions invalid, failed or lost, excluded");
        let all_bad: Vec<&Record> = refs
            .iter()
            .copied()
            .filter(|r| r.at.repetition % 2 == 0)
            .collect();
        assert!(
            matches!(cell(Some(&all_bad), "x"), Cell::Invalid { .. }),
            "none valid: the first reason"
        );
    }
}
