//! One running `sh` script on a host with its three streams: an SSH channel, or a local child.
//! The wrapper and the detached jobs both run over it.

use std::os::fd::{AsRawFd, RawFd};
use std::process::Stdio;

use anyhow::{Context, Result};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::OwnedSemaphorePermit;

use crate::config::template::shell_quote;

/// A channel's stdin: written asynchronously, and once synchronously when it is dropped.
pub(crate) trait Input: AsyncWrite + AsRawFd + Send + Unpin {}
impl<T: AsyncWrite + AsRawFd + Send + Unpin> Input for T {}

pub(crate) type Reader = Box<dyn AsyncRead + Send + Unpin>;

pub(crate) struct Channel {
    pub stdin: Box<dyn Input>,
    pub stdout: Reader,
    pub stderr: Reader,
    child: Child,
    /// Holds one of the host's channels (see `MAX_CHANNELS_PER_HOST`) while the script runs.
    _permit: OwnedSemaphorePermit,
}

enum Child {
    Ssh(openssh::Child<std::sync::Arc<openssh::Session>>),
    Local(tokio::process::Child),
}

impl Channel {
    pub fn ssh(
        mut child: openssh::Child<std::sync::Arc<openssh::Session>>,
        permit: OwnedSemaphorePermit,
    ) -> Result<Channel> {
        Ok(Channel {
            stdin: Box::new(child.stdin().take().context("no stdin channel")?),
            stdout: Box::new(widened(child.stdout().take().context("no stdout channel")?)),
            stderr: Box::new(child.stderr().take().context("no stderr channel")?),
            child: Child::Ssh(child),
            _permit: permit,
        })
    }

    /// Runs `program` with `args` on this machine.
    pub fn local(program: Program<'_>, args: &[&str], permit: OwnedSemaphorePermit) -> Result<Channel> {
        let mut child = program
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A script dies with its channel; the job runner is told `stop` on its stdin and
            // stops its job itself (killed, it could not: its listener is a thread of it).
            .kill_on_drop(matches!(program, Program::Script(_)))
            .spawn()
            .with_context(|| format!("cannot start {} on this machine", program.name()))?;
        Ok(Channel {
            stdin: Box::new(child.stdin.take().context("no stdin pipe")?),
            stdout: Box::new(child.stdout.take().context("no stdout pipe")?),
            stderr: Box::new(child.stderr.take().context("no stderr pipe")?),
            child: Child::Local(child),
            _permit: permit,
        })
    }

    /// The raw descriptor of stdin, for a last word written while the channel is dropped.
    pub fn stdin_fd(&self) -> RawFd {
        self.stdin.as_raw_fd()
    }

    /// Waits for the script to exit (its streams have closed).
    pub async fn wait(self) {
        drop(self.stdin);
        match self.child {
            Child::Ssh(child) => {
                let _ = child.wait().await;
            }
            Child::Local(mut child) => {
                let _ = child.wait().await;
            }
        }
    }
}

/// What stands for a stdin once closed (`*stdin = closed_input()` closes it: the script reads
/// its end, the output streams stay open).
pub(crate) fn closed_input() -> Box<dyn Input> {
    Box::new(ClosedInput)
}

/// A closed stdin: writes fail, as on a closed pipe.
struct ClosedInput;

impl AsyncWrite for ClosedInput {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl AsRawFd for ClosedInput {
    /// No descriptor: a last word written to it goes nowhere.
    fn as_raw_fd(&self) -> RawFd {
        -1
    }
}

/// What a channel runs on the host, before its arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Program<'a> {
    /// `sh -c script rigrun args...`
    Script(&'a str),
    /// `<path> job-run args...`: the host's copy of rigrun running a detached job (see
    /// `job_runner.rs`).
    JobRunner(&'a str),
}

impl Program<'_> {
    /// The words it starts with, the program first.
    fn words(&self) -> Vec<&str> {
        match self {
            Program::Script(script) => vec!["sh", "-c", script, "rigrun"],
            Program::JobRunner(path) => vec![path, super::job_runner::SUBCOMMAND],
        }
    }

    /// The command that runs it on this machine (the arguments still to add).
    fn command(&self) -> tokio::process::Command {
        let words = self.words();
        let mut command = tokio::process::Command::new(words[0]);
        command.args(&words[1..]);
        command
    }

    /// What it is called in an error.
    fn name(&self) -> &str {
        self.words()[0]
    }

    /// The command line that runs it with `args` through a login shell (SSH), every word quoted.
    pub(crate) fn line(&self, args: &[&str]) -> String {
        let words = self.words().into_iter().chain(args.iter().copied());
        words.map(shell_quote).collect::<Vec<_>>().join(" ")
    }
}

/// The pipe the ControlMaster writes a channel's output into, grown from 64 KiB to 1 MiB (the
/// unprivileged maximum by default; where refused it stays as it was). Each pipeful is a wakeup
/// here and a stall there: a gigabyte through `cat` took 0.4–0.5 s less (loopback, AES-GCM).
/// Linux alone can resize a pipe: elsewhere it stays as the kernel made it.
#[cfg(target_os = "linux")]
pub fn widened<P: std::os::fd::AsRawFd>(pipe: P) -> P {
    const PIPE_SIZE: libc::c_int = 1 << 20;
    // SAFETY: F_SETPIPE_SZ only resizes the kernel buffer of a descriptor we own; failure
    // (not a pipe, over the limit) leaves it as it was.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
    pipe
}

/// The pipe as it is: other unixes (macOS) size their pipes themselves and offer no call to
/// resize one.
#[cfg(not(target_os = "linux"))]
pub fn widened<P: std::os::fd::AsRawFd>(pipe: P) -> P {
    pipe
}
