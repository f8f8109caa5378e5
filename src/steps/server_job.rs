//! A server rigrun started as a detached job of the run (`start-server`, a variant's server), as
//! the step that started it and the sweeps that measure it share it: its follower, the last
//! lines it printed, how it ended, and how to start it again after a crash.
//!
//! A restarted server is a new job named after the first (`<name>-r1`, `<name>-r2`, …), so that
//! stopping the jobs that match the first name's pattern stops every one of them.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::task::JoinHandle;

use super::server_probe::wait_until_up;
use super::HostCtx;
use crate::events::Event;
use crate::transport::{line_text, Job, JobEnd, Output};

/// Lines of its output kept in memory (the log file keeps all of them).
const TAIL_LINES: usize = 20;

/// Lines of its log quoted when a server exits.
const GONE_LINES: usize = 5;

/// How long a server that stopped answering may take to exit after SIGTERM, before a restart.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The last lines the server printed, and how it ended if it did.
#[derive(Default)]
pub struct Watch {
    tail: VecDeque<String>,
    ended: Option<Ended>,
}

/// How a server's job ended: it exited (or was stopped), the host rebooted under it, or rigrun
/// lost the host it ran on.
#[derive(Clone, Debug, PartialEq)]
pub enum Ended {
    Exited(String),
    Rebooted(String),
    HostLost(String),
}

impl Watch {
    /// Why the server is gone, with its last lines; None while it runs.
    pub fn gone(watch: &Mutex<Watch>) -> Option<String> {
        let w = watch.lock().ok()?;
        let how = match w.ended.clone()? {
            Ended::Exited(how) | Ended::Rebooted(how) | Ended::HostLost(how) => how,
        };
        Some(format!(
            "the server exited ({how}); its last lines: {}",
            last_words(&w.tail)
        ))
    }

    /// Why the server's process is gone, when it exited on the host or the host rebooted (not
    /// when rigrun lost the host it runs on: that is the host's failure, not the server's), and
    /// whether it was the reboot.
    pub fn exited(watch: &Mutex<Watch>) -> Option<(String, bool)> {
        let rebooted = match watch.lock().ok()?.ended {
            Some(Ended::Exited(_)) => false,
            Some(Ended::Rebooted(_)) => true,
            _ => return None,
        };
        Some((Watch::gone(watch)?, rebooted))
    }

    /// The last lines the server printed (at most [`TAIL_LINES`]).
    pub fn tail(watch: &Mutex<Watch>) -> Vec<String> {
        watch
            .lock()
            .map(|w| w.tail.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// A server's last non-blank lines, where a bad flag or an out-of-memory error is said.
fn last_words(tail: &VecDeque<String>) -> String {
    let said: Vec<&str> = tail
        .iter()
        .map(|l| l.as_str())
        .filter(|l| !l.trim().is_empty())
        .collect();
    said[said.len().saturating_sub(GONE_LINES)..].join(" | ")
}

/// Runs the server as the run's detached job `name` (see `transport/job.rs`: it outlives a
/// lost connection and is followed again); its output goes to `log_path` here, its warnings
/// are said under `label`. Aborting the task stops it on the host.
pub fn spawn_job(
    ctx: &HostCtx,
    name: &str,
    (label, command): (&str, &str),
    log_path: &Path,
    watch: Arc<Mutex<Watch>>,
) -> Result<JoinHandle<()>> {
    let mut log = std::fs::File::create(log_path)?;
    let transport = ctx.transport.clone();
    let (name, command) = (name.to_string(), command.to_string());
    let (events, host, label) = (ctx.events.clone(), ctx.host.clone(), label.to_string());
    Ok(tokio::spawn(async move {
        let tail_watch = watch.clone();
        let mut on_output = move |_stream, output: Output| {
            let Output::Line(line) = output else { return };
            let line = line_text(line);
            let _ = writeln!(log, "{line}");
            if let Ok(mut w) = tail_watch.lock() {
                if w.tail.len() == TAIL_LINES {
                    w.tail.pop_front();
                }
                w.tail.push_back(line.into_owned());
            }
        };
        // The connection lost and got back: said once.
        let mut on_warning = |message: String| {
            let _ = events.send(Event::Notice {
                host: host.clone(),
                message: format!("{label}: {message}"),
            });
        };
        let job = Job {
            name: &name,
            command: &command,
            timeout: None,
        };
        let ended = match transport.run_job(&job, &mut on_output, &mut on_warning).await {
            Ok(JobEnd::Exited(code)) => Ended::Exited(exit_words(code)),
            Ok(JobEnd::TimedOut) => Ended::Exited("stopped".to_string()),
            Err(e) if crate::transport::is_rebooted(&e) => Ended::Rebooted(format!("{e:#}")),
            Err(e) => Ended::HostLost(format!("{e:#}")),
        };
        if let Ok(mut w) = watch.lock() {
            w.ended = Some(ended);
        }
    }))
}

/// `exit code 1`, or `killed by signal 9 (exit code 137)` where the shell's 128 + N says so.
fn exit_words(code: i32) -> String {
    let signal = |n: i32| match n {
        6 => " (SIGABRT)",
        9 => " (SIGKILL: killed, e.g. by the kernel's out-of-memory killer)",
        11 => " (SIGSEGV)",
        15 => " (SIGTERM)",
        _ => "",
    };
    match code {
        129..=192 => format!(
            "killed by signal {}{}, exit code {code}",
            code - 128,
            signal(code - 128)
        ),
        _ => format!("exit code {code}"),
    }
}

/// What starts the server again: its command, where it answers, how long it may take.
pub struct Launch {
    /// The first job's name; restarts are `<name>-r<N>`.
    pub name: String,
    /// Said with its warnings: the step's name, or `server`.
    pub label: String,
    pub command: String,
    pub url: String,
    pub api_key: Option<String>,
    /// How long it may take to answer after a (re)start.
    pub wait: Duration,
    /// How many times it may be started again after a crash.
    pub restarts: u32,
    /// Its first log; restarts log beside it (`server.restart1.log`, …).
    pub log: PathBuf,
}

/// The job running now, and how many restarts it took.
struct Current {
    /// The job's name on the host.
    name: String,
    task: Option<JoinHandle<()>>,
    watch: Arc<Mutex<Watch>>,
    restarts: u32,
}

/// A started server, shared (cheap to clone) between the step that stops it and the sweeps
/// that watch it and start it again. Dropping the last handle stops it on the host.
#[derive(Clone)]
pub struct ServerJob {
    launch: Arc<Launch>,
    current: Arc<Mutex<Current>>,
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl ServerJob {
    /// Starts the server as a job of the run.
    pub fn spawn(ctx: &HostCtx, launch: Launch) -> Result<ServerJob> {
        let watch = Arc::new(Mutex::new(Watch::default()));
        let label = (launch.label.as_str(), launch.command.as_str());
        let task = spawn_job(ctx, &launch.name, label, &launch.log, watch.clone())?;
        let current = Current {
            name: launch.name.clone(),
            task: Some(task),
            watch,
            restarts: 0,
        };
        Ok(ServerJob {
            launch: Arc::new(launch),
            current: Arc::new(Mutex::new(current)),
        })
    }

    pub fn launch(&self) -> &Launch {
        &self.launch
    }

    /// The watch of the job running now.
    pub fn watch(&self) -> Arc<Mutex<Watch>> {
        self.current.lock().expect("server job").watch.clone()
    }

    /// How many times the server was started again.
    pub fn restarts(&self) -> u32 {
        self.current.lock().expect("server job").restarts
    }

    /// Stops following the server, which stops it on the host (see `transport/job.rs`).
    pub fn abort(&self) {
        if let Some(task) = self.current.lock().expect("server job").task.take() {
            task.abort();
        }
    }

    /// The follower of the job running now, to wait for its end after the job was stopped.
    pub fn take_task(&self) -> Option<JoinHandle<()>> {
        self.current.lock().expect("server job").task.take()
    }

    /// Starts the server again after it exited, within its bounded number of restarts and after
    /// a back-off (5 s, 10 s, 20 s, …): the time it took to answer again, or why it did not.
    pub async fn restart(&self, ctx: &HostCtx) -> Result<f64, String> {
        let n = self.restarts() + 1;
        if n > self.launch.restarts {
            return Err(format!(
                "it was not started again: it may be restarted {} time(s) (`restarts:`), and was",
                self.launch.restarts
            ));
        }
        // A server that stopped answering may still run: it goes before the new one starts.
        let old = self.current.lock().expect("server job").name.clone();
        let stopped = ctx.transport.end_jobs(&old, STOP_GRACE).await;
        stopped.map_err(|e| format!("it could not be stopped before starting it again: {e:#}"))?;
        tokio::time::sleep(Duration::from_secs(5 << (n - 1).min(4))).await;
        let watch = Arc::new(Mutex::new(Watch::default()));
        let log = crate::store::beside(&self.launch.log, &format!(".restart{n}.log"));
        let name = format!("{}-r{n}", self.launch.name);
        let label = (self.launch.label.as_str(), self.launch.command.as_str());
        let task = spawn_job(ctx, &name, label, &log, watch.clone()).map_err(|e| format!("{e:#}"))?;
        let launched = Instant::now();
        {
            let mut current = self.current.lock().expect("server job");
            if let Some(old) = current.task.replace(task) {
                old.abort();
            }
            (current.name, current.watch, current.restarts) = (name, watch.clone(), n);
        }
        let endpoint = ctx
            .transport
            .http_endpoint(&self.launch.url)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let gone = move || Watch::gone(&watch);
        let key = self.launch.api_key.as_deref();
        match wait_until_up(&endpoint, self.launch.wait, key, &gone).await {
            Ok(_) => Ok(launched.elapsed().as_secs_f64()),
            Err(e) => Err(format!("started again (restart {n}), it did not come up: {e:#}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_code_above_128_is_said_as_the_signal_that_killed_the_server() {
        assert_eq!(exit_words(1), "exit code 1");
        assert_eq!(
            exit_words(137),
            "killed by signal 9 (SIGKILL: killed, e.g. by the kernel's out-of-memory killer), exit code 137"
        );
        assert_eq!(exit_words(134), "killed by signal 6 (SIGABRT), exit code 134");
    }

    #[test]
    fn only_an_exit_on_the_host_counts_as_the_server_gone_by_itself() {
        let watch = Mutex::new(Watch::default());
        assert_eq!(Watch::exited(&watch), None);
        for line in ["loading", "", "torch.OutOfMemoryError: CUDA out of memory"] {
            watch.lock().unwrap().tail.push_back(line.into());
        }
        watch.lock().unwrap().ended = Some(Ended::HostLost("h: connection lost".into()));
        assert_eq!(Watch::exited(&watch), None, "a lost host is the host's failure");
        watch.lock().unwrap().ended = Some(Ended::Exited("exit code 1".into()));
        let said = "the server exited (exit code 1); its last lines: loading | torch.OutOfMemoryError: CUDA out of memory";
        assert_eq!(Watch::exited(&watch).unwrap(), (said.to_string(), false));
        watch.lock().unwrap().ended = Some(Ended::Rebooted("the host rebooted".into()));
        assert!(Watch::exited(&watch).unwrap().1, "gone with the host's reboot");
    }
}
