//! `fetch-results`: download files matching a glob on the host into the run directory.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{yes, Describe, OnResume, Plans, StepKind};
use crate::config::duration::Dur;
use crate::config::render::{RenderError, Renderer};
use crate::config::template::{Quoting, Text};

/// As written in the playbook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchResults {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::config::duration::timeout")]
    pub timeout: Option<Dur>,
    pub src: Text,
    /// Turn fetched JSON result files into records (default true).
    #[serde(default = "yes")]
    pub records: bool,
    /// Fetch the files that symbolic links point to, when they stay inside the glob's directory
    /// (default false: links are listed as skipped, never followed).
    #[serde(default)]
    pub follow_symlinks: bool,
}

/// Planned for one host.
#[derive(Debug, Clone, Serialize)]
pub struct FetchResultsPlan {
    pub src: String,
    pub records: bool,
    pub follow_symlinks: bool,
}

impl StepKind for FetchResults {
    fn templates(&self) -> Vec<(&Text, Quoting)> {
        vec![(&self.src, Quoting::Plain)]
    }

    fn on_resume(&self) -> OnResume {
        OnResume::Collect
    }
}

impl Plans for FetchResults {
    type Plan = FetchResultsPlan;

    fn plan(&self, r: &Renderer) -> Result<FetchResultsPlan, RenderError> {
        Ok(FetchResultsPlan {
            src: r.render(&self.src, Quoting::Plain)?,
            records: self.records,
            follow_symlinks: self.follow_symlinks,
        })
    }
}

impl Describe for FetchResultsPlan {
    fn describe(&self, out: &mut String, head: &str) {
        let links = if self.follow_symlinks {
            " (following links that stay inside its directory)"
        } else {
            ""
        };
        let _ = writeln!(out, "{head}: fetch {}{links} into the run directory", self.src);
    }
}
