//! Receiving the files to fetch: small regular files in batches through one `tar` each
//! ([`Transport::read_many`]), the rest one by one (SFTP over SSH), [`PARALLEL_FILES`] at a time.
//! Either way each file streams to a temporary name beside its destination, hashed as it
//! arrives, and is renamed only once it matches the listing.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt as _;
use sha2::{Digest, Sha256};

use super::{Entry, Kind};
use crate::transport::{ManySink, Streamed, Transport};

/// Files streamed one by one at once: small files overlap their round trips, big ones share the
/// link.
const PARALLEL_FILES: usize = 16;
/// Files up to this size go in batches: per file, a batch costs a tar header instead of SFTP's
/// open, read, stat and close.
const BATCH_FILE_MAX: u64 = 1 << 20;
/// Files per batch: batches are cut short by nothing but a broken channel, so a few large ones
/// do; two run at once, so that writing here overlaps reading there.
const BATCH_FILES: usize = 2_000;
const PARALLEL_BATCHES: usize = 2;

/// One file streamed to disk.
pub(super) struct Fetched {
    pub local: PathBuf,
    pub bytes: u64,
    pub sha256: String,
}

/// Fetches every wanted file into `dest_root`; results in the order asked.
pub(super) async fn fetch_all(
    transport: &Transport,
    wanted: &[(&Entry, PathBuf)],
    dest_root: &Path,
) -> Vec<Result<Fetched>> {
    let mut results: Vec<Option<Result<Fetched>>> = (0..wanted.len()).map(|_| None).collect();
    // Batches need the host's checksum: a file changed while tar reads it keeps its header's size.
    let (batched, single): (Vec<usize>, Vec<usize>) = (0..wanted.len()).partition(|&i| {
        let e = wanted[i].0;
        e.kind == Kind::File && e.sha256.is_some() && e.size.is_some_and(|s| s <= BATCH_FILE_MAX)
    });
    let batches: Vec<_> = batched
        .chunks(BATCH_FILES)
        .map(|indices| fetch_batch(transport, wanted, indices, dest_root))
        .collect();
    let batched: Vec<(Vec<usize>, BatchResult)> = futures_util::stream::iter(batches)
        .buffered(PARALLEL_BATCHES)
        .collect()
        .await;
    // What a batch could not send at all (no GNU tar on the host) goes one by one too.
    let mut single = single;
    for (indices, result) in batched {
        match result {
            Ok(got) => {
                for (i, r) in indices.into_iter().zip(got) {
                    results[i] = Some(r);
                }
            }
            Err(e) => {
                tracing::info!("fetching file by file: {e:#}");
                single.extend(indices);
            }
        }
    }
    single.sort_unstable();
    let fetches: Vec<_> = single
        .iter()
        .map(|&i| fetch_file(transport, wanted[i].0, dest_root.join(&wanted[i].1)))
        .collect();
    let got: Vec<Result<Fetched>> = futures_util::stream::iter(fetches)
        .buffered(PARALLEL_FILES)
        .collect()
        .await;
    for (i, r) in single.into_iter().zip(got) {
        results[i] = Some(r);
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("it was not fetched"))))
        .collect()
}

/// Each file's result, in the batch's order; an error when the batch sent nothing at all.
type BatchResult = Result<Vec<Result<Fetched>>>;

/// Fetches the files at `indices` of `wanted` through one `tar` on the host.
async fn fetch_batch(
    transport: &Transport,
    wanted: &[(&Entry, PathBuf)],
    indices: &[usize],
    dest_root: &Path,
) -> (Vec<usize>, BatchResult) {
    let entries: Vec<&Entry> = indices.iter().map(|&i| wanted[i].0).collect();
    let paths: Vec<&[u8]> = entries.iter().map(|e| e.path.as_slice()).collect();
    let mut sink = BatchSink {
        entries: &entries,
        locals: indices.iter().map(|&i| dest_root.join(&wanted[i].1)).collect(),
        incoming: None,
        results: (0..indices.len()).map(|_| None).collect(),
    };
    let sent = transport.read_many(&paths, &mut sink).await;
    let results = sent.map(|()| {
        sink.results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("tar on the host did not send it"))))
            .collect()
    });
    (indices.to_vec(), results)
}

/// Writes the files of one batch as they arrive.
struct BatchSink<'a> {
    entries: &'a [&'a Entry],
    locals: Vec<PathBuf>,
    incoming: Option<Incoming>,
    results: Vec<Option<Result<Fetched>>>,
}

impl ManySink for BatchSink<'_> {
    fn begin(&mut self, index: usize) -> std::io::Result<()> {
        let incoming = Incoming::new(self.locals[index].clone()).map_err(std::io::Error::other)?;
        self.incoming = Some(incoming);
        Ok(())
    }

    fn chunk(&mut self, data: &[u8]) -> std::io::Result<()> {
        match &mut self.incoming {
            Some(incoming) => incoming.write(data),
            None => Ok(()),
        }
    }

    fn end(&mut self, index: usize, result: Result<Streamed>) {
        let incoming = self.incoming.take();
        self.results[index] = Some(match (result, incoming) {
            (Ok(streamed), Some(incoming)) => incoming.finish(self.entries[index], &streamed),
            (Ok(_), None) => Err(anyhow::anyhow!("it was not received")),
            (Err(e), _) => Err(e),
        });
    }
}

/// Streams one file to `local` through a temporary name beside it, renamed only once its size
/// and checksum match the listing.
async fn fetch_file(transport: &Transport, entry: &Entry, local: PathBuf) -> Result<Fetched> {
    let mut incoming = Incoming::new(local)?;
    let remote = Path::new(OsStr::from_bytes(&entry.path));
    let streamed = transport
        .read_chunks(remote, entry.size, &mut |chunk| incoming.write(chunk))
        .await?;
    incoming.finish(entry, &streamed)
}

/// A file being received: a temporary file beside its destination, hashed as it is written,
/// all-zero chunks skipped with a seek so that sparse files stay sparse.
struct Incoming {
    local: PathBuf,
    tmp: tempfile::NamedTempFile,
    hasher: Sha256,
    len: u64,
    /// The last chunk was a hole: the length must be set, a seek alone does not extend a file.
    hole_at_end: bool,
}

impl Incoming {
    fn new(local: PathBuf) -> Result<Incoming> {
        let dir = local.parent().context("no folder to fetch into")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let tmp = tempfile::Builder::new()
            .prefix(".rigrun-fetch-")
            .tempfile_in(dir)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        Ok(Incoming {
            local,
            tmp,
            hasher: Sha256::new(),
            len: 0,
            hole_at_end: false,
        })
    }

    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.hasher.update(chunk);
        let mut file: &File = self.tmp.as_file();
        self.hole_at_end = chunk.iter().all(|&b| b == 0);
        if self.hole_at_end {
            file.seek(SeekFrom::Current(chunk.len() as i64))?;
        } else {
            file.write_all(chunk)?;
        }
        self.len += chunk.len() as u64;
        Ok(())
    }

    /// Checks what was received against the listing and gives the file its name.
    fn finish(self, entry: &Entry, streamed: &Streamed) -> Result<Fetched> {
        let local = self.local;
        if self.hole_at_end {
            self.tmp
                .as_file()
                .set_len(self.len)
                .with_context(|| format!("cannot write {}", local.display()))?;
        }
        let sha256 = hex::encode(self.hasher.finalize());
        check_against_listing(entry, streamed, &sha256)?;
        self.tmp
            .persist(&local)
            .with_context(|| format!("cannot rename the download to {}", local.display()))?;
        Ok(Fetched {
            local,
            bytes: streamed.bytes,
            sha256,
        })
    }
}

/// The received file is the one listed: same size, unchanged while read (its length and
/// modification time after reading), and the host's checksum where it made one.
fn check_against_listing(entry: &Entry, streamed: &Streamed, sha256: &str) -> Result<()> {
    let bytes = streamed.bytes;
    if let Some(size) = entry.size.filter(|&s| s != bytes) {
        bail!("received {bytes} bytes, the host listed {size} (was it still being written?)");
    }
    let grew = streamed.len_after.is_some_and(|len| len != bytes);
    let touched = matches!((entry.modified, streamed.modified_after), (Some(a), Some(b)) if a != b);
    if grew || touched {
        bail!("it changed while it was being fetched (still being written?)");
    }
    if entry.sha256.as_deref().is_some_and(|listed| listed != sha256) {
        bail!("its checksum differs from the one the host listed (was it changed while fetching?)");
    }
    Ok(())
}
