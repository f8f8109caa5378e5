//! The playbook's steps on one host, in order, each said as it starts and ends: run (the host
//! task's and each server variant's), or failed without running (a variant whose server did
//! not start).

use std::collections::HashSet;

use crate::config::{Config, HostVars, Step};
use crate::events::{Event, Status};
use crate::plan;
use crate::steps::{self, HostCtx};

/// Where a host stopped and why.
pub(super) struct Stop {
    pub step: String,
    pub error: String,
}

/// Runs the steps in order (in a resumed run, those its work names: see `HostWork::resumed`);
/// returns where the host stopped, if it failed.
pub(super) async fn run(config: &Config, ctx: &mut HostCtx, mut vars: HostVars) -> Option<Stop> {
    let mut first_failure = None;
    let work = ctx.work.clone();
    for (index, step) in config.playbook.steps.iter().enumerate() {
        if !work.runs_step(index) {
            continue;
        }
        let attempt = work.step_attempt(index);
        started(ctx, index, step, attempt);
        let clock = std::time::Instant::now();
        let outcome = match plan::plan_step(config, index, step, &vars, &HashSet::new()) {
            Ok(planned) => steps::run(ctx, &plan::PlannedStep { attempt, ..planned }, &vars).await,
            Err(e) => steps::StepOutcome::failed(e.to_string(), serde_json::Value::Null),
        };
        let ended = Ended {
            status: outcome.status,
            error: outcome.error.clone(),
            details: outcome.details,
            seconds: clock.elapsed().as_secs_f64(),
        };
        finished(ctx, index, step, attempt, ended);
        vars.extend(outcome.provides);
        if outcome.status == Status::Failed && first_failure.is_none() {
            first_failure = Some(Stop {
                step: format!("{}. {}", index + 1, step.display_name()),
                error: outcome.error.unwrap_or_default(),
            });
        }
        if outcome.stop_host {
            break;
        }
    }
    first_failure
}

/// Ends every step with work left without running it: each point it would have measured is
/// failed with `reason` (so the tables say so and `--resume` keeps it unless `--redo-failed`),
/// every other step is skipped with it.
pub(super) fn fail_all(config: &Config, ctx: &HostCtx, vars: &HostVars, reason: &str) {
    for (index, step) in config.playbook.steps.iter().enumerate() {
        if !ctx.work.runs_step(index) {
            continue;
        }
        let attempt = ctx.work.step_attempt(index);
        started(ctx, index, step, attempt);
        let (status, error) = match plan::plan_step(config, index, step, vars, &HashSet::new()) {
            Ok(planned) => (steps::not_started(ctx, &planned, reason), reason.to_string()),
            Err(e) => (
                Status::Failed,
                format!("{reason}; the step cannot be planned either: {e}"),
            ),
        };
        let ended = Ended {
            status,
            error: Some(error),
            details: serde_json::Value::Null,
            seconds: 0.0,
        };
        finished(ctx, index, step, attempt, ended);
    }
}

/// How a step ended, as its `StepFinished` says it.
struct Ended {
    status: Status,
    error: Option<String>,
    details: serde_json::Value,
    seconds: f64,
}

fn started(ctx: &HostCtx, index: usize, step: &Step, attempt: u32) {
    ctx.emit(Event::StepStarted {
        host: ctx.host.clone(),
        index,
        name: step.display_name(),
        kind: step.kind().to_string(),
        attempt,
        variant: ctx.variant_name().map(String::from),
    });
}

fn finished(ctx: &HostCtx, index: usize, step: &Step, attempt: u32, ended: Ended) {
    ctx.emit(Event::StepFinished {
        host: ctx.host.clone(),
        index,
        name: step.display_name(),
        attempt,
        status: ended.status,
        error: ended.error,
        details: ended.details,
        seconds: ended.seconds,
        variant: ctx.variant_name().map(String::from),
    });
}
