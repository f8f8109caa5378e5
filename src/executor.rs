//! The executor: one task per host (steps in order), hosts in parallel. A host that fails stops
//! only itself. Everything that happens goes out as events to the store and the progress display.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use chrono::Utc;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;

use crate::config::{template, Builtins, Config, Connection};
use crate::events::{Event, EventSender, Status};
use crate::plan;
use crate::progress::Progress;
use crate::steps::{self, HostCtx};
use crate::store::{manifest_for, RunDir};
use crate::transport::Transport;

pub struct RunOptions {
    pub runs_dir: PathBuf,
    /// Hosts run at once; all when None.
    pub forks: Option<usize>,
}

/// How a run ended, for the summary and the exit code.
pub struct RunOutcome {
    pub run_dir: PathBuf,
    pub status: Status,
    /// One line per failed host: which step and why.
    pub failures: Vec<String>,
}

/// Where the rigrun binary lives on an SSH host once uploaded (see `{{ rigrun }}`).
const REMOTE_RIGRUN: &str = "bin/rigrun";

/// Transports still open, so that Ctrl-C can close them after stopping the hosts' tasks.
type OpenTransports = Arc<Mutex<Vec<Arc<Transport>>>>;

pub async fn run(config: Arc<Config>, opts: RunOptions, progress: Progress) -> Result<RunOutcome> {
    let started = Utc::now();
    let run_id = RunDir::new_run_id(&opts.runs_dir, &config.playbook.name.value, started);
    let run_dir = RunDir::create(&opts.runs_dir, manifest_for(&config, &run_id, started))?;
    let run_path = run_dir.path.clone();
    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let (store_failed_tx, store_failed) = oneshot::channel();
    let store = spawn_store(run_dir, progress, rx, store_failed_tx);
    let _ = tx.send(Event::RunStarted {
        run_id: run_id.clone(),
        hosts: config.hosts.clone(),
    });

    let control_dir = tempfile::Builder::new()
        .prefix("rigrun-")
        .tempdir_in("/tmp")
        .context("cannot create a control directory in /tmp")?;
    let open: OpenTransports = Arc::default();
    let forks = Arc::new(Semaphore::new(opts.forks.unwrap_or(config.hosts.len()).max(1)));
    let mut tasks = JoinSet::new();
    for host in &config.hosts {
        let job = HostJob {
            host: host.clone(),
            config: config.clone(),
            events: tx.clone(),
            run_id: run_id.clone(),
            run_dir: run_path.clone(),
            control_dir: control_dir.path().to_path_buf(),
            open: open.clone(),
        };
        let forks = forks.clone();
        tasks.spawn(async move {
            let _turn = forks.acquire_owned().await;
            job.run().await
        });
    }

    let status = wait_or_interrupt(&mut tasks, &tx, store_failed).await;
    let transports: Vec<_> = open
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default();
    for transport in transports {
        transport.close().await;
    }
    let _ = tx.send(Event::RunFinished { status });
    drop(tx);
    let run_dir = store
        .join()
        .map_err(|_| anyhow::anyhow!("the run store stopped unexpectedly"))??;
    let failures = run_dir
        .manifest
        .hosts
        .iter()
        .filter(|(_, h)| h.status != Some(Status::Ok))
        .map(|(name, h)| summary_line(name, h))
        .collect();
    Ok(RunOutcome {
        run_dir: run_path,
        status,
        failures,
    })
}

/// The store runs on its own thread: it journals every event (file writes, flushed per line) and
/// shows it, in the order the hosts sent them. When the run directory cannot be written (disk
/// full), it says so on `failed` at once, so that the hosts stop rather than measure what could
/// not be kept, and returns that error once the hosts are gone.
fn spawn_store(
    mut run_dir: RunDir,
    mut progress: Progress,
    mut rx: mpsc::UnboundedReceiver<Event>,
    failed: oneshot::Sender<()>,
) -> std::thread::JoinHandle<Result<RunDir>> {
    std::thread::spawn(move || {
        let mut failed = Some(failed);
        let mut error = None;
        while let Some(event) = rx.blocking_recv() {
            progress.show(&event);
            if error.is_some() {
                continue;
            }
            if let Err(e) = run_dir.journal(&event) {
                error = Some(e.context(format!(
                    "cannot write the run directory {}",
                    run_dir.path.display()
                )));
                failed.take().map(|f| f.send(()));
            }
        }
        progress.finish();
        match error {
            Some(e) => Err(e),
            None => Ok(run_dir),
        }
    })
}

/// Waits for every host, for Ctrl-C, or for the store to fail; returns how the run ended.
async fn wait_or_interrupt(
    tasks: &mut JoinSet<Status>,
    tx: &EventSender,
    store_failed: oneshot::Receiver<()>,
) -> Status {
    let mut all_ok = true;
    let stopped = tokio::select! {
        _ = async {
            while let Some(done) = tasks.join_next().await {
                all_ok &= matches!(done, Ok(Status::Ok));
            }
        } => None,
        _ = tokio::signal::ctrl_c() => Some(Status::Interrupted),
        Ok(()) = store_failed => Some(Status::Failed),
    };
    if let Some(status) = stopped {
        // Dropping the hosts' tasks closes their channels; the wrappers on the hosts then kill
        // the commands' process groups.
        tasks.shutdown().await;
        let _ = tx.send(Event::Interrupted);
        return status;
    }
    if all_ok {
        Status::Ok
    } else {
        Status::Failed
    }
}

fn summary_line(name: &str, host: &crate::store::HostEntry) -> String {
    match (&host.failed_step, &host.error) {
        (Some(step), Some(error)) => format!("{name}: failed at {step}: {error}"),
        _ if host.status == Some(Status::Failed) => format!("{name}: failed"),
        _ => format!("{name}: interrupted"),
    }
}

/// Everything one host's task needs.
struct HostJob {
    host: String,
    config: Arc<Config>,
    events: EventSender,
    run_id: String,
    run_dir: PathBuf,
    control_dir: PathBuf,
    open: OpenTransports,
}

/// Where a host stopped and why.
struct Stop {
    step: String,
    error: String,
}

impl HostJob {
    fn emit(&self, event: Event) {
        let _ = self.events.send(event);
    }

    /// Connects, runs the steps in order, stops the servers it started, and reports.
    async fn run(self) -> Status {
        self.emit(Event::HostConnecting {
            host: self.host.clone(),
        });
        let result = self.connect_and_run().await;
        let (status, stop) = match result {
            Ok(None) => (Status::Ok, None),
            Ok(Some(stop)) | Err(stop) => (Status::Failed, Some(stop)),
        };
        self.emit(Event::HostFinished {
            host: self.host.clone(),
            status,
            failed_step: stop.as_ref().map(|s| s.step.clone()),
            error: stop.map(|s| s.error),
        });
        status
    }

    async fn connect_and_run(&self) -> Result<Option<Stop>, Stop> {
        let config = &self.config;
        let spec = config.host(&self.host);
        let fail = |step: &'static str| {
            move |e: anyhow::Error| Stop {
                step: step.to_string(),
                error: format!("{e:#}"),
            }
        };
        let transport = Transport::connect(&self.host, spec, config.inventory.known_hosts, &self.control_dir)
            .await
            .map_err(fail("connect"))?;
        let transport = Arc::new(transport);
        if let Ok(mut open) = self.open.lock() {
            open.push(transport.clone());
        }
        let facts = crate::facts::gather(&transport).await.map_err(fail("connect"))?;
        self.emit(Event::HostConnected {
            host: self.host.clone(),
            facts: facts.clone(),
        });
        let home = facts["home"].as_str().unwrap_or_default().to_string();
        let mut ctx = HostCtx {
            host: self.host.clone(),
            transport,
            events: self.events.clone(),
            run_id: self.run_id.clone(),
            run_dir: self.run_dir.clone(),
            workdir: String::new(),
            home,
            servers: Vec::new(),
        };
        ctx.workdir = ctx.resolve(spec.workdir());
        let rigrun = self
            .rigrun_path(&ctx, &facts)
            .await
            .map_err(fail("upload rigrun"))?;
        let builtins = Builtins {
            run_id: self.run_id.clone(),
            rigrun,
        };
        let vars = config.host_vars(&self.host, &ctx.workdir, &builtins);
        let stop = self.run_steps(&mut ctx, vars).await;
        for server in ctx.servers.drain(..) {
            server.stop();
        }
        Ok(stop)
    }

    /// Runs the steps in order; returns where the host stopped, if it failed.
    async fn run_steps(&self, ctx: &mut HostCtx, mut vars: plan::HostVars) -> Option<Stop> {
        let mut first_failure = None;
        for (index, step) in self.config.playbook.steps.iter().enumerate() {
            let label = format!("{}. {}", index + 1, step.display_name());
            self.emit(Event::StepStarted {
                host: self.host.clone(),
                index,
                name: step.display_name(),
                kind: step.kind().to_string(),
            });
            let started = std::time::Instant::now();
            let outcome = match plan::plan_step(&self.config, index, step, &vars, &HashSet::new()) {
                Ok(planned) => steps::run(ctx, &planned, &vars).await,
                Err(e) => steps::StepOutcome::failed(e.to_string(), serde_json::Value::Null),
            };
            self.emit(Event::StepFinished {
                host: self.host.clone(),
                index,
                name: step.display_name(),
                status: outcome.status,
                error: outcome.error.clone(),
                details: outcome.details,
                seconds: started.elapsed().as_secs_f64(),
            });
            vars.extend(outcome.provides);
            if outcome.status == Status::Failed && first_failure.is_none() {
                first_failure = Some(Stop {
                    step: label,
                    error: outcome.error.unwrap_or_default(),
                });
            }
            if outcome.stop_host {
                break;
            }
        }
        first_failure
    }

    /// The path `{{ rigrun }}` stands for on this host: this binary for a local host; for an SSH
    /// host, a copy uploaded to its workdir (only when a step uses it; skipped when unchanged).
    async fn rigrun_path(&self, ctx: &HostCtx, facts: &serde_json::Value) -> Result<String> {
        let exe = std::env::current_exe().context("cannot find the running rigrun binary")?;
        if self.config.host(&self.host).connection == Connection::Local {
            return Ok(exe.display().to_string());
        }
        let dest = format!("{}/{REMOTE_RIGRUN}", ctx.workdir);
        if !self.playbook_uses("rigrun") {
            return Ok(dest);
        }
        let host_arch = facts["arch"].as_str().unwrap_or("unknown");
        if host_arch != std::env::consts::ARCH {
            anyhow::bail!(
                "the playbook runs {{{{ rigrun }}}} on {}, but that host is {host_arch} and this \
                 rigrun is built for {}; build rigrun for {host_arch}, or use the Python script \
                 there (playbooks/throughput-sweep.yaml)",
                self.host,
                std::env::consts::ARCH
            );
        }
        let data = std::fs::read(&exe).with_context(|| format!("cannot read {}", exe.display()))?;
        steps::upload_if_changed(ctx, &data, &dest, 0o755, None).await?;
        let check = format!("{} --version", template::shell_quote(&dest));
        if let Err(e) = ctx.transport.output(&check).await {
            let said = format!("{e:#}");
            anyhow::bail!(
                "{}; the host said: {said}",
                rigrun_does_not_run(&self.host, &said)
            );
        }
        Ok(dest)
    }

    fn playbook_uses(&self, var: &str) -> bool {
        self.config.playbook.steps.iter().any(|step| {
            step.templates()
                .iter()
                .any(|(text, _)| template::variables(&text.value).is_ok_and(|vars| vars.contains(var)))
        })
    }
}

/// Why an uploaded rigrun does not run on `host`, named from what the host said when it was
/// started, with the way out.
fn rigrun_does_not_run(host: &str, said: &str) -> String {
    let glibc = said.split(['`', '\'']).find(|part| part.starts_with("GLIBC_"));
    let cause = if let Some(version) = glibc {
        format!("its glibc is older than this rigrun needs ({version} not found)")
    } else if said.contains("Exec format error") || said.contains("cannot execute binary") {
        "it cannot execute this rigrun's binary format (another CPU architecture or OS)".to_string()
    } else if said.contains("Permission denied") {
        "it may not execute files in the workdir (a noexec mount?)".to_string()
    } else if said.contains("No such file or directory") {
        "the dynamic loader this rigrun needs is missing (a musl system such as Alpine?)".to_string()
    } else {
        "it fails to start".to_string()
    };
    format!(
        "the uploaded rigrun does not run on {host}: {cause}; build rigrun on a system no newer \
         than that host's, or use the Python script there (playbooks/throughput-sweep.yaml)"
    )
}

#[cfg(test)]
mod tests {
    use super::rigrun_does_not_run;

    #[test]
    fn names_why_rigrun_does_not_run_on_a_host() {
        let glibc = "`'/w/bin/rigrun' --version` exited with 1: /w/bin/rigrun: \
                     /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.39' not found \
                     (required by /w/bin/rigrun)";
        let text = rigrun_does_not_run("old", glibc);
        assert!(
            text.starts_with(
                "the uploaded rigrun does not run on old: its glibc is older than \
                              this rigrun needs (GLIBC_2.39 not found); build rigrun on a system"
            ),
            "{text}"
        );
        assert!(text.ends_with("use the Python script there (playbooks/throughput-sweep.yaml)"));
        let arch = rigrun_does_not_run("h", "sh: 1: /w/bin/rigrun: Exec format error");
        assert!(arch.contains("another CPU architecture"), "{arch}");
        let noexec = rigrun_does_not_run("h", "sh: 1: /w/bin/rigrun: Permission denied");
        assert!(noexec.contains("noexec"), "{noexec}");
    }
}
