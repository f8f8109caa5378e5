//! `run-sweep`: the command once per matrix point. Every stdout line that is a JSON object becomes
//! a record the moment it arrives; a failed point is recorded with its exit code and stderr tail.

use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value as Json};

use super::{run_logged, HostCtx, StepOutcome};
use crate::config::steps::run_sweep::RunSweepPlan;
use crate::events::{Event, RecordStatus, Status};
use crate::plan::PlannedStep;
use crate::store::slug;

pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, plan: &RunSweepPlan) -> Result<StepOutcome> {
    let dir = ctx.step_dir(step)?;
    let (mut ok, mut failed, mut skipped) = (0usize, Vec::new(), 0usize);
    for (n, point) in plan.points.iter().enumerate() {
        let label = point.label();
        if let Some(reason) = &point.skip {
            skipped += 1;
            ctx.record(
                step,
                &point.values,
                Default::default(),
                RecordStatus::Skipped,
                Some(reason.clone()),
            );
            finish_point(
                ctx,
                step,
                &label,
                RecordStatus::Skipped,
                None,
                Some(reason.clone()),
                Instant::now(),
            );
            continue;
        }
        let started = Instant::now();
        ctx.emit(Event::PointStarted {
            host: ctx.host.clone(),
            step: step.name.clone(),
            point: label.clone(),
        });
        let log_base = dir.join(format!("{:03}-{}", n + 1, slug(&label)));
        let mut on_stdout = |line: &str| {
            if let Some(metrics) = parse_record(line) {
                ctx.record(step, &point.values, metrics, RecordStatus::Ok, None);
            }
        };
        let end = run_logged(
            ctx,
            &point.command,
            &format!("{} {label}", step.name),
            &log_base,
            step.timeout,
            &mut on_stdout,
        )
        .await?;
        match end.failure(step.timeout) {
            None => {
                ok += 1;
                finish_point(ctx, step, &label, RecordStatus::Ok, end.exit_code, None, started);
            }
            Some(why) => {
                let mut metrics = serde_json::Map::new();
                if let Some(code) = end.exit_code {
                    metrics.insert("exit_code".into(), code.into());
                }
                metrics.insert("stderr_tail".into(), end.stderr_tail.join("\n").into());
                ctx.record(
                    step,
                    &point.values,
                    metrics,
                    RecordStatus::Failed,
                    Some(why.clone()),
                );
                finish_point(
                    ctx,
                    step,
                    &label,
                    RecordStatus::Failed,
                    end.exit_code,
                    Some(why.clone()),
                    started,
                );
                failed.push(format!("{label}: {why}"));
                if plan.stop_on_failure {
                    break;
                }
            }
        }
    }
    let details =
        json!({ "points": plan.points.len(), "ok": ok, "failed": failed.len(), "skipped": skipped });
    if failed.is_empty() {
        return Ok(StepOutcome::ok(details));
    }
    let error = format!(
        "{} of {} points failed ({})",
        failed.len(),
        plan.points.len(),
        failed.join("; ")
    );
    Ok(StepOutcome {
        status: Status::Failed,
        error: Some(error),
        details,
        provides: Default::default(),
        // Later steps (fetching what was measured) still run unless told to stop.
        stop_host: plan.stop_on_failure,
    })
}

fn finish_point(
    ctx: &HostCtx,
    step: &PlannedStep,
    label: &str,
    status: RecordStatus,
    exit_code: Option<i32>,
    reason: Option<String>,
    started: Instant,
) {
    ctx.emit(Event::PointFinished {
        host: ctx.host.clone(),
        step: step.name.clone(),
        point: label.to_string(),
        status,
        exit_code,
        reason,
        seconds: started.elapsed().as_secs_f64(),
    });
}

/// A stdout line that is a JSON object is a record; anything else is log.
pub fn parse_record(line: &str) -> Option<serde_json::Map<String, Json>> {
    let trimmed = line.trim();
    if !trimmed.starts_with('{') {
        return None;
    }
    match serde_json::from_str(trimmed) {
        Ok(Json::Object(map)) => Some(map),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_objects_are_records() {
        let rec = parse_record(r#"  {"output_throughput": 172.4, "completed": 5}"#).unwrap();
        assert_eq!(rec["output_throughput"], json!(172.4));
        assert!(parse_record("[1, 2]").is_none());
        assert!(parse_record("warming up...").is_none());
        assert!(parse_record("{not json").is_none());
        assert!(parse_record("42").is_none());
    }
}
