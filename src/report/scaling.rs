//! The scaling story of a concurrency sweep, per host: how much throughput each step up in
//! concurrency bought (scaling efficiency), where it stops growing (the saturation knee: the
//! first level from which doubling concurrency gives less than 10% more throughput), and where
//! the host stopped (the capacity limit: the first level skipped, failed or invalid, and why).

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value as Json;

use super::cell::{cell, format_number, Cell};
use super::steps::StepRecords;
use crate::events::Record;
use crate::point;

/// Below this gain per doubling of concurrency, throughput has saturated.
pub const KNEE_GAIN_PER_DOUBLING: f64 = 0.10;

/// Throughput metrics in order of preference when the table shows something else.
const THROUGHPUT_METRICS: &[&str] = &[
    "output_throughput",
    "total_token_throughput",
    "request_throughput",
];

/// What happened at one concurrency level.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Measured(f64),
    /// Skipped, failed or invalid, with the reason.
    Stopped {
        status: String,
        reason: String,
    },
}

impl Outcome {
    fn stopped(status: &str, reason: String) -> Outcome {
        Outcome::Stopped {
            status: status.to_string(),
            reason,
        }
    }
}

/// One concurrency level of one host.
#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    pub concurrency: f64,
    pub outcome: Outcome,
}

/// From one measured level to the next.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LevelGain {
    pub from: f64,
    pub to: f64,
    /// Throughput at `to` over throughput at `from`.
    pub gain: f64,
    /// `gain` over the growth in concurrency: 1.0 is linear scaling.
    pub efficiency: f64,
    /// The gain per doubling of concurrency, as a fraction (0.10 = +10%).
    pub per_doubling: f64,
}

/// Where throughput stops growing.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Knee {
    pub concurrency: f64,
    pub throughput: f64,
    /// The gain per doubling beyond the knee.
    pub per_doubling: f64,
}

/// The first level the host did not measure (skipped, failed, or invalid with nothing valid
/// above it), or a level left out.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Limit {
    pub concurrency: f64,
    pub status: String,
    pub reason: String,
}

/// One host's (or one host and fixed other axes') scaling story.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ScalingStory {
    pub name: String,
    pub host: String,
    pub metric: String,
    pub steps: Vec<LevelGain>,
    pub knee: Option<Knee>,
    pub limit: Option<Limit>,
    /// Levels below the highest measured one that the benchmark marked invalid.
    pub left_out: Vec<Limit>,
    /// The highest concurrency measured.
    pub last_measured: Option<f64>,
}

/// Sorts `levels` by concurrency, keeping the last of those at the same concurrency: what both
/// the scaling story and the SLO capacity read a series as.
pub fn by_concurrency<T>(levels: &mut Vec<T>, concurrency: impl Fn(&T) -> f64) {
    levels.sort_by(|a, b| concurrency(a).total_cmp(&concurrency(b)));
    levels.dedup_by(|later, earlier| {
        let same = concurrency(later) == concurrency(earlier);
        if same {
            std::mem::swap(later, earlier);
        }
        same
    });
}

/// The story of one series: levels in any order; levels at the same concurrency keep the last.
pub fn analyze(name: &str, host: &str, metric: &str, mut levels: Vec<Level>) -> ScalingStory {
    by_concurrency(&mut levels, |l| l.concurrency);
    let measured: Vec<(f64, f64)> = levels
        .iter()
        .filter_map(|l| match l.outcome {
            Outcome::Measured(v) => Some((l.concurrency, v)),
            Outcome::Stopped { .. } => None,
        })
        .collect();
    let steps: Vec<LevelGain> = measured.windows(2).filter_map(|w| step(w[0], w[1])).collect();
    let knee = steps
        .iter()
        .find(|s| s.per_doubling < KNEE_GAIN_PER_DOUBLING)
        .and_then(|s| {
            let throughput = measured.iter().find(|(c, _)| *c == s.from)?.1;
            Some(Knee {
                concurrency: s.from,
                throughput,
                per_doubling: s.per_doubling,
            })
        });
    let last_measured = measured.last().map(|(c, _)| *c);
    // An invalid level below a valid one is noise the benchmark flagged, not the limit.
    let (left_out, stopped): (Vec<Limit>, Vec<Limit>) = levels
        .iter()
        .filter_map(|l| match &l.outcome {
            Outcome::Stopped { status, reason } => Some(Limit {
                concurrency: l.concurrency,
                status: status.clone(),
                reason: reason.clone(),
            }),
            Outcome::Measured(_) => None,
        })
        .partition(|l| l.status == "invalid" && last_measured.is_some_and(|top| l.concurrency < top));
    let limit = stopped.into_iter().next();
    ScalingStory {
        name: name.to_string(),
        host: host.to_string(),
        metric: metric.to_string(),
        steps,
        knee,
        limit,
        left_out,
        last_measured,
    }
}

/// The step between two measured levels; none when either throughput is not positive or the
/// concurrency does not grow.
fn step((c1, t1): (f64, f64), (c2, t2): (f64, f64)) -> Option<LevelGain> {
    if t1 <= 0.0 || t2 < 0.0 || c1 <= 0.0 || c2 <= c1 {
        return None;
    }
    let gain = t2 / t1;
    let doublings = (c2 / c1).log2();
    Some(LevelGain {
        from: c1,
        to: c2,
        gain,
        efficiency: gain / (c2 / c1),
        per_doubling: gain.powf(1.0 / doublings) - 1.0,
    })
}

/// The metric a scaling story is told in: the table's, when it is a throughput, else the first
/// throughput the records have.
pub fn metric_for(step: &StepRecords, table_metric: &str) -> Option<String> {
    if table_metric.ends_with("throughput") {
        return Some(table_metric.to_string());
    }
    let records = || step.rows.values().flat_map(|h| h.values().flatten());
    THROUGHPUT_METRICS
        .iter()
        .find(|m| records().any(|r| r.metrics.contains_key(**m)))
        .map(|m| m.to_string())
}

/// The concurrency of a record (see [`point::concurrency`]).
pub fn concurrency_of(record: &Record) -> Option<f64> {
    point::concurrency(&record.point, &record.metrics)
}

/// The series of a record: its host, plus the other axes of its point (a long-context sweep
/// over input lengths has one series per input length). Fetched files are not an axis.
pub fn series_name(record: &Record) -> String {
    series_of(&record.column(), &record.point)
}

/// The series of a point of `column` (a host, or `host/variant`): see [`series_name`].
pub fn series_of(column: &str, point: &IndexMap<String, Json>) -> String {
    match axes_other_than_concurrency(point) {
        axes if axes.is_empty() => column.to_string(),
        axes => format!("{column} ({axes})"),
    }
}

/// The axes of a record's point other than concurrency (and fetched files), as a label; empty
/// when there are none. ScalingStory of different hosts with the same axes are compared.
pub fn other_axes(record: &Record) -> String {
    axes_other_than_concurrency(&record.point)
}

fn axes_other_than_concurrency(point: &IndexMap<String, Json>) -> String {
    let others: IndexMap<String, Json> = point
        .iter()
        .filter(|(k, _)| *k != "concurrency" && *k != "file")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    match others.is_empty() {
        true => String::new(),
        false => point::label(&others),
    }
}

/// One concurrency level of a series: the records of one row of one host.
pub struct Row<'s, 'a> {
    pub concurrency: f64,
    pub records: &'s Vec<&'a Record>,
}

/// A step's rows per series, keyed by (series name, host) in the order first seen, each
/// series' levels in row order (several may share a concurrency); rows without a concurrency
/// are left out, as are a capacity search's candidates the series did not probe. What the
/// scaling story and the SLO capacity walk.
pub fn series_rows<'s, 'a>(step: &'s StepRecords<'a>) -> IndexMap<(String, String), Vec<Row<'s, 'a>>> {
    let mut series: IndexMap<(String, String), Vec<Row>> = IndexMap::new();
    for by_column in step.rows.values() {
        for (column, records) in by_column {
            let Some(first) = records.first() else { continue };
            if records.iter().all(|r| r.is_not_probed()) {
                continue;
            }
            let Some(concurrency) = records.iter().find_map(|r| concurrency_of(r)) else {
                continue;
            };
            series
                .entry((series_of(column, &first.point), column.clone()))
                .or_default()
                .push(Row { concurrency, records });
        }
    }
    series
}

/// The scaling stories of one step, one per series with at least two levels, in the order of
/// `hosts`; none when the step has no concurrency axis or no throughput.
pub fn stories(step: &StepRecords, table_metric: &str, hosts: &[String]) -> Vec<ScalingStory> {
    let Some(metric) = metric_for(step, table_metric) else {
        return Vec::new();
    };
    let mut stories: Vec<ScalingStory> = Vec::new();
    for ((name, host), rows) in series_rows(step) {
        let levels: Vec<Level> = rows
            .iter()
            .filter_map(|row| {
                let outcome = match cell(Some(row.records), &metric) {
                    Cell::Value { value, .. } => Outcome::Measured(value),
                    Cell::Skipped { reason } => Outcome::stopped("skipped", reason),
                    Cell::Failed { reason } => Outcome::stopped("failed", reason),
                    Cell::Invalid { reason, .. } => Outcome::stopped("invalid", reason),
                    Cell::Missing
                    | Cell::Lost { .. }
                    | Cell::RecordLost { .. }
                    | Cell::NotRun { .. }
                    | Cell::NoRecord { .. }
                    | Cell::Unknown { .. }
                    | Cell::Label { .. }
                    | Cell::Ratio { .. }
                    | Cell::Change { .. }
                    | Cell::Check { .. } => return None,
                };
                Some(Level {
                    concurrency: row.concurrency,
                    outcome,
                })
            })
            .collect();
        if levels.len() >= 2 {
            stories.push(analyze(&name, &host, &metric, levels));
        }
    }
    stories.sort_by_key(|s| hosts.iter().position(|h| *h == s.host));
    stories
}

/// The story in lines of text, for the terminal and Markdown.
pub fn describe(stories: &[ScalingStory]) -> Vec<String> {
    let Some(first) = stories.first() else {
        return Vec::new();
    };
    let mut lines = vec![format!("scaling of {} with concurrency:", first.metric)];
    lines.extend(stories.iter().map(|s| format!("{}: {}", s.name, sentence(s))));
    lines
}

/// `1→4 ×3.15 (79% efficient), …; knee at C=16 (…); limit: C=256 skipped (…)`.
pub fn sentence(s: &ScalingStory) -> String {
    let steps: Vec<String> = s
        .steps
        .iter()
        .map(|st| {
            format!(
                "{}→{} ×{:.2} ({:.0}% efficient)",
                c(st.from),
                c(st.to),
                st.gain,
                st.efficiency * 100.0
            )
        })
        .collect();
    let mut parts = Vec::new();
    if !steps.is_empty() {
        parts.push(steps.join(", "));
    }
    for l in &s.left_out {
        parts.push(format!(
            "C={} left out ({}: {})",
            c(l.concurrency),
            l.status,
            l.reason
        ));
    }
    parts.push(knee_text(s));
    parts.push(match &s.limit {
        Some(l) => format!(
            "capacity limit: C={} {} ({})",
            c(l.concurrency),
            l.status,
            l.reason
        ),
        None => match s.last_measured {
            Some(top) => format!("no capacity limit reached up to C={}", c(top)),
            None => "nothing measured".to_string(),
        },
    });
    parts.join("; ")
}

fn knee_text(s: &ScalingStory) -> String {
    match (&s.knee, s.steps.last(), s.last_measured) {
        (Some(k), _, _) => format!(
            "knee at C={} ({} {}; {:+.0}% per doubling beyond)",
            c(k.concurrency),
            format_number(k.throughput),
            short_metric(&s.metric),
            k.per_doubling * 100.0
        ),
        (None, Some(last), Some(top)) => format!(
            "no knee up to C={} (still {:+.0}% per doubling)",
            c(top),
            last.per_doubling * 100.0
        ),
        _ => "no knee: too few levels measured".to_string(),
    }
}

fn short_metric(metric: &str) -> &str {
    match metric {
        "output_throughput" => "output tok/s",
        "total_token_throughput" => "total tok/s",
        "request_throughput" => "req/s",
        other => other,
    }
}

fn c(concurrency: f64) -> String {
    format_number(concurrency)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(points: &[(f64, f64)]) -> Vec<Level> {
        points
            .iter()
            .map(|&(c, t)| Level {
                concurrency: c,
                outcome: Outcome::Measured(t),
            })
            .collect()
    }

    fn stopped(c: f64, status: &str, reason: &str) -> Level {
        Level {
            concurrency: c,
            outcome: Outcome::Stopped {
                status: status.into(),
                reason: reason.into(),
            },
        }
    }

    #[test]
    fn efficiency_and_gain_per_doubling() {
        // The published Blackwell baseline: 172, 542, 1647, 2156 tok/s at C = 1, 4, 16, 32.
        let s = analyze(
            "blackwell",
            "blackwell",
            "output_throughput",
            measured(&[(1., 172.), (4., 542.), (16., 1647.), (32., 2156.)]),
        );
        let st = &s.steps[0];
        assert_eq!((st.from, st.to), (1.0, 4.0));
        assert!((st.gain - 542.0 / 172.0).abs() < 1e-9);
        assert!(
            (st.efficiency - 542.0 / 172.0 / 4.0).abs() < 1e-9,
            "{}",
            st.efficiency
        );
        assert!((st.per_doubling - ((542.0f64 / 172.0).sqrt() - 1.0)).abs() < 1e-9);
        assert!((s.steps[2].per_doubling - (2156.0 / 1647.0 - 1.0)).abs() < 1e-9);
        assert_eq!(s.knee, None, "still +31% per doubling at the top");
        assert_eq!(s.limit, None);
        assert_eq!(s.last_measured, Some(32.0));
        assert!(
            sentence(&s).contains("no knee up to C=32 (still +31% per doubling)"),
            "{}",
            sentence(&s)
        );
        assert!(
            sentence(&s).starts_with("1→4 ×3.15 (79% efficient)"),
            "{}",
            sentence(&s)
        );
    }

    #[test]
    fn the_knee_is_the_first_level_where_doubling_gains_under_ten_percent() {
        // 32 → 64 gains 9% in one doubling; 64 → 256 is two doublings for +15% (7% each).
        let levels = measured(&[(16., 1000.), (32., 1500.), (64., 1635.), (256., 1880.)]);
        let s = analyze("h", "h", "output_throughput", levels);
        let knee = s.knee.clone().unwrap();
        assert_eq!(knee.concurrency, 32.0);
        assert_eq!(knee.throughput, 1500.0);
        assert!((knee.per_doubling - 0.09).abs() < 1e-9);
        assert!((s.steps[2].per_doubling - (1880.0f64 / 1635.0).sqrt() + 1.0).abs() < 1e-9);
        // Exactly +10% per doubling is not yet saturated.
        let s = analyze("h", "h", "m", measured(&[(1., 100.), (2., 110.), (4., 115.)]));
        assert_eq!(s.knee.unwrap().concurrency, 2.0);
        // Throughput that falls is past the knee.
        let s = analyze("h", "h", "m", measured(&[(1., 100.), (2., 90.)]));
        assert_eq!(s.knee.unwrap().concurrency, 1.0);
    }

    #[test]
    fn the_capacity_limit_is_the_first_level_not_measured() {
        let mut levels = measured(&[(1., 100.), (4., 380.), (16., 1200.)]);
        levels.push(stopped(
            1024.,
            "skipped",
            "concurrency * 2000 > kv_capacity_tokens",
        ));
        levels.push(stopped(64., "failed", "exit code 1"));
        let s = analyze("a6000", "a6000", "output_throughput", levels);
        let limit = s.limit.clone().unwrap();
        assert_eq!((limit.concurrency, limit.status.as_str()), (64.0, "failed"));
        assert!(
            sentence(&s).ends_with("capacity limit: C=64 failed (exit code 1)"),
            "{}",
            sentence(&s)
        );
        assert_eq!(s.steps.len(), 2);
    }

    #[test]
    fn invalid_levels_are_left_out_unless_nothing_valid_follows() {
        let mut levels = measured(&[(1., 100.), (16., 1200.)]);
        levels.push(stopped(4., "invalid", "2 of 12 requests failed"));
        levels.push(stopped(64., "invalid", "all requests timed out"));
        let s = analyze("h", "h", "m", levels);
        assert_eq!(s.left_out.len(), 1);
        assert_eq!(s.left_out[0].concurrency, 4.0);
        assert_eq!(s.limit.clone().unwrap().concurrency, 64.0);
        assert_eq!(s.steps.len(), 1, "1 → 16 over the invalid level");
        assert!(
            sentence(&s).contains("C=4 left out (invalid: 2 of 12 requests failed)"),
            "{}",
            sentence(&s)
        );
    }

    #[test]
    fn unmeasurable_steps_are_left_out() {
        let s = analyze(
            "h",
            "h",
            "m",
            measured(&[(1., 0.), (2., 10.), (2., 12.), (4., 24.)]),
        );
        assert_eq!(s.steps.len(), 1, "0 → 10 has no ratio; the second C=2 wins");
        assert_eq!(s.steps[0].gain, 2.0);
        let s = analyze("h", "h", "m", measured(&[(4., 10.)]));
        assert!(sentence(&s).contains("too few levels"));
    }
}
