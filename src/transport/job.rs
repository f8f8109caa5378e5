//! Detached jobs: a point's command runs on the host in its own session, apart from the SSH
//! channel that started it, so that a lost connection does not lose the command or its output.
//!
//! `job.sh` keeps each job under the run's jobs folder on the host (`<name>.out`, `.err`, `.pid`
//! = its process group, `.rc` once it exited, `.stopped` with the reason when it was stopped).
//! The command's output goes to those files and, through `tee`, live to the channel; `tee`
//! carries on with the file when the channel is gone. rigrun counts the bytes it received per
//! stream; after a drop it reconnects with backoff and attaches again from those offsets
//! (`tail -c +N --pid`), so no byte is lost and none comes twice. Where the host has a copy of
//! this rigrun ([`Transport::use_job_runner`]), that copy starts jobs instead of `job.sh run`
//! (`job_runner.rs`, the same files at a fraction of the host's CPU); the rest stays `job.sh`'s.
//!
//! Each job keeps the host's boot id it started under (`.boot`): one followed again after a reboot
//! (a lost connection, a resumed run) is [`Rebooted`], not read from its files as if it had ended
//! (nor is its stale pid, perhaps another process's now, ever signalled). The lease renewal and
//! that answer tell the transport the host's boot id (`boot.rs`), which says a reboot once.
//!
//! Nothing outlives rigrun for long: a timeout or a dropped future writes `stop` on the
//! channel's stdin (the job's group is killed, TERM then KILL), closing the transport stops
//! every job still running, and a watchdog on the host stops them all by itself when rigrun has
//! not renewed the run's lease for the lease's length (a crash, SIGKILL, a partition).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::AsyncWriteExt;

use super::boot::{BootWatch, OnReboot};
use super::channel::{Channel, Program};
use super::wrapper::{self, carry, Output, Stream, StreamReader};
use super::{DiskFull, Link, Lost, Rebooted, Transport};
use crate::config::HostSpec;

const JOB: &str = include_str!("job.sh");

/// One command to run detached. `name` must be unique within the run (and the same when a
/// resumed run means to attach to a job it started before); letters, digits, `-` and `_`.
pub struct Job<'a> {
    pub name: &'a str,
    pub command: &'a str,
    pub timeout: Option<Duration>,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEnd {
    Exited(i32),
    /// Stopped on the host when its timeout passed.
    TimedOut,
}

/// The run's jobs on one host: where they live and the lease that keeps them alive.
pub(super) struct Jobs {
    host: String,
    reconnect_for: Duration,
    lease: Duration,
    dir: OnceLock<String>,
    keeper: Mutex<Option<tokio::task::AbortHandle>>,
    /// Whether any job was started (its folder then has a watchdog for close to end).
    started_any: AtomicBool,
    /// Why the connection could not be got back, once that happened.
    given_up: OnceLock<String>,
    /// The host's boot id as last seen, and who to tell of a reboot.
    boot: BootWatch,
    /// The host's copy of this rigrun, which starts jobs natively (`job_runner.rs`); without
    /// one, `job.sh` does.
    runner: OnceLock<String>,
}

impl Jobs {
    pub fn new(host: &str, spec: &HostSpec) -> Jobs {
        Jobs {
            host: host.to_string(),
            reconnect_for: spec.reconnect_for(),
            lease: spec.lease(),
            dir: OnceLock::new(),
            keeper: Mutex::new(None),
            started_any: AtomicBool::new(false),
            given_up: OnceLock::new(),
            boot: BootWatch::default(),
            runner: OnceLock::new(),
        }
    }

    fn dir(&self) -> Option<String> {
        self.dir.get().cloned()
    }

    /// The host's workdir the jobs folder is in (`<workdir>/.rigrun/jobs/...`), for messages.
    fn workdir(&self) -> String {
        let dir = self.dir().unwrap_or_default();
        dir.split("/.rigrun/jobs/").next().unwrap_or_default().to_string()
    }

    fn lease_secs(&self) -> String {
        self.lease.as_secs().to_string()
    }
}

impl Transport {
    /// Makes `dir` the run's jobs folder on the host and renews its lease every quarter of its
    /// length until the transport closes. The first job creates the folder and starts its
    /// watchdog, so that a run pays no round trip for them.
    pub fn start_jobs(self: &Arc<Self>, dir: &str) {
        let _ = self.jobs.dir.set(dir.to_string());
        let weak: Weak<Transport> = Arc::downgrade(self);
        let (dir, every) = (dir.to_string(), self.jobs.lease / 4);
        let keeper = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(transport) = weak.upgrade() else { return };
                match transport.job_action("lease", &dir).await {
                    // The host says its boot id with the renewal: a new one is a reboot.
                    Ok(boot_id) => drop(transport.jobs.boot.saw(&boot_id)),
                    Err(e) => tracing::info!(host = %transport.jobs.host, "lease not renewed: {e:#}"),
                }
            }
        });
        if let Ok(mut k) = self.jobs.keeper.lock() {
            *k = Some(keeper.abort_handle());
        }
    }

    /// Has jobs started by `path`, the host's copy of this rigrun (`rigrun job-run`), instead
    /// of `job.sh`: per job 2 execs and 2 forks on the host instead of 5 and 8.
    pub fn use_job_runner(&self, path: &str) {
        let _ = self.jobs.runner.set(path.to_string());
    }

    /// Watches the host's boot id from `boot_id` (the facts'): `on_reboot` is told once of each
    /// reboot that the lease's renewal or a job followed again finds.
    pub fn watch_boot(&self, boot_id: Option<String>, on_reboot: OnReboot) {
        self.jobs.boot.watch(boot_id, on_reboot);
    }

    /// The host's boot id as last seen (a server started under another one is gone).
    pub fn boot_id(&self) -> Option<String> {
        self.jobs.boot.current()
    }

    /// Whether the connection could not be got back within `reconnect_for` (or a Slurm host's
    /// allocation ended): the host stays lost for the rest of the run.
    pub fn gave_up(&self) -> bool {
        self.jobs.given_up.get().is_some()
    }

    /// The host is lost for the rest of the run, for `reason`: what still asks for it fails at
    /// once instead of waiting out `reconnect_for` again.
    pub(super) fn give_up(&self, reason: &str) {
        let _ = self.jobs.given_up.set(reason.to_string());
    }

    /// The host's inventory name.
    pub(super) fn jobs_host(&self) -> String {
        self.jobs.host.clone()
    }

    /// The host's workdir the jobs folder is in.
    pub(super) fn jobs_workdir(&self) -> String {
        self.jobs.workdir()
    }

    /// The run's jobs folder on the host, once prepared.
    pub(super) fn jobs_dir(&self) -> Result<String> {
        self.jobs
            .dir()
            .context("the run's jobs folder on the host was not prepared")
    }

    /// Runs `job` detached on the host and follows it to its end, through lost connections
    /// (each said through `on_warning`) for as long as the host's `reconnect_for` allows.
    /// A lost host, or a command that vanished there, is a [`Lost`] error; one that died with
    /// the host as it rebooted, [`Rebooted`].
    /// On a Slurm host the job runs on the allocated node, and ends [`Lost`] when the
    /// allocation did not outlive it (see `slurm.rs`).
    pub async fn run_job(
        &self,
        job: &Job<'_>,
        on_output: &mut (dyn FnMut(Stream, Output) + Send),
        on_warning: &mut (dyn FnMut(String) + Send),
    ) -> Result<JobEnd> {
        let end = self
            .run_detached(job, &self.on_node(job.command), on_output, on_warning)
            .await;
        match end {
            Ok(end) => self.check_allocation().await.map(|()| end),
            Err(e) => Err(e),
        }
    }

    /// [`Transport::run_job`] with `command` run as it is, where the link goes (on a Slurm
    /// host: the login node).
    pub(super) async fn run_detached(
        &self,
        job: &Job<'_>,
        command: &str,
        on_output: &mut (dyn FnMut(Stream, Output) + Send),
        on_warning: &mut (dyn FnMut(String) + Send),
    ) -> Result<JobEnd> {
        let dir = self.jobs_dir()?;
        if let Some(reason) = self.jobs.given_up.get() {
            return Err(anyhow!(Lost {
                reason: reason.clone()
            }));
        }
        let deadline = job.timeout.map(|t| Instant::now() + t);
        let mut readers: [StreamReader; 2] = Default::default();
        let mut action = "run";
        self.jobs.started_any.store(true, Ordering::Relaxed);
        loop {
            let broke = match self
                .follow(action, &dir, (job, command), deadline, &mut readers, on_output)
                .await
            {
                Ok(Some(trailer)) => {
                    readers[0].finish(Stream::Stdout, on_output);
                    readers[1].finish(Stream::Stderr, on_output);
                    return self.ending(&trailer);
                }
                Ok(None) => "the channel closed before the command's end".to_string(),
                Err(e) if matches!(self.link, Link::Local(_)) => return Err(e),
                Err(e) => format!("{e:#}"),
            };
            // The link may have been dead for up to `unnoticed` already: the host fails at most
            // `reconnect_for` after it went down, not after rigrun noticed.
            let lost_at = Instant::now();
            let unnoticed = self.unnoticed_for();
            on_warning(format!(
                "lost the connection while the command ran ({broke}); reconnecting while it goes on on the host \
                 (the host fails if the connection is not back within reconnect_for, {}, of going down)",
                humantime::format_duration(self.jobs.reconnect_for)
            ));
            let until = lost_at + self.jobs.reconnect_for.saturating_sub(unnoticed);
            if let Err(gone) = self.reconnect(until).await {
                self.give_up(&format!("{gone:#}"));
                return Err(gone);
            }
            on_warning(format!(
                "reconnected after {:.1}s; following the command from byte {} of its stdout and {} of its stderr",
                lost_at.elapsed().as_secs_f64(),
                readers[0].content_bytes,
                readers[1].content_bytes
            ));
            action = "attach";
        }
    }

    /// One channel's worth of following: the trailer of the job's end, or None when the channel
    /// broke first. Past `deadline` the job is told to stop.
    async fn follow(
        &self,
        action: &str,
        dir: &str,
        (job, command): (&Job<'_>, &str),
        deadline: Option<Instant>,
        readers: &mut [StreamReader; 2],
        on_output: &mut (dyn FnMut(Stream, Output) + Send),
    ) -> Result<Option<String>> {
        let marker = wrapper::new_marker();
        let offsets = readers.each_ref().map(|r| r.content_bytes.to_string());
        let (eof, lease) = (self.eof_means(), self.jobs.lease_secs());
        let args = [
            action,
            dir,
            job.name,
            &marker,
            eof,
            &offsets[0],
            &offsets[1],
            command,
            &lease,
        ];
        // Attaching and a host without the runner: job.sh (the runner itself hands a job that
        // exists already to job.sh).
        let program = match self.jobs.runner.get() {
            Some(runner) if action == "run" => Program::JobRunner(runner),
            _ => Program::Script(JOB),
        };
        let mut channel = self.spawn(program, &args).await?;
        let mut stop_on_drop = StopOnDrop(Some(channel.stdin_fd()));
        let carried = {
            let Channel {
                stdin,
                stdout,
                stderr,
                ..
            } = &mut channel;
            let carried = carry(stdout, stderr, &marker, readers, on_output);
            tokio::pin!(carried);
            match deadline {
                Some(at) => tokio::select! {
                    done = &mut carried => done?,
                    () = tokio::time::sleep_until(at.into()) => {
                        // Said once; the job's end (stopped) then comes on this channel.
                        let _ = stdin.write_all(b"stop timeout\n").await;
                        let _ = stdin.flush().await;
                        carried.await?
                    }
                },
                None => carried.await?,
            }
        };
        stop_on_drop.0 = None;
        channel.wait().await;
        Ok(carried)
    }

    /// What the end marker's trailer says: an exit code, a stop, or why the job is no more.
    fn ending(&self, trailer: &str) -> Result<JobEnd> {
        let host = &self.jobs.host;
        if let Ok(code) = trailer.parse() {
            return Ok(JobEnd::Exited(code));
        }
        let lost = |reason: String| Err(anyhow!(Lost { reason }));
        match trailer.split_once(' ').unwrap_or((trailer, "")) {
            ("stopped", "timeout") => Ok(JobEnd::TimedOut),
            ("stopped", "lease") => lost(format!(
                "{host} stopped the command by itself: rigrun was out of touch for longer than the lease ({})",
                humantime::format_duration(self.jobs.lease)
            )),
            ("stopped", "interrupted") => lost(format!("the command was stopped on {host} by an interrupt")),
            ("stopped", why) => lost(format!("the command was stopped on {host} ({why})")),
            ("full", _) => Err(anyhow!(DiskFull {
                reason: format!(
                    "the host's disk is full at {} (No space left on device)",
                    self.jobs.workdir()
                ),
            })),
            ("rebooted", now) => {
                self.jobs.boot.saw(now);
                Err(anyhow!(Rebooted {
                    reason: "the host rebooted (boot id changed) while the command ran".into()
                }))
            }
            ("gone", _) => lost(format!(
                "the command is gone from {host} without an exit status (was the host rebooted, or its workdir cleared?)"
            )),
            ("error", why) => bail!("cannot run the command on {host}: {why}"),
            _ => bail!("the command on {host} ended with `{trailer}`, which rigrun does not understand"),
        }
    }

    /// Stops every job of the run that may still run on the host and ends its watchdog, so
    /// that none outlives the run; quietly, since the connection may be gone (the lease then
    /// stops them). A run that started no job has no watchdog: nothing is sent then.
    pub(super) async fn close_jobs(&self) {
        if let Some(keeper) = self.jobs.keeper.lock().ok().and_then(|mut k| k.take()) {
            keeper.abort();
        }
        let Some(dir) = self.jobs.dir() else { return };
        // A host given up on is not asked again: its lease stops what is left there.
        if !self.jobs.started_any.load(Ordering::Relaxed) || self.gave_up() {
            return;
        }
        let closing = self.job_action("close", &dir);
        if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(15), closing).await {
            tracing::info!(host = %self.jobs.host, "cannot stop the run's commands: {e:#}");
        }
    }

    /// Runs one of `job.sh`'s short actions (lease, close) and checks that it ended well;
    /// returns what it said after its `0` (the lease: the host's boot id).
    async fn job_action(&self, action: &str, dir: &str) -> Result<String> {
        let trailer = self.short_action(&[action, dir, "-"], &[]).await?;
        match trailer.as_deref().map(|t| t.split_once(' ').unwrap_or((t, ""))) {
            Some(("0", said)) => Ok(said.trim().to_string()),
            Some(_) => {
                let other = trailer.unwrap_or_default();
                bail!("{}", other.strip_prefix("error ").unwrap_or(&other))
            }
            None => bail!("the connection broke"),
        }
    }

    /// Runs `job.sh` with `head` (action, folder, job name), then the marker and the usual
    /// placeholders, then `tail`; returns the trailer of its end (None: the channel broke).
    async fn short_action(&self, head: &[&str; 3], tail: &[&str]) -> Result<Option<String>> {
        let marker = wrapper::new_marker();
        let lease = self.jobs.lease_secs();
        let mut args = head.to_vec();
        args.extend([marker.as_str(), "keep", "0", "0", "-", &lease]);
        args.extend(tail);
        let mut channel = self.spawn(Program::Script(JOB), &args).await?;
        let mut readers: [StreamReader; 2] = Default::default();
        let carried = carry(
            &mut channel.stdout,
            &mut channel.stderr,
            &marker,
            &mut readers,
            &mut |_, _| {},
        )
        .await?;
        channel.wait().await;
        Ok(carried)
    }

    /// Stops the jobs whose names match `pattern` (a shell glob) for good and makes sure they
    /// are gone: TERM to each process group, KILL after `grace`, then waits until the group has
    /// no live process left and, where the host has nvidia-smi, until none of its pids holds
    /// GPU memory. Returns the process groups stopped (jobs that had ended count too). An error
    /// says what is left.
    pub async fn end_jobs(&self, pattern: &str, grace: Duration) -> Result<Vec<u32>> {
        let dir = self.jobs_dir()?;
        let tenths = (grace.as_millis() / 100).max(1).to_string();
        let trailer = self
            .short_action(&["end", &dir, pattern], &[&tenths])
            .await?
            .context("the connection broke while stopping the server")?;
        let mut words = trailer.split_whitespace();
        match words.next() {
            Some("0") => Ok(words.filter_map(|p| p.parse().ok()).collect()),
            _ => bail!("{}", trailer.strip_prefix("error ").unwrap_or(&trailer)),
        }
    }

    /// What the end of a job's stdin means on the host: on this machine rigrun let go (stop);
    /// over SSH it may only be the connection (keep: the lease decides).
    fn eof_means(&self) -> &'static str {
        match self.link {
            Link::Local(_) => "stop",
            Link::Ssh(_) => "keep",
        }
    }
}

/// Tells the job to stop when its follower is dropped (Ctrl-C, a step's timeout): one write on
/// the channel's stdin, made synchronously since a drop cannot wait.
struct StopOnDrop(Option<RawFd>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        const STOP: &[u8] = b"stop interrupted\n";
        if let Some(fd) = self.0 {
            // SAFETY: the guard is declared after the channel owning `fd`, so it is dropped (and
            // writes) while `fd` is still open; the write reads nothing beyond `STOP`.
            let _ = unsafe { libc::write(fd, STOP.as_ptr().cast(), STOP.len()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::wait_until_gone;

    /// A local transport whose jobs live in `dir`.
    async fn local(dir: &std::path::Path) -> Arc<Transport> {
        let transport = Arc::new(Transport::local_for_tests(dir).await);
        transport.start_jobs(&dir.join("jobs").display().to_string());
        transport
    }

    /// Runs `command` as job `name`; what it printed per stream, and how it ended.
    async fn run(
        transport: &Transport,
        name: &str,
        command: &str,
        timeout: Option<Duration>,
    ) -> (Vec<String>, Vec<String>, Result<JobEnd>) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let job = Job {
            name,
            command,
            timeout,
        };
        let end = transport
            .run_job(
                &job,
                &mut |stream, output| {
                    if let Output::Line(line) = output {
                        let line = super::super::line_text(line).into_owned();
                        if stream == Stream::Stdout {
                            out.push(line)
                        } else {
                            err.push(line)
                        }
                    }
                },
                &mut |_| {},
            )
            .await;
        (out, err, end)
    }

    /// Over SSH the end of stdin may be a lost connection, so only the word `StopOnDrop` writes
    /// stops a job there: checked with `keep`, the stdin held open.
    #[tokio::test]
    async fn the_word_written_on_drop_stops_a_job_whose_stdin_stays_open() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs").display().to_string();
        let pid_file = dir.path().join("child");
        let command = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
        let permit = Arc::new(tokio::sync::Semaphore::new(1))
            .acquire_owned()
            .await
            .unwrap();
        let args = ["run", &jobs, "j5", "M", "keep", "0", "0", &command, "120"];
        let channel = Channel::local(Program::Script(JOB), &args, permit).unwrap();
        while !pid_file.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(StopOnDrop(Some(channel.stdin_fd())));
        let child = std::fs::read_to_string(&pid_file).unwrap();
        assert!(wait_until_gone(child.trim()), "the job outlived the stop word");
        let stopped = std::fs::read_to_string(dir.path().join("jobs/j5.stopped")).unwrap();
        assert_eq!(stopped, "interrupted\n");
        drop(channel);
    }

    /// A job whose `.boot` names another boot than the host's (it was started before a reboot,
    /// not ended) is `Rebooted` when followed again: nothing of its files is read as output, and
    /// its stale pid (here a live process of someone else's, as after a reboot it may be) is
    /// neither waited on nor stopped by `close`. The lease's renewal says the host's boot id.
    #[tokio::test]
    async fn a_job_from_before_a_reboot_is_rebooted_and_its_stale_pid_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let transport = local(dir.path()).await;
        let jobs = dir.path().join("jobs");
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        assert_eq!(
            transport
                .job_action("lease", &jobs.display().to_string())
                .await
                .unwrap(),
            boot_id.trim()
        );
        let mut other = std::process::Command::new("setsid")
            .args(["sleep", "300"])
            .spawn()
            .unwrap();
        let pid = other.id().to_string();
        for (ext, text) in [
            ("out", "half a result\n".to_string()),
            ("err", String::new()),
            ("pid", format!("{pid}\n")),
            ("boot", "6f1b3c2e-0d4a-4b1e-9a57-3c1d2e4f5a6b\n".to_string()),
        ] {
            std::fs::write(jobs.join(format!("j6.{ext}")), text).unwrap();
        }
        let (out, _, end) = run(&transport, "j6", "echo started anew", None).await;
        let error = end.unwrap_err();
        assert!(crate::transport::is_rebooted(&error), "{error:#}");
        assert!(crate::transport::is_lost(&error), "a reboot is a kind of lost");
        assert_eq!(out, Vec::<String>::new(), "the old job's file read as its output");
        assert_eq!(transport.boot_id().as_deref(), Some(boot_id.trim()));
        transport
            .job_action("close", &jobs.display().to_string())
            .await
            .unwrap();
        assert_eq!(
            other.try_wait().unwrap(),
            None,
            "a stale pid's process was stopped"
        );
        assert!(!jobs.join("j6.stopped").exists());
        other.kill().unwrap();
        other.wait().unwrap();
    }

    /// `end` stops a job and, where the host has nvidia-smi, waits until none of its pids holds
    /// GPU memory: here an nvidia-smi on PATH that lists the job's process for its first three
    /// queries, as a driver does while it releases a killed process's memory.
    #[tokio::test]
    async fn end_waits_until_the_gpus_no_longer_list_the_jobs_processes() {
        let dir = tempfile::tempdir().unwrap();
        let transport = local(dir.path()).await;
        let (pid_file, count) = (dir.path().join("child"), dir.path().join("queries"));
        let command = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
        let following = tokio::spawn({
            let transport = transport.clone();
            async move { run(&transport, "v01-server-a", &command, None).await }
        });
        while !pid_file.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let fake = format!(
            "n=$(cat {c} 2>/dev/null || echo 0); echo $((n + 1)) > {c}; [ \"$n\" -lt 3 ] && cat {p}; exit 0\n",
            c = count.display(),
            p = pid_file.display()
        );
        std::fs::write(bin.join("nvidia-smi"), fake).unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(bin.join("nvidia-smi"), executable).unwrap();
        let script = dir.path().join("job.sh");
        std::fs::write(&script, JOB).unwrap();
        let jobs = dir.path().join("jobs").display().to_string();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let out = std::process::Command::new("sh")
            .args([
                &script.display().to_string(),
                "end",
                &jobs,
                "v01-*",
                "M",
                "keep",
                "0",
                "0",
                "-",
                "60",
                "5",
            ])
            .env("PATH", path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("M:start\nM:end 0 "), "{stderr}");
        let queries: u32 = std::fs::read_to_string(&count).unwrap().trim().parse().unwrap();
        assert!(
            queries >= 4,
            "ended after {queries} nvidia-smi queries, while the GPU still listed it"
        );
        let child = std::fs::read_to_string(&pid_file).unwrap();
        assert!(wait_until_gone(child.trim()), "the job outlived end");
        following.abort();
    }
}
