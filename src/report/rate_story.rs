//! What a sweep over offered request rates tells, per host (and other axes): the requests
//! served against those offered at each rate, the first rate where the host falls behind (less
//! than [`KEEPS_UP`] of the offered rate served), the first where its p99 TTFT departs (over
//! [`DEPARTS`] times its value at the lowest rate), and, under the run's limits, the highest
//! rate whose measurement meets them. The concurrency story cannot tell these apart: a rate
//! sweep's points share one concurrency cap. The charts label the same two rates.

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value as Json;

use super::cell::format_number;
use super::steps::StepRecords;
use crate::config::slo::Slo;
use crate::events::{Record, RecordStatus};

/// Served below this share of the rate offered, a host has fallen behind its load.
pub const KEEPS_UP: f64 = 0.95;
/// A p99 TTFT above this many times the one at the lowest rate offered has departed from it.
pub const DEPARTS: f64 = 2.0;

/// One series' story across the rates it was offered.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RateStory {
    /// The host, with the other axes of its points when there are any.
    pub name: String,
    /// Each rate measured, lowest first.
    pub levels: Vec<RateLevel>,
    /// The first rate served below [`KEEPS_UP`] of it.
    pub falls_behind: Option<f64>,
    /// The first rate whose p99 TTFT is over [`DEPARTS`] times the lowest rate's.
    pub latency_departs: Option<f64>,
    /// The highest rate within the run's limits, when it states any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within_slo: Option<RateWithin>,
}

/// The highest rate whose measurement meets `limits`; none when no rate does.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RateWithin {
    pub limits: Slo,
    pub rate: Option<f64>,
}

/// One rate's measurement: the mean over its valid records.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RateLevel {
    pub offered: f64,
    /// `request_throughput`.
    pub served: Option<f64>,
    pub p99_ttft_ms: Option<f64>,
}

/// The rate stories of a step whose points offer at least two request rates, one per series,
/// in the order of `hosts`.
pub fn stories(step: &StepRecords, hosts: &[String], limits: &Slo) -> Vec<RateStory> {
    placed(step, hosts, limits).into_iter().map(|(_, s)| s).collect()
}

/// The same step's rate stories in several runs (`compare`), each named `host @run`: per host,
/// each run's in the runs' order, all judged by the same `limits` (the first run's).
pub fn across(steps: &[(&str, Option<&StepRecords>)], hosts: &[String], limits: &Slo) -> Vec<RateStory> {
    let mut all: Vec<((usize, usize), RateStory)> = Vec::new();
    for (run, (label, step)) in steps.iter().enumerate() {
        for (place, mut story) in step.map(|s| placed(s, hosts, limits)).unwrap_or_default() {
            story.name = format!("{} @{label}", story.name);
            all.push(((place, run), story));
        }
    }
    all.sort_by_key(|(key, _)| *key);
    all.into_iter().map(|(_, s)| s).collect()
}

/// [`stories`], each with its column's place in `hosts` (unknown columns last).
fn placed(step: &StepRecords, hosts: &[String], limits: &Slo) -> Vec<(usize, RateStory)> {
    let mut series: IndexMap<(String, String), Vec<Offered>> = IndexMap::new();
    for by_column in step.rows.values() {
        for (column, records) in by_column {
            let Some(offered) = records.first().and_then(|r| rate_of(r)) else {
                continue;
            };
            let others = crate::point::series_label(&records[0].point, "request_rate");
            let name = crate::point::series_name(column, &others);
            let measured = records.iter().copied().filter(|r| is_measured(r)).collect();
            let levels = series.entry((name, column.clone())).or_default();
            levels.push((offered, measured));
        }
    }
    let mut stories: Vec<(usize, RateStory)> = series
        .into_iter()
        .filter(|(_, levels)| levels.len() >= 2)
        .map(|((name, column), levels)| {
            let place = hosts.iter().position(|h| *h == column).unwrap_or(usize::MAX);
            (place, story(name, levels, limits))
        })
        .collect();
    stories.sort_by_key(|(place, _)| *place);
    stories
}

/// A rate offered and its measured records.
type Offered<'a> = (f64, Vec<&'a Record>);

/// The request rate a record's point offered.
fn rate_of(record: &Record) -> Option<f64> {
    record.point.get("request_rate").and_then(Json::as_f64)
}

fn is_measured(record: &Record) -> bool {
    record.status == RecordStatus::Ok && !record.is_invalid()
}

fn story(name: String, mut levels: Vec<Offered>, limits: &Slo) -> RateStory {
    levels.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mean = |records: &[&Record], metric: &str| {
        let values: Vec<f64> = records
            .iter()
            .filter_map(|r| r.metrics.get(metric)?.as_f64())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let measured: Vec<RateLevel> = levels
        .iter()
        .filter(|(_, records)| !records.is_empty())
        .map(|(offered, records)| RateLevel {
            offered: *offered,
            served: mean(records, "request_throughput"),
            p99_ttft_ms: mean(records, "p99_ttft_ms"),
        })
        .collect();
    let falls_behind = measured
        .iter()
        .find(|l| l.served.is_some_and(|s| s < KEEPS_UP * l.offered))
        .map(|l| l.offered);
    let base = measured.iter().find_map(|l| l.p99_ttft_ms).filter(|b| *b > 0.0);
    let latency_departs = base.and_then(|base| {
        let above = |l: &&RateLevel| l.p99_ttft_ms.is_some_and(|t| t > DEPARTS * base);
        measured.iter().find(above).map(|l| l.offered)
    });
    let within_slo = (!limits.is_empty()).then(|| {
        let metrics = |records: &[&Record]| records.iter().map(|r| r.metrics.clone()).collect::<Vec<_>>();
        let meets = |(_, records): &&Offered| limits.judge(&metrics(records)).is_ok();
        RateWithin {
            limits: limits.clone(),
            rate: levels.iter().rev().find(meets).map(|(offered, _)| *offered),
        }
    });
    RateStory {
        name,
        levels: measured,
        falls_behind,
        latency_departs,
        within_slo,
    }
}

/// The lines under a table: a heading, then a line per series (none without stories).
pub fn describe(stories: &[RateStory]) -> Vec<String> {
    if stories.is_empty() {
        return Vec::new();
    }
    let mut lines = vec!["requests served (req/s) at each offered rate:".to_string()];
    lines.extend(stories.iter().map(|s| format!("{}: {}", s.name, sentence(s))));
    lines
}

/// `1→1 (100%), 8→6.1 (76%); falls behind at 8 req/s; p99 TTFT departs at 4 req/s (412 ms,
/// ×2.3 of 1 req/s); within SLO up to 2 req/s`.
fn sentence(s: &RateStory) -> String {
    let levels: Vec<String> = s
        .levels
        .iter()
        .map(|l| match l.served {
            Some(served) => format!(
                "{}→{} ({:.0}%)",
                format_number(l.offered),
                format_number(served),
                100.0 * served / l.offered
            ),
            None => format!("{}→?", format_number(l.offered)),
        })
        .collect();
    let mut parts = vec![levels.join(", ")];
    parts.push(match s.falls_behind {
        Some(rate) => format!("falls behind at {} req/s", format_number(rate)),
        None => format!("keeps up at every rate (≥ {:.0}% served)", KEEPS_UP * 100.0),
    });
    let base = s.levels.iter().find(|l| l.p99_ttft_ms.is_some());
    parts.push(match (s.latency_departs, base) {
        (Some(rate), Some(base)) => {
            let at = s
                .levels
                .iter()
                .find(|l| l.offered == rate)
                .and_then(|l| l.p99_ttft_ms);
            let ttft = at.unwrap_or_default();
            let first = base.p99_ttft_ms.unwrap_or(1.0);
            format!(
                "p99 TTFT departs at {} req/s ({} ms, ×{:.1} of {} req/s)",
                format_number(rate),
                format_number(ttft),
                ttft / first,
                format_number(base.offered)
            )
        }
        (None, Some(_)) => format!("p99 TTFT stays within ×{DEPARTS} of the lowest rate's"),
        (_, None) => "no p99 TTFT recorded".to_string(),
    });
    if let Some(RateWithin { limits, rate }) = &s.within_slo {
        parts.push(match rate {
            Some(rate) => format!("within SLO ({limits}) up to {} req/s", format_number(*rate)),
            None => format!("no rate within SLO ({limits})"),
        });
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::events::PointRun;

    fn record(rate: f64, served: f64, p99: f64) -> Record {
        Record {
            run: "r".into(),
            host: "a".into(),
            step: "s".into(),
            step_index: 0,
            point: [("request_rate".to_string(), json!(rate))].into_iter().collect(),
            metrics: json!({"request_throughput": served, "p99_ttft_ms": p99})
                .as_object()
                .unwrap()
                .clone(),
            status: RecordStatus::Ok,
            reason: None,
            at: PointRun {
                attempt: 1,
                repetition: 1,
            },
            variant: None,
            command: None,
        }
    }

    #[test]
    fn where_a_host_falls_behind_and_its_latency_departs_and_the_slo_holds() {
        let records = [
            record(1.0, 1.0, 100.0),
            record(4.0, 3.9, 150.0),
            record(8.0, 6.0, 250.0),
            record(16.0, 6.1, 900.0),
        ];
        let groups = super::super::steps::group(&records);
        let slo = Slo::parse("p99_ttft_ms=200").unwrap();
        let stories = stories(&groups[0], &["a".to_string()], &slo);
        assert_eq!(stories.len(), 1);
        let s = &stories[0];
        assert_eq!((s.falls_behind, s.latency_departs), (Some(8.0), Some(8.0)));
        assert_eq!(s.within_slo.as_ref().map(|w| w.rate), Some(Some(4.0)));
        assert_eq!(
            describe(&stories)[1],
            "a: 1→1 (100%), 4→3.90 (98%), 8→6 (75%), 16→6.10 (38%); falls behind at 8 req/s; \
             p99 TTFT departs at 8 req/s (250 ms, ×2.5 of 1 req/s); within SLO (p99_ttft_ms ≤ 200) \
             up to 4 req/s"
        );
    }
}
