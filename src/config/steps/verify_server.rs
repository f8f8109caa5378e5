//! `verify-server`: `GET {url}/v1/models` as seen from the host, until it answers or `wait` runs out.

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
pub struct VerifyServer {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::config::duration::timeout")]
    pub timeout: Option<Dur>,
    pub url: Text,
    /// Must be listed by `/v1/models` when given.
    pub model: Option<Text>,
    /// How long to keep polling until the server answers (servers take minutes to load).
    pub wait: Option<Dur>,
    /// Also send one short completion and require tokens back.
    #[serde(default)]
    pub smoke: bool,
    /// Name of a local environment variable holding the API key (sent as a bearer token).
    pub api_key_env: Option<String>,
    /// How long the server may take to answer again when it stops answering during a sweep,
    /// before the sweep's remaining points are not run (default 5m).
    pub down_for: Option<Dur>,
}

/// Planned for one host.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyServerPlan {
    pub url: String,
    pub model: Option<String>,
    pub wait: Duration,
    pub smoke: bool,
    pub api_key_env: Option<String>,
    pub down_for: Duration,
}

impl StepKind for VerifyServer {
    fn templates(&self) -> Vec<(&Text, Quoting)> {
        let mut t = vec![(&self.url, Quoting::Plain)];
        t.extend(self.model.iter().map(|m| (m, Quoting::Plain)));
        t
    }

    fn provides(&self) -> &'static [&'static str] {
        &["server"]
    }
}

impl Plans for VerifyServer {
    type Plan = VerifyServerPlan;

    fn plan(&self, r: &Renderer) -> Result<VerifyServerPlan, RenderError> {
        Ok(VerifyServerPlan {
            url: r.render(&self.url, Quoting::Plain)?,
            model: r.render_optional(&self.model, Quoting::Plain)?,
            wait: self.wait.map_or(DEFAULT_SERVER_WAIT, |d| d.0),
            smoke: self.smoke,
            api_key_env: self.api_key_env.clone(),
            down_for: self.down_for.map_or(super::DEFAULT_DOWN_FOR, |d| d.0),
        })
    }
}

impl Describe for VerifyServerPlan {
    fn describe(&self, out: &mut String, head: &str) {
        let _ = writeln!(
            out,
            "{head}: GET {}/v1/models until it answers (wait {}){}{}",
            self.url,
            humantime::format_duration(self.wait),
            self.model
                .as_ref()
                .map(|m| format!(", model {m} must be listed"))
                .unwrap_or_default(),
            if self.smoke {
                ", then one short completion"
            } else {
                ""
            }
        );
    }
}
