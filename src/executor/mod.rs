//! The executor: one task per host (steps in order), hosts in parallel. A host that fails stops
//! only itself. Everything that happens goes out as events to the store and the progress display.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use chrono::Utc;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;

mod host;
mod reach;
mod rigrun_binary;
mod step_loop;
mod store_thread;
mod variants;

pub use reach::reach;

use indexmap::IndexMap;

use crate::config::Config;
use crate::events::{Event, EventSender, Status};
use crate::progress::Progress;
use crate::resume::HostWork;
use crate::store::{manifest_for, Manifest, Process, RunDir};
use crate::transport::Transport;

pub struct RunOptions {
    pub start: Start,
    /// Hosts run at once; all when None.
    pub forks: Option<usize>,
}

/// A new run, or one that goes on.
pub enum Start {
    /// A new run directory under `runs_dir`, with the user's note on it.
    New {
        runs_dir: PathBuf,
        label: Option<String>,
    },
    /// `rigrun run --resume`: the run's directory opened again, what is left on each host,
    /// and which session of the run this is.
    Resume {
        dir: Box<RunDir>,
        work: IndexMap<String, HostWork>,
        session: u32,
    },
}

/// The run directory to write, its id, each host's work, and the event that opens the session.
fn begin(config: &Config, start: Start) -> Result<(RunDir, String, IndexMap<String, HostWork>, Event)> {
    match start {
        Start::New { runs_dir, label } => {
            let started = Utc::now();
            let run_id = RunDir::new_run_id(&runs_dir, &config.playbook.name.value, started);
            let planned = crate::plan::planned_sweeps(config, &run_id);
            let manifest = Manifest {
                label,
                ..manifest_for(config, &run_id, planned, started)
            };
            let dir = RunDir::create(&runs_dir, manifest)?;
            let work = config
                .hosts
                .iter()
                .map(|h| (h.clone(), HostWork::fresh(config)))
                .collect();
            let event = Event::RunStarted {
                run_id: run_id.clone(),
                hosts: config.hosts.clone(),
            };
            Ok((dir, run_id, work, event))
        }
        Start::Resume { dir, work, session } => {
            let me = Process::this();
            let event = Event::RunResumed {
                session,
                pid: me.pid,
                machine: me.host,
            };
            let run_id = dir.manifest.run_id.clone();
            Ok((*dir, run_id, work, event))
        }
    }
}

/// How a run ended, for the summary and the exit code.
pub struct RunOutcome {
    pub run_dir: PathBuf,
    pub status: Status,
    /// One line per failed host: which step and why (a host the interrupt stopped is not
    /// failed: the run's end says it was interrupted).
    pub failures: Vec<String>,
    /// Every host failed to connect: nothing ran, there is no table to show.
    pub none_connected: bool,
}

/// The step a host that could not be reached failed at.
pub(crate) const CONNECT: &str = "connect";

/// Transports still open, so that Ctrl-C can close them after stopping the hosts' tasks.
type OpenTransports = Arc<Mutex<Vec<Arc<Transport>>>>;

pub async fn run(config: Arc<Config>, opts: RunOptions, progress: Progress) -> Result<RunOutcome> {
    if config
        .hosts
        .iter()
        .any(|h| config.host(h).connection == crate::config::Connection::Ssh)
    {
        crate::transport::cipher::warm_up();
    }
    let (run_dir, run_id, mut work, first) = begin(&config, opts.start)?;
    let run_path = run_dir.path.clone();
    let facts_before = host::facts_before(&run_dir.manifest);
    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let (store_failed_tx, store_failed) = oneshot::channel();
    let store = store_thread::spawn(run_dir, progress, rx, store_failed_tx);
    let _ = tx.send(first);

    let control_dir = tempfile::Builder::new()
        .prefix("rigrun-")
        .tempdir_in("/tmp")
        .context("cannot create a control directory in /tmp")?;
    let open: OpenTransports = Arc::default();
    let stopping: Arc<std::sync::OnceLock<String>> = Arc::default();
    let forks = Arc::new(Semaphore::new(opts.forks.unwrap_or(config.hosts.len()).max(1)));
    let mut tasks = JoinSet::new();
    let mut kept_ok = true;
    for host in &config.hosts {
        let works: Vec<(String, HostWork)> = crate::resume::keys(&config, host)
            .into_iter()
            .map(|key| {
                let w = work.swap_remove(&key).unwrap_or_else(|| HostWork::fresh(&config));
                (key, w)
            })
            .collect();
        if works.iter().all(|(_, w)| w.is_done()) {
            kept_ok &= host_is_done(&config, host, &works, &tx);
            continue;
        }
        let job = host::HostJob {
            works: works.into_iter().map(|(_, w)| Arc::new(w)).collect(),
            host: host.clone(),
            config: config.clone(),
            events: tx.clone(),
            run_id: run_id.clone(),
            run_dir: run_path.clone(),
            control_dir: control_dir.path().to_path_buf(),
            open: open.clone(),
            stopping: stopping.clone(),
            facts_before: facts_before.get(host).cloned(),
        };
        let forks = forks.clone();
        tasks.spawn(async move {
            let _turn = forks.acquire_owned().await;
            job.run().await
        });
    }

    let status = match wait_or_interrupt(&mut tasks, &tx, store_failed, &stopping).await {
        Status::Ok if !kept_ok => Status::Failed,
        status => status,
    };
    let transports: Vec<_> = open
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default();
    // All at once: each close is a round trip to its host (the jobs' close), and one after
    // another they added up to 140 ms at 16 hosts after the last host finished.
    futures_util::future::join_all(transports.iter().map(|t| t.close())).await;
    // Gone before the run's end is sent: a transport holds a sender of events (its reboot
    // watch), and the store ends once every sender is.
    drop(transports);
    let _ = tx.send(Event::RunFinished { status });
    drop(tx);
    let run_dir = store
        .join()
        .map_err(|_| anyhow::anyhow!("the run store stopped unexpectedly"))??;
    let hosts = &run_dir.manifest.hosts;
    let none_connected = !hosts.is_empty()
        && hosts
            .values()
            .all(|h| h.status == Some(Status::Failed) && h.failed_step.as_deref() == Some(CONNECT));
    let failures = hosts
        .iter()
        .filter(|(_, h)| h.status == Some(Status::Failed))
        .map(|(name, h)| summary_line(name, h))
        .collect();
    Ok(RunOutcome {
        run_dir: run_path,
        status,
        failures,
        none_connected,
    })
}

/// A host of a resumed run with nothing left to run: it ends as its steps did (a host left
/// interrupted after its last step is ok), each variant's in turn (`works` by key: the host, or
/// `host/variant`). Returns whether it is ok.
fn host_is_done(config: &Config, host: &str, works: &[(String, HostWork)], tx: &EventSender) -> bool {
    let verdicts = works.iter().map(|(key, w)| (key, w.verdict(config)));
    let (status, stop) = verdicts
        .map(|(key, (status, stop))| match key.split_once('/') {
            Some((_, variant)) => (status, stop.map(|(step, e)| (format!("{variant}: {step}"), e))),
            None => (status, stop),
        })
        .find(|(status, _)| *status != Status::Ok)
        .unwrap_or((Status::Ok, None));
    let (failed_step, error) = stop.unzip();
    let _ = tx.send(Event::HostFinished {
        host: host.to_string(),
        status,
        failed_step,
        error,
    });
    status == Status::Ok
}

/// Waits for every host, for Ctrl-C, or for the store to fail; returns how the run ended.
/// `stopping` says why, before the hosts' tasks are dropped.
async fn wait_or_interrupt(
    tasks: &mut JoinSet<Status>,
    tx: &EventSender,
    store_failed: oneshot::Receiver<()>,
    stopping: &std::sync::OnceLock<String>,
) -> Status {
    let mut all_ok = true;
    let stopped = tokio::select! {
        _ = async {
            while let Some(done) = tasks.join_next().await {
                all_ok &= matches!(done, Ok(Status::Ok));
            }
        } => None,
        () = interrupted() => Some(Status::Interrupted),
        Ok(()) = store_failed => Some(Status::Failed),
    };
    if let Some(status) = stopped {
        let why = match status {
            Status::Interrupted => "cut short by the interrupt",
            _ => "cut short: the run directory could not be written",
        };
        let _ = stopping.set(why.to_string());
        let _ = tx.send(Event::Interrupted);
        // Dropping the hosts' tasks closes their channels; the wrappers on the hosts then kill
        // the commands' process groups, and each point cut short is recorded lost.
        tasks.shutdown().await;
        return status;
    }
    if all_ok {
        Status::Ok
    } else {
        Status::Failed
    }
}

/// Ctrl-C, SIGTERM or SIGHUP (a closed terminal, `timeout`, systemd, Slurm): each stops the run
/// the same way, so that run.json ends `interrupted`, the hosts' commands are stopped, the
/// masters closed and the control directory removed.
async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    let (term, hup) = (signal(SignalKind::terminate()), signal(SignalKind::hangup()));
    let (Ok(mut term), Ok(mut hup)) = (term, hup) else {
        // Without those handlers, Ctrl-C still works.
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
}

fn summary_line(name: &str, host: &crate::store::HostEntry) -> String {
    match (&host.failed_step, &host.error) {
        (Some(step), Some(error)) => format!("{name}: failed at {step}: {error}"),
        _ => format!("{name}: failed"),
    }
}
