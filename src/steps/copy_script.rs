//! `copy-script`: upload a file atomically, keeping track of what was on the host before.
//!
//! The seeds' habit is "read before you extend": when the host holds a different version of the
//! script (someone edited it there), its checksum is recorded and a unified diff against the new
//! version is saved in the run directory before it is replaced.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{HostCtx, StepOutcome};
use crate::config::steps::copy_script::CopyScriptPlan;
use crate::config::template::{render, shell_quote};
use crate::config::{HostVars, Quoting};
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
    let mut data = std::fs::read(src).with_context(|| format!("cannot read {}", src.display()))?;
    if plan.template {
        let text = String::from_utf8(data)
            .with_context(|| format!("{} is not UTF-8 text, so it cannot be a template", src.display()))?;
        // On a blocking thread, so that the step's timeout and Ctrl-C still fire while it
        // renders; the render itself cannot be cancelled, the fuel budget is what bounds it.
        let ctx = crate::config::context(vars);
        data = tokio::task::spawn_blocking(move || render(&text, Quoting::Plain, &ctx))
            .await?
            .map_err(|e| anyhow::anyhow!("cannot render {} as a template: {e}", src.display()))?
            .into_bytes();
    }
    let mode = match plan.mode {
        Some(m) => m,
        None => std::fs::metadata(src)?.permissions().mode() & 0o7777,
    };
    let dest = ctx.resolve(&plan.dest);
    let upload = upload_if_changed(ctx, &data, &dest, mode, Some(&ctx.step_dir(step)?)).await?;
    Ok(StepOutcome::ok(json!({
        "src": src.display().to_string(),
        "dest": dest,
        "sha256": upload.sha256,
        "previous_sha256": upload.previous_sha256,
        "uploaded": upload.uploaded,
        "mode": format!("{mode:04o}"),
        "diff": upload.diff.map(|p| p.display().to_string()),
    })))
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
        (Some(_), Some(dir)) => Some(save_previous(ctx, dest, data, dir).await?),
        _ => None,
    };
    ctx.transport.write_file_atomic(dest, data, mode).await?;
    let after = remote_sha256(ctx, dest).await?;
    if after.as_deref() != Some(sha256.as_str()) {
        bail!(
            "{dest} on {} has checksum {} after the upload, expected {sha256}",
            ctx.host,
            after.as_deref().unwrap_or("(missing)")
        );
    }
    Ok(Upload {
        sha256,
        previous_sha256,
        uploaded: true,
        diff,
    })
}

/// The sha256 of a file on the host, None when it does not exist. Uses `sha256sum` or `shasum`
/// there, and reads the file back when neither exists.
pub async fn remote_sha256(ctx: &HostCtx, path: &str) -> Result<Option<String>> {
    let q = shell_quote(path);
    let command = format!(
        "if [ -f {q} ]; then sha256sum {q} 2>/dev/null || shasum -a 256 {q} 2>/dev/null || echo no-tool; else echo absent; fi"
    );
    let out = ctx.transport.output(&command).await?;
    let first = out.split_whitespace().next().unwrap_or("");
    Ok(match first {
        "absent" => None,
        "no-tool" => Some(sha256_hex(&ctx.transport.read_file(path).await?)),
        hash if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => Some(hash.to_string()),
        other => bail!(
            "cannot read the checksum of {path} on {}: unexpected reply `{other}`",
            ctx.host
        ),
    })
}

/// Saves the host's previous version and a unified diff to the new one; returns the diff's path.
async fn save_previous(ctx: &HostCtx, dest: &str, new: &[u8], dir: &Path) -> Result<PathBuf> {
    let old = ctx.transport.read_file(dest).await?;
    let name = Path::new(dest)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file");
    std::fs::write(dir.join(format!("{name}.previous")), &old)?;
    let diff_path = dir.join(format!("{name}.diff"));
    let diff = match (std::str::from_utf8(&old), std::str::from_utf8(new)) {
        (Ok(old), Ok(new)) => similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .header(
                &format!("{}:{dest} (on the host before)", ctx.host),
                &format!("{dest} (uploaded)"),
            )
            .to_string(),
        _ => format!(
            "binary files differ: {} (on the host before) and {} (uploaded)\n",
            sha256_hex(&old),
            sha256_hex(new)
        ),
    };
    std::fs::write(&diff_path, diff)?;
    Ok(diff_path)
}
