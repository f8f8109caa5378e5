//! Slurm hosts: the host is one node of an allocation on a cluster, reached through the login
//! node that its inventory entry describes.
//!
//! The link goes to the login node (over SSH, or this machine). [`Transport::allocate`] asks for
//! one node with `sbatch` (a holder job that only sleeps) and waits in the queue; from then on
//! every command runs on the node through `srun --jobid … --overlap` ([`Transport::on_node`]).
//! Files move through the login node (clusters share home and work filesystems). Detached jobs
//! are detached on the login node, their `srun` client among them, so a lost connection loses
//! neither the command nor its step on the node.
//!
//! Nothing is left behind: a guard on the login node (a detached job of the run, under the run's
//! lease) cancels the allocation when it is stopped, by `close`, by an interrupt, or by the
//! host's watchdog once rigrun has been silent for the lease (a crash, SIGKILL); the allocation's
//! own time limit is the last guard. `srun` says 0 when the node fails under it, so after each
//! detached job the allocation is asked whether it still runs ([`Transport::check_allocation`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use super::job::Job;
use super::{Lost, Transport};
use crate::config::slurm::SlurmSpec;
use crate::config::template::shell_quote;
use crate::facts::Allocation;

/// How often the queue is asked while the allocation waits in it: soon at first (an idle
/// cluster starts a job within a second), then every couple of seconds.
const QUEUE_POLL_FIRST: Duration = Duration::from_millis(250);
const QUEUE_POLL: Duration = Duration::from_secs(2);
/// The exit code that says the node does not see the run's jobs folder.
const UNSHARED: i32 = 97;
/// How long a release waits for Slurm to see the allocation gone.
const RELEASE_WAIT: Duration = Duration::from_secs(15);

/// A Slurm host's allocation: what was asked for, and what Slurm gave.
pub(super) struct Slurm {
    spec: SlurmSpec,
    /// The holder job's id, once `sbatch` (or the queue, for a resumed run) said it.
    job_id: OnceLock<String>,
    /// The node, once the allocation runs: commands go there from then on.
    node: OnceLock<String>,
    guard: Mutex<Option<tokio::task::AbortHandle>>,
    /// Whether it was given back: once is enough.
    released: AtomicBool,
}

impl Slurm {
    pub fn new(spec: &SlurmSpec) -> Slurm {
        Slurm {
            spec: spec.clone(),
            job_id: OnceLock::new(),
            node: OnceLock::new(),
            guard: Mutex::new(None),
            released: AtomicBool::new(false),
        }
    }
}

/// An allocation got: where it runs, how long it waited, and whether it is a resumed run's.
pub struct Allocated {
    pub allocation: Allocation,
    pub waited: Duration,
    /// The run's allocation from an earlier session, still running, rather than a new one.
    pub reattached: bool,
}

/// Where a job stands in Slurm's queue (`squeue -t all`).
#[derive(Debug, PartialEq, Eq)]
enum Queue {
    Waiting {
        reason: String,
    },
    Running {
        node: String,
    },
    /// Ended (or requeued after its node failed), with Slurm's state and reason.
    Ended {
        state: String,
        reason: String,
    },
    Gone,
}

impl Transport {
    /// Asks for the host's allocation (or, in a resumed run, finds the run's own still in the
    /// queue), says each wait in the queue through `on_wait` (job id, time waited, Slurm's
    /// reason), and returns once it runs. A request Slurm refuses, or one that can never be
    /// met, is an error in Slurm's words; the allocation is released then.
    pub async fn allocate(
        self: &Arc<Self>,
        on_wait: &mut (dyn FnMut(&str, Duration, &str) + Send),
    ) -> Result<Allocated> {
        let slurm = self.slurm()?;
        let name = self.allocation_name()?;
        let asked = format!(
            "found=$(squeue -u \"$(id -un)\" -h -n {name} -t PENDING,RUNNING,CONFIGURING,REQUEUED -o %i) || exit 1\n\
             case $found in\n\
             '') id=$(sbatch --parsable --job-name={name} --output=/dev/null {options} --wrap 'exec sleep infinity') || exit 1\n\
             \x20   echo \"new ${{id%%;*}}\" ;;\n\
             *) echo \"found $found\" ;;\n\
             esac",
            name = shell_quote(&name),
            options = slurm.spec.sbatch_options().join(" ")
        );
        let said = self.login_captured(&asked).await?;
        let (how, id) =
            parse_asked(&said.stdout).ok_or_else(|| refused(&self.jobs_host(), said.code, &said.stderr))?;
        let _ = slurm.job_id.set(id.clone());
        self.guard_allocation(&id);
        let started = Instant::now();
        let mut poll = QUEUE_POLL_FIRST;
        let node = loop {
            match self.queue(&id).await? {
                Queue::Running { node } => break node,
                Queue::Waiting { reason } if never_met(&reason) => {
                    self.release().await;
                    bail!(
                        "Slurm can never give job {id} what the host's `slurm:` block asks for ({reason}: {}); \
                         ask for less, or another partition",
                        reason_text(&reason)
                    );
                }
                Queue::Waiting { reason } => on_wait(&id, started.elapsed(), &reason),
                ended => {
                    self.release().await;
                    bail!("Slurm job {id} ended before it ran: {}", ended_text(&ended));
                }
            }
            tokio::time::sleep(poll).await;
            poll = (poll * 2).min(QUEUE_POLL);
        };
        let _ = slurm.node.set(node.clone());
        Ok(Allocated {
            allocation: Allocation {
                job_id: id,
                node,
                login_node: None,
            },
            waited: started.elapsed(),
            reattached: how == "found",
        })
    }

    /// `command` as it runs on the allocated node: through `srun` once the allocation runs,
    /// unchanged on other hosts (and on the login node before then).
    pub(super) fn on_node<'a>(&self, command: &'a str) -> std::borrow::Cow<'a, str> {
        let Some((id, _)) = self.allocated() else {
            return command.into();
        };
        format!(
            "exec srun --jobid={id} --overlap --nodes=1 --ntasks=1 --quiet sh -c {}",
            shell_quote(command)
        )
        .into()
    }

    /// Runs `command` on the allocated node once it has checked there that the node sees the
    /// run's jobs folder, written through the login node: files move through the login node, so
    /// a workdir the node does not share would lose every script and result.
    pub async fn node_output(&self, command: &str) -> Result<String> {
        let dir = self.jobs_dir()?;
        let checked = format!("test -d {} || exit {UNSHARED}\n{command}", shell_quote(&dir));
        let done = self.captured(&checked).await?;
        match done.code {
            0 => Ok(done.stdout),
            UNSHARED => bail!(
                "node {} does not see the host's workdir {} that the login node has: rigrun moves files \
                 through the login node, so the workdir must be on a filesystem both share; set the \
                 host's `workdir:` to one (home, a work or scratch filesystem)",
                self.allocated().map(|(_, node)| node).unwrap_or("?"),
                self.jobs_workdir()
            ),
            code => bail!("the node's facts exited with {code}: {}", done.stderr.trim()),
        }
    }

    /// Whether a URL's `host` is the allocated node's loopback (on a Slurm host once allocated):
    /// reached through the node, not from the login node.
    pub(super) fn on_the_node(&self, host: &str) -> bool {
        let loopback = matches!(host, "localhost" | "[::1]" | "::1") || host.starts_with("127.");
        loopback && self.allocated().is_some()
    }

    /// After a detached job on a Slurm host: whether the allocation still runs. `srun` says 0
    /// when the node fails under it, and a time limit reached looks like the command's TERM:
    /// either is [`Lost`] (the point runs again on resume), in Slurm's words, and the host is
    /// lost for the rest of the run.
    pub(super) async fn check_allocation(&self) -> Result<()> {
        let Some((id, node)) = self.allocated() else {
            return Ok(());
        };
        let reason = match self.queue(id).await? {
            Queue::Running { .. } => return Ok(()),
            Queue::Waiting { .. } => format!("node {node} failed under Slurm job {id}, which Slurm requeued"),
            ended => format!("Slurm job {id} on {node} ended: {}", ended_text(&ended)),
        };
        self.give_up(&reason);
        Err(anyhow!(Lost { reason }))
    }

    /// Gives a Slurm host's allocation back (nothing elsewhere): when the host is done, so that
    /// it is not held until the run ends. Its commands fail from then on.
    pub async fn release_allocation(&self) {
        self.release().await;
    }

    /// Cancels the allocation (if one was asked for) and waits until Slurm sees it gone; quietly,
    /// since the connection may be gone (the guard and the time limit then end it). Once.
    pub(super) async fn release(&self) {
        let Ok(slurm) = self.slurm() else { return };
        if slurm.released.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(guard) = slurm.guard.lock().ok().and_then(|mut g| g.take()) {
            guard.abort();
        }
        let Some(id) = slurm.job_id.get() else { return };
        let tenths = RELEASE_WAIT.as_millis() / 100;
        let command = format!(
            "scancel {id} || exit 1\nn=0\n\
             while squeue -h -j {id} -t PENDING,RUNNING,CONFIGURING,REQUEUED -o %i 2>/dev/null | grep -q .; do\n\
             \x20 n=$((n + 1)); [ $n -lt {tenths} ] || exit 1; sleep 0.1\ndone"
        );
        let released = tokio::time::timeout(
            RELEASE_WAIT + Duration::from_secs(5),
            self.login_captured(&command),
        );
        match released.await {
            Ok(Ok(done)) if done.code == 0 => {}
            Ok(Ok(done)) => {
                tracing::warn!(host = %self.jobs_host(), "cannot cancel Slurm job {id}: {}", done.stderr.trim())
            }
            Ok(Err(e)) => tracing::warn!(host = %self.jobs_host(), "cannot cancel Slurm job {id}: {e:#}"),
            Err(_) => {
                tracing::warn!(host = %self.jobs_host(), "Slurm job {id} was not gone within {RELEASE_WAIT:?}")
            }
        }
    }

    /// The job id and node once the allocation runs.
    pub(super) fn allocated(&self) -> Option<(&str, &str)> {
        let slurm = self.slurm.as_ref()?;
        Some((slurm.job_id.get()?, slurm.node.get()?))
    }

    fn slurm(&self) -> Result<&Slurm> {
        self.slurm
            .as_ref()
            .ok_or_else(|| anyhow!("{} is not a Slurm host", self.jobs_host()))
    }

    /// The holder job's name: the run's jobs folder in a few letters, so that a resumed run
    /// (the same folder) finds its allocation again and no other run's.
    fn allocation_name(&self) -> Result<String> {
        use sha2::Digest;
        let dir = self.jobs_dir()?;
        let digest = sha2::Sha256::digest(dir.as_bytes());
        Ok(format!(
            "rigrun-{}-{}",
            self.jobs_host(),
            hex::encode(&digest[..4])
        ))
    }

    /// Keeps a guard on the login node while the allocation exists: a detached job of the run
    /// that cancels it when stopped (see the module's doc). Stopped itself by [`release`].
    fn guard_allocation(self: &Arc<Self>, id: &str) {
        let transport = Arc::clone(self);
        let (name, command) = (format!("slurm-{id}"), guard_command(&format!("scancel {id}")));
        let guard = tokio::spawn(async move {
            let job = Job {
                name: &name,
                command: &command,
                timeout: None,
            };
            let kept = transport
                .run_detached(&job, &command, &mut |_, _| {}, &mut |said| {
                    tracing::info!(host = %transport.jobs_host(), "the allocation's guard: {said}")
                })
                .await;
            if let Err(e) = kept {
                tracing::info!(host = %transport.jobs_host(), "the allocation's guard ended: {e:#}");
            }
        });
        if let Some(slurm) = &self.slurm {
            if let Ok(mut g) = slurm.guard.lock() {
                *g = Some(guard.abort_handle());
            }
        }
    }

    /// Where job `id` stands, asked on the login node.
    async fn queue(&self, id: &str) -> Result<Queue> {
        let said = self
            .login_captured(&format!("squeue -h -t all -j {id} -o '%T|%r|%N'"))
            .await?;
        if said.code != 0 && said.stderr.contains("Invalid job id") {
            return Ok(Queue::Gone);
        }
        if said.code != 0 {
            bail!(
                "cannot ask Slurm about job {id}: squeue said {}",
                said.stderr.trim()
            );
        }
        Ok(parse_queue(&said.stdout))
    }
}

/// The guard's shell: it waits until its job is stopped, then runs `cancel` (words without a
/// single quote). A stop TERMs the job's whole process group, the `tee`s that carry its output
/// included: the shell ignores SIGPIPE, since dash writes to its stderr as the TERM interrupts
/// `wait` and that write to a dead pipe killed it before its trap ran (1 stop in 4), and `cancel`
/// runs in a session of its own, out of reach of the KILL that follows the TERM.
fn guard_command(cancel: &str) -> String {
    format!(
        "trap '' PIPE\n\
         trap 'setsid {cancel} </dev/null >/dev/null 2>&1 & exit 0' TERM INT HUP\n\
         while :; do sleep 86400 & wait $!; done"
    )
}

/// `new ID` or `found ID` from the allocation's request; None when it said neither.
fn parse_asked(stdout: &str) -> Option<(String, String)> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("new ") || l.starts_with("found "))?;
    let (how, ids) = line.split_once(' ')?;
    // Two of the run's jobs in the queue would be a bug of an earlier session: the first serves.
    let id = ids.split_whitespace().next()?;
    id.chars()
        .all(|c| c.is_ascii_digit() || c == '_')
        .then(|| (how.to_string(), id.to_string()))
}

/// Why the login node gave no allocation, in Slurm's words and what to do.
fn refused(host: &str, code: i32, stderr: &str) -> anyhow::Error {
    let said = stderr.trim();
    if code == 127 || said.contains("not found") {
        return anyhow!(
            "{host}'s login node has no Slurm commands (sbatch, squeue): {said}; is it a Slurm login node, \
             and are they on the PATH of a non-interactive shell?"
        );
    }
    anyhow!("Slurm refused the allocation the host's `slurm:` block asks for: {said}")
}

/// The first line of `squeue -t all -j ID -o '%T|%r|%N'`.
fn parse_queue(stdout: &str) -> Queue {
    let Some(line) = stdout.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return Queue::Gone;
    };
    let mut fields = line.splitn(3, '|');
    let state = fields.next().unwrap_or_default().to_string();
    let reason = fields.next().unwrap_or_default().to_string();
    let node = fields.next().unwrap_or_default().trim().to_string();
    match state.as_str() {
        "RUNNING" if !node.is_empty() => Queue::Running { node },
        "PENDING" | "CONFIGURING" | "RUNNING" => Queue::Waiting { reason },
        _ => Queue::Ended { state, reason },
    }
}

/// Pending reasons that no wait ends: the request does not fit the partition or the account.
fn never_met(reason: &str) -> bool {
    matches!(
        reason,
        "PartitionConfig"
            | "PartitionNodeLimit"
            | "PartitionTimeLimit"
            | "BadConstraints"
            | "InvalidAccount"
            | "InvalidQOS"
            | "DependencyNeverSatisfied"
    ) || (reason.starts_with("QOSMax") || reason.starts_with("AssocMax")) && reason.ends_with("PerJob")
}

/// Slurm's pending reason, in words for the common ones.
fn reason_text(reason: &str) -> &str {
    match reason {
        "Priority" => "jobs of higher priority are ahead",
        "Resources" => "waiting for a node to free up",
        "BeginTime" => "held until its begin time",
        "PartitionConfig" => "no node of the partition has what is asked for",
        "PartitionNodeLimit" | "PartitionTimeLimit" => "the partition's limits are lower than the request",
        "BadConstraints" => "no node has the constraint asked for",
        "ReqNodeNotAvail" => "the nodes it needs are down or drained",
        "None" | "" => "being scheduled",
        other => other,
    }
}

/// How an ended job ended, in words.
fn ended_text(queue: &Queue) -> String {
    let Queue::Ended { state, reason } = queue else {
        return "it is gone from Slurm's queue".into();
    };
    let words = match state.as_str() {
        "TIMEOUT" => "its time limit was reached (the `slurm.time` of the inventory)",
        "NODE_FAIL" => "its node failed",
        "CANCELLED" => "it was cancelled (scancel, or an operator)",
        "PREEMPTED" => "it was preempted by a job of higher priority",
        "BOOT_FAIL" => "its node failed to boot",
        "OUT_OF_MEMORY" => "it ran out of memory",
        "COMPLETING" => "it is ending",
        s if s.starts_with("REQUEUE") => "it was requeued (its node failed, or an operator requeued it)",
        _ => "",
    };
    match (words.is_empty(), reason.as_str()) {
        (true, "" | "None") => state.clone(),
        (true, _) => format!("{state} ({reason})"),
        (false, "" | "None") => format!("{words} ({state})"),
        (false, _) => format!("{words} ({state}, {reason})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether process group `group` has a `sleep` in it: the guard is in its loop, its traps set.
    #[cfg(target_os = "linux")]
    fn sleeping(group: i32) -> bool {
        let members = super::super::job_runner::group_processes(group).unwrap_or_default();
        members.iter().any(|(name, _)| name == "sleep")
    }

    /// Polls `ready` every 10 ms for up to `within`; its first answer, or None.
    #[cfg(target_os = "linux")]
    async fn poll<T>(within: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(found) = ready() {
                return Some(found);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The guard runs as a detached job through job.sh, and is TERMed with its whole process
    /// group as the watchdog does it (KILL 2 s later): each time, its cancel runs. Twenty stops,
    /// since the SIGPIPE it once died of came 1 time in 4.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_guard_cancels_whenever_its_group_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let transport = Arc::new(Transport::local_for_tests(dir.path()).await);
        let jobs = dir.path().join("jobs");
        transport.start_jobs(&jobs.display().to_string());
        for n in 0..20 {
            let (name, cancelled) = (format!("guard-{n}"), dir.path().join(format!("cancelled-{n}")));
            let command = guard_command(&format!("touch {}", cancelled.display()));
            let runner = Arc::clone(&transport);
            let job = tokio::spawn(async move {
                let job = Job {
                    name: &name,
                    command: &command,
                    timeout: None,
                };
                runner
                    .run_detached(&job, &command, &mut |_, _| {}, &mut |_| {})
                    .await
            });
            let pid_file = jobs.join(format!("guard-{n}.pid"));
            let group = poll(Duration::from_secs(10), || {
                let group = std::fs::read_to_string(&pid_file)
                    .ok()?
                    .trim()
                    .parse::<i32>()
                    .ok()?;
                sleeping(group).then_some(group)
            })
            .await
            .expect("the guard never started its loop");
            // SAFETY: kill only sends signals, to the guard's own process group.
            unsafe { libc::kill(-group, libc::SIGTERM) };
            let seen = poll(Duration::from_secs(2), || cancelled.exists().then_some(())).await;
            // SAFETY: as above.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            // Stopped without a word in its files, the job ends gone: only the cancel matters.
            let _gone = job.await.unwrap();
            assert!(
                seen.is_some() || cancelled.exists(),
                "stop {n}: the guard was stopped without cancelling"
            );
        }
    }

    #[test]
    fn the_queue_is_read_in_its_states() {
        assert_eq!(
            parse_queue("RUNNING|None|gpu07\n"),
            Queue::Running { node: "gpu07".into() }
        );
        assert_eq!(
            parse_queue("PENDING|Priority|\n"),
            Queue::Waiting {
                reason: "Priority".into()
            }
        );
        assert_eq!(
            parse_queue("TIMEOUT|None|gpu07\n"),
            Queue::Ended {
                state: "TIMEOUT".into(),
                reason: "None".into()
            }
        );
        assert_eq!(parse_queue(""), Queue::Gone);
    }

    #[test]
    fn the_request_says_which_job() {
        assert_eq!(parse_asked("new 42\n"), Some(("new".into(), "42".into())));
        assert_eq!(
            parse_asked("motd\nfound 7\n8\n"),
            Some(("found".into(), "7".into()))
        );
        assert_eq!(parse_asked("new sbatch: error\n"), None);
        assert_eq!(parse_asked(""), None);
    }

    #[test]
    fn some_reasons_are_never_met() {
        for reason in ["PartitionConfig", "QOSMaxGRESPerJob", "AssocMaxNodesPerJob"] {
            assert!(never_met(reason), "{reason}");
        }
        for reason in [
            "Priority",
            "Resources",
            "ReqNodeNotAvail",
            "QOSMaxJobsPerUserLimit",
        ] {
            assert!(!never_met(reason), "{reason}");
        }
    }

    #[test]
    fn an_ended_job_is_said_in_words() {
        let timeout = Queue::Ended {
            state: "TIMEOUT".into(),
            reason: "None".into(),
        };
        assert!(ended_text(&timeout).starts_with("its time limit was reached"));
        let odd = Queue::Ended {
            state: "SPECIAL_EXIT".into(),
            reason: "x".into(),
        };
        assert_eq!(ended_text(&odd), "SPECIAL_EXIT (x)");
        let held = Queue::Ended {
            state: "REQUEUE_HOLD".into(),
            reason: "JobHeldAdmin".into(),
        };
        assert!(
            ended_text(&held).starts_with("it was requeued"),
            "{}",
            ended_text(&held)
        );
        assert_eq!(ended_text(&Queue::Gone), "it is gone from Slurm's queue");
    }
}
