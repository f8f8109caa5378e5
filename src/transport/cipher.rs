//! Which cipher rigrun's connections prefer. OpenSSH puts chacha20-poly1305 first because it is
//! constant-time without AES instructions; on a CPU that has them, AES-GCM moves the same bytes
//! with far less CPU on both ends (scp of 1 GiB over loopback here: 2.5–3.0 s with chacha20,
//! 1.7–2.4 s with AES-GCM), which is what a fetch of big result files spends its time on.
//!
//! rigrun only reorders: when this CPU has AES and carry-less multiply, the inventory sets no
//! `Ciphers`, and the configuration leaves OpenSSH's default list untouched, the AES-GCM
//! entries of that same list go first. A list the user chose (`~/.ssh/config`,
//! `/etc/ssh/ssh_config`, `ssh_options`) is used as it is.
//!
//! Whether the configuration chose one is read from the files themselves when none of them
//! (nor a file they include) has a `Ciphers` line, and asked of `ssh -G` otherwise: an `ssh`
//! process per host, on the connection's path, only where a file could change the answer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::OnceCell;

/// `ssh -G` only reads configuration; anything slower is stuck (a `Match exec` that hangs).
const QUERY_DEADLINE: Duration = Duration::from_secs(5);
/// How deep `Include`s are followed (ssh's own limit).
const INCLUDE_DEPTH: usize = 16;

/// The `-o Ciphers=…` option to add for a host reached with `config_args` (ssh's options, no
/// master flags) at `address`, or none to leave ssh's choice alone.
pub async fn preference(config_args: &[String], address: &str) -> Option<String> {
    if !has_aes_instructions() {
        return None;
    }
    // The files are read once per process: every host's connection would read the same.
    static FILES_MAY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let files_may = || *FILES_MAY.get_or_init(|| files_may_set_ciphers(&ConfigFiles::of_this_user()));
    let effective = if options_may_set_ciphers(config_args) || files_may() {
        // Both queries at once: each is an `ssh` process on the connection's path.
        let (default, effective) = tokio::join!(default_ciphers(), ciphers_of(config_args, address));
        let (default, effective) = (default?, effective?);
        if effective != default {
            tracing::debug!("keeping the configured ciphers for {address}: {effective}");
            return None;
        }
        effective
    } else {
        default_ciphers().await?
    };
    gcm_first(&effective).map(|list| format!("Ciphers={list}"))
}

/// Starts asking `ssh` its default cipher list (once per process) while the run gets ready, so
/// that the first connection need not wait for it.
pub fn warm_up() {
    if has_aes_instructions() {
        tokio::spawn(default_ciphers());
    }
}

/// OpenSSH's default cipher list, as this `ssh` has it (no configuration read).
async fn default_ciphers() -> Option<String> {
    static DEFAULT: OnceCell<Option<String>> = OnceCell::const_new();
    DEFAULT
        .get_or_init(|| ciphers_of(&["-F", "/dev/null"], "rigrun-default"))
        .await
        .clone()
}

/// The configuration files `ssh` reads, with the folders their relative `Include`s start from.
struct ConfigFiles {
    /// `~/.ssh/config`, relative to `~/.ssh`; none without a home.
    user: Option<(PathBuf, PathBuf)>,
    /// `/etc/ssh/ssh_config`, relative to `/etc/ssh`.
    system: (PathBuf, PathBuf),
    home: Option<PathBuf>,
}

impl ConfigFiles {
    fn of_this_user() -> ConfigFiles {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        ConfigFiles::with(home, Path::new("/etc/ssh"))
    }

    fn with(home: Option<PathBuf>, etc_ssh: &Path) -> ConfigFiles {
        ConfigFiles {
            user: home.as_ref().map(|h| (h.join(".ssh/config"), h.join(".ssh"))),
            system: (etc_ssh.join("ssh_config"), etc_ssh.to_path_buf()),
            home,
        }
    }
}

/// Whether these ssh options set `Ciphers` or name another configuration to read.
fn options_may_set_ciphers(config_args: &[String]) -> bool {
    config_args
        .iter()
        .map(|a| a.to_ascii_lowercase())
        .any(|a| a.starts_with("ciphers") || a.starts_with("include") || a == "-f")
}

/// Whether ssh's configuration files could set `Ciphers`: a `Ciphers` line in them or a file
/// they include; an `Include` this cannot follow (a token, a variable, a quote) counts as one.
fn files_may_set_ciphers(files: &ConfigFiles) -> bool {
    files
        .user
        .iter()
        .chain([&files.system])
        .any(|(file, base)| file_may_set_ciphers(file, base, files.home.as_deref(), 0))
}

/// Whether `file` (missing: no) has a `Ciphers` line or includes a file that may; `base` is
/// where its relative `Include`s start.
fn file_may_set_ciphers(file: &Path, base: &Path, home: Option<&Path>, depth: usize) -> bool {
    let Ok(bytes) = std::fs::read(file) else {
        return false;
    };
    if depth > INCLUDE_DEPTH {
        return true;
    }
    String::from_utf8_lossy(&bytes).lines().any(|line| {
        let line = line.trim();
        let end = line
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(line.len());
        let (keyword, rest) = line.split_at(end);
        if keyword.eq_ignore_ascii_case("ciphers") {
            return true;
        }
        if !keyword.eq_ignore_ascii_case("include") {
            return false;
        }
        let rest = rest.trim_start().trim_start_matches('=');
        rest.split_whitespace()
            .any(|pattern| match included(pattern, base, home) {
                Some(found) => found
                    .iter()
                    .any(|f| file_may_set_ciphers(f, base, home, depth + 1)),
                None => true,
            })
    })
}

/// The files an `Include` pattern names (a wildcard only in its last part), or none when this
/// cannot tell (tokens, variables, quotes, other wildcards).
fn included(pattern: &str, base: &Path, home: Option<&Path>) -> Option<Vec<PathBuf>> {
    if pattern.contains(['%', '$', '"', '\\', '[', '`']) {
        return None;
    }
    let path = match pattern.strip_prefix("~/") {
        Some(rest) => home?.join(rest),
        None if pattern.starts_with('~') => return None,
        None => base.join(pattern),
    };
    let name = path.file_name()?.to_str()?;
    let dir = path.parent()?;
    if dir.to_str()?.contains(['*', '?']) {
        return None;
    }
    if !name.contains(['*', '?']) {
        return Some(vec![path.clone()]);
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Some(Vec::new());
    };
    Some(
        entries
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| wildcard_match(name, n)))
            .map(|e| e.path())
            .collect(),
    )
}

/// Whether `name` matches `pattern`, where `*` is any run of characters and `?` any one.
fn wildcard_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The last `*` seen and where in `name` it started matching, to backtrack to.
    let (mut i, mut j, mut star) = (0, 0, None::<(usize, usize)>);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            (i, j) = (i + 1, j + 1);
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            star = Some((si, sj + 1));
            (i, j) = (si + 1, sj + 1);
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The list with its AES-GCM ciphers moved to the front (their order and the others' kept), or
/// none when there is none or they already lead.
fn gcm_first(list: &str) -> Option<String> {
    let (gcm, rest): (Vec<&str>, Vec<&str>) = list.split(',').partition(|c| c.contains("-gcm@"));
    let leads = list.split(',').next().is_some_and(|c| c.contains("-gcm@"));
    if gcm.is_empty() || leads {
        return None;
    }
    Some([gcm, rest].concat().join(","))
}

/// The `ciphers` line of `ssh -G` with these options for this host.
async fn ciphers_of<S: AsRef<std::ffi::OsStr>>(args: &[S], address: &str) -> Option<String> {
    let output = tokio::time::timeout(
        QUERY_DEADLINE,
        tokio::process::Command::new("ssh")
            .args(args)
            .arg("-G")
            .arg("--")
            .arg(address)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .ok()?
    .ok()
    .filter(|o| o.status.success())?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("ciphers "))
        .map(|l| l.trim().to_string())
}

fn has_aes_instructions() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcm_ciphers_move_to_the_front_and_nothing_is_added_or_lost() {
        let default = "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr,\
                       aes128-gcm@openssh.com,aes256-gcm@openssh.com";
        assert_eq!(
            gcm_first(default).unwrap(),
            "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,\
             aes128-ctr,aes192-ctr,aes256-ctr"
        );
        assert_eq!(
            gcm_first("aes256-gcm@openssh.com,chacha20-poly1305@openssh.com"),
            None
        );
        assert_eq!(gcm_first("chacha20-poly1305@openssh.com,aes128-ctr"), None);
    }

    /// A home and an /etc/ssh of the test's own, with these files in them.
    fn files_with(entries: &[(&str, &str)]) -> (tempfile::TempDir, ConfigFiles) {
        let tmp = tempfile::tempdir().unwrap();
        for (path, text) in entries {
            let path = tmp.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let files = ConfigFiles::with(Some(tmp.path().join("home")), &tmp.path().join("etc"));
        (tmp, files)
    }

    #[test]
    fn files_without_a_ciphers_line_leave_the_default() {
        let (_tmp, files) = files_with(&[
            (
                "home/.ssh/config",
                "Host gpu\n  User bench\n# Ciphers aes128-ctr\n",
            ),
            (
                "etc/ssh_config",
                "Include /nonexistent/*.conf\nInclude conf.d/*.conf\n",
            ),
            ("etc/conf.d/a.conf", "SendEnv LANG\n"),
        ]);
        assert!(!files_may_set_ciphers(&files));
        assert!(!files_may_set_ciphers(&ConfigFiles::with(
            None,
            Path::new("/nonexistent")
        )));
    }

    #[test]
    fn a_ciphers_line_anywhere_ssh_reads_counts() {
        let cases: [&[(&str, &str)]; 5] = [
            &[("home/.ssh/config", "Host gpu\n  ciphers=aes128-ctr\n")],
            &[("etc/ssh_config", "Match exec true\n\tCiphers aes256-ctr\n")],
            // Through an Include relative to /etc/ssh, with a wildcard, as Debian's is.
            &[
                ("etc/ssh_config", "Include conf.d/*.conf\n"),
                ("etc/conf.d/10-a.conf", "SendEnv LANG\n"),
                ("etc/conf.d/20-b.conf", "Host *\n  Ciphers aes128-ctr\n"),
            ],
            // Relative to ~/.ssh, and through `~/`.
            &[
                ("home/.ssh/config", "Include extra\n"),
                ("home/.ssh/extra", "Ciphers aes128-ctr\n"),
            ],
            &[
                ("home/.ssh/config", "Include = ~/more/b?\n"),
                ("home/more/b1", "Ciphers aes128-ctr\n"),
            ],
        ];
        for entries in cases {
            let (_tmp, files) = files_with(entries);
            assert!(files_may_set_ciphers(&files), "{entries:?}");
        }
    }

    #[test]
    fn what_cannot_be_followed_or_is_set_on_the_command_line_counts() {
        for include in [
            "Include %d/x",
            "Include ${HOME}/x",
            "Include \"a b\"",
            "Include ~other/x",
            "Include */x",
        ] {
            let (_tmp, files) = files_with(&[("home/.ssh/config", include)]);
            assert!(files_may_set_ciphers(&files), "{include}");
        }
        let option = |o: &str| vec!["-o".to_string(), o.to_string()];
        assert!(options_may_set_ciphers(&option("Ciphers=aes128-ctr")));
        assert!(options_may_set_ciphers(&option("Include=/x")));
        assert!(!options_may_set_ciphers(&option("Port=2222")));
        // A file that includes itself is not followed for ever.
        let (_tmp, files) = files_with(&[("home/.ssh/config", "Include config\n")]);
        assert!(files_may_set_ciphers(&files));
    }

    #[test]
    fn wildcards_match_as_globs_do() {
        assert!(wildcard_match("*.conf", "a.conf"));
        assert!(wildcard_match("*.conf", ".conf"));
        assert!(wildcard_match("a*b*c", "aXbYbc"));
        assert!(wildcard_match("b?", "b1"));
        assert!(!wildcard_match("b?", "b12"));
        assert!(!wildcard_match("*.conf", "a.conf.bak"));
        assert!(wildcard_match("*", ""));
    }

    #[tokio::test]
    async fn a_configured_cipher_list_is_left_alone() {
        // `-o Ciphers=…` is configuration as much as ~/.ssh/config is: ssh -G shows it, so the
        // effective list differs from the default and rigrun adds nothing.
        let args = vec![
            "-o".into(),
            "Ciphers=chacha20-poly1305@openssh.com,aes128-gcm@openssh.com".into(),
        ];
        assert_eq!(preference(&args, "127.0.0.1").await, None);
    }

    #[tokio::test]
    async fn the_default_list_gets_gcm_first_where_the_cpu_has_aes() {
        let got = preference(&[], "127.0.0.1").await;
        if has_aes_instructions() {
            let list = got.expect("this CPU has AES: the default list should be reordered");
            assert!(list.starts_with("Ciphers=aes128-gcm@openssh.com,"), "{list}");
            assert!(list.contains("chacha20-poly1305@openssh.com"), "{list}");
        } else {
            assert_eq!(got, None);
        }
    }
}
