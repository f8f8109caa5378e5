//! Receiving the files to fetch: small regular files in batches through one `tar` each
//! ([`Transport::read_many`]), the rest one by one (SFTP over SSH), [`PARALLEL_FILES`] at a time.
//! A batch's file is checked against the listing in memory before it is written; a file fetched
//! alone streams to a temporary name beside its destination, hashed as it arrives, and is
//! renamed only once it matches the listing. Every file gets the permission bits it has on the
//! host (see [`local_mode`]), whichever way it came.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt as _;
use sha2::{Digest, Sha256};

use super::listing::{Entry, Kind, Sum};
use crate::transport::{ManySink, Streamed, Tar, Transport};

/// Files streamed one by one at once: small files overlap their round trips, big ones share the
/// link.
const PARALLEL_FILES: usize = 16;
/// Files up to this size go in batches: per file, a batch costs a tar header instead of SFTP's
/// open, read, stat and close.
const BATCH_FILE_MAX: u64 = 1 << 20;
/// A batch ends at this many files or bytes, whichever comes first. Each batch is a command on
/// the host, and each command starts the login shell (with whatever `~/.bashrc` runs: conda or
/// pyenv init cost ~0.1 s here), so batches are few; two run at once.
const BATCH_FILES: usize = 25_000;
const BATCH_BYTES: u64 = 64 << 20;
const PARALLEL_BATCHES: usize = 2;
/// Files from this size on are hashed on a thread of their own while they stream: on two
/// shared cores the sha256 of a gigabyte (~0.5 s) otherwise holds up the reading.
const HASH_THREAD_FROM: u64 = 16 << 20;
/// What the reading hands the hashing thread at a time, and how many such buffers may wait.
const HASH_BUFFER: usize = 1 << 20;
const HASH_QUEUE: usize = 4;

/// One file streamed to disk (to its local name, as asked): what is kept of it until the step
/// lists it.
pub(super) struct Fetched {
    pub bytes: u64,
    pub sha256: Sum,
}

/// Fetches every wanted file into `dest_root`; results in the order asked. `tar`, started
/// ahead, takes the first batch.
pub(super) async fn fetch_all(
    transport: &Transport,
    wanted: &[(&Entry, PathBuf)],
    dest_root: &Path,
    mut tar: Option<Tar>,
) -> Vec<Result<Fetched>> {
    let mut results: Vec<Option<Result<Fetched>>> = (0..wanted.len()).map(|_| None).collect();
    // Batches need the host's checksum: a file changed while tar reads it keeps its header's size.
    let (batched, single): (Vec<usize>, Vec<usize>) = (0..wanted.len()).partition(|&i| {
        let e = wanted[i].0;
        e.kind == Kind::File && e.sha256.is_some() && e.size.is_some_and(|s| s <= BATCH_FILE_MAX)
    });
    let batches: Vec<_> = batches_of(&batched, |i| wanted[i].0.size.unwrap_or(0))
        .into_iter()
        .map(|indices| fetch_batch(transport, wanted, indices, dest_root, tar.take()))
        .collect();
    // Unused (no small files): let its channel go before the files fetched one by one need it.
    drop(tar);
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

/// `indices` cut into runs of at most [`BATCH_FILES`] files and (past the first file)
/// [`BATCH_BYTES`] bytes, in order.
fn batches_of(indices: &[usize], size: impl Fn(usize) -> u64) -> Vec<&[usize]> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (at, &i) in indices.iter().enumerate() {
        let full = at - start == BATCH_FILES || (at > start && bytes + size(i) > BATCH_BYTES);
        if full {
            batches.push(&indices[start..at]);
            (start, bytes) = (at, 0);
        }
        bytes += size(i);
    }
    if start < indices.len() {
        batches.push(&indices[start..]);
    }
    batches
}

/// Each file's result, in the batch's order; an error when the batch sent nothing at all.
type BatchResult = Result<Vec<Result<Fetched>>>;

/// Fetches the files at `indices` of `wanted` through one `tar` on the host (`tar` if started).
async fn fetch_batch(
    transport: &Transport,
    wanted: &[(&Entry, PathBuf)],
    indices: &[usize],
    dest_root: &Path,
    tar: Option<Tar>,
) -> (Vec<usize>, BatchResult) {
    let entries: Vec<&Entry> = indices.iter().map(|&i| wanted[i].0).collect();
    let paths: Vec<&[u8]> = entries.iter().map(|e| e.path.as_slice()).collect();
    let mut sink = BatchSink {
        entries: &entries,
        rels: indices.iter().map(|&i| wanted[i].1.as_path()).collect(),
        dest_root,
        data: Vec::with_capacity(BATCH_FILE_MAX as usize),
        made: None,
        results: (0..indices.len()).map(|_| None).collect(),
    };
    let sent = match tar {
        Some(tar) => tar.read(&paths, &mut sink).await,
        None => transport.read_many(&paths, &mut sink).await,
    };
    let results = sent.map(|()| {
        sink.results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("tar on the host did not send it"))))
            .collect()
    });
    (indices.to_vec(), results)
}

/// Writes the files of one batch as they arrive. Each is at most [`BATCH_FILE_MAX`] bytes, so it
/// is gathered in memory and checked against the listing before anything is written: a file
/// new to its folder is then written straight to its name (a rename per file was a fifth of
/// the time of 10,000 small files), one that is there already is replaced through a temporary
/// name as a streamed file is.
struct BatchSink<'a> {
    entries: &'a [&'a Entry],
    /// Each file's name under `dest_root`.
    rels: Vec<&'a Path>,
    dest_root: &'a Path,
    data: Vec<u8>,
    /// The last folder made, so that a batch of files in one folder makes it once.
    made: Option<PathBuf>,
    results: Vec<Option<Result<Fetched>>>,
}

impl BatchSink<'_> {
    fn write(&mut self, index: usize, streamed: &Streamed) -> Result<Fetched> {
        let local = &self.dest_root.join(self.rels[index]);
        let sha256: Sum = Sha256::digest(&self.data).into();
        check_against_listing(self.entries[index], streamed, &sha256)?;
        let dir = local.parent().context("no folder to fetch into")?;
        if self.made.as_deref() != Some(dir) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            self.made = Some(dir.to_path_buf());
        }
        put(local, &self.data, local_mode(self.entries[index]))?;
        Ok(Fetched {
            bytes: streamed.bytes,
            sha256,
        })
    }
}

/// Writes `data` to `local` with permission bits `mode`: straight to the name when it is new (a
/// short write, disk full, leaves nothing there), else through a temporary name that then
/// replaces the old file.
fn put(local: &Path, data: &[u8], mode: Option<u32>) -> Result<()> {
    let cannot = || format!("cannot write {}", local.display());
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(local)
    {
        Ok(mut file) => file
            .write_all(data)
            .and_then(|()| set_mode(&file, mode))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(local);
            })
            .with_context(cannot),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut tmp = temp_beside(local)?;
            tmp.write_all(data).with_context(cannot)?;
            set_mode(tmp.as_file(), mode).with_context(cannot)?;
            persist(tmp, local)
        }
        Err(e) => Err(e).with_context(cannot),
    }
}

/// The permission bits a fetched file gets: the host's, without setuid, setgid and sticky, and
/// always readable by its owner here (rigrun reads results back); None: the default.
fn local_mode(entry: &Entry) -> Option<u32> {
    entry.mode.map(|mode| (mode & 0o777) | 0o400)
}

/// Gives `file` the bits `mode` (exactly: not through the umask), when known.
fn set_mode(file: &File, mode: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match mode {
        Some(mode) => file.set_permissions(std::fs::Permissions::from_mode(mode)),
        None => Ok(()),
    }
}

impl ManySink for BatchSink<'_> {
    fn begin(&mut self, _index: usize) -> std::io::Result<()> {
        self.data.clear();
        Ok(())
    }

    fn chunk(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.data.extend_from_slice(data);
        Ok(())
    }

    fn end(&mut self, index: usize, result: Result<Streamed>) {
        self.results[index] = Some(result.and_then(|streamed| self.write(index, &streamed)));
    }
}

/// Streams one file to `local` through a temporary name beside it, renamed only once its size
/// and checksum match the listing.
async fn fetch_file(transport: &Transport, entry: &Entry, local: PathBuf) -> Result<Fetched> {
    let mut incoming = Incoming::new(local)?;
    if entry.size.is_some_and(|s| s >= HASH_THREAD_FROM) {
        incoming.hasher = Checksum::on_thread();
    }
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
    hasher: Checksum,
    len: u64,
    /// The last chunk was a hole: the length must be set, a seek alone does not extend a file.
    hole_at_end: bool,
}

impl Incoming {
    fn new(local: PathBuf) -> Result<Incoming> {
        let dir = local.parent().context("no folder to fetch into")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let tmp = temp_beside(&local)?;
        Ok(Incoming {
            local,
            tmp,
            hasher: Checksum::Inline(Sha256::new()),
            len: 0,
            hole_at_end: false,
        })
    }

    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.hasher.update(chunk)?;
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
        let Incoming {
            local,
            tmp,
            hasher,
            len,
            hole_at_end,
        } = self;
        if hole_at_end {
            tmp.as_file()
                .set_len(len)
                .with_context(|| format!("cannot write {}", local.display()))?;
        }
        let sha256 = hasher.finish()?;
        check_against_listing(entry, streamed, &sha256)?;
        set_mode(tmp.as_file(), local_mode(entry))
            .with_context(|| format!("cannot write {}", local.display()))?;
        persist(tmp, &local)?;
        Ok(Fetched {
            bytes: streamed.bytes,
            sha256,
        })
    }
}

/// A temporary file in `local`'s folder (which exists), to be renamed to `local`.
fn temp_beside(local: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = local.parent().context("no folder to fetch into")?;
    tempfile::Builder::new()
        .prefix(".rigrun-fetch-")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))
}

/// Gives a received file its name, replacing what was there.
fn persist(tmp: tempfile::NamedTempFile, local: &Path) -> Result<()> {
    tmp.persist(local)
        .with_context(|| format!("cannot rename the download to {}", local.display()))?;
    Ok(())
}

/// The received file is the one listed: same size, unchanged while read (its length and
/// modification time after reading), and the host's checksum where it made one.
fn check_against_listing(entry: &Entry, streamed: &Streamed, sha256: &Sum) -> Result<()> {
    let bytes = streamed.bytes;
    if let Some(size) = entry.size.filter(|&s| s != bytes) {
        bail!("received {bytes} bytes, the host listed {size} (was it still being written?)");
    }
    let grew = streamed.len_after.is_some_and(|len| len != bytes);
    let touched = matches!((entry.modified, streamed.modified_after), (Some(a), Some(b)) if a != b);
    if grew || touched {
        bail!("it changed while it was being fetched (still being written?)");
    }
    if entry.sha256.as_ref().is_some_and(|listed| listed != sha256) {
        bail!("its checksum differs from the one the host listed (was it changed while fetching?)");
    }
    Ok(())
}

/// The sha256 of a file as it streams: computed in line, or on a thread that is handed copies
/// of the data in [`HASH_BUFFER`]-sized pieces.
enum Checksum {
    Inline(Sha256),
    Thread {
        pending: Vec<u8>,
        pieces: std::sync::mpsc::SyncSender<Vec<u8>>,
        done: std::thread::JoinHandle<Sha256>,
    },
}

impl Checksum {
    fn on_thread() -> Checksum {
        let (pieces, queue) = std::sync::mpsc::sync_channel::<Vec<u8>>(HASH_QUEUE);
        let done = std::thread::spawn(move || {
            let mut hasher = Sha256::new();
            for piece in queue {
                hasher.update(&piece);
            }
            hasher
        });
        Checksum::Thread {
            pending: Vec::with_capacity(HASH_BUFFER),
            pieces,
            done,
        }
    }

    fn update(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        match self {
            Checksum::Inline(hasher) => hasher.update(chunk),
            Checksum::Thread { pending, pieces, .. } => {
                pending.extend_from_slice(chunk);
                if pending.len() >= HASH_BUFFER {
                    let full = std::mem::replace(pending, Vec::with_capacity(HASH_BUFFER));
                    pieces
                        .send(full)
                        .map_err(|_| std::io::Error::other("the hashing thread ended"))?;
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<Sum> {
        let hasher = match self {
            Checksum::Inline(hasher) => hasher,
            Checksum::Thread {
                pending,
                pieces,
                done,
            } => {
                if !pending.is_empty() {
                    pieces
                        .send(pending)
                        .map_err(|_| anyhow::anyhow!("the hashing thread ended"))?;
                }
                drop(pieces);
                done.join()
                    .map_err(|_| anyhow::anyhow!("the hashing thread panicked"))?
            }
        };
        Ok(hasher.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(path: &str, data: &[u8]) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            kind: Kind::File,
            readable: true,
            target: Vec::new(),
            real_dir: Vec::new().into(),
            size: Some(data.len() as u64),
            modified: Some(7),
            mode: Some(0o644),
            sha256: Some(Sha256::digest(data).into()),
        }
    }

    fn streamed(data: &[u8]) -> Streamed {
        Streamed {
            bytes: data.len() as u64,
            len_after: Some(data.len() as u64),
            modified_after: Some(7),
        }
    }

    #[test]
    fn batches_end_at_their_file_count_or_byte_size() {
        let many: Vec<usize> = (0..BATCH_FILES * 2 + 1).collect();
        let cut: Vec<usize> = batches_of(&many, |_| 1).iter().map(|b| b.len()).collect();
        assert_eq!(cut, [BATCH_FILES, BATCH_FILES, 1]);
        // Files of 40% of the byte limit: two to a batch; one over the limit still goes alone.
        let sizes = [
            BATCH_BYTES * 2 / 5,
            BATCH_BYTES * 2 / 5,
            BATCH_BYTES * 2 / 5,
            BATCH_BYTES * 3,
            1,
        ];
        let cut: Vec<&[usize]> = batches_of(&[0, 1, 2, 3, 4], |i| sizes[i]);
        assert_eq!(cut, [&[0, 1][..], &[2], &[3], &[4]]);
    }

    #[test]
    fn a_checksum_on_its_thread_equals_one_in_line() {
        let data: Vec<u8> = (0..(HASH_BUFFER * 3 + 12345))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut threaded = Checksum::on_thread();
        for piece in data.chunks(100_000) {
            threaded.update(piece).unwrap();
        }
        assert_eq!(threaded.finish().unwrap(), <Sum>::from(Sha256::digest(&data)));
    }

    #[test]
    fn a_batch_writes_checked_files_replaces_old_ones_and_writes_nothing_that_differs() {
        let dir = tempfile::tempdir().unwrap();
        let (new, old, bad) = (
            dir.path().join("a/new.json"),
            dir.path().join("old.json"),
            dir.path().join("bad.json"),
        );
        std::fs::write(&old, "stale").unwrap();
        let entries = [
            listed("/h/new.json", b"{}"),
            listed("/h/old.json", b"[1]"),
            listed("/h/bad.json", b"ok"),
        ];
        let entries: Vec<&Entry> = entries.iter().collect();
        let mut sink = BatchSink {
            entries: &entries,
            rels: vec![
                Path::new("a/new.json"),
                Path::new("old.json"),
                Path::new("bad.json"),
            ],
            dest_root: dir.path(),
            data: Vec::new(),
            made: None,
            results: (0..3).map(|_| None).collect(),
        };
        for (index, data) in [b"{}".as_slice(), b"[1]", b"no"].into_iter().enumerate() {
            sink.begin(index).unwrap();
            sink.chunk(data).unwrap();
            sink.end(index, Ok(streamed(data)));
        }
        let results: Vec<Result<Fetched>> = sink.results.into_iter().map(Option::unwrap).collect();
        assert_eq!(std::fs::read(&new).unwrap(), b"{}");
        assert_eq!(std::fs::read(&old).unwrap(), b"[1]");
        assert_eq!(
            results[1].as_ref().unwrap().sha256,
            <Sum>::from(Sha256::digest(b"[1]"))
        );
        let why = format!("{:#}", results[2].as_ref().err().unwrap());
        assert!(why.contains("checksum differs"), "{why}");
        assert!(
            !bad.exists(),
            "a file that differs from the listing is not written"
        );
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["a", "old.json"], "no temporary file is left");
    }
}
