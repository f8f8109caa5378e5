//! Transports: how rigrun runs commands, moves files and reaches HTTP servers on a host.
//!
//! `ssh` goes through one OpenSSH ControlMaster per host (so `~/.ssh/config`, ProxyJump and the
//! agent work as they do for `ssh`); `local` does the same on this machine. Both run short
//! commands under the same wrapper (`wrapper.rs`) and the commands that measure or serve as
//! detached jobs (`job.rs`), so timeouts, Ctrl-C and lost connections treat remote work alike. What an SSH
//! host's login shell prints before our commands run is found once when connecting
//! ([`LoginNoise`]) and kept out of every byte stream (SFTP, `cat`).

mod boot;
mod channel;
pub mod cipher;
mod frame;
mod job;
pub mod job_runner;
mod job_watchdog;
mod local;
pub mod login_noise;
mod lost;
mod many;
mod node_bridge;
mod slurm;
mod ssh;
mod tar;
pub mod wrapper;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::Semaphore;

pub use boot::{OnReboot, Reboot};
pub use job::{Job, JobEnd};
pub use local::LocalTransport;
pub use login_noise::LoginNoise;
pub use lost::{is_disk_full, is_lost, is_rebooted, DiskFull, Lost, Rebooted};
pub use many::{ManySink, Tar};
pub use slurm::Allocated;
pub use ssh::SshTransport;
pub use wrapper::{line_text, Output, Stream, LINE_CAP};

use crate::config::{Connection, HostSpec, KnownHostsPolicy};

/// Receives each chunk of a streamed file, in order; an error stops the stream.
pub type OnChunk<'a> = &'a mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send);

/// A finished command: its exit code and output, line by line.
pub struct Captured {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// What a file written on the host is made of.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    Bytes(&'a [u8]),
    /// A local file, streamed.
    File(&'a Path),
}

impl Source<'_> {
    /// Its length in bytes (0 for a file that cannot be read: only said in an error).
    pub fn byte_len(&self) -> usize {
        match self {
            Source::Bytes(data) => data.len(),
            Source::File(path) => std::fs::metadata(path).map_or(0, |m| m.len() as usize),
        }
    }
}

/// What streaming a file saw: the bytes read, then the open file's length and modification time
/// (Unix seconds) once read, so that a file changed meanwhile is told from a complete one.
#[derive(Debug, Clone, Copy)]
pub struct Streamed {
    pub bytes: u64,
    pub len_after: Option<u64>,
    pub modified_after: Option<u64>,
}

/// sshd allows 10 sessions per connection (SFTP counts); we keep a margin.
pub const MAX_CHANNELS_PER_HOST: usize = 8;

/// How rigrun reaches one host, and the detached jobs it runs there (see `job.rs`).
pub struct Transport {
    link: Link,
    jobs: job::Jobs,
    /// On a Slurm host, its allocation: the link is the login node's (see `slurm.rs`).
    slurm: Option<slurm::Slurm>,
}

enum Link {
    Ssh(Box<SshTransport>),
    Local(LocalTransport),
}

/// An HTTP server on the host, reachable from here.
pub struct HttpEndpoint {
    /// A client that reaches the host's server (through a port forward for SSH hosts).
    pub client: crate::http_client::Client,
    /// The URL as the host sees it; requests use it unchanged.
    pub base_url: String,
    /// On a Slurm host, what carries the client's connections through the node while the
    /// endpoint lives (see `node_bridge.rs`).
    pub bridge: Option<node_bridge::Bridge>,
}

impl HttpEndpoint {
    /// A failed request in words; on a Slurm host, with what the node said when it could not
    /// connect to the server (the client only sees the connection closed).
    pub fn explain(&self, err: &reqwest::Error) -> String {
        let said = crate::http_client::explain(err);
        let refused = self.bridge.as_ref().and_then(node_bridge::Bridge::refused);
        match refused {
            Some(why) if crate::http_client::closed_unanswered(err) => format!("{said}; {why}"),
            _ => said,
        }
    }
}

impl Transport {
    /// Connects to `host` (for SSH: starts its ControlMaster in `control_dir`).
    pub async fn connect(
        host: &str,
        spec: &HostSpec,
        policy: KnownHostsPolicy,
        control_dir: &Path,
    ) -> Result<Transport> {
        let link = match spec.connection {
            Connection::Local => Link::Local(LocalTransport::new()),
            Connection::Ssh => Link::Ssh(Box::new(
                SshTransport::connect(host, spec, policy, control_dir).await?,
            )),
        };
        Ok(Transport {
            link,
            jobs: job::Jobs::new(host, spec),
            slurm: spec.slurm.as_ref().map(|s| slurm::Slurm::new(&s.value)),
        })
    }

    /// A `connection: local` transport named `here`, for unit tests (`control_dir` unused).
    #[cfg(test)]
    pub(crate) async fn local_for_tests(control_dir: &Path) -> Transport {
        let spec: HostSpec = serde_json::from_value(serde_json::json!({"connection": "local"})).unwrap();
        Transport::connect("here", &spec, KnownHostsPolicy::Strict, control_dir)
            .await
            .unwrap()
    }

    /// Runs the login-shell probe once (see `login_noise.rs`), and the `sh` script `then` in the
    /// same round trip, returning its stdout; before any file moves, since the probe decides how
    /// SFTP starts. A local host has no login shell: `then` just runs.
    pub async fn probe_login(&self, then: &str) -> Result<String> {
        match &self.link {
            Link::Ssh(t) => t.probe_login(then).await,
            Link::Local(_) => self.output(then).await,
        }
    }

    /// What the host's login shell printed before a command ran, once probed (None when it
    /// printed nothing; a local host has no login shell).
    pub fn login_noise(&self) -> Option<&LoginNoise> {
        match &self.link {
            Link::Ssh(t) => t.login_noise(),
            Link::Local(_) => None,
        }
    }

    /// Runs `command` with `sh`, passing each output line (as text) to `on_line`; returns the
    /// exit code.
    /// Dropping the future stops the command and everything it started.
    pub async fn exec(&self, command: &str, on_line: &mut (dyn FnMut(Stream, &str) + Send)) -> Result<i32> {
        self.exec_output(command, &mut |stream, output| {
            if let Output::Line(line) = output {
                on_line(stream, &line_text(line));
            }
        })
        .await
    }

    /// Runs `command`, passing on what it prints as bytes: whole lines, and lines longer than
    /// [`LINE_CAP`] in pieces (which [`Transport::exec`] leaves out). Memory stays bounded.
    /// On a Slurm host it runs on the allocated node.
    pub async fn exec_output(
        &self,
        command: &str,
        on_output: &mut (dyn FnMut(Stream, Output) + Send),
    ) -> Result<i32> {
        self.link_exec(&self.on_node(command), on_output).await
    }

    /// Runs `command` where the link goes: on a Slurm host, the login node.
    async fn link_exec(
        &self,
        command: &str,
        on_output: &mut (dyn FnMut(Stream, Output) + Send),
    ) -> Result<i32> {
        match &self.link {
            Link::Ssh(t) => t.exec(command, on_output).await,
            Link::Local(t) => t.exec(command, on_output).await,
        }
    }

    /// Runs `command` and returns its stdout, failing with its stderr when it exits non-zero.
    pub async fn output(&self, command: &str) -> Result<String> {
        let done = self.captured(command).await?;
        if done.code != 0 {
            anyhow::bail!("`{command}` exited with {}: {}", done.code, done.stderr.trim());
        }
        Ok(done.stdout)
    }

    /// Runs `command` and keeps its exit code and both outputs, whatever the code.
    pub async fn captured(&self, command: &str) -> Result<Captured> {
        self.login_captured(&self.on_node(command)).await
    }

    /// [`Transport::captured`] where the link goes: on a Slurm host the login node.
    async fn login_captured(&self, command: &str) -> Result<Captured> {
        let mut out = String::new();
        let mut err = String::new();
        let code = self
            .link_exec(command, &mut |stream, output| {
                let Output::Line(line) = output else { return };
                let line = line_text(line);
                let buf = if stream == Stream::Stdout {
                    &mut out
                } else {
                    &mut err
                };
                buf.push_str(&line);
                buf.push('\n');
            })
            .await?;
        Ok(Captured {
            code,
            stdout: out,
            stderr: err,
        })
    }

    /// Reads a whole file from the host.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        match &self.link {
            Link::Ssh(t) => t.read_file(path).await,
            Link::Local(t) => t.read_file(path).await,
        }
    }

    /// Streams a file from the host chunk by chunk into `on_chunk` (memory independent of its
    /// size). With `size` (as listed) nothing past it is asked for; a file that grew meanwhile
    /// shows in [`Streamed::len_after`]. Links are followed, as `open` does.
    pub async fn read_chunks(
        &self,
        path: &Path,
        size: Option<u64>,
        on_chunk: OnChunk<'_>,
    ) -> Result<Streamed> {
        match &self.link {
            Link::Ssh(t) => t.read_chunks(path, size, on_chunk).await,
            Link::Local(t) => t.read_chunks(path, on_chunk).await,
        }
    }

    /// Writes a whole file on the host atomically (temporary name, then rename), creating its
    /// parent folders, with the given permission bits.
    pub async fn write_file_atomic(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.write_file_from(path, Source::Bytes(data), mode).await
    }

    /// [`Transport::write_file_atomic`] from bytes or a local file, which is streamed (memory
    /// flat in its size).
    pub async fn write_file_from(&self, path: &str, source: Source<'_>, mode: u32) -> Result<()> {
        match &self.link {
            Link::Ssh(t) => t.write_file_atomic(path, source, mode).await,
            Link::Local(t) => t.write_file_atomic(path, source, mode).await,
        }
    }

    /// Makes `url` (as the host sees it) reachable from here.
    /// On a Slurm host a loopback URL means the allocated node's: it is reached through the node.
    pub async fn http_endpoint(self: &Arc<Self>, url: &str) -> Result<HttpEndpoint> {
        let parsed = reqwest::Url::parse(url).with_context(|| format!("`{url}` is not a URL"))?;
        if let Some(address) = parsed.host_str().filter(|h| self.on_the_node(h)) {
            let port = parsed.port_or_known_default().context("the URL has no port")?;
            return self.node_endpoint(url, address.trim_matches(['[', ']']), port);
        }
        match &self.link {
            Link::Ssh(t) => t.http_endpoint(url).await,
            Link::Local(_) => Ok(HttpEndpoint {
                client: http_client(|b| b)?,
                base_url: url.to_string(),
                bridge: None,
            }),
        }
    }

    /// Ends the connection (for SSH: stops the ControlMaster), after the run's jobs and, on a
    /// Slurm host, its allocation.
    pub async fn close(&self) {
        self.close_jobs().await;
        self.release().await;
        if let Link::Ssh(t) = &self.link {
            t.close().await;
        }
    }

    /// Starts `program` with `args` on the host with its three streams.
    pub(crate) async fn spawn(
        &self,
        program: channel::Program<'_>,
        args: &[&str],
    ) -> Result<channel::Channel> {
        match &self.link {
            Link::Ssh(t) => t.spawn(program, args).await,
            Link::Local(t) => t.spawn(program, args).await,
        }
    }

    /// How long a dead link may go unnoticed: the keepalive probes' window (see
    /// `ssh::master::Keepalive`); nothing for a local host.
    pub(crate) fn unnoticed_for(&self) -> std::time::Duration {
        match &self.link {
            Link::Ssh(t) => t.unnoticed_for(),
            Link::Local(_) => std::time::Duration::ZERO,
        }
    }

    /// After a channel broke: gets the connection back, trying with backoff until `until`.
    /// A local host has no connection to lose.
    pub(crate) async fn reconnect(&self, until: std::time::Instant) -> Result<()> {
        match &self.link {
            Link::Ssh(t) => t.reconnect(until).await,
            Link::Local(_) => anyhow::bail!("the command's shell on this machine was killed"),
        }
    }
}

/// The HTTP client every check uses: bounded connect and read times, on top of `route` (how
/// the host's server is reached: directly, or through a forwarded socket).
pub fn http_client(
    route: impl Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
) -> Result<crate::http_client::Client> {
    crate::http_client::Client::new(|builder| {
        route(builder)
            .connect_timeout(std::time::Duration::from_secs(5))
            .read_timeout(std::time::Duration::from_secs(30))
    })
}

/// A modification time as whole seconds since 1970 (what SFTP reports).
pub(crate) fn unix_seconds(time: std::time::SystemTime) -> Option<u64> {
    time.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// A counted permit for one channel; see [`MAX_CHANNELS_PER_HOST`].
pub(crate) fn channel_limit() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_CHANNELS_PER_HOST))
}
