//! Every remote (and local) command runs under a small POSIX `sh` wrapper, `wrapper.sh`.
//!
//! Dropping an SSH channel does not stop the remote process, so the wrapper starts the command
//! in its own session (`setsid`) and watches its own stdin, which rigrun holds open: when rigrun
//! closes it (timeout, Ctrl-C) or the connection dies, the wrapper kills the whole process
//! group. It frames both streams with a random per-command marker (see `frame.rs`), so that
//! what a login shell prints is never taken for the command's output, and reports the command's
//! true exit code in stderr's end marker, since the SSH layer turns some exit codes into errors
//! that drop the output.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::frame::{Frame, Piece};
pub use crate::events::Stream;

/// The wrapper script, run as `sh -c WRAPPER rigrun COMMAND MARKER`.
pub(crate) const WRAPPER: &str = include_str!("wrapper.sh");

/// A fresh marker for one command's exit line; random so that no output can forge it.
pub fn new_marker() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap_or_default();
    format!("__rigrun_{}__", hex::encode(bytes))
}

/// Longest line handed on whole; a longer one comes in pieces (logged, never read as a record),
/// so that memory stays bounded whatever a command prints.
pub const LINE_CAP: usize = 1 << 20;
/// How much is read from a stream at once.
const CHUNK: usize = 64 * 1024;

/// What a command printed, as it arrives: whole lines, or a line longer than [`LINE_CAP`] in
/// pieces. Bytes are as printed (binary too), without the line's `\n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output<'a> {
    Line(&'a [u8]),
    /// A piece of an overlong line: `first` for its first [`LINE_CAP`]-odd bytes, `last` once
    /// its newline (or the end of the stream) came.
    Long {
        piece: &'a [u8],
        first: bool,
        last: bool,
    },
}

/// Cuts one stream into [`Output`]s with at most [`LINE_CAP`] bytes held.
#[derive(Default)]
struct Lines {
    buf: Vec<u8>,
    long: bool,
}

impl Lines {
    fn push(&mut self, mut data: &[u8], emit: &mut dyn FnMut(Output)) {
        while !data.is_empty() {
            let (segment, newline) = match data.iter().position(|&b| b == b'\n') {
                Some(i) => (&data[..i], true),
                None => (data, false),
            };
            data = &data[segment.len() + usize::from(newline)..];
            self.add(segment, newline, emit);
        }
    }

    fn add(&mut self, segment: &[u8], newline: bool, emit: &mut dyn FnMut(Output)) {
        if !self.long && self.buf.len() + segment.len() <= LINE_CAP {
            self.buf.extend_from_slice(segment);
            if newline {
                emit(Output::Line(&self.buf));
                self.buf.clear();
            }
            return;
        }
        if !self.long {
            self.long = true;
            emit(Output::Long {
                piece: &self.buf,
                first: true,
                last: false,
            });
            self.buf.clear();
        }
        emit(Output::Long {
            piece: segment,
            first: false,
            last: newline,
        });
        self.long &= !newline;
    }

    /// The stream ended: a last line without its newline still counts.
    fn finish(&mut self, emit: &mut dyn FnMut(Output)) {
        if self.long {
            emit(Output::Long {
                piece: &[],
                first: false,
                last: true,
            });
        } else if !self.buf.is_empty() {
            emit(Output::Line(&self.buf));
        }
        self.buf.clear();
        self.long = false;
    }
}

/// One stream as a command's output: its frame (see `frame.rs`) and its lines.
#[derive(Default)]
pub(crate) struct StreamReader {
    lines: Lines,
    /// Bytes of the command's output seen on this stream, across every channel that carried it.
    pub content_bytes: u64,
}

impl StreamReader {
    /// Feeds what a channel carried through `frame`, handing on the command's output as lines
    /// and returning the end marker's trailer when it came.
    pub(crate) fn push(
        &mut self,
        frame: &mut Frame,
        data: Option<&[u8]>,
        stream: Stream,
        on_output: &mut (dyn FnMut(Stream, Output) + Send),
    ) -> Option<String> {
        let mut end = None;
        let mut emit = |piece: Piece| match piece {
            Piece::Content(bytes) => {
                self.content_bytes += bytes.len() as u64;
                self.lines.push(bytes, &mut |o| on_output(stream, o));
            }
            Piece::End(trailer) => end = Some(trailer),
            Piece::Noise(bytes) => {
                tracing::debug!(?stream, noise = %String::from_utf8_lossy(bytes), "login output")
            }
        };
        match data {
            Some(data) => frame.push(data, &mut emit),
            None => frame.finish(&mut emit),
        }
        end
    }

    /// The command is over: a last line without its newline still counts.
    pub(crate) fn finish(&mut self, stream: Stream, on_output: &mut (dyn FnMut(Stream, Output) + Send)) {
        self.lines.finish(&mut |o| on_output(stream, o));
    }
}

/// Reads both framed streams of one channel until they close, feeding `readers`; returns the
/// trailer of stderr's end marker (the exit status, or why there is none), None when the stream
/// closed without it (the connection broke, or the shell was killed). Stdout's end only marks
/// where its login noise starts again.
pub(crate) async fn carry(
    mut stdout: impl AsyncRead + Unpin,
    mut stderr: impl AsyncRead + Unpin,
    marker: &str,
    readers: &mut [StreamReader; 2],
    on_output: &mut (dyn FnMut(Stream, Output) + Send),
) -> io::Result<Option<String>> {
    let (mut out_frame, mut err_frame) = (Frame::new(marker), Frame::new(marker));
    let (mut out_chunk, mut err_chunk) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let (mut out_open, mut err_open) = (true, true);
    let mut stderr_end = None;
    let [out_reader, err_reader] = readers;
    while out_open || err_open {
        tokio::select! {
            read = stdout.read(&mut out_chunk), if out_open => {
                let n = read?;
                out_open = n > 0;
                let data = (n > 0).then(|| &out_chunk[..n]);
                out_reader.push(&mut out_frame, data, Stream::Stdout, on_output);
            }
            read = stderr.read(&mut err_chunk), if err_open => {
                let n = read?;
                err_open = n > 0;
                let data = (n > 0).then(|| &err_chunk[..n]);
                if let Some(end) = err_reader.push(&mut err_frame, data, Stream::Stderr, on_output) {
                    stderr_end = Some(end);
                }
            }
        }
    }
    Ok(stderr_end)
}

/// Reads both output streams until they close, passing on what the command printed, and
/// returns the exit code the wrapper reported (None when it never reported one: the
/// connection broke).
pub async fn drive(
    stdout: impl AsyncRead + Unpin,
    stderr: impl AsyncRead + Unpin,
    marker: &str,
    on_output: &mut (dyn FnMut(Stream, Output) + Send),
) -> io::Result<Option<i32>> {
    let mut readers: [StreamReader; 2] = Default::default();
    let stderr_end = carry(stdout, stderr, marker, &mut readers, on_output).await?;
    readers[0].finish(Stream::Stdout, on_output);
    readers[1].finish(Stream::Stderr, on_output);
    Ok(stderr_end.and_then(|rc| rc.parse().ok()))
}

/// Drives a channel that runs [`WRAPPER`] to its end: what the command prints to `on_output`,
/// then the exit code it reported (None: the channel ended first). The channel's stdin is held
/// until then, since closing it is what stops the command.
pub(crate) async fn finish(
    mut channel: super::channel::Channel,
    marker: &str,
    on_output: &mut (dyn FnMut(Stream, Output) + Send),
) -> io::Result<Option<i32>> {
    let code = drive(&mut channel.stdout, &mut channel.stderr, marker, on_output).await?;
    channel.wait().await;
    Ok(code)
}

/// A whole line as text for those who read lines: invalid UTF-8 replaced, `\r` dropped.
pub fn line_text(line: &[u8]) -> std::borrow::Cow<'_, str> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8_lossy(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `Lines` hands on for `chunks`, as (kind, bytes) with Long pieces joined per line.
    fn cut(chunks: &[&[u8]]) -> Vec<(&'static str, Vec<u8>)> {
        let mut lines = Lines::default();
        let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
        let mut emit = |o: Output| match o {
            Output::Line(l) => out.push(("line", l.to_vec())),
            Output::Long { piece, first, .. } => {
                if first {
                    out.push(("long", Vec::new()));
                }
                out.last_mut().unwrap().1.extend_from_slice(piece);
            }
        };
        for chunk in chunks {
            lines.push(chunk, &mut emit);
        }
        lines.finish(&mut emit);
        out
    }

    #[test]
    fn lines_come_whole_and_overlong_ones_in_pieces_with_every_byte() {
        assert_eq!(
            cut(&[b"a\nb", b"c\n\xff\x00\r\n", b"tail"]),
            [
                ("line", b"a".to_vec()),
                ("line", b"bc".to_vec()),
                ("line", b"\xff\x00\r".to_vec()),
                ("line", b"tail".to_vec()),
            ]
        );
        let long = vec![b'x'; LINE_CAP + 10];
        let mut printed = long.clone();
        printed.extend_from_slice(b"\nnext\n");
        let halves: Vec<&[u8]> = printed.chunks(LINE_CAP / 3).collect();
        assert_eq!(cut(&halves), [("long", long), ("line", b"next".to_vec())]);
    }

    #[test]
    fn a_line_is_text_without_its_carriage_return() {
        assert_eq!(line_text(b"ok\r"), "ok");
        assert_eq!(line_text(b"\xffx"), "\u{fffd}x");
    }

    #[test]
    fn markers_differ() {
        assert_ne!(new_marker(), new_marker());
    }

    /// Runs `command` under the wrapper; closes its stdin once a stdout line equals `close_on`.
    async fn run_local(command: &str, close_on: Option<&str>) -> (Vec<(Stream, String)>, Option<i32>) {
        let marker = new_marker();
        run_sh(&["-c", WRAPPER, "rigrun", command, &marker], &marker, close_on).await
    }

    /// Runs `sh ARGS` (a wrapper line, whatever comes around it) and drives its output framed
    /// by `marker`; closes its stdin once a stdout line equals `close_on`.
    async fn run_sh(
        args: &[&str],
        marker: &str,
        close_on: Option<&str>,
    ) -> (Vec<(Stream, String)>, Option<i32>) {
        let mut child = tokio::process::Command::new("sh")
            .args(args)
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
            marker,
            &mut |s, output| {
                let Output::Line(l) = output else { return };
                let l = line_text(l).into_owned();
                if Some(l.as_str()) == close_on {
                    stdin.take();
                }
                lines.push((s, l))
            },
        )
        .await
        .unwrap();
        child.wait().await.unwrap();
        (lines, code)
    }

    #[tokio::test]
    async fn what_the_login_shell_prints_is_not_the_commands() {
        let marker = new_marker();
        let noisy_login = format!(
            "echo '{{\"banner\": 1}}'; printf 'no newline'; echo rc-noise >&2; {}",
            super::super::channel::Program::Script(WRAPPER)
                .line(&["echo out; echo err >&2; exit 3", &marker])
        );
        let (lines, code) = run_sh(&["-c", &noisy_login], &marker, None).await;
        assert_eq!(code, Some(3));
        // The streams race each other; each must hold only the command's line.
        let on = |stream| -> Vec<&str> {
            lines
                .iter()
                .filter(|(s, _)| *s == stream)
                .map(|(_, l)| l.as_str())
                .collect()
        };
        assert_eq!(on(Stream::Stdout), ["out"]);
        assert_eq!(on(Stream::Stderr), ["err"]);
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
