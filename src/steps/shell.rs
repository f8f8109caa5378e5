//! `shell`: one command on the host (setup, `nvidia-smi`, `systemctl restart sglang`), output kept.
//! A failed command is run again when the step says `retries: N` (waiting 1 s, 2 s, 4 s, …);
//! each failed attempt is said as a warning and listed in the step's details.

use anyhow::Result;
use serde_json::json;

use super::{run_logged, HostCtx, StepOutcome};
use crate::config::steps::backoff;
use crate::config::steps::shell::ShellPlan;
use crate::events::Event;
use crate::plan::PlannedStep;
use crate::transport::wrapper::new_marker;

pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, plan: &ShellPlan) -> Result<StepOutcome> {
    let command = &plan.command;
    let dir = ctx.step_dir(step)?;
    let mut failures: Vec<String> = Vec::new();
    loop {
        let attempt = failures.len() as u32 + 1;
        let log_base = match attempt {
            1 => dir.join("output"),
            k => dir.join(format!("output-attempt{k}")),
        };
        // A shell step is never attached to again: a resumed run runs it anew.
        let job = format!("s{:02}-{}-a{attempt}", step.index + 1, &new_marker()[9..17]);
        let end = run_logged(ctx, &job, command, &step.name, &log_base, None, &mut |_| {}).await?;
        let mut details = json!({ "command": command, "exit_code": end.exit_code });
        if !failures.is_empty() {
            details["failed_attempts"] = json!(failures);
        }
        let Some(why) = end.failure(None) else {
            return Ok(StepOutcome::ok(details));
        };
        if attempt > plan.retries {
            return Ok(StepOutcome::failed(why, details));
        }
        let wait = backoff(attempt);
        let next = format!(
            "attempt {attempt}: {why}; retry {attempt} of {} in {}",
            plan.retries,
            super::human(wait)
        );
        ctx.emit(Event::Warning {
            host: ctx.host.clone(),
            message: format!("{}: {next}", step.name),
        });
        failures.push(next);
        tokio::time::sleep(wait).await;
    }
}
