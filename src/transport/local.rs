//! The `local` connection: the same operations on this machine, without SSH.
//! Commands run in rigrun's current directory.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::Semaphore;

use super::channel::{Channel, Program};
use super::wrapper::{self, Output, Stream};
use super::{unix_seconds, Source, Streamed};

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
        let marker = wrapper::new_marker();
        let channel = self
            .spawn(Program::Script(wrapper::WRAPPER), &[command, &marker])
            .await?;
        let code = wrapper::finish(channel, &marker, on_output).await?;
        code.context("the command ended without reporting its exit code (was its shell killed?)")
    }

    /// Starts `sh -c script rigrun args...` here.
    pub(crate) async fn spawn(&self, program: Program<'_>, args: &[&str]) -> Result<Channel> {
        let permit = self.permits.clone().acquire_owned().await?;
        Channel::local(program, args, permit)
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

    pub async fn write_file_atomic(&self, path: &str, source: Source<'_>, mode: u32) -> Result<()> {
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
        match source {
            Source::Bytes(data) => tmp.write_all(data)?,
            Source::File(local) => {
                let mut from =
                    std::fs::File::open(local).with_context(|| format!("cannot read {}", local.display()))?;
                std::io::copy(&mut from, tmp.as_file_mut())?;
            }
        }
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
