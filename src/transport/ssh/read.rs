//! Files read back from the host: whole over SFTP, or streamed in chunks (SFTP with reads in
//! flight, or `cat` for big files and names SFTP refuses).

use std::io::SeekFrom;
use std::path::Path;
use std::pin::Pin;

use anyhow::{bail, Context, Result};
use bytes::BytesMut;
use futures_util::StreamExt as _;
use tokio::io::AsyncSeek;

use super::sftp::sftp_path;
use super::{read_text, SshTransport};
use crate::transport::login_noise::{self, SkipThrough};
use crate::transport::{channel, unix_seconds, OnChunk, Streamed};

/// SFTP reads in flight per streamed file: enough to hide the round trip, 2 MiB of buffers.
const READ_AHEAD: usize = 16;
/// Bytes asked for per SFTP read (OpenSSH's sftp-server serves up to 255 KiB).
const CHUNK: u32 = 252 * 1024;
/// Files this big stream through `cat` rather than SFTP: one stream, no request per chunk.
const CAT_FROM: u64 = 64 << 20;
/// What one read from `cat`'s stream may take: a whole widened pipe.
const CAT_CHUNK: usize = 1 << 20;

impl SshTransport {
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let sftp = self.sftp().await?;
        let data = sftp
            .fs()
            .read(sftp_path(path))
            .await
            .with_context(|| format!("cannot read {path} on {}", self.host))?;
        Ok(data.to_vec())
    }

    /// Streams a file over SFTP with [`READ_AHEAD`] reads in flight (one at a time would wait a
    /// round trip per chunk), handing the chunks on in order.
    pub async fn read_chunks(
        &self,
        path: &Path,
        size: Option<u64>,
        on_chunk: OnChunk<'_>,
    ) -> Result<Streamed> {
        // One stream without requests beats SFTP's reads in flight for a big file; and the SFTP
        // client refuses names that are not UTF-8.
        if path.to_str().is_none() || size.is_some_and(|s| s >= CAT_FROM) {
            return self.cat_chunks(path, on_chunk).await;
        }
        let sftp = self.sftp_open().await?;
        let file = sftp
            .open(path)
            .await
            .with_context(|| format!("cannot open {} on {}", path.display(), self.host))?;
        let len = CHUNK;
        let count = size.map_or(u64::MAX, |n| n.div_ceil(u64::from(len)));
        let mut chunks = futures_util::stream::iter(0..count)
            .map(|i| read_at(file.clone(), i * u64::from(len), len))
            .buffered(READ_AHEAD);
        let mut total = 0;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.with_context(|| format!("cannot read {} on {}", path.display(), self.host))?;
            if chunk.is_empty() {
                break;
            }
            on_chunk(&chunk)?;
            total += chunk.len() as u64;
            if chunk.len() < len as usize {
                break;
            }
        }
        drop(chunks);
        let meta = file.clone().metadata().await.ok();
        Ok(Streamed {
            bytes: total,
            len_after: meta.and_then(|m| m.len()),
            modified_after: meta
                .and_then(|m| m.modified())
                .and_then(|t| unix_seconds(t.as_system_time())),
        })
    }

    /// Streams a file through `cat` on an exec channel (a big one, or one whose name is not UTF-8,
    /// which the SFTP client refuses); the shell rebuilds the name from octal escapes, so any
    /// byte passes, and reports the file's length and modification time once read.
    async fn cat_chunks(&self, path: &Path, on_chunk: OnChunk<'_>) -> Result<Streamed> {
        use tokio::io::AsyncReadExt as _;
        let _permit = self.permits.acquire().await?;
        let session = self.session().await?;
        // The marker first on both streams: what the login shell printed before it is dropped.
        let marker = login_noise::new_marker("cat");
        let script = format!(
            "printf '%s' \"$1\"; printf '%s\\n' \"$1\" >&2; f=$(printf '{}x'); f=${{f%x}}; \
             cat -- \"$f\" || exit; stat -L -c '%s %Y' -- \"$f\" >&2 || true",
            octal_escapes(path.as_os_str().as_encoded_bytes())
        );
        let mut child = session
            .raw_command(format!(
                "sh -c {} rigrun {}",
                crate::config::template::shell_quote(&script),
                crate::config::template::shell_quote(&marker)
            ))
            .stdin(openssh::Stdio::null())
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped())
            .spawn()
            .await
            .with_context(|| format!("cannot start cat on {}", self.host))?;
        let stdout = channel::widened(child.stdout().take().context("no stdout channel")?);
        let mut stdout = SkipThrough::new(stdout, &marker);
        let mut buf = vec![0u8; CAT_CHUNK];
        let mut total = 0;
        loop {
            let n = stdout.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            on_chunk(&buf[..n])?;
            total += n as u64;
        }
        let err = match child.stderr().take() {
            Some(stderr) => read_text(SkipThrough::new(stderr, &marker)).await,
            None => String::new(),
        };
        let status = child.wait().await?;
        if !status.success() {
            bail!("cannot read {} on {}: {}", path.display(), self.host, err.trim());
        }
        // stat's line, the last on stderr: the length and modification time after reading
        // (none where stat cannot say: the size is still checked against the listing).
        let after: Vec<u64> = err
            .lines()
            .last()
            .map(|l| l.split_whitespace().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        Ok(Streamed {
            bytes: total,
            len_after: after.first().copied().filter(|_| after.len() == 2),
            modified_after: after.get(1).copied().filter(|_| after.len() == 2),
        })
    }
}

/// Reads up to `len` bytes at `offset`, reading again after a short reply so that only the end
/// of the file yields less than `len` (empty: at or past the end).
async fn read_at(mut file: openssh_sftp_client::file::File, offset: u64, len: u32) -> Result<BytesMut> {
    let mut data = BytesMut::new();
    while data.len() < len as usize {
        Pin::new(&mut file).start_seek(SeekFrom::Start(offset + data.len() as u64))?;
        let want = len - data.len() as u32;
        match file.read(want, BytesMut::with_capacity(want as usize)).await? {
            None => break,
            Some(part) if part.is_empty() => break,
            Some(part) if data.is_empty() => data = part,
            Some(part) => data.extend_from_slice(&part),
        }
    }
    Ok(data)
}

/// Every byte as a `printf` octal escape (`\ooo`), so a name of any bytes survives the shell.
fn octal_escapes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_name_becomes_octal_escapes() {
        assert_eq!(octal_escapes(b"a\n\xff"), "\\141\\012\\377");
    }
}
