//! Framing of one output stream of a remote command, so that nothing a login shell prints is
//! taken for the command's output.
//!
//! A login shell and its rc files (a banner, conda or module lines, a motd) print before our
//! wrapper runs, on stdout and stderr, sometimes without a newline. The wrapper therefore opens
//! each stream with `<marker>:start\n` and closes it with `<marker>:end` (on stderr followed by
//! the command's exit status and a newline). The marker is random per command, so no output can
//! forge it: what comes before the start and after the end is login noise; what comes between
//! is, byte for byte, the command's.

use memchr::memmem;

/// One piece of a framed stream, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Printed by the login shell (or after the command's end): kept for the host's log only.
    Noise(&'a [u8]),
    /// The command's own bytes.
    Content(&'a [u8]),
    /// The end marker came, with what followed it on its line (stderr: the exit status).
    End(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    BeforeStart,
    Content,
    /// After the end marker, until its line ends.
    Trailer,
    Done,
}

/// Longest trailer after an end marker (` 127`, ` stopped timeout`).
const TRAILER_CAP: usize = 256;

/// Splits one stream into [`Piece`]s as its bytes arrive, holding back only the bytes that may be
/// the beginning of a marker.
pub struct Frame {
    start: Vec<u8>,
    end: Vec<u8>,
    state: State,
    held: Vec<u8>,
}

impl Frame {
    pub fn new(marker: &str) -> Frame {
        Frame {
            start: format!("{marker}:start\n").into_bytes(),
            end: format!("{marker}:end").into_bytes(),
            state: State::BeforeStart,
            held: Vec::new(),
        }
    }

    pub fn push(&mut self, data: &[u8], emit: &mut dyn FnMut(Piece)) {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(data);
        let mut rest: &[u8] = &buf;
        while !rest.is_empty() {
            rest = match self.state {
                State::BeforeStart => self.until(rest, true, emit),
                State::Content => self.until(rest, false, emit),
                State::Trailer => self.trailer(rest, emit),
                State::Done => {
                    emit(Piece::Noise(rest));
                    &[]
                }
            };
        }
    }

    /// Emits what precedes the start (or end) marker and moves past it; without the marker,
    /// emits all but a possible beginning of it, which is held for the next push.
    fn until<'a>(&mut self, data: &'a [u8], start: bool, emit: &mut dyn FnMut(Piece)) -> &'a [u8] {
        let pattern = if start { &self.start } else { &self.end };
        let piece = |bytes| {
            if start {
                Piece::Noise(bytes)
            } else {
                Piece::Content(bytes)
            }
        };
        if let Some(at) = memmem::find(data, pattern) {
            if at > 0 {
                emit(piece(&data[..at]));
            }
            let after = &data[at + pattern.len()..];
            self.state = if start { State::Content } else { State::Trailer };
            return after;
        }
        let keep = partial_suffix(data, pattern);
        let (now, later) = data.split_at(data.len() - keep);
        if !now.is_empty() {
            emit(piece(now));
        }
        self.held = later.to_vec();
        &[]
    }

    fn trailer<'a>(&mut self, data: &'a [u8], emit: &mut dyn FnMut(Piece)) -> &'a [u8] {
        match memchr::memchr(b'\n', data) {
            Some(at) => {
                emit(Piece::End(
                    String::from_utf8_lossy(&data[..at]).trim().to_string(),
                ));
                self.state = State::Done;
                &data[at + 1..]
            }
            None if data.len() > TRAILER_CAP => {
                emit(Piece::End(String::new()));
                self.state = State::Done;
                data
            }
            None => {
                self.held = data.to_vec();
                &[]
            }
        }
    }

    /// The stream closed: bytes held back as a possible marker were the command's after all (or
    /// noise, before the start); a trailer cut short still ends the stream.
    pub fn finish(&mut self, emit: &mut dyn FnMut(Piece)) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::BeforeStart if !held.is_empty() => emit(Piece::Noise(&held)),
            State::Content if !held.is_empty() => emit(Piece::Content(&held)),
            State::Trailer => {
                emit(Piece::End(String::from_utf8_lossy(&held).trim().to_string()));
                self.state = State::Done;
            }
            _ => {}
        }
    }
}

/// How many of `data`'s last bytes are the beginning of `pattern` (at most its length - 1).
fn partial_suffix(data: &[u8], pattern: &[u8]) -> usize {
    let longest = pattern.len().saturating_sub(1).min(data.len());
    (1..=longest)
        .rev()
        .find(|&n| data[data.len() - n..] == pattern[..n])
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes `chunks` through a frame and returns (noise, content, end) as joined bytes.
    fn split(chunks: &[&[u8]]) -> (Vec<u8>, Vec<u8>, Option<String>) {
        let mut frame = Frame::new("M");
        let (mut noise, mut content, mut end) = (Vec::new(), Vec::new(), None);
        let mut emit = |p: Piece| match p {
            Piece::Noise(b) => noise.extend_from_slice(b),
            Piece::Content(b) => content.extend_from_slice(b),
            Piece::End(t) => end = Some(t),
        };
        for chunk in chunks {
            frame.push(chunk, &mut emit);
        }
        frame.finish(&mut emit);
        (noise, content, end)
    }

    #[test]
    fn noise_before_the_start_and_after_the_end_is_not_content() {
        let (noise, content, end) = split(&[b"banner{\"x\":1}\nno newlineM:start\nout\nlastM:end 7\nbye\n"]);
        assert_eq!(noise, b"banner{\"x\":1}\nno newlinebye\n");
        assert_eq!(content, b"out\nlast");
        assert_eq!(end.as_deref(), Some("7"));
    }

    #[test]
    fn markers_split_across_chunks_are_found_at_every_cut() {
        let whole: &[u8] = b"motd\nM:start\nab\ncM:M:end 0\n";
        for cut in 0..whole.len() {
            let (a, b) = whole.split_at(cut);
            let (noise, content, end) = split(&[a, b]);
            assert_eq!(noise, b"motd\n", "cut at {cut}");
            assert_eq!(content, b"ab\ncM:", "cut at {cut}");
            assert_eq!(end.as_deref(), Some("0"), "cut at {cut}");
        }
    }

    #[test]
    fn a_stream_cut_short_keeps_every_content_byte_and_has_no_end() {
        let (_, content, end) = split(&[b"M:start\npartial line M:e"]);
        assert_eq!(content, b"partial line M:e");
        assert_eq!(end, None);
        let (noise, content, _) = split(&[b"only noise M:sta"]);
        assert_eq!(
            (noise.as_slice(), content.as_slice()),
            (&b"only noise M:sta"[..], &b""[..])
        );
    }
}
