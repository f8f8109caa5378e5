//! What is done with each listed match: fetched, skipped by design (directories, links not
//! followed) or failed; links are followed only when asked and only inside the glob's directory.

use super::listing::{Entry, Kind, Listing, HOST_HASH_LIMIT};
use super::names::escape;

/// What is done with one entry, and why not when it is not fetched.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    Fetch,
    /// Not fetched by design (directories, links); listed, the step stays ok.
    Skip(String),
    /// Should have been fetched and could not be; the step fails after fetching the rest.
    Fail(String),
}

/// Decides what happens to one listed entry.
pub(super) fn verdict(entry: &Entry, listing: &Listing, follow: bool) -> Verdict {
    let base = escape(&listing.base);
    let target = escape(&entry.target);
    let in_base = *entry.real_dir == *listing.base || inside(&entry.real_dir, &listing.base);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: Kind, target: &[u8]) -> Entry {
        Entry {
            path: b"/w/r/x".to_vec(),
            kind,
            readable: true,
            target: target.to_vec(),
            real_dir: b"/w/r".as_slice().into(),
            size: Some(1),
            modified: None,
            mode: None,
            sha256: Some([0; 32]),
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
        through_dir_link.real_dir = b"/etc".as_slice().into();
        assert!(is_skip(verdict(&through_dir_link, &listing, true)));
        let mut unreadable = entry(Kind::File, b"");
        unreadable.readable = false;
        assert!(matches!(verdict(&unreadable, &listing, false), Verdict::Fail(_)));
        assert!(matches!(
            verdict(&entry(Kind::Other, b""), &listing, false),
            Verdict::Fail(_)
        ));
    }
}
