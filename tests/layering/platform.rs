//! Where Linux-only calls may stand: the controller builds on macOS (and any unix) by
//! construction, which this machine cannot compile for, so the source is read instead. A use of
//! a Linux-only item — a libc item of [`LINUX_ONLY_LIBC`], a path of [`LINUX_ONLY_PATHS`], or a
//! string that is a path under `/proc/` or `/sys/` (a file this process would open) — must sit
//! in an item gated `#[cfg(target_os = "linux")]` (alone or within `all(…)`), whose fallback for
//! other unixes stands beside it under `#[cfg(not(target_os = "linux"))]`. Test code is not read
//! (it is not built into the binary), and neither are commands run on a host (a shell script in
//! a string, such as `"cat /proc/uptime"`, is not a path of its own: hosts are Linux).

use std::ops::Range;

use crate::source::{blank_comments, blank_comments_and_strings, item_end, string_literals};

/// libc items that Linux has and macOS lacks, or has with another meaning (`sendfile`).
pub const LINUX_ONLY_LIBC: &[&str] = &[
    "F_SETPIPE_SZ",
    "F_GETPIPE_SZ",
    "pipe2",
    "accept4",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "eventfd",
    "signalfd",
    "timerfd_create",
    "memfd_create",
    "splice",
    "tee",
    "sendfile",
    "copy_file_range",
    "statx",
    "prctl",
    "PR_SET_PDEATHSIG",
    "PR_SET_NAME",
    "sched_setaffinity",
    "sched_getaffinity",
    "gettid",
    "getrandom",
    "O_DIRECT",
    "O_TMPFILE",
    "O_PATH",
    "SOCK_CLOEXEC",
    "SOCK_NONBLOCK",
    "MSG_NOSIGNAL",
    "CLOCK_BOOTTIME",
    "SO_PEERCRED",
    "TCP_USER_TIMEOUT",
    "RLIMIT_RTPRIO",
];

/// Paths of std's Linux-only modules.
pub const LINUX_ONLY_PATHS: &[&str] = &["std::os::linux", "std::os::android"];

/// Where a path string names a Linux-only file system.
pub const LINUX_ONLY_DIRS: &[&str] = &["/proc/", "/sys/"];

/// A Linux-only use outside a Linux-gated item: its line and what it is.
#[derive(Debug, PartialEq)]
pub struct Ungated {
    pub line: usize,
    pub what: String,
}

/// The Linux-only uses of a production source file that no `#[cfg(target_os = "linux")]` item
/// holds.
pub fn ungated(text: &str) -> Vec<Ungated> {
    let original: Vec<char> = text.chars().collect();
    let code: Vec<char> = blank_comments_and_strings(text).chars().collect();
    let kept: Vec<char> = blank_comments(text).chars().collect();
    let exempt = gated_items(&code, &kept);
    let exempt = |at: usize| exempt.iter().any(|r| r.contains(&at));
    let line = |at: usize| original[..at].iter().filter(|&&c| c == '\n').count() + 1;
    let mut found: Vec<(usize, String)> = Vec::new();
    for name in LINUX_ONLY_LIBC {
        let path = format!("libc::{name}");
        found.extend(words_at(&code, &path).into_iter().map(|at| (at, path.clone())));
    }
    for path in LINUX_ONLY_PATHS {
        found.extend(words_at(&code, path).into_iter().map(|at| (at, path.to_string())));
    }
    for literal in string_literals(text) {
        let body: String = original[literal.clone()]
            .iter()
            .skip_while(|&&c| c != '"')
            .skip(1)
            .collect();
        if let Some(dir) = LINUX_ONLY_DIRS.iter().find(|d| body.starts_with(**d)) {
            found.push((literal.start, format!("a path under {dir}")));
        }
    }
    found.sort();
    found
        .into_iter()
        .filter(|(at, _)| !exempt(*at))
        .map(|(at, what)| Ungated { line: line(at), what })
        .collect()
}

/// The items under `#[cfg(test)]` or under a cfg that holds on Linux alone, as ranges of
/// characters (found in `code`, their predicates read in `kept`, where strings stay).
fn gated_items(code: &[char], kept: &[char]) -> Vec<Range<usize>> {
    let mut items = Vec::new();
    for start in occurrences(code, "#[cfg(") {
        let Some(close) = attribute_end(code, start) else {
            continue;
        };
        let predicate: String = kept[start..close].iter().filter(|c| !c.is_whitespace()).collect();
        if predicate == "#[cfg(test)]" || is_linux_alone(&predicate) {
            items.push(start..item_end(code, close));
        }
    }
    items
}

/// Whether a `#[cfg(…)]` (without spaces) holds on Linux alone: `target_os = "linux"` itself,
/// or within `all(…)`; never under `not(…)` or `any(…)`.
fn is_linux_alone(predicate: &str) -> bool {
    const LINUX: &str = "target_os=\"linux\"";
    predicate == format!("#[cfg({LINUX})]")
        || (predicate.starts_with("#[cfg(all(")
            && predicate.contains(LINUX)
            && !predicate.contains("not(")
            && !predicate.contains("any("))
}

/// The end (after its `]`) of the attribute `#[…]` at `start`.
fn attribute_end(code: &[char], start: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, &c) in code.iter().enumerate().skip(start + "#[".len()) {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return Some(i + 1),
            ']' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Where `needle` starts in `chars`.
fn occurrences(chars: &[char], needle: &str) -> Vec<usize> {
    let needle: Vec<char> = needle.chars().collect();
    (0..chars.len())
        .filter(|&i| chars[i..].starts_with(&needle))
        .collect()
}

/// Where the path `path` stands as a whole (`libc::tee`, not `libc::teeth` nor `my_libc::tee`).
fn words_at(code: &[char], path: &str) -> Vec<usize> {
    let ident = |c: &char| c.is_alphanumeric() || *c == '_';
    let len = path.chars().count();
    occurrences(code, path)
        .into_iter()
        .filter(|&at| at == 0 || !(ident(&code[at - 1]) || code[at - 1] == ':'))
        .filter(|&at| !code.get(at + len).is_some_and(ident))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(code: &str) -> Vec<(usize, String)> {
        ungated(code).into_iter().map(|u| (u.line, u.what)).collect()
    }

    #[test]
    fn linux_only_calls_outside_a_linux_item_are_found_with_their_line() {
        let code = "fn widen(fd: i32) {\n    unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, 1) };\n}\nfn host() { std::fs::read(\"/proc/sys/kernel/hostname\"); }\nuse std::os::linux::fs::MetadataExt;\n";
        assert_eq!(
            lines(code),
            [
                (2, "libc::F_SETPIPE_SZ".to_string()),
                (4, "a path under /proc/".to_string()),
                (5, "std::os::linux".to_string())
            ]
        );
    }

    #[test]
    fn a_linux_item_holds_them_and_only_a_linux_one() {
        let gated = "#[cfg(target_os = \"linux\")]\nfn widen(fd: i32) {\n    unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, 1) };\n}\n#[cfg(all(target_os = \"linux\", feature = \"x\"))]\nfn f() { format!(\"/proc/{}/stat\", 1); }\n";
        assert!(lines(gated).is_empty(), "{:?}", lines(gated));
        for other in [
            "#[cfg(not(target_os = \"linux\"))]",
            "#[cfg(any(target_os = \"linux\", target_os = \"macos\"))]",
            "#[cfg(unix)]",
        ] {
            let code = format!(
                "{other}\nfn widen(fd: i32) {{ unsafe {{ libc::fcntl(fd, libc::F_SETPIPE_SZ, 1) }}; }}\n"
            );
            assert_eq!(lines(&code).len(), 1, "{other}");
        }
        // The gate covers its item only.
        let after = "#[cfg(target_os = \"linux\")]\nfn a() {}\nfn b() { libc::gettid(); }\n";
        assert_eq!(lines(after), [(3, "libc::gettid".to_string())]);
    }

    #[test]
    fn host_scripts_comments_test_code_and_lookalikes_are_not_uses() {
        let code = concat!(
            "const BOOT: &str = \"cat /proc/sys/kernel/random/boot_id\";\n",
            "const S: &str = \"echo \\\"/proc/x\\\"\";\n",
            "// reads /proc/uptime; libc::F_SETPIPE_SZ\n",
            "fn f() { my_libc::tee(); libc::teeth(); libc::fcntl(0, 0); }\n",
            "#[cfg(test)]\nmod tests {\n    fn t() { std::fs::read(\"/proc/1/stat\").ok(); libc::gettid(); }\n}\n",
        );
        assert!(lines(code).is_empty(), "{:?}", lines(code));
    }
}
