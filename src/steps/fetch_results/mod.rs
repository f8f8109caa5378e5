//! `fetch-results`: download the files matching a glob on the host into `hosts/<host>/fetched/`,
//! and nowhere else. One command lists every match (type, size, sha256) in one round trip; the
//! files then stream to disk (small ones in batches through one `tar`, see `receive.rs`), hashed
//! as they stream, each under a temporary name renamed once it matches the listing. A file that cannot be fetched is listed with why and
//! the others are still fetched; links are followed only when asked, and only inside the glob's
//! directory. JSON result files become records (a `vllm bench serve --save-result` file works
//! unchanged).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use indexmap::IndexMap;
use serde_json::{json, Value as Json};

mod receive;

use super::{HostCtx, StepOutcome};
use crate::config::steps::fetch_results::FetchResultsPlan;
use crate::config::template::shell_quote;
use crate::events::{Event, RecordStatus, Stream};
use crate::plan::PlannedStep;
use crate::transport::Output;

/// Fetched files up to this size are read back to become records; larger ones are not results.
const MAX_RECORD_FILE: u64 = 64 << 20;
/// Files up to this size are hashed on the host while listing. Larger ones are not: that would
/// read them twice there (sha256sum runs at a few hundred MB/s); the SSH channel authenticates
/// every byte, their size and modification time are checked after streaming, and the sha256
/// computed here as they stream is recorded.
const HOST_HASH_LIMIT: u64 = 64 << 20;
/// Failures named in the step's error; the rest are in its details.
const FAILURES_SHOWN: usize = 5;

/// What the host said about one match of the glob.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    path: Vec<u8>,
    kind: Kind,
    /// `test -r` on the host (links: their target).
    readable: bool,
    /// Where a symbolic link resolves to (`readlink -f`); empty for other kinds.
    target: Vec<u8>,
    /// The entry's directory with every link resolved (`pwd -P`); empty when it cannot be entered.
    real_dir: Vec<u8>,
    size: Option<u64>,
    /// Modification time, whole Unix seconds.
    modified: Option<u64>,
    /// Permission bits on the host (a link followed: its target's); the fetched file gets them
    /// (see `receive::local_mode`).
    mode: Option<u32>,
    /// Listed for files up to [`HOST_HASH_LIMIT`].
    sha256: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
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
struct Listing {
    /// The glob's directory with every link resolved: nothing outside it is fetched.
    base: Vec<u8>,
    has_sha256: bool,
    entries: Vec<Entry>,
}

/// What is done with one entry, and why not when it is not fetched.
#[derive(Debug, PartialEq)]
enum Verdict {
    Fetch,
    /// Not fetched by design (directories, links); listed, the step stays ok.
    Skip(String),
    /// Should have been fetched and could not be; the step fails after fetching the rest.
    Fail(String),
}

pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, plan: &FetchResultsPlan) -> Result<StepOutcome> {
    let pattern = anchored(&ctx.resolve(&plan.src));
    // The tar for small files starts with the listing: its shell's start-up overlaps it.
    let (listing, tar) = tokio::join!(
        list(ctx, &pattern, plan.follow_symlinks),
        ctx.transport.start_tar()
    );
    let listing = listing?;
    if listing.entries.is_empty() {
        return Ok(StepOutcome::failed(
            format!(
                "no file on {} matches {pattern} (did the command write its results there?)",
                ctx.host
            ),
            json!({ "src": pattern, "files": [] }),
        ));
    }
    // hosts/<host>/fetched/, or hosts/<host>/<variant>/fetched/ for a server variant.
    let dest_root = ctx.variant_dir().join("fetched");
    let mut report = Report::default();
    let wanted = classify(
        ctx,
        step,
        &listing,
        &static_prefix(&pattern),
        plan.follow_symlinks,
        &mut report,
    );
    let results = receive::fetch_all(&ctx.transport, &wanted, &dest_root, tar.ok()).await;
    for ((entry, rel), result) in wanted.iter().zip(results) {
        match result {
            Ok(fetched) => report.fetched(ctx, step, plan.records, entry, rel, fetched),
            Err(e) => report.note(ctx, step, entry, Verdict::Fail(format!("{e:#}"))),
        }
    }
    Ok(report.outcome(ctx, &pattern))
}

/// The entries to fetch with their local names; the others go to the report with why.
fn classify<'a>(
    ctx: &HostCtx,
    step: &PlannedStep,
    listing: &'a Listing,
    base: &Path,
    follow: bool,
    report: &mut Report,
) -> Vec<(&'a Entry, PathBuf)> {
    let mut wanted = Vec::new();
    for entry in &listing.entries {
        let verdict = match verdict(entry, listing, follow) {
            Verdict::Fetch => local_name(&entry.path, base).map_or_else(Verdict::Fail, |rel| {
                wanted.push((entry, rel));
                Verdict::Fetch
            }),
            other => other,
        };
        report.note(ctx, step, entry, verdict);
    }
    wanted
}

/// Relative globs are anchored with `./`, so that no listed name can start with `-`.
fn anchored(pattern: &str) -> String {
    if pattern.starts_with('/') || pattern.starts_with("./") {
        pattern.to_string()
    } else {
        format!("./{pattern}")
    }
}

/// Decides what happens to one listed entry.
fn verdict(entry: &Entry, listing: &Listing, follow: bool) -> Verdict {
    let base = escape(&listing.base);
    let target = escape(&entry.target);
    let in_base = entry.real_dir == listing.base || inside(&entry.real_dir, &listing.base);
    match entry.kind {
        _ if !in_base => Verdict::Skip(format!(
            "its directory resolves outside {base} (a link to a directory): never followed"
        )),
        Kind::Dir => Verdict::Skip("a directory: fetch-results fetches files (match the files inside it, e.g. dir/*.json)".into()),
        Kind::Other => Verdict::Fail("not a regular file (a FIFO, socket or device): it cannot be fetched".into()),
        Kind::Link | Kind::LinkToFile if !follow => Verdict::Skip(format!(
            "a symbolic link to {target}: not followed (follow_symlinks: true fetches links that stay inside {base})"
        )),
        Kind::Link | Kind::LinkToFile if !inside(&entry.target, &listing.base) => Verdict::Skip(format!(
            "a symbolic link to {target}, outside {base}: never followed"
        )),
        Kind::Link => Verdict::Skip(format!("a symbolic link to {target}, which is not a regular file")),
        _ if !entry.readable => Verdict::Fail(
            "not readable by the login user (permission denied): fix its mode or log in as its owner".into(),
        ),
        _ if listing.has_sha256 && entry.sha256.is_none() && entry.size.is_none_or(|s| s <= HOST_HASH_LIMIT) => Verdict::Fail(
            "the host could not read it to checksum it (removed or changed while listing?)".into(),
        ),
        _ => Verdict::Fetch,
    }
}

/// Whether `path` lies under the directory `dir` (both resolved, as bytes).
fn inside(path: &[u8], dir: &[u8]) -> bool {
    let mut prefix = dir.to_vec();
    if !prefix.ends_with(b"/") {
        prefix.push(b'/');
    }
    !dir.is_empty() && path.len() > prefix.len() && path.starts_with(&prefix)
}

/// What the step reports: files fetched, skipped and failed, in listing order.
#[derive(Default)]
struct Report {
    files: Vec<Json>,
    skipped: Vec<Json>,
    failed: Vec<Json>,
    /// Failures as `name (reason)`, for the step's error.
    failures: Vec<String>,
}

impl Report {
    /// Records a file that is not fetched (skipped or failed) and says so on the live display.
    fn note(&mut self, ctx: &HostCtx, step: &PlannedStep, entry: &Entry, verdict: Verdict) {
        let remote = escape(&entry.path);
        let (list, word, reason) = match verdict {
            Verdict::Fetch => return,
            Verdict::Skip(reason) => (&mut self.skipped, "skipped", reason),
            Verdict::Fail(reason) => {
                self.failures.push(format!("{remote} ({reason})"));
                (&mut self.failed, "not fetched", reason)
            }
        };
        list.push(json!({ "remote": remote, "reason": reason }));
        ctx.emit(Event::Output {
            host: ctx.host.clone(),
            label: step.name.clone(),
            stream: Stream::Stderr,
            line: format!("{word}: {remote}: {reason}"),
        });
    }

    fn fetched(
        &mut self,
        ctx: &HostCtx,
        step: &PlannedStep,
        records: bool,
        entry: &Entry,
        rel: &Path,
        file: receive::Fetched,
    ) {
        let count = if records && file.bytes <= MAX_RECORD_FILE {
            std::fs::read(&file.local).map_or(0, |data| record_file(ctx, step, rel, &data))
        } else {
            0
        };
        let remote = escape(&entry.path);
        let mut item = json!({
            "remote": remote,
            "local": file.local.strip_prefix(&ctx.run_dir).unwrap_or(&file.local).display().to_string(),
            "bytes": file.bytes,
            "sha256": file.sha256,
            "records": count,
            // What the received bytes were checked against (see HOST_HASH_LIMIT).
            "verified": if entry.sha256.is_some() { "sha256 from the host" } else { "size and modification time" },
        });
        if remote.as_bytes() != entry.path {
            item["escaped"] = json!(true);
        }
        self.files.push(item);
    }

    /// Ok when every file that should have been fetched was; failed (after fetching the rest)
    /// otherwise, naming the files and why.
    fn outcome(self, ctx: &HostCtx, pattern: &str) -> StepOutcome {
        let details = json!({
            "src": pattern, "files": self.files, "skipped": self.skipped, "failed": self.failed,
        });
        let (fetched, skipped) = (self.files.len(), self.skipped.len());
        if self.failures.is_empty() && fetched > 0 {
            return StepOutcome::ok(details);
        }
        let mut error = if self.failures.is_empty() {
            format!(
                "nothing fetched from {}: the {skipped} matches of {pattern} were all skipped",
                ctx.host
            )
        } else {
            format!(
                "{} of the files matching {pattern} on {} could not be fetched: {}",
                self.failures.len(),
                ctx.host,
                self.failures[..self.failures.len().min(FAILURES_SHOWN)].join("; ")
            )
        };
        if self.failures.len() > FAILURES_SHOWN {
            let _ = write!(
                error,
                "; {} more in run.json",
                self.failures.len() - FAILURES_SHOWN
            );
        }
        let _ = write!(
            error,
            " — {fetched} fetched into hosts/{}/fetched/, {skipped} skipped",
            ctx.host
        );
        StepOutcome::failed(error, details)
    }
}

/// Lists the glob's matches in one command: see [`listing_command`].
async fn list(ctx: &HostCtx, pattern: &str, follow: bool) -> Result<Listing> {
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
    let raw =
        listing_bytes(&stdout).with_context(|| format!("cannot read the file list from {}", ctx.host))?;
    let mut listing =
        parse_listing(raw).with_context(|| format!("cannot read the file list from {}", ctx.host))?;
    listing
        .entries
        .sort_by_cached_key(|e| natural_key(&escape(&e.path)));
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
            real_dir: Vec::new(),
            size: known.then_some(size),
            modified: modified.filter(|_| known),
            mode: Some(mode).filter(|_| known),
            sha256: None,
        });
    }
    let mut real_dirs = HashMap::new();
    loop {
        let dir = field(&mut fields)?;
        let Some(dir) = dir.strip_prefix(b"d") else { break };
        real_dirs.insert(dir, field(&mut fields)?);
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
    let mut sums: HashMap<Vec<u8>, String> = fields.filter_map(parse_sum_line).collect();
    for (entry, dir) in entries.iter_mut().zip(dirs) {
        entry.real_dir = real_dirs.get(dir).map(|d| d.to_vec()).unwrap_or_default();
        entry.target = targets
            .get(&entry.path[..])
            .map(|t| t.to_vec())
            .unwrap_or_default();
        if let Some(&(size, modified, mode)) = followed.get(&entry.path[..]) {
            (entry.size, entry.modified, entry.mode) = (Some(size), modified, Some(mode));
        }
        entry.sha256 = sums.remove(&entry.path);
    }
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
fn parse_sum_line(line: &[u8]) -> Option<(Vec<u8>, String)> {
    let (escaped, line) = match line.strip_prefix(b"\\") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let hash = std::str::from_utf8(line.get(..64)?).ok()?;
    let name = line.get(66..)?;
    let name = if escaped {
        unescape_sum(name)
    } else {
        name.to_vec()
    };
    Some((name, hash.to_ascii_lowercase()))
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

/// Shows any byte string safely and reversibly: printable UTF-8 is kept; `%`, control characters
/// (newline included) and bytes that are not UTF-8 become `%XX`. Distinct names stay distinct.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '%' || c.is_control() {
                let mut buf = [0; 4];
                c.encode_utf8(&mut buf)
                    .bytes()
                    .for_each(|b| push_hex(&mut out, b));
            } else {
                out.push(c);
            }
        }
        chunk.invalid().iter().for_each(|&b| push_hex(&mut out, b));
    }
    out
}

fn push_hex(out: &mut String, byte: u8) {
    let _ = write!(out, "%{byte:02X}");
}

/// Orders `c4.json` before `c16.json`: digit runs compare as numbers.
fn natural_key(text: &str) -> Vec<(u64, String)> {
    let mut key = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            key.push((rest[..digits].parse().unwrap_or(u64::MAX), String::new()));
            rest = &rest[digits..];
        } else {
            let word = rest.len() - rest.trim_start_matches(|c: char| !c.is_ascii_digit()).len();
            key.push((0, rest[..word].to_string()));
            rest = &rest[word..];
        }
    }
    key
}

/// Turns a fetched file into records: one JSON object, or JSON lines of objects. A file named
/// as a result (`.json`, `.jsonl`, `.ndjson`) that yields none, or JSON lines some of which are
/// not records, gets a warning naming the host, the file and the lines: nothing measured is
/// dropped in silence. Other files (logs, CSV) are kept and not read.
fn record_file(ctx: &HostCtx, step: &PlannedStep, rel: &Path, data: &[u8]) -> usize {
    let claimed = rel
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "json" | "jsonl" | "ndjson"));
    let warn = |why: String| {
        ctx.emit(Event::Warning {
            host: ctx.host.clone(),
            message: format!(
                "{}: fetched {}: {why} (the file is kept)",
                step.name,
                rel.display()
            ),
        })
    };
    let Ok(text) = std::str::from_utf8(data) else {
        if claimed {
            warn("it is not UTF-8 text, so no record was read from it".into());
        }
        return 0;
    };
    let objects = match serde_json::from_str::<Json>(text) {
        Ok(Json::Object(map)) => vec![map],
        Ok(_) if claimed => {
            warn("it holds JSON that is not an object, so it is not a record".into());
            Vec::new()
        }
        Ok(_) => Vec::new(),
        Err(_) => json_lines(text, claimed, &warn),
    };
    for metrics in &objects {
        ctx.record(
            step,
            &point_of(rel),
            crate::events::PointRun::once(step.attempt),
            metrics.clone(),
            RecordStatus::Ok,
            None,
        );
    }
    objects.len()
}

/// The records of a JSON-lines file; lines that are not records are named in one warning when
/// others are (or when the file is named as a result).
fn json_lines(text: &str, claimed: bool, warn: &dyn Fn(String)) -> Vec<serde_json::Map<String, Json>> {
    let (mut records, mut not) = (Vec::new(), Vec::new());
    for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match super::record_line::read(line) {
            super::record_line::Line::Record(map) => records.push(map),
            super::record_line::Line::Unreadable(why) => not.push(format!("line {}: {why}", number + 1)),
            super::record_line::Line::Log => not.push(format!("line {} is not a JSON object", number + 1)),
        }
    }
    if records.is_empty() {
        if claimed {
            warn(format!(
                "it is neither a JSON object nor JSON lines of objects ({}), so no record was read from it",
                not.first().map_or("it is empty", String::as_str)
            ));
        }
        return records;
    }
    if !not.is_empty() {
        let shown: Vec<&str> = not.iter().take(3).map(String::as_str).collect();
        let more = not.len().saturating_sub(shown.len());
        warn(format!(
            "{} of its lines are records, {} are not ({}{})",
            records.len(),
            not.len(),
            shown.join("; "),
            if more > 0 {
                format!("; {more} more")
            } else {
                String::new()
            }
        ));
    }
    records
}

/// The point a fetched file's records stand at: its path under the glob's folder.
fn point_of(rel: &Path) -> IndexMap<String, Json> {
    let mut point = IndexMap::new();
    point.insert("file".to_string(), Json::from(rel.display().to_string()));
    point
}

fn is_glob_char(c: char) -> bool {
    matches!(c, '*' | '?' | '[')
}

/// Quotes everything in a glob except its wildcards, so the host's shell expands only those.
pub fn quote_glob(pattern: &str) -> String {
    let mut out = String::new();
    let mut literal = String::new();
    let mut chars = pattern.chars().peekable();
    let flush = |literal: &mut String, out: &mut String| {
        if !literal.is_empty() {
            out.push_str(&shell_quote(literal));
            literal.clear();
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' => {
                flush(&mut literal, &mut out);
                out.push(c);
            }
            '[' => {
                let class: String = chars.clone().take_while(|&c| c != ']').collect();
                let closed = chars.clone().nth(class.len()) == Some(']');
                let simple = !class.is_empty()
                    && class
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-!^".contains(c));
                if closed && simple {
                    flush(&mut literal, &mut out);
                    out.push('[');
                    out.push_str(&class);
                    out.push(']');
                    chars.nth(class.len());
                } else {
                    literal.push('[');
                }
            }
            _ => literal.push(c),
        }
    }
    flush(&mut literal, &mut out);
    out
}

/// The folder part of a glob before its first wildcard: fetched names are relative to it.
fn static_prefix(pattern: &str) -> PathBuf {
    let mut base = PathBuf::new();
    for part in Path::new(pattern).parent().into_iter().flat_map(Path::components) {
        if part.as_os_str().to_string_lossy().contains(is_glob_char) {
            break;
        }
        base.push(part);
    }
    base
}

/// The name a fetched file gets under `fetched/`: its path below the glob's folder, each part
/// escaped (see [`escape`]); refuses anything that would land outside.
fn local_name(remote: &[u8], base: &Path) -> Result<PathBuf, String> {
    let path = Path::new(OsStr::from_bytes(remote));
    let rel = path.strip_prefix(base).unwrap_or(path);
    let mut clean = PathBuf::new();
    for part in rel.components() {
        match part {
            Component::Normal(p) => clean.push(escape(p.as_bytes())),
            Component::CurDir => {}
            _ => return Err("its name would place it outside the run directory: refused".into()),
        }
    }
    if clean.as_os_str().is_empty() {
        return Err("it has no file name".into());
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use sha2::{Digest, Sha256};
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn globs_keep_wildcards_and_quote_the_rest() {
        assert_eq!(
            quote_glob("/root/.rigrun/results/*.json"),
            "/root/.rigrun/results/*.json"
        );
        assert_eq!(quote_glob("/my dir/r?.json"), "'/my dir/r'?.json");
        assert_eq!(quote_glob("/x/$(reboot)/*.json"), "'/x/$(reboot)/'*.json");
        assert_eq!(quote_glob("/x/c[0-9].json"), "/x/c[0-9].json");
        assert_eq!(quote_glob("/x/[$(id)].json"), "'/x/[$(id)].json'");
    }

    #[test]
    fn files_are_listed_in_natural_order() {
        let mut names = vec!["r/c16.json", "r/c1.json", "r/c256.json", "r/c4.json"];
        names.sort_by_cached_key(|n| natural_key(n));
        assert_eq!(names, ["r/c1.json", "r/c4.json", "r/c16.json", "r/c256.json"]);
    }

    #[test]
    fn fetched_names_stay_inside() {
        let base = static_prefix("/w/results/*.json");
        assert_eq!(base, PathBuf::from("/w/results"));
        let name = |remote: &str| local_name(remote.as_bytes(), &base);
        assert_eq!(name("/w/results/a.json").unwrap(), PathBuf::from("a.json"));
        assert_eq!(
            name("/w/results/sub/a.json").unwrap(),
            PathBuf::from("sub/a.json")
        );
        assert!(name("/w/results/../../etc/passwd").is_err());
        assert!(name("/etc/passwd").is_err());
        assert!(name("/w/results/x/../../../y").is_err());
        let odd = local_name(b"/w/results/a\nb\xff 100%.json", &base).unwrap();
        assert_eq!(odd, PathBuf::from("a%0Ab%FF 100%25.json"));
    }

    #[test]
    fn escaping_keeps_printable_text_and_is_reversible() {
        assert_eq!(escape("c16 ümlaut.json".as_bytes()), "c16 ümlaut.json");
        assert_eq!(escape(b"a\nb\tc\x7f"), "a%0Ab%09c%7F");
        assert_eq!(escape(b"\xff\xfe%"), "%FF%FE%25");
        assert_ne!(escape(b"%41"), escape(b"A"));
    }

    #[test]
    fn checksum_lines_are_read_escaped_or_not() {
        let hash = "ab".repeat(32);
        let plain = format!("{hash}  /r/a b.json");
        assert_eq!(
            parse_sum_line(plain.as_bytes()),
            Some((b"/r/a b.json".to_vec(), hash.clone()))
        );
        let escaped = format!("\\{hash}  /r/a\\nb\\\\c");
        assert_eq!(
            parse_sum_line(escaped.as_bytes()),
            Some((b"/r/a\nb\\c".to_vec(), hash))
        );
        assert_eq!(parse_sum_line(b"garbage"), None);
    }

    fn entry(kind: Kind, target: &[u8]) -> Entry {
        Entry {
            path: b"/w/r/x".to_vec(),
            kind,
            readable: true,
            target: target.to_vec(),
            real_dir: b"/w/r".to_vec(),
            size: Some(1),
            modified: None,
            mode: None,
            sha256: Some("00".into()),
        }
    }

    #[test]
    fn links_are_followed_only_when_asked_and_only_inside() {
        let listing = Listing {
            base: b"/w/r".to_vec(),
            has_sha256: true,
            entries: Vec::new(),
        };
        let is_skip = |v: Verdict| matches!(v, Verdict::Skip(_));
        let inner = entry(Kind::LinkToFile, b"/w/r/y");
        let outer = entry(Kind::LinkToFile, b"/etc/passwd");
        let sneaky = entry(Kind::LinkToFile, b"/w/rx/y");
        assert!(is_skip(verdict(&inner, &listing, false)));
        assert_eq!(verdict(&inner, &listing, true), Verdict::Fetch);
        assert!(is_skip(verdict(&outer, &listing, true)));
        assert!(is_skip(verdict(&sneaky, &listing, true)));
        let mut through_dir_link = entry(Kind::File, b"");
        through_dir_link.real_dir = b"/etc".to_vec();
        assert!(is_skip(verdict(&through_dir_link, &listing, true)));
        let mut unreadable = entry(Kind::File, b"");
        unreadable.readable = false;
        assert!(matches!(verdict(&unreadable, &listing, false), Verdict::Fail(_)));
        assert!(matches!(
            verdict(&entry(Kind::Other, b""), &listing, false),
            Verdict::Fail(_)
        ));
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
            assert_eq!(
                a.sha256.as_deref(),
                Some(hex::encode(Sha256::digest(b"{}")).as_str())
            );
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
