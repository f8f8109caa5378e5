//! Rendering a step's templates for one host: the `Renderer` every step kind's `plan` uses.
//!
//! It lives in config, beside the templates it renders, so that each kind's module under
//! `config/steps/` can plan itself without importing `plan.rs` (data flows config → plan).

use std::collections::HashSet;
use std::path::Path;

use indexmap::IndexMap;
use serde_json::Value as Json;

use super::template::{Quoting, Text};
use super::{context, template, Config, ConfigError};

/// Host variables as a name → JSON value map.
pub type HostVars = IndexMap<String, Json>;

/// Why a step could not be rendered.
pub enum RenderError {
    /// A template uses this variable, which an earlier step provides only while running.
    Deferred(String),
    Config(ConfigError),
}

/// Renders templates with one host's variables. `runtime` names variables that earlier steps
/// will provide while running; a template that needs one of them and lacks it is deferred.
pub struct Renderer<'a> {
    pub config: &'a Config,
    pub vars: &'a HostVars,
    pub runtime: &'a HashSet<&'a str>,
}

impl Renderer<'_> {
    /// The folder the playbook's relative paths start from.
    pub fn playbook_dir(&self) -> &Path {
        self.config.playbook_dir()
    }

    /// `text` rendered with the host's variables.
    pub fn render(&self, text: &Text, quoting: Quoting) -> Result<String, RenderError> {
        self.text(text, quoting, self.vars)
    }

    /// An optional field rendered with the host's variables.
    pub fn render_optional(
        &self,
        text: &Option<Text>,
        quoting: Quoting,
    ) -> Result<Option<String>, RenderError> {
        text.as_ref().map(|t| self.render(t, quoting)).transpose()
    }

    /// `text` rendered with `vars` (the host's, plus e.g. a sweep point's values).
    pub fn text(&self, text: &Text, quoting: Quoting, vars: &HostVars) -> Result<String, RenderError> {
        if let Ok(used) = template::variables(&text.value) {
            self.require_known(&used, vars)?;
        }
        template::render(&text.value, quoting, &context(vars)).map_err(|e| self.error(text, e))
    }

    /// Why `skip_if` skips a point with `vars`, or `None` when it runs.
    pub fn skip_reason(&self, expr: &Text, vars: &HostVars) -> Result<Option<String>, RenderError> {
        if let Ok(used) = template::expression_variables(&expr.value) {
            self.require_known(&used, vars)?;
        }
        template::skip_reason(&expr.value, &context(vars))
            .map_err(|e| self.error(expr, format!("skip_if cannot be evaluated: {e}")))
    }

    fn require_known(&self, used: &HashSet<String>, vars: &HostVars) -> Result<(), RenderError> {
        match used
            .iter()
            .find(|v| !vars.contains_key(*v) && self.runtime.contains(v.as_str()))
        {
            Some(var) => Err(RenderError::Deferred(var.clone())),
            None => Ok(()),
        }
    }

    /// An error at the place `at` was written in the playbook.
    pub fn error(&self, at: &serde_saphyr::Spanned<impl Sized>, message: String) -> RenderError {
        self.error_at(&at.referenced, message)
    }

    /// An error at a place in the playbook.
    pub fn error_at(&self, place: &serde_saphyr::Location, message: String) -> RenderError {
        RenderError::Config(ConfigError::at(
            &self.config.playbook_path,
            &self.config.playbook_text,
            place,
            message,
        ))
    }
}
