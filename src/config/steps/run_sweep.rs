//! `run-sweep`: a command once per point of a matrix; JSON lines on stdout become records.

use std::fmt::Write as _;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::search::{worst_case, SearchPlan, SearchSpec};
use super::{Describe, OnResume, Plans, StepKind};
use crate::config::duration::Dur;
use crate::config::only::Only;
use crate::config::reference::References;
use crate::config::render::{RenderError, Renderer};
use crate::config::template::{Quoting, Text};
use crate::point::{self, cartesian, Matrix};
use crate::words::{count, thousands};

/// The most points one sweep may have. Each point is a benchmark run of seconds to minutes, so
/// ten thousand is days of measuring per host, far beyond real sweeps (tens to hundreds); and
/// planning them stays well under a second per host (about 10 µs a point).
pub const MAX_POINTS: u128 = 10_000;

/// As written in the playbook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSweep {
    pub name: Option<String>,
    /// Per point.
    #[serde(default, deserialize_with = "crate::config::duration::timeout")]
    pub timeout: Option<Dur>,
    #[serde(default)]
    pub matrix: Matrix,
    /// A minijinja expression; a point where it is true is skipped and recorded with the reason.
    pub skip_if: Option<Text>,
    pub command: Text,
    #[serde(default)]
    pub stop_on_failure: bool,
    /// How many times a point whose command failed is run again (waiting 1 s, 2 s, 4 s, …).
    pub retries: Option<serde_saphyr::Spanned<u32>>,
    /// Expected values per host and point (see `config::reference`).
    #[serde(default)]
    pub references: References,
    /// How many times each point is measured (1 to [`MAX_REPEAT`]; 1 when absent).
    pub repeat: Option<serde_saphyr::Spanned<u32>>,
    /// Whether a point's repetitions are spread across the sweep or run back to back.
    #[serde(default)]
    pub repeat_order: RepeatOrder,
    /// Find each series' capacity under the playbook's `slo:` along one axis instead of
    /// measuring all its values (see `super::search`).
    pub search: Option<Box<SearchSpec>>,
}

/// The most repetitions of a point: a hundred measurements pin a mean down to a fraction of
/// its spread; more is days of measuring for nothing.
pub const MAX_REPEAT: u32 = 100;

/// The order of a repeated sweep's runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RepeatOrder {
    /// Every point once, then every point again, …: drift over time (heat, other load)
    /// spreads evenly over the points instead of biasing the ones measured last.
    #[default]
    Interleaved,
    /// A point's repetitions back to back, then the next point.
    Consecutive,
}

impl RepeatOrder {
    fn is_default(&self) -> bool {
        *self == RepeatOrder::default()
    }
}

/// One run of a point in a repeated sweep: its place in the plan and which repetition it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledRun {
    /// The point's index in [`RunSweepPlan::points`].
    pub point: usize,
    /// From 1.
    pub repetition: u32,
}

/// Planned for one host: every point of the matrix, rendered.
#[derive(Debug, Clone, Serialize)]
pub struct RunSweepPlan {
    pub points: Vec<SweepPoint>,
    pub stop_on_failure: bool,
    /// Attempts after a failed one, per point (see `super::backoff`).
    pub retries: u32,
    /// Times each point is measured (1: once; not written then, as before repeats).
    #[serde(skip_serializing_if = "crate::events::is_first")]
    pub repeat: u32,
    #[serde(skip_serializing_if = "RepeatOrder::is_default")]
    pub repeat_order: RepeatOrder,
    /// Points of the matrix that `--only` leaves out (not in `points`).
    #[serde(skip_serializing_if = "is_zero")]
    pub left_out: usize,
    /// The capacity search the sweep makes over its last axis, if it makes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchPlan>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl RunSweepPlan {
    /// Every run of every point, in the order the sweep makes them (see [`RepeatOrder`]).
    pub fn runs(&self) -> Vec<ScheduledRun> {
        let (points, reps) = (0..self.points.len(), 1..=self.repeat.max(1));
        match self.repeat_order {
            RepeatOrder::Interleaved => reps
                .flat_map(|repetition| {
                    points
                        .clone()
                        .map(move |point| ScheduledRun { point, repetition })
                })
                .collect(),
            RepeatOrder::Consecutive => points
                .flat_map(|point| {
                    reps.clone()
                        .map(move |repetition| ScheduledRun { point, repetition })
                })
                .collect(),
        }
    }
}

/// One point of a sweep: its matrix values and either a command or the reason it is skipped.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    pub values: IndexMap<String, Json>,
    pub command: String,
    pub skip: Option<String>,
    /// Set when `skip_if` can only be decided while running (plan output only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
}

impl SweepPoint {
    /// `concurrency=16 input_len=1000`.
    pub fn label(&self) -> String {
        point::label(&self.values)
    }
}

impl StepKind for RunSweep {
    fn templates(&self) -> Vec<(&Text, Quoting)> {
        vec![(&self.command, Quoting::Shell)]
    }

    fn own_variables(&self) -> Vec<&str> {
        let search = self.search.as_ref().map(|s| s.axis.value.as_str());
        self.matrix.keys().map(String::as_str).chain(search).collect()
    }

    fn expressions(&self) -> Vec<(&'static str, &Text)> {
        self.skip_if.iter().map(|e| ("skip_if", e)).collect()
    }

    fn references(&self) -> Option<(&References, &Matrix)> {
        Some((&self.references, &self.matrix))
    }

    fn on_resume(&self) -> OnResume {
        OnResume::Measure
    }

    /// The matrix's points that `--only` keeps, in the sweep's order; with a search, each point
    /// of the other axes once per candidate of its axis (the last one).
    fn points(&self, only: &Only) -> Option<Vec<point::Values>> {
        let mut points = self.all_points();
        points.retain(|values| only.keeps(values));
        Some(points)
    }

    fn search_axis(&self) -> Option<&str> {
        self.search.as_ref().map(|s| s.axis.value.as_str())
    }

    /// How many times each point is measured, as planning allows it (the run's `--repeat`, or 1
    /// when `repeat:` is absent; out-of-range values never get past planning). A search
    /// measures each probe once.
    fn repetitions(&self, run_repeat: Option<u32>) -> u32 {
        if self.search.is_some() {
            return 1;
        }
        self.repeat
            .as_ref()
            .map_or(run_repeat.unwrap_or(1), |n| n.value)
            .clamp(1, MAX_REPEAT)
    }
}

impl Plans for RunSweep {
    type Plan = RunSweepPlan;

    fn plan(&self, r: &Renderer) -> Result<RunSweepPlan, RenderError> {
        for (key, values) in &self.matrix {
            if values.value.is_empty() {
                return Err(r.error(values, format!("matrix `{key}` has no values")));
            }
            let text = &r.config.playbook_text;
            let written = |i: usize| crate::config::scalar_at(text, &values.value.place(i));
            if let Some((i, message)) = mixed_types(key, &values.value, &written) {
                return Err(r.error_at(&values.value.place(i), message));
            }
        }
        if let (Err(message), Some(first)) = (check_size(&self.matrix), self.matrix.values().next()) {
            return Err(r.error(first, message));
        }
        let search = self.search_plan(r)?;
        let chosen = self.points(&r.config.only).unwrap_or_default();
        let left_out = self.all_points().len() - chosen.len();
        let points = chosen
            .into_iter()
            .map(|values| self.point(r, values))
            .collect::<Result<_, _>>()?;
        Ok(RunSweepPlan {
            points,
            stop_on_failure: self.stop_on_failure,
            retries: super::retries(r, &self.retries)?,
            repeat: match search {
                Some(_) => 1,
                None => repeat(r, &self.repeat)?.unwrap_or(r.config.repeat.unwrap_or(1)),
            },
            repeat_order: self.repeat_order,
            left_out,
            search,
        })
    }
}

/// The number of points of `matrix`, counted before any is made, or why there are too many.
pub fn check_size(matrix: &Matrix) -> Result<u128, String> {
    let count = matrix
        .values()
        .fold(1u128, |n, values| n.saturating_mul(values.value.len() as u128));
    if count <= MAX_POINTS {
        return Ok(count);
    }
    let axes: Vec<String> = matrix
        .iter()
        .map(|(axis, values)| format!("{axis}: {}", values.value.len()))
        .collect();
    Err(format!(
        "this matrix has {} points ({}); rigrun runs at most {} points per sweep: use fewer values, or split the sweep into several steps",
        thousands(count),
        axes.join(" × "),
        thousands(MAX_POINTS)
    ))
}

/// The kind of a matrix value, as a person names it (`16` and `0.5` are both numbers).
fn kind_of(value: &Json) -> &'static str {
    match value {
        Json::Number(_) => "a number",
        Json::String(_) => "text",
        Json::Bool(_) => "a boolean",
        Json::Null => "empty",
        Json::Array(_) => "a list",
        Json::Object(_) => "a mapping",
    }
}

/// The first value of an axis whose kind differs from the others' (the kind most values share,
/// the first value's on a tie), with the error naming it: `[1, 4, l6, 64]` would run `l6` as
/// a concurrency, and `skip_if` would compare text with numbers.
fn mixed_types(
    axis: &str,
    values: &[Json],
    written: &dyn Fn(usize) -> Option<String>,
) -> Option<(usize, String)> {
    let kinds: Vec<&str> = values.iter().map(kind_of).collect();
    let share = |kind: &str| kinds.iter().filter(|k| **k == kind).count();
    let common = kinds
        .iter()
        .copied()
        .max_by_key(|k| (share(k), std::cmp::Reverse(kinds.iter().position(|x| x == k))))?;
    let (i, odd) = kinds.iter().enumerate().find(|(_, k)| **k != common)?;
    let value = written(i).unwrap_or_else(|| point::value_text(&values[i]));
    let others = match common {
        "a number" => "numbers".to_string(),
        "a boolean" => "booleans".to_string(),
        other => other.to_string(),
    };
    let hint = match (common, as_number(&value)) {
        ("a number", Some(n)) => format!("; did you mean {n}?"),
        ("a number", None) => ": write it as a number".to_string(),
        _ => format!(": write every value of `{axis}` as {common}"),
    };
    Some((
        i,
        format!("matrix `{axis}`: `{value}` is {odd} while the other values are {others}; every value of an axis is of one kind{hint}"),
    ))
}

/// `l6` read as `16`, `1O24` as `1024`: letters that look like digits, when that makes a number.
fn as_number(text: &str) -> Option<String> {
    let digits: String = text
        .chars()
        .map(|c| match c {
            'l' | 'I' | '|' => '1',
            'O' | 'o' => '0',
            other => other,
        })
        .collect();
    (digits != text && digits.parse::<f64>().is_ok()).then_some(digits)
}

/// `repeat:` as written, checked to be 1 to [`MAX_REPEAT`]; None when absent (the run's
/// `--repeat`, or once, then applies).
fn repeat(r: &Renderer, written: &Option<serde_saphyr::Spanned<u32>>) -> Result<Option<u32>, RenderError> {
    match written {
        Some(n) if n.value == 0 || n.value > MAX_REPEAT => Err(r.error(
            n,
            format!(
                "repeat: {} is out of range: a point is measured 1 to {MAX_REPEAT} times",
                n.value
            ),
        )),
        Some(n) => Ok(Some(n.value)),
        None => Ok(None),
    }
}

impl RunSweep {
    /// Every point of the matrix, the search's candidates as its last axis.
    fn all_points(&self) -> Vec<point::Values> {
        let points = cartesian(&self.matrix);
        let Some(search) = &self.search else {
            return points;
        };
        let candidates = search.candidates().unwrap_or_default();
        let axis = &search.axis.value;
        points
            .into_iter()
            .flat_map(|values| {
                candidates.iter().map(move |c| {
                    let mut point = values.clone();
                    point.insert(axis.clone(), c.clone());
                    point
                })
            })
            .collect()
    }

    /// The search as planned, checked: candidates that make sense, an axis of its own, limits
    /// to meet (the playbook's `slo:`), one measurement per probe, a probe budget of at least 1.
    fn search_plan(&self, r: &Renderer) -> Result<Option<SearchPlan>, RenderError> {
        let Some(search) = &self.search else {
            return Ok(None);
        };
        let candidates = search.candidates().map_err(|(at, why)| r.error_at(at, why))?;
        let axis = &search.axis;
        if self.matrix.contains_key(&axis.value) {
            let why = format!(
                "search: `{}` is also a matrix axis; a searched axis takes its values from \
                 search: (from, to, step) alone: remove it from matrix:",
                axis.value
            );
            return Err(r.error(axis, why));
        }
        if r.config.slo.is_empty() {
            let why = "search: needs the limits each probe must meet: give the playbook an \
                       `slo:` (e.g. slo: {p99_ttft_ms: 2000})"
                .to_string();
            return Err(r.error(axis, why));
        }
        if let Some(n) = &self.repeat {
            let why = "repeat: a search judges each probe by one measurement; remove repeat: \
                       (or the search, to measure every value repeatedly)";
            return Err(r.error(n, why.to_string()));
        }
        let probes = match &search.probes {
            Some(p) if p.value == 0 => {
                return Err(r.error(p, "search: probes: at least 1".to_string()));
            }
            Some(p) => p.value,
            None => worst_case(candidates.len()),
        };
        let step = search.step.as_ref().and_then(|s| s.value.as_f64()).unwrap_or(1.0);
        let points = check_size(&self.matrix).unwrap_or(MAX_POINTS) * candidates.len() as u128;
        if points > MAX_POINTS {
            let why = format!(
                "search: {} candidates for each of the matrix's {} points make {} points; \
                 rigrun plans at most {}: take a larger step or fewer matrix values",
                candidates.len(),
                thousands(points / candidates.len() as u128),
                thousands(points),
                thousands(MAX_POINTS)
            );
            return Err(r.error(axis, why));
        }
        Ok(Some(SearchPlan {
            axis: axis.value.clone(),
            candidates: candidates.len(),
            probes,
            step,
        }))
    }

    /// One point rendered with the host's variables and the point's values.
    fn point(&self, r: &Renderer, values: IndexMap<String, Json>) -> Result<SweepPoint, RenderError> {
        let mut vars = r.vars.clone();
        vars.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
        let (skip, pending) = match &self.skip_if {
            None => (None, None),
            Some(expr) => match r.skip_reason(expr, &vars) {
                Ok(skip) => (skip, None),
                Err(RenderError::Deferred(var)) => (None, Some(format!("skip_if uses `{var}`"))),
                Err(e) => return Err(e),
            },
        };
        Ok(SweepPoint {
            command: r.text(&self.command, Quoting::Shell, &vars)?,
            values,
            skip,
            pending,
        })
    }
}

impl Describe for RunSweepPlan {
    fn describe(&self, out: &mut String, head: &str) {
        let retries = match self.retries {
            0 => String::new(),
            n => format!(" (a failed point is retried up to {})", count(n as usize, "time")),
        };
        let repeat = match (self.repeat, self.repeat_order) {
            (0 | 1, _) => String::new(),
            (n, RepeatOrder::Interleaved) => format!(", each measured {n} times (interleaved)"),
            (n, RepeatOrder::Consecutive) => format!(", each measured {n} times (consecutively)"),
        };
        let left_out = match self.left_out {
            0 => String::new(),
            n => format!(" ({} left out by --only)", count(n, "more point")),
        };
        let points = count(self.points.len(), "point");
        if let Some(search) = &self.search {
            let series = self.points.len() / search.candidates.max(1);
            let _ = writeln!(
                out,
                "{head}: a capacity search over `{}` ({} candidates, {} apart) in {}, at most {} \
                 each{left_out}{retries}",
                search.axis,
                search.candidates,
                search.step,
                count(series, "series"),
                count(search.probes as usize, "probe"),
            );
            let first = self.points.iter().step_by(search.candidates.max(1));
            for p in first.take(series) {
                let _ = writeln!(out, "       {}  $ {}", p.label(), p.command);
            }
            return;
        }
        let _ = writeln!(out, "{head}: {points}{left_out}{repeat}{retries}");
        for p in &self.points {
            let label = p.label();
            let _ = match (&p.skip, &p.pending) {
                (Some(why), _) => writeln!(out, "       {label}  SKIP: {why}"),
                (None, Some(why)) => writeln!(
                    out,
                    "       {label}  $ {}  (skipped or not: decided at run time, {why})",
                    p.command
                ),
                (None, None) => writeln!(out, "       {label}  $ {}", p.command),
            };
        }
    }

    fn points(&self) -> &[SweepPoint] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(axes: usize, values: usize) -> Matrix {
        let yaml: String = (0..axes)
            .map(|a| format!("a{a}: [{}]\n", vec!["1"; values].join(", ")))
            .collect();
        serde_saphyr::from_str(&yaml).unwrap()
    }

    #[test]
    fn a_matrix_is_counted_before_it_is_built() {
        assert_eq!(check_size(&matrix(4, 10)), Ok(10_000));
        let err = check_size(&matrix(7, 10)).unwrap_err();
        assert!(err.contains("10,000,000 points"), "{err}");
        assert!(err.contains("(a0: 10 × a1: 10 × a2: 10"), "{err}");
        assert!(err.contains("at most 10,000 points"), "{err}");
    }

    #[test]
    fn a_count_beyond_u128_saturates() {
        assert!(check_size(&matrix(60, 10)).unwrap_err().contains("340,282,366"));
    }

    fn plan(points: usize, repeat: u32, repeat_order: RepeatOrder) -> RunSweepPlan {
        let point = SweepPoint {
            values: IndexMap::new(),
            command: String::new(),
            skip: None,
            pending: None,
        };
        RunSweepPlan {
            points: vec![point; points],
            stop_on_failure: false,
            retries: 0,
            repeat,
            repeat_order,
            left_out: 0,
            search: None,
        }
    }

    #[test]
    fn repetitions_interleave_unless_told_consecutive() {
        let order = |p: RunSweepPlan| -> Vec<(usize, u32)> {
            p.runs().iter().map(|r| (r.point, r.repetition)).collect()
        };
        let interleaved = order(plan(2, 3, RepeatOrder::Interleaved));
        assert_eq!(interleaved, [(0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]);
        let consecutive = order(plan(2, 3, RepeatOrder::Consecutive));
        assert_eq!(consecutive, [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]);
        assert_eq!(order(plan(2, 1, RepeatOrder::Interleaved)), [(0, 1), (1, 1)]);
    }

    #[test]
    fn an_axis_of_mixed_kinds_names_the_odd_value() {
        let values = |yaml: &str| serde_saphyr::from_str::<Vec<Json>>(yaml).unwrap();
        let mixed_types = |axis: &str, values: &[Json]| mixed_types(axis, values, &|_| None);
        let (i, message) = mixed_types("concurrency", &values("[1, 4, l6, 64]")).unwrap();
        assert_eq!(i, 2);
        assert_eq!(
            message,
            "matrix `concurrency`: `l6` is text while the other values are numbers; every value of an axis is of one kind; did you mean 16?"
        );
        let (i, message) = mixed_types("model", &values("[a, b, 3]")).unwrap();
        assert_eq!(i, 2);
        assert!(
            message.ends_with("write every value of `model` as text"),
            "{message}"
        );
        let (i, message) = mixed_types("c", &values("[1, x]")).unwrap();
        assert_eq!(
            (
                i,
                message.contains("`x` is text while the other values are numbers")
            ),
            (1, true)
        );
        assert!(
            mixed_types("c", &values("[1, 2.5, 1e3]")).is_none(),
            "ints and floats are numbers"
        );
        assert!(mixed_types("m", &values("[a, b]")).is_none());
        let (_, message) = super::mixed_types("c", &values("[1, y]"), &|_| Some("y".into())).unwrap();
        assert!(
            message.contains("`y` is a boolean while the other values are numbers"),
            "{message}"
        );
    }
}
