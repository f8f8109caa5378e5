//! `--only AXIS=VALUE,...`: the sweep points to run. Values of one axis add up
//! (`--only concurrency=16,concurrency=64` runs both); several axes narrow together
//! (`concurrency=16,input_len=1000`). A sweep runs its points whose value on every named axis it
//! has is among those chosen; a sweep without any of the named axes runs whole. Kept in run.json,
//! so a resume and the report leave the other points out as the run did.

use std::path::Path;

use indexmap::IndexMap;

use super::{closest, Config, ConfigError};
use crate::point::{self, Values};

/// The points `--only` keeps: axis → the values chosen, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Only {
    axes: IndexMap<String, Vec<String>>,
}

impl Only {
    /// Reads `AXIS=VALUE` items (each `--only` may hold several, comma-separated).
    pub fn parse(items: &[String]) -> Result<Only, ConfigError> {
        let mut axes: IndexMap<String, Vec<String>> = IndexMap::new();
        for item in items {
            let (axis, value) = item
                .split_once('=')
                .filter(|(a, v)| !a.trim().is_empty() && !v.trim().is_empty())
                .ok_or_else(|| {
                    ConfigError::plain(
                        Path::new("--only"),
                        format!(
                            "`{}` is not AXIS=VALUE; write it like --only concurrency=16,concurrency=64",
                            item.escape_debug()
                        ),
                    )
                })?;
            let values = axes.entry(axis.trim().to_string()).or_default();
            if !values.iter().any(|v| v == value.trim()) {
                values.push(value.trim().to_string());
            }
        }
        Ok(Only { axes })
    }

    /// Whether every point runs.
    pub fn is_empty(&self) -> bool {
        self.axes.is_empty()
    }

    /// Whether a point with `values` runs: on every chosen axis it has, its value is chosen.
    pub fn keeps(&self, values: &Values) -> bool {
        self.axes.iter().all(|(axis, chosen)| match values.get(axis) {
            Some(v) => chosen.contains(&point::value_text(v)),
            None => true,
        })
    }

    /// The items as `--only` takes them (`concurrency=16`), for run.json and messages.
    pub fn items(&self) -> Vec<String> {
        self.axes
            .iter()
            .flat_map(|(axis, values)| values.iter().map(move |v| format!("{axis}={v}")))
            .collect()
    }

    /// Each chosen axis and value that no sweep of the playbook has: an error on `--only`,
    /// with the closest one there is.
    pub fn check(&self, config: &Config) -> Vec<ConfigError> {
        let sweeps = sweep_axes(config);
        let mut errors = Vec::new();
        for (axis, chosen) in &self.axes {
            let problem = match sweeps.get(axis.as_str()) {
                None => Some(unknown_axis(config, axis, &sweeps)),
                Some(values) => {
                    let missing = chosen.iter().find(|v| !values.contains(v));
                    missing.map(|v| unknown_value(axis, v, values))
                }
            };
            errors.extend(problem.map(|p| ConfigError::plain(Path::new("--only"), p)));
        }
        errors
    }
}

/// Every axis of every sweep, with the values the sweeps give it (as written, in order).
fn sweep_axes(config: &Config) -> IndexMap<&str, Vec<String>> {
    let mut axes: IndexMap<&str, Vec<String>> = IndexMap::new();
    for matrix in config.sweep_matrices() {
        for (axis, values) in matrix {
            let known = axes.entry(axis.as_str()).or_default();
            for text in values.value.iter().map(point::value_text) {
                if !known.contains(&text) {
                    known.push(text);
                }
            }
        }
    }
    axes
}

fn unknown_axis(config: &Config, axis: &str, sweeps: &IndexMap<&str, Vec<String>>) -> String {
    let names: Vec<&str> = sweeps.keys().copied().collect();
    let is_variant = config
        .playbook
        .server
        .as_ref()
        .is_some_and(|s| s.variants.contains_key(axis));
    if is_variant {
        return format!(
            "`{axis}` is an axis of the server's variants, not of a sweep; --only chooses sweep points ({})",
            axes_text(&names)
        );
    }
    match closest(axis, &names) {
        Some(best) => format!("no sweep has the axis `{axis}`; did you mean `{best}`?"),
        None => format!("no sweep has the axis `{axis}` ({})", axes_text(&names)),
    }
}

/// `the axes are a, b`, or that there are none.
fn axes_text(names: &[&str]) -> String {
    match names {
        [] => "the playbook's sweeps have no matrix".into(),
        _ => format!("the sweeps' axes are {}", names.join(", ")),
    }
}

fn unknown_value(axis: &str, value: &str, values: &[String]) -> String {
    let candidates: Vec<&str> = values.iter().map(String::as_str).collect();
    let hint = match nearest_number(value, &candidates).or_else(|| closest(value, &candidates)) {
        Some(best) => format!("; did you mean `{axis}={best}`?"),
        None => String::new(),
    };
    format!(
        "no sweep has the point {axis}={value} ({axis} is {}){hint}",
        candidates.join(", ")
    )
}

/// Among numbers, the one nearest `value` (`61` → `64`, where spelling would say `1`).
fn nearest_number<'a>(value: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let given: f64 = value.parse().ok()?;
    let numbers: Option<Vec<(f64, &str)>> = candidates.iter().map(|c| Some((c.parse().ok()?, *c))).collect();
    numbers?
        .into_iter()
        .min_by(|a, b| (a.0 - given).abs().total_cmp(&(b.0 - given).abs()))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn only(items: &[&str]) -> Only {
        Only::parse(&items.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn point(pairs: &[(&str, serde_json::Value)]) -> Values {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn values_of_one_axis_add_up_and_axes_narrow_together() {
        let o = only(&["concurrency=16", "concurrency=64", "input_len=1000"]);
        assert!(o.keeps(&point(&[("concurrency", json!(16)), ("input_len", json!(1000))])));
        assert!(o.keeps(&point(&[("concurrency", json!(64)), ("input_len", json!(1000))])));
        assert!(!o.keeps(&point(&[("concurrency", json!(4)), ("input_len", json!(1000))])));
        assert!(!o.keeps(&point(&[("concurrency", json!(16)), ("input_len", json!(2000))])));
        assert!(
            o.keeps(&point(&[("model", json!("a"))])),
            "a sweep without the axes runs whole"
        );
        assert_eq!(o.items(), ["concurrency=16", "concurrency=64", "input_len=1000"]);
        assert!(Only::default().keeps(&point(&[("c", json!(1))])));
    }

    #[test]
    fn items_that_are_not_axis_value_are_refused() {
        for bad in ["concurrency", "=4", "c=", " = "] {
            let err = Only::parse(&[bad.to_string()]).unwrap_err();
            assert!(err.to_string().starts_with("--only: `"), "{err}");
            assert!(err.message.contains("is not AXIS=VALUE"), "{err}");
        }
        assert_eq!(only(&["c=1", "c=1"]).items(), ["c=1"]);
    }

    #[test]
    fn an_unknown_value_suggests_the_nearest_number_or_the_closest_spelling() {
        let values = ["1", "4", "16", "64"].map(String::from);
        let m = unknown_value("concurrency", "61", &values);
        assert_eq!(m, "no sweep has the point concurrency=61 (concurrency is 1, 4, 16, 64); did you mean `concurrency=64`?");
        let models = ["qwen", "llama"].map(String::from);
        assert!(unknown_value("model", "lama", &models).ends_with("did you mean `model=llama`?"));
    }
}
