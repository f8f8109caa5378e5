//! `shell`: run one command on the host and keep its output.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Describe, Plans, StepKind};
use crate::config::duration::Dur;
use crate::config::render::{RenderError, Renderer};
use crate::config::template::{Quoting, Text};

/// As written in the playbook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shell {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::config::duration::timeout")]
    pub timeout: Option<Dur>,
    pub command: Text,
    /// How many times a failed command is run again (waiting 1 s, 2 s, 4 s, …).
    pub retries: Option<serde_saphyr::Spanned<u32>>,
}

/// Planned for one host.
#[derive(Debug, Clone, Serialize)]
pub struct ShellPlan {
    pub command: String,
    /// Attempts after a failed one (see `super::backoff`).
    pub retries: u32,
}

impl StepKind for Shell {
    fn templates(&self) -> Vec<(&Text, Quoting)> {
        vec![(&self.command, Quoting::Shell)]
    }
}

impl Plans for Shell {
    type Plan = ShellPlan;

    fn plan(&self, r: &Renderer) -> Result<ShellPlan, RenderError> {
        Ok(ShellPlan {
            command: r.render(&self.command, Quoting::Shell)?,
            retries: super::retries(r, &self.retries)?,
        })
    }
}

impl Describe for ShellPlan {
    fn describe(&self, out: &mut String, head: &str) {
        let _ = match self.retries {
            0 => writeln!(out, "{head}: $ {}", self.command),
            n => writeln!(
                out,
                "{head}: $ {}  (retried up to {})",
                self.command,
                crate::words::count(n as usize, "time")
            ),
        };
    }
}
