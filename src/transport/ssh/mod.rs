//! The `ssh` connection: one OpenSSH ControlMaster per host, commands and SFTP multiplexed over it.
//!
//! We start the master with the `ssh` binary ourselves, so that every `ssh_options` entry becomes
//! an `-o` flag and `~/.ssh/config` is still read, then attach to it with openssh's native mux.
//!
//! Here: the link, its commands and its reconnects. `master.rs`: the ControlMaster process (its
//! options, keepalive probes, start and exit); `failure.rs`: why ssh could not connect, in words;
//! `sftp.rs`: the two ways into SFTP; `read.rs`: files read back (SFTP reads in flight, or `cat`);
//! `write.rs`: files written atomically; `forward.rs`: port forwards to the host's loopback.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use openssh::Session;
use openssh_sftp_client::Sftp;
use tokio::sync::{Mutex, Semaphore};

use super::channel::{Channel, Program};
use super::login_noise::{self, LoginNoise};
use super::wrapper::{self, Output, Stream};
use super::Lost;
use crate::config::{HostSpec, KnownHostsPolicy};
use master::MasterSpec;

mod failure;
mod forward;
mod master;
mod mux;
mod read;
mod sftp;
mod write;

pub struct SshTransport {
    host: String,
    master: MasterSpec,
    session: Mutex<Arc<Session>>,
    sftp: Mutex<Option<Arc<Sftp>>>,
    /// Exec channels; SFTP holds one more for the whole run.
    permits: Arc<Semaphore>,
    /// What the login shell printed before a command, once probed (see [`login_noise`]).
    noise: std::sync::OnceLock<Option<LoginNoise>>,
}

impl SshTransport {
    pub async fn connect(
        host: &str,
        spec: &HostSpec,
        policy: KnownHostsPolicy,
        control_dir: &Path,
    ) -> Result<SshTransport> {
        let master = MasterSpec::new(host, spec, policy, control_dir);
        let session = master.start().await?;
        Ok(SshTransport {
            host: host.to_string(),
            master,
            session: Mutex::new(Arc::new(session)),
            sftp: Mutex::new(None),
            permits: Arc::new(Semaphore::new(super::MAX_CHANNELS_PER_HOST - 1)),
            noise: std::sync::OnceLock::new(),
        })
    }

    /// Sees once what the login shell prints before a command (it decides how SFTP starts),
    /// running the `sh` script `then` in the same round trip; returns what `then` printed.
    pub async fn probe_login(&self, then: &str) -> Result<String> {
        let session = self.session().await?;
        let (noise, said) = login_noise::probe(&session, &self.host, then).await?;
        let _ = self.noise.set(noise);
        Ok(said)
    }

    /// What the login shell printed before a command ran, once probed; None when quiet.
    pub fn login_noise(&self) -> Option<&LoginNoise> {
        self.noise.get().and_then(Option::as_ref)
    }

    /// The live session; a master that died (network blip, idle timeout) is started again.
    async fn session(&self) -> Result<Arc<Session>> {
        let mut guard = self.session.lock().await;
        if guard.check().await.is_err() {
            // Said to the user by whoever lost the connection (see `job.rs`), in words.
            tracing::info!(host = %self.host, "the SSH master is gone; reconnecting");
            *guard = Arc::new(self.master.start().await?);
            *self.sftp.lock().await = None;
        }
        Ok(guard.clone())
    }

    /// How long a dead link may go unnoticed (the keepalive probes' window).
    pub(crate) fn unnoticed_for(&self) -> Duration {
        self.master.unnoticed_for()
    }

    /// Gets a lost connection back: a new master, tried with backoff (1 s doubling to 30 s)
    /// until `until`, no attempt running past it; past it, [`Lost`] with ssh's last words.
    pub(crate) async fn reconnect(&self, until: Instant) -> Result<()> {
        let mut wait = Duration::from_secs(1);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let error = match tokio::time::timeout(left, self.session()).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => e,
                Err(_) => anyhow!("no answer from {}", self.master.describe()),
            };
            if Instant::now() + wait > until {
                return Err(Lost {
                    reason: format!(
                        "lost the connection to {} and could not get it back: {error:#}",
                        self.host
                    ),
                }
                .into());
            }
            tracing::info!(host = %self.host, "reconnecting in {wait:?}: {error:#}");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(30));
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
        code.ok_or_else(|| {
            anyhow!(
                "the connection to {} broke before the command finished",
                self.host
            )
        })
    }

    /// Starts `sh -c script rigrun args...` on the host over a new channel.
    pub(crate) async fn spawn(&self, program: Program<'_>, args: &[&str]) -> Result<Channel> {
        let permit = self.permits.clone().acquire_owned().await?;
        let session = self.session().await?;
        let child = Session::arc_raw_command(session, program.line(args))
            .stdin(openssh::Stdio::piped())
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped())
            .spawn()
            .await
            .with_context(|| format!("cannot start a command on {}", self.host))?;
        Channel::ssh(child, permit)
    }

    pub async fn close(&self) {
        if let Some(sftp) = self.sftp.lock().await.take() {
            if let Ok(sftp) = Arc::try_unwrap(sftp) {
                let _ = sftp.close().await;
            }
        }
        self.master.exit().await;
    }
}

/// A stream's text to its end (at most 16 KiB kept), for error messages.
async fn read_text(mut stream: impl tokio::io::AsyncRead + Unpin) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = (16 * 1024 - kept.len().min(16 * 1024)).min(n);
        kept.extend_from_slice(&buf[..room]);
    }
    String::from_utf8_lossy(&kept).into_owned()
}
