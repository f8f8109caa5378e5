//! Many files in one round trip: one `tar` on the host archives them to its stdout, names read
//! NUL-separated from stdin (so any byte passes), and the stream is unpacked here as it
//! arrives. Ten thousand small result files cost one channel instead of four SFTP requests
//! each.
//!
//! tar takes each name as given (`-P`, `--null`), does not descend into a directory that took a
//! file's place (`--no-recursion`), stores a hard link's data again (`--hard-dereference`), and
//! keeps going past a file it cannot read; such a file has no member, and its end says what
//! tar said. Without GNU tar on the host nothing arrives and the caller fetches file by file.

use anyhow::{anyhow, bail, Result};
use tokio::io::{AsyncWriteExt as _, BufReader};

use super::channel::Channel;
use super::login_noise::SkipThrough;
use super::tar::TarReader;
use super::{Streamed, Transport};

/// Receives the files of [`Transport::read_many`] in order: each file's start, its data, its
/// end (or, for a file that did not come, only its end with why).
pub trait ManySink: Send {
    fn begin(&mut self, index: usize) -> std::io::Result<()>;
    fn chunk(&mut self, data: &[u8]) -> std::io::Result<()>;
    fn end(&mut self, index: usize, result: Result<Streamed>);
}

/// The marker first on both streams (what a login shell printed before is dropped), then tar,
/// then its exit status on stderr.
const SCRIPT: &str = "printf '%s' \"$1\"; printf '%s\\n' \"$1\" >&2; \
    tar -c -f - -H gnu -P --no-recursion --hard-dereference --null -T -; echo \"$1 rc $?\" >&2";

/// A `tar` started on the host and waiting for names: started ahead, while the listing runs,
/// its login shell's start-up is off the critical path (0.1 s a command where `~/.bashrc`
/// runs `pyenv init`). Dropped unused, it gets no names and ends with an empty archive.
pub struct Tar {
    channel: Channel,
    marker: String,
}

impl Transport {
    /// Starts a `tar` for [`Tar::read`].
    pub async fn start_tar(&self) -> Result<Tar> {
        let marker = super::login_noise::new_marker("tar");
        let channel = self
            .spawn(super::channel::Program::Script(SCRIPT), &[&marker])
            .await?;
        Ok(Tar { channel, marker })
    }

    /// Streams the regular files `paths` (as the host names them) to `sink` through one `tar`
    /// on the host. An error means nothing was fetched (no GNU tar there, the channel broke
    /// before the first file): fetch them one by one instead.
    pub async fn read_many(&self, paths: &[&[u8]], sink: &mut dyn ManySink) -> Result<()> {
        self.start_tar().await?.read(paths, sink).await
    }
}

impl Tar {
    /// [`Transport::read_many`] on this `tar`.
    pub async fn read(self, paths: &[&[u8]], sink: &mut dyn ManySink) -> Result<()> {
        let Tar { mut channel, marker } = self;
        let names: Vec<u8> = paths.iter().flat_map(|p| [*p, b"\0"].concat()).collect();
        let Channel {
            stdin,
            stdout,
            stderr,
            ..
        } = &mut channel;
        // All three at once: tar reads names as it goes, and blocks when its output is not read.
        let write = async {
            let written = stdin.write_all(&names).await;
            let _ = stdin.flush().await;
            *stdin = super::channel::closed_input();
            written
        };
        let (written, (next, read), said) = tokio::join!(
            write,
            // Buffered: a member's header, data and padding are three small reads otherwise.
            unpack(
                BufReader::with_capacity(256 << 10, SkipThrough::new(stdout, &marker)),
                paths,
                sink
            ),
            read_said(SkipThrough::new(stderr, &marker), &marker),
        );
        channel.wait().await;
        if next == 0 {
            // Not one member: tar is missing or refused the options; the caller falls back.
            let why = read.err().map(|e| format!("{e:#}")).unwrap_or(said.text);
            bail!("tar on the host sent nothing ({})", why.trim());
        }
        written.map_err(|e| anyhow!("cannot send the names to tar: {e}"))?;
        let exit = said.status.map(|rc| format!(" (exit {rc})")).unwrap_or_default();
        let reason = match &read {
            Err(e) => format!("the tar stream broke: {e:#}"),
            Ok(()) if said.text.trim().is_empty() => format!("tar on the host did not send it{exit}"),
            Ok(()) => format!("tar on the host{exit}: {}", said.text.trim()),
        };
        for index in next..paths.len() {
            sink.end(index, Err(anyhow!("{reason}")));
        }
        Ok(())
    }
}

/// Reads the archive into `sink`; returns how many of `paths` it got through (the next index)
/// and whether the stream ended well. Members come in the order asked; a name tar skipped
/// (unreadable, gone) is ended with why when the next member passes it.
async fn unpack(
    stream: impl tokio::io::AsyncRead + Unpin,
    paths: &[&[u8]],
    sink: &mut dyn ManySink,
) -> (usize, Result<()>) {
    let mut tar = TarReader::new(stream);
    let mut next = 0;
    loop {
        let header = match tar.next().await {
            Ok(Some(h)) => h,
            Ok(None) => return (next, Ok(())),
            Err(e) => return (next, Err(e)),
        };
        let Some(found) = paths[next..].iter().position(|p| *p == header.name.as_slice()) else {
            continue;
        };
        for skipped in next..next + found {
            sink.end(
                skipped,
                Err(anyhow!(
                    "tar on the host could not read it (removed or made unreadable since the listing?)"
                )),
            );
        }
        let index = next + found;
        next = index + 1;
        if !header.regular {
            sink.end(index, Err(anyhow!("it is no longer a regular file")));
            continue;
        }
        if let Err(e) = sink.begin(index) {
            sink.end(index, Err(e.into()));
            continue;
        }
        let mut on_chunk = |data: &[u8]| sink.chunk(data);
        match tar.read_data(&mut on_chunk).await {
            Ok(bytes) => sink.end(
                index,
                Ok(Streamed {
                    bytes,
                    len_after: Some(header.size),
                    modified_after: Some(header.modified),
                }),
            ),
            Err(e) => {
                sink.end(index, Err(anyhow!("{e:#}")));
                return (next, Err(e));
            }
        }
    }
}

/// What tar said on stderr, and its exit status from the script's last line.
struct Said {
    text: String,
    status: Option<i32>,
}

/// Reads stderr to its end, keeping the first 64 KiB.
async fn read_said(mut stream: impl tokio::io::AsyncRead + Unpin, marker: &str) -> Said {
    use tokio::io::AsyncReadExt as _;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if bytes.len() < 64 << 10 {
            bytes.extend_from_slice(&buf[..n]);
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let end = format!("{marker} rc ");
    let status = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(&end))
        .and_then(|rc| rc.trim().parse().ok());
    let text = text
        .lines()
        .filter(|l| !l.starts_with(&end))
        .collect::<Vec<_>>()
        .join("\n");
    Said { text, status }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    /// A file as a sink saw it: its bytes and the count it ended with, or why it did not come.
    type Got = Result<(Vec<u8>, u64), String>;

    /// What a sink saw: per index, how the file ended.
    #[derive(Default)]
    struct Seen {
        current: Vec<u8>,
        files: Vec<(usize, Got)>,
    }

    impl ManySink for Seen {
        fn begin(&mut self, _: usize) -> std::io::Result<()> {
            self.current.clear();
            Ok(())
        }
        fn chunk(&mut self, data: &[u8]) -> std::io::Result<()> {
            self.current.extend_from_slice(data);
            Ok(())
        }
        fn end(&mut self, index: usize, result: Result<Streamed>) {
            let got = result.map(|s| (std::mem::take(&mut self.current), s.bytes));
            self.files.push((index, got.map_err(|e| format!("{e:#}"))));
        }
    }

    async fn local() -> Transport {
        let dir = tempfile::tempdir().unwrap();
        Transport::local_for_tests(dir.path()).await
    }

    /// Through the real `tar` of this machine: files in the order asked, a name with a newline
    /// and a non-UTF-8 byte, and a file gone since the listing ended with what tar said while
    /// the ones after it still come.
    #[tokio::test]
    async fn files_come_in_order_and_one_that_is_gone_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join(std::ffi::OsStr::from_bytes(b"odd\n\xff.json"));
        std::fs::write(dir.path().join("a.json"), b"{\"a\": 1}").unwrap();
        std::fs::write(&odd, b"odd").unwrap();
        std::fs::write(dir.path().join("c.json"), vec![3u8; 300_000]).unwrap();
        let names = [
            dir.path().join("a.json"),
            dir.path().join("gone.json"),
            odd,
            dir.path().join("c.json"),
        ];
        let paths: Vec<&[u8]> = names.iter().map(|p| p.as_os_str().as_bytes()).collect();
        let mut seen = Seen::default();
        local().await.read_many(&paths, &mut seen).await.unwrap();
        let order: Vec<usize> = seen.files.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, [0, 1, 2, 3]);
        assert_eq!(seen.files[0].1.as_ref().unwrap(), &(b"{\"a\": 1}".to_vec(), 8));
        let gone = seen.files[1].1.as_ref().unwrap_err();
        assert!(gone.contains("could not read it"), "{gone}");
        assert_eq!(seen.files[2].1.as_ref().unwrap().0, b"odd");
        assert_eq!(seen.files[3].1.as_ref().unwrap().1, 300_000);
    }

    /// A last file that tar could not send is ended with tar's own words.
    #[tokio::test]
    async fn a_missing_last_file_is_ended_with_tars_message() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"a").unwrap();
        let names = [dir.path().join("a"), dir.path().join("nope")];
        let paths: Vec<&[u8]> = names.iter().map(|p| p.as_os_str().as_bytes()).collect();
        let mut seen = Seen::default();
        local().await.read_many(&paths, &mut seen).await.unwrap();
        let why = seen.files[1].1.as_ref().unwrap_err();
        assert!(
            why.contains("tar on the host (exit 2)") && why.contains("nope"),
            "{why}"
        );
    }

    /// Nothing sent at all (here: every file gone) is an error, so that the caller fetches file
    /// by file and gets each file's own error.
    #[tokio::test]
    async fn nothing_sent_is_an_error_for_the_caller_to_fall_back() {
        let mut seen = Seen::default();
        let err = local()
            .await
            .read_many(&[b"/nonexistent/a".as_slice()], &mut seen)
            .await
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("tar on the host sent nothing"),
            "{err:#}"
        );
        assert!(seen.files.is_empty());
    }
}
