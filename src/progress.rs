//! Live progress on stderr: a line per host on a terminal (indicatif), plain prefixed lines
//! otherwise. Output lines of commands are shown prefixed with host and point. A sweep's
//! points say where they stand (`3/9`, `rep 2/3`) and how long the rest should take, from
//! `sweep_progress`.

use std::io::IsTerminal;
use std::time::Duration;

use indexmap::IndexMap;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::events::{Event, RecordStatus, Status};
use crate::sweep_progress::{HostSweeps, SweepProgress};
use crate::words::count;

pub struct Progress {
    /// Bars per host on a terminal; None for plain lines.
    bars: Option<(MultiProgress, IndexMap<String, ProgressBar>)>,
    steps: usize,
    /// Whether command output lines are shown (always kept in the run directory).
    show_output: bool,
    /// Each host's sweeps, when the run said what they hold (see [`Progress::with_sweeps`]).
    sweeps: IndexMap<String, SweepProgress>,
    /// Each Slurm host's last reason for waiting in the queue.
    queue_reasons: std::collections::HashMap<String, String>,
}

impl Progress {
    pub fn new(hosts: &[String], steps: usize, show_output: bool) -> Progress {
        let bars = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{spinner} {prefix:.bold} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            let width = hosts.iter().map(String::len).max().unwrap_or(0);
            let bars = hosts
                .iter()
                .map(|h| {
                    let bar = multi.add(ProgressBar::new_spinner());
                    bar.set_style(style.clone());
                    bar.set_prefix(format!("{h:width$}"));
                    bar.set_message("waiting");
                    bar.enable_steady_tick(Duration::from_millis(120));
                    (h.clone(), bar)
                })
                .collect();
            (multi, bars)
        });
        Progress {
            bars,
            steps,
            show_output,
            sweeps: IndexMap::new(),
            queue_reasons: Default::default(),
        }
    }

    /// What each host's sweeps will run, so that points are counted (`3/9`) and the time left
    /// estimated.
    pub fn with_sweeps(mut self, totals: IndexMap<String, HostSweeps>) -> Progress {
        self.sweeps = totals
            .into_iter()
            .map(|(h, t)| (h, SweepProgress::new(t)))
            .collect();
        self
    }

    fn line(&self, text: String) {
        match &self.bars {
            Some((multi, _)) => {
                let _ = multi.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    fn status(&self, host: &str, text: String) {
        match &self.bars {
            Some((_, bars)) => {
                if let Some(bar) = bars.get(host) {
                    bar.set_message(text);
                }
            }
            None => eprintln!("[{host}] {text}"),
        }
    }

    /// Shows one event: a host's status (its bar, or a `[host] …` line) or a line of its own.
    pub fn show(&mut self, event: &Event) {
        match event {
            Event::HostConnecting { host } => self.status(host, "connecting".into()),
            Event::HostQueued {
                host,
                job_id,
                reason,
                waited_secs,
            } => {
                // Without a live bar a line is printed: once per reason, not at every look.
                let seen = self.queue_reasons.insert(host.clone(), reason.clone());
                if self.bars.is_some() || seen.as_ref() != Some(reason) {
                    self.status(host, queued_text(job_id, reason, *waited_secs))
                }
            }
            Event::HostConnected { host, facts } => {
                self.status(host, connected_text(facts.arch.as_deref(), facts.gpu_count))
            }
            Event::StepStarted {
                host, index, name, ..
            } => self.status(host, format!("step {}/{}: {name}", index + 1, self.steps)),
            Event::PointStarted { host, .. } => {
                let text = self.point_started(event);
                self.status(host, text);
            }
            Event::PointFinished { .. } => self.point_finished(event),
            Event::Output {
                host, label, line, ..
            } => self.output(host, label, line),
            Event::StepFinished { .. } => self.step_finished(event),
            Event::HostFinished {
                host,
                status,
                failed_step,
                ..
            } => self.host_finished(host, host_end_text(status, failed_step.as_deref())),
            Event::Warning { host, message }
            | Event::Notice { host, message }
            | Event::HostRebooted { host, message, .. } => self.line(format!("[{host}] warning: {message}")),
            Event::VariantStarted { host, variant, .. } => {
                self.variant_said(host, variant, "starting the server")
            }
            Event::VariantReady {
                host,
                variant,
                error,
                startup,
                ..
            } => self.variant_said(host, variant, &startup_text(error, startup)),
            Event::VariantStopped {
                host,
                variant,
                error: Some(e),
                ..
            } => self.variant_said(host, variant, &format!("the server could not be stopped: {e}")),
            Event::ServerCrashed {
                host,
                step,
                point,
                cause,
                outcome,
                ..
            } => self.line(format!(
                "[{host}] {step} {point}: the server died ({cause}); {outcome}"
            )),
            Event::Interrupted => self.line("interrupted: stopping the commands on every host…".into()),
            _ => {}
        }
    }

    /// A command's output line, prefixed with host and point, when output is shown; counted as
    /// shown either way (see `output_backlog`).
    fn output(&self, host: &str, label: &str, line: &str) {
        crate::events::output_backlog::shown();
        if self.show_output {
            self.line(format!("[{host} {label}] {}", shorten_record(line)));
        }
    }

    /// A step's end as a line: `[host] step 2/5 run-sweep: ok (12.3s)`, or why it failed.
    fn step_finished(&self, event: &Event) {
        let Event::StepFinished {
            host,
            index,
            name,
            status,
            error,
            seconds,
            variant,
            ..
        } = event
        else {
            return;
        };
        let host = crate::point::column(host, variant.as_deref());
        let how = match (status, error) {
            (Status::Ok, _) => format!("ok ({seconds:.1}s)"),
            (_, Some(e)) => format!("FAILED: {e}"),
            _ => "failed".into(),
        };
        self.line(format!(
            "[{host}] step {}/{} {name}: {how}",
            index + 1,
            self.steps
        ));
    }

    /// A host's end: its bar finished with `text` on a terminal, a `[host] …` line otherwise.
    fn host_finished(&self, host: &str, text: String) {
        if let Some((_, bars)) = &self.bars {
            if let Some(bar) = bars.get(host) {
                bar.finish_with_message(text);
                return;
            }
        }
        self.status(host, text);
    }

    /// A line about a host's server variant: `[host] variant v1: …`.
    fn variant_said(&self, host: &str, variant: &str, what: &str) {
        self.line(format!("[{host}] variant {variant}: {what}"));
    }

    /// The host's line when a point starts: `step 4/5: run-sweep concurrency=16 (point 3/9,
    /// rep 2/3) · about 1m left (estimated …)`.
    fn point_started(&mut self, event: &Event) -> String {
        let Some(at) = PointAt::of(event) else {
            return String::new();
        };
        let step_of = at
            .step_index
            .map(|i| format!("step {}/{}: ", i + 1, self.steps))
            .unwrap_or_default();
        let (step, point) = (at.step, at.point);
        let Some(sweep) = self.sweeps.get_mut(at.host) else {
            return format!("{step_of}{step} {point}{}", attempt_note(at.attempt));
        };
        let index = at.step_index.unwrap_or(0);
        let number = sweep.started(at.variant, index, point, at.repetition);
        let mut notes = vec![format!("point {number}/{}", sweep.counts().1)];
        notes.extend(at.notes(sweep.repeat_of(index)));
        // Plain output says the estimate on lines of its own, now and then.
        let estimate = match self.bars.is_some() {
            true => sweep.estimate().map(|e| format!(" · {e}")).unwrap_or_default(),
            false => String::new(),
        };
        format!("{step_of}{step} {point} ({}){estimate}", notes.join(", "))
    }

    /// A point's end as a line (`[host] run-sweep concurrency=16 (3/9, rep 2/3): ok in 1.8s`)
    /// and, now and then in plain output (every tenth of the points), the estimate of the rest.
    fn point_finished(&mut self, event: &Event) {
        let (
            Some(at),
            Event::PointFinished {
                status,
                reason,
                seconds,
                ..
            },
        ) = (PointAt::of(event), event)
        else {
            return;
        };
        let how = match status {
            RecordStatus::Ok => format!("ok in {seconds:.1}s"),
            RecordStatus::Skipped => format!("skipped: {}", reason.as_deref().unwrap_or("")),
            RecordStatus::Failed => format!("FAILED: {}", reason.as_deref().unwrap_or("")),
            RecordStatus::Lost => format!("lost: {}", reason.as_deref().unwrap_or("")),
        };
        let (host, step, point) = (at.host, at.step, at.point);
        let column = crate::point::column(host, at.variant);
        let Some(sweep) = self.sweeps.get_mut(host) else {
            self.line(format!(
                "[{column}] {step} {point}{}: {how}",
                attempt_note(at.attempt)
            ));
            return;
        };
        let index = at.step_index.unwrap_or(0);
        let run = (
            at.variant.map(String::from),
            index,
            point.to_string(),
            at.repetition,
        );
        let counted = sweep.finished(run, *seconds, *status == RecordStatus::Skipped);
        let mut notes: Vec<String> = counted
            .map(|(done, total)| format!("{done}/{total}"))
            .into_iter()
            .collect();
        notes.extend(at.notes(sweep.repeat_of(index)));
        let notes = match notes.is_empty() {
            true => String::new(),
            false => format!(" ({})", notes.join(", ")),
        };
        let estimate = sweep.estimate();
        let (done, total) = sweep.counts();
        let announce = self.bars.is_none() && sweep.announce();
        self.line(format!("[{column}] {step} {point}{notes}: {how}"));
        if let (true, Some(estimate)) = (announce, &estimate) {
            self.line(format!("[{host}] {done}/{total} points done; {estimate}"));
        }
        if self.bars.is_some() {
            let left = estimate.map(|e| format!(" · {e}")).unwrap_or_default();
            self.status(host, format!("{step}: {done}/{total} points done{left}"));
        }
    }

    pub fn finish(&mut self) {
        if let Some((_, bars)) = &self.bars {
            for bar in bars.values().filter(|b| !b.is_finished()) {
                bar.finish();
            }
        }
        self.say_lines_left_out();
    }

    /// Once the run ends: how many output lines the display left out in all, so that every line
    /// printed was shown or counted (the notes before later lines miss those left out last).
    fn say_lines_left_out(&self) {
        let left_out = crate::events::output_backlog::left_out();
        if self.show_output && left_out > 0 {
            self.line(format!(
                "{left_out} output lines not shown in all: the display fell behind (the logs in \
                 the run directory keep every line)"
            ));
        }
    }
}

/// Where a point's start or end happened: the fields both events carry.
struct PointAt<'a> {
    host: &'a str,
    step: &'a str,
    point: &'a str,
    step_index: Option<usize>,
    attempt: u32,
    repetition: u32,
    variant: Option<&'a str>,
}

impl<'a> PointAt<'a> {
    fn of(event: &'a Event) -> Option<PointAt<'a>> {
        match event {
            Event::PointStarted {
                host,
                step,
                at,
                variant,
            }
            | Event::PointFinished {
                host,
                step,
                at,
                variant,
                ..
            } => Some(PointAt {
                host,
                step,
                point: &at.point,
                step_index: at.step_index,
                attempt: at.run.attempt,
                repetition: at.run.repetition,
                variant: variant.as_deref(),
            }),
            _ => None,
        }
    }

    /// `rep 2/3` in a sweep measuring each point `repeat` times, `attempt 2` after the first.
    fn notes(&self, repeat: u32) -> Vec<String> {
        let rep = (repeat > 1).then(|| format!("rep {}/{repeat}", self.repetition));
        let attempt = (self.attempt > 1).then(|| format!("attempt {}", self.attempt));
        rep.into_iter().chain(attempt).collect()
    }
}

/// A host's status once connected: `connected (x86_64, 8 GPUs)`.
fn connected_text(arch: Option<&str>, gpu_count: Option<u64>) -> String {
    let arch = arch.unwrap_or("?");
    let gpus = gpu_count
        .map(|n| format!(", {}", count(n as usize, "GPU")))
        .unwrap_or_default();
    format!("connected ({arch}{gpus})")
}

/// `queued 2m13s (Priority), Slurm job 4242`; without a reason while Slurm has none yet (`None`,
/// a job the scheduler has not looked at).
fn queued_text(job_id: &str, reason: &str, waited_secs: f64) -> String {
    let waited = humantime::format_duration(std::time::Duration::from_secs(waited_secs as u64));
    let reason = match reason {
        "" | "None" => String::new(),
        reason => format!(" ({reason})"),
    };
    format!(
        "queued {}{reason}, Slurm job {job_id}",
        waited.to_string().replace(' ', "")
    )
}

/// A host's status at its end: `done`, or the step it failed at.
fn host_end_text(status: &Status, failed_step: Option<&str>) -> String {
    match (status, failed_step) {
        (Status::Ok, _) => "done".to_string(),
        (_, Some(step)) => format!("FAILED at {step}"),
        _ => "failed".into(),
    }
}

/// How a variant's server came up: `ready in 4.2s, first token at 4.3s`, or why it did not.
fn startup_text(error: &Option<String>, startup: &serde_json::Value) -> String {
    if let Some(e) = error {
        return format!("FAILED: {e}");
    }
    let secs = |k: &str| startup.get(k).and_then(serde_json::Value::as_f64);
    let mut text = format!("ready in {:.1}s", secs("ready_seconds").unwrap_or_default());
    if let Some(t) = secs("first_token_seconds") {
        text.push_str(&format!(", first token at {t:.1}s"));
    }
    text
}

/// A JSON result line is shown as its headline numbers; the whole record is in the run directory.
fn shorten_record(line: &str) -> String {
    let Ok(serde_json::Value::Object(record)) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
        return line.to_string();
    };
    let headline: Vec<String> = [
        "output_throughput",
        "completed",
        "failed",
        "median_ttft_ms",
        "median_tpot_ms",
    ]
    .iter()
    .filter_map(|k| record.get(*k).map(|v| format!("{k}={v}")))
    .collect();
    match headline.is_empty() {
        true => format!("record with {}", count(record.len(), "metric")),
        false => format!("record: {}", headline.join(" ")),
    }
}

/// ` (attempt 2)` after a point run again; nothing for a first attempt.
fn attempt_note(attempt: u32) -> String {
    match attempt {
        1 => String::new(),
        n => format!(" (attempt {n})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_host_says_how_long_and_why() {
        assert_eq!(
            queued_text("4242", "Priority", 133.6),
            "queued 2m13s (Priority), Slurm job 4242"
        );
        assert_eq!(queued_text("7", "None", 0.4), "queued 0s, Slurm job 7");
    }

    #[test]
    fn records_show_their_headline() {
        let line = r#"{"backend": "x", "output_throughput": 22.5, "completed": 3, "failed": 0}"#;
        assert_eq!(
            shorten_record(line),
            "record: output_throughput=22.5 completed=3 failed=0"
        );
        assert_eq!(shorten_record(r#"{"a": 1}"#), "record with 1 metric");
        assert_eq!(shorten_record(r#"{"a": 1, "b": 2}"#), "record with 2 metrics");
        assert_eq!(shorten_record("plain log"), "plain log");
    }
}
