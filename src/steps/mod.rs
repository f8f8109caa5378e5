//! The step kinds, one module each. A step runs on one host through its transport and reports
//! what it did; records and output lines go out as events while it runs.

mod command;
mod copy_script;
mod fetch_results;
pub mod record_line;
mod run_sweep;
pub mod server_job;
mod server_probe;
mod shell;
mod start_server;
mod sweep_server;
pub mod variant_server;
mod verify_server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use indexmap::IndexMap;
use serde_json::{json, Value as Json};

pub use command::{run_logged, StdoutLine};
pub use copy_script::upload_if_changed;
pub use start_server::BackgroundServer;
pub use sweep_server::CheckedServer;

use crate::config::server_block::Variant;
use crate::config::steps::run_sweep::SweepPoint;
use crate::config::steps::Action;
use crate::config::HostVars;
use crate::events::{Event, EventSender, PointRun, Record, RecordStatus, Status};
use crate::plan::PlannedStep;
use crate::store::RunDir;
use crate::transport::Transport;

/// The longest part of a line shown live; the log keeps all of it.
const SHOWN_CHARS: usize = 4096;

/// Everything a step needs to act on one host.
pub struct HostCtx {
    pub host: String,
    pub transport: Arc<Transport>,
    pub events: EventSender,
    pub run_id: String,
    pub run_dir: PathBuf,
    /// The login directory on the host, for `~/` paths.
    pub home: String,
    /// The host's working directory, resolved.
    pub workdir: String,
    /// Servers started by `start-server`, stopped when the host's playbook ends.
    pub servers: Vec<BackgroundServer>,
    /// The variant's server while its steps run, for the sweeps that measure it.
    pub variant_server: Option<server_job::ServerJob>,
    /// The server `verify-server` checked last, for the sweeps that measure it.
    pub checked_server: Option<CheckedServer>,
    /// Why the server the sweeps measure is gone for good (it died and did not come back):
    /// later sweeps do not run their points, and say this.
    pub server_gone: Option<String>,
    /// What is left to do on the host: in a resumed run, which sweep points run as which
    /// attempt (everything, as attempt 1, in a new run). Per variant, with variants.
    pub work: Arc<crate::resume::HostWork>,
    /// Where sweeps read the host's GPU telemetry (see `crate::telemetry`).
    pub gpu_source: crate::telemetry::GpuSource,
    /// The server variant the steps run against, when the playbook has variants.
    pub variant: Option<Variant>,
    /// The playbook's latency limits, handed to sweep commands (see `slo::SLO_ENV`).
    pub slo: crate::config::slo::Slo,
    /// Why the run is stopping, set before the hosts' tasks are dropped: what a point cut short
    /// is recorded with (`cut short by the interrupt`).
    pub stopping: Arc<std::sync::OnceLock<String>>,
}

/// What a step reports when it ends.
pub struct StepOutcome {
    pub status: Status,
    pub error: Option<String>,
    /// Kept in the manifest (checksums, server replies, counts).
    pub details: Json,
    /// Variables for later steps (e.g. `server` from verify-server).
    pub provides: HostVars,
    /// The host stops here (a failed step, or a sweep told to stop on failure).
    pub stop_host: bool,
}

impl StepOutcome {
    pub fn ok(details: Json) -> StepOutcome {
        StepOutcome {
            status: Status::Ok,
            error: None,
            details,
            provides: HostVars::new(),
            stop_host: false,
        }
    }

    pub fn failed(error: impl Into<String>, details: Json) -> StepOutcome {
        StepOutcome {
            status: Status::Failed,
            error: Some(error.into()),
            details,
            provides: HostVars::new(),
            stop_host: true,
        }
    }
}

impl HostCtx {
    pub fn emit(&self, event: Event) {
        // The receiver only goes away when the run is being torn down.
        let _ = self.events.send(event);
    }

    /// Shows a line of a command's output live (shortened), unless the display is so far
    /// behind that it would only pile up in memory: then the line is counted and left out (the
    /// logs keep everything; the display says how many it left out).
    pub fn show_output(&self, label: &str, stream: crate::transport::Stream, line: &str) {
        let Some(skipped) = crate::events::output_backlog::admit() else {
            return;
        };
        let mut line: String = line.chars().take(SHOWN_CHARS).collect();
        if skipped > 0 {
            line = format!("({skipped} lines not shown: the display fell behind) {line}");
        }
        self.emit(Event::Output {
            host: self.host.clone(),
            label: label.to_string(),
            stream,
            line,
        });
    }

    /// Resolves a leading `~/` against the host's login directory.
    pub fn resolve(&self, path: &str) -> String {
        match path.strip_prefix("~/") {
            Some(rest) => format!("{}/{rest}", self.home.trim_end_matches('/')),
            None if path == "~" => self.home.clone(),
            None => path.to_string(),
        }
    }

    /// `hosts/<host>/<NN>-<step>/`, or `hosts/<host>/<variant>/<NN>-<step>/` with variants.
    pub fn step_dir(&self, step: &PlannedStep) -> Result<PathBuf> {
        RunDir::step_dir_in(&self.variant_dir(), step.index, &step.name)
    }

    /// The host's folder in the run directory, or its variant's folder there.
    pub fn variant_dir(&self) -> PathBuf {
        let host = RunDir::host_dir(&self.run_dir, &self.host);
        match self.variant_name() {
            Some(name) => host.join(crate::store::slug(name)),
            None => host,
        }
    }

    /// The variant's label, for events; None without variants.
    pub fn variant_name(&self) -> Option<&str> {
        self.variant.as_ref().and_then(Variant::name)
    }

    /// The variant's values, for records; None without variants.
    pub fn variant_values(&self) -> Option<IndexMap<String, Json>> {
        self.variant
            .as_ref()
            .filter(|v| v.name().is_some())
            .map(|v| v.values.clone())
    }

    /// Prefixes the names of the variant's jobs on the host, so that no two variants share one.
    pub fn job_prefix(&self) -> String {
        match (&self.variant, self.variant_name()) {
            (Some(v), Some(_)) => format!("v{:02}-", v.index + 1),
            _ => String::new(),
        }
    }

    /// Emits a record of `step` at `point`, made by that run (repetition and attempt) of it.
    pub fn record(
        &self,
        step: &PlannedStep,
        point: &IndexMap<String, Json>,
        at: PointRun,
        metrics: serde_json::Map<String, Json>,
        status: RecordStatus,
        reason: Option<String>,
    ) {
        let record = self.new_record(step, point, at, (metrics, status, reason));
        self.emit(Event::Record(record));
    }

    /// Emits a measurement the sweep point's command printed, with that command.
    pub fn record_measured(
        &self,
        step: &PlannedStep,
        point: &SweepPoint,
        at: PointRun,
        metrics: serde_json::Map<String, Json>,
    ) {
        let record = Record {
            command: Some(point.command.clone()),
            ..self.new_record(step, &point.values, at, (metrics, RecordStatus::Ok, None))
        };
        self.emit(Event::Record(record));
    }

    fn new_record(
        &self,
        step: &PlannedStep,
        point: &IndexMap<String, Json>,
        at: PointRun,
        (metrics, status, reason): (serde_json::Map<String, Json>, RecordStatus, Option<String>),
    ) -> Record {
        Record {
            run: self.run_id.clone(),
            host: self.host.clone(),
            step: step.name.clone(),
            step_index: step.index,
            point: point.clone(),
            metrics,
            status,
            reason,
            at,
            variant: self.variant_values(),
            command: None,
        }
    }
}

/// Runs one planned step on the host, within its timeout when it has one (a sweep's timeout
/// applies per point instead). This and [`not_started`] are where the executor's side tells a
/// sweep from the other kinds.
pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, vars: &HostVars) -> StepOutcome {
    let timeout = match step.action {
        Action::RunSweep(_) => None,
        _ => step.timeout,
    };
    let work = dispatch(ctx, step, vars);
    let result = match timeout {
        Some(limit) => match tokio::time::timeout(limit, work).await {
            Ok(result) => result,
            Err(_) => Err(anyhow::anyhow!(
                "timed out after {}",
                humantime::format_duration(limit)
            )),
        },
        None => work.await,
    };
    result.unwrap_or_else(|e| StepOutcome::failed(format!("{e:#}"), Json::Null))
}

/// Hands the step's typed plan to its kind's module.
async fn dispatch(ctx: &mut HostCtx, step: &PlannedStep, vars: &HostVars) -> Result<StepOutcome> {
    match &step.action {
        Action::VerifyServer(plan) => verify_server::run(ctx, plan).await,
        Action::CopyScript(plan) => copy_script::run(ctx, step, plan, vars).await,
        Action::RunSweep(plan) => run_sweep::run(ctx, step, plan, vars).await,
        Action::FetchResults(plan) => fetch_results::run(ctx, step, plan).await,
        Action::Shell(plan) => shell::run(ctx, step, plan).await,
        Action::StartServer(plan) => start_server::run(ctx, step, plan).await,
        Action::Deferred { reason } => Ok(StepOutcome::failed(
            format!("the step could not be planned: it {reason}, but no earlier step provided it"),
            json!(null),
        )),
    }
}

/// A step of a server variant whose server did not start, so that the tables and `--resume`
/// say why it has nothing: a sweep fails every point it would have run with `reason` (and so
/// fails); any other step is skipped.
pub fn not_started(ctx: &HostCtx, step: &PlannedStep, reason: &str) -> Status {
    match &step.action {
        Action::RunSweep(plan) => {
            run_sweep::fail(ctx, step, plan, reason);
            Status::Failed
        }
        _ => Status::Skipped,
    }
}

/// `90s`, `12m 5s`: a duration for messages.
pub fn human(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs().max(1))).to_string()
}
