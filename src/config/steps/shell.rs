//! `shell`: run one command on the host and keep its output.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Describe, Plans, StepKind};
use crate::config::duration::Dur;
use crate::config::playbook::{Quoting, Text};
use crate::config::render::{RenderError, Renderer};

/// As written in the playbook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shell {
    pub name: Option<String>,
    pub timeout: Option<Dur>,
    pub command: Text,
}

/// Planned for one host.
#[derive(Debug, Clone, Serialize)]
pub struct ShellPlan {
    pub command: String,
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
        })
    }
}

impl Describe for ShellPlan {
    fn describe(&self, out: &mut String, head: &str) {
        let _ = writeln!(out, "{head}: $ {}", self.command);
    }
}
