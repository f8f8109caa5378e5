//! Every remote (and local) command runs under a small POSIX `sh` wrapper, `wrapper.sh`.
//!
//! Dropping an SSH channel does not stop the remote process, so the wrapper starts the command
//! in its own session (`setsid`) and watches its own stdin, which rigrun holds open: when rigrun
//! closes it (timeout, Ctrl-C) or the connection dies, the wrapper kills the whole process
//! group. It also reports the command's true exit code on stderr behind a per-run marker, since
//! the SSH layer turns some exit codes into errors that drop the output.

use std::io;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::config::template::shell_quote;
pub use crate::events::Stream;

const WRAPPER: &str = include_str!("wrapper.sh");

/// A fresh marker for one command's exit line; random so that no output can forge it.
pub fn new_marker() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap_or_default();
    format!("__rigrun_exit_{}__", hex::encode(bytes))
}

/// The arguments after `sh -c` that run `command` under the wrapper.
pub fn wrapper_args(command: &str, marker: &str) -> [String; 4] {
    [
        WRAPPER.to_string(),
        "rigrun".to_string(),
        command.to_string(),
        marker.to_string(),
    ]
}

/// One shell command line that runs `command` under the wrapper (for SSH, whose remote side
/// hands the line to the login shell).
pub fn wrapper_command_line(command: &str, marker: &str) -> String {
    format!(
        "sh -c {} rigrun {} {}",
        shell_quote(WRAPPER),
        shell_quote(command),
        shell_quote(marker)
    )
}

/// Reads both output streams line by line until they close, passing each line on, and returns
/// the exit code the wrapper reported (None when it never reported one: the connection broke).
pub async fn drive(
    stdout: impl AsyncRead + Unpin,
    stderr: impl AsyncRead + Unpin,
    marker: &str,
    on_line: &mut (dyn FnMut(Stream, &str) + Send),
) -> io::Result<Option<i32>> {
    let mut out = BufReader::new(stdout);
    let mut err = BufReader::new(stderr);
    let (mut out_buf, mut err_buf) = (Vec::new(), Vec::new());
    let (mut out_open, mut err_open) = (true, true);
    let mut code = None;
    while out_open || err_open {
        tokio::select! {
            read = out.read_until(b'\n', &mut out_buf), if out_open => {
                if read? == 0 {
                    out_open = false;
                } else {
                    on_line(Stream::Stdout, &line_text(&out_buf));
                    out_buf.clear();
                }
            }
            read = err.read_until(b'\n', &mut err_buf), if err_open => {
                if read? == 0 {
                    err_open = false;
                } else {
                    let line = line_text(&err_buf);
                    err_buf.clear();
                    match split_marker(&line, marker) {
                        Some((before, rc)) => {
                            if !before.is_empty() {
                                on_line(Stream::Stderr, before);
                            }
                            code = rc;
                        }
                        None => on_line(Stream::Stderr, &line),
                    }
                }
            }
        }
    }
    Ok(code)
}

fn line_text(buf: &[u8]) -> String {
    let text = String::from_utf8_lossy(buf);
    text.trim_end_matches(['\n', '\r']).to_string()
}

/// Finds the marker in a stderr line: what came before it, and the exit code after it.
fn split_marker<'a>(line: &'a str, marker: &str) -> Option<(&'a str, Option<i32>)> {
    let at = line.find(marker)?;
    let code = line[at + marker.len()..].trim().parse().ok();
    Some((&line[..at], code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_splits_partial_lines() {
        assert_eq!(split_marker("__m__ 7", "__m__"), Some(("", Some(7))));
        assert_eq!(
            split_marker("no newline__m__ 0", "__m__"),
            Some(("no newline", Some(0)))
        );
        assert_eq!(split_marker("plain", "__m__"), None);
    }

    #[test]
    fn markers_differ() {
        assert_ne!(new_marker(), new_marker());
    }

    /// Runs `command` under the wrapper; closes its stdin once a stdout line equals `close_on`.
    async fn run_local(command: &str, close_on: Option<&str>) -> (Vec<(Stream, String)>, Option<i32>) {
        let marker = new_marker();
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .args(wrapper_args(command, &marker))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take();
        let mut lines = Vec::new();
        let code = drive(
            child.stdout.take().unwrap(),
            child.stderr.take().unwrap(),
            &marker,
            &mut |s, l| {
                if Some(l) == close_on {
                    stdin.take();
                }
                lines.push((s, l.to_string()))
            },
        )
        .await
        .unwrap();
        child.wait().await.unwrap();
        (lines, code)
    }

    #[tokio::test]
    async fn reports_the_true_exit_code_and_keeps_output() {
        let (lines, code) = run_local("echo out; echo err >&2; exit 7", None).await;
        assert_eq!(code, Some(7));
        assert!(lines.contains(&(Stream::Stdout, "out".into())));
        assert!(lines.contains(&(Stream::Stderr, "err".into())));
        let (lines, code) = run_local("no-such-command-here", None).await;
        assert_eq!(code, Some(127));
        assert!(lines
            .iter()
            .any(|(s, l)| *s == Stream::Stderr && l.contains("not found")));
    }

    #[tokio::test]
    async fn closing_stdin_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let command = format!(
            "sleep 300 & echo $! > {}; echo started; sleep 301; echo unreachable",
            pid_file.display()
        );
        let (lines, code) = run_local(&command, Some("started")).await;
        assert_ne!(code, Some(0));
        assert!(!lines.iter().any(|(_, l)| l == "unreachable"));
        let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
        assert!(
            crate::testutil::wait_until_gone(&pid),
            "the background sleep {pid} survived"
        );
    }
}
