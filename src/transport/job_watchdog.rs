//! The run's watchdog as `rigrun job-run` starts it: job.sh's `watch` loop in a process of its
//! own (`rigrun job-run watch`, forked and run again by the job's runner), with job.sh's files,
//! so that job.sh's `lease` sees it alive and its `close` ends it. Once the lease has not been renewed for its length it
//! stops every job still running (TERM, then KILL 2 s later); it ends at close (`done`), or when
//! the run's folder or its lease is gone.
//!
//! job.sh starts a shell for it (`setsid sh -c`), which then runs `sleep 1` every second: on the
//! first job's path that cost a host ~8 ms of CPU, and each second of the run ~1 ms more; this
//! one costs a fork and an exec once, and sleeps in between.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How often the lease is looked at (job.sh's `sleep 1`).
const TICK: Duration = Duration::from_secs(1);
/// How long jobs stopped for an expired lease have between TERM and KILL.
const KILL_AFTER: Duration = Duration::from_secs(2);

/// Starts the watchdog of the run's folder `dir` for a lease of `lease` seconds, in this boot,
/// as this binary run again with `words` (`job-run watch`) before the arguments [`main`] takes.
/// Must be called while this process has a single thread (it forks and goes on in the child).
pub(super) fn start(dir: &Path, lease: &str, boot: &str, words: [&str; 2]) -> Result<(), String> {
    let lease: u64 = lease
        .parse()
        .map_err(|_| format!("the lease {lease:?} is not a number of seconds"))?;
    // job.sh needs setsid for every action (attach, stop, close): a host without it runs no
    // job, whichever starts it, rather than one that could not be followed later.
    if !on_path("setsid", &std::env::var_os("PATH").unwrap_or_default()) {
        return Err("setsid (util-linux) is not installed on the host".into());
    }
    // SAFETY: the caller has one thread, so the child may go on as a normal process.
    match unsafe { libc::fork() } {
        -1 => Err(format!("cannot fork: {}", std::io::Error::last_os_error())),
        0 => {
            detach();
            // A process of its own words (`ps` would otherwise show the job's command line,
            // as if the job still ran); where the binary cannot be run again, this fork watches.
            let _ = this_binary()
                .args(words)
                .args([dir.as_os_str(), lease.to_string().as_ref(), boot.as_ref()])
                .exec();
            watch(dir, lease, boot);
            // SAFETY: ends the forked child without running the parent's exit handlers.
            unsafe { libc::_exit(0) }
        }
        // The runner does not wait for it: it outlives the job, reparented when the runner ends.
        _ => Ok(()),
    }
}

/// The word after `rigrun job-run` that makes a process the run's watchdog.
pub(super) const WATCH: &str = "watch";

/// `rigrun job-run watch DIR LEASE BOOT`: the watchdog, started by [`start`]. Exit status 2
/// for other arguments.
pub(super) fn main(args: &[String]) -> i32 {
    let [dir, lease, boot] = args else {
        return 2;
    };
    let Ok(lease) = lease.parse() else {
        return 2;
    };
    watch(Path::new(dir), lease, boot);
    0
}

/// This very binary, to run again (`/proc/self/exe` stays it even once its file is replaced).
fn this_binary() -> std::process::Command {
    #[cfg(target_os = "linux")]
    let path = std::path::PathBuf::from("/proc/self/exe");
    #[cfg(not(target_os = "linux"))]
    let path = std::env::current_exe().unwrap_or_default();
    std::process::Command::new(path)
}

/// A session of its own (a stop of a job's group or the SSH session's end does not reach it)
/// and no hold on the channel: its three descriptors on /dev/null, so the command's channel
/// ends when the job does.
fn detach() {
    // SAFETY: setsid only changes this process's session; a forked child is no group leader.
    unsafe { libc::setsid() };
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto this process's own standard descriptors.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// job.sh's `watch`, in the run's folder: says its pid and boot, then looks at the lease every
/// second. Named `rigrun-watchdog` where `ps` shows a process's name.
fn watch(dir: &Path, lease: u64, boot: &str) {
    if std::env::set_current_dir(dir).is_err() {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes from the pointer.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"rigrun-watchdog".as_ptr());
    }
    let here = Path::new(".");
    let pid = std::process::id();
    let said = std::fs::write("watchdog.pid", format!("{pid}\n"))
        .and_then(|()| std::fs::write("watchdog.boot", format!("{boot}\n")));
    if said.is_err() {
        return;
    }
    let renewed = || modified(Path::new("lease"));
    let mut seen = renewed();
    let mut idle = 0;
    while !Path::new("done").exists() && Path::new("lease").exists() {
        std::thread::sleep(TICK);
        let now = renewed();
        if now != seen {
            (seen, idle) = (now, 0);
            continue;
        }
        idle += 1;
        if idle >= lease {
            let stopped = stop_jobs(here, boot);
            std::thread::sleep(KILL_AFTER);
            for group in stopped {
                // SAFETY: kill only sends a signal; a group that is gone is ESRCH.
                unsafe { libc::kill(-group, libc::SIGKILL) };
            }
            break;
        }
    }
    // Only its own: a watchdog started since (a new lease after this one ended) keeps its file.
    if read_word(Path::new("watchdog.pid")).is_some_and(|p| p == pid.to_string()) {
        let _ = std::fs::remove_file("watchdog.pid");
    }
}

/// TERMs the process group of every job of `dir` that has no exit code and was started in this
/// boot, saying `lease` in its `.stopped`; returns the groups.
fn stop_jobs(dir: &Path, boot: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut stopped = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(job) = name.strip_suffix(".pid").filter(|j| *j != "watchdog") else {
            continue;
        };
        let file = |ext: &str| dir.join(format!("{job}.{ext}"));
        let of_another_boot = read_word(&file("boot")).is_some_and(|was| was != boot);
        if read_word(&file("rc")).is_some() || of_another_boot {
            continue;
        }
        let Some(group) = read_word(&file("pid")).and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if group > 0 && std::fs::write(file("stopped"), "lease\n").is_ok() {
            // SAFETY: kill only sends a signal; a group that is gone is ESRCH.
            if unsafe { libc::kill(-group, libc::SIGTERM) } == 0 {
                stopped.push(group);
            }
        }
    }
    stopped
}

/// When `path` was last written (None: it is gone).
fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The first line of a file, trimmed; None when it is missing or empty (the shell's `[ -s ]`).
pub(super) fn read_word(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let word = text.lines().next().unwrap_or_default().trim().to_string();
    (!word.is_empty()).then_some(word)
}

/// Whether `program` is an executable file in a folder of `path` (a `PATH`; the shell's
/// `command -v`).
fn on_path(program: &str, path: &std::ffi::OsStr) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path).any(|dir| {
        let dir = if dir.as_os_str().is_empty() {
            ".".into()
        } else {
            dir
        };
        std::fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_path_only_where_it_is_executable() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("plain"), "").unwrap();
        std::fs::write(bin.join("tool"), "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(bin.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::ffi::OsString::from(format!("/nonexistent:{}", bin.display()));
        let found = (
            on_path("tool", &path),
            on_path("plain", &path),
            on_path("missing", &path),
        );
        assert_eq!(found, (true, false, false));
    }
}
