//! Reading the tar stream that `tar -c -H gnu` writes on a host, as it arrives: many small files
//! in one round trip instead of an SFTP exchange each.
//!
//! Ours rather than the `tar` crate because that one reads through a blocking `std::io::Read`
//! and we read an async channel chunk by chunk; and the subset is small and fixed, since rigrun
//! writes the command itself: 512-byte headers (name, octal size and time, type), data padded
//! to 512, GNU long names (`L` entries), pax `path` records should a tar write them, and the two
//! zero blocks at the end. Tested against the real GNU tar.

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt};

const BLOCK: usize = 512;
/// Largest long name accepted (`L` or pax `path`): longer is not a name a listing can hold.
const MAX_NAME: u64 = 64 << 10;
/// Bytes handed to the caller at a time.
const CHUNK: usize = 256 << 10;

/// One member of the archive.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The member's name as tar stored it (without a leading `/`).
    pub name: Vec<u8>,
    pub size: u64,
    /// Modification time, whole Unix seconds.
    pub modified: u64,
    /// Whether it is a regular file (type `0` or NUL); links and others carry no data to keep.
    pub regular: bool,
}

/// A tar stream read member by member.
pub struct TarReader<R> {
    inner: R,
    /// Data of the current member not yet read, and its padding.
    left: u64,
    padding: u64,
}

impl<R: AsyncRead + Unpin> TarReader<R> {
    pub fn new(inner: R) -> TarReader<R> {
        TarReader {
            inner,
            left: 0,
            padding: 0,
        }
    }

    /// The next member's header (the data of the previous one, if not read, is skipped); None
    /// at the end of the archive.
    pub async fn next(&mut self) -> Result<Option<Header>> {
        self.skip_rest().await?;
        let mut long_name: Option<Vec<u8>> = None;
        loop {
            let mut block = [0u8; BLOCK];
            if !self.read_block(&mut block).await? || block.iter().all(|&b| b == 0) {
                return Ok(None);
            }
            check_sum(&block)?;
            let size = octal(&block[124..136]).context("a tar header's size is not a number")?;
            let kind = block[156];
            match kind {
                b'L' | b'x' => {
                    if size > MAX_NAME {
                        bail!("a tar header's name is {size} bytes long");
                    }
                    let mut data = vec![0u8; size as usize];
                    self.inner.read_exact(&mut data).await?;
                    self.skip(padding(size)).await?;
                    long_name = match kind {
                        b'L' => Some(until_nul(&data).to_vec()),
                        _ => pax_path(&data).or(long_name),
                    };
                }
                b'g' => self.skip(size + padding(size)).await?,
                _ => {
                    let name = long_name.take().unwrap_or_else(|| short_name(&block));
                    self.left = size;
                    self.padding = padding(size);
                    return Ok(Some(Header {
                        name,
                        size,
                        modified: octal(&block[136..148]).unwrap_or(0),
                        regular: kind == b'0' || kind == 0,
                    }));
                }
            }
        }
    }

    /// Streams the current member's data to `on_chunk`, in chunks of up to 256 KiB.
    pub async fn read_data(&mut self, on_chunk: super::OnChunk<'_>) -> Result<u64> {
        let mut buf = vec![0u8; CHUNK.min(self.left as usize)];
        let mut total = 0;
        while self.left > 0 {
            let n = buf.len().min(self.left as usize);
            self.inner
                .read_exact(&mut buf[..n])
                .await
                .context("the tar stream ended inside a file")?;
            on_chunk(&buf[..n])?;
            self.left -= n as u64;
            total += n as u64;
        }
        Ok(total)
    }

    async fn skip_rest(&mut self) -> Result<()> {
        let rest = self.left + self.padding;
        (self.left, self.padding) = (0, 0);
        self.skip(rest).await
    }

    async fn skip(&mut self, mut n: u64) -> Result<()> {
        let mut buf = [0u8; 8192];
        while n > 0 {
            let take = buf.len().min(n as usize);
            self.inner
                .read_exact(&mut buf[..take])
                .await
                .context("the tar stream ended inside a file")?;
            n -= take as u64;
        }
        Ok(())
    }

    /// Reads one block; false when the stream ends cleanly before it.
    async fn read_block(&mut self, block: &mut [u8; BLOCK]) -> Result<bool> {
        let mut got = 0;
        while got < BLOCK {
            let n = self.inner.read(&mut block[got..]).await?;
            if n == 0 {
                if got == 0 {
                    return Ok(false);
                }
                bail!("the tar stream ended inside a header");
            }
            got += n;
        }
        Ok(true)
    }
}

fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

fn until_nul(bytes: &[u8]) -> &[u8] {
    bytes.split(|&b| b == 0).next().unwrap_or(bytes)
}

/// The ustar name: `prefix/name` when the prefix field is used.
fn short_name(block: &[u8; BLOCK]) -> Vec<u8> {
    let name = until_nul(&block[0..100]);
    let prefix = match &block[257..263] {
        b"ustar\0" => until_nul(&block[345..500]),
        _ => &[],
    };
    match prefix.is_empty() {
        true => name.to_vec(),
        false => [prefix, b"/", name].concat(),
    }
}

/// A number in a header field: octal digits (spaces and NULs around them), or GNU's base-256
/// for values too large for the field.
fn octal(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        return field[1..].iter().try_fold(u64::from(field[0] & 0x7f), |n, &b| {
            n.checked_mul(256).map(|n| n + u64::from(b))
        });
    }
    let text = std::str::from_utf8(field).ok()?;
    let digits = text.trim_matches(|c: char| c == ' ' || c == '\0');
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, 8).ok()
}

/// The header's checksum (the byte sum with the checksum field as spaces) matches: a stream
/// out of step, or not tar at all, is said at once rather than read as garbage.
fn check_sum(block: &[u8; BLOCK]) -> Result<()> {
    let stored = octal(&block[148..156]);
    let sum: u64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| if (148..156).contains(&i) { 32 } else { u64::from(b) })
        .sum();
    if stored != Some(sum) {
        bail!("a tar header's checksum is wrong: the stream is not a tar archive or lost its place");
    }
    Ok(())
}

/// The `path` record of a pax extended header (`LEN path=NAME\n`).
fn pax_path(data: &[u8]) -> Option<Vec<u8>> {
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
        let record = rest.get(space + 1..len)?;
        if let Some(name) = record.strip_prefix(b"path=") {
            return Some(name.strip_suffix(b"\n").unwrap_or(name).to_vec());
        }
        rest = &rest[len..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::process::Command;

    /// Archives `names` (relative to `dir`) with the real GNU tar, as the host command does.
    fn gnu_tar(dir: &std::path::Path, names: &[&[u8]]) -> Vec<u8> {
        let list: Vec<u8> = names.iter().flat_map(|n| [*n, b"\0"].concat()).collect();
        let list_file = dir.join(".list");
        std::fs::write(&list_file, list).unwrap();
        let out = Command::new("tar")
            .current_dir(dir)
            .args(["-c", "-f", "-", "-H", "gnu", "--no-recursion", "--null", "-T"])
            .arg(&list_file)
            .output()
            .expect("GNU tar (tar is part of every Debian system)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    async fn members(archive: &[u8]) -> Vec<(Header, Vec<u8>)> {
        let mut reader = TarReader::new(archive);
        let mut out = Vec::new();
        while let Some(header) = reader.next().await.unwrap() {
            let mut data = Vec::new();
            reader
                .read_data(&mut |c: &[u8]| {
                    data.extend_from_slice(c);
                    Ok(())
                })
                .await
                .unwrap();
            out.push((header, data));
        }
        out
    }

    #[tokio::test]
    async fn reads_what_gnu_tar_writes_long_odd_names_and_big_files_included() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!("{}.json", "n".repeat(180));
        let odd: &[u8] = b"line\nbreak \xff.json";
        let big: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("a.json"), b"{\"x\": 1}\n").unwrap();
        std::fs::write(dir.path().join(&long), b"").unwrap();
        std::fs::write(dir.path().join(std::ffi::OsStr::from_bytes(odd)), b"odd").unwrap();
        std::fs::write(dir.path().join("big.bin"), &big).unwrap();
        let archive = gnu_tar(dir.path(), &[b"a.json", long.as_bytes(), odd, b"big.bin"]);
        let got = members(&archive).await;
        let names: Vec<&[u8]> = got.iter().map(|(h, _)| h.name.as_slice()).collect();
        assert_eq!(names, [b"a.json".as_slice(), long.as_bytes(), odd, b"big.bin"]);
        assert_eq!(got[0].1, b"{\"x\": 1}\n");
        assert_eq!((got[1].0.size, got[1].1.len()), (0, 0));
        assert_eq!(got[2].1, b"odd");
        assert_eq!(got[3].1, big);
        assert!(got.iter().all(|(h, _)| h.regular));
        let mtime = std::fs::metadata(dir.path().join("a.json")).unwrap();
        let mtime = mtime
            .modified()
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        assert_eq!(got[0].0.modified, mtime.as_secs());
    }

    #[tokio::test]
    async fn unread_data_is_skipped_and_links_are_not_regular() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![7u8; 1000]).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("l")).unwrap();
        std::fs::write(dir.path().join("b"), b"b").unwrap();
        let archive = gnu_tar(dir.path(), &[b"a", b"l", b"b"]);
        let mut reader = TarReader::new(archive.as_slice());
        assert_eq!(reader.next().await.unwrap().unwrap().size, 1000);
        let link = reader.next().await.unwrap().unwrap();
        assert_eq!((link.name.as_slice(), link.regular), (b"l".as_slice(), false));
        let b = reader.next().await.unwrap().unwrap();
        assert_eq!(b.name, b"b");
        assert_eq!(reader.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_stream_cut_short_or_not_tar_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 5000]).unwrap();
        let archive = gnu_tar(dir.path(), &[b"a"]);
        let mut reader = TarReader::new(&archive[..2048]);
        reader.next().await.unwrap().unwrap();
        let err = reader.read_data(&mut |_: &[u8]| Ok(())).await.unwrap_err();
        assert!(format!("{err:#}").contains("ended inside a file"), "{err:#}");
        let mut garbage = TarReader::new([b'x'; 1024].as_slice());
        let err = garbage.next().await.unwrap_err();
        assert!(format!("{err:#}").contains("not a tar archive"), "{err:#}");
        assert_eq!(TarReader::new([].as_slice()).next().await.unwrap(), None);
    }

    #[test]
    fn numbers_and_pax_paths() {
        assert_eq!(octal(b"0000644\0"), Some(0o644));
        assert_eq!(octal(b"   12 \0"), Some(0o12));
        assert_eq!(octal(&[0x80, 0, 0, 0, 0, 0, 0, 1, 0]), Some(256));
        assert_eq!(octal(b"abc"), None);
        assert_eq!(
            pax_path(b"11 path=ab\n20 mtime=1700000000\n"),
            Some(b"ab".to_vec())
        );
        assert_eq!(pax_path(b"20 mtime=1700000000\n"), None);
    }
}
