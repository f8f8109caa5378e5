//! The listing protocol: one shell command lists every match of the glob (type, readability,
//! name, resolved directory, link target, size, modification time, mode, sha256) as
//! NUL-separated fields, read back here into a [`Listing`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::names::{escape, escaped, natural_cmp, quote_glob, static_prefix};
use crate::config::template::shell_quote;
use crate::events::Stream;
use crate::steps::HostCtx;
use crate::transport::Output;

/// Files up to this size are hashed on the host while listing. Larger ones are not: that would
/// read them twice there (sha256sum runs at a few hundred MB/s); the SSH channel authenticates
/// every byte, their size and modification time are checked after streaming, and the sha256
/// computed here as they stream is recorded.
pub(super) const HOST_HASH_LIMIT: u64 = 64 << 20;

/// A sha256, as bytes: a listing holds one per file.
pub(super) type Sum = [u8; 32];

/// What the host said about one match of the glob.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub(super) path: Vec<u8>,
    pub(super) kind: Kind,
    /// `test -r` on the host (links: their target).
    pub(super) readable: bool,
    /// Where a symbolic link resolves to (`readlink -f`); empty for other kinds.
    pub(super) target: Vec<u8>,
    /// The entry's directory with every link resolved (`pwd -P`); empty when it cannot be entered.
    /// Shared by the entries of one directory.
    pub(super) real_dir: Arc<[u8]>,
    pub(super) size: Option<u64>,
    /// Modification time, whole Unix seconds.
    pub(super) modified: Option<u64>,
    /// Permission bits on the host (a link followed: its target's); the fetched file gets them
    /// (see `receive::local_mode`).
    pub(super) mode: Option<u32>,
    /// Listed for files up to [`HOST_HASH_LIMIT`].
    pub(super) sha256: Option<Sum>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    File,
    /// A symbolic link to a regular file.
    LinkToFile,
    /// A symbolic link to anything else (a directory, nothing).
    Link,
    Dir,
    /// A FIFO, socket or device.
    Other,
}

/// The host's answer to the listing command.
#[derive(Debug)]
pub(super) struct Listing {
    /// The glob's directory with every link resolved: nothing outside it is fetched.
    pub(super) base: Vec<u8>,
    pub(super) has_sha256: bool,
    pub(super) entries: Vec<Entry>,
}

/// Lists the glob's matches in one command: see [`listing_command`].
pub(super) async fn list(ctx: &HostCtx, pattern: &str, follow: bool) -> Result<Listing> {
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = ctx
        .transport
        .exec_output(&listing_command(pattern, follow), &mut |stream, output| {
            let into = match stream {
                Stream::Stdout => &mut stdout,
                Stream::Stderr => &mut stderr,
            };
            match output {
                Output::Line(line) => {
                    into.extend_from_slice(line);
                    into.push(b'\n');
                }
                Output::Long { piece, last, .. } => {
                    into.extend_from_slice(piece);
                    if last {
                        into.push(b'\n');
                    }
                }
            }
        })
        .await?;
    if code != 0 {
        bail!(
            "cannot list {pattern} on {} (exit code {code}): {}; fetch-results needs sh, find and mktemp there",
            ctx.host,
            String::from_utf8_lossy(&stderr).trim()
        );
    }
    let cannot = || format!("cannot read the file list from {}", ctx.host);
    let mut listing = parse_listing(listing_bytes(&stdout).with_context(cannot)?).with_context(cannot)?;
    // What the host printed is read: let it go before sorting, which is the step's peak.
    drop((stdout, stderr));
    // Names compared as shown; most need no escaping, so nothing is copied.
    (listing.entries).sort_by(|a, b| natural_cmp(&escaped(&a.path), &escaped(&b.path)));
    Ok(listing)
}

/// One shell command listing the glob: the glob's directory resolved, whether `sha256sum` exists,
/// then per match its type (`find -printf %y%Y`), readability, name and directory; each such
/// directory resolved (`pwd -P`); each link's target (`readlink -f`); then the sizes and
/// modification times (`find -printf`) and checksums (`sha256sum`, up to four at once, files up
/// to [`HOST_HASH_LIMIT`]) of the files to fetch. `find` goes over all the names at once; only
/// the directories and the links, which are few, cost a command each.
/// Fields are NUL-separated (names are any bytes, newlines included: the lines the channel cuts
/// the output into are joined again), after a [`LISTING_START`] line, and the list ends with a
/// newline of its own, so that every byte of it is inside a whole line.
fn listing_command(pattern: &str, follow: bool) -> String {
    let base = static_prefix(pattern);
    let base = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        &base
    };
    LISTING_SCRIPT
        .replace("@BASE@", &shell_quote(&base.display().to_string()))
        .replace("@GLOB@", &quote_glob(pattern))
        .replace("@FOLLOW@", if follow { "1" } else { "0" })
        .replace("@HASHC@", &(HOST_HASH_LIMIT + 1).to_string())
}

/// The line the listing starts with.
const LISTING_START: &str = "__rigrun_listing__";

/// One `find` goes over all the matches (as many as `xargs` needs; the glob's matches are
/// anchored, `/` or `./`, so none is taken for an expression) and prints each one's type
/// (`%y%Y`: its own, then what a link points to), readability, name, directory, size and
/// modification time, and writes aside, one file per `find`, the directories, the links and the
/// regular files to hash. The directories are then resolved, and the links, which are few, one
/// by one; links to files inside the glob's directory are followed when asked (`$D/f`). The
/// checksums come from up to four `sha256sum`s at once, each into a file of its own.
const LISTING_SCRIPT: &str = r#"printf '%s\n' __rigrun_listing__
B=$(cd -- @BASE@ 2>/dev/null && pwd -P); P=${B%/}/; [ -n "$B" ] || P=//none/
D=$(mktemp -d) || exit 1
trap 'rm -rf "$D"' EXIT
{
printf '%s\0' "$B"
if command -v sha256sum >/dev/null 2>&1; then printf '1\0'; else printf '0\0'; fi
printf '%s\0' @GLOB@ | xargs -0 -r sh -c 'exec find -P "$@" -maxdepth 0 \
  \( -readable -printf "%y%Y\0r\0" -o -printf "%y%Y\0-\0" \) -printf "%p\0%h\0%s\0%T@\0%m\0" \
  -fprintf "$0/d.$$" "d%h\0" \
  \( -type l -fprint0 "$0/l.$$" -o -type f -size -@HASHC@c -fprint0 "$0/h.$$" -o -true \)' "$D" 2>/dev/null
printf '\0'
cat "$D"/d.* 2>/dev/null | sort -zu |
  xargs -0 -r sh -c 'for d; do d=${d#d}; printf "d%s\0%s\0" "$d" "$(cd -- "${d:-/}" 2>/dev/null && pwd -P)"; done' sh
printf '\0'
cat "$D"/l.* 2>/dev/null |
  xargs -0 -r sh -c 'for f; do r=$(readlink -f -- "$f" && printf x); r=${r%??}; printf "%s\0%s\0" "$f" "$r"
    case "$r" in "$0"*) [ @FOLLOW@ = 1 ] && [ -f "$f" ] && printf "%s\0" "$f" >&3 ;; esac; done' "$P" 3>"$D/f"
printf '\0'
xargs -0 -r sh -c 'exec find -L "$@" -maxdepth 0 -printf "%s\0%T@\0%m\0%p\0"' sh < "$D/f" 2>/dev/null
printf '\0'
xargs -0 -r sh -c 'exec find -L "$@" -maxdepth 0 -size -@HASHC@c -print0' sh < "$D/f" 2>/dev/null >> "$D/h.links"
cat "$D"/h.* 2>/dev/null | xargs -0 -r -P 4 -n 2500 sh -c 'exec sha256sum -- "$@" > "$0/s.$$" 2>/dev/null' "$D"
cat "$D"/s.* 2>/dev/null | tr '\n' '\0'
printf '\n'
}"#;

/// The listing's bytes from what the command printed: after the [`LISTING_START`] line, up to
/// the newline the list ends with.
fn listing_bytes(stdout: &[u8]) -> Result<&[u8]> {
    let start = format!("{LISTING_START}\n");
    let at =
        memchr::memmem::find(stdout, start.as_bytes()).context("the list did not start (no start line)")?;
    let list = &stdout[at + start.len()..];
    list.strip_suffix(b"\n")
        .context("the list was cut short (no end)")
}

/// The next NUL-separated field of the listing.
fn field<'a>(fields: &mut impl Iterator<Item = &'a [u8]>) -> Result<&'a [u8]> {
    fields.next().context("the list ended early")
}

/// Reads the fields [`listing_command`] prints back into a [`Listing`].
fn parse_listing(raw: &[u8]) -> Result<Listing> {
    let mut fields = raw.split(|&b| b == 0);
    let base = field(&mut fields)?.to_vec();
    let has_sha256 = field(&mut fields)? == b"1";
    let mut entries = Vec::new();
    let mut dirs = Vec::new();
    loop {
        let tag = field(&mut fields)?;
        if tag.is_empty() {
            break;
        }
        let kind = kind(tag)?;
        let readable = field(&mut fields)? == b"r";
        let path = field(&mut fields)?.to_vec();
        dirs.push(field(&mut fields)?);
        let (size, modified) = size_and_time(field(&mut fields)?, field(&mut fields)?)?;
        let mode = octal_mode(field(&mut fields)?)?;
        let known = kind == Kind::File;
        entries.push(Entry {
            kind,
            readable,
            path,
            target: Vec::new(),
            real_dir: Arc::from(&[][..]),
            size: known.then_some(size),
            modified: modified.filter(|_| known),
            mode: Some(mode).filter(|_| known),
            sha256: None,
        });
    }
    let mut real_dirs: HashMap<&[u8], Arc<[u8]>> = HashMap::new();
    loop {
        let dir = field(&mut fields)?;
        let Some(dir) = dir.strip_prefix(b"d") else { break };
        real_dirs.insert(dir, Arc::from(field(&mut fields)?));
    }
    let mut targets = HashMap::new();
    loop {
        let link = field(&mut fields)?;
        if link.is_empty() {
            break;
        }
        targets.insert(link, field(&mut fields)?);
    }
    // The links followed: their targets' sizes and times.
    let mut followed = HashMap::new();
    loop {
        let size = field(&mut fields)?;
        if size.is_empty() {
            break;
        }
        let (size, modified) = size_and_time(size, field(&mut fields)?)?;
        let mode = octal_mode(field(&mut fields)?)?;
        followed.insert(field(&mut fields)?, (size, modified, mode));
    }
    let mut sums: HashMap<Cow<[u8]>, Sum> = fields.filter_map(parse_sum_line).collect();
    for (entry, dir) in entries.iter_mut().zip(dirs) {
        if let Some(real_dir) = real_dirs.get(dir) {
            entry.real_dir = real_dir.clone();
        }
        entry.target = targets
            .get(&entry.path[..])
            .map(|t| t.to_vec())
            .unwrap_or_default();
        if let Some(&(size, modified, mode)) = followed.get(&entry.path[..]) {
            (entry.size, entry.modified, entry.mode) = (Some(size), modified, Some(mode));
        }
        entry.sha256 = sums.remove(&entry.path[..]);
    }
    entries.shrink_to_fit();
    Ok(Listing {
        base,
        has_sha256,
        entries,
    })
}

/// A size in bytes and a modification time in whole seconds, from `find -printf "%s\0%T@\0"`.
fn size_and_time(size: &[u8], modified: &[u8]) -> Result<(u64, Option<u64>)> {
    let size: u64 = std::str::from_utf8(size)?.parse()?;
    let modified = std::str::from_utf8(modified)?;
    Ok((size, modified.split('.').next().and_then(|s| s.parse().ok())))
}

/// Permission bits from `find -printf %m` (octal).
fn octal_mode(field: &[u8]) -> Result<u32> {
    let text = std::str::from_utf8(field)?;
    u32::from_str_radix(text, 8).with_context(|| format!("`{text}` is not a file mode"))
}

/// A match's type from `find -printf %y%Y`: its own, then what a link points to.
fn kind(tag: &[u8]) -> Result<Kind> {
    Ok(match tag {
        [b'f', _] => Kind::File,
        [b'l', b'f'] => Kind::LinkToFile,
        [b'l', _] => Kind::Link,
        [b'd', _] => Kind::Dir,
        [_, _] => Kind::Other,
        _ => bail!("unknown file type `{}`", escape(tag)),
    })
}

/// One `sha256sum` line: `HASH  NAME`, or `\HASH  NAME` with `\\`, `\n` and `\r` escaped in NAME.
fn parse_sum_line(line: &[u8]) -> Option<(Cow<'_, [u8]>, Sum)> {
    let (escaped, line) = match line.strip_prefix(b"\\") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let mut hash = [0u8; 32];
    hex::decode_to_slice(line.get(..64)?, &mut hash).ok()?;
    let name = line.get(66..)?;
    let name = match escaped {
        true => Cow::Owned(unescape_sum(name)),
        false => Cow::Borrowed(name),
    };
    Some((name, hash))
}

fn unescape_sum(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    let mut bytes = name.iter();
    while let Some(&b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match bytes.next() {
            Some(b'n') => out.push(b'\n'),
            Some(b'r') => out.push(b'\r'),
            Some(&other) => out.push(other),
            None => out.push(b'\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::fs::File;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;

    use sha2::Digest;

    use super::*;

    #[test]
    fn checksum_lines_are_read_escaped_or_not() {
        let hash = "ab".repeat(32);
        let plain = format!("{hash}  /r/a b.json");
        let read = |line: &str| parse_sum_line(line.as_bytes()).map(|(name, sum)| (name.to_vec(), sum));
        assert_eq!(read(&plain), Some((b"/r/a b.json".to_vec(), [0xab; 32])));
        let escaped = format!("\\{}  /r/a\\nb\\\\c", hash.to_uppercase());
        assert_eq!(read(&escaped), Some((b"/r/a\nb\\c".to_vec(), [0xab; 32])));
        assert_eq!(parse_sum_line(b"garbage"), None);
    }

    /// The listing script itself, run by `sh` on real files with awkward names and modes.
    #[test]
    fn the_listing_reports_every_match_in_one_command() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let r = root.join("r");
        std::fs::create_dir(&r).unwrap();
        std::fs::write(r.join("a.json"), "{}").unwrap();
        let mode = |m| std::fs::Permissions::from_mode(m);
        std::fs::set_permissions(r.join("a.json"), mode(0o4751)).unwrap();
        std::fs::write(r.join(OsStr::from_bytes(b"n\nl\xff.json")), "x").unwrap();
        std::fs::create_dir(r.join("d.json")).unwrap();
        std::os::unix::fs::symlink(r.join("a.json"), r.join("in.json")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", r.join("out.json")).unwrap();
        let big = File::create(r.join("big.json")).unwrap();
        big.set_len(HOST_HASH_LIMIT + 1).unwrap();
        let pattern = format!("{}/*.json", r.display());
        for follow in [false, true] {
            let out = std::process::Command::new("sh")
                .args(["-c", &listing_command(&pattern, follow)])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            // What a login shell printed first, even without a newline, is not read as the list.
            let printed = [b"Welcome\n00 ff".as_slice(), &out.stdout].concat();
            let listing = parse_listing(listing_bytes(&printed).unwrap()).unwrap();
            assert_eq!(listing.base, r.as_os_str().as_bytes());
            let by_name = |name: &[u8]| {
                let mut path = r.as_os_str().as_bytes().to_vec();
                path.push(b'/');
                path.extend_from_slice(name);
                listing.entries.iter().find(|e| e.path == path).unwrap().clone()
            };
            let a = by_name(b"a.json");
            assert_eq!((a.kind, a.size, a.mode), (Kind::File, Some(2), Some(0o4751)));
            assert_eq!(a.sha256, Some(sha2::Sha256::digest(b"{}").into()));
            let odd = by_name(b"n\nl\xff.json");
            assert_eq!((odd.kind, odd.size), (Kind::File, Some(1)));
            assert!(odd.sha256.is_some(), "a newline in a name loses its checksum");
            assert_eq!(by_name(b"d.json").kind, Kind::Dir);
            let inner = by_name(b"in.json");
            assert_eq!(inner.kind, Kind::LinkToFile);
            assert_eq!(
                inner.mode,
                follow.then_some(0o4751),
                "a followed link: its target's mode"
            );
            assert_eq!(
                inner.sha256.is_some(),
                follow,
                "inner links are hashed only when followed"
            );
            let outer = by_name(b"out.json");
            assert_eq!(outer.target, b"/etc/passwd");
            assert_eq!(outer.sha256, None, "a link outside is never read");
        }
    }
}
