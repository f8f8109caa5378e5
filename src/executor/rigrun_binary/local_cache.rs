//! What is known of a local binary, computed once per binary rather than once per run: its
//! sha256 and [`Binary`] facts, kept under the cache folder keyed by the file's path, size and
//! modification time; and its gzip-compressed copy, keyed by content. A cache folder that
//! cannot be written costs only speed.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::elf::{self, Binary};

/// Compressed copies kept: every rebuild makes one, and a developer rebuilds often.
const KEEP_COMPRESSED: usize = 4;
/// What is known of binaries, kept (a few hundred bytes each).
const KEEP_KNOWN: usize = 256;

/// rigrun's cache folder: `$XDG_CACHE_HOME/rigrun`, else `~/.cache/rigrun`.
pub fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("rigrun"))
}

/// A local binary, known: where it is, its sha256 and what it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Known {
    pub sha256: String,
    pub binary: Binary,
}

/// `path`'s sha256 and facts: read from the `cache` folder when the file is unchanged since,
/// else computed (streaming: memory flat in the file's size) and kept there.
pub fn known(path: &Path, cache: Option<&Path>) -> Result<Known> {
    let entry = cache.map(|dir| dir.join("binaries").join(format!("{}.json", file_key(path))));
    if let Some(known) = entry.as_deref().and_then(read_entry) {
        return Ok(known);
    }
    let known = Known {
        sha256: sha256_of(path)?,
        binary: elf::inspect(path)?,
    };
    if let Some(entry) = entry {
        match write_atomic(&entry, &serde_json::to_vec(&known)?) {
            Ok(()) => prune(entry.parent().unwrap_or(Path::new(".")), "json", KEEP_KNOWN),
            Err(e) => tracing::info!(
                "cannot keep what is known of {} in {}: {e:#}",
                path.display(),
                entry.display()
            ),
        }
    }
    Ok(known)
}

/// A name for the file as it is now: its path, inode, size and modification time (a rebuild
/// changes the last two).
fn file_key(path: &Path) -> String {
    let meta = std::fs::metadata(path).ok();
    let stamp = meta.map(|m| (m.ino(), m.len(), m.mtime(), m.mtime_nsec()));
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut hash = Sha256::new();
    hash.update(canonical.as_os_str().as_encoded_bytes());
    hash.update(format!("{stamp:?}"));
    hex::encode(&hash.finalize()[..16])
}

fn read_entry(path: &Path) -> Option<Known> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The sha256 of a file, read in blocks.
pub fn sha256_of(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hash = Sha256::new();
    let mut block = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            return Ok(hex::encode(hash.finalize()));
        }
        hash.update(&block[..n]);
    }
}

/// A gzip-compressed copy of `path` (whose sha256 is `sha256`): the cached one when there is
/// one, else made, streaming. In the `cache` folder, or a temporary file when there is none.
pub fn compressed(path: &Path, sha256: &str, cache: Option<&Path>) -> Result<Compressed> {
    let kept = cache.map(|dir| dir.join("binaries").join(format!("{sha256}.gz")));
    if let Some(kept) = kept.as_ref().filter(|p| p.is_file()) {
        // Used now: pruning keeps the copies in use.
        let _ = std::fs::File::open(kept).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        return Ok(Compressed::Kept(kept.clone()));
    }
    let dir = kept.as_deref().and_then(Path::parent);
    if let Some((dir, kept)) = dir.zip(kept.as_ref()) {
        if std::fs::create_dir_all(dir).is_ok() {
            if let Ok(tmp) = tempfile::NamedTempFile::new_in(dir) {
                gzip(path, tmp.as_file())?;
                if tmp.persist(kept).is_ok() {
                    prune(dir, "gz", KEEP_COMPRESSED);
                    return Ok(Compressed::Kept(kept.clone()));
                }
            }
        }
    }
    let tmp = tempfile::NamedTempFile::new().context("cannot make a temporary file")?;
    gzip(path, tmp.as_file())?;
    Ok(Compressed::Temporary(tmp))
}

/// Where a compressed copy is.
pub enum Compressed {
    Kept(PathBuf),
    Temporary(tempfile::NamedTempFile),
}

impl Compressed {
    pub fn path(&self) -> &Path {
        match self {
            Compressed::Kept(path) => path,
            Compressed::Temporary(tmp) => tmp.path(),
        }
    }
}

/// gzip at a fast level: a binary halves or better, and the copy is made once per build.
fn gzip(path: &Path, out: &std::fs::File) -> Result<()> {
    let mut input = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut encoder =
        flate2::write::GzEncoder::new(std::io::BufWriter::new(out), flate2::Compression::new(3));
    std::io::copy(&mut input, &mut encoder).with_context(|| format!("cannot compress {}", path.display()))?;
    encoder.finish()?.flush()?;
    Ok(())
}

/// Removes all but the `keep` newest `*.ext` files in `dir`.
fn prune(dir: &Path, ext: &str, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    files.sort_by_key(|file| std::cmp::Reverse(file.0));
    for (_, old) in files.into_iter().skip(keep) {
        let _ = std::fs::remove_file(old);
    }
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().context("no parent folder")?;
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    tmp.persist(path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_copy_decompresses_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        let data: Vec<u8> = (0..300_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        std::fs::write(&path, &data).unwrap();
        let sha = sha256_of(&path).unwrap();
        assert_eq!(sha, hex::encode(Sha256::digest(&data)));
        let copy = compressed(&path, &sha, Some(dir.path())).unwrap();
        assert!(matches!(copy, Compressed::Kept(_)));
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(copy.path()).unwrap())
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == data);
    }

    #[test]
    fn what_is_known_is_kept_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let first = known(&exe, Some(dir.path())).unwrap();
        let entries = std::fs::read_dir(dir.path().join("binaries")).unwrap().count();
        assert_eq!(entries, 1);
        assert_eq!(known(&exe, Some(dir.path())).unwrap(), first);
        assert_eq!(known(&exe, None).unwrap(), first);
    }

    #[test]
    fn keeps_only_the_newest_copies() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..6u64 {
            let file = std::fs::File::create(dir.path().join(format!("{i}.gz"))).unwrap();
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + i);
            file.set_modified(at).unwrap();
        }
        std::fs::write(dir.path().join("other.json"), b"{}").unwrap();
        prune(dir.path(), "gz", 4);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["2.gz", "3.gz", "4.gz", "5.gz", "other.json"]);
    }

    #[test]
    fn a_changed_file_has_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        std::fs::write(&path, b"one").unwrap();
        let before = file_key(&path);
        assert_eq!(before, file_key(&path));
        std::fs::write(&path, b"two and more").unwrap();
        assert_ne!(before, file_key(&path));
    }
}
