//! Sending a rigrun binary to a host: compressed when the host has gzip, streamed from the
//! file, and put under its name only once its checksum there is right; then run once.

use std::path::Path;

use anyhow::{bail, Result};

use super::local_cache::{self, Known};
use crate::config::template::{sha256_command, shell_quote};
use crate::steps::HostCtx;
use crate::transport::Source;

/// What was sent, for the log.
pub struct Sent {
    pub bytes: u64,
    pub compressed: bool,
}

/// Sends `local` (known as `known`) to `dest`. The host unpacks it beside `dest`, checks its
/// sha256, and only then renames it over `dest` and runs `--version`: a host never runs a
/// half-sent or corrupt rigrun. Err names why it does not run there.
pub async fn send(ctx: &HostCtx, local: &Path, known: &Known, gzip: bool, dest: &str) -> Result<Sent> {
    // A name of this upload's own: two inventory hosts may be one machine and one workdir,
    // and then send at once (each renames its own checked file; both are the same rigrun).
    let tmp = format!("{dest}.rigrun-new-{}", unique_suffix());
    let (sent, unpack) = if gzip {
        let (path, sha) = (local.to_path_buf(), known.sha256.clone());
        let copy = tokio::task::spawn_blocking(move || {
            local_cache::compressed(&path, &sha, local_cache::cache_dir().as_deref())
        })
        .await??;
        let packed = format!("{tmp}.gz");
        ctx.transport
            .write_file_from(&packed, Source::File(copy.path()), 0o600)
            .await?;
        let unpack = format!(
            "gzip -dc {p} > {t} && rm -f {p}",
            p = shell_quote(&packed),
            t = shell_quote(&tmp)
        );
        (std::fs::metadata(copy.path())?.len(), unpack)
    } else {
        ctx.transport
            .write_file_from(&tmp, Source::File(local), 0o700)
            .await?;
        (known.binary.size, ":".to_string())
    };
    install(ctx, &tmp, dest, &known.sha256, &unpack).await?;
    Ok(Sent {
        bytes: sent,
        compressed: gzip,
    })
}

/// Eight random bytes in hex, for a temporary file's name.
fn unique_suffix() -> String {
    let mut bytes = [0u8; 8];
    // Without randomness the process id still tells this rigrun's uploads from another's.
    if getrandom::fill(&mut bytes).is_err() {
        bytes[..4].copy_from_slice(&std::process::id().to_be_bytes());
    }
    hex::encode(bytes)
}

/// How old an upload's temporary file is before an install takes it for a broken-off one.
const STALE_MINUTES: u32 = 24 * 60;
/// Exit code of the install script when the checksum is wrong.
const BAD_CHECKSUM: i32 = 90;
/// What the install script prints once the binary is in place, before running it.
const INSTALLED: &str = "__rigrun_installed__";

/// Unpacks, checks and renames in one round trip, then runs the binary once. Temporary files
/// of uploads that broke off more than a day ago go too (a younger one may be another upload's,
/// still on its way).
async fn install(ctx: &HostCtx, tmp: &str, dest: &str, sha256: &str, unpack: &str) -> Result<()> {
    let (t, d) = (shell_quote(tmp), shell_quote(dest));
    let sum = sha256_command(&t);
    let (folder, name) = dest.rsplit_once('/').unwrap_or((".", dest));
    let stale = format!(
        "find {} -maxdepth 1 -name {} -mmin +{STALE_MINUTES} -exec rm -f {{}} + 2>/dev/null || :",
        shell_quote(if folder.is_empty() { "/" } else { folder }),
        shell_quote(&format!("{name}.rigrun-new-*"))
    );
    let script = format!(
        "set -e; {unpack}; chmod 755 {t}; \
         s=$( ({sum}) | cut -d' ' -f1); \
         if [ \"$s\" != {sha256} ]; then rm -f {t}; echo \"${{s:-no sha256sum or shasum there}}\"; exit {BAD_CHECKSUM}; fi; \
         mv -f {t} {d}; {stale}; echo {INSTALLED}; {d} --version"
    );
    let out = ctx.transport.captured(&script).await?;
    match out.code {
        0 => Ok(()),
        BAD_CHECKSUM => bail!(
            "the rigrun sent to {dest} on {} has checksum {} there, expected {sha256}",
            ctx.host,
            out.stdout.trim()
        ),
        code => {
            let said = out.stderr.trim();
            if out.stdout.contains(INSTALLED) {
                bail!(
                    "{}; the host said: {said}",
                    super::rigrun_does_not_run(&ctx.host, said)
                );
            }
            bail!(
                "cannot put the rigrun sent in place at {dest} on {} (exit {code}): {said}",
                ctx.host
            )
        }
    }
}
