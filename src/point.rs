//! Sweep points as every layer names them: a point is the matrix values of one run of a sweep.
//! Config, plan, executor and report all print and build points; this ground floor imports
//! nothing of rigrun, so any module may use it. Here: the matrix as written and its points,
//! their labels, and a server variant's label and a table column's name.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use serde_saphyr::{Location, Spanned};

/// The matrix values of one point, in the order the matrix names its axes.
pub type Values = IndexMap<String, Json>;

/// A sweep's matrix as written: axis → values.
pub type Matrix = IndexMap<String, Spanned<Axis>>;

/// One axis of a matrix as written: its values, each with its place in the file (so that an
/// error can point at the one value that is wrong). Reads as the list of values.
#[derive(Debug, Clone, Default)]
pub struct Axis {
    values: Vec<Json>,
    places: Vec<Location>,
}

impl Axis {
    /// Values without places (built in code, not read from a file).
    pub fn new(values: Vec<Json>) -> Axis {
        let places = vec![Location::UNKNOWN; values.len()];
        Axis { values, places }
    }

    /// Where value `i` was written.
    pub fn place(&self, i: usize) -> Location {
        self.places.get(i).copied().unwrap_or(Location::UNKNOWN)
    }
}

impl std::ops::Deref for Axis {
    type Target = Vec<Json>;

    fn deref(&self) -> &Vec<Json> {
        &self.values
    }
}

impl AsRef<[Json]> for Axis {
    fn as_ref(&self) -> &[Json] {
        &self.values
    }
}

impl<'de> serde::Deserialize<'de> for Axis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Axis, D::Error> {
        let items = <Vec<Spanned<Json>> as serde::Deserialize>::deserialize(d)?;
        let places = items.iter().map(|v| v.referenced).collect();
        let values = items.into_iter().map(|v| v.value).collect();
        Ok(Axis { values, places })
    }
}

/// What `label` calls the one point of a sweep without axes.
pub const SINGLE: &str = "(single)";

/// `concurrency=16 input_len=1000`; `(single)` for a sweep without axes.
pub fn label(values: &Values) -> String {
    if values.is_empty() {
        return SINGLE.to_string();
    }
    values
        .iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The series a point belongs to along `axis`: the label of its other axes' values
/// (`input_len=1000` of `input_len=1000 concurrency=16`; `(single)` when there are none).
pub fn series_label(values: &Values, axis: &str) -> String {
    let mut others = values.clone();
    others.shift_remove(axis);
    label(&others)
}

/// A series in sentences: its column alone, or `blackwell (input_len=8000)`.
pub fn series_name(column: &str, series: &str) -> String {
    match series {
        SINGLE => column.to_string(),
        series => format!("{column} ({series})"),
    }
}

/// A value as written by people: strings without their quotes, anything else as JSON.
pub fn value_text(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A server variant's values as one word: `spec=nextn3,tp=8` (what `--baseline` names, and what
/// follows the host in a column's name).
pub fn variant_label(values: &Values) -> String {
    values
        .iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A table column: the host, or `host/variant` for a server variant (`blackwell/spec=nextn3`).
pub fn column(host: &str, variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{host}/{v}"),
        None => host.to_string(),
    }
}

/// A point of a step: the step's index and the point's label. What a table's row, a planned
/// skip and a reference are about, whichever repetition measured it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StepPoint {
    pub step_index: usize,
    pub label: String,
}

impl StepPoint {
    /// The point with matrix values `values` of step `step_index`.
    pub fn of(step_index: usize, values: &Values) -> StepPoint {
        StepPoint {
            step_index,
            label: label(values),
        }
    }

    /// Its repetition `repetition` (from 1): a unit of work.
    pub fn repetition(self, repetition: u32) -> PointKey {
        PointKey {
            point: self,
            repetition,
        }
    }
}

/// A unit of work: one repetition of a step's point. The journal's history, the resume's work,
/// the planned units and the report's latest attempts are all kept under it. Within one column
/// (a host, or `host/variant`): every reader keeps each column's units apart already (resume
/// by `host/variant`, the tables by column), so the variant is not part of the key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PointKey {
    pub point: StepPoint,
    /// From 1.
    pub repetition: u32,
}

impl PointKey {
    /// Repetition `repetition` of the point labelled `label` of step `step_index`.
    pub fn new(step_index: usize, label: &str, repetition: u32) -> PointKey {
        let point = StepPoint {
            step_index,
            label: label.to_string(),
        };
        point.repetition(repetition)
    }
}

/// How many requests a point sent at once: the `max_concurrency` its benchmark reported, else
/// the `concurrency` of its matrix values. The benchmark's figure wins because it is what was
/// measured, while the matrix says what was asked (a command may cap or ignore the axis, and
/// result files fetched from the host carry only the benchmark's figure). The one precedence of
/// the scaling story's levels and of telemetry's checks against what a point sent.
pub fn concurrency(values: &Values, metrics: &serde_json::Map<String, Json>) -> Option<f64> {
    let reported = metrics.get("max_concurrency").and_then(Json::as_f64);
    reported.or_else(|| values.get("concurrency").and_then(Json::as_f64))
}

/// The cartesian product of the matrix, first key outermost, values in the order written.
pub fn cartesian<V: AsRef<[Json]>>(matrix: &IndexMap<String, serde_saphyr::Spanned<V>>) -> Vec<Values> {
    let mut points = vec![IndexMap::new()];
    for (key, values) in matrix {
        points = points
            .into_iter()
            .flat_map(|point| {
                values.value.as_ref().iter().map(move |v| {
                    let mut p = point.clone();
                    p.insert(key.clone(), v.clone());
                    p
                })
            })
            .collect();
    }
    points
}

/// A sweep as the run planned it, kept in run.json (`planned`): its points (those `--only`
/// kept, in order) and, per column, those `skip_if` skips. The report gives every planned
/// point a row, and says why a column has none, from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedSweep {
    pub step_index: usize,
    /// The step's name, as its records carry it.
    pub step: String,
    pub points: Vec<Values>,
    /// Per column (a host, or `host/variant`): each point `skip_if` skips, by label, with why.
    /// Only what the plan knows before connecting: a `skip_if` that waits for what the run
    /// learns (`server.*`) is decided at run time.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub skipped: IndexMap<String, IndexMap<String, String>>,
    /// The axis of the sweep's capacity search, when it makes one: its points are candidates,
    /// of which only the probed ones get rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
}

impl PlannedSweep {
    /// Why `skip_if` skips the point labelled `label` in `column`, when the plan knows it does.
    pub fn skip(&self, column: &str, label: &str) -> Option<&String> {
        self.skipped.get(column)?.get(label)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn variants_read_as_one_word_after_their_host() {
        let mut values = Values::new();
        values.insert("spec".into(), json!("nextn3"));
        values.insert("tp".into(), json!(8));
        assert_eq!(variant_label(&values), "spec=nextn3,tp=8");
        assert_eq!(column("blackwell", Some("spec=off")), "blackwell/spec=off");
        assert_eq!(column("blackwell", None), "blackwell");
    }

    #[test]
    fn the_benchmarks_concurrency_wins_over_the_matrixs() {
        let values: Values = [("concurrency".to_string(), json!(16))].into_iter().collect();
        let reported = json!({"max_concurrency": 4}).as_object().cloned().unwrap();
        let none = serde_json::Map::new();
        assert_eq!(concurrency(&values, &reported), Some(4.0));
        assert_eq!(concurrency(&values, &none), Some(16.0));
        assert_eq!(concurrency(&Values::new(), &reported), Some(4.0));
        assert_eq!(concurrency(&Values::new(), &none), None);
    }

    #[test]
    fn labels_read_as_written() {
        let mut values = Values::new();
        assert_eq!(label(&values), "(single)");
        values.insert("concurrency".into(), json!(16));
        values.insert("model".into(), json!("a b"));
        assert_eq!(label(&values), "concurrency=16 model=a b");
    }

    #[test]
    fn a_series_is_every_other_axis_even_with_spaces_in_a_value() {
        let mut values = Values::new();
        values.insert("model".into(), json!("concurrency=8 x"));
        values.insert("concurrency".into(), json!(16));
        assert_eq!(series_label(&values, "concurrency"), "model=concurrency=8 x");
        assert_eq!(series_label(&values, "model"), "concurrency=16");
        values.shift_remove("model");
        assert_eq!(series_label(&values, "concurrency"), "(single)");
        assert_eq!(series_name("blackwell", "(single)"), "blackwell");
        assert_eq!(series_name("a6000", "input_len=8"), "a6000 (input_len=8)");
    }
}
