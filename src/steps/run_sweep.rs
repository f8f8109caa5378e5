//! `run-sweep`: the command once per matrix point. Every stdout line that is a JSON object becomes
//! a record the moment it arrives; a failed point is recorded with its exit code and stderr tail.
//! Each run of a point is an attempt (numbered in its records and events): a failed attempt is
//! retried when the step says `retries: N`, a lost one (the host or its connection went away)
//! once. A sweep with `repeat: N` runs
//! each point N times, in the plan's order (see `RunSweepPlan::runs`); each repetition has its
//! own attempts, records, logs and job. A resumed run runs only the (point, repetition) pairs
//! its host's work names (see `crate::resume`).
//!
//! While the sweep runs, its host is watched (`crate::telemetry`): its GPUs when it has
//! nvidia-smi, and the server verify-server checked. Each record gets the telemetry of its
//! window and the problems it shows; each point's samples go beside its logs.
//!
//! The server the sweep measures is watched too (`sweep_server.rs`): when it dies during a
//! point, the point ends at once, failed with the cause; the server is started again or waited
//! for, and the point follows `retries:`. A server gone for good leaves the sweep's remaining
//! points (and later sweeps') not run, with the reason in the step's details (`not_run`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use serde_json::json;

use super::command::CommandEnd;
use super::record_line::{self, Line};
use super::sweep_server::{Death, SweepServer};
use super::{run_logged, HostCtx, StdoutLine, StepOutcome};
use crate::config::steps::backoff;
use crate::config::steps::run_sweep::{RunSweepPlan, SweepPoint};
use crate::config::steps::search::{Bisection, Found, Next, SearchPlan};
use crate::config::HostVars;
use crate::events::NOT_PROBED;
use crate::events::{Event, PointAttempt, PointRun, RecordStatus, Status};
use crate::plan::PlannedStep;
use crate::point::PointKey;
use crate::resume::{Kept, PointWork};
use crate::store::slug;
use crate::telemetry::{Sources, Watch};
use crate::transport::wrapper::new_marker;

pub async fn run(
    ctx: &mut HostCtx,
    step: &PlannedStep,
    plan: &RunSweepPlan,
    vars: &HostVars,
) -> Result<StepOutcome> {
    let dir = ctx.step_dir(step)?;
    if let Some(reason) = &ctx.server_gone {
        return Ok(Tally::default().outcome(plan, Some(reason)));
    }
    let watch = start_watch(ctx, step, &dir, vars).await;
    let server = SweepServer::of(ctx).await;
    let sweep = Sweep {
        step,
        plan,
        dir: &dir,
        watch: &watch,
        server: server.as_ref(),
    };
    let (tally, gone, searched) = match &plan.search {
        None => sweep.every_point(ctx).await?,
        Some(search) => sweep.search(ctx, search).await?,
    };
    let mut outcome = tally.outcome(plan, gone.as_ref());
    watch.sweep_finished().await;
    outcome.details["telemetry"] = watch.details();
    if let Some(searched) = searched {
        outcome.details["search"] = searched;
    }
    ctx.server_gone = gone;
    Ok(outcome)
}

/// A sweep under way on a host: what each of its point runs needs.
struct Sweep<'a> {
    step: &'a PlannedStep,
    plan: &'a RunSweepPlan,
    dir: &'a Path,
    watch: &'a Watch,
    server: Option<&'a SweepServer>,
}

/// How a sweep's runs went: the tally, why the rest was not run (the server gone), and what a
/// capacity search found (for the step's details).
type Swept = (Tally, Option<String>, Option<serde_json::Value>);

impl Sweep<'_> {
    /// Every run of every point, in the plan's order.
    async fn every_point(&self, ctx: &HostCtx) -> Result<Swept> {
        let mut tally = Tally::default();
        for run in self.plan.runs() {
            let outcome = self
                .run_unit(ctx, run.point, run.repetition, Unit::Planned)
                .await?;
            let label = self.plan.points[run.point].label();
            let shown = match self.plan.repeat {
                0 | 1 => label,
                _ => format!("{label} (repetition {})", run.repetition),
            };
            if let Some(stop) = tally.add_and_stop(&shown, outcome, self.plan.stop_on_failure) {
                return Ok((tally, stop, None));
            }
        }
        Ok((tally, None, None))
    }

    /// The capacity search: per series, the probes the bisection asks for, each an ordinary
    /// point run (kept from an earlier attempt when the journal has it, judged again by its
    /// records); then the candidates it did not need recorded skipped as not probed.
    async fn search(&self, ctx: &HostCtx, search: &SearchPlan) -> Result<Swept> {
        let mut tally = Tally::default();
        let mut found = Vec::new();
        for series in series_of(&self.plan.points, &search.axis) {
            let mut bisection = Bisection::new(series.len(), search.probes);
            let mut probed = Vec::new();
            while let Next::Probe(i) = bisection.next() {
                let n = series[i];
                let outcome = self.run_unit(ctx, n, 1, Unit::Probe).await?;
                let verdict = match &outcome {
                    Outcome::Ok { records } => ctx.slo.judge(records),
                    Outcome::Failed { reason, .. } => Err(format!("failed ({reason})")),
                    _ => Err("not measured".to_string()),
                };
                bisection.measured(i, verdict.is_ok());
                probed.push((n, verdict));
                let label = self.plan.points[n].label();
                let stop_on_failure = self.plan.stop_on_failure;
                if let Some(stop) = tally.add_and_stop(&label, outcome, stop_on_failure) {
                    return Ok((tally, stop, Some(json!(found))));
                }
            }
            let result = bisection.found();
            let summary = self.found_words(search, &series, result);
            let why = format!("{NOT_PROBED}: {summary}");
            for &n in series.iter().filter(|n| !probed.iter().any(|(p, _)| p == *n)) {
                let outcome = self.run_unit(ctx, n, 1, Unit::NotProbed(&why)).await?;
                tally.add(&self.plan.points[n].label(), outcome);
            }
            found.push(self.found_details(search, &series, result, &probed));
        }
        Ok((tally, None, Some(json!(found))))
    }

    /// `concurrency=84 met the limits, concurrency=85 did not (9 probes of 128 candidates)`.
    fn found_words(&self, search: &SearchPlan, series: &[usize], found: Found) -> String {
        let at = |i: usize| self.plan.points[series[i]].values[&search.axis].clone();
        let value = |i: usize| format!("{}={}", search.axis, crate::point::value_text(&at(i)));
        let probes = format!(
            "{} of {} candidates",
            crate::words::count(found.probes as usize, "probe"),
            series.len()
        );
        match (found.met, found.missed) {
            (Some(m), Some(x)) => format!("{} met the limits, {} did not ({probes})", value(m), value(x)),
            (Some(m), None) => format!("{} met the limits, the highest candidate ({probes})", value(m)),
            (None, Some(x)) => format!(
                "{} did not meet the limits, the lowest candidate ({probes})",
                value(x)
            ),
            (None, None) => format!("nothing measured ({probes})"),
        }
    }

    /// What the step's details keep of one series' search.
    fn found_details(
        &self,
        search: &SearchPlan,
        series: &[usize],
        found: Found,
        probed: &[(usize, Result<(), String>)],
    ) -> serde_json::Value {
        let point = |n: usize| &self.plan.points[n];
        let value = |i: Option<usize>| i.map(|i| point(series[i]).values[&search.axis].clone());
        json!({
            "series": crate::point::series_label(&point(series[0]).values, &search.axis),
            "met": value(found.met),
            "missed": value(found.missed),
            "exact": found.is_exact(series.len()),
            "probes": found.probes,
            "candidates": series.len(),
            "probed": probed.iter().map(|(n, verdict)| json!({
                "point": point(*n).label(),
                "met": verdict.is_ok(),
                "why": verdict.as_ref().err(),
            })).collect::<Vec<_>>(),
        })
    }

    /// One run of point `n`: kept when an earlier attempt of the run stands, skipped when the
    /// plan skips it or a search did not need it, else measured.
    async fn run_unit(&self, ctx: &HostCtx, n: usize, repetition: u32, unit: Unit<'_>) -> Result<Outcome> {
        let point = &self.plan.points[n];
        let key = PointKey::new(self.step.index, &point.label(), repetition);
        let (work, skip_as) = match unit {
            Unit::Planned => (ctx.work.point(&key), None),
            Unit::Probe => (ctx.work.candidate(&key, None), None),
            Unit::NotProbed(why) => (ctx.work.candidate(&key, Some(why)), Some(why)),
        };
        Ok(match work {
            // Measured (or failed, or skipped) by an earlier attempt of the run: it stands.
            PointWork::Keep { kept, .. } => Outcome::of(kept, ctx.work.records(&key).to_vec()),
            PointWork::Run { attempt } => match skip_as.or(point.skip.as_deref()) {
                Some(reason) => skip(ctx, self.step, point, PointRun { repetition, attempt }, reason),
                None => {
                    let at = Attempts {
                        dir: self.dir,
                        n,
                        repetition,
                        first: attempt,
                    };
                    let watching = (self.step, self.watch, self.server);
                    run_point(ctx, watching, self.plan, point, at).await?
                }
            },
        })
    }
}

/// What a sweep asks of one of its point runs.
#[derive(Clone, Copy)]
enum Unit<'a> {
    /// A point of the plan: run, unless an earlier attempt stands or the plan skips it.
    Planned,
    /// A capacity search's probe (see [`crate::resume::HostWork::candidate`]).
    Probe,
    /// A candidate the search did not need, recorded skipped with this reason.
    NotProbed(&'a str),
}

/// The sweep's points by series (the values of every axis but `axis`), each series' points in
/// the plan's order, which is the candidates' (lowest first).
fn series_of(points: &[SweepPoint], axis: &str) -> Vec<Vec<usize>> {
    let mut series: indexmap::IndexMap<String, Vec<usize>> = indexmap::IndexMap::new();
    for (n, point) in points.iter().enumerate() {
        let label = crate::point::series_label(&point.values, axis);
        series.entry(label).or_default().push(n);
    }
    series.into_values().collect()
}

/// The sweep of a server variant whose server did not start: every point run the host's work
/// still runs is recorded failed with `reason` and finished so (in a capacity search, only each
/// series' first probe; its other candidates are recorded not probed).
pub fn fail(ctx: &HostCtx, step: &PlannedStep, plan: &RunSweepPlan, reason: &str) {
    // A capacity search would have probed each series' lowest candidate first and reached no
    // other: those are not probed, not failed (a table of every candidate failed said more
    // than happened, and a resume must be free to probe them).
    let searched: Option<Vec<usize>> = plan.search.as_ref().map(|s| {
        series_of(&plan.points, &s.axis)
            .iter()
            .map(|series| series[0])
            .collect()
    });
    for run in plan.runs() {
        let point = &plan.points[run.point];
        let key = PointKey::new(step.index, &point.label(), run.repetition);
        let PointWork::Run { attempt } = ctx.work.point(&key) else {
            continue;
        };
        if searched
            .as_ref()
            .is_some_and(|firsts| !firsts.contains(&run.point))
        {
            let run = PointRun {
                repetition: run.repetition,
                attempt,
            };
            skip(ctx, step, point, run, &format!("{NOT_PROBED}: {reason}"));
            continue;
        }
        let at = attempt_at(
            step,
            point,
            PointRun {
                repetition: run.repetition,
                attempt,
            },
        );
        let reason = Some(reason.to_string());
        let metrics = serde_json::Map::new();
        ctx.record(
            step,
            &point.values,
            at.run,
            metrics,
            RecordStatus::Failed,
            reason.clone(),
        );
        let end = PointEnd {
            status: RecordStatus::Failed,
            exit_code: None,
            reason,
        };
        finish_point(ctx, step, &at, end, 0.0);
    }
}

/// Starts watching the host for the sweep: its GPUs (nvidia-smi in a loop, one job, its raw
/// output in `gpu-samples.log` of the step's folder, or the inventory's DCGM exporter) and the
/// server at verify-server's `url` (every scrape in `server-scrapes.jsonl` there).
async fn start_watch(ctx: &HostCtx, step: &PlannedStep, dir: &Path, vars: &HostVars) -> Watch {
    let server_url = vars
        .get("server")
        .and_then(|s| s.get("url"))
        .and_then(|u| u.as_str())
        .map(str::to_string);
    let sources = Sources {
        gpu: ctx.gpu_source.clone(),
        server_url,
    };
    // Never attached to by a resumed run: the sampler is started anew.
    let job = format!("s{:02}-gpu-{}", step.index + 1, &new_marker()[9..17]);
    let who = (ctx.host.as_str(), step.name.as_str(), ctx.events.clone());
    Watch::start(ctx.transport.clone(), who, job, dir, sources).await
}

/// How a point ended: run now (`fresh`) or kept from an earlier attempt.
enum Outcome {
    /// Measured: the metrics of the records it printed.
    Ok {
        records: Vec<Metrics>,
    },
    Failed {
        reason: String,
        fresh: bool,
    },
    Skipped,
    /// Failed as its server died, and the server did not come back: the sweep ends here, and
    /// `not_run` says why its other points are not run.
    ServerGone {
        reason: String,
        not_run: String,
    },
    /// Not run (nor recorded), as the server was gone before it and did not come back.
    NotRun {
        not_run: String,
    },
}

impl Outcome {
    fn of(kept: Kept, records: Vec<Metrics>) -> Outcome {
        match kept {
            Kept::Ok => Outcome::Ok { records },
            Kept::Failed { reason } => Outcome::Failed { reason, fresh: false },
            Kept::Skipped => Outcome::Skipped,
        }
    }
}

/// The sweep's points counted by how they ended, for its outcome.
#[derive(Default)]
struct Tally {
    ok: usize,
    skipped: usize,
    failed: Vec<String>,
}

impl Tally {
    /// Counts `outcome`; returns why the sweep stops there, when it does: `Some(None)` a failed
    /// point with `stop_on_failure`, `Some(Some(why))` the server gone.
    fn add_and_stop(
        &mut self,
        label: &str,
        outcome: Outcome,
        stop_on_failure: bool,
    ) -> Option<Option<String>> {
        let stop = matches!(outcome, Outcome::Failed { fresh: true, .. }) && stop_on_failure;
        let gone = match &outcome {
            Outcome::ServerGone { not_run, .. } | Outcome::NotRun { not_run } => Some(not_run.clone()),
            _ => None,
        };
        self.add(label, outcome);
        match (stop, gone) {
            (_, Some(why)) => Some(Some(why)),
            (true, None) => Some(None),
            (false, None) => None,
        }
    }

    fn add(&mut self, label: &str, outcome: Outcome) {
        match outcome {
            Outcome::Ok { .. } => self.ok += 1,
            Outcome::Skipped => self.skipped += 1,
            Outcome::Failed { reason, .. } | Outcome::ServerGone { reason, .. } => {
                self.failed.push(format!("{label}: {reason}"))
            }
            // Counted among the points not run, with the sweep's reason.
            Outcome::NotRun { .. } => {}
        }
    }

    /// The sweep's outcome; `not_run`: why the points it did not reach were not run (the server
    /// it measures is gone), kept in its details for the tables.
    fn outcome(self, plan: &RunSweepPlan, not_run: Option<&String>) -> StepOutcome {
        let total = plan.points.len() * plan.repeat.max(1) as usize;
        let mut details =
            json!({ "points": total, "ok": self.ok, "failed": self.failed.len(), "skipped": self.skipped });
        if self.failed.is_empty() && not_run.is_none() {
            return StepOutcome::ok(details);
        }
        let mut error = match self.failed.len() {
            0 => String::new(),
            n => format!("{n} of {total} points failed ({})", self.failed.join("; ")),
        };
        let left = total - self.ok - self.skipped - self.failed.len();
        if let Some(why) = not_run {
            // The tables' cell says `not run: <this>`.
            details["not_run"] = json!(why);
            if left > 0 {
                let sep = if error.is_empty() { "" } else { "; " };
                error = format!("{error}{sep}{left} of {total} points not run: {why}");
            }
        }
        StepOutcome {
            status: Status::Failed,
            error: Some(error),
            details,
            provides: Default::default(),
            // Later steps (fetching what was measured) still run unless told to stop.
            stop_host: plan.stop_on_failure,
        }
    }
}

/// A point `skip_if` skips: recorded with the reason (once per repetition, so that a resume
/// sees each repetition done).
fn skip(ctx: &HostCtx, step: &PlannedStep, point: &SweepPoint, run: PointRun, reason: &str) -> Outcome {
    let (at, started) = (attempt_at(step, point, run), Instant::now());
    ctx.record(
        step,
        &point.values,
        run,
        Default::default(),
        RecordStatus::Skipped,
        Some(reason.to_string()),
    );
    let end = PointEnd {
        status: RecordStatus::Skipped,
        exit_code: None,
        reason: Some(reason.to_string()),
    };
    finish_point(ctx, step, &at, end, started.elapsed().as_secs_f64());
    Outcome::Skipped
}

/// Where a point's attempts keep their logs, and the attempt to start with.
#[derive(Clone, Copy)]
struct Attempts<'a> {
    dir: &'a Path,
    /// The point's place in the sweep, from 0.
    n: usize,
    repetition: u32,
    first: u32,
}

impl Attempts<'_> {
    /// `<NNN>-<point>` for the first attempt (as runs before attempts were counted), then
    /// `<NNN>-<point>-attempt<k>`, so that no attempt's logs overwrite another's; a repetition
    /// after the first adds `-rep<r>` after the point.
    fn log_base(&self, label: &str, attempt: u32) -> PathBuf {
        let mut base = format!("{:03}-{}", self.n + 1, slug(label));
        if self.repetition > 1 {
            base = format!("{base}-rep{}", self.repetition);
        }
        match attempt {
            1 => self.dir.join(base),
            k => self.dir.join(format!("{base}-attempt{k}")),
        }
    }

    /// The name of the attempt's detached job on the host: the same for the same attempt, so
    /// that a resumed run attaches to a command still running there instead of starting it
    /// twice. A repetition after the first is named too: `s01-p003-r2-a1`.
    fn job(&self, step_index: usize, attempt: u32) -> String {
        let point = format!("s{:02}-p{:03}", step_index + 1, self.n + 1);
        match self.repetition {
            1 => format!("{point}-a{attempt}"),
            r => format!("{point}-r{r}-a{attempt}"),
        }
    }

    /// The run of the point that attempt `attempt` is.
    fn run(&self, attempt: u32) -> PointRun {
        PointRun {
            repetition: self.repetition,
            attempt,
        }
    }
}

/// Which attempt at which point of `step` its events are about.
fn attempt_at(step: &PlannedStep, point: &SweepPoint, run: PointRun) -> PointAttempt {
    PointAttempt {
        point: point.label(),
        step_index: Some(step.index),
        run,
    }
}

/// Runs one point until an attempt ends it: ok; failed once its `retries` are spent (waiting
/// [`backoff`] between attempts; the host's disk full fails it too); lost (its command stopped or
/// gone on the host) it runs again once as a new attempt, and lost a second time, or with a
/// connection that could not be got back, ends the host (the error). Every attempt that does
/// not end the point is recorded, failed or lost, with its reason and what comes next; one cut
/// short by the interrupt is recorded lost as it is dropped (see [`CutShort`]).
async fn run_point(
    ctx: &HostCtx,
    (step, watch, server): (&PlannedStep, &Watch, Option<&SweepServer>),
    plan: &RunSweepPlan,
    point: &SweepPoint,
    at: Attempts<'_>,
) -> Result<Outcome> {
    let label = point.label();
    let (mut attempt, mut retried, mut rerun_lost) = (at.first, 0, false);
    loop {
        if let Some(gone) = server.and_then(|s| s.gone(ctx).map(|death| (s, death))) {
            let (server, Death { cause, .. }) = gone;
            if let Err(why_not) = server.recover(ctx, (&step.name, &label), &cause).await {
                let not_run = format!("the server was gone before {label} and did not come back: {why_not}");
                return Ok(Outcome::NotRun { not_run });
            }
        }
        let started = Instant::now();
        let this = attempt_at(step, point, at.run(attempt));
        ctx.emit(Event::PointStarted {
            host: ctx.host.clone(),
            step: step.name.clone(),
            at: this.clone(),
            variant: ctx.variant_name().map(String::from),
        });
        let job = format!("{}{}", ctx.job_prefix(), at.job(step.index, attempt));
        let log_base = at.log_base(&label, attempt);
        let cut_short = CutShort {
            ctx,
            step,
            point,
            at: &this,
            started,
        };
        let watching = (step, watch, server);
        let (ended, records) = match run_attempt(ctx, watching, point, &log_base, &job, at.run(attempt)).await
        {
            Ok((attempted, records)) => (Ok(attempted), records),
            Err(e) => (Err(e), Vec::new()),
        };
        std::mem::forget(cut_short);
        let (why, end) = match ended {
            Err(e) if crate::transport::is_lost(&e) => {
                // A connection that could not be got back ends the host: nothing to run again on.
                let last = rerun_lost || ctx.transport.gave_up();
                let why = match last {
                    true => format!("{e:#}"),
                    false => format!("{e:#}; runs again as attempt {}", attempt + 1),
                };
                finish_attempt(ctx, (step, point, &this), RecordStatus::Lost, &why, None, started);
                if last {
                    return Err(e.context(format!("{} {label}", step.name)));
                }
                rerun_lost = true;
                attempt += 1;
                continue;
            }
            // The point fails, not the host: the next point may find room again.
            Err(e) if crate::transport::is_disk_full(&e) => (format!("{e:#}"), None),
            Err(e) => return Err(e),
            Ok(Attempted::ServerDied(Death { cause, rebooted })) => {
                let server = server.expect("only a watched server dies");
                let said = format!("the server died during the point: {cause}");
                match server.recover(ctx, (&step.name, &label), &cause).await {
                    // Lost with the host, as the point's own command: run again, not failed.
                    Ok(words) if rebooted && !rerun_lost => {
                        let why = format!("{said}; {words}; runs again as attempt {}", attempt + 1);
                        finish_attempt(ctx, (step, point, &this), RecordStatus::Lost, &why, None, started);
                        (rerun_lost, attempt) = (true, attempt + 1);
                        continue;
                    }
                    Ok(words) => (format!("{said}; {words}"), None),
                    Err(why_not) => {
                        let why = format!("{said}; {why_not}");
                        finish_attempt(
                            ctx,
                            (step, point, &this),
                            RecordStatus::Failed,
                            &why,
                            None,
                            started,
                        );
                        let not_run =
                            format!("the server died during {label} and did not come back: {why_not}");
                        return Ok(Outcome::ServerGone { reason: why, not_run });
                    }
                }
            }
            Ok(Attempted::Ended(end)) => match end.failure(step.timeout) {
                None => {
                    let end = PointEnd {
                        status: RecordStatus::Ok,
                        exit_code: end.exit_code,
                        reason: None,
                    };
                    finish_point(ctx, step, &this, end, started.elapsed().as_secs_f64());
                    return Ok(Outcome::Ok { records });
                }
                Some(why) => (why, Some(end)),
            },
        };
        let failed = (step, point, &this);
        if retried == plan.retries {
            finish_attempt(ctx, failed, RecordStatus::Failed, &why, end.as_ref(), started);
            return Ok(Outcome::Failed {
                reason: why,
                fresh: true,
            });
        }
        retried += 1;
        let wait = backoff(retried);
        let next = format!(
            "{why}; retry {retried} of {} in {} (attempt {})",
            plan.retries,
            super::human(wait),
            attempt + 1
        );
        finish_attempt(ctx, failed, RecordStatus::Failed, &next, end.as_ref(), started);
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// An attempt in flight: dropped before it ended (the host's task stopped by Ctrl-C, SIGTERM
/// or SIGHUP; the host's command is told to stop as its follower drops), it records the attempt
/// lost with why the run stopped (`HostCtx::stopping`), so that the tables say what happened and
/// a resume runs the point as its next attempt. Forgotten once the attempt ended.
struct CutShort<'a> {
    ctx: &'a HostCtx,
    step: &'a PlannedStep,
    point: &'a SweepPoint,
    at: &'a PointAttempt,
    started: Instant,
}

impl Drop for CutShort<'_> {
    fn drop(&mut self) {
        let why = match (std::thread::panicking(), self.ctx.stopping.get()) {
            (true, _) => "cut short: rigrun failed while it ran (see the error it printed)",
            (false, Some(why)) => why,
            (false, None) => "cut short",
        };
        let at = (self.step, self.point, self.at);
        finish_attempt(self.ctx, at, RecordStatus::Lost, why, None, self.started);
    }
}

/// The point's command with the playbook's limits in its environment (`RIGRUN_SLO`), so that
/// `rigrun bench` there reports goodput by them without a `--slo` of its own.
fn with_slo(slo: &crate::config::slo::Slo, command: &str) -> String {
    if slo.is_empty() {
        return command.to_string();
    }
    let flag = crate::config::template::shell_quote(&slo.to_flag());
    format!("export {}={flag}; {command}", crate::config::slo::SLO_ENV)
}

/// What a stdout line made, on its way to be recorded in order.
enum Made {
    Record(Metrics),
    Unreadable {
        number: usize,
        text: String,
        why: String,
    },
}

/// One attempt at a point: its command run, every JSON-object line of its stdout recorded as
/// made by `run` as it arrives (with the telemetry of its window: a scrape of the server, so
/// milliseconds later). `run` is known before the command starts, so that the transport can key
/// the command's job on the host by (run, step, point, repetition, attempt). The point's samples
/// are written to `<log_base>.telemetry.jsonl` when it ends. Returns how it ended and the
/// metrics it recorded.
async fn run_attempt(
    ctx: &HostCtx,
    (step, watch, server): (&PlannedStep, &Watch, Option<&SweepServer>),
    point: &SweepPoint,
    log_base: &Path,
    job: &str,
    run: PointRun,
) -> Result<(Attempted, Vec<Metrics>)> {
    let label = point.label();
    let mut mark = watch.point_started(&label).await;
    let (made, mut arrived) = tokio::sync::mpsc::unbounded_channel();
    let mut line_number = 0;
    let mut on_stdout = move |line: StdoutLine| {
        line_number += 1;
        let text = match line {
            StdoutLine::Text(text) => text,
            StdoutLine::Overlong { record_like: false } => {
                return too_long(ctx, step, &label, line_number);
            }
            StdoutLine::Overlong { .. } => "",
        };
        let _ = match read_line(line) {
            Line::Record(metrics) => made.send(Made::Record(metrics)),
            Line::Unreadable(why) => made.send(Made::Unreadable {
                number: line_number,
                text: text.to_string(),
                why,
            }),
            Line::Log => Ok(()),
        };
    };
    let shown = format!("{} {}", step.name, point.label());
    let point_command = with_slo(&ctx.slo, &point.command);
    let command = async move {
        // `on_stdout` (and with it the channel's sender) ends with the command.
        run_logged(
            ctx,
            job,
            &point_command,
            &shown,
            log_base,
            step.timeout,
            &mut on_stdout,
        )
        .await
    };
    let claims = crate::telemetry::problems::Claims::of(&point.values);
    let records = async {
        let mut kept = Vec::new();
        while let Some(made) = arrived.recv().await {
            match made {
                Made::Record(mut metrics) => {
                    watch.annotate(&mut mark, &mut metrics, claims.clone()).await;
                    kept.push(metrics.clone());
                    ctx.record_measured(step, point, run, metrics);
                }
                Made::Unreadable { number, text, why } => {
                    let at = (point.label(), run, number);
                    kept.push(unreadable(
                        ctx,
                        step,
                        &point.values,
                        (&at.0, at.1, at.2),
                        &text,
                        &why,
                    ))
                }
            }
        }
        kept
    };
    // A server that dies ends the command (dropped, it is stopped on the host); what it printed
    // until then is still recorded.
    let guarded = async {
        let Some(server) = server else {
            return command.await.map(Attempted::Ended);
        };
        tokio::select! {
            ended = command => ended.map(Attempted::Ended),
            cause = server.died(ctx) => Ok(Attempted::ServerDied(cause)),
        }
    };
    let (ended, records) = tokio::join!(guarded, records);
    watch
        .point_finished(&mark, &crate::store::beside(log_base, ".telemetry.jsonl"))
        .await;
    ended.map(|attempted| (attempted, records))
}

/// A record's metrics.
type Metrics = serde_json::Map<String, serde_json::Value>;

/// How an attempt's command ended: by itself, or cut short as the server it measures died.
enum Attempted {
    Ended(CommandEnd),
    ServerDied(Death),
}

/// An attempt that did not end the point well, `status` failed or lost: recorded with `why`
/// and, when the command ran, its exit code and stderr tail.
fn finish_attempt(
    ctx: &HostCtx,
    (step, point, at): (&PlannedStep, &SweepPoint, &PointAttempt),
    status: RecordStatus,
    why: &str,
    end: Option<&CommandEnd>,
    started: Instant,
) {
    let mut metrics = serde_json::Map::new();
    if let Some(end) = end {
        if let Some(code) = end.exit_code {
            metrics.insert("exit_code".into(), code.into());
        }
        metrics.insert("stderr_tail".into(), end.stderr_tail.join("\n").into());
    }
    let reason = Some(why.to_string());
    ctx.record(step, &point.values, at.run, metrics, status, reason.clone());
    let end = PointEnd {
        status,
        exit_code: end.and_then(|e| e.exit_code),
        reason,
    };
    finish_point(ctx, step, at, end, started.elapsed().as_secs_f64());
}

/// How an attempt at a point ended, as its `point_finished` event says.
struct PointEnd {
    status: RecordStatus,
    exit_code: Option<i32>,
    reason: Option<String>,
}

/// The `point_finished` of an attempt that took `seconds`.
fn finish_point(ctx: &HostCtx, step: &PlannedStep, at: &PointAttempt, end: PointEnd, seconds: f64) {
    ctx.emit(Event::PointFinished {
        host: ctx.host.clone(),
        step: step.name.clone(),
        at: at.clone(),
        status: end.status,
        exit_code: end.exit_code,
        reason: end.reason,
        seconds,
        variant: ctx.variant_name().map(String::from),
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
/// Returns that record's metrics.
fn unreadable(
    ctx: &HostCtx,
    step: &PlannedStep,
    point: &crate::point::Values,
    (label, run, number): (&str, PointRun, usize),
    line: &str,
    why: &str,
) -> Metrics {
    let what = format!(
        "{} {label}: stdout line {number} is not a record: {why}: {}",
        step.name,
        crate::http_client::excerpt(line.as_bytes())
    );
    ctx.emit(Event::Warning {
        host: ctx.host.clone(),
        message: format!("{what} (the whole line is in the point's log)"),
    });
    let mut metrics = serde_json::Map::new();
    crate::events::mark_invalid(&mut metrics, vec![what]);
    ctx.record(step, point, run, metrics.clone(), RecordStatus::Ok, None);
    metrics
}
