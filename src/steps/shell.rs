//! `shell`: one command on the host (setup, `nvidia-smi`, `systemctl restart sglang`), output kept.

use anyhow::Result;
use serde_json::json;

use super::{run_logged, HostCtx, StepOutcome};
use crate::config::steps::shell::ShellPlan;
use crate::plan::PlannedStep;

pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, plan: &ShellPlan) -> Result<StepOutcome> {
    let command = &plan.command;
    let log_base = ctx.step_dir(step)?.join("output");
    let job = format!("s{:02}", step.index + 1);
    let end = run_logged(ctx, &job, command, &step.name, &log_base, None, &mut |_| {}).await?;
    let details = json!({ "command": command, "exit_code": end.exit_code });
    Ok(match end.failure(None) {
        None => StepOutcome::ok(details),
        Some(why) => StepOutcome::failed(why, details),
    })
}
