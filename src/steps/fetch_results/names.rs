//! Names on both sides: the glob anchored and quoted for the host's shell, and its folder; any
//! byte string escaped for display; the local name a fetched file gets (escaped, never outside);
//! the natural order the matches are listed in.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::config::template::shell_quote;

/// Relative globs are anchored with `./`, so that no listed name can start with `-`.
pub(super) fn anchored(pattern: &str) -> String {
    if pattern.starts_with('/') || pattern.starts_with("./") {
        pattern.to_string()
    } else {
        format!("./{pattern}")
    }
}

fn is_glob_char(c: char) -> bool {
    matches!(c, '*' | '?' | '[')
}

/// Quotes everything in a glob except its wildcards, so the host's shell expands only those.
pub(super) fn quote_glob(pattern: &str) -> String {
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
pub(super) fn static_prefix(pattern: &str) -> PathBuf {
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
pub(super) fn local_name(remote: &[u8], base: &Path) -> Result<PathBuf, String> {
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

/// Shows any byte string safely and reversibly: printable UTF-8 is kept; `%`, control characters
/// (newline included) and bytes that are not UTF-8 become `%XX`. Distinct names stay distinct.
pub(super) fn escape(bytes: &[u8]) -> String {
    escaped(bytes).into_owned()
}

/// [`escape`], borrowing the name when it needs no escaping (most do not): for comparing many
/// names without a copy of each.
pub(super) fn escaped(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.contains(|c: char| c == '%' || c.is_control()) => Cow::Borrowed(text),
        _ => Cow::Owned(escape_all(bytes)),
    }
}

fn escape_all(bytes: &[u8]) -> String {
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

/// Orders `c4.json` before `c16.json`: digit runs compare as numbers. Compares part by part,
/// copying nothing (a listing of many files is sorted with it).
pub(super) fn natural_cmp(a: &str, b: &str) -> Ordering {
    natural_parts(a).cmp(natural_parts(b))
}

/// A text's runs of digits, as `(number, "")`, and of other characters, as `(0, run)`.
fn natural_parts(text: &str) -> impl Iterator<Item = (u64, &str)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let part = if digits > 0 {
            (rest[..digits].parse().unwrap_or(u64::MAX), "")
        } else {
            let word = rest.len() - rest.trim_start_matches(|c: char| !c.is_ascii_digit()).len();
            (0, &rest[..word])
        };
        rest = &rest[digits.max(part.1.len())..];
        Some(part)
    })
}

#[cfg(test)]
mod tests {
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
        let mut names = vec![
            "r/c16.json",
            "r/c1.json",
            "r/c256.json",
            "r/c4.json",
            "r/c",
            "r/b9",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "r/b9",
                "r/c",
                "r/c1.json",
                "r/c4.json",
                "r/c16.json",
                "r/c256.json"
            ]
        );
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
        assert!(matches!(escaped("c16 ü.json".as_bytes()), Cow::Borrowed(_)));
        assert_eq!(escaped(b"a\nb"), "a%0Ab");
    }
}
