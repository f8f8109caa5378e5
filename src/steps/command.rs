//! Running one command on the host with its output logged, shown live and its stderr tail kept.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::HostCtx;
use crate::events::Event;
use crate::transport::Stream;

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

/// Runs `command`, writing `<log_base>.stdout.log` and `<log_base>.stderr.log`, emitting each line
/// live under `label`, and handing stdout lines to `on_stdout`. Past `timeout` the command is
/// stopped (its process group killed on the host) and `exit_code` is None.
pub async fn run_logged(
    ctx: &HostCtx,
    command: &str,
    label: &str,
    log_base: &Path,
    timeout: Option<Duration>,
    on_stdout: &mut (dyn FnMut(&str) + Send),
) -> Result<CommandEnd> {
    let open = |ext: &str| -> Result<BufWriter<File>> {
        let path = log_base.with_extension(ext);
        Ok(BufWriter::new(
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?,
        ))
    };
    let mut out_log = open("stdout.log")?;
    let mut err_log = open("stderr.log")?;
    let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES);
    let mut on_line = |stream: Stream, line: &str| {
        let log = if stream == Stream::Stdout {
            &mut out_log
        } else {
            &mut err_log
        };
        let _ = writeln!(log, "{line}").and_then(|_| log.flush());
        if stream == Stream::Stdout {
            on_stdout(line);
        } else {
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.to_string());
        }
        ctx.emit(Event::Output {
            host: ctx.host.clone(),
            label: label.to_string(),
            stream,
            line: line.to_string(),
        });
    };
    let exec = ctx.transport.exec(command, &mut on_line);
    let exit_code = match timeout {
        Some(limit) => match tokio::time::timeout(limit, exec).await {
            Ok(code) => Some(code?),
            Err(_) => None,
        },
        None => Some(exec.await?),
    };
    Ok(CommandEnd {
        exit_code,
        stderr_tail: tail.into(),
    })
}
