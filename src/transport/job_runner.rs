//! The host side of a detached job's `run` in one native process: what `job.sh run` does (see
//! `job.rs` for the protocol), where the host has a copy of this rigrun (`rigrun job-run ...`).
//!
//! `job.sh` pays for each job with a shell, a `setsid`, two subshells and two `tee`s (13 ms of
//! the host's CPU against 1.1 ms for `sh -c true`); here the job is this process, one fork (the
//! supervisor, in the job's own session, which copies the command's output to the job's files
//! and to the channel) and the command's `sh`. It keeps the same files, so `job.sh` attaches to,
//! stops, ends and closes these jobs as its own. The run's watchdog, when the first job finds
//! none, is this binary too (`job-run watch`, `job_watchdog.rs`), on job.sh's files: either
//! guards the jobs of either.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::job_watchdog::{read_word, WATCH};

/// The subcommand rigrun runs on the host: `rigrun job-run <job.sh's arguments>`.
pub const SUBCOMMAND: &str = "job-run";
/// What `rigrun job-run --protocol` prints: a copy that says anything else (an older rigrun)
/// is not used to run jobs.
pub const PROTOCOL: &str = "rigrun-job-run 1";

const JOB: &str = include_str!("job.sh");

/// Set by rigrun's `main`: this process is the rigrun binary, so a local host's jobs can run
/// through it (in a library's tests, the running binary is the test harness).
static THIS_BINARY: AtomicBool = AtomicBool::new(false);

/// Says that the running binary is rigrun itself (see [`this_binary`]).
pub fn mark_this_binary() {
    THIS_BINARY.store(true, Ordering::Relaxed);
}

/// The path that runs this very binary's `job-run` on this machine, when the running binary is
/// rigrun: `/proc/self/exe`, which stays this binary even when a build has replaced its file
/// since it started (its path would then run another rigrun, or nothing).
#[cfg(target_os = "linux")]
pub fn this_binary() -> Option<&'static str> {
    THIS_BINARY.load(Ordering::Relaxed).then_some("/proc/self/exe")
}

/// None elsewhere: job.sh runs a local host's jobs.
#[cfg(not(target_os = "linux"))]
pub fn this_binary() -> Option<&'static str> {
    None
}

/// The shell that runs the command (and job.sh): by its path, not searched for along `PATH`.
const SH: &str = "/bin/sh";
/// How long a stop waits for the job's processes after TERM before it sends KILL (job.sh's).
const GRACE: Duration = Duration::from_secs(2);

/// `rigrun job-run` with `args` (what follows the subcommand): job.sh's arguments, with `run`
/// as the action. Its exit status is 0 once the end marker is printed (the job's outcome is in
/// the marker, as with job.sh).
pub fn main(args: &[OsString]) -> i32 {
    if args.first().is_some_and(|a| a == "--protocol") {
        println!("{PROTOCOL}");
        return 0;
    }
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    if words.first().is_some_and(|w| w == WATCH) {
        return super::job_watchdog::main(&words[1..]);
    }
    let Some(job) = JobArgs::parse(&words) else {
        eprintln!(
            "rigrun {SUBCOMMAND} is rigrun's own, run on a host to start a detached job: \
             `{SUBCOMMAND} run DIR NAME MARKER EOF OUT_OFFSET ERR_OFFSET COMMAND LEASE`"
        );
        return 2;
    };
    // A job started before (a resumed run) is attached to by job.sh, from its first byte.
    if job.file("out").exists() {
        let error = Command::new(SH)
            .arg("-c")
            .arg(JOB)
            .arg("rigrun")
            .args(args)
            .exec();
        eprintln!("cannot run sh: {error}");
        return 1;
    }
    job.run();
    0
}

/// Held while a stop is under way (TERM, then KILL), and by the job's end once its supervisor
/// exited: a stop is finished before the outcome is read, and none starts after.
static STOPPING: Mutex<()> = Mutex::new(());

/// job.sh's arguments for `run`.
#[derive(Clone)]
struct JobArgs {
    dir: PathBuf,
    name: String,
    marker: String,
    /// What the end of stdin means: `stop` (this machine) or `keep` (SSH: the lease decides).
    stop_at_eof: bool,
    command: String,
    lease: String,
    boot: String,
}

impl JobArgs {
    fn parse(words: &[String]) -> Option<JobArgs> {
        let [action, dir, name, marker, eof, _, _, command, lease] = words else {
            return None;
        };
        (action == "run").then(|| JobArgs {
            dir: PathBuf::from(dir),
            name: name.clone(),
            marker: marker.clone(),
            stop_at_eof: eof == "stop",
            command: command.clone(),
            lease: lease.clone(),
            boot: boot_id(),
        })
    }

    /// The job's file with extension `ext` (`out`, `err`, `pid`, `rc`, ...).
    fn file(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.name))
    }

    /// Starts the job, follows it to its end and says how it ended.
    fn run(&self) {
        say(1, &format!("{}:start\n", self.marker));
        say(2, &format!("{}:start\n", self.marker));
        let supervisor = match self.start() {
            Ok(pid) => pid,
            Err(ending) => return self.finish(&ending),
        };
        listen(self.clone(), supervisor);
        wait_for(supervisor);
        // From here no stop starts, and one under way is finished first; the supervisor stays
        // unreaped until this process exits, so its pid is no one else's meanwhile.
        let _no_stop_after = STOPPING.lock();
        self.finish(&self.outcome());
    }

    /// Starts the job: its files, then the supervisor (its pid); Err: the end marker's trailer
    /// when nothing could start.
    fn start(&self) -> Result<i32, String> {
        self.lease_up().map_err(|why| self.unwritable(&why))?;
        let created = File::create(self.file("out"))
            .and_then(|_| File::create(self.file("err")))
            .and_then(|_| std::fs::write(self.file("boot"), format!("{}\n", self.boot)));
        if created.is_err() {
            return Err(self.unwritable(&format!("cannot write in {}", self.dir.display())));
        }
        // SAFETY: this process has one thread here (rigrun dispatches `job-run` before any
        // runtime starts), so the child may go on as a normal process.
        match unsafe { libc::fork() } {
            -1 => Err(format!("error cannot fork: {}", std::io::Error::last_os_error())),
            0 => {
                supervise(self);
                // SAFETY: ends the forked child without running the parent's exit handlers.
                unsafe { libc::_exit(0) }
            }
            pid => Ok(pid),
        }
    }

    /// The run's folder, its lease renewed, and its watchdog running (job.sh's `lease_up`).
    fn lease_up(&self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|_| format!("cannot create {}", self.dir.display()))?;
        File::create(self.dir.join("lease"))
            .map_err(|_| format!("cannot write in {}", self.dir.display()))?;
        let _ = std::fs::remove_file(self.dir.join("done"));
        if !self.watchdog_alive() {
            self.start_watchdog()?;
        }
        Ok(())
    }

    /// Starts the run's watchdog (once per run: the first job finds none; see
    /// `job_watchdog.rs`); Err: why it could not (without a watchdog no job may start).
    fn start_watchdog(&self) -> Result<(), String> {
        super::job_watchdog::start(&self.dir, &self.lease, &self.boot, [SUBCOMMAND, WATCH])
    }

    /// Whether the run's watchdog runs: its pid is alive and was written in this boot.
    fn watchdog_alive(&self) -> bool {
        let pid = read_word(&self.dir.join("watchdog.pid")).and_then(|p| p.parse::<i32>().ok());
        let boot = read_word(&self.dir.join("watchdog.boot")).unwrap_or_default();
        let this_boot = boot.is_empty() || boot == self.boot;
        // SAFETY: signal 0 only asks whether the process exists.
        pid.is_some_and(|p| p > 0 && this_boot && unsafe { libc::kill(p, 0) } == 0)
    }

    /// A write in the jobs folder failed: the disk is full, or `why` says what else.
    fn unwritable(&self, why: &str) -> String {
        if disk_full(&self.dir) {
            "full".into()
        } else {
            format!("error {why}")
        }
    }

    /// How the job ended, as the end marker says it (job.sh's `outcome`).
    fn outcome(&self) -> String {
        if let Some(rc) = read_word(&self.file("rc")) {
            rc
        } else if let Some(why) = read_word(&self.file("stopped")) {
            format!("stopped {why}")
        } else if disk_full(&self.dir) {
            "full".into()
        } else {
            "gone".into()
        }
    }

    /// The end marker: on stdout where the output ends, on stderr with the outcome.
    fn finish(&self, ending: &str) {
        say(1, &format!("{}:end\n", self.marker));
        say(2, &format!("{}:end {ending}\n", self.marker));
    }

    /// Stops the job's process group (job.sh's `stop`): says why unless it has exited, TERM,
    /// then KILL when it still has a live process after the grace. `supervisor` stands in for
    /// the pid file while that is not written yet.
    fn stop(&self, reason: &str, supervisor: i32) {
        let group = read_word(&self.file("pid"))
            .and_then(|p| p.parse::<i32>().ok())
            .unwrap_or(supervisor);
        if read_word(&self.file("rc")).is_none() {
            let _ = std::fs::write(self.file("stopped"), format!("{reason}\n"));
        }
        // SAFETY: kill only sends signals; a group that is gone is ESRCH.
        if unsafe { libc::kill(-group, libc::SIGTERM) } != 0 {
            // Not in its own session yet (it calls setsid first thing): the process alone.
            unsafe { libc::kill(group, libc::SIGTERM) };
            return;
        }
        let waited = std::time::Instant::now();
        while group_alive(group) && waited.elapsed() < GRACE {
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
}

/// Reads stdin for `stop <reason>` in a thread; at its end, stops the job only on this machine
/// (`stop`): over SSH it may be the connection, and the lease decides.
fn listen(job: JobArgs, supervisor: i32) {
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut stdin = std::io::stdin().lock();
        let reason = loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break job.stop_at_eof.then_some("rigrun let go".to_string()),
                Ok(_) => {
                    if let Some(rest) = line.trim_end().strip_prefix("stop") {
                        break Some(rest.trim_start().to_string());
                    }
                }
            }
        };
        if let Some(reason) = reason {
            let _held = STOPPING.lock();
            job.stop(&reason, supervisor);
        }
    });
}

/// The supervisor, in the forked child: the job's own session (its pid is the process group
/// job.sh and the watchdog signal), the command run in it, its output copied to the job's files
/// and, while the channel lasts, to it; the exit status in `.rc`. Nothing starts when the pid
/// and the status's room cannot be written.
fn supervise(job: &JobArgs) {
    // SAFETY: setsid only changes this process's session; it fails only for a group leader,
    // which a forked child is not.
    unsafe { libc::setsid() };
    // The channel's stdin stays with the follower (its stop words); the command reads nothing.
    if let Ok(null) = File::open("/dev/null") {
        // SAFETY: dup2 onto descriptor 0, which this process owns.
        unsafe { libc::dup2(null.as_raw_fd(), 0) };
    }
    // The exit status's room is taken before the command starts (see job.sh's `supervise`):
    // a disk too full for the pid and that room runs nothing (the outcome says `full`).
    let pid = std::process::id();
    let end_room = format!("{:32}\n", "");
    let roomed = std::fs::write(job.file("pid"), format!("{pid}\n"))
        .and_then(|()| std::fs::write(job.file("end"), end_room));
    if roomed.is_err() {
        return;
    }
    let child = Command::new(SH)
        .arg("-c")
        .arg(&job.command)
        .arg("rigrun")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "rigrun: cannot start sh on the host: {e}");
            keep_status(job, 127);
            return;
        }
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return;
    };
    let mut status_kept = false;
    let mut copies = [
        Copy::new(File::from(OwnedFd::from(stdout)), job.file("out"), 1),
        Copy::new(File::from(OwnedFd::from(stderr)), job.file("err"), 2),
    ];
    while copies.iter().any(|c| c.open) {
        let ready = readable(&copies);
        for (copy, _) in copies.iter_mut().zip(ready).filter(|(_, ready)| *ready) {
            copy.step();
        }
        // The status is kept as soon as the command exits (its children may hold the output
        // open for longer), as job.sh does.
        if !status_kept {
            if let Ok(Some(status)) = child.try_wait() {
                keep_status(job, exit_code(status));
                status_kept = true;
            }
        }
    }
    if !status_kept {
        if let Ok(status) = child.wait() {
            keep_status(job, exit_code(status));
        }
    }
}

/// The command's exit code as `sh` says it: its code, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Writes the exit status to `.rc`; where that fails (a full disk), into the room taken for it
/// before the command started, renamed `.rc`.
fn keep_status(job: &JobArgs, code: i32) {
    let text = format!("{code}\n");
    if std::fs::write(job.file("rc"), &text).is_ok() {
        return;
    }
    let in_room = OpenOptions::new()
        .write(true)
        .open(job.file("end"))
        .and_then(|mut room| room.write_all(text.as_bytes()));
    if in_room.is_ok() {
        let _ = std::fs::rename(job.file("end"), job.file("rc"));
    }
}

/// One of the command's output streams on its way to its file (appended, as `tee -a`) and to
/// the channel's descriptor `to` (given up when the channel is gone; the file goes on).
struct Copy {
    from: File,
    file: Option<File>,
    to: Option<RawFd>,
    open: bool,
}

impl Copy {
    fn new(from: File, path: PathBuf, to: RawFd) -> Copy {
        let file = OpenOptions::new().append(true).create(true).open(path).ok();
        Copy {
            from,
            file,
            to: Some(to),
            open: true,
        }
    }

    /// Copies what one read gives; at the end of the stream, marks it closed.
    fn step(&mut self) {
        let mut buf = [0u8; 64 * 1024];
        let n = match self.from.read(&mut buf) {
            Ok(0) => {
                self.open = false;
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return,
            Err(_) => {
                self.open = false;
                return;
            }
        };
        // A failed write to the file (a full disk) gives the file up, not the channel (tee's way).
        if self
            .file
            .as_mut()
            .is_some_and(|f| f.write_all(&buf[..n]).is_err())
        {
            self.file = None;
        }
        if let Some(fd) = self.to {
            if !write_fd(fd, &buf[..n]) {
                self.to = None;
            }
        }
    }
}

/// Which copies have something to read (or their end), waiting for one at most 200 ms, so that
/// the command's exit is noticed while its children still hold the output open.
fn readable(copies: &[Copy; 2]) -> [bool; 2] {
    let mut fds = copies.each_ref().map(|c| libc::pollfd {
        // A negative descriptor is skipped by poll: a closed stream.
        fd: if c.open { c.from.as_raw_fd() } else { -1 },
        events: libc::POLLIN,
        revents: 0,
    });
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures for the call's length.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
    fds.map(|fd| fd.fd >= 0 && fd.revents != 0)
}

/// Writes all of `data` to `fd`; false once the descriptor fails (the channel is gone: EPIPE,
/// SIGPIPE being ignored in rigrun).
fn write_fd(fd: RawFd, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        // SAFETY: writes from a valid slice of `data.len()` bytes.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        data = &data[n as usize..];
    }
    true
}

/// Says `text` on descriptor `fd` at once (unbuffered; a gone channel is no error here).
fn say(fd: RawFd, text: &str) {
    write_fd(fd, text.as_bytes());
}

/// Waits for the supervisor to exit, leaving it unreaped (its pid stays its own).
fn wait_for(pid: i32) {
    // SAFETY: an all-zero siginfo_t is a valid out value; waits for our own child.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOWAIT;
    while unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } < 0 {
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// The host's boot id (job.sh's `boot`): a job of another boot died with the host.
#[cfg(target_os = "linux")]
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().to_string())
        .unwrap_or_default()
}

/// No boot id elsewhere (job.sh reads none there either).
#[cfg(not(target_os = "linux"))]
fn boot_id() -> String {
    String::new()
}

/// Whether process group `group` exists (zombies included) where `/proc` cannot say more.
#[cfg(not(target_os = "linux"))]
fn group_alive(group: i32) -> bool {
    // SAFETY: signal 0 only asks whether the group exists.
    unsafe { libc::kill(-group, 0) == 0 }
}

/// Whether process group `group` has a process that is not a zombie (where nothing reaps them,
/// the exited stay in the table and must not hold a stop for its whole grace).
#[cfg(target_os = "linux")]
fn group_alive(group: i32) -> bool {
    match group_processes(group) {
        Some(members) => members.iter().any(|(_, state)| state != "Z"),
        // SAFETY: signal 0 only asks whether the group exists.
        None => unsafe { libc::kill(-group, 0) == 0 },
    }
}

/// The processes of process group `group` as `/proc` lists them, each its command's name and
/// its state letter; None when `/proc` cannot be read.
#[cfg(target_os = "linux")]
pub(super) fn group_processes(group: i32) -> Option<Vec<(String, String)>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let members = entries.flatten().filter_map(|entry| {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        // `pid (comm) state ppid pgrp ...`: the name may hold spaces and parentheses.
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(').map_or("", |(_, c)| c);
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        (pgrp == Some(group)).then(|| (comm.to_string(), state.to_string()))
    });
    Some(members.collect())
}

/// Whether the disk holding `dir` has no room left (under 1 KiB free, as `df` says 0).
fn disk_full(dir: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statvfs is a valid out value; `path` is a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return false;
    }
    (stat.f_bavail as u128) * (stat.f_frsize as u128) < 1024
}
