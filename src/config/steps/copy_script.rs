//! `copy-script`: upload a file to the host atomically, recording checksums and any remote edits.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::{Describe, Plans, StepKind};
use crate::config::duration::Dur;
use crate::config::render::{RenderError, Renderer};
use crate::config::template::{Quoting, Text};

/// As written in the playbook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyScript {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::config::duration::timeout")]
    pub timeout: Option<Dur>,
    /// Relative to the playbook file.
    pub src: Text,
    pub dest: Text,
    /// Octal permission bits such as "0755"; the local file's mode when absent.
    pub mode: Option<Spanned<String>>,
    /// Render the file with the host's variables before uploading.
    #[serde(default)]
    pub template: bool,
    /// What to do when the host's copy was changed there since rigrun last uploaded it.
    #[serde(default)]
    pub on_host_edit: OnHostEdit,
}

/// What copy-script does with a copy that was edited on the host (the seeds' workflow is to
/// read and extend the script where it runs). Every choice says so on the terminal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnHostEdit {
    /// Keep the host's version and its diff in the run directory, then upload.
    #[default]
    Overwrite,
    /// Upload nothing: the host's version is used, and recorded as such.
    Keep,
    /// Fail the step, so that the edit is merged first.
    Fail,
}

/// Planned for one host: `src` found on this machine, `mode` read.
#[derive(Debug, Clone, Serialize)]
pub struct CopyScriptPlan {
    pub src: PathBuf,
    pub dest: String,
    pub mode: Option<u32>,
    pub template: bool,
    pub on_host_edit: OnHostEdit,
}

impl StepKind for CopyScript {
    fn templates(&self) -> Vec<(&Text, Quoting)> {
        vec![(&self.src, Quoting::Plain), (&self.dest, Quoting::Plain)]
    }
}

impl Plans for CopyScript {
    type Plan = CopyScriptPlan;

    fn plan(&self, r: &Renderer) -> Result<CopyScriptPlan, RenderError> {
        let src = r.playbook_dir().join(r.render(&self.src, Quoting::Plain)?);
        if !src.is_file() {
            return Err(r.error(
                &self.src,
                format!(
                    "the script {} does not exist (src: is relative to the playbook file)",
                    src.display()
                ),
            ));
        }
        Ok(CopyScriptPlan {
            src,
            dest: r.render(&self.dest, Quoting::Plain)?,
            mode: self.mode(r)?,
            template: self.template,
            on_host_edit: self.on_host_edit,
        })
    }
}

impl CopyScript {
    /// `mode:` as permission bits.
    fn mode(&self, r: &Renderer) -> Result<Option<u32>, RenderError> {
        let Some(m) = &self.mode else { return Ok(None) };
        u32::from_str_radix(m.value.trim_start_matches("0o"), 8)
            .map(Some)
            .map_err(|_| {
                r.error(
                    m,
                    format!("mode `{}` is not octal permission bits such as \"0755\"", m.value),
                )
            })
    }
}

impl Describe for CopyScriptPlan {
    fn describe(&self, out: &mut String, head: &str) {
        let _ = writeln!(out, "{head}: upload {} to {}", self.src.display(), self.dest);
    }
}
