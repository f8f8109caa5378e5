//! `run-sweep`: the command once per matrix point. Every stdout line that is a JSON object becomes
//! a record the moment it arrives; a failed point is recorded with its exit code and stderr tail.

use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value as Json};

use super::record_line::{self, Line};
use super::{run_logged, HostCtx, StdoutLine, StepOutcome};
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
        let mut line_number = 0;
        let mut on_stdout = |line: StdoutLine| {
            line_number += 1;
            let text = match line {
                StdoutLine::Text(text) => text,
                StdoutLine::Overlong { record_like: false } => {
                    return too_long(ctx, step, &label, line_number);
                }
                StdoutLine::Overlong { .. } => "",
            };
            match read_line(line) {
                Line::Record(metrics) => ctx.record(step, &point.values, metrics, RecordStatus::Ok, None),
                Line::Unreadable(why) => {
                    unreadable(ctx, step, &point.values, &label, line_number, text, &why)
                }
                Line::Log => {}
            }
        };
        let job = format!("s{:02}-p{:03}", step.index + 1, n + 1);
        let end = run_logged(
            ctx,
            &job,
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

/// What a stdout line is; one too long to read is said to be so.
fn read_line(line: StdoutLine) -> Line {
    match line {
        StdoutLine::Text(text) => record_line::read(text),
        StdoutLine::Overlong { .. } => Line::Unreadable(format!(
            "it is longer than {} MiB, so it is kept in the log but not read",
            crate::transport::LINE_CAP >> 20
        )),
    }
}

/// A line too long to read that does not look like a record: a note, the point is not hurt.
fn too_long(ctx: &HostCtx, step: &PlannedStep, label: &str, number: usize) {
    ctx.emit(Event::Warning {
        host: ctx.host.clone(),
        message: format!(
            "{} {label}: stdout line {number} is longer than {} MiB; it is kept in the point's log \
             but not read as a record",
            step.name,
            crate::transport::LINE_CAP >> 20
        ),
    });
}

/// A line that looked like a record but could not be read: a warning naming host, point and
/// line, and a record marked invalid in its place, so that the table shows the point was hurt.
fn unreadable(
    ctx: &HostCtx,
    step: &PlannedStep,
    point: &crate::point::Values,
    label: &str,
    number: usize,
    line: &str,
    why: &str,
) {
    let what = format!(
        "{} {label}: stdout line {number} is not a record: {why}: {}",
        step.name,
        crate::http::excerpt(line.as_bytes())
    );
    ctx.emit(Event::Warning {
        host: ctx.host.clone(),
        message: format!("{what} (the whole line is in the point's log)"),
    });
    let mut metrics = serde_json::Map::new();
    record_line::mark_invalid(&mut metrics, vec![what]);
    ctx.record(step, point, metrics, RecordStatus::Ok, None);
}

/// A line that is a JSON object is a record (repaired when it held non-finite numbers).
pub fn parse_record(line: &str) -> Option<serde_json::Map<String, Json>> {
    match record_line::read(line) {
        Line::Record(map) => Some(map),
        Line::Unreadable(_) | Line::Log => None,
    }
}
