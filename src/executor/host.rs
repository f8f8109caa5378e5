//! One host's task: connect, gather its facts, run the steps in order, stop the servers it
//! started, and report each step and the host's end as events.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;

use super::step_loop::{self, Stop};
use super::{rigrun_binary, variants, OpenTransports};
use crate::config::{Builtins, Config};
use crate::events::{Event, EventSender, Status};
use crate::facts::HostFacts;
use crate::resume::HostWork;
use crate::steps::HostCtx;
use crate::store::RunDir;
use crate::telemetry::GpuSource;
use crate::transport::{Allocated, Reboot, Transport};

/// The step a Slurm host that got no allocation failed at.
const ALLOCATE: &str = "slurm allocation";

/// Everything one host's task needs.
pub(super) struct HostJob {
    pub host: String,
    pub config: Arc<Config>,
    pub events: EventSender,
    pub run_id: String,
    pub run_dir: PathBuf,
    /// Where SSH control sockets live (one short-named folder per run).
    pub control_dir: PathBuf,
    pub open: OpenTransports,
    /// Why the run is stopping, once it is (see `HostCtx::stopping`).
    pub stopping: Arc<std::sync::OnceLock<String>>,
    /// What is left to do on the host (everything in a new run): one per server variant, in
    /// the order they run, or one without variants.
    pub works: Vec<Arc<HostWork>>,
    /// The host's facts when the run last reached it (a resumed run's; see [`facts_before`]).
    pub facts_before: Option<HostFacts>,
}

impl HostJob {
    pub(super) fn emit(&self, event: Event) {
        let _ = self.events.send(event);
    }

    /// Connects, runs the steps in order, stops the servers it started, and reports.
    pub async fn run(self) -> Status {
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
            .map_err(fail(super::CONNECT))?;
        let transport = Arc::new(transport);
        if let Ok(mut open) = self.open.lock() {
            open.push(transport.clone());
        }
        // One round trip: what the login shell prints, the host's facts, and the sha256 of its
        // rigrun copy when the playbook uses one.
        let probe = rigrun_binary::probe(config, &self.host);
        let (facts, copy) = gather_facts_and(&transport, probe.as_deref())
            .await
            .map_err(fail(super::CONNECT))?;
        self.report_login_noise(&transport);
        let home = facts.home.clone();
        let mut ctx = HostCtx {
            host: self.host.clone(),
            transport,
            events: self.events.clone(),
            run_id: self.run_id.clone(),
            run_dir: self.run_dir.clone(),
            workdir: String::new(),
            home,
            servers: Vec::new(),
            variant_server: None,
            checked_server: None,
            server_gone: None,
            work: self
                .works
                .first()
                .cloned()
                .unwrap_or_else(|| Arc::new(HostWork::fresh(config))),
            variant: None,
            gpu_source: GpuSource::Absent,
            slo: config.slo.clone(),
            stopping: self.stopping.clone(),
        };
        ctx.workdir = ctx.resolve(spec.workdir());
        let jobs = jobs_dir(&ctx.workdir, &self.run_id, &self.run_dir, &self.host);
        ctx.transport.start_jobs(&jobs);
        // The link's own boot id: the lease's renewals say it (a Slurm host's login node).
        let link_boot_id = facts.boot_id.clone();
        let facts = match spec.slurm {
            Some(_) => self
                .allocate(&ctx.transport, facts)
                .await
                .map_err(fail(ALLOCATE))?,
            None => facts,
        };
        ctx.gpu_source = gpu_source(spec, &facts);
        self.emit(Event::HostConnected {
            host: self.host.clone(),
            facts: facts.clone(),
        });
        self.watch_boot(&ctx.transport, &facts, link_boot_id);
        let rigrun = rigrun_binary::on_host(config, &self.host, &ctx, &facts, &copy)
            .await
            .map_err(fail("upload rigrun"))?;
        if let Some(runner) = &rigrun.job_runner {
            ctx.transport.use_job_runner(runner);
        }
        let builtins = Builtins {
            run_id: self.run_id.clone(),
            rigrun: rigrun.path,
        };
        let vars = config.host_vars(&self.host, &ctx.workdir, &builtins);
        let stop = match &config.playbook.server {
            Some(_) => variants::run(config, &self.works, &mut ctx, vars).await,
            None => step_loop::run(config, &mut ctx, vars).await,
        };
        for server in ctx.servers.drain(..) {
            server.stop();
        }
        // An allocation is given back as soon as the host is done, not when the run ends.
        ctx.transport.release_allocation().await;
        Ok(stop)
    }

    /// A Slurm host's allocation, asked for through the login node (each look at the queue
    /// said as an event), and the facts of its node, which replace the login node's.
    async fn allocate(&self, transport: &Arc<Transport>, login: HostFacts) -> Result<HostFacts> {
        let (events, host) = (self.events.clone(), self.host.clone());
        let allocated = transport
            .allocate(&mut |job_id, waited, reason| {
                let _ = events.send(Event::HostQueued {
                    host: host.clone(),
                    job_id: job_id.to_string(),
                    reason: reason.to_string(),
                    waited_secs: waited.as_secs_f64(),
                });
            })
            .await?;
        let before = self.facts_before.as_ref().and_then(|f| f.allocation.as_ref());
        self.emit(Event::Notice {
            host: self.host.clone(),
            message: allocated_text(&allocated, before),
        });
        let output = transport.node_output(crate::facts::COMMAND).await?;
        let mut facts = crate::facts::parse(&output).map_err(anyhow::Error::msg)?;
        facts.allocation = Some(crate::facts::Allocation {
            login_node: login.hostname,
            ..allocated.allocation
        });
        Ok(facts)
    }

    /// Says a reboot since the run last reached the host (a resume), then has the transport say
    /// each one it finds during the run (see `transport::Reboot`): once per reboot, as an event.
    /// `link_boot_id` is the boot id the lease's renewals will say (a Slurm host's login node's).
    fn watch_boot(&self, transport: &Transport, facts: &HostFacts, link_boot_id: Option<String>) {
        let said = |host: &str, reboot: &Reboot, message: String| Event::HostRebooted {
            host: host.to_string(),
            message,
            boot_id_before: reboot.before.clone(),
            boot_id: reboot.now.clone(),
        };
        let before = self.facts_before.as_ref();
        // Another node of a new allocation did not reboot: it is another machine.
        let same_machine = before.is_some_and(|b| b.hostname == facts.hostname);
        if let (Some(before), Some(now)) = (before.and_then(|b| b.boot_id.as_ref()), &facts.boot_id) {
            if before != now && same_machine {
                let reboot = Reboot {
                    before: before.clone(),
                    now: now.clone(),
                };
                self.emit(said(&self.host, &reboot, reboot.since_last_session(&self.host)));
            }
        }
        let (events, host) = (self.events.clone(), self.host.clone());
        let on_reboot = move |reboot: &Reboot| {
            let _ = events.send(said(&host, reboot, reboot.during_run(&host)));
        };
        transport.watch_boot(link_boot_id, Arc::new(on_reboot));
    }

    /// Once per host: what its login shell prints goes to `hosts/<host>/login-shell.log`, and a
    /// warning says so, with what it costs per command and how to make the shell quiet.
    fn report_login_noise(&self, transport: &Transport) {
        let Some(noise) = transport.login_noise() else {
            return;
        };
        let dir = RunDir::host_dir(&self.run_dir, &self.host);
        let log = dir.join("login-shell.log");
        let written =
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&log, noise.log_text(&self.host)));
        let mut message = noise.warning(&self.host, &log);
        if let Err(e) = written {
            message.push_str(&format!(" (could not write {}: {e})", log.display()));
        }
        self.emit(Event::Warning {
            host: self.host.clone(),
            message,
        });
    }
}

/// Where the run's detached commands live on the host. The run directory's path is in it as
/// well as the run id (two runs of one playbook started in the same second, from different
/// folders, must not share it; a resumed run finds its own again), and so is the host's name
/// (two inventory entries may be one machine with one workdir).
fn jobs_dir(workdir: &str, run_id: &str, run_dir: &std::path::Path, host: &str) -> String {
    use sha2::Digest;
    let place = std::fs::canonicalize(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
    let digest = sha2::Sha256::digest(place.as_os_str().as_encoded_bytes());
    let key = hex::encode(&digest[..4]);
    format!("{workdir}/.rigrun/jobs/{run_id}-{key}/{host}")
}

/// Each host's facts when the run last reached it (none in a new run).
pub(super) fn facts_before(
    manifest: &crate::store::Manifest,
) -> std::collections::HashMap<String, HostFacts> {
    let hosts = manifest.hosts.iter();
    hosts
        .filter(|(_, entry)| !entry.facts.home.is_empty())
        .map(|(host, entry)| (host.clone(), entry.facts.clone()))
        .collect()
}

/// What a Slurm host's allocation is, said once: a new one, the run's own found again, or a
/// new one because the run's earlier one is gone.
fn allocated_text(allocated: &Allocated, before: Option<&crate::facts::Allocation>) -> String {
    let now = &allocated.allocation;
    let waited = humantime::format_duration(std::time::Duration::from_secs(allocated.waited.as_secs()));
    if allocated.reattached {
        return format!(
            "re-attached to the run's Slurm job {} on node {}, still there from its earlier session",
            now.job_id, now.node
        );
    }
    let earlier = match before {
        Some(b) if b.job_id != now.job_id => format!("the run's earlier Slurm job {} is gone; ", b.job_id),
        _ => String::new(),
    };
    format!(
        "{earlier}Slurm job {} runs on node {} after {waited} in the queue; the host's commands run there",
        now.job_id, now.node
    )
}

/// The host's facts, in one round trip.
pub(super) async fn gather_facts(transport: &Transport) -> Result<crate::facts::HostFacts> {
    Ok(gather_facts_and(transport, None).await?.0)
}

/// The host's facts and, in the same round trip, its answer to the rigrun copy's `probe`.
async fn gather_facts_and(
    transport: &Transport,
    probe: Option<&str>,
) -> Result<(crate::facts::HostFacts, rigrun_binary::HostCopy)> {
    let command = format!("{}{}", crate::facts::COMMAND, probe.unwrap_or_default());
    let out = transport.probe_login(&command).await?;
    let facts = crate::facts::parse(&out).map_err(anyhow::Error::msg)?;
    Ok((facts, rigrun_binary::HostCopy::parse(&out)))
}

/// The inventory's DCGM exporter when it names one, else nvidia-smi when the facts found it.
fn gpu_source(spec: &crate::config::HostSpec, facts: &crate::facts::HostFacts) -> GpuSource {
    match (&spec.dcgm_exporter, facts.nvidia_smi.as_deref()) {
        (Some(url), _) => GpuSource::Dcgm(url.clone()),
        (None, Some("present")) => GpuSource::NvidiaSmi,
        (None, _) => GpuSource::Absent,
    }
}
