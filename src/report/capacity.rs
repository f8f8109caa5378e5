//! Capacity under an SLO: per host (and other axes) of a concurrency sweep, the highest
//! concurrency whose measurement meets every latency limit, the table's metric there, its ratio
//! to the baseline host's, and the first level above it that breaks a limit (and which). A level
//! meets the limits only with a valid measurement of every limited metric: skipped, failed,
//! invalid, or a limited metric not recorded, all fail. Levels come from the scaling code's
//! series (`scaling::series_rows`), so the two agree on axis, order and series.

use serde::Serialize;

use super::cell::{cell, format_number, Cell};
use super::metric_names::{step_names, suggestion};
use super::scaling::{by_concurrency, other_axes, series_rows, Row};
use super::search::SearchSummary;
use super::steps::StepRecords;
use crate::config::slo::Slo;

/// The SLO capacity of one sweep table: the limits, and a [`Capacity`] per series.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SloCapacity {
    pub limits: Slo,
    /// The metric whose value at the capacity point is reported (the table's).
    pub metric: String,
    /// The host the ratios divide by.
    pub baseline: Option<String>,
    pub series: Vec<Capacity>,
    /// Limits on metrics no record of the step has (a misspelt name, or a benchmark that does
    /// not measure it), each with the closest name it has: the capacity cannot be judged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unrecorded: Vec<String>,
    /// What the sweep's capacity search found, when it made one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchSummary>,
}

/// One series' capacity under the limits.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Capacity {
    /// The host, with the other axes of its points when there are any.
    pub name: String,
    pub host: String,
    /// The other axes as a label (empty when none): series of the same axes are compared.
    #[serde(skip)]
    pub axes: String,
    /// The highest level within every limit; none when no level is.
    pub within: Option<Within>,
    /// The value at `within` over the baseline host's, for the other hosts.
    pub ratio: Option<f64>,
    /// What `ratio` divides by when it is not the table's baseline host: across runs, the
    /// same series in the first run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_of: Option<String>,
    /// The first level above `within` (or the lowest, when none is within) that breaks a limit.
    pub breach: Option<Breach>,
}

/// The capacity point.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Within {
    pub concurrency: f64,
    /// The table's metric there; none when that level did not record it.
    pub value: Option<f64>,
}

/// A level that does not meet the limits, and the first reason why.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Breach {
    pub concurrency: f64,
    /// The limited metric it breaks or lacks; none when the level has no measurement at all
    /// (skipped, failed, invalid).
    pub metric: Option<String>,
    /// What it measured of that metric, when it did.
    pub value: Option<f64>,
    pub limit: Option<f64>,
    pub reason: String,
}

impl SloCapacity {
    /// The capacity of every series of a step under `limits`, in the order of `hosts`, with
    /// ratios to the first host; none without limits or without a concurrency axis.
    pub fn of(step: &StepRecords, metric: &str, hosts: &[String], limits: &Slo) -> Option<SloCapacity> {
        if limits.is_empty() {
            return None;
        }
        let mut series: Vec<Capacity> = series_rows(step)
            .into_iter()
            .filter_map(|((name, host), rows)| capacity(name, host, rows, metric, limits))
            .collect();
        if series.is_empty() {
            return None;
        }
        series.sort_by_key(|s| hosts.iter().position(|h| *h == s.host));
        let mut capacity = SloCapacity {
            limits: limits.clone(),
            metric: metric.to_string(),
            baseline: None,
            series,
            unrecorded: unrecorded(&[step], limits),
            search: None,
        };
        if let Some(first) = hosts.first() {
            capacity.rebase(first);
        }
        Some(capacity)
    }

    /// The capacity a search over another axis than concurrency found (a request rate): told
    /// by the search alone, as the concurrency of its probes does not tell its levels apart.
    pub fn searched(limits: &Slo, metric: &str, search: SearchSummary) -> SloCapacity {
        SloCapacity {
            limits: limits.clone(),
            metric: metric.to_string(),
            baseline: None,
            series: Vec::new(),
            unrecorded: Vec::new(),
            search: Some(search),
        }
    }

    /// Ratios against `baseline`'s series of the same axes (none for the baseline itself).
    pub fn rebase(&mut self, baseline: &str) {
        let others: Vec<(String, String)> = self
            .series
            .iter()
            .filter(|s| s.host != baseline)
            .map(|s| (s.host.clone(), baseline.to_string()))
            .collect();
        self.rebase_pairs(baseline, &others);
    }

    /// Ratios of each (column, its baseline) pair's series of the same axes; `name` is what the
    /// sentences call the baseline. ScalingStory of columns in no pair get none.
    pub fn rebase_pairs(&mut self, name: &str, pairs: &[(String, String)]) {
        let base_of = |host: &str, axes: &str| {
            let (_, base) = pairs.iter().find(|(c, _)| c == host)?;
            self.series
                .iter()
                .find(|s| s.host == *base && s.axes == axes)
                .and_then(|s| s.within.as_ref()?.value)
        };
        let ratios: Vec<Option<f64>> = self
            .series
            .iter()
            .map(
                |s| match (s.within.as_ref().and_then(|w| w.value), base_of(&s.host, &s.axes)) {
                    (Some(v), Some(b)) if b != 0.0 => Some(v / b),
                    _ => None,
                },
            )
            .collect();
        for (s, ratio) in self.series.iter_mut().zip(ratios) {
            s.ratio = ratio;
        }
        self.baseline = Some(name.to_string());
    }

    /// Across runs: every run's step judged by the same `limits` (the first run's), each series
    /// named with its run (`a @<time>`) and, after the first run, its ratio to the same host's
    /// series in the first run. `steps` pairs each run's label with its step, when it has it.
    pub fn across(
        steps: &[(&str, Option<&StepRecords>)],
        metric: &str,
        hosts: &[String],
        limits: &Slo,
    ) -> Option<SloCapacity> {
        let mut series: Vec<(usize, Capacity)> = Vec::new();
        for (run, (label, step)) in steps.iter().enumerate() {
            let Some(capacity) = step.and_then(|s| SloCapacity::of(s, metric, hosts, limits)) else {
                continue;
            };
            series.extend(capacity.series.into_iter().map(|mut s| {
                s.name = format!("{} @{label}", s.name);
                s.ratio = None;
                (run, s)
            }));
        }
        // Per host, its runs in order; ratios against the host's series of the first run.
        series.sort_by_key(|(run, s)| (hosts.iter().position(|h| *h == s.host), *run));
        let firsts: Vec<Capacity> = series
            .iter()
            .filter(|(run, _)| *run == 0)
            .map(|(_, s)| s.clone())
            .collect();
        let series: Vec<Capacity> = series
            .into_iter()
            .map(|(run, mut s)| {
                let first = firsts.iter().find(|f| f.host == s.host && f.axes == s.axes);
                if let (true, Some(first)) = (run > 0, first) {
                    let value = |c: &Capacity| c.within.as_ref().and_then(|w| w.value);
                    s.ratio = value(&s)
                        .zip(value(first))
                        .filter(|(_, b)| *b != 0.0)
                        .map(|(v, b)| v / b);
                    s.ratio_of = Some(first.name.clone());
                }
                s
            })
            .collect();
        let judged: Vec<&StepRecords> = steps.iter().filter_map(|(_, s)| *s).collect();
        let unrecorded = unrecorded(&judged, limits);
        (!series.is_empty()).then(|| SloCapacity {
            limits: limits.clone(),
            metric: metric.to_string(),
            baseline: None,
            series,
            unrecorded,
            search: None,
        })
    }

    /// The headline: `within SLO (p99_ttft_ms ≤ 2000): a: concurrency=64 at 2411
    /// output_throughput; b: concurrency=16 at 318 output_throughput (×0.13 of a)`.
    pub fn headline(&self) -> String {
        if !self.unrecorded.is_empty() {
            return format!(
                "within SLO ({}): cannot be judged: no record has {}",
                self.limits,
                self.unrecorded.join(", nor ")
            );
        }
        if let (true, Some(search)) = (self.series.is_empty(), &self.search) {
            return format!(
                "within SLO ({}), by a search of {}: {}",
                self.limits,
                search.axis,
                search.sentence()
            );
        }
        let hosts: Vec<String> = self.series.iter().map(|s| self.sentence(s)).collect();
        format!("within SLO ({}): {}", self.limits, hosts.join("; "))
    }

    /// A line per series with a level above its capacity that breaks a limit (the first):
    /// `b: above concurrency=16, concurrency=32 breaks p99_ttft_ms (2500 > 2000)`.
    /// A concurrency search's findings come first: `found by a search: blackwell:
    /// concurrency=141 (142 did not; 13 probes of 160 candidates); …`.
    pub fn breaches(&self) -> Vec<String> {
        let search = match (&self.search, self.series.is_empty()) {
            (Some(search), false) => Some(format!("found by a search: {}", search.sentence())),
            _ => None,
        };
        let breaches = self.series.iter().filter_map(|s| {
            let b = s.breach.as_ref()?;
            let level = format!("concurrency={}", format_number(b.concurrency));
            Some(match &s.within {
                Some(w) => format!(
                    "{}: above concurrency={}, {level} {}",
                    s.name,
                    format_number(w.concurrency),
                    b.reason
                ),
                None => format!("{}: {level}, the lowest, {}", s.name, b.reason),
            })
        });
        search.into_iter().chain(breaches).collect()
    }

    fn sentence(&self, s: &Capacity) -> String {
        let Some(w) = &s.within else {
            return format!("{}: no point within SLO", s.name);
        };
        let at = match w.value {
            Some(v) => format!("at {} {}", format_number(v), self.metric),
            None => format!("({} not recorded there)", self.metric),
        };
        let ratio = match (s.ratio, s.ratio_of.as_ref().or(self.baseline.as_ref())) {
            (Some(r), Some(base)) => format!(" (×{r:.2} of {base})"),
            _ => String::new(),
        };
        format!(
            "{}: concurrency={} {at}{ratio}",
            s.name,
            format_number(w.concurrency)
        )
    }
}

/// The limited metrics no record of the steps has, each with the closest one they have:
/// `p99_ttft (did you mean p99_ttft_ms?)`.
fn unrecorded(steps: &[&StepRecords], limits: &Slo) -> Vec<String> {
    let held: std::collections::BTreeSet<String> = steps.iter().flat_map(|s| step_names(s)).collect();
    let names: Vec<&str> = held.iter().map(String::as_str).collect();
    limits
        .limits
        .keys()
        .filter(|m| !held.contains(*m))
        .map(|m| match suggestion(m, &names) {
            Some(best) => format!("{m} (did you mean {best}?)"),
            None => m.clone(),
        })
        .collect()
}

/// One series' capacity; none when it has no level.
fn capacity(name: String, host: String, mut rows: Vec<Row>, metric: &str, limits: &Slo) -> Option<Capacity> {
    by_concurrency(&mut rows, |r| r.concurrency);
    let axes = other_axes(rows.first()?.records.first()?);
    let verdicts: Vec<Option<Breach>> = rows.iter().map(|r| judge(r, limits)).collect();
    let top = verdicts.iter().rposition(Option::is_none);
    let within = top.map(|i| Within {
        concurrency: rows[i].concurrency,
        value: cell(Some(rows[i].records), metric).number(),
    });
    let above = top.map_or(0, |i| i + 1);
    let breach = verdicts.into_iter().skip(above).flatten().next();
    Some(Capacity {
        name,
        host,
        axes,
        within,
        ratio: None,
        ratio_of: None,
        breach,
    })
}

/// Why a level does not meet every limit (the first limit it breaks, in the order written);
/// none when it meets them all.
fn judge(row: &Row, limits: &Slo) -> Option<Breach> {
    let breach = |metric: Option<&str>, value, limit, reason: String| Breach {
        concurrency: row.concurrency,
        metric: metric.map(str::to_string),
        value,
        limit,
        reason,
    };
    for (metric, &limit) in &limits.limits {
        let found = cell(Some(row.records), metric);
        let (status, reason) = match found {
            Cell::Value { value, .. } if value <= limit => continue,
            Cell::Value { value, .. } => {
                let why = format!(
                    "breaks {metric} ({} > {})",
                    format_number(value),
                    format_number(limit)
                );
                return Some(breach(Some(metric), Some(value), Some(limit), why));
            }
            Cell::Skipped { reason } => ("skipped", reason),
            Cell::Failed { reason } => ("failed", reason),
            Cell::Invalid { reason, .. } => ("invalid", reason),
            _ => {
                let why = format!(
                    "has no {metric} recorded, so it does not meet {metric} ≤ {}",
                    format_number(limit)
                );
                return Some(breach(Some(metric), None, Some(limit), why));
            }
        };
        return Some(breach(
            None,
            None,
            None,
            format!("is not within SLO: {status} ({reason})"),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Record, RecordStatus};
    use crate::report::steps::group;
    use serde_json::{json, Value as Json};

    fn record(host: &str, c: u64, status: RecordStatus, metrics: Json) -> Record {
        crate::testutil::record(host, &[("concurrency", json!(c))], metrics, status)
    }

    /// A host whose p99 TTFT is 100 × C ms and whose throughput is 10 × C.
    fn sweep(host: &str, levels: &[u64]) -> Vec<Record> {
        levels
            .iter()
            .map(|&c| {
                let m = json!({"output_throughput": 10.0 * c as f64, "p99_ttft_ms": 100.0 * c as f64, "median_tpot_ms": 20.0});
                record(host, c, RecordStatus::Ok, m)
            })
            .collect()
    }

    fn capacity_of(records: &[Record], slo: &str) -> SloCapacity {
        let groups = group(records);
        let hosts = vec!["a".to_string(), "b".to_string()];
        SloCapacity::of(&groups[0], "output_throughput", &hosts, &Slo::parse(slo).unwrap()).unwrap()
    }

    #[test]
    fn the_highest_level_meeting_every_limit_and_the_ratio_there() {
        let mut records = sweep("a", &[1, 4, 16, 64]);
        records.extend(sweep("b", &[1, 4, 16]));
        let cap = capacity_of(&records, "p99_ttft_ms=2000,median_tpot_ms=50");
        let a = &cap.series[0];
        assert_eq!(
            a.within,
            Some(Within {
                concurrency: 16.0,
                value: Some(160.0)
            })
        );
        let breach = a.breach.clone().unwrap();
        assert_eq!(
            (breach.concurrency, breach.metric.as_deref()),
            (64.0, Some("p99_ttft_ms"))
        );
        assert_eq!(breach.reason, "breaks p99_ttft_ms (6400 > 2000)");
        assert_eq!(cap.series[1].breach, None, "b meets the limits up to its top");
        assert_eq!(cap.series[1].ratio, Some(1.0));
        assert_eq!(
            cap.headline(),
            "within SLO (p99_ttft_ms ≤ 2000, median_tpot_ms ≤ 50): a: concurrency=16 at 160 \
             output_throughput; b: concurrency=16 at 160 output_throughput (×1.00 of a)"
        );
        assert_eq!(
            cap.breaches(),
            ["a: above concurrency=16, concurrency=64 breaks p99_ttft_ms (6400 > 2000)"]
        );
    }

    #[test]
    fn breaking_one_limit_is_enough() {
        let mut records = sweep("a", &[1, 4]);
        records.push(record(
            "a",
            8,
            RecordStatus::Ok,
            json!({"output_throughput": 80.0, "p99_ttft_ms": 10.0, "median_tpot_ms": 51.0}),
        ));
        let cap = capacity_of(&records, "p99_ttft_ms=2000,median_tpot_ms=50");
        let a = &cap.series[0];
        assert_eq!(a.within.as_ref().map(|w| w.concurrency), Some(4.0));
        assert_eq!(
            a.breach.as_ref().and_then(|b| b.metric.as_deref()),
            Some("median_tpot_ms")
        );
    }

    #[test]
    fn a_level_without_a_limited_metric_does_not_meet_it() {
        let mut records = sweep("a", &[1]);
        records.push(record(
            "a",
            4,
            RecordStatus::Ok,
            json!({"output_throughput": 40.0, "p99_ttft_ms": 10.0}),
        ));
        records.push(record("a", 8, RecordStatus::Failed, json!({"exit_code": 1})));
        let cap = capacity_of(&records, "p99_ttft_ms=2000,median_tpot_ms=50");
        let a = &cap.series[0];
        assert_eq!(a.within.as_ref().map(|w| w.concurrency), Some(1.0));
        let breach = a.breach.clone().unwrap();
        assert_eq!(breach.concurrency, 4.0);
        assert_eq!(
            breach.reason,
            "has no median_tpot_ms recorded, so it does not meet median_tpot_ms ≤ 50"
        );
    }

    #[test]
    fn none_within_when_even_the_lowest_level_breaks_a_limit() {
        let mut records = sweep("a", &[4, 16]);
        records.extend(sweep("b", &[1, 4]));
        records.push(record("b", 16, RecordStatus::Skipped, json!({})));
        let cap = capacity_of(&records, "p99_ttft_ms=300");
        let (a, b) = (&cap.series[0], &cap.series[1]);
        assert_eq!(a.within, None);
        assert_eq!(a.breach.as_ref().map(|b| b.concurrency), Some(4.0));
        assert_eq!(b.ratio, None, "nothing to divide by");
        assert_eq!(
            b.breach.as_ref().map(|b| b.reason.as_str()),
            Some("breaks p99_ttft_ms (400 > 300)")
        );
        assert!(
            cap.headline()
                .contains("a: no point within SLO; b: concurrency=1 at 10"),
            "{}",
            cap.headline()
        );
        assert_eq!(
            cap.breaches()[0],
            "a: concurrency=4, the lowest, breaks p99_ttft_ms (400 > 300)"
        );
        let cap = capacity_of(&records, "p99_ttft_ms=5000");
        assert_eq!(
            cap.series[1].breach.as_ref().unwrap().reason,
            "is not within SLO: skipped (why)"
        );
    }
}
