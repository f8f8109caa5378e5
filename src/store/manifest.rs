//! `run.json`: the context of every number in the run.

use chrono::{DateTime, Utc};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::Details;
use crate::config::reference::Reference;
use crate::config::slo::Slo;
use crate::events::{Event, Status};
use crate::facts::ServerReply;
use crate::point::PlannedSweep;

/// The format of run.json this rigrun writes. 0 stands for runs written before the field
/// existed (rigrun 0.1.0), whose layout is the same as 1's.
pub const FORMAT: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    /// See [`FORMAT`]; a reader refuses a format newer than its own.
    #[serde(default)]
    pub format: u32,
    pub run_id: String,
    /// `run --label TEXT`: the user's note on the run (`driver 580`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub tool: Tool,
    pub playbook: PlaybookInfo,
    pub inventory: InventoryInfo,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub status: Status,
    pub hosts: IndexMap<String, HostEntry>,
    /// The playbook's expected values, resolved, so that `show` can check them later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,
    /// The playbook's latency limits, so that `show` judges the run by them later.
    #[serde(default, skip_serializing_if = "Slo::is_empty")]
    pub slo: Slo,
    /// The sweeps as the run planned them (their points, and what `skip_if` skips per
    /// column), so that the tables give every planned point a row; None for runs made before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned: Option<Vec<PlannedSweep>>,
    /// How many lines of events.jsonl this manifest has folded in: a reader replays the rest
    /// (the manifest is rewritten at a bounded rate, the journal on every event).
    #[serde(default)]
    pub journaled: u64,
    /// The rigrun process writing the run, so that a reader can tell a run still going from
    /// one whose writer died (crashed, SIGKILLed, its machine rebooted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
    /// When `rigrun run --resume` went on with the run, once per resume: the run took one
    /// attempt more than this list is long.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<DateTime<Utc>>,
    /// The directory the run was started from, so that a resume reads the playbook's relative
    /// paths (its own file, scripts) as the first run did, from wherever it is started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Set by the reader: left `running` by a process that no longer exists (so interrupted).
    #[serde(skip)]
    pub abandoned: bool,
}

/// A process on a machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub host: String,
}

impl Process {
    /// This process, on this machine.
    pub fn this() -> Process {
        Process {
            pid: std::process::id(),
            host: this_host(),
        }
    }

    /// False only when it was on this machine and is gone (no rigrun with its pid runs here).
    pub fn may_be_alive(&self) -> bool {
        if self.host != this_host() {
            return true;
        }
        command_line(self.pid).is_some_and(|line| line.windows(6).any(|w| w == b"rigrun"))
    }
}

/// The command line of process `pid` on this machine; None when no such process runs. Linux
/// reads it from `/proc`, without starting a process.
#[cfg(target_os = "linux")]
fn command_line(pid: u32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline")).ok()
}

/// Unixes without `/proc` (macOS) ask `ps`.
#[cfg(not(target_os = "linux"))]
fn command_line(pid: u32) -> Option<Vec<u8>> {
    command_line_from_ps(pid)
}

/// The command line of process `pid` as POSIX `ps -o args=` prints it; None when no such
/// process runs or `ps` cannot be run. The fallback of unixes without `/proc`, compiled on
/// Linux too so that its tests run here.
#[cfg_attr(all(target_os = "linux", not(test)), allow(dead_code))]
fn command_line_from_ps(pid: u32) -> Option<Vec<u8>> {
    let out = std::process::Command::new("ps")
        .args(["-o", "args=", "-p", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    (out.status.success() && !out.stdout.is_empty()).then_some(out.stdout)
}

/// This machine's name, as the kernel knows it (`uname -n`; on Linux the same as
/// `/proc/sys/kernel/hostname`), through POSIX `gethostname`, which every unix has.
fn this_host() -> String {
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `name.len()` bytes into the buffer we own.
    if unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } != 0 {
        return String::new();
    }
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    String::from_utf8_lossy(&name[..end]).trim().to_string()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
    /// The git commit rigrun was built from; absent in runs made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlaybookInfo {
    pub path: String,
    pub name: String,
    /// The playbook file as it was when the run started.
    pub source: String,
    /// `-e` values given on the command line.
    pub extra_vars: Json,
    /// `run --repeat N`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// `--only AXIS=VALUE,...`, when given: the sweep points the run ran (older runs: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InventoryInfo {
    pub path: String,
    /// The inventory file as it was when the run started.
    pub source: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HostEntry {
    pub status: Option<Status>,
    #[serde(default)]
    pub labels: IndexMap<String, String>,
    #[serde(default)]
    pub facts: crate::facts::HostFacts,
    #[serde(default)]
    pub steps: Vec<StepEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the user must know that did not stop the host (shown again when the run ends).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The servers that died during a point on the host, and what came of each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_crashes: Vec<ServerCrash>,
    /// The server variants run on the host, by label, in the order they started.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub variants: IndexMap<String, VariantEntry>,
}

impl HostEntry {
    /// What the host's server said of itself at its steps that checked it (`verify-server`),
    /// the latest first.
    pub fn server_checks(&self) -> impl Iterator<Item = &ServerReply> {
        self.steps.iter().rev().filter_map(|s| s.details.server())
    }

    /// What each server variant's server said of itself once ready, by the variant's label, in
    /// the order they started.
    pub fn variant_servers(&self) -> impl Iterator<Item = (&str, &ServerReply)> {
        let startups = self.variants.iter();
        startups.filter_map(|(label, v)| Some((label.as_str(), v.startup.server()?)))
    }
}

/// One server variant on a host: its command, how its start went (launch → ready and → first
/// token, or why it failed with its log's tail) and how its stop went.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VariantEntry {
    pub command: String,
    pub status: Option<Status>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How its start went; what its server said of itself is typed in it.
    #[serde(default)]
    pub startup: Details,
    #[serde(default)]
    pub stop: Json,
}

/// A server that died during a point: where, why, and what came of it (see `Event::ServerCrashed`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerCrash {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The step and point it died during.
    pub at: String,
    pub cause: String,
    pub outcome: String,
    pub recovered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_seconds: Option<f64>,
    pub when: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepEntry {
    /// The server variant the step ran against; absent without variants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    pub index: usize,
    pub name: String,
    pub kind: String,
    /// The how-manyth time the step ran on the host (a resumed run runs some steps again).
    #[serde(default = "crate::events::first_attempt")]
    pub attempt: u32,
    pub status: Status,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the step reports; what the host's server said of itself is typed in it.
    #[serde(default)]
    pub details: Details,
}

impl Manifest {
    /// Folds one event into the manifest; returns whether anything changed worth rewriting.
    pub fn apply(&mut self, event: &Event, now: DateTime<Utc>) -> bool {
        match event {
            Event::RunResumed { pid, machine, .. } => self.resume(*pid, machine, now),
            Event::HostConnecting { host } => self.host(host).new_attempt(),
            Event::HostConnected { host, facts } => self.host(host).facts = facts.clone(),
            Event::GpusFound { host, gpus, source } => self.host(host).gpus_found(gpus, source),
            Event::StepStarted {
                host,
                index,
                name,
                kind,
                attempt,
                variant,
            } => {
                let step = StepEntry::running(variant, *index, name, kind, *attempt, now);
                self.host(host).steps.push(step);
            }
            Event::StepFinished {
                host,
                index,
                status,
                error,
                details,
                variant,
                ..
            } => {
                if let Some(step) = self.host(host).latest_step(variant, *index) {
                    step.finish(*status, error, details, now);
                }
            }
            Event::HostFinished {
                host,
                status,
                failed_step,
                error,
            } => self.host(host).finish(*status, failed_step, error),
            Event::Warning { host, message } => self.host(host).warnings.push(message.clone()),
            // The facts keep the boot id last seen, so that a resume compares with it.
            Event::HostRebooted { host, boot_id, .. } => {
                self.host(host).facts.boot_id = Some(boot_id.clone())
            }
            Event::VariantStarted {
                host,
                variant,
                command,
                ..
            } => self.host(host).variant_started(variant, command),
            Event::VariantReady {
                host,
                variant,
                status,
                error,
                startup,
            } => self.host(host).variant(variant).ready(*status, error, startup),
            Event::VariantStopped {
                host,
                variant,
                error,
                details,
            } => self.host(host).variant(variant).stopped(error, details),
            Event::ServerCrashed {
                host,
                variant,
                step,
                point,
                cause,
                outcome,
                recovered,
                ready_seconds,
            } => self.host(host).server_crashes.push(ServerCrash {
                variant: variant.clone(),
                at: format!("{step} {point}"),
                cause: cause.clone(),
                outcome: outcome.clone(),
                recovered: *recovered,
                ready_seconds: *ready_seconds,
                when: now,
            }),
            Event::Interrupted => self.mark_interrupted(now),
            Event::RunFinished { status } => self.finish(*status, now),
            _ => return false,
        }
        true
    }

    /// The run's end: how it went, and when.
    fn finish(&mut self, status: Status, now: DateTime<Utc>) {
        self.status = status;
        self.finished_at = Some(now);
    }

    /// A resume: the run goes on, written by this process.
    fn resume(&mut self, pid: u32, machine: &str, now: DateTime<Utc>) {
        self.status = Status::Running;
        self.finished_at = None;
        self.abandoned = false;
        self.process = Some(Process {
            pid,
            host: machine.to_string(),
        });
        self.resumed.push(now);
    }

    /// How many times a rigrun process worked on the run: 1, plus one per resume.
    pub fn attempts(&self) -> usize {
        1 + self.resumed.len()
    }

    fn host(&mut self, host: &str) -> &mut HostEntry {
        self.hosts.entry(host.to_string()).or_default()
    }

    /// Ctrl-C: whatever was running is marked interrupted, everything measured stays.
    fn mark_interrupted(&mut self, now: DateTime<Utc>) {
        for entry in self.hosts.values_mut() {
            for step in entry.steps.iter_mut().filter(|s| s.status == Status::Running) {
                step.status = Status::Interrupted;
                step.finished_at = Some(now);
            }
            if entry.status.is_none() {
                entry.status = Some(Status::Interrupted);
            }
        }
    }
}

impl HostEntry {
    /// The host connects (again): its status says how its latest attempt ended, so none yet.
    fn new_attempt(&mut self) {
        (self.status, self.failed_step, self.error) = (None, None, None);
    }

    /// GPUs learnt from another source than nvidia-smi; nvidia-smi's list, when it gave one, stands.
    fn gpus_found(&mut self, gpus: &[crate::facts::Gpu], source: &str) {
        let facts = &mut self.facts;
        if facts.gpus.is_empty() {
            (facts.gpus, facts.gpu_source) = (gpus.to_vec(), Some(source.to_string()));
            facts.gpu_count = Some(gpus.len() as u64);
        }
    }

    /// The latest run of step `index` (against `variant`): a resumed run runs some steps again.
    fn latest_step(&mut self, variant: &Option<String>, index: usize) -> Option<&mut StepEntry> {
        self.steps
            .iter_mut()
            .rev()
            .filter(|s| s.variant == *variant)
            .find(|s| s.index == index)
    }

    /// The host's end: how it went, and where and why it failed.
    fn finish(&mut self, status: Status, failed_step: &Option<String>, error: &Option<String>) {
        self.status = Some(status);
        self.failed_step = failed_step.clone();
        self.error = error.clone();
    }

    /// A server variant starts: a fresh entry, running.
    fn variant_started(&mut self, variant: &str, command: &str) {
        let entry = VariantEntry {
            command: command.to_string(),
            status: Some(Status::Running),
            ..VariantEntry::default()
        };
        self.variants.insert(variant.to_string(), entry);
    }

    /// The entry of server variant `variant`, made when missing.
    fn variant(&mut self, variant: &str) -> &mut VariantEntry {
        self.variants.entry(variant.to_string()).or_default()
    }
}

impl StepEntry {
    /// A step that has just started.
    fn running(
        variant: &Option<String>,
        index: usize,
        name: &str,
        kind: &str,
        attempt: u32,
        now: DateTime<Utc>,
    ) -> StepEntry {
        StepEntry {
            variant: variant.clone(),
            index,
            name: name.to_string(),
            kind: kind.to_string(),
            attempt,
            status: Status::Running,
            started_at: now,
            finished_at: None,
            error: None,
            details: Details::default(),
        }
    }

    /// The step's end: how it went, why not, what it reported, and when.
    fn finish(&mut self, status: Status, error: &Option<String>, details: &Json, now: DateTime<Utc>) {
        self.status = status;
        self.error = error.clone();
        self.details = details.clone().into();
        self.finished_at = Some(now);
    }
}

impl VariantEntry {
    /// How the variant's server came up (or why it did not).
    fn ready(&mut self, status: Status, error: &Option<String>, startup: &Json) {
        (self.status, self.error, self.startup) = (Some(status), error.clone(), startup.clone().into());
    }

    /// How its stop went; a stop that failed fails the variant.
    fn stopped(&mut self, error: &Option<String>, details: &Json) {
        self.stop = details.clone();
        if error.is_some() {
            (self.status, self.error) = (Some(Status::Failed), error.clone());
        }
    }
}

/// The first manifest of a run: what was asked, before anything happened.
pub fn manifest_for(
    config: &crate::config::Config,
    run_id: &str,
    planned: Vec<PlannedSweep>,
    started: DateTime<Utc>,
) -> Manifest {
    let hosts = config
        .hosts
        .iter()
        .map(|h| {
            let spec = config.host(h);
            let entry = HostEntry {
                labels: spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                ..HostEntry::default()
            };
            (h.clone(), entry)
        })
        .collect();
    Manifest {
        format: FORMAT,
        run_id: run_id.to_string(),
        label: None,
        tool: Tool {
            name: "rigrun".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            commit: Some(env!("RIGRUN_COMMIT").into()),
        },
        playbook: PlaybookInfo {
            path: config.playbook_path.display().to_string(),
            name: config.playbook.name.value.clone(),
            source: config.playbook_text.clone(),
            extra_vars: serde_json::to_value(&config.extra_vars).unwrap_or_default(),
            repeat: config.repeat,
            only: config.only.items(),
        },
        inventory: InventoryInfo {
            path: config.inventory_path.display().to_string(),
            source: config.inventory_text.clone(),
        },
        started_at: started,
        finished_at: None,
        status: Status::Running,
        hosts,
        references: config.references.clone(),
        slo: config.slo.clone(),
        planned: Some(planned),
        journaled: 0,
        process: Some(Process::this()),
        resumed: Vec::new(),
        cwd: std::env::current_dir().ok().map(|d| d.display().to_string()),
        abandoned: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_and_proc_read_the_same_command_lines() {
        // This test binary is `rigrun-<hash>`.
        let me = Process::this();
        assert!(me.may_be_alive());
        let from_ps = command_line_from_ps(me.pid).expect("ps knows this process");
        assert!(from_ps.windows(6).any(|w| w == b"rigrun"), "{from_ps:?}");
        assert!(command_line(me.pid).is_some());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        assert_eq!(command_line_from_ps(gone), None);
        assert_eq!(command_line(gone), None);
        let elsewhere = Process {
            pid: gone,
            host: format!("{}-elsewhere", this_host()),
        };
        assert!(
            elsewhere.may_be_alive(),
            "another machine's process is not judged here"
        );
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_host_is_the_name_proc_gives() {
        let proc = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(this_host(), proc.trim());
        assert!(!this_host().is_empty());
    }
}
