//! Latency limits a host must meet ("service-level objectives"): the playbook's `slo:` map, or
//! `--slo METRIC=LIMIT,...` on `show`, `compare` and `report`. Each limit is an upper bound on a
//! record metric (`p99_ttft_ms: 2000`); the report finds, per host and sweep, the highest
//! concurrency whose measurement meets every limit (`report/capacity.rs`).
//!
//! ```yaml
//! slo: {p99_ttft_ms: 2000, median_tpot_ms: 50}
//! ```
//!
//! The limits are resolved when the playbook loads (errors at `file:line:col`) and kept in the
//! run's manifest, so `show` judges a run directory by them later; `--slo` judges any run,
//! old ones included, by other limits.

use std::fmt;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use serde_saphyr::Spanned;

use super::{Config, ConfigError};

/// As written in the playbook: metric → limit.
pub type SloSpec = IndexMap<Spanned<String>, Spanned<Json>>;

/// Upper bounds on record metrics, in the order written; empty when none are stated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Slo {
    pub limits: IndexMap<String, f64>,
}

/// The environment variable that hands a playbook's limits to the commands of its sweeps, in
/// `--slo`'s form: `rigrun bench` there judges goodput by them when not given `--slo`.
pub const SLO_ENV: &str = "RIGRUN_SLO";

impl Slo {
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// The limits as `--slo` takes them: `p99_ttft_ms=2000,median_tpot_ms=50`.
    pub fn to_flag(&self) -> String {
        let parts: Vec<String> = self.limits.iter().map(|(m, l)| format!("{m}={l}")).collect();
        parts.join(",")
    }

    /// `--slo p99_ttft_ms=2000,median_tpot_ms=50`: the message names the part that is wrong.
    pub fn parse(text: &str) -> Result<Slo, String> {
        let mut limits = IndexMap::new();
        for part in text.split(',').map(str::trim) {
            let Some((metric, limit)) = part.split_once('=') else {
                return Err(format!(
                    "`{part}` is not METRIC=LIMIT; write it like p99_ttft_ms=2000,median_tpot_ms=50"
                ));
            };
            let metric = metric.trim();
            check_metric(metric).map_err(|why| format!("`{part}`: {why}"))?;
            let limit = limit
                .trim()
                .parse::<f64>()
                .map_err(|_| "not a number".to_string())
                .and_then(check_limit)
                .map_err(|why| format!("`{part}`: the limit is {why}"))?;
            limits.insert(metric.to_string(), limit);
        }
        Ok(Slo { limits })
    }
}

impl Slo {
    /// Whether one measurement (the records a point's attempt printed) meets every limit: each
    /// record valid, each limited metric recorded and within its limit in every record that
    /// has it. The error says why not, the first reason found.
    pub fn judge(&self, records: &[serde_json::Map<String, Json>]) -> Result<(), String> {
        if records.is_empty() {
            return Err("it printed no record".into());
        }
        if let Some(bad) = records
            .iter()
            .find(|r| r.get("valid") == Some(&Json::Bool(false)))
        {
            let problems = bad.get("problems").map(crate::point::value_text);
            return Err(format!("invalid ({})", problems.unwrap_or_default()));
        }
        for (metric, &limit) in &self.limits {
            let values: Vec<f64> = records.iter().filter_map(|r| r.get(metric)?.as_f64()).collect();
            if values.is_empty() {
                return Err(format!("no {metric} recorded"));
            }
            if let Some(v) = values.into_iter().find(|v| *v > limit) {
                return Err(format!("{metric} {} > {}", short(v), short(limit)));
            }
        }
        Ok(())
    }
}

/// A number as a person reads it in a reason: `2000`, `2431.5`.
fn short(x: f64) -> String {
    let rounded = (x * 10.0).round() / 10.0;
    match rounded.fract() == 0.0 {
        true => format!("{}", rounded as i64),
        false => format!("{rounded}"),
    }
}

/// `p99_ttft_ms ≤ 2000, median_tpot_ms ≤ 50`.
impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.limits.iter().map(|(m, l)| format!("{m} ≤ {l}")).collect();
        f.write_str(&parts.join(", "))
    }
}

/// A metric name as records spell them: letters, digits, `_`, `.` and `-`.
fn check_metric(metric: &str) -> Result<(), String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    match metric {
        "" => Err("no metric name before `=`".into()),
        m if !m.chars().all(fits) => Err(format!(
            "`{m}` is not a metric name (letters, digits, `_`, `.`, `-`)"
        )),
        _ => Ok(()),
    }
}

/// A limit: a finite number above 0 (a latency bound of 0 or less can never be met).
fn check_limit(limit: f64) -> Result<f64, String> {
    match limit.is_finite() && limit > 0.0 {
        true => Ok(limit),
        false => Err(format!("{limit}, not a number above 0")),
    }
}

/// The playbook's `slo:`, or every mistake in it, each at its `file:line:col`.
pub fn resolve(config: &Config) -> Result<Slo, Vec<ConfigError>> {
    let at = |place: &serde_saphyr::Location, message: String| {
        ConfigError::at(&config.playbook_path, &config.playbook_text, place, message)
    };
    let mut limits = IndexMap::new();
    let mut errors = Vec::new();
    for (metric, limit) in &config.playbook.slo {
        if let Err(why) = check_metric(&metric.value) {
            errors.push(at(&metric.referenced, format!("slo: {why}")));
            continue;
        }
        let number = limit
            .value
            .as_f64()
            .ok_or_else(|| format!("`{}` is not a number", crate::point::value_text(&limit.value)))
            .and_then(check_limit);
        match number {
            Ok(n) => {
                limits.insert(metric.value.clone(), n);
            }
            Err(why) => errors.push(at(
                &limit.referenced,
                format!(
                    "slo: {}: the limit is {why} (an upper bound, e.g. p99_ttft_ms: 2000)",
                    metric.value
                ),
            )),
        }
    }
    match errors.is_empty() {
        true => Ok(Slo { limits }),
        false => Err(errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_form_reads_metrics_and_limits_in_order() {
        let slo = Slo::parse("p99_ttft_ms=2000, median_tpot_ms=50.5").unwrap();
        assert_eq!(
            slo.limits.into_iter().collect::<Vec<_>>(),
            [
                ("p99_ttft_ms".to_string(), 2000.0),
                ("median_tpot_ms".to_string(), 50.5)
            ]
        );
    }

    #[test]
    fn bad_parts_are_named() {
        let err = Slo::parse("p99_ttft_ms=2000,median_tpot_ms").unwrap_err();
        assert!(err.starts_with("`median_tpot_ms` is not METRIC=LIMIT"), "{err}");
        let err = Slo::parse("p99_ttft_ms=fast").unwrap_err();
        assert_eq!(err, "`p99_ttft_ms=fast`: the limit is not a number");
        let err = Slo::parse("p99_ttft_ms=0").unwrap_err();
        assert!(err.contains("not a number above 0"), "{err}");
        let err = Slo::parse("=5").unwrap_err();
        assert!(err.contains("no metric name"), "{err}");
        let err = Slo::parse("p 99=5").unwrap_err();
        assert!(err.contains("is not a metric name"), "{err}");
    }

    #[test]
    fn a_measurement_meets_the_limits_only_valid_and_recorded_and_within_each() {
        let slo = Slo::parse("p99_ttft_ms=2000,median_tpot_ms=50").unwrap();
        let record = |v: Json| v.as_object().unwrap().clone();
        let good = record(serde_json::json!({"p99_ttft_ms": 1999.0, "median_tpot_ms": 50}));
        assert_eq!(slo.judge(std::slice::from_ref(&good)), Ok(()));
        let slow = record(serde_json::json!({"p99_ttft_ms": 2431.54, "median_tpot_ms": 20}));
        assert_eq!(
            slo.judge(&[good.clone(), slow]),
            Err("p99_ttft_ms 2431.5 > 2000".into())
        );
        let partial = record(serde_json::json!({"p99_ttft_ms": 10}));
        assert_eq!(slo.judge(&[partial]), Err("no median_tpot_ms recorded".into()));
        let mut invalid = good;
        invalid.insert("valid".into(), false.into());
        invalid.insert("problems".into(), serde_json::json!(["1 request failed"]));
        assert!(slo.judge(&[invalid]).unwrap_err().starts_with("invalid ("));
        assert_eq!(slo.judge(&[]), Err("it printed no record".into()));
    }

    #[test]
    fn limits_read_as_upper_bounds() {
        let slo = Slo::parse("p99_ttft_ms=2000,median_tpot_ms=50.5").unwrap();
        assert_eq!(slo.to_string(), "p99_ttft_ms ≤ 2000, median_tpot_ms ≤ 50.5");
    }
}
