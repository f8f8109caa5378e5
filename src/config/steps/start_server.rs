//! `start-server`: start a long-running server on the host and wait until its `url` answers.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Describe, Plans, StepKind, DEFAULT_SERVER_WAIT};
use crate::config::duration::Dur;
use crate::config::render::{RenderError, Renderer};
use crate::config::template::{Quoting, Text};

/// As written in the playbook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartServer {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::config::duration::timeout")]
    pub timeout: Option<Dur>,
    pub command: Text,
    pub url: Text,
    /// How long to wait for `url` to answer.
    pub wait: Option<Dur>,
    /// Leave the server running when the playbook ends on this host.
    #[serde(default)]
    pub keep: bool,
    /// How many times the server is started again when it crashes during a sweep (default 2;
    /// a kept server is not: it is not rigrun's job).
    pub restarts: Option<serde_saphyr::Spanned<u32>>,
}

/// Planned for one host.
#[derive(Debug, Clone, Serialize)]
pub struct StartServerPlan {
    pub command: String,
    pub url: String,
    pub wait: Duration,
    pub keep: bool,
    pub restarts: u32,
}

impl StepKind for StartServer {
    fn templates(&self) -> Vec<(&Text, Quoting)> {
        vec![(&self.command, Quoting::Shell), (&self.url, Quoting::Plain)]
    }
}

impl Plans for StartServer {
    type Plan = StartServerPlan;

    fn plan(&self, r: &Renderer) -> Result<StartServerPlan, RenderError> {
        Ok(StartServerPlan {
            command: r.render(&self.command, Quoting::Shell)?,
            url: r.render(&self.url, Quoting::Plain)?,
            wait: self.wait.map_or(DEFAULT_SERVER_WAIT, |d| d.0),
            keep: self.keep,
            restarts: super::restarts(r, &self.restarts)?,
        })
    }
}

impl Describe for StartServerPlan {
    fn describe(&self, out: &mut String, head: &str) {
        let _ = writeln!(
            out,
            "{head}: start `{}` in the background, wait for {}",
            self.command, self.url
        );
    }
}
