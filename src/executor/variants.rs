//! One host's server variants, one after another: each variant's server started (the one
//! before it stopped and gone), timed until ready, the playbook's steps run against it, and the
//! server stopped again. A variant that fails to start is recorded with its reason and log tail,
//! its points failed as `failed to start`, and the next variant runs.

use std::sync::Arc;

use serde_json::{json, Value as Json};

use super::step_loop::{self, Stop};
use crate::config::server_block::ServerPlan;
use crate::config::{Config, HostVars};
use crate::events::{Event, PointRun, Record, RecordStatus, Status};
use crate::plan;
use crate::resume::HostWork;
use crate::steps::server_job::ServerJob;
use crate::steps::variant_server::{self, StartFailure};
use crate::steps::HostCtx;

/// The name of the startup figures' table: one row per variant's server start.
pub const STARTUP_STEP: &str = "server startup";

/// Runs every variant with work left (a resumed run skips the variants that finished); returns
/// where the host first failed. A server that cannot be stopped ends the host: the next variant
/// would share its GPUs.
pub(super) async fn run(
    config: &Config,
    works: &[Arc<HostWork>],
    ctx: &mut HostCtx,
    vars: HostVars,
) -> Option<Stop> {
    let plans = match plan::plan_variants(config, &vars) {
        Ok(plans) => plans,
        Err(e) => {
            return Some(Stop {
                step: "server".into(),
                error: e.to_string(),
            })
        }
    };
    let mut first_failure = None;
    for (plan, work) in plans.iter().zip(works) {
        if work.is_done() {
            continue;
        }
        // The variant's server starts anew: a point cut short runs again, not re-attached.
        ctx.work = Arc::new(work.with_server_restarted());
        ctx.variant = Some(plan.variant.clone());
        match run_variant(config, ctx, plan, &vars).await {
            Ok(failure) => first_failure = first_failure.or(failure),
            Err(stop) => return Some(stop),
        }
    }
    ctx.variant = None;
    first_failure
}

/// One variant: start, measure, stop. Ok(where it failed, if it did); Err when its server could
/// not be stopped (or started at all).
async fn run_variant(
    config: &Config,
    ctx: &mut HostCtx,
    plan: &ServerPlan,
    vars: &HostVars,
) -> Result<Option<Stop>, Stop> {
    let name = plan.variant.name().unwrap_or("server").to_string();
    let at = |step: &str, error: String| Stop {
        step: format!("{name}: {step}"),
        error,
    };
    ctx.emit(Event::VariantStarted {
        host: ctx.host.clone(),
        variant: name.clone(),
        index: plan.variant.index,
        command: plan.command.clone(),
    });
    variant_server::stop_leftovers(ctx, plan.stop_grace)
        .await
        .map_err(|e| at("stopping the servers before it", format!("{e:#}")))?;
    let taken = variant_server::already_answered(ctx, plan)
        .await
        .map_err(|e| at("checking its URL", format!("{e:#}")))?;
    if let Some(reason) = taken {
        let details = json!({ "command": plan.command });
        return Ok(Some(failed_to_start(
            config,
            ctx,
            (plan, vars),
            StartFailure { reason, details },
        )));
    }
    let (running, ready) = variant_server::start(ctx, plan)
        .await
        .map_err(|e| at("starting the server", format!("{e:#}")))?;
    let failure = match ready {
        Ok(startup) => measure(config, ctx, (plan, vars), (&running.job, startup))
            .await
            .map(|s| at(&s.step, s.error)),
        Err(failed) => Some(failed_to_start(config, ctx, (plan, vars), failed)),
    };
    let stopped = variant_server::stop(ctx, running).await;
    ctx.emit(Event::VariantStopped {
        host: ctx.host.clone(),
        variant: name.clone(),
        error: stopped.as_ref().err().map(|e| format!("{e:#}")),
        details: stopped.as_ref().cloned().unwrap_or(Json::Null),
    });
    match stopped {
        Ok(_) => Ok(failure),
        Err(e) => Err(at(
            "stopping the server",
            format!("{e:#}; no further variant is started on this host"),
        )),
    }
}

/// A variant whose server is up: its startup said and recorded, the steps run against it (and
/// the servers they started stopped with it); where the host stopped, if it did.
async fn measure(
    config: &Config,
    ctx: &mut HostCtx,
    (plan, vars): (&ServerPlan, &HostVars),
    (server, startup): (&ServerJob, Json),
) -> Option<Stop> {
    let name = plan.variant.name().unwrap_or("server");
    ready_event(ctx, name, Status::Ok, None, startup.clone());
    startup_record(ctx, config.playbook.steps.len(), &startup, None);
    (ctx.variant_server, ctx.server_gone) = (Some(server.clone()), None);
    let stop = step_loop::run(config, ctx, plan.variant.vars(vars)).await;
    ctx.variant_server = None;
    for started in ctx.servers.drain(..) {
        started.stop();
    }
    stop
}

/// A variant whose server did not come up: said (event, startup record), its steps' points
/// failed with the reason; where the host stops.
fn failed_to_start(
    config: &Config,
    ctx: &HostCtx,
    (plan, vars): (&ServerPlan, &HostVars),
    failed: StartFailure,
) -> Stop {
    let name = plan.variant.name().unwrap_or("server");
    let reason = format!("failed to start: {}", failed.reason);
    ready_event(
        ctx,
        name,
        Status::Failed,
        Some(reason.clone()),
        failed.details.clone(),
    );
    startup_record(ctx, config.playbook.steps.len(), &failed.details, Some(&reason));
    step_loop::fail_all(config, ctx, &plan.variant.vars(vars), &reason);
    Stop {
        step: format!("{name}: server"),
        error: reason,
    }
}

fn ready_event(ctx: &HostCtx, variant: &str, status: Status, error: Option<String>, startup: Json) {
    ctx.emit(Event::VariantReady {
        host: ctx.host.clone(),
        variant: variant.to_string(),
        status,
        error,
        startup,
    });
}

/// The variant's startup as a record of its own table ([`STARTUP_STEP`], after the playbook's
/// steps): launch → ready and → first token, in seconds; failed with the reason otherwise.
fn startup_record(ctx: &HostCtx, step_index: usize, startup: &Json, failed: Option<&str>) {
    let metrics = match failed {
        None => ["ready_seconds", "first_token_seconds"]
            .iter()
            .filter_map(|k| startup.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect(),
        Some(_) => serde_json::Map::new(),
    };
    ctx.emit(Event::Record(Record {
        run: ctx.run_id.clone(),
        host: ctx.host.clone(),
        step: STARTUP_STEP.to_string(),
        step_index,
        point: Default::default(),
        metrics,
        status: if failed.is_some() {
            RecordStatus::Failed
        } else {
            RecordStatus::Ok
        },
        reason: failed.map(String::from),
        at: PointRun::once(1),
        variant: ctx.variant_values(),
        command: None,
    }));
}
