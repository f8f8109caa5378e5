//! Expected values ("references", as ReFrame has them for HPC): a `run-sweep` step may state, per
//! host and sweep point, the value a metric should have and how far it may stray. `show`,
//! `compare` and the report mark misses; `rigrun run --check-references` exits 1 on one.
//!
//! ```yaml
//! - run-sweep:
//!     matrix: {concurrency: [1, 4, 16, 32]}
//!     references:
//!       blackwell:                                     # a host of the inventory
//!         32: {output_throughput: 2156 ±10%}           # a point by its value (one axis) ...
//!         concurrency=16: {median_ttft_ms: 250 +-20%}  # ... or as axis=value pairs
//! ```
//!
//! A tolerance is a percentage of the value (`±10%`) or an absolute amount (`±25`); `+-` and
//! `+/-` read like `±`. The references are resolved when the playbook is loaded and kept in the
//! run's manifest, so a run directory alone is enough to check them again later.

use std::fmt;
use std::str::FromStr;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use serde_saphyr::Spanned;

use super::{closest, Config, ConfigError};
use crate::point::value_text;
use crate::point::Matrix;

/// As written: host → point → metric → `VALUE ±TOLERANCE`.
pub type References = IndexMap<Spanned<String>, IndexMap<Spanned<String>, IndexMap<String, Spanned<Json>>>>;

/// How far a measurement may stray from its reference.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tolerance {
    /// A percentage of the reference value.
    Percent(f64),
    /// An amount in the metric's unit.
    Absolute(f64),
}

/// A reference value with its tolerance: `2156 ±10%`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub value: f64,
    pub tolerance: Tolerance,
}

impl Expected {
    /// The lowest and highest values that meet the reference.
    pub fn bounds(&self) -> (f64, f64) {
        let margin = match self.tolerance {
            Tolerance::Percent(p) => self.value.abs() * p / 100.0,
            Tolerance::Absolute(a) => a,
        };
        (self.value - margin, self.value + margin)
    }

    /// Whether `measured` lies within the tolerance (bounds included).
    pub fn is_met_by(&self, measured: f64) -> bool {
        let (low, high) = self.bounds();
        measured >= low && measured <= high
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tolerance {
            Tolerance::Percent(p) => write!(f, "{} ±{}%", self.value, p),
            Tolerance::Absolute(a) => write!(f, "{} ±{}", self.value, a),
        }
    }
}

/// Why a reference does not read as `VALUE ±TOLERANCE`.
const SYNTAX_HINT: &str = "write a reference as VALUE ±TOLERANCE, e.g. `2156 ±10%` (percent) or `45 ±5` (absolute); `+-` works in place of `±`";

impl FromStr for Expected {
    type Err = String;

    fn from_str(text: &str) -> Result<Expected, String> {
        let normalized = text.replace("+/-", "±").replace("+-", "±");
        let Some((value, tolerance)) = normalized.split_once('±') else {
            return Err(format!("`{text}` has no tolerance; {SYNTAX_HINT}"));
        };
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| format!("`{}` is not a number; {SYNTAX_HINT}", value.trim()))?;
        let tolerance = tolerance.trim();
        let (amount, percent) = match tolerance.strip_suffix('%') {
            Some(p) => (p.trim(), true),
            None => (tolerance, false),
        };
        let amount: f64 = amount
            .parse()
            .ok()
            .filter(|a: &f64| a.is_finite() && *a >= 0.0)
            .ok_or_else(|| format!("tolerance `{tolerance}` is not a non-negative number; {SYNTAX_HINT}"))?;
        if !value.is_finite() {
            return Err(format!("`{text}`: the value must be finite; {SYNTAX_HINT}"));
        }
        let tolerance = if percent {
            Tolerance::Percent(amount)
        } else {
            Tolerance::Absolute(amount)
        };
        Ok(Expected { value, tolerance })
    }
}

/// One resolved reference, as kept in the run's manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    pub step_index: usize,
    pub host: String,
    /// The matrix values of the point, as the sweep's records carry them.
    pub point: IndexMap<String, Json>,
    pub metric: String,
    pub expected: Expected,
}

/// Every reference of the playbook for the selected hosts, or every mistake in them, each at
/// its `file:line:col`.
pub fn resolve(config: &Config) -> Result<Vec<Reference>, Vec<ConfigError>> {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for (step_index, step) in config.playbook.steps.iter().enumerate() {
        let Some((references, matrix)) = step.as_kind().references() else {
            continue;
        };
        for (host, points) in references {
            if let Err(e) = known_host(config, host) {
                errors.push(e);
                continue;
            }
            for (key, metrics) in points {
                let point = match match_point(&key.value, matrix) {
                    Ok(point) => point,
                    Err(message) => {
                        errors.push(at(config, key, message));
                        continue;
                    }
                };
                for (metric, text) in metrics {
                    match parse_expected(&text.value) {
                        Ok(expected) => found.push(Reference {
                            step_index,
                            host: host.value.clone(),
                            point: point.clone(),
                            metric: metric.clone(),
                            expected,
                        }),
                        Err(message) => errors.push(at(config, text, format!("{metric}: {message}"))),
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        // Those of the hosts selected (a column `host/variant` by its host).
        found.retain(|r| config.hosts.iter().any(|h| r.host.split('/').next() == Some(h)));
        Ok(found)
    } else {
        Err(errors)
    }
}

fn at<T>(config: &Config, place: &Spanned<T>, message: String) -> ConfigError {
    ConfigError::at(
        &config.playbook_path,
        &config.playbook_text,
        &place.referenced,
        message,
    )
}

fn known_host(config: &Config, host: &Spanned<String>) -> Result<(), ConfigError> {
    let (name, variant) = match host.value.split_once('/') {
        Some((name, variant)) => (name, Some(variant)),
        None => (host.value.as_str(), None),
    };
    if config.inventory.hosts.contains_key(name) {
        return known_variant(config, name, variant).map_err(|message| at(config, host, message));
    }
    let names: Vec<&str> = config.inventory.hosts.keys().map(String::as_str).collect();
    let hint = match closest(&host.value, &names) {
        Some(best) => format!("; did you mean `{best}`?"),
        None => format!(" (hosts: {})", names.join(", ")),
    };
    Err(at(
        config,
        host,
        format!(
            "references: `{}` is not a host of {}{hint}",
            host.value,
            config.inventory_path.display()
        ),
    ))
}

/// Whether a reference's column names a variant the run has: `host/variant` when the playbook
/// has server variants (each variant is its own column), the bare host when it has none.
fn known_variant(config: &Config, host: &str, variant: Option<&str>) -> Result<(), String> {
    let variants: Vec<String> = config
        .variants()
        .iter()
        .filter_map(|v| v.name().map(String::from))
        .collect();
    let columns = || {
        let each: Vec<String> = variants.iter().map(|v| format!("{host}/{v}")).collect();
        each.join(", ")
    };
    match variant {
        None if variants.is_empty() => Ok(()),
        Some(v) if variants.iter().any(|known| known == v) => Ok(()),
        None => Err(format!(
            "references: with server variants each variant is a column of its own: name one of {}",
            columns()
        )),
        Some(v) if variants.is_empty() => Err(format!(
            "references: `{host}/{v}` names a server variant, but the playbook has none: write `{host}`"
        )),
        Some(v) => Err(format!(
            "references: `{host}/{v}`: no such variant; the columns are {}",
            columns()
        )),
    }
}

/// A reference value: a string such as `2156 ±10%` (a bare number has no tolerance).
fn parse_expected(value: &Json) -> Result<Expected, String> {
    match value {
        Json::String(s) => s.parse(),
        Json::Number(n) => Err(format!("`{n}` has no tolerance; {SYNTAX_HINT}")),
        other => Err(format!("`{other}` is not a reference; {SYNTAX_HINT}")),
    }
}

/// The matrix point a reference key names: the value itself when the matrix has one axis, or
/// `axis=value` pairs separated by spaces naming every axis.
pub fn match_point(key: &str, matrix: &Matrix) -> Result<IndexMap<String, Json>, String> {
    let axes: Vec<&str> = matrix.keys().map(String::as_str).collect();
    let wanted = wanted_values(key, &axes)?;
    // Axis by axis rather than through the cartesian product: a reference costs the matrix's
    // length, never its size, so a huge matrix is refused by the sweep's limit, not here.
    matrix
        .iter()
        .map(|(axis, values)| {
            let wanted = wanted.get(axis.as_str())?;
            let value = values.value.iter().find(|v| same_value(wanted, v))?;
            Some((axis.clone(), value.clone()))
        })
        .collect::<Option<IndexMap<_, _>>>()
        .ok_or_else(|| not_a_point(key, matrix))
}

/// Why `key` names no point of `matrix`, listing the matrix's values.
fn not_a_point(key: &str, matrix: &Matrix) -> String {
    let listed: Vec<String> = matrix
        .iter()
        .map(|(axis, values)| {
            let values: Vec<String> = values.value.iter().map(value_text).collect();
            format!("{axis}: {}", values.join(", "))
        })
        .collect();
    format!(
        "`{key}` is not a point of this sweep's matrix ({})",
        if listed.is_empty() {
            "no matrix: name the single point `single`".to_string()
        } else {
            listed.join("; ")
        }
    )
}

/// The key as axis → value text, checked against the matrix's axes.
fn wanted_values<'k>(key: &'k str, axes: &[&'k str]) -> Result<IndexMap<&'k str, &'k str>, String> {
    let key = key.trim();
    if axes.is_empty() {
        return match key {
            "single" | crate::point::SINGLE => Ok(IndexMap::new()),
            _ => Err(format!(
                "`{key}`: this sweep has no matrix; name its single point `single`"
            )),
        };
    }
    if !key.contains('=') {
        return match axes {
            [axis] => Ok(IndexMap::from([(*axis, key)])),
            _ => Err(format!(
                "`{key}`: this sweep has several axes ({}); name the point as {}",
                axes.join(", "),
                axes.iter()
                    .map(|a| format!("{a}=…"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        };
    }
    let mut wanted = IndexMap::new();
    for pair in key.split_whitespace() {
        let (axis, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}` in `{key}` is not axis=value"))?;
        if !axes.contains(&axis) {
            return Err(format!(
                "`{axis}` in `{key}` is not an axis of this sweep's matrix ({})",
                axes.join(", ")
            ));
        }
        wanted.insert(axis, value);
    }
    if let Some(missing) = axes.iter().find(|a| !wanted.contains_key(*a)) {
        return Err(format!(
            "`{key}` names no value for the axis `{missing}`; name every axis"
        ));
    }
    Ok(wanted)
}

/// `32` names the value 32 and `32.0` does too; strings compare as written.
fn same_value(written: &str, value: &Json) -> bool {
    match (written.parse::<f64>(), value.as_f64()) {
        (Ok(w), Some(v)) => w == v,
        _ => written == value_text(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matrix(axes: &[(&str, Json)]) -> Matrix {
        let text = serde_json::to_string(&serde_json::Map::from_iter(
            axes.iter().map(|(k, v)| (k.to_string(), v.clone())),
        ))
        .unwrap();
        serde_saphyr::from_str(&text).unwrap()
    }

    #[test]
    fn reads_tolerances_in_percent_and_absolute() {
        let e: Expected = "2156 ±10%".parse().unwrap();
        assert_eq!(e.tolerance, Tolerance::Percent(10.0));
        assert_eq!(e.bounds(), (1940.4, 2371.6));
        assert!(e.is_met_by(2000.0) && !e.is_met_by(1900.0) && !e.is_met_by(2400.0));
        let e: Expected = "45 +-5".parse().unwrap();
        assert_eq!(
            e,
            Expected {
                value: 45.0,
                tolerance: Tolerance::Absolute(5.0)
            }
        );
        assert!("45+/-5 %".parse::<Expected>().is_ok());
        assert_eq!(e.to_string(), "45 ±5");
    }

    #[test]
    fn refuses_references_without_a_tolerance_or_number() {
        let err = "2156".parse::<Expected>().unwrap_err();
        assert!(err.contains("no tolerance") && err.contains("2156 ±10%"), "{err}");
        assert!("fast ±10%"
            .parse::<Expected>()
            .unwrap_err()
            .contains("not a number"));
        assert!("10 ±-1%"
            .parse::<Expected>()
            .unwrap_err()
            .contains("non-negative"));
        assert!(parse_expected(&json!(2156)).unwrap_err().contains("no tolerance"));
    }

    #[test]
    fn points_are_named_by_value_or_by_axis() {
        let m = matrix(&[("concurrency", json!([1, 4, 32]))]);
        assert_eq!(match_point("32", &m).unwrap()["concurrency"], json!(32));
        assert_eq!(match_point("concurrency=4", &m).unwrap()["concurrency"], json!(4));
        let err = match_point("48", &m).unwrap_err();
        assert!(err.contains("concurrency: 1, 4, 32"), "{err}");
        let m = matrix(&[
            ("concurrency", json!([1, 4])),
            ("input_len", json!([30000, 60000])),
        ]);
        let p = match_point("input_len=60000 concurrency=4", &m).unwrap();
        assert_eq!(
            p,
            IndexMap::from([
                ("concurrency".into(), json!(4)),
                ("input_len".into(), json!(60000))
            ])
        );
        assert!(match_point("4", &m).unwrap_err().contains("several axes"));
        assert!(match_point("concurrency=4", &m)
            .unwrap_err()
            .contains("input_len"));
        assert!(match_point("batch=4 input_len=1", &m)
            .unwrap_err()
            .contains("not an axis"));
    }
}
