//! What a host's login shell prints before any command of ours runs, and the byte stream that
//! leaves it out.
//!
//! sshd hands every command, and the sftp subsystem when it is not `internal-sftp`, to the login
//! user's shell (`$SHELL -c ...`), and Debian's bash sources `~/.bashrc` for such sessions. On
//! shared GPU boxes that file often prints (a banner, `conda activate`, `module load` lines).
//! None of it is a command's output: once per connection [`probe`] runs a command that prints a
//! fresh marker on stdout and stderr as its first act, so that everything before the marker is
//! the shell's (the [`LoginNoise`]), and reads from `/proc` how long the shell took before the
//! command ran, which is what that noise costs every command. [`SkipThrough`] is the reader that
//! drops a stream's bytes up to and including a marker, for byte streams that cannot tolerate
//! noise (SFTP, `cat`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use crate::config::template::shell_quote;

/// Noise kept per stream; what is past it is counted, not kept.
const KEEP: usize = 64 * 1024;
/// Longest the probe may take (a slow rc file is what it measures, so it gets room).
const PROBE_DEADLINE: Duration = Duration::from_secs(60);
/// The first line as the warning quotes it, in characters.
const EXCERPT_CHARS: usize = 80;

/// What the login shell printed before a command ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoginNoise {
    /// Bytes on stdout before the command's first (at most [`KEEP`] kept).
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes printed in all, counting any not kept.
    pub bytes: usize,
    /// How long the login shell ran before the command started: from sshd starting the session's
    /// process to the command's first act (`/proc`, 10 ms resolution). None where `/proc` does
    /// not tell (not Linux).
    pub shell_ms: Option<u64>,
    /// The probe's round trip as seen from here: opening the channel, the shell, the command.
    pub round_trip_ms: u64,
}

impl LoginNoise {
    /// Lines printed, on both streams (a last line without a newline counts).
    pub fn lines(&self) -> usize {
        count_lines(&self.stdout) + count_lines(&self.stderr)
    }

    /// The first line that is not blank, shortened, as text.
    pub fn first_line(&self) -> String {
        let all = [&self.stdout[..], &self.stderr[..]];
        let line = all
            .iter()
            .flat_map(|s| s.split(|&b| b == b'\n'))
            .map(|l| String::from_utf8_lossy(l).trim().to_string())
            .find(|l| !l.is_empty())
            .unwrap_or_default();
        let mut short: String = line.chars().take(EXCERPT_CHARS).collect();
        if short.len() < line.len() {
            short.push('…');
        }
        short
    }

    /// The once-per-host warning: what the shell prints, what it costs, where it is kept, and
    /// how to make the shell quiet.
    pub fn warning(&self, host: &str, log: &std::path::Path) -> String {
        let streams = match (self.stdout.is_empty(), self.stderr.is_empty()) {
            (false, false) => "stdout and stderr",
            (false, true) => "stdout",
            _ => "stderr",
        };
        let cost = match self.shell_ms {
            Some(ms) if ms < 10 => "starting it takes under 10 ms per command".to_string(),
            Some(ms) => format!("starting it takes {ms} ms per command"),
            None => format!(
                "a trivial command takes {} ms there, round trip included",
                self.round_trip_ms
            ),
        };
        format!(
            "the login shell on {host} prints before every command ({} lines, {} bytes on {streams}; \
             first: `{}`); rigrun leaves it out of outputs and records, but {cost}. It is kept in {}. \
             To quiet it, make ~/.bashrc (or what prints) return early for non-interactive shells: \
             `[ -z \"$PS1\" ] && return` or `case $- in *i*) ;; *) return;; esac` at its top",
            self.lines(),
            self.bytes,
            self.first_line(),
            log.display()
        )
    }

    /// The host log's text: the noise as printed, stream by stream, with the measurements.
    pub fn log_text(&self, host: &str) -> Vec<u8> {
        let mut text = format!(
            "# what the login shell on {host} printed before a command ran ({} bytes{})\n\
             # login shell start to command: {}; probe round trip: {} ms\n",
            self.bytes,
            if self.bytes > self.stdout.len() + self.stderr.len() {
                ", the first 64 KiB of each stream kept"
            } else {
                ""
            },
            self.shell_ms
                .map_or_else(|| "not measured (no /proc)".to_string(), |ms| format!("{ms} ms")),
            self.round_trip_ms
        )
        .into_bytes();
        for (name, bytes) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            text.extend_from_slice(format!("## {name}\n").as_bytes());
            text.extend_from_slice(bytes);
            if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                text.push(b'\n');
            }
        }
        text
    }
}

fn count_lines(bytes: &[u8]) -> usize {
    let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
    newlines + usize::from(!bytes.is_empty() && !bytes.ends_with(b"\n"))
}

/// A fresh marker, random so that no output can forge it.
pub fn new_marker(kind: &str) -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap_or_default();
    format!("__rigrun_{kind}_{}__", hex::encode(bytes))
}

/// The probe, for `sh -c PROBE rigrun MARKER`: the marker on both streams first, then the
/// uptime, the start time (clock ticks after boot) of the process sshd started for this session
/// (the login shell, or the wrapper that became it), and the clock tick rate.
const PROBE: &str = r#"printf '%s\n' "$1"; printf '%s\n' "$1" >&2
read up _ < /proc/uptime 2>/dev/null
p=$$; n=0; start=
while [ "$n" -lt 16 ] && [ -r "/proc/$p/stat" ]; do
  read -r s < "/proc/$p/stat" || break
  set -- ${s##*) }
  start=${20}; pp=$2; comm=
  [ -r "/proc/$pp/comm" ] && read -r comm < "/proc/$pp/comm"
  case $comm in sshd*) break ;; esac
  p=$pp; n=$((n+1))
done
printf 'uptime %s\nstart %s\nhz %s\n' "$up" "$start" "$(getconf CLK_TCK 2>/dev/null)""#;

/// Runs the probe on `session`, followed in the same round trip by the `sh` script `then` (the
/// host's facts); the noise (None when the login shell printed nothing) and what `then` printed
/// on stdout, after the probe's own lines.
pub async fn probe(
    session: &openssh::Session,
    host: &str,
    then: &str,
) -> Result<(Option<LoginNoise>, String)> {
    let marker = new_marker("probe");
    let started = Instant::now();
    let script = format!("{PROBE}\n{then}");
    let line = format!("sh -c {} rigrun {}", shell_quote(&script), shell_quote(&marker));
    let run = async {
        let mut child = session
            .raw_command(line)
            .stdin(openssh::Stdio::null())
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped())
            .spawn()
            .await?;
        let mut stdout = child.stdout().take().context("no stdout channel")?;
        let mut stderr = child.stderr().take().context("no stderr channel")?;
        let (out, err) = tokio::join!(read_bounded(&mut stdout), read_bounded(&mut stderr));
        let _ = child.wait().await;
        anyhow::Ok((out?, err?))
    };
    let ((out, out_len), (err, err_len)) = tokio::time::timeout(PROBE_DEADLINE, run)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "{host} did not run a trivial command within {}s",
                PROBE_DEADLINE.as_secs()
            )
        })?
        .with_context(|| format!("cannot run a command on {host}"))?;
    let round_trip_ms = started.elapsed().as_millis() as u64;
    let said = find(&out, format!("{marker}\n").as_bytes())
        .map(|at| String::from_utf8_lossy(&out[at..]).into_owned())
        .unwrap_or_default();
    Ok((
        read_probe(&marker, &out, out_len, &err, err_len, round_trip_ms),
        said,
    ))
}

/// The noise in the probe's answer; None when there was none or the marker never came (the
/// command did not run: what fails next says why).
fn read_probe(
    marker: &str,
    out: &[u8],
    out_len: usize,
    err: &[u8],
    err_len: usize,
    round_trip_ms: u64,
) -> Option<LoginNoise> {
    let line = format!("{marker}\n");
    let (out_at, err_at) = (find(out, line.as_bytes())?, find(err, line.as_bytes())?);
    let after = String::from_utf8_lossy(&out[out_at + line.len()..]);
    let value = |key: &str| {
        after
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let shell_ms = match (value("uptime"), value("start"), value("hz")) {
        (Some(up), Some(start), Some(hz)) if hz > 0.0 => {
            let ms = (up - start / hz) * 1000.0;
            (0.0..3_600_000.0).contains(&ms).then_some(ms.round() as u64)
        }
        _ => None,
    };
    // What followed the marker is the probe's own; only the prefix is noise, but the kept bytes
    // may have been cut, so the count is the full length minus what we know is ours.
    let out_noise = out[..out_at].to_vec();
    let err_noise = err[..err_at].to_vec();
    let ours = (out.len() - out_at) + (err.len() - err_at);
    let bytes = (out_len + err_len).saturating_sub(ours);
    if out_noise.is_empty() && err_noise.is_empty() {
        return None;
    }
    Some(LoginNoise {
        stdout: out_noise,
        stderr: err_noise,
        bytes,
        shell_ms,
        round_trip_ms,
    })
}

/// Reads a stream to its end, keeping the first [`KEEP`] bytes and the last [`KEEP`] (where the
/// probe's own lines and the facts are), and counting all of them.
async fn read_bounded(stream: &mut (impl AsyncRead + Unpin)) -> io::Result<(Vec<u8>, usize)> {
    let mut kept = Vec::new();
    let mut tail: Vec<u8> = Vec::new();
    let mut total = 0;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        total += n;
        let room = KEEP.saturating_sub(kept.len()).min(n);
        kept.extend_from_slice(&buf[..room]);
        if room < n {
            tail.extend_from_slice(&buf[room..n]);
            let excess = tail.len().saturating_sub(KEEP);
            tail.drain(..excess);
        }
    }
    if !tail.is_empty() {
        kept.extend_from_slice(&tail);
    }
    Ok((kept, total))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

/// A reader that drops everything up to and including `marker`, then passes the rest on
/// unchanged; what came before is counted in [`SkipThrough::skipped`]. A stream that ends before
/// the marker ends here too (empty).
pub struct SkipThrough<R> {
    inner: R,
    marker: Vec<u8>,
    /// While searching: the bytes that may still begin the marker. After: bytes read past the
    /// marker not handed on yet.
    pending: Vec<u8>,
    found: bool,
    skipped: usize,
}

impl<R> SkipThrough<R> {
    pub fn new(inner: R, marker: &str) -> SkipThrough<R> {
        SkipThrough {
            inner,
            marker: marker.as_bytes().to_vec(),
            pending: Vec::new(),
            found: false,
            skipped: 0,
        }
    }

    /// Bytes dropped before the marker so far.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Adds bytes read while searching; true once the marker has been passed.
    fn search(&mut self, data: &[u8]) -> bool {
        self.pending.extend_from_slice(data);
        if let Some(at) = find(&self.pending, &self.marker) {
            self.skipped += at;
            self.pending.drain(..at + self.marker.len());
            self.found = true;
            return true;
        }
        // Keep only what could be the start of a marker cut by the read.
        let keep = self.marker.len().saturating_sub(1).min(self.pending.len());
        let drop = self.pending.len() - keep;
        self.skipped += drop;
        self.pending.drain(..drop);
        false
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for SkipThrough<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.found {
                if !this.pending.is_empty() {
                    let n = this.pending.len().min(buf.remaining());
                    buf.put_slice(&this.pending[..n]);
                    this.pending.drain(..n);
                    return Poll::Ready(Ok(()));
                }
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    this.skipped += this.pending.len();
                    this.pending.clear();
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Ok(())) => {
                    let data = read.filled().to_vec();
                    this.search(&data);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn through(chunks: &[&[u8]], marker: &str) -> (Vec<u8>, usize) {
        let mut data = Vec::new();
        for c in chunks {
            data.extend_from_slice(c);
        }
        // A reader that hands out one byte at a time cuts the marker at every place.
        let mut reader = SkipThrough::new(OneByte(data), marker);
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.unwrap();
        (out, reader.skipped())
    }

    struct OneByte(Vec<u8>);

    impl AsyncRead for OneByte {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if !this.0.is_empty() {
                buf.put_slice(&[this.0.remove(0)]);
            }
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn everything_up_to_the_marker_is_dropped_wherever_reads_cut_it() {
        let (out, skipped) = through(
            &[b"Welcome\n{\"banner\": 1}\n___m_", b"_\x00\x00\x00\x05rest"],
            "__m__",
        )
        .await;
        assert_eq!(out, b"\x00\x00\x00\x05rest");
        assert_eq!(skipped, "Welcome\n{\"banner\": 1}\n_".len());
        // Noise without a newline before the marker, and a marker-like prefix in the noise.
        let (out, _) = through(&[b"no newline__m_ __m__", b"__m__ kept"], "__m__").await;
        assert_eq!(out, b"__m__ kept", "only the first marker is dropped");
        // A quiet shell: nothing is skipped.
        let (out, skipped) = through(&[b"__m__data"], "__m__").await;
        assert_eq!((out, skipped), (b"data".to_vec(), 0));
        // The stream ends before the marker: nothing comes through.
        let (out, skipped) = through(&[b"noise only"], "__m__").await;
        assert_eq!((out, skipped), (Vec::new(), 10));
    }

    #[test]
    fn the_probe_answer_tells_noise_and_its_cost() {
        let m = "__rigrun_probe_1__";
        let out = format!("Welcome\n{{\"banner\": 1}}\nrc-out\n{m}\nuptime 100.50\nstart 10000\nhz 100\n");
        let err = format!("rc-err\n{m}\n");
        let noise = read_probe(m, out.as_bytes(), out.len(), err.as_bytes(), err.len(), 70).unwrap();
        assert_eq!(noise.stdout, b"Welcome\n{\"banner\": 1}\nrc-out\n");
        assert_eq!(noise.stderr, b"rc-err\n");
        assert_eq!(noise.bytes, 36);
        assert_eq!(noise.lines(), 4);
        assert_eq!(noise.first_line(), "Welcome");
        assert_eq!(noise.shell_ms, Some(500));
        let warning = noise.warning("gpu", std::path::Path::new("runs/r/hosts/gpu/login-shell.log"));
        assert!(
            warning.starts_with(
                "the login shell on gpu prints before every command (4 lines, 36 bytes on stdout and \
                 stderr; first: `Welcome`); rigrun leaves it out of outputs and records, but starting \
                 it takes 500 ms per command. It is kept in runs/r/hosts/gpu/login-shell.log."
            ),
            "{warning}"
        );
        assert!(warning.contains("[ -z \"$PS1\" ] && return"), "{warning}");
        let log = String::from_utf8(noise.log_text("gpu")).unwrap();
        assert!(
            log.contains("## stdout\nWelcome\n{\"banner\": 1}\nrc-out\n## stderr\nrc-err\n"),
            "{log}"
        );
    }

    #[test]
    fn a_quiet_shell_or_a_probe_that_never_ran_is_no_noise() {
        let m = "__rigrun_probe_1__";
        let out = format!("{m}\nuptime 1\nstart 1\nhz 100\n");
        let err = format!("{m}\n");
        assert_eq!(
            read_probe(m, out.as_bytes(), out.len(), err.as_bytes(), err.len(), 5),
            None
        );
        assert_eq!(read_probe(m, b"sh: not found\n", 14, b"", 0, 5), None);
    }

    #[test]
    fn without_proc_the_round_trip_is_what_the_warning_names() {
        let m = "__m__";
        let out = format!("x{m}\nuptime \nstart \nhz 100\n");
        let err = format!("{m}\n");
        let noise = read_probe(m, out.as_bytes(), out.len(), err.as_bytes(), err.len(), 42).unwrap();
        assert_eq!(
            (noise.shell_ms, noise.lines(), noise.first_line().as_str()),
            (None, 1, "x")
        );
        assert!(noise
            .warning("h", std::path::Path::new("l"))
            .contains("a trivial command takes 42 ms there, round trip included"));
    }

    #[tokio::test]
    async fn the_probe_runs_under_sh_and_reads_proc() {
        // The probe itself, run here: no noise, and (on Linux) a start time it could read.
        let marker = new_marker("probe");
        let out = tokio::process::Command::new("sh")
            .args(["-c", PROBE, "rigrun", &marker])
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.starts_with(&format!("{marker}\nuptime ")), "{stdout}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), format!("{marker}\n"));
        assert!(stdout.contains("\nhz "), "{stdout}");
    }
}
