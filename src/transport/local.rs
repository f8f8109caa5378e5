//! The `local` connection: the same operations on this machine, without SSH.
//! Commands run in rigrun's current directory.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::Semaphore;

use super::wrapper::{self, Output, Stream};
use super::{unix_seconds, Streamed};

/// Bytes read at a time when streaming a local file.
const LOCAL_CHUNK: usize = 1 << 20;

pub struct LocalTransport {
    permits: Arc<Semaphore>,
}

impl LocalTransport {
    pub fn new() -> LocalTransport {
        LocalTransport {
            permits: super::channel_limit(),
        }
    }

    pub async fn exec(
        &self,
        command: &str,
        on_output: &mut (dyn FnMut(Stream, Output) + Send),
    ) -> Result<i32> {
        let _permit = self.permits.acquire().await?;
        let marker = wrapper::new_marker();
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .args(wrapper::wrapper_args(command, &marker))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start sh on this machine")?;
        // Held until the command ends: closing it is what stops the command (see wrapper.rs).
        let _stdin = child.stdin.take();
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let code = wrapper::drive(stdout, stderr, &marker, on_output).await?;
        child.wait().await?;
        code.context("the command ended without reporting its exit code (was its shell killed?)")
    }

    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        tokio::fs::read(path)
            .await
            .with_context(|| format!("cannot read {path}"))
    }

    pub async fn read_chunks(&self, path: &Path, on_chunk: super::OnChunk<'_>) -> Result<Streamed> {
        use tokio::io::AsyncReadExt as _;
        let mut file = tokio::fs::File::open(path)
            .await
            .with_context(|| format!("cannot open {}", path.display()))?;
        let mut buf = vec![0u8; LOCAL_CHUNK];
        let mut total = 0;
        loop {
            let n = file
                .read(&mut buf)
                .await
                .with_context(|| format!("cannot read {}", path.display()))?;
            if n == 0 {
                let meta = file.metadata().await.ok();
                return Ok(Streamed {
                    bytes: total,
                    len_after: meta.as_ref().map(|m| m.len()),
                    modified_after: meta.and_then(|m| m.modified().ok()).and_then(unix_seconds),
                });
            }
            on_chunk(&buf[..n])?;
            total += n as u64;
        }
    }

    pub async fn write_file_atomic(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let path = Path::new(path);
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".rigrun-upload-")
            .tempfile_in(dir)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        tmp.write_all(data)?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
        tmp.persist(path)
            .with_context(|| format!("cannot rename the upload to {}", path.display()))?;
        Ok(())
    }
}

impl Default for LocalTransport {
    fn default() -> Self {
        Self::new()
    }
}
