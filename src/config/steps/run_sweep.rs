//! `run-sweep`: a command once per point of a matrix; JSON lines on stdout become records.

use std::fmt::Write as _;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::{Describe, Matrix, Plans, StepKind};
use crate::config::duration::Dur;
use crate::config::playbook::{Quoting, Text};
use crate::config::reference::References;
use crate::config::render::{RenderError, Renderer};
use crate::point::{self, cartesian};

/// As written in the playbook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSweep {
    pub name: Option<String>,
    /// Per point.
    pub timeout: Option<Dur>,
    #[serde(default)]
    pub matrix: Matrix,
    /// A minijinja expression; a point where it is true is skipped and recorded with the reason.
    pub skip_if: Option<Text>,
    pub command: Text,
    #[serde(default)]
    pub stop_on_failure: bool,
    /// Expected values per host and point (see `config::reference`).
    #[serde(default)]
    pub references: References,
}

/// Planned for one host: every point of the matrix, rendered.
#[derive(Debug, Clone, Serialize)]
pub struct RunSweepPlan {
    pub points: Vec<Point>,
    pub stop_on_failure: bool,
}

/// One point of a sweep: its matrix values and either a command or the reason it is skipped.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub values: IndexMap<String, Json>,
    pub command: String,
    pub skip: Option<String>,
    /// Set when `skip_if` can only be decided while running (plan output only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
}

impl Point {
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
        self.matrix.keys().map(String::as_str).collect()
    }

    fn expressions(&self) -> Vec<(&'static str, &Text)> {
        self.skip_if.iter().map(|e| ("skip_if", e)).collect()
    }

    fn references(&self) -> Option<(&References, &Matrix)> {
        Some((&self.references, &self.matrix))
    }
}

impl Plans for RunSweep {
    type Plan = RunSweepPlan;

    fn plan(&self, r: &Renderer) -> Result<RunSweepPlan, RenderError> {
        for (key, values) in &self.matrix {
            if values.value.is_empty() {
                return Err(r.error(values, format!("matrix `{key}` has no values")));
            }
        }
        let points = cartesian(&self.matrix)
            .into_iter()
            .map(|values| self.point(r, values))
            .collect::<Result<_, _>>()?;
        Ok(RunSweepPlan {
            points,
            stop_on_failure: self.stop_on_failure,
        })
    }
}

impl RunSweep {
    /// One point rendered with the host's variables and the point's values.
    fn point(&self, r: &Renderer, values: IndexMap<String, Json>) -> Result<Point, RenderError> {
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
        Ok(Point {
            command: r.text(&self.command, Quoting::Shell, &vars)?,
            values,
            skip,
            pending,
        })
    }
}

impl Describe for RunSweepPlan {
    fn describe(&self, out: &mut String, head: &str) {
        let _ = writeln!(out, "{head}: {} points", self.points.len());
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

    fn points(&self) -> &[Point] {
        &self.points
    }
}
