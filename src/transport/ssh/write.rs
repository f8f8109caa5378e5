//! Files written on the host over SFTP, atomically (a temporary name renamed), and why not in
//! the host's words when SFTP only says "Failure". A local file is streamed with writes in
//! flight: memory flat in its size, and no round trip waited for per chunk.

use std::io::SeekFrom;
use std::path::Path;
use std::pin::Pin;

use anyhow::{Context, Result};
use futures_util::TryStreamExt as _;
use openssh_sftp_client::file::File;
use tokio::io::{AsyncReadExt as _, AsyncSeek};

use super::sftp::sftp_path;
use super::SshTransport;
use crate::transport::wrapper::{self, Output, Stream};
use crate::transport::Source;

/// SFTP writes in flight while streaming a local file.
const WRITE_AHEAD: usize = 16;
/// Bytes per SFTP write (OpenSSH's sftp-server takes up to 255 KiB).
const CHUNK: usize = 252 * 1024;

impl SshTransport {
    pub async fn write_file_atomic(&self, path: &str, source: Source<'_>, mode: u32) -> Result<()> {
        let sftp = self.sftp().await?;
        let target = sftp_path(path);
        let dir = target.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut fs = sftp.fs();
        create_dirs(&mut fs, &dir)
            .await
            .with_context(|| format!("cannot create {} on {}", dir.display(), self.host))?;
        let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("upload");
        let tmp = dir.join(format!(".{name}.rigrun-{}", &wrapper::new_marker()[14..22]));
        let result = async {
            match source {
                Source::Bytes(data) => fs.write(&tmp, data).await?,
                Source::File(local) => {
                    let file = sftp
                        .options()
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .open(&tmp)
                        .await?;
                    stream_into(file, local).await?;
                }
            }
            fs.set_permissions(
                &tmp,
                openssh_sftp_client::metadata::Permissions::from(mode as u16),
            )
            .await?;
            fs.rename(&tmp, &target).await?;
            anyhow::Ok(())
        }
        .await;
        let Err(error) = result else { return Ok(()) };
        let _ = fs.remove_file(&tmp).await;
        let why = self
            .why_not_writable(&dir.display().to_string(), source.byte_len())
            .await;
        Err(error.context(match why {
            Some(why) => format!("cannot write {path} on {}: {why}", self.host),
            None => format!("cannot write {path} on {}", self.host),
        }))
    }

    /// Asks the host, in words, why `dir` cannot take `bytes` more: SFTP itself only says
    /// "Failure". None when the host sees no reason (the SFTP error then stands alone).
    async fn why_not_writable(&self, dir: &str, bytes: usize) -> Option<String> {
        let probe = format!(
            "d={}; [ -z \"$d\" ] && d=.; p=$d; while [ ! -e \"$p\" ]; do p=$(dirname \"$p\"); done; \
             [ \"$p\" != \"$d\" ] && echo \"missing $p\"; \
             if err=$( (: > \"$p/.rigrun-probe-$$\") 2>&1 ); then rm -f \"$p/.rigrun-probe-$$\"; \
             df -Pk \"$p\" | awk 'NR==2 {{print \"free\", $4}}'; else echo \"cannot $err\"; fi",
            crate::config::template::shell_quote(dir)
        );
        let said = self.output_of(&probe).await?;
        host_says(dir, bytes, &said)
    }

    /// Stdout of a short command, or None when it could not run.
    async fn output_of(&self, command: &str) -> Option<String> {
        let mut out = String::new();
        let code = self
            .exec(command, &mut |stream, output| {
                if let (Stream::Stdout, Output::Line(line)) = (stream, output) {
                    out.push_str(&wrapper::line_text(line));
                    out.push('\n');
                }
            })
            .await
            .ok()?;
        (code == 0).then_some(out)
    }
}

/// The reason in the probe's answer (see `why_not_writable`), in the user's words.
fn host_says(dir: &str, bytes: usize, said: &str) -> Option<String> {
    let missing = said.lines().find_map(|l| l.strip_prefix("missing "));
    let cannot = said.lines().find_map(|l| l.strip_prefix("cannot "));
    let free_kib = said
        .lines()
        .find_map(|l| l.strip_prefix("free "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    let reason = if let Some(err) = cannot {
        let at = missing.unwrap_or(dir);
        if err.contains("Read-only file system") {
            format!("the file system of {at} is read-only there")
        } else if err.contains("No space left") {
            format!("the disk holding {at} is full")
        } else if err.contains("Permission denied") {
            format!("permission denied: the login user may not write in {at}")
        } else {
            format!("{at} is not writable: {}", err.trim())
        }
    } else if free_kib.is_some_and(|kib| kib * 1024 < bytes as u64 + 4096) {
        format!(
            "the disk holding {dir} is full ({} KiB free, {} KiB to write)",
            free_kib.unwrap_or(0),
            bytes.div_ceil(1024)
        )
    } else if let Some(parent) = missing {
        format!("{dir} does not exist and could not be created under {parent}")
    } else {
        return None;
    };
    Some(reason + "; free space or choose another `workdir:` in the inventory")
}

/// Writes a local file into an open SFTP file, [`WRITE_AHEAD`] chunks in flight.
async fn stream_into(file: File, local: &Path) -> Result<()> {
    let open = tokio::fs::File::open(local)
        .await
        .with_context(|| format!("cannot read {}", local.display()))?;
    let chunks = futures_util::stream::try_unfold((open, 0u64), |(mut open, offset)| async move {
        let mut buf = bytes::BytesMut::zeroed(CHUNK);
        let mut filled = 0;
        while filled < CHUNK {
            let n = open.read(&mut buf[filled..]).await?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        let next = offset + filled as u64;
        anyhow::Ok((filled > 0).then_some(((offset, buf.freeze()), (open, next))))
    });
    chunks
        .map_ok(|(offset, chunk)| write_at(file.clone(), offset, chunk))
        .try_buffered(WRITE_AHEAD)
        .try_collect::<()>()
        .await?;
    file.close().await?;
    Ok(())
}

async fn write_at(mut file: File, offset: u64, chunk: bytes::Bytes) -> Result<()> {
    Pin::new(&mut file).start_seek(SeekFrom::Start(offset))?;
    file.write_all(&chunk).await?;
    Ok(())
}

async fn create_dirs(fs: &mut openssh_sftp_client::fs::Fs, dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        if fs.metadata(ancestor).await.is_ok() {
            break;
        }
        missing.push(ancestor.to_path_buf());
    }
    for d in missing.into_iter().rev() {
        fs.create_dir(&d).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_answer_becomes_a_reason() {
        let full = host_says("/w", 1 << 20, "free 12\n").unwrap();
        assert!(
            full.starts_with("the disk holding /w is full (12 KiB free, 1024 KiB to write)"),
            "{full}"
        );
        let ro = host_says(
            "/w",
            10,
            "cannot sh: 1: cannot create /w/.rigrun-probe-9: Read-only file system\n",
        );
        assert_eq!(
            ro.unwrap(),
            "the file system of /w is read-only there; free space or choose another `workdir:` in the inventory"
        );
        let denied = host_says(
            "/w/x",
            10,
            "missing /w\ncannot sh: 1: cannot create /w/.p: Permission denied\n",
        );
        assert!(denied
            .unwrap()
            .starts_with("permission denied: the login user may not write in /w;"));
        assert_eq!(host_says("/w", 10, "free 999999\n"), None);
    }
}
