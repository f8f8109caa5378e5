//! Running one command on the host with its output logged, shown live and its stderr tail kept.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::HostCtx;
use crate::events::Event;
use crate::transport::{line_text, Job, JobEnd, Output, Stream, LINE_CAP};

/// Lines of stderr kept for the message of a failed command.
const TAIL_LINES: usize = 8;

/// How a logged command ended.
pub struct CommandEnd {
    /// None when it ran past its timeout (and was stopped).
    pub exit_code: Option<i32>,
    pub stderr_tail: Vec<String>,
}

impl CommandEnd {
    /// `exit code 3: <last stderr line>` or `timed out after 30m`, for records and summaries.
    pub fn failure(&self, timeout: Option<Duration>) -> Option<String> {
        let tail = self
            .stderr_tail
            .last()
            .map(|l| format!(": {}", l.trim()))
            .unwrap_or_default();
        match self.exit_code {
            Some(0) => None,
            Some(code) => Some(format!("exit code {code}{tail}")),
            None => Some(format!(
                "timed out after {}",
                timeout.map(super::human).unwrap_or_else(|| "its limit".into())
            )),
        }
    }
}

/// A stdout line as `run_logged` hands it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdoutLine<'a> {
    Text(&'a str),
    /// Longer than [`LINE_CAP`]: in the log, not read (said once per such line); whether it
    /// starts like a record.
    Overlong {
        record_like: bool,
    },
}

/// Runs `command` detached on the host as job `job` (see `transport/job.rs`: it outlives a lost
/// connection), writing `<log_base>.stdout.log` and `<log_base>.stderr.log` (the bytes as
/// printed), emitting each line live under `label`, and handing stdout lines to `on_stdout`.
/// Past `timeout` the command is stopped (its process group killed on the host) and
/// `exit_code` is None. Memory stays bounded whatever the command prints. A host lost for good
/// is an error that [`crate::transport::is_lost`] recognises.
pub async fn run_logged(
    ctx: &HostCtx,
    job: &str,
    command: &str,
    label: &str,
    log_base: &Path,
    timeout: Option<Duration>,
    on_stdout: &mut (dyn FnMut(StdoutLine) + Send),
) -> Result<CommandEnd> {
    let open = |ext: &str| -> Result<BufWriter<File>> {
        let path = crate::store::beside(log_base, ext);
        Ok(BufWriter::new(
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?,
        ))
    };
    let mut out_log = open(".stdout.log")?;
    let mut err_log = open(".stderr.log")?;
    let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES);
    let mut log_error: Option<std::io::Error> = None;
    let mut on_output = |stream: Stream, output: Output| {
        let log = if stream == Stream::Stdout {
            &mut out_log
        } else {
            &mut err_log
        };
        if let Err(e) = log_bytes(log, output) {
            log_error.get_or_insert(e);
        }
        let Some(line) = shown(output) else { return };
        if stream == Stream::Stdout {
            on_stdout(match output {
                Output::Line(_) => StdoutLine::Text(&line),
                Output::Long { piece, .. } => StdoutLine::Overlong {
                    record_like: piece.trim_ascii_start().starts_with(b"{\""),
                },
            });
        } else {
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.to_string());
        }
        ctx.show_output(label, stream, &line);
    };
    let job = Job {
        name: job,
        command,
        timeout,
    };
    // The connection lost and got back: said once (a host lost for good fails with the reason).
    let mut on_warning = |message: String| {
        ctx.emit(Event::Notice {
            host: ctx.host.clone(),
            message: format!("{label}: {message}"),
        })
    };
    let end = ctx.transport.run_job(&job, &mut on_output, &mut on_warning).await;
    let exit_code = match end? {
        JobEnd::Exited(code) => Some(code),
        JobEnd::TimedOut => None,
    };
    if let Some(e) = log_error {
        // A log cut short in silence would look like output the command never printed.
        anyhow::bail!("cannot write the logs {}.*.log: {e}", log_base.display());
    }
    Ok(CommandEnd {
        exit_code,
        stderr_tail: tail.into(),
    })
}

/// Appends what was printed to its log, as printed; a line is flushed once it is whole.
fn log_bytes(log: &mut BufWriter<File>, output: Output) -> std::io::Result<()> {
    match output {
        Output::Line(line) => {
            log.write_all(line)?;
            log.write_all(b"\n")?;
            log.flush()
        }
        Output::Long { piece, last, .. } => {
            log.write_all(piece)?;
            if last {
                log.write_all(b"\n")?;
                log.flush()?;
            }
            Ok(())
        }
    }
}

/// The text of a line as it is shown and handed on (the whole of a line up to [`LINE_CAP`] for
/// `on_stdout`; shortened for the display by the caller), once per line; None for the rest of
/// an overlong line.
fn shown(output: Output<'_>) -> Option<std::borrow::Cow<'_, str>> {
    match output {
        Output::Line(line) => Some(line_text(line)),
        Output::Long { first: true, .. } => Some(
            format!(
                "(a line longer than {} MiB: kept in the log, not shown or read)",
                LINE_CAP >> 20
            )
            .into(),
        ),
        Output::Long { .. } => None,
    }
}
