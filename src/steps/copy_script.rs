//! `copy-script`: upload a file atomically, keeping track of what was on the host before.
//!
//! The seeds' habit is "read before you extend": the script is read and edited where it runs.
//! rigrun remembers on the host (in `<workdir>/.rigrun/uploaded/`) the checksum of what it last
//! uploaded to each path, so it can tell a copy edited on the host from one that is merely older
//! than the playbook's. A host-side edit is never replaced in silence: its version and a unified
//! diff are saved in the run directory and a warning names host, file, lines changed and the
//! diff; `on_host_edit` chooses overwrite (the default), keep (use the host's copy) or fail.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{HostCtx, StepOutcome};
use crate::config::steps::copy_script::{CopyScriptPlan, OnHostEdit};
use crate::config::template::{render, sha256_command, shell_quote};
use crate::config::{HostVars, Quoting};
use crate::events::Event;
use crate::plan::PlannedStep;

/// What an upload did.
pub struct Upload {
    pub sha256: String,
    /// The checksum of the file the host had before, when it had one.
    pub previous_sha256: Option<String>,
    pub uploaded: bool,
    /// Where the diff against the host's previous version was saved, when it differed.
    pub diff: Option<PathBuf>,
}

pub async fn run(
    ctx: &mut HostCtx,
    step: &PlannedStep,
    plan: &CopyScriptPlan,
    vars: &HostVars,
) -> Result<StepOutcome> {
    let src = &plan.src;
    let data = contents(plan, vars).await?;
    let mode = match plan.mode {
        Some(m) => m,
        None => std::fs::metadata(src)?.permissions().mode() & 0o7777,
    };
    let dest = ctx.resolve(&plan.dest);
    let sha256 = sha256_hex(&data);
    let record = upload_record(ctx, &dest);
    let on_host = host_state(ctx, &dest, &record).await?;
    let mut details = json!({
        "src": src.display().to_string(),
        "dest": dest,
        "sha256": sha256,
        "previous_sha256": on_host.current,
        "uploaded": false,
        "mode": format!("{mode:04o}"),
        "diff": null,
    });
    if on_host.current.as_deref() == Some(sha256.as_str()) {
        if on_host.last_uploaded.as_deref() != Some(sha256.as_str()) {
            write_record(ctx, &record, &sha256).await?;
        }
        return Ok(StepOutcome::ok(details));
    }
    if on_host.current.is_some() {
        let (diff, changed) = save_previous(ctx, &dest, &data, &ctx.step_dir(step)?).await?;
        details["diff"] = diff.display().to_string().into();
        if on_host.edited() {
            let edit = HostEdit {
                src,
                dest: &dest,
                changed,
                diff: &diff,
            };
            if let Some(outcome) = handle_host_edit(ctx, plan.on_host_edit, &edit, &mut details) {
                return Ok(outcome);
            }
        }
    }
    upload_checked(ctx, &data, &dest, mode, &sha256).await?;
    write_record(ctx, &record, &sha256).await?;
    details["uploaded"] = true.into();
    Ok(StepOutcome::ok(details))
}

/// The file to upload: the script, rendered with the host's variables when it is a template.
async fn contents(plan: &CopyScriptPlan, vars: &HostVars) -> Result<Vec<u8>> {
    let src = &plan.src;
    let data = std::fs::read(src).with_context(|| format!("cannot read {}", src.display()))?;
    if !plan.template {
        return Ok(data);
    }
    let text = String::from_utf8(data)
        .with_context(|| format!("{} is not UTF-8 text, so it cannot be a template", src.display()))?;
    // On a blocking thread, so that the step's timeout and Ctrl-C still fire while it renders;
    // the render itself cannot be cancelled, the fuel budget is what bounds it.
    let ctx = crate::config::context(vars);
    Ok(
        tokio::task::spawn_blocking(move || render(&text, Quoting::Plain, &ctx))
            .await?
            .map_err(|e| anyhow::anyhow!("cannot render {} as a template: {e}", src.display()))?
            .into_bytes(),
    )
}

/// What the host holds at a path: the file's checksum, and what rigrun last uploaded there.
struct HostState {
    current: Option<String>,
    last_uploaded: Option<String>,
}

impl HostState {
    /// The host's copy is not what rigrun last put there: edited on the host, or never uploaded.
    fn edited(&self) -> bool {
        self.current.is_some() && self.current != self.last_uploaded
    }
}

/// A copy changed on the host, and where its diff against the playbook's script was saved.
struct HostEdit<'a> {
    src: &'a Path,
    dest: &'a str,
    changed: usize,
    diff: &'a Path,
}

/// Says what happened to a host-side edit, as `on_host_edit` chose; `Some` ends the step
/// without uploading.
fn handle_host_edit(
    ctx: &HostCtx,
    choice: OnHostEdit,
    edit: &HostEdit,
    details: &mut serde_json::Value,
) -> Option<StepOutcome> {
    let what = format!(
        "{} on {} holds a version rigrun did not upload (edited there?): {} lines differ from {}",
        edit.dest,
        ctx.host,
        edit.changed,
        edit.src.display()
    );
    let diff = edit.diff.display();
    details["host_edit"] = json!({ "lines_changed": edit.changed, "on_host_edit": choice });
    let (message, outcome) = match choice {
        OnHostEdit::Overwrite => (
            format!("{what}; overwritten, the host's version and the diff are in {diff}"),
            None,
        ),
        OnHostEdit::Keep => (
            format!("{what}; kept the host's version (on_host_edit: keep); the diff is in {diff}"),
            Some(StepOutcome::ok(details.clone())),
        ),
        OnHostEdit::Fail => {
            let error = format!(
                "{what}; not overwritten (on_host_edit: fail): the host's version and the diff are \
                 in {diff}; merge the edit into the playbook's script, or set on_host_edit: overwrite or keep"
            );
            return Some(StepOutcome::failed(error, details.clone()));
        }
    };
    ctx.emit(Event::Warning {
        host: ctx.host.clone(),
        message,
    });
    outcome
}

/// Where rigrun notes, on the host, what it last uploaded to `dest`.
fn upload_record(ctx: &HostCtx, dest: &str) -> String {
    format!("{}/.rigrun/uploaded/{}", ctx.workdir, sha256_hex(dest.as_bytes()))
}

/// The checksum of `dest` and the one noted in `record`, in one round trip.
async fn host_state(ctx: &HostCtx, dest: &str, record: &str) -> Result<HostState> {
    let (q, r) = (shell_quote(dest), shell_quote(record));
    let command = format!("{}; cat {r} 2>/dev/null || echo none", checksum_or_why(&q));
    let out = ctx.transport.output(&command).await?;
    let mut lines = out.lines().map(|l| l.split_whitespace().next().unwrap_or(""));
    let current = match lines.next().unwrap_or("") {
        "absent" => None,
        "no-tool" => Some(sha256_hex(&ctx.transport.read_file(dest).await?)),
        hash if is_sha256(hash) => Some(hash.to_string()),
        other => bail!(
            "cannot read the checksum of {dest} on {}: unexpected reply `{other}`",
            ctx.host
        ),
    };
    let last_uploaded = lines.next().filter(|h| is_sha256(h)).map(str::to_string);
    Ok(HostState {
        current,
        last_uploaded,
    })
}

fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

async fn write_record(ctx: &HostCtx, record: &str, sha256: &str) -> Result<()> {
    ctx.transport
        .write_file_atomic(record, format!("{sha256}\n").as_bytes(), 0o644)
        .await
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Uploads `data` to `dest` unless the host already has the same bytes; checks the checksum on
/// the host afterwards. With `diff_dir`, a different previous version is diffed and kept there.
pub async fn upload_if_changed(
    ctx: &HostCtx,
    data: &[u8],
    dest: &str,
    mode: u32,
    diff_dir: Option<&Path>,
) -> Result<Upload> {
    let sha256 = sha256_hex(data);
    let previous_sha256 = remote_sha256(ctx, dest).await?;
    if previous_sha256.as_deref() == Some(sha256.as_str()) {
        return Ok(Upload {
            sha256,
            previous_sha256,
            uploaded: false,
            diff: None,
        });
    }
    let diff = match (&previous_sha256, diff_dir) {
        (Some(_), Some(dir)) => Some(save_previous(ctx, dest, data, dir).await?.0),
        _ => None,
    };
    upload_checked(ctx, data, dest, mode, &sha256).await?;
    Ok(Upload {
        sha256,
        previous_sha256,
        uploaded: true,
        diff,
    })
}

/// Writes `data` to `dest` atomically and checks its checksum on the host afterwards.
async fn upload_checked(ctx: &HostCtx, data: &[u8], dest: &str, mode: u32, sha256: &str) -> Result<()> {
    ctx.transport.write_file_atomic(dest, data, mode).await?;
    let after = remote_sha256(ctx, dest).await?;
    if after.as_deref() != Some(sha256) {
        bail!(
            "{dest} on {} has checksum {} after the upload, expected {sha256}",
            ctx.host,
            after.as_deref().unwrap_or("(missing)")
        );
    }
    Ok(())
}

/// Shell printing the sha256 of the file at `quoted` first, else `no-tool` (neither
/// `sha256sum` nor `shasum` there) or `absent` (no such file).
fn checksum_or_why(quoted: &str) -> String {
    format!(
        "if [ -f {quoted} ]; then {} || echo no-tool; else echo absent; fi",
        sha256_command(quoted)
    )
}

/// The sha256 of a file on the host, None when it does not exist. Uses `sha256sum` or `shasum`
/// there, and reads the file back when neither exists.
pub async fn remote_sha256(ctx: &HostCtx, path: &str) -> Result<Option<String>> {
    let q = shell_quote(path);
    let out = ctx.transport.output(&checksum_or_why(&q)).await?;
    let first = out.split_whitespace().next().unwrap_or("");
    Ok(match first {
        "absent" => None,
        "no-tool" => Some(sha256_hex(&ctx.transport.read_file(path).await?)),
        hash if is_sha256(hash) => Some(hash.to_string()),
        other => bail!(
            "cannot read the checksum of {path} on {}: unexpected reply `{other}`",
            ctx.host
        ),
    })
}

/// Saves the host's previous version and a unified diff to the new one; returns the diff's path
/// and how many lines differ.
async fn save_previous(ctx: &HostCtx, dest: &str, new: &[u8], dir: &Path) -> Result<(PathBuf, usize)> {
    let old = ctx.transport.read_file(dest).await?;
    let name = Path::new(dest)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file");
    std::fs::write(dir.join(format!("{name}.previous")), &old)?;
    let diff_path = dir.join(format!("{name}.diff"));
    let (diff, changed) = match (std::str::from_utf8(&old), std::str::from_utf8(new)) {
        (Ok(old), Ok(new)) => {
            let lines = similar::TextDiff::from_lines(old, new);
            let changed = lines
                .iter_all_changes()
                .filter(|c| c.tag() != similar::ChangeTag::Equal)
                .count();
            let text = lines
                .unified_diff()
                .header(
                    &format!("{}:{dest} (on the host before)", ctx.host),
                    &format!("{dest} (uploaded)"),
                )
                .to_string();
            (text, changed)
        }
        _ => {
            let text = format!(
                "binary files differ: {} (on the host before) and {} (uploaded)\n",
                sha256_hex(&old),
                sha256_hex(new)
            );
            (text, 1)
        }
    };
    std::fs::write(&diff_path, diff)?;
    Ok((diff_path, changed))
}
